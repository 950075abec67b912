"""How Kafka's requests and our modules name a partition: (topic name, partition
index). One definition for every package."""

from __future__ import annotations

TopicPartition = tuple[str, int]
