"""The PySpark pipeline (deploy/spark/) end to end against a tiered tierd.

Real parts only: pyspark in local[2] with Spark's own Kafka connector, a
tierd process with tiering on over a directory, topics with one batch per
segment so all but each partition's last batch are read from the remote tier.
Every job's output is compared with aggregates computed in Python from what
the test produced.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from deploy.spark import backfill, streaming
from deploy.spark.common import totals as fold
from deploy.spark.session import default_jars
from system_tests._proc import TierdProc
from system_tests.admin import create_topic
from system_tests.harness import REPO_ROOT
from system_tests.s3_fixtures import (  # noqa: F401 - fixtures used by name
    MotoServer,
    aws_test_env,
    moto_server,
    s3_bucket,
)
from system_tests.spark.helpers import (
    Aggregates,
    Event,
    chunks,
    consume_values,
    expected_aggregates,
    local_session,
    make_events,
    read_aggregates,
)
from system_tests.tiered_helpers import (
    EARLIEST_LOCAL,
    FsTier,
    Rec,
    RemoteTier,
    S3Tier,
    create_tiered_topic,
    eventually,
    offset_for,
    produce_batch,
    raw,
    start_tiered,
    wait_tiered,
)

PARTITIONS = 3
PER_BATCH = 25
BATCHES = 8  # per partition: 7 tiered segments and the active one
# Values the jobs must skip: not JSON, a field missing, a wrong type.
MALFORMED = (b"not json", b'{"key": "alpha", "ts": 1743292800000}',
             b'{"key": "beta", "ts": "yesterday", "amount": 1.00}')
# The events are stamped in 2025: without this, time retention would expire them.
KEEP_FOREVER = {"retention_ms": "-1"}
# A spark-submit of one small job (JVM start included) on a loaded 2-core machine.
SUBMIT_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = local_session("tierd-pipeline-tests")
    # foreachBatch calls back into this process through py4j's callback server,
    # whose accept loop uses select(): with its socket at fd >= 1024 the loop
    # dies and every streaming query hangs. Start it now and fail clearly.
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = session.sparkContext._gateway
    ensure_callback_server_started(gateway)
    fd = gateway._callback_server.server_socket.fileno()
    assert fd < 1024, f"py4j callback server socket is fd {fd}: too many open files here"
    yield session
    session.stop()


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> FsTier:
    return FsTier(tmp_path_factory.mktemp("remote"))


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           tier: FsTier) -> TierdProc:
    return start_tiered(request, tmp_path_factory.mktemp("broker"), tier)


def produce_events(broker: TierdProc, topic: str, events: Sequence[Event],
                   partitions: int = PARTITIONS) -> dict[int, int]:
    """Round-robin `events` over the partitions, PER_BATCH records per batch
    (so per segment); returns batches per partition."""
    per_partition = {p: list(events[p::partitions]) for p in range(partitions)}
    with raw(broker) as client:
        for p, mine in per_partition.items():
            for batch in chunks(mine, PER_BATCH):
                produce_batch(client, topic, p, [e.record() for e in batch])
    return {p: len(chunks(mine, PER_BATCH)) for p, mine in per_partition.items()}


def produce_tiered(broker: TierdProc, tier: RemoteTier, topic: str, events: Sequence[Event],
                   malformed: Sequence[bytes] = ()) -> None:
    """Produce `events` (and `malformed` values, in one batch on partition 0
    first) and wait until every partition's closed segments are remote and
    deleted locally."""
    if malformed:
        with raw(broker) as client:
            produce_batch(client, topic, 0, [Rec(b"bad", v, 0) for v in malformed])
    batches = produce_events(broker, topic, events)
    batches[0] += 1 if malformed else 0
    for p, n in batches.items():
        wait_tiered(broker, tier, topic, n - 1, partition=p)


def backfill_args(broker: TierdProc, topic: str, out: Path, *extra: str) -> list[str]:
    return ["--bootstrap", broker.bootstrap, "--topic", topic, "--out", str(out), *extra]


def check_backfill(spark: SparkSession, broker: TierdProc, tier: RemoteTier, topic: str,
                   out: Path, seed: int) -> None:
    """Produce a tiered topic (malformed values included), backfill it, compare."""
    events = make_events(PARTITIONS * BATCHES * PER_BATCH, seed=seed)
    create_tiered_topic(broker, topic, PARTITIONS, **KEEP_FOREVER)
    produce_tiered(broker, tier, topic, events, MALFORMED)
    with raw(broker) as client:  # most of every partition is only in the remote tier
        for p in range(PARTITIONS):
            assert offset_for(client, topic, EARLIEST_LOCAL, p) >= (BATCHES - 1) * PER_BATCH

    backfill.run(spark, backfill.parse_args(backfill_args(broker, topic, out)))

    got = read_aggregates(spark, out)
    assert got == expected_aggregates(events)
    assert sum(c for c, _ in got.values()) == len(events)


def test_backfill_reads_the_tiered_topic_exactly(spark: SparkSession, broker: TierdProc,
                                                  tier: FsTier, topic: str,
                                                  tmp_path: Path) -> None:
    check_backfill(spark, broker, tier, topic, tmp_path / "daily", seed=1)


def test_backfill_over_the_s3_store(spark: SparkSession, request: pytest.FixtureRequest,
                                    moto_server: MotoServer, s3_bucket: str,  # noqa: F811
                                    aws_test_env: dict[str, str],  # noqa: F811
                                    topic: str, tmp_path: Path) -> None:
    s3 = S3Tier(moto_server.client(), s3_bucket, moto_server.endpoint_url)
    s3_broker = start_tiered(request, tmp_path / "broker", s3)
    check_backfill(spark, s3_broker, s3, topic, tmp_path / "daily", seed=7)


def test_streaming_rerun_reads_only_new_records(spark: SparkSession, broker: TierdProc,
                                                tier: FsTier, topic: str,
                                                tmp_path: Path) -> None:
    first, second = make_events(PARTITIONS * 4 * PER_BATCH, seed=2), make_events(120, seed=3)
    create_tiered_topic(broker, topic, PARTITIONS, **KEEP_FOREVER)
    produce_tiered(broker, tier, topic, first)
    out, checkpoint = tmp_path / "incremental", tmp_path / "checkpoint"
    argv = ["--bootstrap", broker.bootstrap, "--topic", topic, "--out", str(out),
            "--checkpoint", str(checkpoint)]

    # First run: the backlog in batches of at most 100 records (so several
    # micro-batches, folded by `totals`).
    progress = streaming.run(spark, streaming.parse_args([*argv, "--max-offsets-per-trigger",
                                                          "100"]))
    assert sum(p["numInputRows"] for p in progress) == len(first)
    assert len(progress) >= len(first) // 100
    assert totals(spark, out) == expected_aggregates(first)
    first_batches = batch_ids(out)

    produce_events(broker, topic, second)
    progress = streaming.run(spark, streaming.parse_args(argv))
    assert sum(p["numInputRows"] for p in progress) == len(second)
    new_batches = batch_ids(out) - first_batches
    assert new_batches and min(new_batches) > max(first_batches)
    assert totals(spark, out, new_batches) == expected_aggregates(second)
    assert totals(spark, out) == expected_aggregates(first + second)

    # Nothing new: no batch, no output.
    assert streaming.run(spark, streaming.parse_args(argv)) == []
    assert batch_ids(out) == first_batches | new_batches


def batch_ids(out: Path) -> set[int]:
    return {int(d.name.removeprefix("batch_id=")) for d in out.glob("batch_id=*")}


def totals(spark: SparkSession, out: Path, only: set[int] | None = None) -> Aggregates:
    """The streaming output folded per key and day (of batches `only`, if given)."""
    df = spark.read.parquet(str(out))
    if only is not None:
        df = df.where(df.batch_id.isin(sorted(only)))
    return {(r.key, r.day): (r["count"], r["amount"]) for r in fold(df).collect()}


def test_read_committed_counts_only_committed_transactions(
        spark: SparkSession, broker: TierdProc, topic: str, tmp_path: Path) -> None:
    partitions, txns = 2, 6
    create_tiered_topic(broker, topic, partitions, **KEEP_FOREVER)
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": f"tx-{topic}", "linger.ms": 0})
    producer.init_transactions(30)
    events = make_events(txns * partitions * 10, seed=4)
    committed: list[Event] = []
    for t, txn in enumerate(chunks(events, partitions * 10)):
        producer.begin_transaction()
        for i, e in enumerate(txn):
            producer.produce(topic, e.value(), e.key.encode(), partition=i % partitions,
                             timestamp=e.ts)
            if i % 5 == 4:
                producer.flush(10)  # a few batches (segments) per transaction
        if t % 2 == 0:
            producer.commit_transaction(30)
            committed += txn
        else:
            producer.abort_transaction(30)
    # The last transaction aborted: end with a committed one so read_committed
    # has to read past the final abort marker to reach the log end.
    producer.begin_transaction()
    tail = make_events(4, seed=5)
    for i, e in enumerate(tail):
        producer.produce(topic, e.value(), e.key.encode(), partition=i % partitions,
                         timestamp=e.ts)
    producer.commit_transaction(30)
    committed += tail
    with raw(broker) as client:  # the aborted transactions are remote only
        eventually(lambda: all(offset_for(client, topic, EARLIEST_LOCAL, p) > 40
                               for p in range(partitions)),
                   lambda: "local start offsets " + str(
                       [offset_for(client, topic, EARLIEST_LOCAL, p) for p in range(partitions)]))

    for isolation, expected in (("read_committed", committed),
                                ("read_uncommitted", events + tail)):
        out = tmp_path / isolation
        backfill.run(spark, backfill.parse_args(
            backfill_args(broker, topic, out, "--isolation-level", isolation)))
        assert read_aggregates(spark, out) == expected_aggregates(expected), isolation


def test_writeback_with_spark_submit(spark: SparkSession, broker: TierdProc, tier: FsTier,
                                     topic: str, tmp_path: Path) -> None:
    events = make_events(PARTITIONS * 3 * PER_BATCH, seed=6)
    create_tiered_topic(broker, topic, PARTITIONS, **KEEP_FOREVER)
    produce_tiered(broker, tier, topic, events)
    daily = tmp_path / "daily"
    backfill.run(spark, backfill.parse_args(backfill_args(broker, topic, daily)))
    output_topic = f"{topic}-daily"
    create_topic(broker.bootstrap, output_topic, 2)

    # The job as users run it: its own driver JVM through spark-submit.
    # spark-submit finds Spark with the `python3` on PATH: the tests' virtualenv
    # comes first, as in an activated one.
    venv_bin = Path(sys.executable).parent
    submit = venv_bin / "spark-submit"
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.log.level=WARN",
         "--jars", ",".join(default_jars()),
         str(REPO_ROOT / "deploy" / "spark" / "writeback.py"),
         "--bootstrap", broker.bootstrap, "--input", str(daily), "--topic", output_topic],
        capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S, cwd=tmp_path, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]

    expected = expected_aggregates(events)
    values = consume_values(broker.bootstrap, output_topic, 2, len(expected))
    assert published(values) == expected


def published(values: Sequence[bytes]) -> Aggregates:
    """The writeback topic's JSON values as {(key, day): (count, amount)};
    fails on a (key, day) published twice."""
    out: Aggregates = {}
    for v in values:
        record = json.loads(v, parse_float=Decimal)
        key = (record["key"], date.fromisoformat(record["day"]))
        assert key not in out, f"published twice: {key}"
        out[key] = (record["count"], Decimal(record["amount"]))
    return out
