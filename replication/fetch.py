"""The fetch path: local reads, remote-tier reads and the delayed-fetch wait.

Theory of operation: read every requested partition once. If the result
already has min_bytes, or an error, or the client would not wait, answer.
Otherwise park in the delayed-fetch purgatory until a partition's data
becomes readable (a consumer is woken by its high watermark advancing, a
follower by the leader's log end advancing) or max_wait_ms passes, then
read again. A wake-up comes at once, so end-to-end latency is the time to
append plus one read, not the max wait.

Tiered partitions: a consumer fetch below the local log start reads from the
remote tier. Unlike Kafka <= 4.1 (KAFKA-14915), every partition of the request
that needs remote data gets it: the reads run concurrently, each within its
share of fetch.max.bytes, and the response waits for them at most
remote.fetch.max.wait.ms (KIP-1018). A partition whose remote read did not
finish by then is answered empty without error (its high watermark tells the
client there is more), and the client's retry joins the read still in flight:
the reads park in the remote-fetch purgatory (``replication.purgatory``)
until the reader pool completes them.
A follower gets OFFSET_MOVED_TO_TIERED_STORAGE and rebuilds from the tier.

Followers (a replica id >= 0) read up to the leader's log end, not the high
watermark. Their fetch offset tells the leader what they have (it moves the
high watermark and the ISR), and with Fetch v12+ their last fetched epoch is
checked against the leader's epoch history first: where it diverges the
answer is a diverging epoch and no data, and the follower truncates (KIP-320).

Fetch sessions (KIP-227): ``fetch`` answers full requests (with or without a
session); ``fetch_incremental`` answers a session's incremental ones, reading
only what its request names and what changed (see ``replication.fetch_session``).

Error handling: every partition's outcome is a value (an error code in its
result); one partition's error never fails the others.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import trio

from protocol import records
from protocol.errors import ErrorCode, KafkaApiError
from protocol.fetch_fields import CONSUMER_REPLICA_ID
from protocol.partition import TopicPartition
from replication.fetch_session import CachedPartition, FetchSession
from replication.follower_progress import FollowerProgress
from replication.metrics import ReplicaStats
from replication.partition import Partition
from replication.purgatory import RemoteFetchPurgatory
from replication.replica_tiering import ReplicaTiering
from storage.log.file_slice import FileSlice
from storage.pace import Pacer


class ReplicaManager(Protocol):
    """What the fetch path asks of the broker's replicas
    (``replication.replica_manager.ReplicaManager``)."""

    config: Any
    stats: ReplicaStats
    remote_fetches: RemoteFetchPurgatory
    followers: FollowerProgress
    tiering: ReplicaTiering

    def get(self, tp: TopicPartition) -> Partition | None: ...

    def leader_partition(self, tp: TopicPartition) -> Partition: ...

    def readable_partition(self, tp: TopicPartition, followers_too: bool) -> Partition: ...

    def preferred_read_replica(self, part: Partition, client_rack: str | None,
                               offset: int) -> int: ...

    @staticmethod
    def check_leader_epoch(part: Partition, current_leader_epoch: int) -> None: ...

    def read(self, part: Partition, offset: int, max_bytes: int, committed_only: bool,
             min_one_batch: bool, zero_copy: bool = False,
             leader_epoch_known: bool = True) -> bytes | FileSlice: ...

    def watch_fetches(self, tps: list[TopicPartition], follower: bool
                      ) -> AbstractContextManager[trio.Event]: ...


@dataclass(slots=True)
class FetchPartition:
    """One partition a fetch asks for."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    # Set when the request already fails this partition (e.g. an unknown topic id).
    error: ErrorCode = ErrorCode.NONE
    # Followers (Fetch v12+, KIP-320): the epoch of the last batch they have.
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class FetchParams:
    partitions: list[FetchPartition]
    max_wait_ms: int = 0
    min_bytes: int = 1
    max_bytes: int = 50 * 1024 * 1024
    read_committed: bool = False
    replica_id: int = CONSUMER_REPLICA_ID
    # Local data as FileSlices for the connection to sendfile (the network
    # fetch path); off for in-process callers that want bytes.
    zero_copy: bool = False
    # A consumer's rack (Fetch v11+ rack_id, "" if it names none); None: a
    # request without client metadata (before v11), which only a leader serves.
    client_rack: str | None = None

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(slots=True)
class FetchResult:
    """What one partition of the fetch answers."""

    error: ErrorCode = ErrorCode.NONE
    # Bytes, or a FileSlice of a local segment when the fetch asked for zero copy.
    records: bytes | FileSlice = b""
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # read_committed only: aborted transactions (objects with producer_id and
    # first_offset) overlapping ``records``; None for read_uncommitted.
    aborted: list[Any] | None = None
    # Whether the data came from the remote tier (its aborted list is final).
    remote: bool = field(default=False)
    # Followers: (epoch, end offset) where the follower's log left the leader's;
    # it truncates there before fetching again (KIP-320).
    diverging_epoch: tuple[int, int] | None = None
    # Consumers (KIP-392): the replica to fetch this partition from instead (no
    # records come with it); -1: this broker.
    preferred_read_replica: int = -1


