"""Fetch for consumers, with the delayed-fetch wait (max_wait_ms / min_bytes).

Theory of operation: read every requested partition once. If the response
already has min_bytes, or an error, or the client would not wait, answer.
Otherwise park on the partitions' append notifications until data arrives or
max_wait_ms passes, then read again. An append wakes the fetch at once, so
end-to-end latency is the time to append plus one read, not the max wait.

Tiered partitions: a consumer fetch below the local log start reads from the
remote tier. Unlike Kafka <= 4.1 (KAFKA-14915), every partition of the request
that needs remote data gets it: the reads run concurrently, each within its
share of fetch.max.bytes, and the response waits for them at most
remote.fetch.max.wait.ms (KIP-1018). A partition whose remote read did not
finish by then is answered empty without error (its high watermark tells the
client there is more), and the client's retry joins the read still in flight.
A follower gets OFFSET_MOVED_TO_TIERED_STORAGE and rebuilds from the tier.

Fetch sessions (KIP-227): tierd answers every fetch as a full, session-less
fetch (session id 0), which the protocol defines as correct; clients then
keep sending full requests. A request naming a session id we never gave out
gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import uuid
from typing import Any

import trio
from kafka.protocol.consumer import FetchRequest, FetchResponse

from broker.context import BrokerContext
from broker.handlers.common import check_leader_epoch
from protocol import records
from protocol.api import RequestHeader
from protocol.errors import ErrorCode, KafkaApiError
from replication.partition import Partition

READ_COMMITTED = 1
# Topic-id based fetch starts at v13.
_TOPIC_ID_VERSION = 13


class _Wanted:
    __slots__ = ("topic", "topic_id", "partition", "offset", "max_bytes", "epoch", "error")

    def __init__(self, topic: str, topic_id: uuid.UUID | None, p: Any,
                 error: ErrorCode = ErrorCode.NONE) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition: int = p.partition
        self.offset: int = p.fetch_offset
        self.max_bytes: int = p.partition_max_bytes
        self.epoch: int = p.current_leader_epoch
        self.error = error


async def handle_fetch(ctx: BrokerContext, header: RequestHeader, req: Any) -> Any:
    v = header.api_version
    resp = FetchResponse[v]
    if req.session_id != 0:
        ctx.metrics.error("Fetch", ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        return resp(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                    session_id=0, responses=[])
    wanted = _resolve(ctx, req, v)
    committed = req.isolation_level == READ_COMMITTED
    deadline = trio.current_time() + max(req.max_wait_ms, 0) / 1000
    consumer = getattr(req, "replica_id", -1) < 0
    while True:
        results, total, any_error, remote = _read_all(ctx, wanted, req.max_bytes, committed,
                                                      consumer)
        remote_aborted: dict[int, list[Any]] = {}
        if remote:
            got, remote_error = await _read_remote(ctx, wanted, results, remote,
                                                   req.max_bytes, total,
                                                   remote_aborted if committed else None)
            total += got
            any_error = any_error or remote_error
        if total >= req.min_bytes or any_error or remote or trio.current_time() >= deadline:
            break
        event = trio.Event()
        tps = [(w.topic, w.partition) for w in wanted]
        ctx.replicas.waiters.watch(tps, event)
        try:
            with trio.move_on_at(deadline):
                await event.wait()
        finally:
            ctx.replicas.waiters.unwatch(tps, event)
    return _build(ctx, resp, v, wanted, results, committed, remote_aborted)


def _resolve(ctx: BrokerContext, req: Any, v: int) -> list[_Wanted]:
    wanted = []
    for t in req.topics:
        if v >= _TOPIC_ID_VERSION:
            info = ctx.store.by_id.get(t.topic_id)
            name = info.name if info else ""
            err = ErrorCode.NONE if info else ErrorCode.UNKNOWN_TOPIC_ID
            wanted += [_Wanted(name, t.topic_id, p, err) for p in t.partitions]
        else:
            wanted += [_Wanted(t.topic, None, p) for p in t.partitions]
    return wanted


def _read_all(ctx: BrokerContext, wanted: list[_Wanted], max_bytes: int, committed: bool,
              consumer: bool) -> tuple[list[tuple[ErrorCode, bytes]], int, bool, list[int]]:
    """One local pass; returns results, bytes, whether any error, and the
    indexes of partitions that need the remote tier."""
    results: list[tuple[ErrorCode, bytes]] = []
    total = 0
    any_error = False
    remote: list[int] = []
    for i, w in enumerate(wanted):
        if w.error:
            results.append((w.error, b""))
            any_error = True
            continue
        budget = min(w.max_bytes, max(max_bytes - total, 0))
        try:
            part = ctx.replicas.partition((w.topic, w.partition))
            check_leader_epoch(part, w.epoch)
            _, got = ctx.replicas.read((w.topic, w.partition), w.offset, budget, committed,
                                       min_one_batch=total == 0)
        except KafkaApiError as exc:
            results.append((exc.code, b""))
            if (exc.code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE and consumer
                    and ctx.replicas.remote is not None):
                remote.append(i)
            else:
                any_error = True
            continue
        results.append((ErrorCode.NONE, got.data))
        total += len(got.data)
    return results, total, any_error, remote


async def _read_remote(ctx: BrokerContext, wanted: list[_Wanted],
                       results: list[tuple[ErrorCode, bytes]], remote: list[int],
                       max_bytes: int, total: int,
                       aborted: dict[int, list[Any]] | None) -> tuple[int, bool]:
    """Read every remote partition concurrently; fills ``results`` in place,
    and for read_committed (``aborted`` not None) the partitions' aborted
    transactions from the remote transaction indexes.

    Returns:
        (bytes read, whether any partition got an error).
    """
    rlm = ctx.replicas.remote
    assert rlm is not None
    deadline = trio.current_time() + ctx.config["remote.fetch.max.wait.ms"] / 1000
    budget = max(max_bytes - total, 0)
    jobs = []
    for n, i in enumerate(remote):
        share = min(wanted[i].max_bytes, budget)
        budget -= share
        jobs.append((i, share, total == 0 and n == 0))
    errors = []

    async def one(i: int, share: int, min_one: bool) -> None:
        w = wanted[i]
        try:
            data = await rlm.read((w.topic, w.partition), w.offset, share, min_one, deadline)
            if aborted is not None and data:
                last = max(h.last_offset for h in records.iter_headers(data))
                aborted[i] = await rlm.collect_aborted((w.topic, w.partition), w.offset, last + 1)
            results[i] = (ErrorCode.NONE, data or b"")
        except KafkaApiError as exc:
            results[i] = (exc.code, b"")
            errors.append(exc.code)

    async with trio.open_nursery() as nursery:
        for job in jobs:
            nursery.start_soon(one, *job)
    return sum(len(results[i][1]) for i in remote), bool(errors)


def _build(ctx: BrokerContext, resp: Any, v: int, wanted: list[_Wanted],
           results: list[tuple[ErrorCode, bytes]], committed: bool,
           remote_aborted: dict[int, list[Any]]) -> Any:
    topic_cls = resp.FetchableTopicResponse
    part_cls = topic_cls.PartitionData
    by_topic: dict[tuple[str, uuid.UUID | None], list[Any]] = {}
    for i, (w, (code, data)) in enumerate(zip(wanted, results, strict=True)):
        part = ctx.replicas.partitions.get((w.topic, w.partition))
        hw = part.high_watermark if part else -1
        lso = part.last_stable_offset if part else -1
        start = part.log.log_start_offset if part else -1
        if code:
            ctx.metrics.error("Fetch", code)
        elif data:
            ctx.metrics.bytes_out.labels(w.topic).inc(len(data))
        by_topic.setdefault((w.topic, w.topic_id), []).append(part_cls(
            partition_index=w.partition, error_code=code, high_watermark=hw,
            last_stable_offset=lso, log_start_offset=start,
            aborted_transactions=(
                _aborted(part_cls, part, w.offset, data, remote_aborted.get(i))
                if committed else None),
            preferred_read_replica=-1,
            records=data))
    topics = [topic_cls(topic=name, topic_id=tid, partitions=parts)
              for (name, tid), parts in by_topic.items()]
    return resp(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)


def _aborted(part_cls: Any, part: Partition | None, offset: int, data: bytes,
             remote: list[Any] | None) -> list[Any]:
    """Aborted transactions overlapping the batches in ``data`` (read_committed);
    ``remote`` when the data came from the remote tier (already collected)."""
    if remote is not None:
        return [part_cls.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                for t in remote]
    last = -1
    for header in records.iter_headers(data):
        last = header.last_offset
    if part is None or last < offset:
        return []
    return [part_cls.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
            for t in part.log.collect_aborted(offset, last + 1)]


HANDLERS = {FetchRequest.API_KEY: handle_fetch}
