"""Transaction markers: the control records that end a transaction (KIP-98).

A marker is a batch of its own with the control and transactional bits set,
the producer id and epoch of the transaction, no sequence (-1) and exactly
one record:

    key   = version int16 (0), type int16 (0 = ABORT, 1 = COMMIT)
    value = version int16 (0), coordinatorEpoch int32

Other control types (2 = LEADER_CHANGE, 3+ = KRaft snapshot records) share
the key layout; ``decode_marker`` answers None for them, so a reader skips
what it does not understand, as Kafka's ``EndTransactionMarker`` does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol import records
from protocol.errors import ErrorCode, KafkaApiError

CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0
ABORT = 0
COMMIT = 1
# The attributes of every marker batch: control | transactional, no compression.
MARKER_ATTRIBUTES = records.ATTR_CONTROL | records.ATTR_TRANSACTIONAL

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    committed: bool
    coordinator_epoch: int


def encode_key(committed: bool) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, COMMIT if committed else ABORT)


def encode_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)


def decode_marker(key: bytes | None, value: bytes | None) -> EndTxnMarker | None:
    """The marker a control record carries; None for other control types.

    Raises:
        KafkaApiError: CORRUPT_MESSAGE for a marker whose bytes are too short.
    """
    if key is None or len(key) < _KEY.size:
        raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "control record key too short")
    _, kind = _KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < _VALUE.size:
        raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "transaction marker value too short")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return EndTxnMarker(kind == COMMIT, coordinator_epoch)


def read_marker(buf: bytes | bytearray | memoryview, header: records.BatchHeader
                ) -> EndTxnMarker | None:
    """The marker in the control batch ``header`` of ``buf`` (None: not a marker).

    Raises:
        KafkaApiError: CORRUPT_MESSAGE if the batch does not decode.
    """
    decoded = records.decode_records(buf, header)
    if len(decoded) != 1:
        raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, "control batch must hold one record")
    return decode_marker(decoded[0].key, decoded[0].value)


def marker_batch(producer_id: int, producer_epoch: int, committed: bool,
                 coordinator_epoch: int, timestamp: int) -> bytes:
    """A marker batch ready for append (offset 0, leader epoch -1 until assigned)."""
    return records.build_batch(
        [(encode_key(committed), encode_value(coordinator_epoch))], timestamp=timestamp,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
        attributes=MARKER_ATTRIBUTES)
