"""What the Spark pipeline tests share: a local SparkSession with the connector
jars, generated JSON events with known keys, days and amounts, the aggregates
computed independently in Python, and the job's Parquet read back.

The expected aggregates never go through Spark: `expected_aggregates` works
on the events the test produced, `read_aggregates` on what the job wrote.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

from confluent_kafka import Consumer, Message, TopicPartition
from pyspark.sql import SparkSession

from deploy.spark.session import build_session
from system_tests.tiered_helpers import Rec

# Two cores on the test machines: two Spark task slots. The UI is off (no port
# to bind), shuffles are tiny.
MASTER = "local[2]"
TEST_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
             "spark.driver.memory": "1g"}

KEYS = ("alpha", "beta", "gamma", "delta", "eps")
# Three UTC days; events land anywhere in them, the first and last
# millisecond of each day included (day bucketing is by UTC).
FIRST_DAY_MS = int(datetime(2025, 3, 30, tzinfo=UTC).timestamp() * 1000)
DAYS = 3
MS_PER_DAY = 86_400_000

Aggregates = dict[tuple[str, date], tuple[int, Decimal]]


def local_session(app_name: str) -> SparkSession:
    return build_session(app_name, master=MASTER, conf=TEST_CONF)


@dataclass(frozen=True)
class Event:
    key: str
    ts: int
    amount: Decimal

    def value(self) -> bytes:
        return json.dumps({"key": self.key, "ts": self.ts, "amount": "AMOUNT"}).replace(
            '"AMOUNT"', str(self.amount)).encode()

    def record(self) -> Rec:
        return Rec(self.key.encode(), self.value(), self.ts)

    @property
    def day(self) -> date:
        return datetime.fromtimestamp(self.ts / 1000, UTC).date()


def make_events(count: int, seed: int) -> list[Event]:
    """`count` events with random keys, UTC days and amounts (two decimals,
    some negative); every tenth sits on a day boundary."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        day_start = FIRST_DAY_MS + rng.randrange(DAYS) * MS_PER_DAY
        if i % 10 == 0:
            ts = day_start + (MS_PER_DAY - 1 if i % 20 else 0)
        else:
            ts = day_start + rng.randrange(MS_PER_DAY)
        amount = Decimal(rng.randrange(-5_000, 100_000)) / 100
        out.append(Event(rng.choice(KEYS), ts, amount))
    return out


def chunks(items: Sequence[Event], size: int) -> list[list[Event]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def expected_aggregates(events: Iterable[Event]) -> Aggregates:
    count: dict[tuple[str, date], int] = defaultdict(int)
    total: dict[tuple[str, date], Decimal] = defaultdict(Decimal)
    for e in events:
        count[(e.key, e.day)] += 1
        total[(e.key, e.day)] += e.amount
    return {k: (count[k], total[k]) for k in count}


def read_aggregates(spark: SparkSession, path: Path | str) -> Aggregates:
    """The job's Parquet as {(key, day): (count, amount)}; fails on a duplicate
    (key, day) row."""
    out: Aggregates = {}
    for row in spark.read.parquet(str(path)).collect():
        assert (row.key, row.day) not in out, f"duplicate row for {(row.key, row.day)}"
        out[(row.key, row.day)] = (row["count"], row["amount"])
    return out


def _values(messages: list[Message]) -> list[bytes]:
    out = []
    for msg in messages:
        assert msg.error() is None, msg.error()
        value = msg.value()
        assert isinstance(value, bytes), value
        out.append(value)
    return out


def consume_values(bootstrap: str, topic: str, partitions: int, expected: int,
                   timeout_s: float = 60.0) -> list[bytes]:
    """Every value of `topic` from offset 0, until `expected` arrived (and a
    short quiet period after, so extra records are seen too)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            got += _values(consumer.consume(500, 0.5))
        got += _values(consumer.consume(500, 1.0))
    finally:
        consumer.close()
    return got
