"""What the ``tierd admin`` commands on the remote tier share: the store
(built as the brokers build it), its listing, a progress display, and
``__remote_log_metadata`` read over the Kafka protocol and folded as the
brokers fold it.

Used by ``reconcile`` (compare the tier with its metadata) and
``rebuild-metadata`` (recreate lost metadata from the tier).
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from broker.admin.common import EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE, AdminError
from protocol.records import HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, parse_header
from storage.remote.api import ListableRemoteStorage, StoredObject
from storage.remote.metadata_cache import (
    RemoteLogMetadataCache,
    RemoteLogMetadataError,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage.remote.rlmm_api import (
    TOPIC_NAME,
    Restatement,
    metadata_partition,
    parse_restatement_key,
)
from storage.remote.rlmm_serde import MetadataRecordError, deserialize
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageError,
    TopicIdPartition,
)

# How long one poll of the metadata topic waits. Reading fails when no
# partition delivered anything for --timeout seconds while records remain.
POLL_TIMEOUT_MS = 500
# Bytes read from a .log at a time while walking its batch headers: many
# small batches per request; after a batch larger than this only the next
# header (HEADER_SIZE bytes) is read, so big batches are skipped, not read.
HEADER_WINDOW = 1 << 20
# The broker id of metadata the tool makes up (no broker produced the event).
NO_BROKER = -1


def add_store_options(parser: Any) -> None:
    """``--config``/``--override``: the brokers' settings, to build their storage manager."""
    parser.add_argument("--config", help="the brokers' server.properties")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config key, as for the broker (repeatable)")


def open_store(args: Any) -> Any:
    """The storage manager the brokers build from ``--config``/``--override``.

    Raises:
        AdminError(EXIT_USAGE): invalid settings, or a manager that cannot list.
    """
    from config import BrokerConfig, ConfigError
    from config.log_output import configure_logging
    from config.remote import RSM_PREFIX, plugin_configs
    from storage.remote.codec_storage import load_storage

    configure_logging("warning")  # stderr: stdout is for the report
    try:
        config = BrokerConfig.load(args.config, args.override)
        settings = plugin_configs(config.values, RSM_PREFIX)
        class_name = config["remote.log.storage.manager.class.name"]
        if class_name == "filesystem" and "dir" not in settings:
            # broker.tiering.build_tiering's default for the filesystem tier.
            settings["dir"] = config.log_dir.rstrip("/") + "-remote"
        rsm = load_storage(class_name, settings)
    except ConfigError as exc:
        raise AdminError(f"configuration error: {exc}", EXIT_USAGE) from None
    if not isinstance(rsm, ListableRemoteStorage):
        rsm.close()
        raise AdminError(f"remote storage manager {class_name} cannot list its objects",
                         EXIT_USAGE)
    return rsm


def list_store(rsm: Any, bar: Any) -> list[StoredObject]:
    """Every object of the tier, counted on ``bar``.

    Raises:
        AdminError(EXIT_UNREACHABLE): the store failed while listing.
    """
    task = bar.add_task("listing objects", total=None)
    objects = []
    try:
        for obj in rsm.list_objects():
            objects.append(obj)
            bar.advance(task)
    except RemoteStorageError as exc:
        raise AdminError(f"listing remote storage failed: {exc}", EXIT_UNREACHABLE) from None
    return objects


@contextmanager
def progress() -> Iterator[Any]:
    """A rich progress display on stderr, shown only when stderr is a terminal."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), console=Console(stderr=True), transient=True,
                  disable=not sys.stderr.isatty()) as bar:
        yield bar


# (topic id, partition, start offset, segment uuid): how objects and metadata meet.
SegmentKey = tuple[Any, int, int, Any]


def segment_key(md: RemoteLogSegmentMetadata) -> SegmentKey:
    """The key of a segment in the metadata."""
    tip = md.topic_id_partition
    return tip.topic_id, tip.partition, md.start_offset, md.remote_log_segment_id.id


def group_segments(objects: list[StoredObject]) -> dict[SegmentKey, dict[str, StoredObject]]:
    """Objects with segment names, by segment: key -> suffix -> object."""
    grouped: dict[SegmentKey, dict[str, StoredObject]] = defaultdict(dict)
    for obj in objects:
        if obj.name is None:
            continue
        tip = obj.name.segment_id.topic_id_partition
        key = (tip.topic_id, tip.partition, obj.name.start_offset, obj.name.segment_id.id)
        grouped[key][obj.name.suffix] = obj
    return grouped


# -- reading segments ------------------------------------------------------------


def provisional_metadata(segment_id: RemoteLogSegmentId, start: int, size: int) -> RemoteLogSegmentMetadata:
    """Metadata naming the segment: all a storage manager's fetch needs."""
    return RemoteLogSegmentMetadata(segment_id, start, start, -1, NO_BROKER,
                                    int(time.time() * 1000), {0: start}, size)


