"""Replica fetchers: followers copying their leaders' logs.

Theory of operation
-------------------
A follower partition is assigned to one fetcher: one per (leader broker,
fetcher index), num.replica.fetchers per leader, the partition's index
hashed over them as Kafka does. A fetcher is one trio task with one
connection that sends Fetch requests (v12: topic names, last fetched epoch)
for the partitions it holds that are ready, and applies each partition's
answer. It keeps a fetch session with its leader (KIP-227, ``LeaderSession``):
the first request names every ready partition and opens the session; later
ones name only the partitions whose position changed (and forget those no
longer ready), and the leader answers only partitions with news, so an idle
partition costs no bytes and no encoding on either side. Each partition
moves through a small state machine:

    FETCHING ----(diverging epoch)----> TRUNCATING ---(truncated)---> FETCHING
    FETCHING --(OFFSET_MOVED_TO_TIERED_STORAGE)--> BUILDING_REMOTE_AUX_STATE
    any --(error: not leader, fenced epoch, unreachable leader)--> DELAYED
    DELAYED / BUILDING_REMOTE_AUX_STATE --(backoff over)--> FETCHING

Truncation uses the leader's answer rather than a separate
OffsetForLeaderEpoch round trip (KIP-320): the follower sends the epoch of
its last batch with each fetch; a leader whose history differs answers a
diverging (epoch, end offset) and the follower cuts its log at the smaller
of that end offset and where its own copy of that epoch ends. An answer
with no epoch at all (the leader does not know it) truncates to the high
watermark, as Kafka does.

BUILDING_REMOTE_AUX_STATE: a follower below the leader's local log start
rebuilds from the remote tier (``remote_aux_state``). The reading part runs
as a task of its own while the fetcher goes on with its other partitions;
the partition waits meanwhile. Success restarts its log after the remote
data and it fetches the local tail; failure is counted and retried with
exponential backoff (the next fetch gets OFFSET_MOVED_TO_TIERED_STORAGE
again). With ``follower.fetch.last.tiered.offset.enable`` (KIP-1023) a
partition of a tiered topic that joins with no local data is "probing": its
leader may hold its whole log locally and never answer it
OFFSET_MOVED_TO_TIERED_STORAGE, so if the first answer shows data the
follower lacks (the leader's high watermark above its log end), the records
of that answer are dropped and it enters that state all the same, asking the
leader where its tier ends. A probe that finds nothing tiered above it
fetches as usual; a failed one is retried like a rebuild, up to
MAX_PROBE_FAILURES. A new topic's partitions (nothing to fetch yet) cost no
probe.

Error handling: a partition's error delays only that partition for
replica.fetch.backoff.ms; a connection failure delays the whole fetcher and
starts a new session. A session the leader no longer has (evicted,
restarted) or an epoch it refuses starts a new one with a full request. A
new LeaderAndIsr moves the partition to another fetcher (or to leadership)
and resets its state.

Why one module over ~450 lines: the follower state machine, its table and the
fetch loop that drives it belong together (the table is only readable next to
the moves the loop makes); the state names alone live in
``replication.follower_state``, the follower's side of the fetch session in
``replication.leader_session``, which fetcher follows which partition in
``replication.fetcher_manager``.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
import trio
from kafka.protocol.consumer import FetchRequest, FetchResponse

from config import BrokerConfig
from protocol.errors import ErrorCode, KafkaApiError
from protocol.partition import TopicPartition
from replication import remote_aux_state
from replication.follower_state import FollowerState
from replication.leader_session import LeaderSession, Position
from replication.peer import Peer, PeerError
from storage.pace import Pacer

if TYPE_CHECKING:
    from replication.replica_manager import ReplicaManager

log = structlog.get_logger(__name__)

# Fetch v12: the first version with last_fetched_epoch / diverging_epoch and
# the last with topic names (v13 switches to topic ids).
FETCH_VERSION = 12
UNDEFINED = -1
# Longest wait between two attempts to rebuild a partition from the remote tier
# (each failure doubles replica.fetch.backoff.ms up to this).
MAX_AUX_STATE_BACKOFF_S = 30.0
# Failed probes (KIP-1023, an empty follower) before the follower gives up the
# shortcut and replicates from its log end: about a minute of backoffs; the
# leader still answers OFFSET_MOVED_TO_TIERED_STORAGE below its local start.
MAX_PROBE_FAILURES = 5


class IllegalTransition(RuntimeError):
    """A state machine was asked to make a move its table does not allow."""


S = FollowerState
TRANSITIONS: dict[FollowerState, frozenset[FollowerState]] = {
    S.FETCHING: frozenset({S.TRUNCATING, S.BUILDING_REMOTE_AUX_STATE, S.DELAYED, S.FETCHING}),
    S.TRUNCATING: frozenset({S.FETCHING, S.DELAYED}),
    S.BUILDING_REMOTE_AUX_STATE: frozenset({S.FETCHING, S.DELAYED}),
    S.DELAYED: frozenset({S.FETCHING, S.DELAYED}),
}


@dataclass(slots=True)
class FollowerPartition:
    tp: TopicPartition
    leader_epoch: int
    state: FollowerState = S.FETCHING
    # Where TRUNCATING cuts the log; when DELAYED ends (trio time).
    truncate_to: int = 0
    delayed_until: float = 0.0
    # Failed attempts to rebuild from the remote tier in a row, and the last error.
    aux_failures: int = 0
    aux_error: str | None = None
    # Joined with no local data (KIP-1023): the build asks the leader first.
    probing: bool = False
    # The number of the first fetch request that can carry it (an answer to an
    # earlier request is about a partition it replaced).
    first_request: int = 0

    def move(self, to: FollowerState) -> None:
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"{self.tp}: {self.state.value} -> {to.value}")
        self.state = to


def fetcher_index(tp: TopicPartition, fetchers: int) -> int:
    """Kafka's fetcher id: abs(31 * topic.hashCode + partition) % num.replica.fetchers
    (any stable spread does; this one is stable across restarts)."""
    return (zlib.crc32(tp[0].encode()) * 31 + tp[1]) % max(fetchers, 1)


class ReplicaFetcher:
    """Fetches every partition it holds from one leader broker."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, leader: Peer) -> None:
        self.config = config
        self.replicas = replicas
        self.leader = leader
        self.node_id: int = config["node.id"]
        self.partitions: dict[TopicPartition, FollowerPartition] = {}
        self._wake = trio.Event()
        self.cancel_scope = trio.CancelScope()
        self._backoff = config["replica.fetch.backoff.ms"] / 1000
        self._last_tiered: bool = config["follower.fetch.last.tiered.offset.enable"]
        self.stats = replicas.stats
        self._nursery: trio.Nursery | None = None
        # The fetch in flight, cancelled when a partition joins (see ``add``).
        self._in_flight: trio.CancelScope | None = None
        self.session = LeaderSession()
        # Kept so that no step walks every partition: the partitions not
        # FETCHING (checked for the end of their delay), the fetching ones
        # whose position may have moved since the last request, and those
        # that stopped fetching since then (to forget in the session).
        self._waiting: set[TopicPartition] = set()
        self._changed: set[TopicPartition] = set()
        self._left: set[TopicPartition] = set()
        # Fetch requests sent so far.
        self._requests = 0

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        fp = self.partitions[tp] = FollowerPartition(tp, leader_epoch,
                                                     first_request=self._requests + 1)
        self._waiting.discard(tp)
        self._changed.add(tp)
        part = self.replicas.get(tp)
        if part is not None:
            part.leader_high_watermark = UNDEFINED  # this leader has not answered yet
            lg = part.log
            if (self._last_tiered and lg.config.remote_storage_enable
                    and self.replicas.tiering.manager is not None
                    and lg.end_offset == lg.local_log_start_offset):
                fp.probing = True  # decided by the leader's first answer (``_apply_partition``)
        # A fetch in flight may long-poll for replica.fetch.wait.max.ms without the
        # new partition: cut it short, so a new leader's followers (and so acks=all
        # produce after a failover) start at once. Not an opening one: the leader
        # would keep the session it opens, which this fetcher would never learn
        # of (a LeaderAndIsr comes in several requests, each adding partitions).
        if self._in_flight is not None and not self.session.opening:
            self._in_flight.cancel()
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self._waiting.discard(tp)
        self._changed.discard(tp)
        self._left.add(tp)

    def _move(self, fp: FollowerPartition, to: FollowerState) -> None:
        """``fp.move``, keeping the fetcher's sets of partitions current."""
        fp.move(to)
        if to is S.FETCHING:
            self._waiting.discard(fp.tp)
            self._changed.add(fp.tp)
        else:
            self._waiting.add(fp.tp)
            self._changed.discard(fp.tp)
            self._left.add(fp.tp)
            self.session.resend(fp.tp)

    async def run(self) -> None:
        with self.cancel_scope:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._fetch_loop()

    async def _fetch_loop(self) -> None:
        while True:
            if not self._ready():
                await self._sleep_until_ready()
                continue
            request = self._build()
            self._requests += 1
            number = self._requests
            response = None
            try:
                with trio.CancelScope() as self._in_flight:
                    response = await self.leader.request(FetchRequest, FetchResponse,
                                                         FETCH_VERSION, request)
            except PeerError as exc:
                log.info("replica fetch failed; backing off", leader=self.leader.node_id,
                         error=str(exc))
                self.session.reset()
                await trio.sleep(self._backoff)
                continue
            finally:
                self._in_flight = None
            if response is None:
                # Cut short by ``add``: its answer would be read as the next one's.
                self.session.reset()
                await self.leader.close()
                continue
            if self.session.answered(ErrorCode(response.error_code), response.session_id):
                await self._apply(number, response)

    def _ready(self) -> bool:
        """Move partitions whose delay is over back to FETCHING; whether any fetches."""
        now = trio.current_time()
        for tp in list(self._waiting):
            fp = self.partitions.get(tp)
            if fp is None:
                self._waiting.discard(tp)
                continue
            if fp.probing and fp.state is S.BUILDING_REMOTE_AUX_STATE \
                    and now >= fp.delayed_until:
                self._start_build(fp)  # a failed probe, retried after its backoff
                continue
            if fp.state in (S.DELAYED, S.BUILDING_REMOTE_AUX_STATE) and now >= fp.delayed_until:
                self._move(fp, S.FETCHING)
            if fp.state is S.TRUNCATING:
                self._truncate(fp)
        return len(self._waiting) < len(self.partitions)

    async def _sleep_until_ready(self) -> None:
        self._wake = trio.Event()
        delayed = [fp.delayed_until for tp in self._waiting
                   if (fp := self.partitions.get(tp)) is not None]
        with trio.move_on_at(min(delayed) if delayed else trio.current_time() + 1):
            await self._wake.wait()

    def _position(self, fp: FollowerPartition) -> Position | None:
        part = self.replicas.get(fp.tp)
        if part is None:
            return None
        lg = part.log
        return lg.end_offset, fp.leader_epoch, lg.epochs.latest_epoch, lg.log_start_offset

    def _build(self) -> Any:
        req = FetchRequest[FETCH_VERSION]
        topic_cls = req.FetchTopic
        part_cls = topic_cls.FetchPartition
        candidates = (self.partitions if self.session.opening else self._changed)
        changed = {tp: pos for tp in candidates
                   if (fp := self.partitions.get(tp)) is not None and fp.state is S.FETCHING
                   and (pos := self._position(fp)) is not None}
        named, forgotten = self.session.build(changed, self._left)
        self._changed = set()
        self._left = set()
        by_topic: dict[str, list[Any]] = {}
        for tp, (offset, leader_epoch, last_epoch, log_start) in named.items():
            by_topic.setdefault(tp[0], []).append(part_cls(
                partition=tp[1], current_leader_epoch=leader_epoch, fetch_offset=offset,
                last_fetched_epoch=last_epoch, log_start_offset=log_start,
                partition_max_bytes=self.config["replica.fetch.max.bytes"]))
        gone: dict[str, list[int]] = {}
        for topic, partition in forgotten:
            gone.setdefault(topic, []).append(partition)
        return req(replica_id=self.node_id, max_wait_ms=self.config["replica.fetch.wait.max.ms"],
                   min_bytes=self.config["replica.fetch.min.bytes"],
                   max_bytes=self.config["replica.fetch.response.max.bytes"], isolation_level=0,
                   session_id=self.session.id, session_epoch=self.session.epoch,
                   topics=[topic_cls(topic=t, partitions=ps) for t, ps in by_topic.items()],
                   forgotten_topics_data=[req.ForgottenTopic(topic=t, partitions=ps)
                                          for t, ps in gone.items()],
                   rack_id="")

    async def _apply(self, number: int, response: Any) -> None:
        """Apply the answer to request ``number``: only the partitions it names
        (with a session, those with news), letting other tasks run between
        partitions (a partition moved or stopped meanwhile is skipped)."""
        pacer = Pacer()
        for topic in response.responses:
            for p in topic.partitions:
                await pacer.tick()
                fp = self.partitions.get((topic.topic, p.partition_index))
                if fp is None or fp.first_request > number or fp.state is not S.FETCHING:
                    continue  # replaced, moved or stopped while the fetch was out
                self._changed.add(fp.tp)
                try:
                    self._apply_partition(fp, p)
                except KafkaApiError as exc:
                    log.warning("follower append failed", topic=fp.tp[0], partition=fp.tp[1],
                                error=exc.code.name, detail=exc.message)
                    self._delay(fp)

    def _apply_partition(self, fp: FollowerPartition, p: Any) -> None:
        code = ErrorCode(p.error_code)
        if code is ErrorCode.NONE and fp.probing:
            part = self.replicas.get(fp.tp)
            if part is not None and p.high_watermark > part.log.end_offset:
                log.info("empty follower of a tiered topic; asking the leader where its "
                         "tier ends", topic=fp.tp[0], partition=fp.tp[1],
                         leader=self.leader.node_id, leader_high_watermark=p.high_watermark)
                self._move(fp, S.BUILDING_REMOTE_AUX_STATE)
                self._start_build(fp)
                return
            fp.probing = False  # nothing it lacks yet: a follower like any other
        if code is ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE:
            fp.probing = False
            log.info("follower below the leader's local log start; rebuilding from the "
                     "remote tier", topic=fp.tp[0], partition=fp.tp[1],
                     leader=self.leader.node_id)
            self._move(fp, S.BUILDING_REMOTE_AUX_STATE)
            self._start_build(fp)
            return
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            self._out_of_range(fp, p)
            return
        if code is not ErrorCode.NONE:
            log.info("replica fetch error", topic=fp.tp[0], partition=fp.tp[1],
                     leader=self.leader.node_id, error=code.name)
            self._delay(fp)
            return
        diverging = p.diverging_epoch
        if diverging is not None and (diverging.epoch >= 0 or diverging.end_offset >= 0):
            self._diverged(fp, diverging.epoch, diverging.end_offset)
            return
        if p.records:
            self.replicas.append_as_follower(fp.tp, bytearray(p.records))
            self.stats.bytes_in.inc(len(p.records))
        part = self.replicas.get(fp.tp)
        if part is not None:
            part.leader_high_watermark = p.high_watermark
            if p.log_start_offset > part.log.log_start_offset:
                # The leader's log start moved (retention, remote expiration,
                # DeleteRecords): what is below it is gone everywhere.
                part.log.advance_log_start_offset(p.log_start_offset)
            elif part.log.lower_log_start_offset(p.log_start_offset):
                # A tiered log follows the leader's start down too: the leader
                # took it back from rebuilt remote metadata (rebuild-metadata),
                # and a replica keeping the higher start would, once leader,
                # delete the remote data below it.
                log.info("log start offset moved back with the leader's",
                            topic=fp.tp[0], partition=fp.tp[1], log_start=p.log_start_offset)
        self.replicas.set_follower_high_watermark(fp.tp, p.high_watermark)

    def _diverged(self, fp: FollowerPartition, epoch: int, end_offset: int) -> None:
        part = self.replicas.partition(fp.tp)
        lg = part.log
        if epoch == UNDEFINED or end_offset == UNDEFINED:
            target = part.high_watermark
        else:
            # Where our own copy of that epoch (or the last one below it) ends.
            local_epoch, local_end = lg.epochs.end_offset_for(epoch, lg.end_offset)
            target = min(end_offset, lg.end_offset if local_epoch == UNDEFINED else local_end)
        fp.truncate_to = target
        self._move(fp, S.TRUNCATING)
        self._truncate(fp)

    def _truncate(self, fp: FollowerPartition) -> None:
        self.replicas.truncate(fp.tp, fp.truncate_to)
        self._move(fp, S.FETCHING)

    def _out_of_range(self, fp: FollowerPartition, p: Any) -> None:
        """Our log end is outside the leader's log: below its start, start over
        there; above its end (it lost an unclean election), cut back to it."""
        part = self.replicas.partition(fp.tp)
        if part.log.end_offset < p.log_start_offset:
            log.info("follower behind the leader's log start; starting over there",
                     topic=fp.tp[0], partition=fp.tp[1], leader_start=p.log_start_offset)
            self.replicas.truncate_fully(fp.tp, p.log_start_offset)
        else:
            fp.truncate_to = max(p.high_watermark, 0)
            self._move(fp, S.TRUNCATING)
            self._truncate(fp)

    def _start_build(self, fp: FollowerPartition) -> None:
        fp.delayed_until = math.inf  # until the build task says otherwise
        assert self._nursery is not None
        self._nursery.start_soon(self._build_aux_state, fp)

    async def _build_aux_state(self, fp: FollowerPartition) -> None:
        self.stats.aux_state_requests.inc()
        # A connection of its own: on the fetcher's, each ListOffsets would wait
        # behind a long-poll of up to replica.fetch.wait.max.ms, and a leader
        # whose local retention keeps less than that has moved its local start
        # on by then (the follower lands below it again, and rebuilds forever).
        leader = Peer(self.leader.node_id, self.leader.host, self.leader.port,
                      self.leader.client_id,
                      request_timeout_ms=int(self.leader.request_timeout * 1000),
                      connector=self.leader.connector)
        try:
            state = await remote_aux_state.prepare(self.replicas, leader, fp.tp,
                                                   fp.leader_epoch, self.node_id,
                                                   self._last_tiered, fp.probing)
        except Exception as exc:
            self.stats.aux_state_errors.inc()
            fp.aux_failures += 1
            fp.aux_error = f"{type(exc).__name__}: {exc}"
            fp.probing = fp.probing and fp.aux_failures < MAX_PROBE_FAILURES
            delay = min(self._backoff * 2 ** fp.aux_failures, MAX_AUX_STATE_BACKOFF_S)
            log.warning("rebuilding from the remote tier failed; retrying", topic=fp.tp[0],
                        partition=fp.tp[1], error=f"{type(exc).__name__}: {exc}",
                        retry_in_s=round(delay, 2))
            fp.delayed_until = trio.current_time() + delay
            self._wake.set()
            return
        finally:
            await leader.close()
        part = self.replicas.get(fp.tp)
        if self.partitions.get(fp.tp) is not fp or part is None \
                or part.leader_epoch != fp.leader_epoch:
            return  # reassigned meanwhile: the new assignment starts over
        fp.aux_failures = 0
        fp.aux_error = None
        fp.delayed_until = 0.0
        probed, fp.probing = fp.probing, False
        if state is None:
            self._wake.set()  # nothing tiered above its log end: fetch as usual
            return
        next_offset = remote_aux_state.apply(self.replicas, fp.tp, state)
        log.info("rebuilt from the remote tier", topic=fp.tp[0], partition=fp.tp[1],
                 segment=str(state.segment.remote_log_segment_id), log_start=state.log_start,
                 fetch_from=next_offset, epochs=len(state.epochs),
                 producers=len(state.producers),
                 start="last-tiered" if self._last_tiered else "earliest-local",
                 empty_follower=probed)
        # Fetch the local tail at once, not after the long-poll in flight.
        if self._in_flight is not None:
            self._in_flight.cancel()
        self._wake.set()

    def _delay(self, fp: FollowerPartition) -> None:
        self._move(fp, S.DELAYED)
        fp.delayed_until = trio.current_time() + self._backoff
