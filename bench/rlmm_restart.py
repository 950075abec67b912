"""Restart time of a tiered broker with a long ``__remote_log_metadata`` history (issue 26).

``python -m bench.rlmm_restart [--segments 100000] [--live 10000] [--baseline DIR]``

1. Generates, in process, the data directory of a single tiered broker: a
   tiered topic (``--partitions`` partitions, nothing local) and the metadata
   of ``--segments`` remote segments, written as the records tierd's metadata
   manager writes (``rlmm_serde.serialize``: one record a batch, appended to
   the broker's own ``__remote_log_metadata`` log). The segments are fake: no
   object is in the tier. Their history is a long-running cluster's: each
   segment is copied (COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED) and, once
   ``--live`` newer ones exist, expired (DELETE_SEGMENT_STARTED,
   DELETE_SEGMENT_FINISHED), so ``--live`` remain.
2. Measures restarts of a real broker process on copies of it: from launch
   to the port accepting connections and every metadata partition holding
   records logged as caught up (``remote log metadata caught up``), i.e.
   the metadata manager loaded. "cold": no local snapshot files (a new
   broker, or one whose snapshots are gone: the whole topic is replayed);
   "warm": a second start after a clean stop (snapshots + tail).
   Measured with ``--baseline``'s code if given, else with this tree's with
   compaction off.
3. With this tree: the same, after letting the broker compact the topic
   (the default threshold, a 1 s interval), with the size of the
   ``__remote_log_metadata-*`` directories before and after.

``--baseline DIR``: a checkout of the code before compaction (for example
``git archive <commit> | tar -x -C DIR``) measured the same way; its
metadata manager must log the same "caught up" line (one ``log.info`` in
``_catch_up``, added by the benchmark's user where missing).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import trio

from bench.brokers import free_loopback_port, port_accepts
from config import BrokerConfig
from replication.internal_topics import REMOTE_LOG_METADATA_TOPIC, InternalTopic
from replication.local_admin import open_single_node
from storage.remote.metadata_cache import RemoteLogSegmentMetadataUpdate
from storage.remote.rlmm_api import DEFAULT_NUM_PARTITIONS, metadata_partition
from storage.remote.rlmm_serde import serialize
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TOPIC = "bench-tiered"
# Offsets per fake segment and bytes it claims.
SEGMENT_OFFSETS = 1000
SEGMENT_BYTES = 1 << 20
READY_TIMEOUT_S = 600.0
_CAUGHT_UP = re.compile(r"remote log metadata caught up .*metadata_partition=(\d+)")
_COMPACTED = re.compile(r"remote log metadata compacted .*metadata_partition=(\d+)")
S = RemoteLogSegmentState


def broker_settings(data: Path, remote: Path) -> dict[str, str]:
    return {"log.dirs": str(data), "remote.log.storage.system.enable": "true",
            "rsm.config.dir": str(remote)}


async def _generate(data: Path, remote: Path, segments: int, live: int,
                    partitions: int) -> set[int]:
    node = open_single_node(BrokerConfig.from_mapping(broker_settings(data, remote)))
    info = await node.admin.create_topic(TOPIC, partitions, 1, {
        "remote.storage.enable": "true", "retention.ms": "-1", "local.retention.ms": "-1"})
    topic = InternalTopic(REMOTE_LOG_METADATA_TOPIC, DEFAULT_NUM_PARTITIONS, 1,
                          {"cleanup.policy": "delete", "retention.ms": "-1"},
                          node.admin, node.metadata, node.replicas)
    await topic.ensure()
    now = int(time.time() * 1000)
    made: list[tuple[int, RemoteLogSegmentMetadata]] = []
    used: set[int] = set()

    def append(p: int, event: object) -> None:
        topic.append_records(p, [(None, serialize(event))])  # type: ignore[arg-type]

    def update(md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
               ) -> RemoteLogSegmentMetadataUpdate:
        return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, now, None, state, 0)

    for n in range(segments):
        tip = TopicIdPartition(info.topic_id, TOPIC, n % partitions)
        start = (n // partitions) * SEGMENT_OFFSETS
        md = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, _uuid(n)), start, start + SEGMENT_OFFSETS - 1,
            max_timestamp_ms=now, broker_id=0, event_timestamp_ms=now,
            segment_leader_epochs={0: start}, segment_size_in_bytes=SEGMENT_BYTES)
        p = metadata_partition(tip, DEFAULT_NUM_PARTITIONS)
        used.add(p)
        append(p, md)
        append(p, update(md, S.COPY_SEGMENT_FINISHED))
        made.append((p, md))
        if n >= live:
            old_p, old = made[n - live]
            append(old_p, update(old, S.DELETE_SEGMENT_STARTED))
            append(old_p, update(old, S.DELETE_SEGMENT_FINISHED))
    await node.replicas.logs.shutdown()
    return used


def _uuid(n: int) -> uuid.UUID:
    return uuid.UUID(int=(0xB3 << 120) | n)


def metadata_bytes(data: Path) -> int:
    return sum(f.stat().st_size for d in data.glob(f"{REMOTE_LOG_METADATA_TOPIC}-*")
               for f in d.iterdir())


def drop_snapshots(data: Path) -> None:
    (data / "_rlmm_committed_offsets").unlink(missing_ok=True)
    shutil.rmtree(data / "remote-log-metadata-snapshots", ignore_errors=True)


class Broker:
    """One broker process of ``tree`` on ``data``; its output in ``log``."""

    def __init__(self, tree: Path, data: Path, remote: Path, log: Path,
                 extra: dict[str, str]) -> None:
        self.port = free_loopback_port()
        settings = {**broker_settings(data, remote), **extra,
                    "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                    "tierd.metrics.port": "0"}
        args = [sys.executable, "-m", "broker"]
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        self.log = log
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args, cwd=tree, stdout=log.open("wb"),
                                     stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONPATH": str(tree)})

    def wait_for(self, pattern: re.Pattern[str], partitions: set[int]) -> float:
        """Seconds from launch until the port accepts and ``pattern`` was logged
        for every one of ``partitions``."""
        deadline = self.started + READY_TIMEOUT_S
        serving = False
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited: {self.log.read_text()[-2000:]}")
            serving = serving or port_accepts(self.port, 0.05)
            seen = {int(m) for m in pattern.findall(self.log.read_text(errors="replace"))}
            if serving and partitions <= seen:
                return time.monotonic() - self.started
            time.sleep(0.02)
        raise RuntimeError(f"not ready within {READY_TIMEOUT_S}s: {self.log}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)


def measure(name: str, tree: Path, data: Path, remote: Path, work: Path, used: set[int],
            extra: dict[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for phase in ("cold", "warm"):
        if phase == "cold":
            drop_snapshots(data)
        broker = Broker(tree, data, remote, work / f"{name}-{phase}.log", extra)
        try:
            out[phase] = broker.wait_for(_CAUGHT_UP, used)
        finally:
            broker.stop()
        print(f"{name} {phase} restart: {out[phase]:.2f} s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--min-superseded", type=int, default=10_000,
                        help="rlmm.config.remote.log.metadata.compaction.min.superseded.records")
    parser.add_argument("--baseline", type=Path, help="tree of the code before compaction")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    tree = Path(__file__).resolve().parent.parent
    work = args.workdir or Path(tempfile.mkdtemp(prefix="rlmm-restart-"))
    work.mkdir(parents=True, exist_ok=True)
    pristine, remote = work / "generated", work / "remote"
    remote.mkdir(exist_ok=True)
    began = time.monotonic()
    used = trio.run(_generate, pristine, remote, args.segments, args.live, args.partitions)
    print(f"generated {args.segments} segments ({args.live} live) over {len(used)} metadata "
          f"partitions in {time.monotonic() - began:.1f} s; __remote_log_metadata "
          f"{metadata_bytes(pristine) / 2**20:.1f} MiB", flush=True)
    results: dict[str, dict[str, float]] = {}
    copy = work / "measured"
    shutil.copytree(pristine, copy)
    if args.baseline is not None:
        results["baseline"] = measure("baseline", args.baseline, copy, remote, work, used, {})
    else:
        results["uncompacted"] = measure("uncompacted", tree, copy, remote, work, used,
                                         {"rlmm.config.remote.log.metadata.compaction."
                                          "min.superseded.records": "-1"})
    before = metadata_bytes(copy)
    # Started warm (the snapshots of the last run), it compacts every partition.
    broker = Broker(tree, copy, remote, work / "compacting.log",
                    {"rlmm.config.remote.log.metadata.snapshot.interval.ms": "1000",
                     "rlmm.config.remote.log.metadata.compaction.min.superseded.records":
                         str(args.min_superseded)})
    try:
        took = broker.wait_for(_COMPACTED, used)
    finally:
        broker.stop()
    after = metadata_bytes(copy)
    print(f"compacted in {took:.1f} s after launch; __remote_log_metadata "
          f"{before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB", flush=True)
    results["compacted"] = measure("compacted", tree, copy, remote, work, used, {})
    for name, figures in results.items():
        print(f"{name:12s} cold {figures['cold']:6.2f} s   warm {figures['warm']:6.2f} s")
    print(f"__remote_log_metadata on disk: {before / 2**20:.1f} MiB before, "
          f"{after / 2**20:.1f} MiB after compaction")


if __name__ == "__main__":
    main()
