"""Helpers for the tiered-storage system tests (system_tests/tiered/).

* `RemoteTier` - the remote tier as the test sees it, independent of the
  broker: `FsTier` lists and edits the filesystem RSM's directory,
  `S3Tier` the bucket through its own boto3 client straight to moto (the
  broker may sit behind a `FaultProxy`). Both answer "which objects exist
  for this topic" and can delete or corrupt one.
* `start_tiered` - a real tierd process with tiering on, short task
  intervals and fast-failing S3 retries, registered with conftest so its
  log is attached to a failing test.
* wire helpers on `RawClient` (kafka-python's protocol classes): produce
  one batch per request with kafka-python's own record builder, fetch with
  per-partition error codes, ListOffsets v9, and ``__remote_log_metadata``
  decoded into each segment's state history.
* admin helpers through confluent-kafka's AdminClient (librdkafka):
  IncrementalAlterConfigs, DeleteRecords, DeleteTopics; and a Prometheus scrape.

Concurrency: not thread-safe; one test thread drives each object.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.producer import ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from system_tests._proc import (
    RawClient,
    TierdProc,
    batch_offsets,
    fetch_request,
    list_offsets_request,
    produce_request,
    scrape,
    split_batches,
    start_tierd,
)
from system_tests.admin import create_topic
from system_tests.s3_fixtures import REGION, list_keys, list_uploads

# Kafka error codes the tests check by number (org.apache.kafka.common.protocol.Errors).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
KAFKA_STORAGE_ERROR = 56

# ListOffsets special timestamps (KIP-405: -4 earliest local from v8, -5 latest tiered from v9).
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
LIST_OFFSETS_VERSION = 9

# Fetch by topic name, the newest version kafka-python's helper builds (v12).
FETCH_VERSION = 12

# Broker settings every tiered test broker gets. The task interval and the
# retention check are short so tiering and local deletion happen within a
# second; the retry backoff is short and capped low so a broker recovers
# quickly once an injected fault is cleared; few metadata partitions keep
# startup quick (each is a local log).
METADATA_PARTITIONS = 5
TIERED_BROKER_OVERRIDES: Mapping[str, str] = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "remote.log.manager.task.retry.backoff.ms": "100",
    "remote.log.manager.task.retry.backoff.max.ms": "1000",
    "rlmm.config.remote.log.metadata.topic.num.partitions": str(METADATA_PARTITIONS),
}

# S3 RSM settings for tests: two attempts and short timeouts, so an injected
# fault fails a copy or read within about a second instead of botocore's
# default backoff of up to ~15 s.
S3_TEST_SETTINGS: Mapping[str, str] = {
    "rsm.config.retry.max.attempts": "2",
    "rsm.config.connect.timeout.ms": "1000",
    "rsm.config.read.timeout.ms": "3000",
}

# Topic configs for "one batch per segment": any batch is larger than 14
# bytes (the minimum segment.bytes), so every append rolls a new segment.
ONE_BATCH_PER_SEGMENT = "14"

# How long tiering, local deletion and remote deletion may take. With a
# 200 ms task interval it is usually under 2 s; the bound is for a loaded
# 2-core machine.
TIER_TIMEOUT_S = 30.0


# ---------------------------------------------------------------------------
# The remote tier, seen from outside the broker.

# Kafka's Uuid.toString: 22 characters of base64url (which may hold '-').
TOPIC_ID_CHARS = 22

class RemoteTier:
    """Objects of one broker's remote tier. Names are relative to the tier root."""

    kind: str

    def broker_overrides(self) -> dict[str, str]:
        """Broker settings selecting this tier."""
        raise NotImplementedError

    def objects(self, topic: str | None = None) -> list[str]:
        """Every object name (of `topic`'s partitions only, if given), sorted."""
        raise NotImplementedError

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def write(self, name: str, data: bytes) -> None:
        """Replace the object `name` with `data`."""
        raise NotImplementedError

    def delete(self, name: str) -> None:
        raise NotImplementedError

    def log_objects(self, topic: str, partition: int | None = None) -> list[str]:
        """The `.log` objects of `topic` (one per tiered segment)."""
        return [n for n in self.objects(topic)
                if n.endswith(".log") and (partition is None or self.partition_of(n) == partition)]

    def partition_of(self, name: str) -> int:
        raise NotImplementedError

    @staticmethod
    def start_offset_of(name: str) -> int:
        """The segment's start offset: the 20-digit number the object name starts with."""
        return int(name.rsplit("/", 1)[-1].split("-", 1)[0])

    def open_uploads(self, topic: str) -> list[str]:
        """Multipart uploads still open for `topic` (S3 only; none elsewhere)."""
        return []


