"""Compression and encryption of remote segments (issue 26): what they save and
what they cost. tierd only (Tansu's rounds report nothing).

Two kinds of case:

* ``storage-json`` / ``storage-random``: in this process, no broker. One local
  segment of 32 MiB (× ``--scale``, at least 4 MiB) of real v2 record batches,
  uncompressed, of 1 KiB values: JSON-like text drawn afresh for each value
  (``bench.payload``'s words and random numbers: compressible, without the
  long repeats of its filler) or random bytes (incompressible). It is copied through
  ``CodecStorage`` over a directory tier in four modes, ``off``, ``zstd``,
  ``aes`` (AES-256-GCM) and ``zstd-aes``, with the default 4 MiB chunks, then
  read back whole in 4 MiB ranges (as the chunk cache reads it). Reports the
  stored bytes of all the segment's objects over the plain .log's, and the
  process CPU per MiB of the copy and of the read in each mode; the cost of
  compression or encryption alone is its mode's figure less ``off``'s.
* ``cold-fs`` / ``cold-s3``: a tierd with tiering on over a directory or a moto
  S3 server on loopback (nice 19), once per mode ``off``, ``aes``,
  ``zstd-aes``: 64 MiB (× ``--scale``) of 1 KiB values bulk-produced
  (uncompressed) to a topic of 8 MiB segments with local.retention.bytes=1;
  once every closed segment is remote, it is read from offset 0 by a verified
  consumer (``tiered.read_all``). Reports cold read MB/s and broker CPU per MB
  read in each mode, and encrypted/plain MB/s.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.brokers import BrokerProcess
from bench.kafka_util import wait_metadata_ready
from bench.payload import _WORDS, payload_set
from bench.registry import Scenario, ScenarioContext, register
from bench.results import CaseResult, MetricSpec
from bench.scenarios.tiered import (
    SEGMENT_BYTES,
    bulk_produce,
    create_topics,
    open_remote_tier,
    read_all,
    tiered_spec,
    wait_all_tiered,
)

NAME = "remote_codec"
MIB = 1 << 20
VALUE = 1024
# The in-process segment: big enough for eight 4 MiB chunks, small enough to
# build in a couple of seconds.
SEGMENT_MIB = 32
# Records per batch in the in-process segment: ~100 KiB batches, as a
# producer with linger batches them.
PER_BATCH = 100
# Read in ranges of the chunk cache's default chunk.
READ_RANGE = 4 * MIB
# Cold-read data per mode: eight 8 MiB segments.
COLD_MIB = 64
STORAGE_MODES = ("off", "zstd", "aes", "zstd-aes")
COLD_MODES = ("off", "aes", "zstd-aes")
DATA_KINDS = ("json", "random")
# Field names of the JSON-like values (bench.payload's words).
WORDS = _WORDS
COLD_TIERS = ("fs", "s3")

METRICS = (
    *(MetricSpec(f"stored_ratio_{m}", f"stored/plain bytes, {m}", "x", False, "{:,.3f}")
      for m in STORAGE_MODES),
    *(MetricSpec(f"copy_cpu_ms_mib_{m}", f"copy CPU per MiB, {m}", "ms", False, "{:,.2f}")
      for m in STORAGE_MODES),
    *(MetricSpec(f"read_cpu_ms_mib_{m}", f"read CPU per MiB, {m}", "ms", False, "{:,.2f}")
      for m in STORAGE_MODES),
    *(MetricSpec(f"cold_mb_s_{m}", f"cold read MB/s, {m}", "MB/s", True, "{:,.1f}")
      for m in COLD_MODES),
    *(MetricSpec(f"cold_cpu_ms_mb_{m}", f"broker CPU per MB cold read, {m}", "ms", False,
                 "{:,.2f}") for m in COLD_MODES),
    MetricSpec("cold_aes_off_ratio", "cold read MB/s aes/off", "x", True, "{:,.3f}"),
    MetricSpec("cold_zstd_aes_off_ratio", "cold read MB/s zstd-aes/off", "x", True, "{:,.3f}"),
)


def codec_settings(mode: str, keys: Path, prefix: str = "") -> dict[str, str]:
    """The codec's settings for ``mode`` (``prefix``: "rsm.config." for a broker)."""
    out = {"compression.enabled": str("zstd" in mode).lower(),
           "encryption.enabled": str("aes" in mode).lower()}
    if "aes" in mode:
        out |= {"encryption.key.pair.id": "bench", "encryption.key.pairs": "bench",
                "encryption.key.pairs.bench.public.key.file": str(keys / "public.pem"),
                "encryption.key.pairs.bench.private.key.file": str(keys / "private.pem")}
    return {prefix + k: v for k, v in out.items()}


