"""The checks a produced record set must pass against its topic's config
before the log assigns it offsets, as in Kafka's LogValidator.

Theory of operation. ``records.validate_for_append`` (protocol) has already
checked the bytes themselves: framing, CRCs, sizes. What is left depends on
the topic and on who is appending:

- with message.timestamp.type=CreateTime, every data batch's timestamps
  must lie within message.timestamp.before.max.ms / after.max.ms of now
  (LogAppendTime overwrites them, so nothing is checked);
- a compacted topic keeps the last record per key, so a client's record
  without a key is refused (the coordinators' appends are not checked).

Control batches are never checked. It is apart from ``storage.log.log``
because these are pure functions of the bytes, the config and the clock:
they touch no log state.

Error handling: a failed check raises ``KafkaApiError`` with the code the
producer gets back (INVALID_TIMESTAMP, INVALID_RECORD); nothing is appended.
"""

from __future__ import annotations

from config.topic import LogConfig
from protocol import record_filter, records
from protocol.errors import ErrorCode, KafkaApiError
from storage.log.producer_state import AppendOrigin


def check_produced(data: bytearray, headers: list[records.BatchHeader], config: LogConfig,
                   now: int, origin: AppendOrigin, topic_partition: str) -> None:
    """Check ``data`` (parsed as ``headers``) against ``config`` at ``now``.

    Raises:
        KafkaApiError: INVALID_TIMESTAMP, a timestamp outside
            message.timestamp.before/after.max.ms; INVALID_RECORD, a record
            without a key in ``topic_partition`` of a compacted topic.
    """
    if not config.log_append_time:
        _check_timestamps(headers, config, now)
    if config.compact and origin is AppendOrigin.CLIENT:
        _check_keys(data, headers, topic_partition)


def _check_keys(data: bytearray, headers: list[records.BatchHeader],
                topic_partition: str) -> None:
    """A compacted log keeps the last record per key: a record without one is refused."""
    for h in headers:
        if h.is_control:
            continue
        body = record_filter.records_body(data, h)
        if any(r.key is None for r in record_filter.scan_records(body, h.records_count)):
            raise KafkaApiError(
                ErrorCode.INVALID_RECORD,
                "Compacted topic cannot accept message without key in topic partition "
                f"{topic_partition}.")


def _check_timestamps(headers: list[records.BatchHeader], config: LogConfig, now: int) -> None:
    lo = now - config.timestamp_before_max_ms
    hi = now + config.timestamp_after_max_ms
    for h in headers:
        if h.is_control:
            continue
        if h.max_timestamp > hi or (h.base_timestamp < lo and h.base_timestamp >= 0):
            raise KafkaApiError(ErrorCode.INVALID_TIMESTAMP,
                                f"timestamp {h.max_timestamp} outside [{lo}, {hi}]")
