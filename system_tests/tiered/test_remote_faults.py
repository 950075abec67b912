"""Remote storage failing under a live broker (S3 behind a fault-injecting
proxy in front of moto; the directory tier edited behind the broker's back).

* A copy that fails part-way (500 on a later object, or the connection reset
  in the middle of a multipart UploadPart) never reaches
  COPY_SEGMENT_FINISHED, leaves no objects or open uploads behind, keeps the
  local segment, and is tiered once the fault is cleared.
* A remote ``.log`` object that is missing, or corrupt, is answered with a
  clear per-partition error code - KAFKA_STORAGE_ERROR (56) or
  CORRUPT_MESSAGE (2) - never with records, while the other remote segments
  and the local data stay readable.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from system_tests.s3_fixtures import Fault, FaultProxy
from system_tests.tiered_helpers import (
    COPY_SEGMENT_FINISHED,
    COPY_SEGMENT_STARTED,
    CORRUPT_MESSAGE,
    DELETE_SEGMENT_FINISHED,
    EARLIEST_LOCAL,
    KAFKA_STORAGE_ERROR,
    LATEST_TIERED,
    NONE,
    RemoteTier,
    S3Tier,
    create_tiered_topic,
    decode_records,
    eventually,
    fetch_until_answer,
    list_offsets,
    local_segment_bases,
    metric,
    numbered_batches,
    offset_for,
    produce_batches,
    raw,
    read_all,
    read_metadata,
    start_tiered,
    wait_tiered,
)

MIB = 1024 * 1024

# Failed copy attempts to watch before clearing the fault (each has its own
# segment id, each must be cleaned up).
FAILED_ATTEMPTS = 2


def segment_stem(segment_id: object) -> str:
    """The ``<uuid>`` part of a remote object name (Kafka's Uuid.toString)."""
    raw_bytes = segment_id.bytes  # type: ignore[attr-defined]
    return base64.urlsafe_b64encode(raw_bytes).decode().rstrip("=")


# (fault, request filter, topic configs, batches, value size): a 500 on the
# .timeindex PUT, after the .log and .index went up, so the copy has partial
# objects to clean; and a reset in the middle of a multipart UploadPart of a
# .log larger than the (minimum, 5 MiB) part size, so an upload is left open:
# 1 MB batches in 7 MB segments make one closed 6 MB segment (two parts).
COPY_FAULTS = {
    "500-after-partial-copy": (Fault.ERROR_500, {"method": "PUT", "key_suffix": ".timeindex"},
                               {}, 4, 100),
    "reset-mid-upload-part": (Fault.RESET, {"method": "PUT", "query": "partNumber="},
                              {"segment_bytes": str(7_000_000), "max_message_bytes": str(2 * MIB)},
                              8, 1_000_000),
}


@pytest.mark.parametrize("case", sorted(COPY_FAULTS))
def test_failed_copy_is_cleaned_up_and_retried(request: pytest.FixtureRequest, tmp_path: Path,
                                               s3_tier_behind_proxy: S3Tier,
                                               fault_proxy: FaultProxy, topic: str,
                                               case: str) -> None:
    fault, where, configs, count, size = COPY_FAULTS[case]
    tier = s3_tier_behind_proxy
    broker = start_tiered(request, tmp_path / "broker", tier,
                          {"rsm.config.upload.part.size": str(5 * MIB)})
    rule = fault_proxy.inject(fault, **where)
    create_tiered_topic(broker, topic, **configs)
    batches = numbered_batches(count, size=size)
    with raw(broker) as client:
        bases = produce_batches(client, topic, 0, batches)
        first_segment = bases[0]

        def failed_attempts() -> list:
            return [(sid, s) for sid, s in read_metadata(client, topic).segments.items()
                    if s.start_offset == first_segment and s.states[-1] == DELETE_SEGMENT_FINISHED]

        eventually(lambda: len(failed_attempts()) >= FAILED_ATTEMPTS and rule.hits > 0,
                   lambda: f"{len(failed_attempts())} failed attempts recorded, "
                           f"{rule.hits} requests faulted")
        assert metric(broker, "RemoteCopyErrorsPerSec_total", topic=topic) >= FAILED_ATTEMPTS
        # No attempt ever finished, and nothing of a failed attempt is left.
        history = read_metadata(client, topic)
        assert not history.finished(), history
        left = tier.objects(topic) + tier.open_uploads(topic)
        for sid, _ in failed_attempts():
            stem = segment_stem(sid)
            # It did write something (a .log PUT, or a multipart upload) ...
            assert any(stem in target and method in ("PUT", "POST")
                       for method, target in list(fault_proxy.requests)), stem
            # ... and none of it is left.
            assert not [n for n in left if stem in n], (stem, left)
        # The data is all local and readable; nothing counts as tiered.
        segments = len(local_segment_bases(broker, topic))
        assert local_segment_bases(broker, topic)[0] == first_segment and segments >= 2
        assert offset_for(client, topic, EARLIEST_LOCAL) == 0
        assert offset_for(client, topic, LATEST_TIERED) == -1
        assert read_all(client, topic) == [(o, b[0]) for o, b in zip(bases, batches, strict=True)]

        fault_proxy.clear()
        wait_tiered(broker, tier, topic, segments - 1)
        eventually(lambda: len(tier.log_objects(topic)) == segments - 1,
                   lambda: f"remote: {tier.log_objects(topic)}")
        assert not tier.open_uploads(topic)
        finished = read_metadata(client, topic).finished()
        assert sorted(s.start_offset for s in finished) == sorted(
            tier.start_offset_of(n) for n in tier.log_objects(topic))
        assert all(s.states == [COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED] for s in finished)
        assert offset_for(client, topic, EARLIEST_LOCAL) > 0
        assert read_all(client, topic) == [(o, b[0]) for o, b in zip(bases, batches, strict=True)]


def flip_middle(data: bytes) -> bytes:
    """Flip 16 bytes in the middle of the object (inside a batch's records)."""
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 16]) + data[middle + 16:]


