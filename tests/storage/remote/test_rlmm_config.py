"""The built-in metadata manager's rlmm.config.* keys: Kafka's defaults, the
keys it applies, and a ConfigError naming every key it would ignore."""

from __future__ import annotations

import pytest

from config import ConfigError
from storage.remote.rlmm_config import RlmmSettings, parse_settings


def test_no_keys_give_kafkas_defaults():
    assert parse_settings({}) == RlmmSettings() == RlmmSettings(
        num_partitions=50, replication_factor=3, retention_ms=-1, consume_wait_ms=120_000,
        init_retry_interval_ms=100, init_retry_max_timeout_ms=120_000, fetch_max_wait_ms=500,
        fetch_min_bytes=1, fetch_max_bytes=50 * 1024 * 1024,
        max_partition_fetch_bytes=1024 * 1024)


def test_applied_keys():
    got = parse_settings({
        "remote.log.metadata.topic.num.partitions": "7",
        "remote.log.metadata.topic.replication.factor": "2",
        "remote.log.metadata.topic.retention.ms": "86400000",
        "remote.log.metadata.consume.wait.ms": "5000",
        "remote.log.metadata.initialization.retry.interval.ms": "250",
        "remote.log.metadata.initialization.retry.max.timeout.ms": "9000",
        "remote.log.metadata.common.client.fetch.max.wait.ms": "800",
        "remote.log.metadata.common.client.request.timeout.ms": "7000",
        "remote.log.metadata.consumer.fetch.max.wait.ms": "300",  # beats the common key
        "remote.log.metadata.consumer.fetch.min.bytes": "10",
        "remote.log.metadata.consumer.max.partition.fetch.bytes": "4096",
        "remote.log.metadata.producer.request.timeout.ms": "2000",
    })
    assert got == RlmmSettings(
        num_partitions=7, replication_factor=2, retention_ms=86_400_000, consume_wait_ms=5000,
        init_retry_interval_ms=250, init_retry_max_timeout_ms=9000, fetch_max_wait_ms=300,
        fetch_min_bytes=10, max_partition_fetch_bytes=4096,
        consumer_request_timeout_ms=7000, producer_request_timeout_ms=2000)


def test_compaction_keys_are_applied_not_refused():
    got = parse_settings({
        "remote.log.metadata.snapshot.interval.ms": "1000",
        "remote.log.metadata.compaction.min.superseded.records": "-1",
    })
    assert got == RlmmSettings(snapshot_interval_ms=1000, compaction_min_superseded_records=-1)
    assert RlmmSettings().snapshot_interval_ms == 30_000
    assert RlmmSettings().compaction_min_superseded_records == 10_000


@pytest.mark.parametrize("key", [
    "remote.log.metadata.common.client.security.protocol",
    "remote.log.metadata.common.client.bootstrap.servers",
    "remote.log.metadata.producer.linger.ms",
    "remote.log.metadata.producer.fetch.max.wait.ms",  # a consumer key under the producer
    "remote.log.metadata.consumer.auto.offset.reset",
    "remote.log.metadata.topic.min.isr",
    "remote.log.metadata.publish.wait.ms",
    "something.else",
])
def test_keys_not_applied_are_refused_by_name(key):
    with pytest.raises(ConfigError) as refused:
        parse_settings({key: "1"})
    assert refused.value.key == "rlmm.config." + key
    assert "rlmm.config." + key in str(refused.value)


@pytest.mark.parametrize(("key", "value"), [
    ("remote.log.metadata.topic.num.partitions", "0"),
    ("remote.log.metadata.topic.num.partitions", "many"),
    ("remote.log.metadata.topic.replication.factor", "0"),
    ("remote.log.metadata.topic.replication.factor", "40000"),  # a short
    ("remote.log.metadata.topic.retention.ms", "0"),
    ("remote.log.metadata.topic.retention.ms", "-2"),
    ("remote.log.metadata.consume.wait.ms", "-1"),
    ("remote.log.metadata.initialization.retry.interval.ms", "-5"),
    ("remote.log.metadata.consumer.fetch.max.wait.ms", "-1"),
    ("remote.log.metadata.consumer.max.partition.fetch.bytes", "0"),
    ("remote.log.metadata.snapshot.interval.ms", "0"),
    ("remote.log.metadata.compaction.min.superseded.records", "-2"),
    ("remote.log.metadata.compaction.min.superseded.records", "often"),
])
def test_bad_values_are_refused_by_name(key, value):
    with pytest.raises(ConfigError) as refused:
        parse_settings({key: value})
    assert refused.value.key == "rlmm.config." + key
