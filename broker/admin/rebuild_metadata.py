"""``tierd admin rebuild-metadata``: recreate lost segment metadata from the remote tier.

Theory of operation
-------------------
``__remote_log_metadata`` is the only record of which remote segments
exist; when its partitions are lost (the KIP's "future work") every tiered
byte is unreachable although still stored. Each segment copy leaves objects
named ``<start offset>-<segment uuid>.<suffix>`` under a prefix that names
the topic, its id and the partition, so the store itself says almost
everything the COPY_SEGMENT_FINISHED metadata held:

* topic, topic id, partition, start offset, segment uuid: the object name;
  the topic must still exist in the cluster with that id;
* size: the ``.log`` object's size in the listing; for a compressed or
  encrypted copy, the plain size and the custom metadata the copy recorded,
  from its codec manifest object (``CodecStorage.restored_metadata``);
* end offset and max timestamp: the ``.log``'s batch headers (parsed with
  ``protocol.records``; only headers are read, in windows);
* leader epochs: the ``leader_epoch_checkpoint`` object, restricted to the
  segment's offsets exactly as the copier does (``copier.segment_epochs``).
  A copy writes that object last, so a segment without it is a copy that
  never finished and is not rebuilt.

Segments the current metadata already has are left alone. So are segments
ending below the partition's log start offset, unless ``--below-log-start``:
a leader deletes those at its next expiration run. The rest are published,
COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED, to the metadata partition
that orders the user partition's events (``metadata_partition``), acks=all
and one request in flight so the two stay in order. A second run finds them
in the metadata and publishes nothing.

Publishing is safe against the leaders' own tiering tasks: before it, the
tool sets the tierd topic config ``tierd.remote.metadata.rebuilding`` on
every topic it republishes, and waits until every replica reports it
(DescribeTiering v1). While it is on, a leader neither copies nor expires
the topic's remote segments, and each tiering run takes the log start,
leader epochs and tier boundary from the metadata as it now is, moving the
log start back to the earliest finished segment: a broker that lost the
metadata moved it up to its local log start in its first tiering run, and
without the hold would delete the republished segments below it. Followers
of a tiered partition follow the leader's log start down as well as up.
Once every replica that answers reports a log start at or below the
earliest republished segment and the republished segment count, the config
is removed. If the tool stops before that, the config stays on (nothing is
expired meanwhile) and a rerun finishes the work; ``topics alter-configs
--delete tierd.remote.metadata.rebuilding`` ends the hold by hand.

Recovery procedure after ``__remote_log_metadata`` is lost: a dry run, then
``--execute --below-log-start`` (every lost segment is below the log start
by then). No restart is needed.

Exit codes (``broker.admin.common``): 0 when every segment of the tier is in
the metadata or was (or, dry run, would be) published; 4 when some could not
be rebuilt (unreadable, incomplete, topic gone, below the log start); 1 when
publishing failed or the replicas did not take the segments up in time.

Why one module over ~450 lines: one operator command, read top to bottom
(list, group, read, decide, publish, report), with its report format next to
the decisions it explains.
"""

from __future__ import annotations

import concurrent.futures
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from broker.admin.common import (
    EXIT_FAILED,
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_UNREACHABLE,
    AdminError,
    Column,
    admin_client,
    emit,
    emit_json,
)
from broker.admin.remote_store import (
    NO_BROKER,
    SegmentKey,
    add_store_options,
    group_segments,
    list_store,
    open_store,
    progress,
    provisional_metadata,
    read_metadata,
    scan_log,
    segment_key,
)
from broker.admin.tiering import collect
from protocol.partition import TopicPartition
from storage.log.checkpoint import parse_epochs
from storage.remote.api import StoredObject
from storage.remote.copier import segment_epochs
from storage.remote.metadata_cache import RemoteLogSegmentMetadataUpdate
from storage.remote.naming import CODEC_MANIFEST_SUFFIX, INDEX_SUFFIXES, LOG_SUFFIX, uuid_str
from storage.remote.rlmm_api import TOPIC_NAME, metadata_partition
from storage.remote.rlmm_serde import serialize
from storage.remote.rsm import parse_uuid
from storage.remote.types import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageError,
)