async def fetch(replicas: ReplicaManager, params: FetchParams) -> list[FetchResult]:
    """Answer a fetch: one result per requested partition, in request order."""
    deadline = trio.current_time() + max(params.max_wait_ms, 0) / 1000
    keys = [(p.topic, p.partition) for p in params.partitions]
    while True:
        # Watched before the read: other tasks run during it, and an event on
        # a partition already read must still wake the wait below.
        with replicas.watch_fetches(keys, params.is_follower) as woken:
            results, total, any_error, remote = await _read_local(replicas, params)
            if remote:
                got, remote_error = await _read_remote(replicas, params, results, remote,
                                                       total)
                total += got
                any_error = any_error or remote_error
            if (total >= params.min_bytes or any_error or remote
                    or trio.current_time() >= deadline):
                break
            _close_slices(results)
            with trio.move_on_at(deadline):
                await woken.wait()
    _fill_offsets(replicas, params, results)
    if params.is_follower:
        # Counted once per answer (a delayed fetch reads more than once).
        replicas.stats.bytes_out.inc(sum(len(r.records) for r in results))
    return results


def _close_slices(results: list[FetchResult]) -> None:
    """Release the file slices of a pass whose answer is not sent (it waits and reads again)."""
    for result in results:
        if isinstance(result.records, FileSlice):
            result.records.close()


async def _read_local(replicas: ReplicaManager, params: FetchParams
                      ) -> tuple[list[FetchResult], int, bool, list[int]]:
    """One local pass; returns results, bytes, whether any partition must be
    answered at once (an error, or a consumer sent to another replica), and the
    indexes of partitions that need the remote tier. Other tasks run between
    partitions once the pass has taken a few milliseconds (each partition is
    read whole, as it is at that moment)."""
    results: list[FetchResult] = []
    total = 0
    any_error = False
    remote: list[int] = []
    consumer = not params.is_follower
    pacer = Pacer()
    try:
        for i, p in enumerate(params.partitions):
            await pacer.tick()
            if p.error:
                results.append(FetchResult(p.error))
                any_error = True
                continue
            budget = min(p.max_bytes, max(params.max_bytes - total, 0))
            try:
                if params.is_follower:
                    result = _read_for_follower(replicas, params.replica_id, p, budget, total == 0,
                                                params.zero_copy)
                    results.append(result)
                    total += len(result.records)
                    continue
                part = replicas.readable_partition((p.topic, p.partition),
                                                   params.client_rack is not None)
                replicas.check_leader_epoch(part, p.current_leader_epoch)
                preferred = replicas.preferred_read_replica(part, params.client_rack, p.offset)
                if preferred >= 0:
                    # Answered at once, as Kafka does: the consumer moves on.
                    results.append(FetchResult(preferred_read_replica=preferred))
                    any_error = True
                    continue
                got = replicas.read(part, p.offset, budget, params.read_committed,
                                    min_one_batch=total == 0, zero_copy=params.zero_copy,
                                    leader_epoch_known=p.current_leader_epoch >= 0)
            except KafkaApiError as exc:
                results.append(FetchResult(exc.code))
                if (exc.code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE and consumer
                        and replicas.tiering.manager is not None):
                    remote.append(i)
                else:
                    any_error = True
                continue
            results.append(FetchResult(records=got))
            total += len(got)
    except BaseException:  # cancelled at a tick: the slices read so far are not sent
        _close_slices(results)
        raise
    return results, total, any_error, remote


