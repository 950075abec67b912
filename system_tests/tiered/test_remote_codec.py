"""Compressed and encrypted remote segments (rsm.config.compression.enabled,
rsm.config.encryption.*), against the directory tier and S3 (moto over HTTP).

One broker per tier: records with a plaintext marker are tiered, every
object in the store is checked to be free of the marker (and the .log
objects to be compressed), a tampered chunk answers the fetch with
KAFKA_STORAGE_ERROR (counted, logged) and never with records, and a real
consumer reads everything back cold. Then the key pair is rotated across a
restart: new segments use the new pair, the old ones still read with the
old one, and dropping the old pair fails only its segments.

On the directory tier alone, ``tierd admin rebuild-metadata`` restores lost
metadata of encrypted segments from their codec manifest objects.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from protocol.errors import ErrorCode
from system_tests.admin.tool import run_admin
from system_tests.tiered_helpers import (
    TIER_TIMEOUT_S,
    FsTier,
    Rec,
    RemoteTier,
    build_batch,
    create_tiered_topic,
    eventually,
    fetch_until_answer,
    lose_remote_metadata,
    metric,
    produce_batches,
    raw,
    read_all,
    start_tiered,
    store_args,
    wait_tiered,
)

MARKER = b"PLAINTEXT-MARKER-c0dec"
CHUNK = 4096
PER_BATCH = 40  # records of ~250 bytes: ~10 KB per batch, one batch per segment


def write_key_pair(directory: Path, key_id: str) -> dict[str, str]:
    """An RSA pair as PEM files; the broker settings naming them."""
    directory.mkdir(parents=True, exist_ok=True)
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_file, private_file = directory / f"{key_id}.pub.pem", directory / f"{key_id}.pem"
    public_file.write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    private_file.write_bytes(private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    prefix = f"rsm.config.encryption.key.pairs.{key_id}"
    return {f"{prefix}.public.key.file": str(public_file),
            f"{prefix}.private.key.file": str(private_file)}


def batches(first: int, count: int) -> list[list[Rec]]:
    now = int(time.time() * 1000)
    return [[Rec(None, b"%s order=%d-%d amount=%d; " % (MARKER, b, i, i * 7) * 5, now)
             for i in range(PER_BATCH)] for b in range(first, first + count)]


def consume_all(bootstrap: str, topic: str, expected: int, group: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIER_TIMEOUT_S
        while len(got) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def manifests(tier: RemoteTier, topic: str) -> dict[str, dict]:  # type: ignore[type-arg]
    """The codec manifest of each tiered segment, by its .log object's name."""
    return {name: json.loads(tier.read(name.removesuffix(".log") + ".rsm_manifest"))
            for name in tier.log_objects(topic)}


