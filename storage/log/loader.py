"""Opening one partition's log from its directory, before it takes any
append: the steps of Kafka's LogLoader.

Theory of operation. ``load`` brings three things back in line with what
recovery left on disk, in this order:

1. the segments (``LocalLog.load``: trusted below the recovery point or
   after a clean shutdown, re-validated batch by batch otherwise);
2. the leader epochs: re-read from every re-validated segment, and from all
   of them if the leader-epoch-checkpoint was missing or unreadable; then
   cut to the log's offsets;
3. the log start: the checkpointed one, clamped to the local segments (a
   tiered log may start below them, its older data being remote); a start
   beyond what recovery kept empties the log and restarts it there;

and last the producer state (``ProducerUpkeep.rebuild``), which needs the
final segments and the first re-validated one.

It is apart from ``storage.log.log`` because it runs once, on a log nothing
else holds yet: it only needs the pieces the log is built of, and hands the
log its start offset.

Concurrency: only from ``Log.open``; the log it loads is not shared yet.
"""

from __future__ import annotations

import structlog

from storage.log.epoch_cache import LeaderEpochCache
from storage.log.local_log import LocalLog
from storage.log.producer_upkeep import ProducerUpkeep
from storage.log.segment import LogSegment

log = structlog.get_logger(__name__)


def load(local: LocalLog, epochs: LeaderEpochCache, producers: ProducerUpkeep, *,
         recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> int:
    """Load and recover the segments, epochs and producer state of a new log.

    Returns:
        The log start offset.
    """
    recovered = local.load(recovery_point, clean_shutdown)
    for seg in recovered:
        _rebuild_epochs_from(epochs, seg)
    if not epochs.entries and any(not seg.is_empty for seg in local.segments):
        # A missing or corrupt leader-epoch-checkpoint: rebuild it from the
        # batches on disk (a tiered log's remote part comes back from the
        # remote metadata when tiering resumes, ``RemoteLogManager._restore``).
        log.warning("leader-epoch-checkpoint missing or unreadable; rebuilding it from "
                    "the segments", topic=local.topic, partition=local.partition)
        for seg in local.segments:
            _rebuild_epochs_from(epochs, seg)
    if not local.segments:
        local.add_segment(max(log_start_offset, 0))
    first_local = local.base_offset
    if log_start_offset > local.end_offset:
        # The checkpointed start lies beyond what recovery kept (a torn,
        # unflushed tail): like Kafka's LogLoader, start afresh there.
        log.warning("log start offset beyond recovered end; starting the log there",
                    topic=local.topic, partition=local.partition,
                    log_start_offset=log_start_offset, recovered_end=local.end_offset)
        start_afresh(local, epochs, producers, log_start_offset)
        first_local = log_start_offset
    if local.config.remote_storage_enable:
        start = min(max(log_start_offset, 0), first_local)
    else:
        start = max(log_start_offset, first_local)
    local.recovery_point = min(max(recovery_point, start), local.end_offset)
    epochs.truncate_from_end(local.end_offset)
    epochs.truncate_from_start(start)
    producers.rebuild(recovered[0].base_offset if recovered else None)
    return start


def start_afresh(local: LocalLog, epochs: LeaderEpochCache, producers: ProducerUpkeep,
                 offset: int) -> None:
    """Empty the log and restart it at ``offset``, with no epochs or producers."""
    local.truncate_fully_and_start_at(offset)
    epochs.clear()
    producers.state.truncate()


def _rebuild_epochs_from(epochs: LeaderEpochCache, seg: LogSegment) -> None:
    for batch in seg.iter_batches(0):
        header = seg.read_batch_bytes_header(batch)
        epochs.assign(header.leader_epoch, header.base_offset)