@contextmanager
def key_pair() -> Iterator[Path]:
    """A directory with a fresh RSA pair (public.pem, private.pem); removed after."""
    directory = Path(tempfile.mkdtemp(prefix="bench-codec-keys-"))
    try:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (directory / "public.pem").write_bytes(private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        (directory / "private.pem").write_bytes(private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def json_value(rng: random.Random) -> bytes:
    """1 KiB of JSON-like text drawn afresh (no long repeats across values)."""
    parts, size = [], 0
    while size < VALUE:
        token = f'"{rng.choice(WORDS)}":{rng.randint(0, 99999)},'
        parts.append(token)
        size += len(token)
    return "".join(parts).encode()[:VALUE]


def write_segment(path: Path, kind: str, size: int) -> None:
    """Uncompressed v2 batches of 1 KiB values up to ``size`` bytes."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    rng = random.Random(26)
    written = seq = 0
    with path.open("wb") as out:
        while written < size:
            builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 24)
            for _ in range(PER_BATCH):
                value = json_value(rng) if kind == "json" else rng.randbytes(VALUE)
                builder.append(timestamp=seq, key=None, value=value, headers=[])
                seq += 1
            builder.close()
            batch = bytes(builder.buffer())
            out.write(batch)
            written += len(batch)


def storage_case(ctx: ScenarioContext, kind: str, result: CaseResult) -> None:
    from storage.remote.codec_storage import CodecStorage
    from storage.remote.filesystem import FileSystemRemoteStorageManager
    from storage.remote.types import (
        LogSegmentData,
        RemoteLogSegmentId,
        RemoteLogSegmentMetadata,
        TopicIdPartition,
    )

    size = max(4, int(SEGMENT_MIB * ctx.config.scale)) * MIB
    with key_pair() as keys, tempfile.TemporaryDirectory(prefix="bench-codec-") as tmp:
        local = Path(tmp) / "local"
        local.mkdir()
        log = local / "00000000000000000000.log"
        write_segment(log, kind, size)
        plain = log.stat().st_size
        (local / "00000000000000000000.index").write_bytes(os.urandom(8 * 4096))
        (local / "00000000000000000000.timeindex").write_bytes(os.urandom(12 * 4096))
        data = LogSegmentData(log, local / "00000000000000000000.index",
                              local / "00000000000000000000.timeindex", None, None, b"0\n1\n0 0\n")
        tip = TopicIdPartition(uuid.uuid4(), "bench", 0)
        for mode in STORAGE_MODES:
            root = Path(tmp) / f"remote-{mode}"
            codec = CodecStorage(FileSystemRemoteStorageManager({"dir": str(root)}),
                                 codec_settings(mode, keys))
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tip), 0, 99, 0, 0, 0,
                                          {0: 0}, plain)
            started = time.process_time()
            custom = codec.copy_log_segment_data(md, data)
            copy_cpu = time.process_time() - started
            md = RemoteLogSegmentMetadata(md.remote_log_segment_id, 0, 99, 0, 0, 0, {0: 0},
                                          plain, custom)
            stored = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
            started = time.process_time()
            read = sum(len(codec.fetch_log_segment(md, pos, pos + READ_RANGE - 1))
                       for pos in range(0, plain, READ_RANGE))
            read_cpu = time.process_time() - started
            if read != plain:
                result.verified = False
                result.notes.append(f"{kind} {mode}: read {read} of {plain} bytes")
            result.metrics[f"stored_ratio_{mode}"] = stored / plain
            result.metrics[f"copy_cpu_ms_mib_{mode}"] = copy_cpu * 1000 / (plain / MIB)
            result.metrics[f"read_cpu_ms_mib_{mode}"] = read_cpu * 1000 / (plain / MIB)
            codec.close()
    m = result.metrics
    ctx.log(f"{NAME} storage-{kind}: stored/plain " + ", ".join(
        f"{mode} {m[f'stored_ratio_{mode}']:.3f}" for mode in STORAGE_MODES) + "; copy CPU "
        "ms/MiB " + ", ".join(f"{mode} {m[f'copy_cpu_ms_mib_{mode}']:.2f}"
                              for mode in STORAGE_MODES) + "; read CPU ms/MiB " + ", ".join(
        f"{mode} {m[f'read_cpu_ms_mib_{mode}']:.2f}" for mode in STORAGE_MODES))


def cold_case(ctx: ScenarioContext, tier: str, result: CaseResult) -> None:
    config = ctx.config
    count = max(1024, int(COLD_MIB * MIB // VALUE * config.scale))
    payloads = payload_set(count, VALUE)
    log_dir = config.log_dir / f"{NAME}-round{ctx.round + 1}"
    log_dir.mkdir(parents=True, exist_ok=True)
    modes = COLD_MODES if ctx.round % 2 == 0 else COLD_MODES[::-1]
    for mode in modes:
        with key_pair() as keys, open_remote_tier(tier, log_dir) as remote:
            spec = tiered_spec(ctx, tier, {**remote.settings,
                                           **codec_settings(mode, keys, "rsm.config.")})
            topic = ctx.topic_name(NAME, f"{tier}-{mode}")
            with BrokerProcess(spec, log_dir / f"tierd-{tier}-{mode}.log",
                               config.startup_timeout) as broker:
                wait_metadata_ready(broker.bootstrap, config.startup_timeout)
                create_topics(broker.bootstrap, {topic: {
                    "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                    "local.retention.bytes": "1"}}, 1)
                bulk_produce(broker.bootstrap, topic, payloads.values, codec="none")
                wait_all_tiered(broker.data_dir, topic, 1)
                cpu = broker.cpu_seconds()
                outcome = read_all(broker.bootstrap, topic, payloads, config.idle_timeout)
                cpu = broker.cpu_seconds() - cpu
            if not outcome.verifier.ok() or outcome.errors:
                result.verified = False
                result.notes.append(f"{tier} {mode}: {outcome.verifier.summary()} "
                                    f"{outcome.first_error}")
            megabytes = payloads.total_bytes / 1e6
            result.metrics[f"cold_mb_s_{mode}"] = megabytes / outcome.elapsed
            result.metrics[f"cold_cpu_ms_mb_{mode}"] = cpu * 1000 / megabytes
    m = result.metrics
    m["cold_aes_off_ratio"] = m["cold_mb_s_aes"] / m["cold_mb_s_off"]
    m["cold_zstd_aes_off_ratio"] = m["cold_mb_s_zstd-aes"] / m["cold_mb_s_off"]
    ctx.log(f"{NAME} cold-{tier}: MB/s " + ", ".join(
        f"{mode} {m[f'cold_mb_s_{mode}']:.1f}" for mode in COLD_MODES) + "; broker CPU ms/MB "
        + ", ".join(f"{mode} {m[f'cold_cpu_ms_mb_{mode}']:.2f}" for mode in COLD_MODES))


def run(ctx: ScenarioContext) -> list[CaseResult]:
    if ctx.broker.spec.name != "tierd":
        ctx.log(f"{NAME}: skipped ({ctx.broker.spec.label} has no tiered storage)")
        return []
    cases = [(f"storage-{kind}", storage_case, kind) for kind in DATA_KINDS]
    cases += [(f"cold-{tier}", cold_case, tier) for tier in COLD_TIERS]
    results = []
    for case, body, arg in cases:
        if not ctx.case_selected(case):
            continue
        result = ctx.new_result(NAME, case)
        try:
            body(ctx, arg, result)
        except Exception as exc:  # noqa: BLE001 - record and go on with the next case
            result.error = f"{type(exc).__name__}: {exc}"
            ctx.log(f"{NAME} {case}: ERROR {result.error}")
        results.append(result)
    return results


SCENARIO = register(
    Scenario(
        name=NAME,
        description="tierd only: remote segment compression/encryption: stored bytes and "
        "CPU per MiB (copy, read) per mode, in process; cold read MB/s with encryption "
        "on/off over a directory and moto S3",
        run=run,
        metrics=METRICS,
        order=31,
    )
)