class FsTier(RemoteTier):
    """The filesystem RSM: ``<root>/<topic>-<partition>-<topicId>/<offset>-<uuid>.<suffix>``."""

    kind = "fs"

    def __init__(self, root: Path) -> None:
        self.root = root

    def broker_overrides(self) -> dict[str, str]:
        return {"rsm.config.dir": str(self.root)}

    def objects(self, topic: str | None = None) -> list[str]:
        if not self.root.exists():
            return []
        names = []
        # os.walk, not rglob: the broker removes a deleted topic's directories
        # while this lists them, and os.walk passes over one that went
        # (rglob raised FileNotFoundError for it).
        for directory, _dirs, files in os.walk(self.root):
            for name in files:
                rel = (Path(directory) / name).relative_to(self.root).as_posix()
                if topic is None or _is_fs_dir_of(rel.split("/", 1)[0], topic):
                    names.append(rel)
        return sorted(names)

    def topic_dirs(self, topic: str) -> list[Path]:
        """Partition directories of `topic` still present."""
        if not self.root.exists():
            return []
        return [p for p in self.root.iterdir() if p.is_dir() and _is_fs_dir_of(p.name, topic)]

    def partition_of(self, name: str) -> int:
        # <topic>-<partition>-<topic id>
        return int(name.split("/", 1)[0][:-TOPIC_ID_CHARS - 1].rsplit("-", 1)[1])

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def write(self, name: str, data: bytes) -> None:
        (self.root / name).write_bytes(data)

    def delete(self, name: str) -> None:
        (self.root / name).unlink()


def _is_fs_dir_of(dirname: str, topic: str) -> bool:
    """Whether ``dirname`` is ``<topic>-<partition>-<topicId>``."""
    rest = dirname.removeprefix(f"{topic}-")
    return (rest != dirname and len(rest) > TOPIC_ID_CHARS + 1
            and rest[-TOPIC_ID_CHARS - 1] == "-" and rest[:-TOPIC_ID_CHARS - 1].isdigit())


class S3Tier(RemoteTier):
    """The S3 RSM: ``<prefix><topic>-<topicId>/<partition>/<offset>-<uuid>.<suffix>``.

    `endpoint_url` is what the broker talks to (moto, or a FaultProxy in
    front of it); the test's own `client` always goes straight to moto.
    """

    kind = "s3"

    def __init__(self, client: Any, bucket: str, endpoint_url: str,
                 prefix: str = "tiered/") -> None:
        self.client = client
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.prefix = prefix

    def broker_overrides(self) -> dict[str, str]:
        return {
            "remote.log.storage.manager.class.name": "s3",
            "rsm.config.bucket": self.bucket,
            "rsm.config.prefix": self.prefix,
            "rsm.config.region": REGION,
            "rsm.config.endpoint.url": self.endpoint_url,
            **S3_TEST_SETTINGS,
        }

    def objects(self, topic: str | None = None) -> list[str]:
        keys = list_keys(self.client, self.bucket, self.prefix)
        names = [k[len(self.prefix):] for k in keys]
        if topic is not None:
            names = [n for n in names if _is_s3_dir_of(n.split("/", 1)[0], topic)]
        return sorted(names)

    def partition_of(self, name: str) -> int:
        return int(name.split("/")[1])

    def read(self, name: str) -> bytes:
        return bytes(self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"]
                     .read())

    def write(self, name: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=data)

    def delete(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + name)

    def open_uploads(self, topic: str) -> list[str]:
        return [k for k in list_uploads(self.client, self.bucket, self.prefix)
                if _is_s3_dir_of(k[len(self.prefix):].split("/", 1)[0], topic)]


def _is_s3_dir_of(component: str, topic: str) -> bool:
    """Whether a key's first component is ``<topic>-<topicId>``."""
    rest = component.removeprefix(f"{topic}-")
    return rest != component and len(rest) == TOPIC_ID_CHARS


# ---------------------------------------------------------------------------
# The broker.


def start_tiered(request: pytest.FixtureRequest, workdir: Path, tier: RemoteTier,
                 overrides: Mapping[str, str] | None = None, name: str = "tierd-tiered"
                 ) -> TierdProc:
    """A running tierd with tiering on over `tier`, stopped when the test ends."""
    settings = {**TIERED_BROKER_OVERRIDES, **tier.broker_overrides(), **dict(overrides or {})}
    return start_tierd(request, workdir, settings, name=name)


