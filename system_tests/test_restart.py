"""A restarted broker keeps every acknowledged record and carries on at the next offset.

Covers the harness's stop (SIGTERM), kill (SIGKILL) and restart on the same
data directory. A SIGKILLed process loses nothing the kernel already holds,
so an acks=all record must survive both kinds of stop. (Tansu runs with
in-memory storage and is expected to fail these.)
"""

from __future__ import annotations

import pytest

from system_tests.admin import create_topic
from system_tests.clients import DRIVERS
from system_tests.conftest import BrokerFactory
from system_tests.messages import make_messages, verify_consumed

# The messages carry fixed timestamps of 2024 (system_tests/messages.py): without
# this, time retention (7 days) may delete them between produce and consume
# whenever the broker's retention check runs mid-test.
KEEP_OLD_RECORDS = {"retention.ms": "-1"}

PARTITIONS = 2
COUNT = 120


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_restart_keeps_acked_records(broker_factory: BrokerFactory, topic: str, hard: bool) -> None:
    broker = broker_factory()
    driver = DRIVERS["confluent"]
    create_topic(broker.bootstrap, topic, PARTITIONS, configs=KEEP_OLD_RECORDS)
    first = make_messages(COUNT, PARTITIONS, driver.profile)
    first_deliveries = driver.produce(broker.bootstrap, topic, first, compression="zstd")

    if hard:
        broker.kill()
        assert broker.returncode() == -9
    else:
        assert broker.stop() == 0, "SIGTERM should be a clean shutdown"
    broker.start()

    starts = {p: 0 for p in range(PARTITIONS)}
    verify_consumed(first, first_deliveries, driver.consume(broker.bootstrap, topic, starts))

    second = make_messages(COUNT // 2, PARTITIONS, driver.profile)
    second_deliveries = driver.produce(broker.bootstrap, topic, second, compression="lz4")
    ends = {p: 1 + max(d.offset or 0 for d in first_deliveries if d.partition == p) for p in starts}
    for partition, end in ends.items():
        offsets = [d.offset for d in second_deliveries if d.partition == partition]
        assert offsets == list(range(end, end + len(offsets))), (
            f"partition {partition}: after restart, offsets should continue from {end}"
        )
    records = driver.consume(broker.bootstrap, topic, starts)
    verify_consumed([*first, *second], [*first_deliveries, *second_deliveries], records, starts)
