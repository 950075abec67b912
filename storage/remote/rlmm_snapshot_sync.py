"""Writing the topic-based metadata manager's snapshots (``rlmm``).

``rlmm_snapshot`` owns the files and their formats; this module decides what
to write at each sync: the snapshot of every user partition changed since
the last one (and the removal of those forgotten), then
``_rlmm_committed_offsets``, so a committed offset never runs ahead of the
snapshots it stands for.

A metadata partition that found records missing and has not yet folded a
complete restatement (``MetadataPartition.trusted`` false) is left out: its
state is not a fold of a prefix of the log, and a restart from it would
never rebuild. It is written once the rebuild is done.

Concurrency: on the trio thread, one sync at a time; a metadata partition's
lock is held only while its snapshot bytes are built; the files are written
in a thread. Error handling: a failed write is logged, and what it should
have written is kept for the next sync.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog
import trio

from storage.remote import rlmm_snapshot
from storage.remote.rlmm_partition import MetadataPartition
from storage.remote.rlmm_serde import snapshot_bytes

log = structlog.get_logger(__name__)


class SnapshotSync:
    """Snapshot files and committed offsets under ``log_dir``.

    Attributes:
        committed: metadata partition -> the committed offset on disk.
    """

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.committed: dict[int, int] = {}
        self._lock = trio.Lock()

    async def sync(self, partitions: Mapping[int, MetadataPartition]) -> None:
        """Write snapshots of changed user partitions, then the committed offsets."""
        async with self._lock:
            committed = dict(self.committed)
            for p, state in sorted(partitions.items()):
                last = state.next_offset - 1
                if not state.trusted or (not state.dirty and not state.removed
                                         and committed.get(p, -1) == last):
                    continue
                async with state.lock:
                    if not state.trusted:  # found records missing meanwhile
                        continue
                    last = state.next_offset - 1
                    blobs = {rlmm_snapshot.snapshot_file_name(t): snapshot_bytes(
                        t, last, state.caches[t].segments_in_event_order(),
                        state.caches[t].delete_metadata) for t in state.dirty}
                    dirty, removed = set(state.dirty), set(state.removed)
                    state.dirty.clear()
                    state.removed.clear()
                try:
                    await trio.to_thread.run_sync(rlmm_snapshot.write_snapshots,
                                                  self.log_dir, blobs, removed)
                except OSError:
                    log.exception("writing remote log metadata snapshots failed",
                                  metadata_partition=p)
                    state.dirty |= dirty
                    state.removed |= removed
                    continue
                if last >= 0:
                    committed[p] = last
                else:
                    committed.pop(p, None)
            if committed == self.committed:
                return
            try:
                await trio.to_thread.run_sync(rlmm_snapshot.write_committed_offsets,
                                              self.log_dir, committed)
            except OSError:
                log.exception("writing remote log metadata committed offsets failed")
                return
            self.committed = committed
