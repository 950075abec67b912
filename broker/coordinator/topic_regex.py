"""Regular-expression subscriptions of KIP-848 members (ConsumerGroupHeartbeat
v1 SubscribedTopicRegex), and which topics they match.

Kafka's coordinator evaluates these patterns with RE2J; tierd uses RE2
itself (google-re2), so the syntax and the guarantees are the same:

- a pattern must match a whole topic name (``fullmatch``), as RE2J's
  ``matches()``;
- constructs RE2 does not have (back-references, lookahead and lookbehind,
  atomic groups, possessive quantifiers) fail to compile and the member gets
  INVALID_REGULAR_EXPRESSION, as from Kafka;
- matching takes time linear in the topic name whatever the pattern, so a
  client's pattern (``(a+)+b`` and the like) can never hold the event loop,
  as a backtracking engine would.

Internal topics never match, as with the classic consumer's
exclude.internal.topics default.

Matches are cached per group and refreshed at most every
``REFRESH_INTERVAL_S`` (new topics appear in a subscription within that),
and at once when a member brings a pattern the group has not resolved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import re2

# How often a group's patterns are matched again against the topics, so
# topics created later join the subscription (Kafka refreshes on heartbeats
# at a similar pace) without matching every topic on every heartbeat.
REFRESH_INTERVAL_S = 10.0

# A client's bad pattern is answered with an error code, not logged by RE2
# itself on the broker's stderr.
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


def compile_pattern(pattern: str) -> Any | None:
    """The compiled pattern, or None if RE2 refuses it."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except (re2.error, TypeError, ValueError):
        return None


class RegexResolver:
    """Which topics each pattern of one group matches, cached with a refresh deadline."""

    def __init__(self) -> None:
        self.matches: dict[str, frozenset[str]] = {}
        self.refresh_at = 0.0

    def resolve(self, patterns: Iterable[str], names: Callable[[], Iterable[str]],
                is_internal: Callable[[str], bool], now: float) -> dict[str, frozenset[str]]:
        """Pattern -> matching topic names for ``patterns``, recomputed when a
        pattern is new or the refresh deadline has passed."""
        wanted = set(patterns)
        if now >= self.refresh_at or not wanted <= self.matches.keys():
            topics = [n for n in names() if not is_internal(n)]
            self.matches = {}
            for pattern in wanted:
                compiled = compile_pattern(pattern)
                self.matches[pattern] = frozenset(
                    t for t in topics if compiled is not None and compiled.fullmatch(t))
            self.refresh_at = now + REFRESH_INTERVAL_S
        return {p: self.matches[p] for p in wanted}
