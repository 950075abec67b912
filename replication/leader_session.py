"""The follower's side of its fetch session with one leader (KIP-227): which
partitions the next Fetch request names, full or incremental, and what the
leader's session holds after each answer. Used by ``replication.fetcher``.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from protocol.errors import ErrorCode
from protocol.partition import TopicPartition
from replication.fetch_session import INITIAL_EPOCH, NO_SESSION

log = structlog.get_logger(__name__)


# What a fetch request tells the leader about one partition: fetch offset,
# current leader epoch, last fetched epoch, log start offset.
Position = tuple[int, int, int, int]
# In ``LeaderSession.sent``: a partition to name again whatever its position.
_UNSENT: Position = (-2, -2, -2, -2)


class LeaderSession:
    """The follower's side of its fetch session with one leader (KIP-227's
    FetchSessionHandler): which request to send next, full or incremental.

    ``sent`` is what the leader's session holds for each partition, as of the
    last answered request. Opening a session names every fetching partition;
    after that only the partitions the fetcher reports as changed are named,
    and only if their position differs from ``sent``: the work per request
    follows what changed, not how many partitions the session holds.
    """

    def __init__(self) -> None:
        self.id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self.sent: dict[TopicPartition, Position] = {}
        # The request out: (named, forgotten), applied to ``sent`` once answered.
        self._out: tuple[dict[TopicPartition, Position], list[TopicPartition]] = ({}, [])

    @property
    def opening(self) -> bool:
        return self.epoch == INITIAL_EPOCH

    def build(self, changed: dict[TopicPartition, Position], left: Iterable[TopicPartition]
              ) -> tuple[dict[TopicPartition, Position], list[TopicPartition]]:
        """(partitions to name with their positions, partitions to forget).

        Args:
            changed: fetching partitions whose position may have moved (every
                fetching partition when ``opening``).
            left: partitions that stopped fetching since the last request.
        """
        if self.opening:
            named, forgotten = dict(changed), []
        else:
            named = {tp: pos for tp, pos in changed.items() if self.sent.get(tp) != pos}
            forgotten = [tp for tp in left if tp in self.sent and tp not in changed]
        self._out = (named, forgotten)
        return named, forgotten

    def answered(self, error: ErrorCode, session_id: int) -> bool:
        """Take the leader's answer to the last request built.

        Returns:
            False if the leader refused the session (the next request opens a
            new one, naming every partition).
        """
        named, forgotten = self._out
        if error in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                     ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            log.info("fetch session refused by the leader; starting a new one",
                     session=self.id, error=error.name)
            self.id, self.epoch, self.sent = NO_SESSION, INITIAL_EPOCH, {}
            return False
        if self.opening:
            self.id = session_id
            self.epoch = INITIAL_EPOCH if session_id == NO_SESSION else 1
            self.sent = dict(named) if self.id != NO_SESSION else {}
            return True
        self.epoch = self.epoch + 1 if self.epoch < 0x7FFFFFFF else 1
        self.sent.update(named)
        for tp in forgotten:
            self.sent.pop(tp, None)
        return True

    def resend(self, tp: TopicPartition) -> None:
        """Name ``tp`` in the next request that fetches it, even at the position
        the leader last heard: it stopped fetching (an error, a truncation), and
        an answer about it may have been dropped meanwhile; the leader, having
        answered, would not answer it again until it has news."""
        if tp in self.sent:
            self.sent[tp] = _UNSENT

    def reset(self) -> None:
        """After a lost answer: the next request is full, closing the old session."""
        self.epoch = INITIAL_EPOCH
        self.sent = {}
