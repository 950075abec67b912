"""One consumer-group member in its own process, for system_tests/test_groups.py.

Usage::

    python -m system_tests.group_member CLIENT BOOTSTRAP TOPIC GROUP NAME

CLIENT is kafka-python, confluent-kafka or aiokafka. The member subscribes to
TOPIC in GROUP with the round-robin assignor (the one protocol all three
libraries share), polls, and commits synchronously after every poll that
returned records. CLIENT confluent-kafka-848 is a librdkafka member of the
KIP-848 protocol (group.protocol=consumer; the broker assigns, and the
rebalance callbacks report partitions added and removed, not full sets).
It prints one JSON object per line on stdout:

* ``{"ev": "assigned", "t": ..., "partitions": [...]}`` - full assignment
  (eager protocol), from the library's rebalance callback;
* ``{"ev": "revoked", "t": ..., "partitions": [...]}``;
* ``{"ev": "batch", "t": ..., "records": [[partition, offset], ...], "ok": bool}``
  - records handed to the application, and whether the commit after them
  succeeded.

SIGTERM makes it leave the group cleanly (close the consumer) and exit 0.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from typing import Any

# Short timeouts so a killed member is noticed within seconds (6 s is the
# broker's group.min.session.timeout.ms); the poll interval bounds the
# rebalance timeout, so a stuck member cannot hold a rebalance for 5 minutes.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000
MAX_POLL_INTERVAL_MS = 10000
POLL_TIMEOUT_MS = 200

_stopping = False


def emit(ev: str, **fields: Any) -> None:
    print(json.dumps({"ev": ev, "t": time.time(), **fields}), flush=True)


def _on_sigterm(signum: int, frame: object) -> None:
    global _stopping
    _stopping = True


def run_kafka_python(bootstrap: str, topic: str, group: str, name: str) -> None:
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, client_id=name,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        partition_assignment_strategy=[RoundRobinPartitionAssignor])
    consumer.subscribe([topic], listener=Listener())
    while not _stopping:
        polled = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
        records = [[tp.partition, r.offset] for tp, rs in polled.items() for r in rs]
        if records:
            try:
                consumer.commit()
                ok = True
            except KafkaError:
                ok = False
            emit("batch", records=records, ok=ok)
    consumer.close()


def run_confluent(bootstrap: str, topic: str, group: str, name: str) -> None:
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
        "partition.assignment.strategy": "roundrobin",
    })
    consumer.subscribe(
        [topic],
        on_assign=lambda c, ps: emit("assigned", partitions=sorted(p.partition for p in ps)),
        on_revoke=lambda c, ps: emit("revoked", partitions=sorted(p.partition for p in ps)))
    while not _stopping:
        messages = consumer.consume(num_messages=500, timeout=POLL_TIMEOUT_MS / 1000)
        records = [[m.partition(), m.offset()] for m in messages if not m.error()]
        if records:
            try:
                consumer.commit(asynchronous=False)
                ok = True
            except KafkaException:
                ok = False
            emit("batch", records=records, ok=ok)
    consumer.close()


def run_confluent_848(bootstrap: str, topic: str, group: str, name: str) -> None:
    from confluent_kafka import Consumer, KafkaException

    # Session timeout, heartbeat interval and assignor are the broker's to set.
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
        "group.protocol": "consumer", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
    })
    # TOPIC starting with ^ is a regular expression (sent as SubscribedTopicRegex);
    # "topics" names each partition as topic:partition.
    def report(ev: str, parts: Any) -> None:
        emit(ev, partitions=sorted(p.partition for p in parts),
             topics=sorted(f"{p.topic}:{p.partition}" for p in parts))

    consumer.subscribe(
        [topic],
        on_assign=lambda c, ps: report("assigned", ps),
        on_revoke=lambda c, ps: report("revoked", ps),
        on_lost=lambda c, ps: report("lost", ps))
    while not _stopping:
        messages = consumer.consume(num_messages=500, timeout=POLL_TIMEOUT_MS / 1000)
        records = [[m.partition(), m.offset()] for m in messages if not m.error()]
        if records:
            try:
                consumer.commit(asynchronous=False)
                ok = True
            except KafkaException:
                ok = False
            emit("batch", records=records, ok=ok)
    consumer.close()


def run_aiokafka(bootstrap: str, topic: str, group: str, name: str) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=sorted(tp.partition for tp in assigned))

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=name,
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
            partition_assignment_strategy=(RoundRobinPartitionAssignor,))
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        try:
            while not _stopping:
                polled = await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS)
                records = [[tp.partition, r.offset] for tp, rs in polled.items() for r in rs]
                if records:
                    try:
                        await consumer.commit()
                        ok = True
                    except KafkaError:
                        ok = False
                    emit("batch", records=records, ok=ok)
        finally:
            await consumer.stop()

    asyncio.run(main())


RUNNERS = {"kafka-python": run_kafka_python, "confluent-kafka": run_confluent,
           "aiokafka": run_aiokafka, "confluent-kafka-848": run_confluent_848}


def main(argv: list[str]) -> int:
    client, bootstrap, topic, group, name = argv
    signal.signal(signal.SIGTERM, _on_sigterm)
    RUNNERS[client](bootstrap, topic, group, name)
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
