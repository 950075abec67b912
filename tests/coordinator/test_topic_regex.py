"""SubscribedTopicRegex patterns: RE2-only syntax, whole-name matches, refresh."""

from __future__ import annotations

import pytest

from broker.coordinator.topic_regex import REFRESH_INTERVAL_S, RegexResolver, compile_pattern


@pytest.mark.parametrize("pattern", ["orders", "orders-.*", "(a|b)[0-9]+", r"x\\1", "a{2,3}"])
def test_re2_patterns_compile(pattern):
    assert compile_pattern(pattern) is not None


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?P<x>a)(?P=x)", "a(?=b)", "a(?!b)",
                                     "(?<=a)b", "(?<!a)b", "(?>a)", "a++", "a*+", "a{2}+",
                                     "(?(1)a|b)", "(", "[z-a]"])
def test_patterns_re2_refuses_are_invalid(pattern):
    assert compile_pattern(pattern) is None


def test_matches_whole_names_only_and_skips_internal_topics():
    resolver = RegexResolver()
    names = ["orders", "orders-eu", "old-orders", "__consumer_offsets"]
    got = resolver.resolve(["orders.*", ".*"], lambda: names, lambda n: n.startswith("__"), 0.0)
    assert got == {"orders.*": frozenset({"orders", "orders-eu"}),
                   ".*": frozenset({"orders", "orders-eu", "old-orders"})}


def test_matches_refresh_after_the_interval_or_for_a_new_pattern():
    resolver = RegexResolver()
    names = ["a1"]
    resolver.resolve(["a.*"], lambda: names, lambda n: False, 0.0)
    names.append("a2")
    assert resolver.resolve(["a.*"], lambda: names, lambda n: False, 1.0)["a.*"] == {"a1"}
    assert resolver.resolve(["a.*", "a2"], lambda: names, lambda n: False, 2.0) == \
        {"a.*": frozenset({"a1", "a2"}), "a2": frozenset({"a2"})}
    names.append("a3")
    later = resolver.resolve(["a.*"], lambda: names, lambda n: False, 2.0 + REFRESH_INTERVAL_S)
    assert later["a.*"] == {"a1", "a2", "a3"}


def test_patterns_are_re2s_linear_time_ones():
    # RE2 syntax that Python's re refuses: Unicode classes.
    letters = compile_pattern(r"\pL+")
    assert letters is not None and letters.fullmatch("orders") and not letters.fullmatch("o-1")
    # Nested quantifiers against a long non-matching name: a backtracking engine
    # would take longer than the test's timeout; RE2 answers in one pass.
    nested = compile_pattern(r"(a+)+b")
    assert nested is not None and nested.fullmatch("a" * 200 + "c") is None
    assert nested.fullmatch("aaab")