EPOCHS_SUFFIX = INDEX_SUFFIXES[IndexType.LEADER_EPOCH]
# Segments read at once; the storage managers are thread-safe and each read
# is a few round trips to the store.
READ_THREADS = 8

def register(sub: Any) -> None:
    """Add ``rebuild-metadata`` to ``sub``."""
    parser = sub.add_parser(
        "rebuild-metadata", help="recreate lost __remote_log_metadata from the remote tier",
        description="Read the remote tier and publish COPY_SEGMENT_STARTED/FINISHED for every "
                    "complete segment the metadata lacks. Dry run unless --execute.")
    add_store_options(parser)
    parser.add_argument("--execute", action="store_true",
                        help="publish the records (default: only print what would be published)")
    parser.add_argument("--below-log-start", action="store_true",
                        help="also segments below the partition's log start offset (the log "
                             "start moves back to them; after a lost metadata topic, all are)")
    parser.add_argument("--adopt-timeout", type=float, default=120.0, metavar="SECONDS",
                        help="how long to wait for every replica to take up the republished "
                             "segments (a leader does at its next tiering run; default 120)")
    parser.set_defaults(func=run)


@dataclass(slots=True)
class Segment:
    """One segment found in the store, as a row of the report."""

    partition: str
    segment: str
    start_offset: int
    end_offset: int | None = None
    size: int | None = None
    max_timestamp_ms: int | None = None
    epochs: dict[int, int] = field(default_factory=dict)
    action: str = ""
    metadata: RemoteLogSegmentMetadata | None = field(default=None, repr=False)


@dataclass(slots=True)
class Cluster:
    """What the live cluster says about the topics found in the store."""

    topic_ids: dict[str, Any]
    leaders: dict[tuple[str, int], int]
    log_starts: dict[tuple[str, int], int]


# -- finding segments -------------------------------------------------------------


def read_cluster(args: Any, topics: set[str]) -> Cluster:
    """Topic ids and leaders from Metadata, log start offsets from ListOffsets.

    Raises:
        AdminError: no broker reachable (EXIT_UNREACHABLE) or a failed request.
    """
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    with admin_client(args) as client:
        described = [t for t in client.describe_topics() if t["name"] in topics
                     and not t["error_code"]]
    cluster = Cluster({}, {}, {})
    for topic in described:
        cluster.topic_ids[topic["name"]] = _topic_id(topic["topic_id"])
        for p in topic["partitions"]:
            cluster.leaders[(topic["name"], p["partition_index"])] = p["leader_id"]
    if not cluster.leaders:
        return cluster
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap_server.split(","),
                             client_id="tierd-admin", group_id=None, enable_auto_commit=False,
                             request_timeout_ms=int(args.timeout * 1000))
    try:
        tps = [TopicPartition(t, p) for t, p in cluster.leaders]
        begin = consumer.beginning_offsets(tps, int(args.timeout * 1000))
        cluster.log_starts = {(tp.topic, tp.partition): off for tp, off in begin.items()}
    except KafkaError as exc:
        raise AdminError(f"listing log start offsets failed: {exc}", EXIT_FAILED) from None
    finally:
        consumer.close()
    return cluster


def _topic_id(value: Any) -> uuid.UUID | None:
    """A Metadata topic id as kafka-python gives it (a UUID or its text, either form)."""
    if isinstance(value, uuid.UUID) or value is None:
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return parse_uuid(str(value))


def _row(key: SegmentKey, objects: dict[str, StoredObject]) -> Segment:
    name = next(iter(objects.values())).name
    assert name is not None
    tip = name.segment_id.topic_id_partition
    return Segment(f"{tip.topic}-{tip.partition}", uuid_str(key[3]), key[2])


