"""Regular-expression subscriptions of KIP-848 members (ConsumerGroupHeartbeat
v1 SubscribedTopicRegex), and which topics they match.

Kafka's coordinator evaluates these patterns with RE2J; tierd uses Python's
``re`` and takes the differences into account this way:

- a pattern must match a whole topic name (``re.fullmatch``), as RE2J's
  ``matches()``;
- constructs RE2 does not have (back-references, lookahead and lookbehind,
  atomic groups, possessive quantifiers, conditionals) are refused as
  INVALID_REGULAR_EXPRESSION, as Kafka refuses them, although ``re`` could
  run them;
- what remains is evaluated by a backtracking engine: a pathological
  pattern (nested quantifiers such as ``(a+)+b``) can cost far more time
  than under RE2's linear-time guarantee. Topic names are at most 249
  characters, which bounds but does not remove that cost;
- small syntax differences remain in escapes RE2 and ``re`` read
  differently (``\\Z``, ``\\C``, Unicode classes ``\\pL``, which ``re``
  refuses as invalid).

Internal topics never match, as with the classic consumer's
exclude.internal.topics default.

Matches are cached per group and refreshed at most every
``REFRESH_INTERVAL_S`` (new topics appear in a subscription within that),
and at once when a member brings a pattern the group has not resolved.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# How often a group's patterns are matched again against the topics, so
# topics created later join the subscription (Kafka refreshes on heartbeats
# at a similar pace) without matching every topic on every heartbeat.
REFRESH_INTERVAL_S = 10.0

# RE2 syntax errors that Python's re would accept: back-references (\1, (?P=x)),
# lookaround ((?=, (?!, (?<=, (?<!), atomic groups (?>, conditionals (?(,
# and possessive quantifiers (*+, ++, ?+, }+).
_NOT_RE2 = re.compile(r"\\[1-9]|\(\?P=|\(\?<?[=!]|\(\?>|\(\?\(|[*+?}]\+")


def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """The compiled pattern, or None if RE2 would refuse it (or ``re`` cannot read it)."""
    if _NOT_RE2.search(_drop_escaped_backslashes(pattern)):
        return None
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


def _drop_escaped_backslashes(pattern: str) -> str:
    """The pattern with ``\\\\`` removed, so ``\\\\1`` is not mistaken for a back-reference."""
    return pattern.replace("\\\\", "")


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