def scan_log(rsm: Any, md: RemoteLogSegmentMetadata) -> tuple[int, int, dict[int, int]]:
    """(end offset, max timestamp, epoch -> first offset from the batches) of a ``.log``.

    Raises:
        RemoteStorageError: the store failed.
        ValueError: the bytes are not a whole sequence of v2 batches starting
            at the segment's start offset.
    """
    size = md.segment_size_in_bytes
    pos, window_start, window = 0, 0, b""
    last_offset, max_ts = md.start_offset - 1, -1
    epochs: dict[int, int] = {}
    big = False
    while pos < size:
        if pos + HEADER_SIZE > window_start + len(window):
            if pos + HEADER_SIZE > size:
                raise ValueError(f"{size - pos} trailing bytes at position {pos}")
            want = HEADER_SIZE if big else HEADER_WINDOW
            window_start, window = pos, rsm.fetch_log_segment(md, pos, pos + want - 1)
        h = parse_header(window, pos - window_start)
        if (h.magic != MAGIC_V2 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD
                or pos + h.size > size or h.base_offset <= last_offset
                or (pos == 0 and h.base_offset != md.start_offset)):
            raise ValueError(f"no valid batch at position {pos}")
        last_offset = h.last_offset
        max_ts = max(max_ts, h.max_timestamp)
        epochs.setdefault(h.leader_epoch, h.base_offset)
        big = h.size > HEADER_WINDOW
        pos += h.size
    if last_offset < md.start_offset:
        raise ValueError("no batches")
    return last_offset, max_ts, epochs


# -- the metadata ---------------------------------------------------------------


