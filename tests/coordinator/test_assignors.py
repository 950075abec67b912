"""The KIP-848 server-side assignors as pure functions: balance, stickiness,
heterogeneous subscriptions, and range's per-topic ranges."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.assignors import (
    MemberSpec,
    Partitions,
    TopicMetadata,
    range_assignor,
    uniform_assignor,
)

A = uuid.UUID(int=1)
B = uuid.UUID(int=2)
TOPICS = {"a": TopicMetadata(A, "a", 6), "b": TopicMetadata(B, "b", 3)}


def members(subs: dict[str, set[str]], targets: dict[str, Partitions] | None = None
            ) -> dict[str, MemberSpec]:
    targets = targets or {}
    return {m: MemberSpec(frozenset(s), targets.get(m, {})) for m, s in subs.items()}


def counts(result: dict[str, Partitions]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in parts.values()) for m, parts in result.items()}


def owners(result: dict[str, Partitions]) -> dict[tuple[uuid.UUID, int], str]:
    out: dict[tuple[uuid.UUID, int], str] = {}
    for m, parts in result.items():
        for t, ps in parts.items():
            for p in ps:
                assert (t, p) not in out, f"{(t, p)} assigned twice"
                out[(t, p)] = m
    return out


def test_uniform_balances_a_homogeneous_group():
    result = uniform_assignor(members({"m1": {"a", "b"}, "m2": {"a", "b"}, "m3": {"a", "b"}}),
                              TOPICS)
    assert sorted(counts(result).values()) == [3, 3, 3]
    assert len(owners(result)) == 9


def test_uniform_is_sticky_when_a_member_joins():
    before = uniform_assignor(members({"m1": {"a"}, "m2": {"a"}}), TOPICS)
    after = uniform_assignor(members({"m1": {"a"}, "m2": {"a"}, "m3": {"a"}}, before), TOPICS)
    assert sorted(counts(after).values()) == [2, 2, 2]
    # The newcomer's partitions come from the others; nobody else trades.
    for m in ("m1", "m2"):
        assert after[m][A] <= before[m][A]


def test_uniform_respects_subscriptions_and_balances_what_it_can():
    result = uniform_assignor(members({"m1": {"a"}, "m2": {"a", "b"}, "m3": {"b"}}), TOPICS)
    assert B not in result["m1"] and A not in result["m3"]
    assert sorted(counts(result).values()) == [3, 3, 3]


def test_uniform_drops_partitions_of_topics_gone_or_shrunk():
    before = {"m1": {A: {0, 1, 2}, uuid.UUID(int=9): {0}}, "m2": {A: {3, 4, 5}}}
    small = {"a": TopicMetadata(A, "a", 4)}
    result = uniform_assignor(members({"m1": {"a"}, "m2": {"a"}}, before), small)
    assert owners(result).keys() == {(A, p) for p in range(4)}
    assert sorted(counts(result).values()) == [2, 2]


def test_range_gives_consecutive_ranges_by_member_id():
    result = range_assignor(members({"m2": {"a", "b"}, "m1": {"a", "b"}, "m3": {"a"}}), TOPICS)
    assert result["m1"] == {A: {0, 1}, B: {0, 1}}
    assert result["m2"] == {A: {2, 3}, B: {2}}
    assert result["m3"] == {A: {4, 5}}


def test_range_leaves_members_without_partitions_when_there_are_too_few():
    result = range_assignor(members({f"m{i}": {"b"} for i in range(5)}), TOPICS)
    assert counts(result) == {"m0": 1, "m1": 1, "m2": 1, "m3": 0, "m4": 0}


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from([f"m{i}" for i in range(6)]),
                       st.sets(st.sampled_from(["a", "b"]), min_size=1), min_size=1),
       st.integers(0, 5))
def test_uniform_assigns_each_subscribed_partition_once_and_balances_homogeneous(subs, seed):
    first = uniform_assignor(members(subs), TOPICS)
    # Some members left and came back with a stale target: still consistent.
    again = uniform_assignor(members(subs, {m: t for i, (m, t) in enumerate(first.items())
                                            if i % (seed + 1) == 0}), TOPICS)
    for result in (first, again):
        got = owners(result)
        wanted = {(TOPICS[t].topic_id, p) for s in subs.values() for t in s
                  for p in range(TOPICS[t].partitions)}
        assert got.keys() == wanted
        for (topic_id, _), m in got.items():
            name = "a" if topic_id == A else "b"
            assert name in subs[m]
        if len({frozenset(s) for s in subs.values()}) == 1:
            values = counts(result).values()
            assert max(values) - min(values) <= 1