def create_tiered_topic(broker: TierdProc, topic: str, partitions: int = 1,
                        **configs: str) -> None:
    """A topic with remote.storage.enable=true, one batch per segment and
    local.retention.bytes=1 unless `configs` (underscores for dots) say otherwise."""
    settings = {"remote.storage.enable": "true", "segment.bytes": ONE_BATCH_PER_SEGMENT,
                "local.retention.bytes": "1"}
    settings.update({k.replace("_", "."): v for k, v in configs.items()})
    create_topic(broker.bootstrap, topic, partitions, configs=settings)


def local_segment_bases(broker: TierdProc, topic: str, partition: int = 0) -> list[int]:
    """Base offsets of the .log files on the broker's local disk."""
    directory = broker.data_dir / f"{topic}-{partition}"
    return sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())


def metric(broker: TierdProc, name: str, **labels: str) -> float:
    """Sum of the samples of `name` with `labels`, from one scrape."""
    return scrape(broker.metrics_url).total(name, **labels)


# ---------------------------------------------------------------------------
# Wire helpers.


def raw(broker: TierdProc, timeout_s: float = 30.0) -> RawClient:
    return RawClient(broker.host, broker.port, timeout_s)


@dataclass(frozen=True)
class Rec:
    """One record to produce (or as read back)."""

    key: bytes | None
    value: bytes | None
    timestamp: int


def build_batch(records: Sequence[Rec]) -> bytes:
    """A v2 batch built with kafka-python's record builder (not tierd's codec)."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 24)
    for rec in records:
        assert builder.append(timestamp=rec.timestamp, key=rec.key, value=rec.value,
                              headers=[]) is not None
    builder.close()
    return bytes(builder.buffer())


def produce_batch(client: RawClient, topic: str, partition: int, records: Sequence[Rec],
                  acks: int = -1) -> int:
    """Produce one batch; returns its base offset."""
    resp = client.request(produce_request(topic, partition, build_batch(records), acks), 9,
                          ProduceResponse)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == NONE, part
    return int(part.base_offset)


def produce_batches(client: RawClient, topic: str, partition: int,
                    batches: Iterable[Sequence[Rec]]) -> list[int]:
    """Produce each batch in its own request (so, its own segment); base offsets."""
    return [produce_batch(client, topic, partition, b) for b in batches]


def numbered_batches(count: int, per_batch: int = 1, *, first_ts: int | None = None,
                     ts_step: int = 1, tag: str = "v", size: int = 100) -> list[list[Rec]]:
    """`count` batches of `per_batch` records with unique values and rising timestamps."""
    start = int(time.time() * 1000) if first_ts is None else first_ts
    out = []
    for b in range(count):
        out.append([Rec(f"k{b}-{i}".encode(), f"{tag}-{b}-{i}-".encode().ljust(size, b"x"),
                        start + (b * per_batch + i) * ts_step)
                    for i in range(per_batch)])
    return out


@dataclass
class FetchedPartition:
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes

    @property
    def batches(self) -> list[bytes]:
        return split_batches(self.records)


def fetch(client: RawClient, wanted: Mapping[tuple[str, int], int], *, max_wait_ms: int = 0,
          partition_max_bytes: int = 1 << 20, max_bytes: int = 64 << 20
          ) -> dict[tuple[str, int], FetchedPartition]:
    """One FetchRequest v12 (by name); every partition's answer."""
    req = fetch_request(wanted, FETCH_VERSION, max_bytes=max_bytes, max_wait_ms=max_wait_ms)
    for t in req.topics:
        for p in t.partitions:
            p.partition_max_bytes = partition_max_bytes
    resp = client.request(req, FETCH_VERSION, FetchResponse)
    assert resp.error_code == NONE, resp
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            out[(t.topic, p.partition_index)] = FetchedPartition(
                p.error_code, p.high_watermark, p.log_start_offset, bytes(p.records or b""))
    return out


def fetch_until_answer(client: RawClient, topic: str, partition: int, offset: int,
                       timeout_s: float = TIER_TIMEOUT_S) -> FetchedPartition:
    """Fetch `offset` until the answer is data or an error (a remote read that
    missed remote.fetch.max.wait.ms answers empty with no error; the retry joins it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = fetch(client, {(topic, partition): offset}, max_wait_ms=100)[(topic, partition)]
        if got.error_code != NONE or got.records or offset >= got.high_watermark:
            return got
        assert time.monotonic() < deadline, f"{topic}-{partition}@{offset}: no answer"


def decode_records(batch: bytes) -> list[tuple[int, Rec]]:
    """(offset, record) of each record in a v2 batch, decoded by kafka-python
    after checking the batch's CRC-32C."""
    from kafka.record.default_records import DefaultRecordBatch

    decoded = DefaultRecordBatch(batch)
    assert decoded.validate_crc(), f"batch at offset {decoded.base_offset} fails its CRC"
    out = []
    for r in decoded:
        out.append((r.offset, Rec(r.key, r.value, r.timestamp)))
    return out