def plan(grouped: dict[SegmentKey, dict[str, StoredObject]], known: set[SegmentKey],
         cluster: Cluster) -> tuple[list[tuple[Segment, dict[str, StoredObject]]], list[Segment]]:
    """(segments to read, segments skipped before reading), in publishing order:
    by partition, start offset and age of the ``.log``."""
    todo, skipped = [], []
    for key, objects in grouped.items():
        row = _row(key, objects)
        topic = row.partition.rpartition("-")[0]
        if key in known:
            continue
        if cluster.topic_ids.get(topic) != key[0] or (topic, key[1]) not in cluster.leaders:
            row.action = "skipped: topic no longer exists"  # by that name and id
        elif LOG_SUFFIX not in objects:
            row.action = "skipped: no .log object"
        elif EPOCHS_SUFFIX not in objects:
            row.action = "skipped: incomplete copy (no leader_epoch_checkpoint)"
        else:
            todo.append((row, objects))
            continue
        skipped.append(row)
    todo.sort(key=lambda item: (item[0].partition, item[0].start_offset,
                                item[1][LOG_SUFFIX].modified_s))
    return todo, skipped


# -- reading one segment --------------------------------------------------------


def read_segment(rsm: Any, row: Segment, objects: dict[str, StoredObject],
                 broker_id: int) -> Segment:
    """Fill ``row`` with the segment's metadata, or say in ``row.action`` why not.

    Error handling: every outcome becomes the row; nothing raises.
    """
    log_obj = objects[LOG_SUFFIX]
    assert log_obj.name is not None
    segment_id = log_obj.name.segment_id
    md = provisional_metadata(segment_id, row.start_offset, log_obj.size)
    row.size = log_obj.size
    try:
        if CODEC_MANIFEST_SUFFIX in objects:
            # A compressed/encrypted copy: its plain size and its custom metadata.
            md = rsm.restored_metadata(md)
            row.size = md.segment_size_in_bytes
        end, max_ts, batch_epochs = scan_log(rsm, md)
        text = rsm.fetch_index(md, IndexType.LEADER_EPOCH).decode("utf-8", "replace")
    except (RemoteStorageError, ValueError) as exc:
        row.action = f"skipped: unreadable: {exc}"
        return row
    entries = parse_epochs(text)
    epochs = segment_epochs(entries, row.start_offset, end) if entries else {}
    if not epochs:
        epochs = batch_epochs  # the checkpoint is damaged; the batches carry the epochs too
    row.end_offset, row.max_timestamp_ms, row.epochs = end, max_ts, epochs
    row.metadata = RemoteLogSegmentMetadata(
        segment_id, row.start_offset, end, max_ts, broker_id, int(time.time() * 1000), epochs,
        md.segment_size_in_bytes, md.custom_metadata)
    return row


def read_segments(rsm: Any, todo: list[tuple[Segment, dict[str, StoredObject]]],
                  cluster: Cluster, below_start: bool, bar: Any) -> list[Segment]:
    """Read every segment of ``todo`` (READ_THREADS at a time), in ``todo``'s order;
    those below their partition's log start are skipped unless ``below_start``."""
    task = bar.add_task("reading segments", total=len(todo))
    with concurrent.futures.ThreadPoolExecutor(READ_THREADS) as pool:
        futures = []
        for row, objects in todo:
            topic, _, partition = row.partition.rpartition("-")
            leader = cluster.leaders.get((topic, int(partition)), NO_BROKER)
            futures.append(pool.submit(read_segment, rsm, row, objects,
                                       leader if leader >= 0 else NO_BROKER))
        rows = []
        for future in futures:
            rows.append(future.result())
            bar.advance(task)
    for row in rows:
        topic, _, partition = row.partition.rpartition("-")
        start = cluster.log_starts.get((topic, int(partition)), 0)
        if row.metadata is not None and row.metadata.end_offset < start and not below_start:
            row.action = (f"skipped: below the log start offset {start} (the leader would "
                          "delete it; see --below-log-start)")
            row.metadata = None
    return rows


# -- publishing -----------------------------------------------------------------


