"""Compression and encryption of remote segments (storage.remote.codec_storage)
over each built-in storage manager: round trips, ranged reads across chunk
boundaries, the compression heuristic, key rotation, tampering."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from config.defs import ConfigError
from storage.remote.chunk_cache import ChunkCache
from storage.remote.codec_storage import CodecStorage, load_storage, split_settings
from storage.remote.key_ring import KeyRingError
from storage.remote.naming import (
    CODEC_MANIFEST_SUFFIX,
    INDEX_SUFFIXES,
    INDEXES_SUFFIX,
    LOG_SUFFIX,
    expected_log_object_size,
    index_lengths,
    stored_log_size,
)
from storage.remote.segment_codec import CodecError, CodecManifest
from storage.remote.types import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from tests.storage.remote.conftest import Backend
from tests.storage.remote.segments import LocalSegment, SegmentFactory

CHUNK = 1000
MARKER = b"PLAINTEXT-MARKER-7f3a"


@pytest.fixture(scope="module")
def key_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Three RSA key pairs as PEM files: id -> (public, private)."""
    root = tmp_path_factory.mktemp("keys")
    out = {}
    for key_id in ("k1", "k2", "k3"):
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pub, priv = root / f"{key_id}-public.pem", root / f"{key_id}-private.pem"
        pub.write_bytes(private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        priv.write_bytes(private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        out[key_id] = (pub, priv)
    return out


def ring(key_files: dict[str, tuple[Path, Path]], active: str, pairs: dict[str, str],
         **extra: str) -> dict[str, str]:
    """Codec settings: encryption on with ``pairs`` (id -> which key files)."""
    settings = {"encryption.enabled": "true", "encryption.key.pair.id": active,
                "encryption.key.pairs": ",".join(pairs), "chunk.size": str(CHUNK), **extra}
    for key_id, files in pairs.items():
        settings[f"encryption.key.pairs.{key_id}.public.key.file"] = str(key_files[files][0])
        settings[f"encryption.key.pairs.{key_id}.private.key.file"] = str(key_files[files][1])
    return settings


def compressible_log(size: int, first_batch_codec: int = 0) -> bytes:
    """Repetitive bytes with MARKER in them; byte 22 is the first batch's codec."""
    rng = random.Random(size)
    words = [MARKER, b"order-id=", b"customer=", b"amount=", b"; "]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + str(rng.randrange(1000)).encode()
    out[22] = first_batch_codec
    return bytes(out[:size])


def with_log(seg: LocalSegment, content: bytes) -> LocalSegment:
    Path(seg.data.log_segment).write_bytes(content)
    seg.contents[LOG_SUFFIX] = content
    return LocalSegment(replace(seg.metadata, segment_size_in_bytes=len(content)), seg.data,
                        seg.contents)


def copied(codec: CodecStorage, seg: LocalSegment) -> RemoteLogSegmentMetadata:
    """Copy ``seg``; its metadata as the metadata manager then keeps it."""
    return replace(seg.metadata, custom_metadata=codec.copy_log_segment_data(seg.metadata,
                                                                             seg.data))


def stored_objects(backend: Backend, md: RemoteLogSegmentMetadata) -> dict[str, bytes]:
    """Every stored object of the segment, by suffix, read straight from the store."""
    out = {}
    for name in backend.stored(md):
        suffix = name.rsplit(".", 1)[1]
        if suffix == LOG_SUFFIX:
            size = expected_log_object_size(md)
            out[suffix] = backend.rsm.fetch_log_segment(
                replace(md, segment_size_in_bytes=size), 0)
        elif suffix == INDEXES_SUFFIX:
            out[suffix] = backend.rsm.fetch_combined_indexes(md)  # type: ignore[attr-defined]
        elif suffix == CODEC_MANIFEST_SUFFIX:
            out[suffix] = backend.rsm.fetch_codec_manifest(md)  # type: ignore[attr-defined]
        else:
            index_type = next(t for t, s in INDEX_SUFFIXES.items() if s == suffix)
            out[suffix] = backend.rsm.fetch_index(md, index_type)
    return out


def assert_reads_back(codec: CodecStorage | ChunkCache, md: RemoteLogSegmentMetadata,
                      seg: LocalSegment) -> None:
    plain = seg.log
    assert codec.fetch_log_segment(md, 0) == plain
    # Ranges inside one chunk, ending and starting on boundaries, across several.
    for start, end in [(0, 0), (5, 999), (999, 1000), (1000, 1999), (990, 3010),
                       (len(plain) - 1, len(plain) - 1), (2500, None), (1, 10**9)]:
        if start >= len(plain):
            continue
        want = plain[start:None if end is None else end + 1]
        assert codec.fetch_log_segment(md, start, end) == want, (start, end)
    for index_type in IndexType:
        if INDEX_SUFFIXES[index_type] in seg.contents:
            assert codec.fetch_index(md, index_type) == seg.index(index_type)
    combined = codec.fetch_combined_indexes(md)  # type: ignore[union-attr]
    assert combined == seg.contents["index"] + seg.contents["timeindex"]
    assert index_lengths(md) == (len(seg.contents["index"]), len(seg.contents["timeindex"]))


def test_compressed_and_encrypted_round_trip(backend: Backend, segments: SegmentFactory,
                                             key_files: dict[str, tuple[Path, Path]]) -> None:
    codec = CodecStorage(backend.rsm, ring(key_files, "k1", {"k1": "k1"},
                                           **{"compression.enabled": "true"}))
    seg = with_log(segments.make(), compressible_log(5 * CHUNK + 321))
    md = copied(codec, seg)
    assert_reads_back(codec, md, seg)

    stored = stored_objects(backend, md)
    assert set(stored) == {"log", "index", "timeindex", "txnindex", "snapshot",
                           "leader_epoch_checkpoint", "indexes", CODEC_MANIFEST_SUFFIX}
    for suffix, content in stored.items():
        assert MARKER not in content, suffix
        if suffix not in (CODEC_MANIFEST_SUFFIX, INDEXES_SUFFIX):
            assert content != seg.contents[suffix], suffix
    manifest = CodecManifest.from_json(stored[CODEC_MANIFEST_SUFFIX])
    log_layout = manifest.objects[LOG_SUFFIX]
    assert manifest.key_id == "k1" and log_layout.compressed
    assert (log_layout.size, log_layout.chunk_size, len(log_layout.stored)) == (
        len(seg.log), CHUNK, 6)
    assert stored_log_size(md) == len(stored[LOG_SUFFIX]) == log_layout.stored_size
    assert len(stored[LOG_SUFFIX]) < len(seg.log) / 2  # compressed, and then some

    codec.delete_log_segment_data(md)
    assert backend.stored(md) == []


def test_chunk_cache_holds_plain_bytes_over_the_codec(
        backend: Backend, segments: SegmentFactory,
        key_files: dict[str, tuple[Path, Path]]) -> None:
    codec = CodecStorage(backend.rsm, ring(key_files, "k1", {"k1": "k1"}))
    seg = with_log(segments.make(), compressible_log(6000))
    md = copied(codec, seg)
    cache = ChunkCache(codec, {"fetch.chunk.size": "4096"})
    try:
        assert_reads_back(cache, md, seg)
        assert cache.stats_copy().hits > 0
    finally:
        cache.close()


def test_compression_only_round_trip_and_heuristic(
        backend: Backend, segments: SegmentFactory) -> None:
    codec = CodecStorage(backend.rsm, {"compression.enabled": "true",
                                       "compression.heuristic.enabled": "true",
                                       "chunk.size": str(CHUNK)})
    plain = with_log(segments.make(), compressible_log(4000, first_batch_codec=0))
    already = with_log(segments.make(), compressible_log(4000, first_batch_codec=4))  # zstd
    md_plain, md_already = copied(codec, plain), copied(codec, already)
    assert_reads_back(codec, md_plain, plain)
    assert_reads_back(codec, md_already, already)
    layouts = {name: CodecManifest.from_json(stored_objects(backend, md)[
        CODEC_MANIFEST_SUFFIX]).objects for name, md in
        (("plain", md_plain), ("already", md_already))}
    assert layouts["plain"][LOG_SUFFIX].compressed
    assert stored_log_size(md_plain) is not None and stored_log_size(md_plain) < 2000
    # The heuristic leaves a .log of compressed batches alone (the indexes still compress).
    assert not layouts["already"][LOG_SUFFIX].compressed
    assert stored_log_size(md_already) == 4000
    assert layouts["already"]["timeindex"].compressed


def test_segments_copied_before_the_codec_stay_readable(
        backend: Backend, segments: SegmentFactory,
        key_files: dict[str, tuple[Path, Path]]) -> None:
    seg = segments.make(3000)
    md = replace(seg.metadata,
                 custom_metadata=backend.rsm.copy_log_segment_data(seg.metadata, seg.data))
    codec = CodecStorage(backend.rsm, ring(key_files, "k1", {"k1": "k1"},
                                           **{"compression.enabled": "true"}))
    assert stored_log_size(md) is None
    assert_reads_back(codec, md, seg)
    # And without any manifest at all (copied before manifests existed).
    assert codec.fetch_log_segment(replace(md, custom_metadata=None), 10, 20) == seg.log[10:21]


def test_turning_the_codec_off_keeps_transformed_segments_readable(
        backend: Backend, segments: SegmentFactory,
        key_files: dict[str, tuple[Path, Path]]) -> None:
    on = CodecStorage(backend.rsm, ring(key_files, "k1", {"k1": "k1"},
                                        **{"compression.enabled": "true"}))
    seg = with_log(segments.make(), compressible_log(2500))
    md = copied(on, seg)
    off = CodecStorage(backend.rsm, {k: v for k, v in ring(key_files, "k1", {"k1": "k1"}).items()
                                     if k != "encryption.enabled"})
    assert not off.encrypt and not off.compress
    assert_reads_back(off, md, seg)
    plain_seg = segments.make(500)
    assert stored_log_size(copied(off, plain_seg)) is None


def test_rotation_keeps_old_segments_readable_and_missing_or_wrong_keys_fail(
        backend: Backend, segments: SegmentFactory,
        key_files: dict[str, tuple[Path, Path]]) -> None:
    first = CodecStorage(backend.rsm, ring(key_files, "k1", {"k1": "k1"}))
    old = with_log(segments.make(), compressible_log(2500))
    md_old = copied(first, old)

    rotated = CodecStorage(backend.rsm, ring(key_files, "k2", {"k1": "k1", "k2": "k2"}))
    new = with_log(segments.make(), compressible_log(2600))
    md_new = copied(rotated, new)
    assert_reads_back(rotated, md_old, old)
    assert_reads_back(rotated, md_new, new)
    assert CodecManifest.from_json(stored_objects(backend, md_new)[
        CODEC_MANIFEST_SUFFIX]).key_id == "k2"

    without_k1 = CodecStorage(backend.rsm, ring(key_files, "k2", {"k2": "k2"}))
    assert without_k1.fetch_log_segment(md_new, 0) == new.log
    with pytest.raises(KeyRingError, match="'k1' is not in"):
        without_k1.fetch_log_segment(md_old, 0)
    # Id k1 now names other keys: the unwrap fails, nothing is decrypted.
    wrong_k1 = CodecStorage(backend.rsm, ring(key_files, "k2", {"k1": "k3", "k2": "k2"}))
    with pytest.raises(KeyRingError, match="does not unwrap") as raised:
        wrong_k1.fetch_index(md_old, IndexType.OFFSET)
    assert not raised.value.retriable
    no_ring = CodecStorage(backend.rsm, {})
    with pytest.raises(KeyRingError, match="no key ring"):
        no_ring.fetch_log_segment(md_old, 0, 10)


@pytest.mark.parametrize("settings", [
    {"compression.enabled": "true"},
    {"encryption.enabled": "true"},
    {"compression.enabled": "true", "encryption.enabled": "true"},
])
def test_a_tampered_chunk_is_an_error_never_other_bytes(
        backend: Backend, segments: SegmentFactory, key_files: dict[str, tuple[Path, Path]],
        settings: dict[str, str]) -> None:
    keys = ring(key_files, "k1", {"k1": "k1"}) if "encryption.enabled" in settings else {}
    codec = CodecStorage(backend.rsm, {**keys, "chunk.size": str(CHUNK), **settings})
    seg = with_log(segments.make(), compressible_log(3500))
    md = copied(codec, seg)
    stored = stored_objects(backend, md)
    manifest = CodecManifest.from_json(stored[CODEC_MANIFEST_SUFFIX])
    starts = manifest.objects[LOG_SUFFIX].stored_starts()
    tampered = bytearray(stored[LOG_SUFFIX])
    tampered[starts[2] + 5] ^= 0x01  # a byte in the middle of chunk 2
    backend.overwrite(md, LOG_SUFFIX, bytes(tampered))
    # Chunks 0-1 are intact and still read; any range touching chunk 2 fails.
    assert codec.fetch_log_segment(md, 0, 2 * CHUNK - 1) == seg.log[:2 * CHUNK]
    with pytest.raises(CodecError) as raised:
        codec.fetch_log_segment(md, 2 * CHUNK - 10, 2 * CHUNK + 10)
    assert not raised.value.retriable


def test_a_chunk_moved_to_another_place_fails_its_tag(
        backend: Backend, segments: SegmentFactory,
        key_files: dict[str, tuple[Path, Path]]) -> None:
    codec = CodecStorage(backend.rsm, ring(key_files, "k1", {"k1": "k1"}))
    seg = with_log(segments.make(), compressible_log(3000))  # three equal chunks
    md = copied(codec, seg)
    stored = stored_objects(backend, md)
    starts = CodecManifest.from_json(stored[CODEC_MANIFEST_SUFFIX]).objects[
        LOG_SUFFIX].stored_starts()
    log = stored[LOG_SUFFIX]
    swapped = log[starts[1]:starts[2]] + log[starts[0]:starts[1]] + log[starts[2]:]
    backend.overwrite(md, LOG_SUFFIX, swapped)
    with pytest.raises(CodecError, match="authentication tag"):
        codec.fetch_log_segment(md, 0, 10)


def test_load_storage_splits_settings_and_checks_them(
        tmp_path: Path, key_files: dict[str, tuple[Path, Path]]) -> None:
    settings = {"dir": str(tmp_path / "tier"), **ring(key_files, "k1", {"k1": "k1"})}
    inner, codec = split_settings(settings)
    assert inner == {"dir": str(tmp_path / "tier")}
    storage = load_storage("filesystem", settings)
    assert storage.encrypt and storage.keys is not None and storage.keys.active_id == "k1"
    assert storage.partition_prefix is not None  # the inner manager's extras pass through
    bad = [
        ({"compression.heuristic.enabled": "true"}, "compression.heuristic.enabled"),
        ({"encryption.enabled": "true"}, "encryption.key.pair.id"),
        ({**codec, "encryption.key.pair.id": "nope"}, "encryption.key.pair.id"),
        ({**codec, "encryption.key.pairs.k1.public.key.file": str(tmp_path / "missing.pem")},
         "k1.public.key.file"),
        ({**codec, "encryption.key.pairs.k1.private.key.file": str(key_files["k2"][0])},
         "k1.private.key.file"),
        ({"chunk.size": "0"}, "chunk.size"),
    ]
    for codec_settings, key in bad:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_storage("filesystem", {"dir": str(tmp_path / "tier"), **codec_settings})


def test_copy_leaves_no_temp_file_beside_the_local_segment(
        backend: Backend, segments: SegmentFactory) -> None:
    codec = CodecStorage(backend.rsm, {"compression.enabled": "true"})
    seg = segments.make(2000)
    copied(codec, seg)
    directory = Path(seg.data.log_segment).parent
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        Path(str(p)).name for p in (seg.data.log_segment, seg.data.offset_index,
                                    seg.data.time_index, seg.data.transaction_index,
                                    seg.data.producer_snapshot_index))


def test_custom_metadata_stays_small() -> None:
    """Kafka's remote.log.metadata.custom.metadata.max.bytes default is 128."""
    from storage.remote.naming import segment_manifest

    data = LogSegmentData("x", b"i" * 10_000_000, b"t" * 10_000_000, None, None, b"",
                          None)
    raw = segment_manifest(data, stored_log_size=2**40)
    assert len(raw) < 128 and json.loads(raw)["v"] == 3


def test_restored_metadata_reads_a_transformed_segment_named_from_a_listing(
        backend: Backend, segments: SegmentFactory,
        key_files: dict[str, tuple[Path, Path]]) -> None:
    """What ``tierd admin rebuild-metadata`` and the audits see of a transformed copy."""
    codec = CodecStorage(backend.rsm, ring(key_files, "k1", {"k1": "k1"},
                                           **{"compression.enabled": "true"}))
    seg = with_log(segments.make(transaction_index=False), compressible_log(3300))
    md = copied(codec, seg)
    listed = {o.name.suffix: o for o in backend.rsm.list_objects(  # type: ignore[attr-defined]
        backend.rsm.partition_prefix(md.topic_id_partition))  # type: ignore[attr-defined]
        if o.name is not None}
    assert listed[LOG_SUFFIX].size == expected_log_object_size(md) < len(seg.log)
    named = replace(md, segment_size_in_bytes=listed[LOG_SUFFIX].size, custom_metadata=None)
    restored = codec.restored_metadata(named)
    assert restored.segment_size_in_bytes == len(seg.log)
    assert restored.custom_metadata == md.custom_metadata
    assert_reads_back(codec, restored, seg)
    # A plain copy (no codec manifest object) comes back unchanged.
    plain = segments.make(700)
    plain_md = replace(plain.metadata, custom_metadata=backend.rsm.copy_log_segment_data(
        plain.metadata, plain.data))
    assert codec.restored_metadata(plain_md) == plain_md
