"""Fetch sessions (KIP-227) on the leader: incremental fetches whose cost
follows the partitions that changed, not the partitions in the session.

Theory of operation
-------------------
A client (consumer or follower) that fetches many partitions sends the same
list again and again. With a session, the leader remembers the list and
what it last answered for each partition: the fetch offset, the partition's
max bytes and epochs from the request, and the high watermark, last stable
offset and log start it last sent. A request then names only the partitions
whose fetch position changed (and, as ``forgotten_topics_data``, those to
drop), and the response carries only partitions with something new: records,
an error, a moved high watermark, last stable offset or log start.

Kafka's leader still reads every partition of the session on every fetch.
tierd does not: each session is told about events on its partitions (an
append moving the log end, a high watermark advancing, a partition moving
away; ``SessionWatch.notify``) and keeps them in its ``dirty`` set. A fetch
reads the partitions its request names plus the dirty ones, nothing else:
an idle partition costs nothing, however many the session holds. The same
events wake a fetch of the session that waits for data, in place of the
per-partition purgatory a sessionless fetch uses.

The request's ``session_id`` / ``session_epoch`` pick the case (as Kafka):

    id 0,  epoch -1  a full fetch without a session
    id N,  epoch -1  close session N; a full fetch without a session
    any,   epoch 0   close session N if given; a full fetch that opens a new
                     session (if the cache takes it; else id 0 in the answer)
    id N,  epoch E>0 an incremental fetch of session N: FETCH_SESSION_ID_NOT_FOUND
                     if there is none, INVALID_FETCH_SESSION_EPOCH if E is not
                     the epoch it expects (the one after the last request's)

The cache (``FetchSessionCache``) holds at most
``max.incremental.fetch.session.cache.slots`` sessions. A new session takes
a free slot; with none free, it may evict (Kafka's rules): first the least
recently used session if it has been idle for ``EVICTION_S``; otherwise the
least valuable session that is at least ``EVICTION_S`` old, ranked by
(privileged, partitions, id), where followers' sessions are privileged, and
only if the newcomer ranks higher. A consumer never evicts a follower.

Concurrency: event loop only. A session is used by one fetch at a time (a
client waits for a fetch's answer before it sends the next); the epoch check
refuses a second request that does not.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import structlog
import trio

from protocol.errors import ErrorCode
from protocol.partition import TopicPartition

log = structlog.get_logger(__name__)

# Session ids and epochs of the protocol.
NO_SESSION = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# Kafka's FetchSessionCache eviction time (not configurable there either): a
# session idle this long gives way to any new one, and a session younger
# than this is never evicted for another.
EVICTION_S = 120.0
# Fetch v7 is the first with sessions.
FIRST_SESSION_VERSION = 7


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the client's last request for it and what
    the leader last answered."""

    topic_id: uuid.UUID | None
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    # What the client last got (-2: nothing yet, so the first answer includes it).
    high_watermark: int = -2
    last_stable_offset: int = -2
    log_start_offset: int = -2
    # The preferred read replica last sent (KIP-392; -1: none).
    preferred_read_replica: int = -1

    def must_respond(self, error: ErrorCode, has_records: bool, high_watermark: int,
                     last_stable_offset: int, log_start_offset: int, diverging: bool,
                     preferred_read_replica: int = -1) -> bool:
        """Whether an incremental answer includes this partition; remembers
        what it sends. An error also forgets the offsets last sent, so the
        partition is answered again once it recovers."""
        if error is not ErrorCode.NONE:
            self.high_watermark = self.last_stable_offset = self.log_start_offset = -2
            self.preferred_read_replica = -1
            return True
        changed = (has_records or diverging or high_watermark != self.high_watermark
                   or last_stable_offset != self.last_stable_offset
                   or log_start_offset != self.log_start_offset
                   or preferred_read_replica != self.preferred_read_replica)
        self.preferred_read_replica = preferred_read_replica
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        return changed


@dataclass(eq=False, slots=True)
class FetchSession:
    """One client's session: its partitions in the order it first named them."""

    id: int
    privileged: bool
    created: float
    last_used: float
    # The epoch the next request must carry.
    epoch: int = 1
    partitions: dict[TopicPartition, CachedPartition] = field(default_factory=dict)
    # Partitions with an event since the session last read them.
    dirty: set[TopicPartition] = field(default_factory=set)
    # Set by an event; a waiting fetch of the session wakes on it.
    wake: trio.Event = field(default_factory=trio.Event)

    def mark(self, tp: TopicPartition) -> None:
        self.dirty.add(tp)
        self.wake.set()

    def rank(self) -> tuple[bool, int, int]:
        """Kafka's eviction order: the smallest ranks lowest."""
        return self.privileged, len(self.partitions), self.id