def read_all(client: RawClient, topic: str, partition: int = 0, start: int = 0,
             timeout_s: float = TIER_TIMEOUT_S) -> list[tuple[int, Rec]]:
    """Every record from `start` to the high watermark with raw fetches, each
    batch checked to start where the previous ended.

    Raises:
        AssertionError: a fetch error, a gap or overlap, or no progress in time.
    """
    out: list[tuple[int, Rec]] = []
    offset = start
    deadline = time.monotonic() + timeout_s
    while True:
        got = fetch_until_answer(client, topic, partition, offset,
                                 max(deadline - time.monotonic(), 0.1))
        assert got.error_code == NONE, f"{topic}-{partition}@{offset}: error {got.error_code}"
        batches = got.batches
        if not batches:
            assert offset == got.high_watermark, (offset, got.high_watermark)
            return out
        for b in batches:
            base, last = batch_offsets(b)
            if last < offset:
                continue
            assert base <= offset, f"{topic}-{partition}: batch at {base}, expected {offset}"
            out.extend((o, r) for o, r in decode_records(b) if o >= offset)
            offset = last + 1


def list_offsets(client: RawClient, topic: str, queries: Mapping[int, int],
                 version: int = LIST_OFFSETS_VERSION) -> dict[int, tuple[int, int, int]]:
    """{partition: (error, offset, timestamp)} for {partition: timestamp}."""
    resp = client.request(list_offsets_request(topic, queries, version), version,
                          ListOffsetsResponse)
    return {p.partition_index: (p.error_code, p.offset, p.timestamp)
            for p in resp.topics[0].partitions}


def offset_for(client: RawClient, topic: str, timestamp: int, partition: int = 0) -> int:
    """The offset ListOffsets answers for one partition; fails on an error code."""
    error, offset, _ = list_offsets(client, topic, {partition: timestamp})[partition]
    assert error == NONE, f"ListOffsets {timestamp} on {topic}-{partition}: error {error}"
    return offset


# ---------------------------------------------------------------------------
# The remote log metadata topic, read over the wire.

METADATA_TOPIC = "__remote_log_metadata"

# RemoteLogSegmentState and RemotePartitionDeleteState ids (KIP-405).
COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED = 0, 1
DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED = 2, 3
DELETE_PARTITION_MARKED, DELETE_PARTITION_STARTED, DELETE_PARTITION_FINISHED = 0, 1, 2


@dataclass
class SegmentHistory:
    """One remote segment (one copy attempt) as the metadata topic tells it."""

    start_offset: int
    end_offset: int
    states: list[int]


@dataclass
class MetadataLog:
    """Every event about one topic in ``__remote_log_metadata``."""

    segments: dict[Any, SegmentHistory]  # segment uuid -> history, in record order
    partition_deletes: list[tuple[int, int]]  # (partition, state)

    def finished(self) -> list[SegmentHistory]:
        """Segments whose copy finished (whatever happened to them later)."""
        return [s for s in self.segments.values() if COPY_SEGMENT_FINISHED in s.states]

    def live(self) -> list[SegmentHistory]:
        """Segments whose copy finished and that are not being deleted."""
        return [s for s in self.segments.values() if s.states[-1] == COPY_SEGMENT_FINISHED]


