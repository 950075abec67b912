"""The record formats of ``__transaction_state``, byte for byte as Kafka writes them.

Key (``TransactionLogKey``, prefixed by its record type 0)::

    type int16 (0), transactionalId string

Value (``TransactionLogValue`` version 0, what Kafka writes at
transaction.version 0)::

    version int16 (0), producerId int64, producerEpoch int16,
    transactionTimeoutMs int32, transactionStatus int8 (TxnState id),
    transactionPartitions nullable array (int32 count, -1 = null) of
        (topic string, partitionIds array of int32),
    transactionLastUpdateTimestampMs int64, transactionStartTimestampMs int64

Version 1 is the same, flexible (compact strings and arrays, an empty
tagged-field section per partition entry) and followed by tagged fields:
PreviousProducerId (tag 0, read and ignored), NextProducerId (tag 1, -1 if
absent) and ClientTransactionVersion (tag 2, int16, 0 if absent). It is
written for the ids of transactions-v2 clients, so that their retried
EndTxn (one epoch below the bumped one) and an epoch overflow's next
producer id survive a coordinator move; other ids keep version 0.

Strings are int16-length UTF-8 (compact in version 1). Kafka writes a null
partition array for Empty and an array (possibly empty) otherwise; so do
we. A null value is a tombstone (the transactional id expired).
"""

from __future__ import annotations

import struct

from broker.transactions.state import NO_PRODUCER_ID, TxnMetadata, TxnState
from protocol.partition import TopicPartition

KEY_TYPE = 0
VALUE_VERSION = 0
FLEXIBLE_VALUE_VERSION = 1
# Tagged fields of value version 1.
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TXN_VERSION = 2
# ClientTransactionVersion of a transactions-v2 client.
_TV2 = 2

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


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _by_topic(txn: TxnMetadata) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def encode_value(txn: TxnMetadata) -> bytes:
    """Version 1 for a transactions-v2 client's id, else version 0."""
    flexible = txn.client_tv2 or txn.next_producer_id != NO_PRODUCER_ID
    out = bytearray(_I16.pack(FLEXIBLE_VALUE_VERSION if flexible else VALUE_VERSION))
    out += _I64.pack(txn.producer_id) + _I16.pack(txn.producer_epoch)
    out += _I32.pack(txn.timeout_ms) + _I8.pack(txn.state.value)
    by_topic = None if txn.state is TxnState.EMPTY else _by_topic(txn)
    if not flexible:
        out += _I32.pack(-1 if by_topic is None else len(by_topic))
        for topic, parts in (by_topic or {}).items():
            out += _string(topic) + _I32.pack(len(parts))
            out += b"".join(_I32.pack(p) for p in parts)
        out += _I64.pack(txn.last_update_timestamp) + _I64.pack(txn.start_timestamp)
        return bytes(out)
    out += _uvarint(0 if by_topic is None else len(by_topic) + 1)
    for topic, parts in (by_topic or {}).items():
        name = topic.encode("utf-8")
        out += _uvarint(len(name) + 1) + name + _uvarint(len(parts) + 1)
        out += b"".join(_I32.pack(p) for p in parts) + _uvarint(0)  # no tagged fields
    out += _I64.pack(txn.last_update_timestamp) + _I64.pack(txn.start_timestamp)
    tags = []
    if txn.next_producer_id != NO_PRODUCER_ID:
        tags.append((_TAG_NEXT_PRODUCER_ID, _I64.pack(txn.next_producer_id)))
    if txn.client_tv2:
        tags.append((_TAG_CLIENT_TXN_VERSION, _I16.pack(_TV2)))
    out += _uvarint(len(tags))
    for tag, data in tags:
        out += _uvarint(tag) + _uvarint(len(data)) + data
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

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise RecordFormatError("truncated or overlong varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def skip(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("truncated record")
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def string(self, flexible: bool = False) -> str:
        n = self.uvarint() - 1 if flexible else self.take(_I16)
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
    """Parse a value of version 0 or 1.

    Raises:
        RecordFormatError: unknown version or state, or malformed bytes.
    """
    r = _Reader(data)
    version = r.take(_I16)
    if version not in (VALUE_VERSION, FLEXIBLE_VALUE_VERSION):
        raise RecordFormatError(f"unsupported TransactionLogValue version {version}")
    flexible = version == FLEXIBLE_VALUE_VERSION
    producer_id = r.take(_I64)
    epoch = r.take(_I16)
    timeout_ms = r.take(_I32)
    status = r.take(_I8)
    try:
        state = TxnState(status)
    except ValueError:
        raise RecordFormatError(f"unknown transaction state {status}") from None
    partitions: set[TopicPartition] = set()
    topics = r.uvarint() - 1 if flexible else r.take(_I32)
    for _ in range(max(topics, 0)):
        topic = r.string(flexible)
        count = r.uvarint() - 1 if flexible else r.take(_I32)
        for _ in range(count):
            partitions.add((topic, r.take(_I32)))
        if flexible:
            _skip_tags(r)
    last_update = r.take(_I64)
    start = r.take(_I64)
    next_pid, client_tv2 = NO_PRODUCER_ID, False
    if flexible:
        for tag, raw in _tags(r):
            if tag == _TAG_NEXT_PRODUCER_ID and len(raw) == _I64.size:
                next_pid = _I64.unpack(raw)[0]
            elif tag == _TAG_CLIENT_TXN_VERSION and len(raw) == _I16.size:
                client_tv2 = _I16.unpack(raw)[0] >= _TV2
    if state is TxnState.EMPTY:
        partitions.clear()
    return TxnMetadata(transactional_id, producer_id, epoch, timeout_ms, state,
                       frozenset(partitions), start, last_update, client_tv2=client_tv2,
                       next_producer_id=next_pid)


def _tags(r: _Reader) -> list[tuple[int, bytes]]:
    return [(r.uvarint(), r.skip(r.uvarint())) for _ in range(r.uvarint())]


def _skip_tags(r: _Reader) -> None:
    _tags(r)