def publish(args: Any, rows: list[Segment], num_partitions: int, bar: Any) -> None:
    """COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED for each row, acks=all.

    Error handling: a record that fails marks its row "publish failed: ...".

    Raises:
        AdminError(EXIT_UNREACHABLE): no broker reachable.
    """
    from kafka import KafkaProducer
    from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

    class InternalTopicProducer(KafkaProducer):  # type: ignore[misc]
        """kafka-python assigns no partition of an internal topic (its metadata
        hides them from ``topics()``); ours are explicit and known, so use them."""

        def _partition(self, topic: str, partition: int | None, *rest: Any) -> int | None:
            if partition is not None and partition in (
                    self._metadata.partitions_for_topic(topic) or ()):
                return partition
            return super()._partition(topic, partition, *rest)  # type: ignore[no-any-return]

    try:
        producer = InternalTopicProducer(
            bootstrap_servers=args.bootstrap_server.split(","), client_id="tierd-admin",
            acks="all", retries=5, max_in_flight_requests_per_connection=1,
            request_timeout_ms=int(args.timeout * 1000))
    except (KafkaConnectionError, KafkaTimeoutError):
        raise AdminError(f"no broker reachable at {args.bootstrap_server}",
                         EXIT_UNREACHABLE) from None
    task = bar.add_task("publishing", total=len(rows))
    try:
        sent = []
        for row in rows:
            md = row.metadata
            assert md is not None
            # The custom metadata goes with COPY_SEGMENT_FINISHED, as the copier's (KIP-917).
            finished = RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, int(time.time() * 1000), md.custom_metadata,
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED, md.broker_id)
            partition = metadata_partition(md.topic_id_partition, num_partitions)
            sent.append((row, [producer.send(TOPIC_NAME, serialize(event), partition=partition)
                               for event in (md, finished)]))
        producer.flush(timeout=args.timeout)
        for row, futures in sent:
            try:
                for future in futures:
                    future.get(timeout=args.timeout)
                row.action = "published"
            except KafkaError as exc:
                row.action = f"publish failed: {exc}"
            bar.advance(task)
    finally:
        producer.close(timeout=args.timeout)


# -- holding the leaders' tiering while publishing ---------------------------------

REBUILDING = "tierd.remote.metadata.rebuilding"
POLL_S = 0.5


def _count_by_partition(segments: Iterable[RemoteLogSegmentMetadata]) -> dict[TopicPartition, int]:
    """Finished segments already in the metadata, by partition."""
    out: dict[TopicPartition, int] = {}
    for md in segments:
        if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            tip = md.topic_id_partition
            out[(tip.topic, tip.partition)] = out.get((tip.topic, tip.partition), 0) + 1
    return out


def republish(args: Any, rows: list[Segment], num_partitions: int,
              known: dict[TopicPartition, int], bar: Any) -> bool:
    """Hold the topics' tiering, publish ``rows``, wait for every replica to
    take them up, release the hold. True when all of that happened; False
    (the hold left on, a line on stderr saying so) when the replicas did not
    take the segments up in time.

    Raises:
        AdminError: the hold could not be set or confirmed, or no broker reachable.
    """
    targets: dict[TopicPartition, tuple[int, int]] = {}
    for row in rows:
        topic, _, partition = row.partition.rpartition("-")
        tp = (topic, int(partition))
        start, count = targets.get(tp, (row.start_offset, known.get(tp, 0)))
        targets[tp] = (min(start, row.start_offset), count + 1)
    topics = sorted({tp[0] for tp in targets})
    _set_hold(args, topics, hold=True)
    _wait_replicas(args, topics, "the rebuild hold to reach every replica",
                   lambda tp, r: bool(r["metadata_rebuilding"]), args.timeout * 4, bar)
    publish(args, rows, num_partitions, bar)
    published = {(r.partition.rpartition("-")[0], int(r.partition.rpartition("-")[2]))
                 for r in rows if r.action == "published"}

    def adopted(tp: TopicPartition, r: dict[str, Any]) -> bool:
        if tp not in published:
            return True
        start, count = targets[tp]
        return r["log_start_offset"] <= start and r["remote_segments"] >= count

    try:
        _wait_replicas(args, [t for t in topics if any(tp[0] == t for tp in published)],
                       "every replica to take up the republished segments", adopted,
                       args.adopt_timeout, bar)
    except AdminError as exc:
        print(f"tierd-admin: {exc}; {REBUILDING} stays on for {', '.join(topics)} (nothing is "
              "expired meanwhile): run again, or delete the config to end the hold",
              file=sys.stderr)
        return False
    _set_hold(args, topics, hold=False)
    return True