def read_metadata(client: RawClient, topic: str,
                  partitions: int = METADATA_PARTITIONS) -> MetadataLog:
    """Decode ``__remote_log_metadata`` (all `partitions` of it) for `topic`'s events.

    The records are decoded with protocol/rlmm_records.py, the pure KIP-405
    schema module (the wire bytes come from the live broker).
    """
    from protocol.rlmm_records import ApiKey, decode_record

    log = MetadataLog({}, [])
    for partition in range(partitions):
        start = offset_for(client, METADATA_TOPIC, EARLIEST, partition)  # compacted below
        for _, rec in read_all(client, METADATA_TOPIC, partition, start=start):
            assert rec.value is not None
            record = decode_record(rec.value)
            m = record.message
            if record.api_key == ApiKey.REMOTE_LOG_SEGMENT_METADATA:
                seg = m.remote_log_segment_id
                if seg.topic_id_partition.name == topic:
                    log.segments[seg.id] = SegmentHistory(
                        m.start_offset, m.end_offset, [m.remote_log_segment_state])
            elif record.api_key == ApiKey.REMOTE_LOG_SEGMENT_METADATA_UPDATE:
                seg = m.remote_log_segment_id
                if seg.topic_id_partition.name == topic:
                    log.segments[seg.id].states.append(m.remote_log_segment_state)
            elif record.api_key == ApiKey.REMOTE_PARTITION_DELETE_METADATA:
                if m.topic_id_partition.name == topic:
                    log.partition_deletes.append((m.topic_id_partition.partition,
                                                  m.remote_partition_delete_state))
    return log


# ---------------------------------------------------------------------------
# Admin (librdkafka).

ADMIN_TIMEOUT_S = 30.0


def _admin(broker: TierdProc) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def alter_topic(broker: TierdProc, topic: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET of `configs` (underscores for dots)."""
    entries = [ConfigEntry(k.replace("_", "."), v,
                           incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin = _admin(broker)  # must outlive the futures
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=ADMIN_TIMEOUT_S)


def delete_records(broker: TierdProc, topic: str, partition: int, before: int) -> int:
    """DeleteRecords up to `before`; returns the new low watermark."""
    admin = _admin(broker)  # must outlive the futures
    futures = admin.delete_records([CkTopicPartition(topic, partition, before)],
                                   request_timeout=ADMIN_TIMEOUT_S)
    [result] = futures.values()
    return int(result.result(timeout=ADMIN_TIMEOUT_S).low_watermark)


def delete_topic(broker: TierdProc, topic: str) -> None:
    admin = _admin(broker)  # must outlive the futures
    futures = admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)
    futures[topic].result(timeout=ADMIN_TIMEOUT_S)


# ---------------------------------------------------------------------------
# Waiting for tiering.


def eventually(predicate: Callable[[], Any], describe: Callable[[], str],
               timeout_s: float = TIER_TIMEOUT_S, interval_s: float = 0.1) -> Any:
    """Poll `predicate` until truthy and return its value; on timeout fail with
    `describe()` (called then, so it shows the final state)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s: {describe()}")
        time.sleep(interval_s)


def wait_tiered(broker: TierdProc, tier: RemoteTier, topic: str, segments: int,
                partition: int = 0, timeout_s: float = TIER_TIMEOUT_S) -> list[str]:
    """Wait until `segments` segments of the partition are remote and only the
    active one is local; returns the remote .log objects."""
    eventually(lambda: len(tier.log_objects(topic, partition)) >= segments
               and len(local_segment_bases(broker, topic, partition)) == 1,
               lambda: f"want {segments} segments of {topic}-{partition} remote and 1 local; "
                       f"remote: {tier.log_objects(topic, partition)}, "
                       f"local: {local_segment_bases(broker, topic, partition)}",
               timeout_s)
    return tier.log_objects(topic, partition)


def make_tier(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteTier:
    """The ``tier`` fixtures' body: ``request.param`` "fs" is a directory under
    ``tmp_path``, "s3" a fresh bucket on the session's moto server (real HTTP;
    the moto fixtures of ``system_tests.s3_fixtures`` must be in scope)."""
    if request.param == "fs":
        return FsTier(tmp_path / "remote")
    moto = request.getfixturevalue("moto_server")
    request.getfixturevalue("aws_test_env")
    return S3Tier(moto.client(), request.getfixturevalue("s3_bucket"), moto.endpoint_url)


def store_args(tier: RemoteTier) -> list[str]:
    """``tierd admin`` options naming the broker's remote store (``--override k=v``)."""
    return [arg for k, v in tier.broker_overrides().items() for arg in ("--override", f"{k}={v}")]


# What a broker keeps of the remote log metadata (storage/remote/rlmm_snapshot.py).
_METADATA_DIRS = "__remote_log_metadata-*"
_RLMM_FILES = ("_rlmm_committed_offsets", "remote-log-metadata-snapshots")


def lose_remote_metadata(data_dir: Path) -> None:
    """Delete every trace of ``__remote_log_metadata`` from a stopped broker's log dir."""
    dirs = list(data_dir.glob(_METADATA_DIRS))
    assert dirs, sorted(p.name for p in data_dir.iterdir())
    for path in dirs:
        shutil.rmtree(path)
    for name in _RLMM_FILES:
        path = data_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