@dataclass(slots=True)
class MetadataView:
    """``__remote_log_metadata`` folded as the brokers fold it.

    Attributes:
        caches: user partition -> its segments and deletion state.
        partitions: partitions of the metadata topic.
        records: records read; ``dropped`` of them refused as the brokers refuse them.
        begins: metadata partition -> the offset its reading began at (its log start).
        restating: metadata partition -> the restatement it began with (compacted).
        unproven: partitions read from above offset 0 that did not begin with a
            restatement of their whole state: records of them may be missing.
    """

    caches: dict[TopicIdPartition, RemoteLogMetadataCache]
    partitions: int
    records: int = 0
    dropped: int = 0
    begins: dict[int, int] = field(default_factory=dict)
    restating: dict[int, Restatement] = field(default_factory=dict)
    unproven: set[int] = field(default_factory=set)

    @property
    def complete(self) -> bool:
        """Every metadata partition was read from offset 0 or from a restatement
        of its whole state (``storage.remote.rlmm_compaction``)."""
        return not self.unproven

    def start(self, partitions: int, begins: dict[int, int]) -> None:
        self.partitions, self.begins = partitions, begins
        self.unproven = {p for p, offset in begins.items() if offset > 0}

    def fold(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply one record as the broker's metadata manager does (``rlmm_partition``):
        the restatement the partition begins with is folded, later ones (what the
        records before them already said) are skipped."""
        self.records += 1
        restatement = parse_restatement_key(key)
        if restatement is not None:
            if offset == restatement.first_offset == self.begins.get(partition):
                self.restating[partition] = restatement
                self.unproven.discard(partition)
            if self.restating.get(partition) != restatement:
                return
        try:
            event = deserialize(value or b"")
        except MetadataRecordError:
            self.dropped += 1
            return
        tip = event.topic_id_partition
        if metadata_partition(tip, self.partitions) != partition:
            self.dropped += 1
            return
        cache = self.caches.get(tip) or RemoteLogMetadataCache(tip)
        try:
            cache.apply(event)
        except (RemoteLogMetadataError, ValueError):
            self.dropped += 1
            return
        if (isinstance(event, RemotePartitionDeleteMetadata)
                and event.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED):
            self.caches.pop(tip, None)
        else:
            self.caches[tip] = cache

    def segments(self) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment not yet DELETE_SEGMENT_FINISHED."""
        for cache in self.caches.values():
            yield from cache.segments_in_event_order()


def read_metadata(args: Any, bar: Any) -> MetadataView:
    """Read every partition of the metadata topic up to its end offsets at the
    start, folded as the brokers fold it.

    Raises:
        AdminError: no broker reachable (EXIT_UNREACHABLE), no metadata topic,
            or a partition that stopped delivering (EXIT_FAILED).
    """
    view = MetadataView({}, 0)
    read_metadata_records(args, bar, view.start, lambda partition, record: view.fold(
        partition, record.offset, record.key, record.value))
    return view


def read_metadata_records(args: Any, bar: Any, start: Callable[[int, dict[int, int]], None],
                          sink: Callable[[int, Any], None],
                          only: Collection[int] | None = None) -> None:
    """Hand every record of the metadata topic's partitions (``only`` those, if
    given) up to their end offsets at the start to ``sink(partition, record)``
    (kafka-python ConsumerRecords, in offset order per partition); ``start``
    first learns the partition count and the offset each partition is read
    from (its log start).

    Raises:
        AdminError: as ``read_metadata``.
    """
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError, KafkaTimeoutError

    timeout_ms = int(args.timeout * 1000)
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=args.bootstrap_server.split(","), client_id="tierd-admin",
            group_id=None, enable_auto_commit=False, allow_auto_create_topics=False,
            request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms)
    except KafkaTimeoutError:
        raise AdminError(f"no broker reachable at {args.bootstrap_server}",
                         EXIT_UNREACHABLE) from None
    try:
        numbers = sorted(consumer.partitions_for_topic(TOPIC_NAME) or ())
        if not numbers:
            raise AdminError(f"the cluster has no {TOPIC_NAME} topic: tiering never ran, or "
                             "the topic is lost (see rebuild-metadata)")
        tps = [TopicPartition(TOPIC_NAME, p) for p in numbers
               if only is None or p in only]
        consumer.assign(tps)
        begin = consumer.beginning_offsets(tps, timeout_ms)
        end = consumer.end_offsets(tps, timeout_ms)
        start(len(numbers), {tp.partition: begin[tp] for tp in tps})
        for tp in tps:
            consumer.seek(tp, begin[tp])
        task = bar.add_task("reading metadata", total=sum(end[tp] - begin[tp] for tp in tps))
        _consume(consumer, {tp: end[tp] for tp in tps if end[tp] > begin[tp]}, sink,
                 lambda n: bar.advance(task, n), args.timeout)
    except KafkaError as exc:
        raise AdminError(f"reading {TOPIC_NAME} failed: {exc}", EXIT_FAILED) from None
    finally:
        consumer.close()


def _consume(consumer: Any, end: dict[Any, int], sink: Callable[[int, Any], None],
             advance: Any, stall_s: float) -> None:
    """Hand records to ``sink`` until every partition in ``end`` reached its end offset."""
    remaining = set(end)
    consumer.pause(*[tp for tp in consumer.assignment() if tp not in remaining])
    last_progress = time.monotonic()
    while remaining:
        batches = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
        for tp, records in batches.items():
            wanted = [r for r in records if r.offset < end[tp]]
            for record in wanted:
                sink(tp.partition, record)
            advance(len(wanted))
            if consumer.position(tp) >= end[tp]:
                remaining.discard(tp)
                consumer.pause(tp)
        if batches:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > stall_s:
            stuck = ", ".join(str(tp.partition) for tp in sorted(remaining))
            raise AdminError(f"{TOPIC_NAME} partitions {stuck} stopped delivering records "
                             "below their end offsets")