class SessionError(Exception):
    """A request that names a session wrongly; ``code`` is the top-level error."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


class FetchSessionCache:
    """The leader's sessions, and which sessions watch which partition."""

    def __init__(self, max_slots: int, eviction_s: float = EVICTION_S) -> None:
        self.max_slots = max_slots
        self.eviction_s = eviction_s
        self.sessions: dict[int, FetchSession] = {}
        self._watchers: dict[TopicPartition, set[FetchSession]] = {}
        self._partitions_cached = 0
        # Counted for IncrementalFetchSessionEvictionsPerSec, and incremental
        # requests served (tierd's own counter: which clients use sessions).
        self.evictions = 0
        self.incremental_requests = 0
        self._next_id = 0

    # -- metrics ------------------------------------------------------------------

    @property
    def size(self) -> int:
        """NumIncrementalFetchSessions."""
        return len(self.sessions)

    @property
    def partitions_cached(self) -> int:
        """NumIncrementalFetchPartitionsCached."""
        return self._partitions_cached

    # -- events -------------------------------------------------------------------

    def notify(self, tp: TopicPartition) -> None:
        """Something a fetch would answer changed on ``tp``: every session
        holding it reads it on its next (or waiting) fetch."""
        for session in self._watchers.get(tp, ()):
            session.mark(tp)

    # -- the request's session ----------------------------------------------------

    def open(self, privileged: bool, size: int, now: float) -> FetchSession | None:
        """A new, empty session for a request of ``size`` partitions, or None
        when the cache is full and no session may be evicted for it."""
        if self.max_slots <= 0:
            return None
        if (len(self.sessions) >= self.max_slots
                and not self._evict_for(privileged, size, now)):
            return None
        self._next_id = self._next_id % 0x7FFFFFFF + 1
        while self._next_id in self.sessions:
            self._next_id = self._next_id % 0x7FFFFFFF + 1
        session = FetchSession(self._next_id, privileged, now, now)
        self.sessions[session.id] = session
        return session

    def incremental(self, session_id: int, epoch: int, now: float) -> FetchSession:
        """The session an incremental request names, its epoch checked and moved on.

        Raises:
            SessionError: FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH.
        """
        session = self.sessions.get(session_id)
        if session is None:
            raise SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.epoch:
            raise SessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        session.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        session.last_used = now
        self.incremental_requests += 1
        return session

    def close(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        for tp in list(session.partitions):
            self._unwatch(session, tp)
        self._partitions_cached -= len(session.partitions)
        session.partitions.clear()
        session.wake.set()

    def put(self, session: FetchSession, tp: TopicPartition, cached: CachedPartition) -> None:
        """Add ``tp`` to the session, or update what the client asks for it."""
        old = session.partitions.get(tp)
        if old is None:
            session.partitions[tp] = cached
            self._watchers.setdefault(tp, set()).add(session)
            self._partitions_cached += 1
            return
        old.topic_id = cached.topic_id
        old.fetch_offset = cached.fetch_offset
        old.max_bytes = cached.max_bytes
        old.current_leader_epoch = cached.current_leader_epoch
        old.last_fetched_epoch = cached.last_fetched_epoch

    def forget(self, session: FetchSession, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            if session.partitions.pop(tp, None) is not None:
                self._unwatch(session, tp)
                self._partitions_cached -= 1
            session.dirty.discard(tp)

    # -- internals ----------------------------------------------------------------

    def _unwatch(self, session: FetchSession, tp: TopicPartition) -> None:
        watching = self._watchers.get(tp)
        if watching is not None:
            watching.discard(session)
            if not watching:
                del self._watchers[tp]

    def _evict_for(self, privileged: bool, size: int, now: float) -> bool:
        """Make room for a new session (see the module docstring)."""
        oldest = min(self.sessions.values(), key=lambda s: s.last_used)
        if now - oldest.last_used > self.eviction_s:
            self._evict(oldest, "idle")
            return True
        candidates = [s for s in self.sessions.values()
                      if now - s.created >= self.eviction_s and (privileged or not s.privileged)]
        if not candidates:
            return False
        weakest = min(candidates, key=FetchSession.rank)
        if (privileged, size) <= (weakest.privileged, len(weakest.partitions)):
            return False
        self._evict(weakest, "ranked")
        return True

    def _evict(self, session: FetchSession, why: str) -> None:
        log.info("fetch session evicted", session=session.id, reason=why,
                 partitions=len(session.partitions), privileged=session.privileged)
        self.evictions += 1
        self.close(session.id)
