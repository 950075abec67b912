"""LogManager: every partition log in the log directory, and their chores.

Startup: read the checkpoints, learn from the clean-shutdown marker whether
the last stop was clean, open each ``<topic>-<partition>`` directory, then
remove the marker (so a crash from now on is detected next time). Directories
named ``*-delete`` are leftovers of deleted topics and are removed.

Background chores (``run``): retention every log.retention.check.interval.ms,
time-based flush every log.flush.scheduler.interval.ms, checkpoint
writes every log.flush.offset.checkpoint.interval.ms, and the log cleaner
(``storage.log.cleaner``) for compacted topics.

Shutdown: flush all logs, write checkpoints, close files, write the marker.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable

import structlog
import trio

from config import BrokerConfig
from config.topic import LogConfig
from protocol.partition import TopicPartition
from storage.log import checkpoint
from storage.log.cleaner import LogCleaner
from storage.log.file_deleter import FileDeleter
from storage.log.log import Log

log = structlog.get_logger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
# Each partition's high watermark, so a restarted follower (or a leader whose
# followers are behind) does not expose or lose track of committed data.
REPLICATION_OFFSET_FILE = "replication-offset-checkpoint"
DELETE_SUFFIX = "-delete"


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_dir_name(name: str) -> TopicPartition | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class LogManager:
    def __init__(self, config: BrokerConfig, clock: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.dir = config.log_dir
        self.clock = clock
        self.logs: dict[TopicPartition, Log] = {}
        self.clean_shutdown = False
        # High watermarks read at load (replication-offset-checkpoint), and where
        # the current ones come from when checkpoints are written.
        self.checkpointed_high_watermarks: dict[TopicPartition, int] = {}
        self.high_watermarks: Callable[[], dict[TopicPartition, int]] | None = None
        os.makedirs(self.dir, exist_ok=True)
        self.cleaner = LogCleaner(config, self.logs, clock)
        # Deleted segments' files are unlinked off the event loop.
        self.deleter = FileDeleter()

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def load(self, config_for: Callable[[str], LogConfig | None],
             topic_id_for: Callable[[str], uuid.UUID | None]) -> None:
        """Open every partition directory that belongs to a known topic.

        Directories of unknown topics, or whose partition.metadata names
        another topic id (a deleted and re-created topic), are removed.
        """
        marker = self._path(CLEAN_SHUTDOWN_FILE)
        self.clean_shutdown = os.path.exists(marker)
        recovery = checkpoint.read_offsets(self._path(RECOVERY_POINT_FILE))
        starts = checkpoint.read_offsets(self._path(LOG_START_FILE))
        self.checkpointed_high_watermarks = checkpoint.read_offsets(
            self._path(REPLICATION_OFFSET_FILE))
        started = time.monotonic()
        for name in sorted(os.listdir(self.dir)):
            path = self._path(name)
            if not os.path.isdir(path):
                continue
            if name.endswith(DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            tp = parse_dir_name(name)
            if tp is None:
                continue
            cfg = config_for(tp[0])
            stored_id = checkpoint.read_partition_metadata(path)
            expected = topic_id_for(tp[0])
            if cfg is None or (stored_id is not None and stored_id != expected):
                log.warning("removing log of unknown topic", dir=name)
                shutil.rmtree(path, ignore_errors=True)
                continue
            self.logs[tp] = Log.open(path, tp[0], tp[1], cfg, self.clock,
                                     recovery_point=recovery.get(tp, 0),
                                     log_start_offset=starts.get(tp, 0),
                                     clean_shutdown=self.clean_shutdown,
                                     discard=self.deleter.discard)
            if stored_id is None and expected is not None:
                checkpoint.write_partition_metadata(path, expected)
        if os.path.exists(marker):
            os.unlink(marker)
        log.info("logs loaded", count=len(self.logs), clean_shutdown=self.clean_shutdown,
                 seconds=round(time.monotonic() - started, 3))

    def get(self, tp: TopicPartition) -> Log | None:
        return self.logs.get(tp)

    def create(self, tp: TopicPartition, topic_id: uuid.UUID, config: LogConfig) -> Log:
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        path = self._path(f"{tp[0]}-{tp[1]}")
        lg = Log.open(path, tp[0], tp[1], config, self.clock, clean_shutdown=True,
                      discard=self.deleter.discard)
        checkpoint.write_partition_metadata(path, topic_id)
        self.logs[tp] = lg
        return lg

    async def delete(self, tp: TopicPartition) -> None:
        """Close the log, rename its directory ``*-delete`` and remove it off-loop."""
        lg = self.logs.pop(tp, None)
        if lg is None:
            return
        self.cleaner.forget(tp)
        lg.close()
        doomed = f"{lg.directory}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
        os.rename(lg.directory, doomed)
        await trio.to_thread.run_sync(shutil.rmtree, doomed, True)

    # -- background chores ---------------------------------------------------

    async def run(self, high_watermark: Callable[[TopicPartition], int]) -> None:
        """Run retention, flush, checkpoint, file deletion and log cleaner
        loops until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.cleaner.run, high_watermark)
            nursery.start_soon(self.deleter.run)
            nursery.start_soon(self._every, self.config["log.retention.check.interval.ms"],
                               self._retention, high_watermark)
            nursery.start_soon(self._every, self.config["log.flush.offset.checkpoint.interval.ms"],
                               self.write_checkpoints)
            nursery.start_soon(self._every, min(self.config["log.flush.scheduler.interval.ms"],
                                                3_600_000_000), self._flush_due)

    async def _every(self, interval_ms: int, fn: Callable, *args: object) -> None:
        while True:
            await trio.sleep(max(interval_ms, 1) / 1000)
            try:
                await fn(*args)
            except Exception:
                log.exception("background log chore failed", chore=fn.__name__)

    async def _retention(self, high_watermark: Callable[[TopicPartition], int]) -> None:
        for tp, lg in list(self.logs.items()):
            # One segment per loop step: a pass after a tiered backlog was
            # copied deletes tens of segments (renames, closes, a log line
            # each), which together held produce for 10 ms.
            deleted = 0
            while self.logs.get(tp) is lg and lg.apply_retention(high_watermark(tp), limit=1):
                deleted += 1
                await trio.lowlevel.checkpoint()
            if deleted:
                log.info("retention deleted segments", topic=tp[0], partition=tp[1], count=deleted,
                         log_start_offset=lg.log_start_offset)

    async def _flush_due(self) -> None:
        now = self.clock()
        for lg in list(self.logs.values()):
            if now - lg.last_flush_ms >= lg.config.flush_ms:
                await lg.flush()

    async def write_checkpoints(self, fsync: bool = True) -> None:
        recovery = {tp: lg.recovery_point for tp, lg in self.logs.items()}
        starts = {tp: lg.log_start_offset for tp, lg in self.logs.items()}
        await trio.to_thread.run_sync(checkpoint.write_offsets, self._path(RECOVERY_POINT_FILE),
                                      recovery, fsync)
        await trio.to_thread.run_sync(checkpoint.write_offsets, self._path(LOG_START_FILE),
                                      starts, fsync)
        if self.high_watermarks is not None:
            await trio.to_thread.run_sync(checkpoint.write_offsets,
                                          self._path(REPLICATION_OFFSET_FILE),
                                          self.high_watermarks(), fsync)

    async def shutdown(self) -> None:
        """Flush everything, checkpoint, close, and mark the shutdown clean."""
        for lg in list(self.logs.values()):
            await lg.flush()
        await self.write_checkpoints()
        for lg in self.logs.values():
            lg.close()
        await trio.to_thread.run_sync(checkpoint.atomic_write, self._path(CLEAN_SHUTDOWN_FILE),
                                      "", True)
        log.info("logs closed cleanly", count=len(self.logs))