def _set_hold(args: Any, topics: list[str], hold: bool) -> None:
    """Set (or delete) ``tierd.remote.metadata.rebuilding`` on ``topics``.

    Raises:
        AdminError: a topic refused the change.
    """
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import KafkaError

    op = ("SET", "true") if hold else ("DELETE", None)
    resources = [ConfigResource(ConfigResourceType.TOPIC, t, {REBUILDING: op}) for t in topics]
    with admin_client(args) as client:
        try:
            response = client.alter_configs(resources, raise_on_unknown=False, incremental=True)
        except KafkaError as exc:
            raise AdminError(f"{'setting' if hold else 'removing'} {REBUILDING} failed: "
                             f"{exc}") from None
    refused = {t: r for t, r in response["topic"].items() if r != "OK"}
    if refused:
        raise AdminError(f"{'setting' if hold else 'removing'} {REBUILDING} refused: {refused}")


def _wait_replicas(args: Any, topics: list[str], what: str,
                   done: Callable[[TopicPartition, dict[str, Any]], bool],
                   timeout_s: float, bar: Any) -> None:
    """Poll DescribeTiering on every broker until ``done`` holds for every
    replica of every partition of ``topics`` that answers.

    Raises:
        AdminError: not so within ``timeout_s``.
    """
    if not topics:
        return
    task = bar.add_task(f"waiting for {what}", total=None)
    deadline = time.monotonic() + timeout_s
    pending: list[str] = []
    with admin_client(args) as client:
        while True:
            snap = collect(client, topics)
            pending = [f"{t}-{p}@{node}" for (t, p), replicas in sorted(snap.replicas.items())
                       for node, r in sorted(replicas.items()) if not done((t, p), r)]
            if snap.replicas and not pending:
                bar.remove_task(task)
                return
            if time.monotonic() > deadline:
                raise AdminError(f"timed out waiting for {what}: "
                                 f"{', '.join(pending) or 'no replica answered'}")
            time.sleep(POLL_S)


# -- the command ----------------------------------------------------------------

COLUMNS = (Column("partition", "PARTITION"), Column("segment", "SEGMENT"),
           Column("start_offset", "START", numeric=True), Column("end_offset", "END", numeric=True),
           Column("size", "SIZE", numeric=True), Column("epochs", "EPOCHS"),
           Column("action", "ACTION"))


def run(args: Any) -> int:
    """List, read, publish (with ``--execute``), report."""
    rsm = open_store(args)
    try:
        with progress() as bar:
            grouped = group_segments(list_store(rsm, bar))
            view = read_metadata(args, bar)
            known = {segment_key(md) for md in view.segments()}
            topics = {o.name.segment_id.topic_id_partition.topic
                      for objects in grouped.values() for o in objects.values() if o.name}
            cluster = read_cluster(args, topics)
            todo, skipped = plan(grouped, known, cluster)
            rows = read_segments(rsm, todo, cluster, args.below_log_start, bar)
            ready = [r for r in rows if r.metadata is not None]
            for row in ready:
                row.action = "would publish"
            if args.execute and ready:
                adopted = republish(args, ready, view.partitions,
                                    _count_by_partition(view.segments()), bar)
    finally:
        rsm.close()
    report(args, rows + skipped, len(known))
    if any(r.action.startswith("publish failed") for r in ready):
        return EXIT_FAILED
    if args.execute and ready and not adopted:
        return EXIT_FAILED
    return EXIT_FINDINGS if any(r.metadata is None for r in rows + skipped) else EXIT_OK


def report(args: Any, rows: list[Segment], known: int) -> None:
    """The segments found and what became of them, as JSON or as a table."""
    out = [{f.name: getattr(r, f.name) for f in fields(r) if f.name != "metadata"} for r in rows]
    publishable = sum(1 for r in rows if r.metadata is not None)
    if args.json:
        emit_json({"execute": bool(args.execute), "known_segments": known,
                   "publishable": publishable,
                   "published": sum(1 for r in rows if r.action == "published"),
                   "segments": out})
        return
    verb = "published" if args.execute else "would publish (dry run; --execute to publish)"
    print(f"{known} segments already in {TOPIC_NAME}; {publishable} to rebuild: {verb}")
    if out:
        emit(args, out, COLUMNS)
