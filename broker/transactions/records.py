"""The record formats of ``__transaction_state``, byte for byte as Kafka writes them.

Key (``TransactionLogKey``, prefixed by its record type 0)::

    type int16 (0), transactionalId string

Value (``TransactionLogValue`` version 0, what Kafka writes unless
transaction version 2 is enabled)::

    version int16 (0), producerId int64, producerEpoch int16,
    transactionTimeoutMs int32, transactionStatus int8 (TxnState id),
    transactionPartitions nullable array (int32 count, -1 = null) of
        (topic string, partitionIds array of int32),
    transactionLastUpdateTimestampMs int64, transactionStartTimestampMs int64

Strings are int16-length UTF-8. Kafka writes a null partition array for
Empty and an array (possibly empty) otherwise; so do we. A null value is a
tombstone (the transactional id expired). Version 1 (flexible, with tagged
fields) values are rejected as ``RecordFormatError``; the loader logs and
skips them.
"""

from __future__ import annotations

import struct

from broker.transactions.state import TxnMetadata, TxnState
from protocol.partition import TopicPartition

KEY_TYPE = 0
VALUE_VERSION = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value of __transaction_state that we cannot parse."""


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_TYPE) + _string(transactional_id)


def encode_value(txn: TxnMetadata) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _I64.pack(txn.producer_id) + _I16.pack(txn.producer_epoch)
    out += _I32.pack(txn.timeout_ms) + _I8.pack(txn.state.value)
    if txn.state is TxnState.EMPTY:
        out += _I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out += _I32.pack(len(by_topic))
        for topic, parts in by_topic.items():
            out += _string(topic) + _I32.pack(len(parts))
            out += b"".join(_I32.pack(p) for p in parts)
    out += _I64.pack(txn.last_update_timestamp) + _I64.pack(txn.start_timestamp)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.data):
            raise RecordFormatError("truncated record")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def string(self) -> str:
        n = self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("bad string length")
        try:
            text = self.data[self.pos : self.pos + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"bad string: {exc}") from None
        self.pos += n
        return text


def decode_key(data: bytes) -> str:
    """The transactional id of a key.

    Raises:
        RecordFormatError: unknown key type or malformed bytes.
    """
    r = _Reader(data)
    kind = r.take(_I16)
    if kind != KEY_TYPE:
        raise RecordFormatError(f"unknown transaction log key type {kind}")
    return r.string()


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    """Parse a value of version 0.

    Raises:
        RecordFormatError: unknown version or state, or malformed bytes.
    """
    r = _Reader(data)
    version = r.take(_I16)
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unsupported TransactionLogValue version {version}")
    producer_id = r.take(_I64)
    epoch = r.take(_I16)
    timeout_ms = r.take(_I32)
    status = r.take(_I8)
    try:
        state = TxnState(status)
    except ValueError:
        raise RecordFormatError(f"unknown transaction state {status}") from None
    partitions: set[TopicPartition] = set()
    for _ in range(max(r.take(_I32), 0)):
        topic = r.string()
        for _ in range(r.take(_I32)):
            partitions.add((topic, r.take(_I32)))
    last_update = r.take(_I64)
    start = r.take(_I64)
    if state is TxnState.EMPTY:
        partitions.clear()
    return TxnMetadata(transactional_id, producer_id, epoch, timeout_ms, state,
                       frozenset(partitions), start, last_update)