def bad_length(data: bytes) -> bytes:
    """Set the first batch's length field (bytes 8-11) past the end of the object."""
    return data[:8] + b"\x7f\xff\xff\xff" + data[12:]


# damage -> (edit of the .log object or None to delete it, the error code a fetch must get)
DAMAGE = {
    "missing": (None, KAFKA_STORAGE_ERROR),
    "corrupt-records": (flip_middle, CORRUPT_MESSAGE),
    "corrupt-batch-length": (bad_length, CORRUPT_MESSAGE),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_missing_or_corrupt_remote_object_is_a_clear_error(request: pytest.FixtureRequest,
                                                           tmp_path: Path, tier: RemoteTier,
                                                           topic: str, damage: str) -> None:
    edit, want = DAMAGE[damage]
    broker = start_tiered(request, tmp_path / "broker", tier)
    create_tiered_topic(broker, topic)
    batches = numbered_batches(4, 3, size=300)
    with raw(broker) as client:
        bases = produce_batches(client, topic, 0, batches)
        wait_tiered(broker, tier, topic, 3)
        victim = next(n for n in tier.log_objects(topic) if tier.start_offset_of(n) == bases[1])
        if edit is None:
            tier.delete(victim)
        else:
            tier.write(victim, edit(tier.read(victim)))

        # Every offset of the damaged segment: the error, never records.
        for offset in range(bases[1], bases[2]):
            got = fetch_until_answer(client, topic, 0, offset)
            assert (got.error_code, got.records) == (want, b""), (offset, got)
        # A timestamp lookup that needs the damaged segment fails too, rather
        # than answering an offset from a later segment.
        for rec in batches[1]:
            error, offset, _ = list_offsets(client, topic, {0: rec.timestamp})[0]
            assert error != NONE and offset == -1, (
                f"ListOffsets({rec.timestamp}) answered offset {offset} (error {error}); "
                f"the record with that timestamp is at {bases[1] + batches[1].index(rec)} "
                f"in the damaged remote segment")
        # The segments around it still read back, remote and local.
        for b in (0, 2, 3):
            got = fetch_until_answer(client, topic, 0, bases[b])
            assert got.error_code == NONE and got.batches, (b, got)
            assert [r for _, r in decode_records(got.batches[0])] == batches[b]
    assert metric(broker, "RemoteFetchErrorsPerSec_total", topic=topic) > 0
