"""A small cold-read bench of the object-store RSMs against their local stand-ins:
S3 on moto, GCS on gcp-storage-emulator, Azure Blob on Azurite.

Per store and round: a fresh store process on loopback, a tierd with tiering
on over it, a topic of 1 KiB values in 1 MiB segments with
local.retention.bytes=1, filled with ``--mib`` MiB (acks=all); once every
closed segment is remote and gone from local disk, a consumer (librdkafka,
assign()-only) reads the topic from offset 0 to its end and the MB/s of that
read is reported, the median of the rounds per store.

These are emulator figures: each store is a single local process on the same
two cores as the broker and the consumer, with no network latency, so they
compare the RSMs' client paths under the same conditions, not the services.

    python -m bench.store_cold_read [--mib 32] [--rounds 3] [--stores s3,gcs,azure]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from system_tests._proc import TierdProc
from system_tests.admin import create_topic
from system_tests.cloud_tiers import AzureTier, GcsTier
from system_tests.emulators import AzuriteBlob, GcsEmulator
from system_tests.s3_fixtures import TEST_AWS_ENV, MotoServer
from system_tests.tiered_helpers import TIERED_BROKER_OVERRIDES, S3Tier, local_segment_bases

VALUE = 1024
SEGMENT_BYTES = 1024 * 1024
# Tiering of the last segments and reading everything back on a loaded machine.
TIER_TIMEOUT_S = 300.0
READ_TIMEOUT_S = 300.0


@contextmanager
def store(kind: str, workdir: Path) -> Iterator[dict[str, str]]:
    """Broker settings of a fresh ``kind`` store, running until the block ends."""
    if kind == "s3":
        moto = MotoServer(workdir / "moto.log")
        moto.start()
        try:
            yield S3Tier(moto.client(), moto.create_bucket(), moto.endpoint_url).broker_overrides()
        finally:
            moto.stop()
        return
    emulator: GcsEmulator | AzuriteBlob = (GcsEmulator(workdir / "gcs") if kind == "gcs"
                                           else AzuriteBlob(workdir / "azurite"))
    emulator.start()
    try:
        if isinstance(emulator, GcsEmulator):
            yield GcsTier(emulator, emulator.create_bucket()).broker_overrides()
        else:
            yield AzureTier(emulator, emulator.create_container()).broker_overrides()
    finally:
        emulator.stop()


def one_round(kind: str, mib: int) -> float:
    """Cold read MB/s of one fresh store, broker and topic."""
    with tempfile.TemporaryDirectory(prefix=f"bench-cold-{kind}-") as tmp:
        workdir = Path(tmp)
        with store(kind, workdir) as settings:
            broker = TierdProc(workdir / "broker", {**TIERED_BROKER_OVERRIDES, **settings},
                               name=f"tierd-{kind}")
            broker.start()
            try:
                return _fill_and_read(broker, mib)
            finally:
                broker.close()


def _fill_and_read(broker: TierdProc, mib: int) -> float:
    topic = f"cold-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1, configs={
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": "1"})
    count = mib * 1024 * 1024 // VALUE
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "linger.ms": 5})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=i.to_bytes(8, "big").ljust(VALUE, b"v"),
                                 partition=0)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    deadline = time.monotonic() + TIER_TIMEOUT_S
    while len(local_segment_bases(broker, topic)) != 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} not tiered: {local_segment_bases(broker, topic)}")
        time.sleep(0.2)

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "fetch.max.bytes": 50 * 1024 * 1024})
    consumer.assign([CkTopicPartition(topic, 0, 0)])
    read, seen = 0, 0
    started = time.monotonic()
    try:
        while seen < count:
            if time.monotonic() - started > READ_TIMEOUT_S:
                raise TimeoutError(f"read {seen} of {count} records")
            for msg in consumer.consume(1000, 1.0):
                assert msg.error() is None, msg.error()
                assert int.from_bytes(msg.value()[:8], "big") == msg.offset() == seen
                read += len(msg.value())
                seen += 1
        took = time.monotonic() - started
    finally:
        consumer.close()
    return read / took / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=32, help="data per round (default 32 MiB)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per store (default 3)")
    parser.add_argument("--stores", default="s3,gcs,azure", help="comma-separated")
    args = parser.parse_args()
    os.environ.update(TEST_AWS_ENV)  # moto's fake credentials for the S3 broker
    for kind in args.stores.split(","):
        rates = [one_round(kind, args.mib) for _ in range(args.rounds)]
        print(f"{kind:6} cold read MB/s: median {statistics.median(rates):7.1f}  "
              f"rounds {', '.join(f'{r:.1f}' for r in rates)}  ({args.mib} MiB, emulator figure)",
              flush=True)


if __name__ == "__main__":
    main()
