"""ListOffsets lookups on one partition: latest (-1), earliest (-2), max
timestamp (-3), earliest local (-4, v8+), latest tiered (-5, v9+), earliest
pending upload (-6, v11+, KIP-1023), and lookups by timestamp (Kafka's
fetchOffsetForTimestamp).

On a topic that is not tiered, -4 is the log start offset and -5 answers
"none" (offset -1), as Kafka does. On a tiered topic -2 is the start of the
log including remote data, -4 the first offset on local disk, -5 the last
offset copied to the remote tier (with its leader epoch), -6 the first
offset not copied yet (where a KIP-1023 follower starts its local log);
timestamps are looked up in the remote time indexes first, then locally; -3
considers both.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaApiError
from replication.partition import Partition
from storage.remote.lookups import RemoteLookups

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
# Minimum request version at which each special timestamp is valid.
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                EARLIEST_PENDING_UPLOAD: 11}
NONE = (-1, -1, -1)


async def lookup(part: Partition, remote: RemoteLookups | None, timestamp: int,
                 version: int, committed: bool) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) for one partition.

    Raises:
        KafkaApiError: UNSUPPORTED_VERSION for a special timestamp the
            request version does not allow; KAFKA_STORAGE_ERROR if a remote
            lookup cannot read the tier.
    """
    lg = part.log
    if timestamp in _MIN_VERSION and version < _MIN_VERSION[timestamp]:
        raise KafkaApiError(ErrorCode.UNSUPPORTED_VERSION, f"timestamp {timestamp} needs "
                                                           f"v{_MIN_VERSION[timestamp]}")
    if timestamp == LATEST:
        offset = part.last_stable_offset if committed else part.high_watermark
        return offset, -1, lg.epochs.latest_epoch
    if timestamp == EARLIEST:
        start = lg.log_start_offset
        return start, -1, lg.epochs.epoch_for_offset(start)
    if timestamp == EARLIEST_LOCAL:
        start = lg.local_log_start_offset
        return start, -1, lg.epochs.epoch_for_offset(start)
    if timestamp == LATEST_TIERED:
        tiered = lg.highest_tiered_offset
        if not lg.config.remote_storage_enable or tiered < 0:
            return NONE
        return tiered, -1, lg.epochs.epoch_for_offset(tiered)
    if timestamp == EARLIEST_PENDING_UPLOAD:
        return earliest_pending_upload(part)
    if timestamp < 0 and timestamp != MAX_TIMESTAMP:
        raise KafkaApiError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    found = await _search(part, remote, timestamp)
    if found is None or found[0] >= (part.last_stable_offset if committed else part.high_watermark):
        return NONE
    return found[0], found[1], lg.epochs.epoch_for_offset(found[0])


def earliest_pending_upload(part: Partition) -> tuple[int, int, int]:
    """-6: the first offset not in the remote tier yet, with its leader epoch.

    Nothing tiered yet: the log start when the whole log is still local (all of
    it is pending), "none" when the local log starts above it (segments were
    tiered that this leader has not learnt of yet: it cannot tell where the
    tier ends). A topic that is not tiered: "none", as for -5. Never below
    the log start (DeleteRecords or remote retention may have moved it past
    the tier's end)."""
    lg = part.log
    if not lg.config.remote_storage_enable:
        return NONE
    tiered = lg.highest_tiered_offset
    if tiered < 0:
        if lg.local_log_start_offset != lg.log_start_offset:
            return NONE
        offset = lg.log_start_offset
    else:
        offset = max(tiered + 1, lg.log_start_offset)
    return offset, -1, lg.epochs.epoch_for_offset(offset)


async def _search(part: Partition, remote: RemoteLookups | None,
                  timestamp: int) -> tuple[int, int] | None:
    """Remote lookups answer only for a partition this broker leads with
    tiering on (None otherwise), so the local log decides the rest."""
    lg = part.log
    tp = part.tp
    if not lg.config.remote_storage_enable:
        remote = None
    if timestamp == MAX_TIMESTAMP:
        local = lg.max_timestamp_offset()
        if remote is not None:
            remote_max = remote.remote_max_timestamp(tp)
            if remote_max is not None and (local is None or remote_max > local[1]):
                return await remote.offset_for_timestamp(tp, remote_max)
        return local
    if remote is not None:
        found = await remote.offset_for_timestamp(tp, timestamp)
        if found is not None:
            return found
    return lg.offset_for_timestamp(timestamp)