def _read_for_follower(replicas: ReplicaManager, replica_id: int, p: FetchPartition,
                       budget: int, min_one_batch: bool, zero_copy: bool) -> FetchResult:
    """A follower's read: divergence check, data up to the log end, and its
    progress recorded (high watermark, ISR).

    Raises:
        KafkaApiError: not leader, fenced epoch, offset out of range.
    """
    tp = (p.topic, p.partition)
    part = replicas.leader_partition(tp)
    replicas.check_leader_epoch(part, p.current_leader_epoch)
    lg = part.log
    if p.last_fetched_epoch >= 0:
        epoch, end = lg.epochs.end_offset_for(p.last_fetched_epoch, lg.end_offset)
        if epoch != p.last_fetched_epoch or end < p.offset:
            return FetchResult(diverging_epoch=(epoch, end))
    got = lg.read_for_send(p.offset, budget, lg.end_offset, min_one_batch, zero_copy)
    replicas.followers.update_follower(tp, replica_id, p.offset)
    return FetchResult(records=got)


async def _read_remote(replicas: ReplicaManager, params: FetchParams,
                       results: list[FetchResult], remote: list[int],
                       total: int) -> tuple[int, bool]:
    """Read every remote partition concurrently; fills ``results`` in place,
    and for read_committed the partitions' aborted transactions from the
    remote transaction indexes.

    Returns:
        (bytes read, whether any partition got an error).
    """
    reads, lookups = replicas.tiering.reads, replicas.tiering.lookups
    assert reads is not None and lookups is not None
    deadline = trio.current_time() + replicas.config["remote.fetch.max.wait.ms"] / 1000
    budget = max(params.max_bytes - total, 0)
    jobs = []
    for n, i in enumerate(remote):
        share = min(params.partitions[i].max_bytes, budget)
        budget -= share
        jobs.append((i, share, total == 0 and n == 0))
    errors = []

    async def one(i: int, share: int, min_one: bool) -> None:
        p = params.partitions[i]
        tp = (p.topic, p.partition)
        try:
            data = await replicas.remote_fetches.read(reads, tp, p.offset, share, min_one,
                                                      deadline)
            result = FetchResult(records=data or b"", remote=True)
            if params.read_committed and data:
                last = max(h.last_offset for h in records.iter_headers(data))
                result.aborted = await lookups.collect_aborted(tp, p.offset, last + 1)
            results[i] = result
        except KafkaApiError as exc:
            results[i] = FetchResult(exc.code)
            errors.append(exc.code)

    async with trio.open_nursery() as nursery:
        for job in jobs:
            nursery.start_soon(one, *job)
    return sum(len(results[i].records) for i in remote), bool(errors)


def _fill_offsets(replicas: ReplicaManager, params: FetchParams,
                  results: list[FetchResult]) -> None:
    """Every result's high watermark, LSO, log start and (read_committed) aborted list."""
    for p, result in zip(params.partitions, results, strict=True):
        part = replicas.get((p.topic, p.partition))
        if part is None:
            continue
        result.high_watermark = part.high_watermark
        result.last_stable_offset = part.last_stable_offset
        result.log_start_offset = part.log.log_start_offset
        if params.read_committed and not result.remote:
            result.aborted = _local_aborted(part.log, p.offset, result.records)
        elif params.read_committed and result.aborted is None:
            result.aborted = []


