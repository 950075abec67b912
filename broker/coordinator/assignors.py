"""Server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

An assignor is a pure function from the group's members (their subscribed
topic names and their current target assignment) and the subscribed topics'
metadata to a new target assignment. The coordinator runs it whenever the
group epoch moves past the assignment epoch; clients choose one with the
ServerAssignor field of ConsumerGroupHeartbeat, among those configured in
``group.consumer.assignors`` (the first is the default).

- ``uniform``: every partition of a subscribed topic goes to one of the
  members subscribed to it, so that the members' partition counts differ by
  at most one where the subscriptions allow it, moving as few partitions
  as possible from their current owners (sticky). Kafka's uniform assignor
  has the same goals; the exact placement can differ.
- ``range``: per topic, the subscribed members sorted by member id get
  consecutive ranges of partitions, the first ``partitions % members`` one
  partition more; members subscribed to co-partitioned topics get the same
  partition numbers of each.

Partitions are keyed by topic id, as on the wire.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# topic id -> partition numbers.
Partitions = dict[uuid.UUID, set[int]]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(slots=True)
class MemberSpec:
    """What an assignor knows of a member: its subscription and current target."""
    subscribed: frozenset[str]
    target: Partitions


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[str, TopicMetadata]],
                    dict[str, Partitions]]


def _eligible(members: Mapping[str, MemberSpec], topic: str) -> list[str]:
    return sorted(m for m, spec in members.items() if topic in spec.subscribed)


def range_assignor(members: Mapping[str, MemberSpec],
                   topics: Mapping[str, TopicMetadata]) -> dict[str, Partitions]:
    """Consecutive ranges of each topic's partitions, by member id order."""
    result: dict[str, Partitions] = {m: {} for m in members}
    for name in sorted(topics):
        meta = topics[name]
        eligible = _eligible(members, name)
        if not eligible:
            continue
        share, extra = divmod(meta.partitions, len(eligible))
        start = 0
        for i, member in enumerate(eligible):
            count = share + (1 if i < extra else 0)
            if count:
                result[member][meta.topic_id] = set(range(start, start + count))
            start += count
    return result


def uniform_assignor(members: Mapping[str, MemberSpec],
                     topics: Mapping[str, TopicMetadata]) -> dict[str, Partitions]:
    """Balanced and sticky: keep current owners, place the rest on the least
    loaded eligible member, then move partitions from the most to the least
    loaded eligible member until no move narrows the gap.

    Each move lowers the sum of squared loads, so the last loop ends.
    """
    owner: dict[tuple[uuid.UUID, int], str] = {}
    eligible = {meta.topic_id: _eligible(members, name) for name, meta in topics.items()}
    counts = {meta.topic_id: meta.partitions for meta in topics.values()}
    load = dict.fromkeys(members, 0)
    # Current owners keep what is still theirs to have.
    for member in sorted(members):
        for topic_id, parts in members[member].target.items():
            if member not in eligible.get(topic_id, ()):
                continue
            for p in sorted(parts):
                if p < counts[topic_id] and (topic_id, p) not in owner:
                    owner[(topic_id, p)] = member
                    load[member] += 1
    for name in sorted(topics):
        meta = topics[name]
        candidates = eligible[meta.topic_id]
        if not candidates:
            continue
        for p in range(meta.partitions):
            if (meta.topic_id, p) not in owner:
                chosen = min(candidates, key=lambda m: (load[m], m))
                owner[(meta.topic_id, p)] = chosen
                load[chosen] += 1
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (str(tp[0]), tp[1])):
            current = owner[tp]
            target = min(eligible[tp[0]], key=lambda m: (load[m], m))
            if load[target] < load[current] - 1:
                owner[tp] = target
                load[current] -= 1
                load[target] += 1
                moved = True
    result: dict[str, Partitions] = {m: {} for m in members}
    for (topic_id, p), member in owner.items():
        result[member].setdefault(topic_id, set()).add(p)
    return result


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assignor, "range": range_assignor}
