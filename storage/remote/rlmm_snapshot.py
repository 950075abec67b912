"""The topic-based metadata manager's files: snapshots and committed offsets.

Under the broker's log directory (KIP-405, "committed offsets file format"
and "internal flat-file store format")::

    _rlmm_committed_offsets                   text, Kafka's CommittedOffsetsFile:
        0                                     format version
        <metadata partition> <offset>         one line per metadata partition
    remote-log-metadata-snapshots/
        <topic id>-<partition>                one flat-file snapshot per user
                                              partition (rlmm_serde.snapshot_bytes)

The committed offset of a metadata partition is the offset of the last
record folded into the snapshots (Kafka stores the last consumed offset
too); reading resumes at the next one. The directory name cannot be taken
for a ``<topic>-<partition>`` log directory (its suffix is not a number).

Every write goes to a temp file that is fsynced and renamed over the old
one, then the directory is fsynced: a crash leaves the old or the new file.
These functions block; call them through ``trio.to_thread``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from storage.log.checkpoint import topic_id_from_str, topic_id_to_str
from storage.remote.rlmm_serde import MetadataRecordError, PartitionSnapshot, parse_snapshot
from storage.remote.types import TopicIdPartition

log = structlog.get_logger(__name__)

COMMITTED_OFFSETS_FILE = "_rlmm_committed_offsets"
SNAPSHOT_DIR = "remote-log-metadata-snapshots"
# CommittedOffsetsFile.CURRENT_VERSION in Kafka.
COMMITTED_OFFSETS_VERSION = 0
_TMP_SUFFIX = ".tmp"


def snapshot_file_name(tip: TopicIdPartition) -> str:
    """``<topic id>-<partition>``: short (a topic name may take 249 bytes) and unique."""
    return f"{topic_id_to_str(tip.topic_id)}-{tip.partition}"


def parse_snapshot_file_name(name: str) -> tuple[uuid.UUID, int] | None:
    """(topic id, partition) named by a snapshot file name, None if it is not one."""
    topic_id, sep, partition = name.rpartition("-")
    if not sep or not partition.isdigit():
        return None
    try:
        return topic_id_from_str(topic_id), int(partition)
    except ValueError:
        return None


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(path: str, data: bytes) -> None:
    tmp = path + _TMP_SUFFIX
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_committed_offsets(log_dir: str) -> dict[int, int]:
    """Committed offset per metadata partition; {} if the file is missing or corrupt."""
    path = os.path.join(log_dir, COMMITTED_OFFSETS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    try:
        if not lines or int(lines[0]) != COMMITTED_OFFSETS_VERSION:
            raise ValueError("missing or unknown version")
        offsets: dict[int, int] = {}
        for line in lines[1:]:
            partition, offset = line.split()
            offsets[int(partition)] = int(offset)
        return offsets
    except ValueError as exc:
        log.warning("ignoring corrupt committed offsets file", path=path, error=str(exc))
        return {}


def write_committed_offsets(log_dir: str, offsets: dict[int, int]) -> None:
    lines = [str(COMMITTED_OFFSETS_VERSION)]
    lines += [f"{p} {o}" for p, o in sorted(offsets.items())]
    _replace(os.path.join(log_dir, COMMITTED_OFFSETS_FILE), ("\n".join(lines) + "\n").encode())
    _fsync_dir(log_dir)


def write_snapshots(log_dir: str, snapshots: dict[str, bytes], removed: set[str]) -> None:
    """Write snapshot files (name -> content) and delete the ``removed`` ones."""
    directory = os.path.join(log_dir, SNAPSHOT_DIR)
    os.makedirs(directory, exist_ok=True)
    for name, data in snapshots.items():
        _replace(os.path.join(directory, name), data)
    for name in removed - snapshots.keys():
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass
    _fsync_dir(directory)


@dataclass(slots=True)
class LoadedSnapshots:
    """What ``load_snapshots`` found.

    Attributes:
        snapshots: file name -> parsed snapshot.
        corrupt: names of files that could not be parsed (or are not snapshots).
    """

    snapshots: dict[str, PartitionSnapshot] = field(default_factory=dict)
    corrupt: list[str] = field(default_factory=list)


def load_snapshots(log_dir: str) -> LoadedSnapshots:
    """Parse every snapshot file; leftover temp files are removed."""
    directory = os.path.join(log_dir, SNAPSHOT_DIR)
    loaded = LoadedSnapshots()
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return loaded
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(_TMP_SUFFIX):
            os.unlink(path)
            continue
        parsed = parse_snapshot_file_name(name)
        try:
            if parsed is None:
                raise MetadataRecordError("not a snapshot file name")
            with open(path, "rb") as f:
                snapshot = parse_snapshot(f.read(), parsed[1])
            if snapshot_file_name(snapshot.topic_id_partition) != name:
                raise MetadataRecordError(f"holds {snapshot.topic_id_partition}")
        except (OSError, MetadataRecordError) as exc:
            log.warning("unreadable remote log metadata snapshot", path=path, error=str(exc))
            loaded.corrupt.append(name)
            continue
        loaded.snapshots[name] = snapshot
    return loaded


def remove_snapshots(log_dir: str, names: set[str]) -> None:
    write_snapshots(log_dir, {}, names)


@dataclass(slots=True)
class Restored:
    """What a manager starts from: the committed offset of each metadata
    partition and the snapshots of its user partitions (valid ones only)."""

    committed: dict[int, int]
    snapshots: list[PartitionSnapshot]


def restore(log_dir: str, partition_for: Callable[[TopicIdPartition], int]) -> Restored:
    """Read the committed offsets and snapshots, and remove the snapshots not to use.

    A corrupt snapshot drops its metadata partition's committed offset (the
    partition is read again from the start; its file name still tells the
    user partition, and so the metadata partition); a snapshot of a metadata
    partition without a committed offset is stale.
    """
    committed = read_committed_offsets(log_dir)
    loaded = load_snapshots(log_dir)
    stale = set(loaded.corrupt)
    for name in loaded.corrupt:
        named = parse_snapshot_file_name(name)
        if named is not None:
            p = partition_for(TopicIdPartition(named[0], "", named[1]))
            if committed.pop(p, None) is not None:
                log.warning("corrupt remote log metadata snapshot; re-reading its partition",
                            file=name, metadata_partition=p)
    usable = []
    for name, snap in loaded.snapshots.items():
        if partition_for(snap.topic_id_partition) in committed:
            usable.append(snap)
        else:
            stale.add(name)
    if stale:
        remove_snapshots(log_dir, stale)
    return Restored(committed, usable)