def _local_aborted(lg: Any, offset: int, data: bytes | FileSlice) -> list[Any]:
    if isinstance(data, FileSlice):
        last = data.last_offset
    else:
        last = -1
        for header in records.iter_headers(data):
            last = header.last_offset
    if last < offset:
        return []
    return list(lg.collect_aborted(offset, last + 1))


# Partitions in one incremental answer at most: the connection encodes an
# answer, and the follower decodes it, in one event-loop step each. The rest
# stay marked and go in the session's next answer, which is sent at once.
ANSWER_PARTITIONS = 250


async def fetch_incremental(replicas: ReplicaManager, params: FetchParams,
                            session: FetchSession, requested: list[TopicPartition]
                            ) -> list[tuple[FetchPartition, FetchResult]]:
    """An incremental fetch of a session (KIP-227; see ``replication.fetch_session``).

    Reads only the partitions the request names and those with an event since
    the session last read them, and answers those with something new. Waits,
    as a full fetch does, until min_bytes are there, an error, or max_wait_ms;
    an event on the session's partitions wakes it.

    Returns:
        (partition as the session has it, result) for each partition answered.
    """
    deadline = trio.current_time() + max(params.max_wait_ms, 0) / 1000
    pending: dict[TopicPartition, None] = dict.fromkeys(requested)
    answer: dict[TopicPartition, tuple[FetchPartition, FetchResult]] = {}
    while True:
        pending.update(dict.fromkeys(session.dirty))
        session.dirty.clear()
        # Fresh before the read: an event from here on wakes the wait below.
        session.wake = trio.Event()
        wanted = [_cached_partition(tp, session.partitions[tp]) for tp in pending
                  if tp in session.partitions]
        pending.clear()
        sub = replace(params, partitions=wanted, max_wait_ms=0)
        results, total, any_error, remote = await _read_local(replicas, sub)
        if remote:
            got, remote_error = await _read_remote(replicas, sub, results, remote, total)
            total += got
            any_error = any_error or remote_error
        _fill_offsets(replicas, sub, results)
        capped = False
        for p, r in zip(wanted, results, strict=True):
            tp = (p.topic, p.partition)
            cached = session.partitions.get(tp)
            if cached is None:
                _close_slices([r])
                continue
            if len(answer) >= ANSWER_PARTITIONS and tp not in answer:
                # Full: the next fetch of the session answers it.
                _close_slices([r])
                session.dirty.add(tp)
                capped = True
                continue
            if cached.must_respond(r.error, bool(r.records), r.high_watermark,
                                   r.last_stable_offset, r.log_start_offset,
                                   r.diverging_epoch is not None,
                                   r.preferred_read_replica) or tp in answer:
                answer[tp] = (p, r)
            elif total >= params.max_bytes and not r.records:
                # The response filled up before this partition's turn: it may
                # have data, so the next fetch reads it again.
                session.dirty.add(tp)
        sent = sum(len(r.records) for _, r in answer.values())
        if (sent >= params.min_bytes or any_error or remote or capped
                or trio.current_time() >= deadline):
            break
        for tp, (_, r) in answer.items():
            if r.records:
                pending[tp] = None  # read again after the wait, with what came since
        _close_slices([r for _, r in answer.values()])
        with trio.move_on_at(deadline):
            await session.wake.wait()
    if params.is_follower:
        replicas.stats.bytes_out.inc(sum(len(r.records) for _, r in answer.values()))
    return list(answer.values())


def _cached_partition(tp: TopicPartition, cached: CachedPartition) -> FetchPartition:
    return FetchPartition(tp[0], tp[1], cached.fetch_offset, cached.max_bytes,
                          cached.current_leader_epoch,
                          last_fetched_epoch=cached.last_fetched_epoch)