def test_segments_are_stored_compressed_and_encrypted_and_read_back_cold(
        request: pytest.FixtureRequest, tmp_path: Path, tier: RemoteTier, topic: str) -> None:
    k1 = write_key_pair(tmp_path / "keys", "k1")
    codec = {"rsm.config.compression.enabled": "true", "rsm.config.encryption.enabled": "true",
             "rsm.config.chunk.size": str(CHUNK), "rsm.config.encryption.key.pair.id": "k1",
             "rsm.config.encryption.key.pairs": "k1", **k1}
    broker = start_tiered(request, tmp_path / "broker", tier, codec)
    create_tiered_topic(broker, topic)
    first = batches(0, 5)
    with raw(broker) as client:
        produce_batches(client, topic, 0, first)
    logs = wait_tiered(broker, tier, topic, 4)

    objects = tier.objects(topic)
    assert {n.rsplit(".", 1)[1] for n in objects} >= {"log", "index", "rsm_manifest"}
    for name in objects:
        assert MARKER not in tier.read(name), name
    plain_size = len(build_batch(first[0]))
    for name, manifest in manifests(tier, topic).items():
        assert manifest["encryption"]["key_pair_id"] == "k1"
        layout = manifest["objects"]["log"]
        assert layout["zstd"] and layout["size"] == plain_size
        assert len(tier.read(name)) == sum(layout["stored"]) < plain_size / 3, name

    # A flipped byte in a stored chunk: an error for the fetch, never records.
    victim = logs[0]
    original = tier.read(victim)
    tampered = bytearray(original)
    tampered[len(tampered) // 2] ^= 0x20
    tier.write(victim, bytes(tampered))
    with raw(broker) as client:
        got = fetch_until_answer(client, topic, 0, 0)
    assert got.error_code == ErrorCode.KAFKA_STORAGE_ERROR and not got.records, got
    assert metric(broker, "RemoteFetchDecodeErrorsPerSec_total", topic=topic) >= 1
    eventually(lambda: "cannot decode remote segment" in broker.log_tail(),
               lambda: "no log line for the failed decode")
    tier.write(victim, original)

    values = [r.value for b in first for r in b]
    assert consume_all(broker.bootstrap, topic, len(values), f"g1-{topic}") == values

    # Rotation: k2 becomes the active pair, k1 stays in the ring for old segments.
    broker.overrides.update({"rsm.config.encryption.key.pair.id": "k2",
                             "rsm.config.encryption.key.pairs": "k1,k2",
                             **write_key_pair(tmp_path / "keys", "k2")})
    broker.restart()
    second = batches(5, 3)
    with raw(broker) as client:
        produce_batches(client, topic, 0, second)
    wait_tiered(broker, tier, topic, 7)
    key_ids = [m["encryption"]["key_pair_id"] for m in manifests(tier, topic).values()]
    assert key_ids == ["k1"] * 4 + ["k2"] * 3, key_ids
    values += [r.value for b in second for r in b]
    assert consume_all(broker.bootstrap, topic, len(values), f"g2-{topic}") == values

    # k1 leaves the ring: its segments fail to read with a clear error (the
    # broker stays up and serves the k2 segments).
    del broker.overrides["rsm.config.encryption.key.pairs.k1.private.key.file"]
    broker.overrides["rsm.config.encryption.key.pairs"] = "k2"
    broker.restart()
    with raw(broker) as client:
        lost = fetch_until_answer(client, topic, 0, 0)
        kept = fetch_until_answer(client, topic, 0, 5 * PER_BATCH)
    assert lost.error_code == ErrorCode.KAFKA_STORAGE_ERROR and not lost.records, lost
    assert kept.error_code == ErrorCode.NONE and kept.records, kept
    assert metric(broker, "RemoteFetchDecodeErrorsPerSec_total", topic=topic) >= 1
    eventually(lambda: "key pair 'k1' is not in" in broker.log_text(),
               lambda: "no log line naming the missing key pair")
    assert broker.is_running()


def test_rebuild_metadata_restores_encrypted_segments(request: pytest.FixtureRequest,
                                                      tmp_path: Path, topic: str) -> None:
    tier = FsTier(tmp_path / "remote")
    codec = {"rsm.config.compression.enabled": "true", "rsm.config.encryption.enabled": "true",
             "rsm.config.encryption.key.pair.id": "k1", "rsm.config.encryption.key.pairs": "k1",
             **write_key_pair(tmp_path / "keys", "k1")}
    broker = start_tiered(request, tmp_path / "broker", tier, codec)
    create_tiered_topic(broker, topic)
    produced = batches(0, 4)
    with raw(broker) as client:
        produce_batches(client, topic, 0, produced)
    wait_tiered(broker, tier, topic, 3)
    assert broker.stop() == 0
    lose_remote_metadata(broker.data_dir)
    broker.start()

    store = [*store_args(tier), *(a for k, v in codec.items() for a in ("--override", f"{k}={v}"))]
    res = run_admin(broker.bootstrap, "--json", "rebuild-metadata", *store, "--execute",
                    "--below-log-start")
    assert res.returncode == 0, (res.stdout, res.stderr)
    rebuilt = res.json()["segments"]
    assert [s["action"] for s in rebuilt] == ["published"] * 3, rebuilt
    # The plain sizes, from the codec manifests (the stored objects are smaller).
    assert {s["size"] for s in rebuilt} == {len(build_batch(produced[0]))}
    with raw(broker) as client:
        assert [r.value for _, r in read_all(client, topic)] == [
            r.value for b in produced for r in b]
