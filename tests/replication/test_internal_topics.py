"""Internal topics: key -> partition mapping (Java's String.hashCode)."""

from __future__ import annotations

import pytest

from replication.internal_topics import java_string_hash, partition_for


@pytest.mark.parametrize("text,expected", [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),              # Java: "hello".hashCode()
    ("Hello World", -862545276),      # overflows int32
    ("\u00e9", 0xE9),                 # one UTF-16 unit, not two UTF-8 bytes
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair counts as two units
])
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_partition_for_masks_the_sign_bit():
    # "Hello World" hashes negative: Kafka takes hash & 0x7fffffff, not abs().
    assert partition_for("Hello World", 50) == (-862545276 & 0x7FFFFFFF) % 50 == 22
    assert abs(-862545276) % 50 != 22
    assert partition_for("hello", 50) == 99162322 % 50
