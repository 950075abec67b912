"""The coordinators' one store: appends, their error answers (for both
coordinators), and the records a replay reads. A real single-node core
underneath; failures are injected into its internal topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.coordinator.offsets_store import offsets_store
from broker.coordinator_store import CoordinatorStore, answer_for
from broker.transactions.log_store import txn_store
from protocol import control
from protocol import records as batches
from protocol.errors import ErrorCode as E
from protocol.errors import KafkaApiError
from replication.local_admin import SingleNode
from storage.log.producer_state import AppendOrigin
from tests.coordinator.conftest import make_config, make_node, trio_wall_clock

# (store of a coordinator's topic, what it answers for a batch too large for the log)
GROUPS = ("groups", E.INVALID_COMMIT_OFFSET_SIZE)
TRANSACTIONS = ("transactions", E.UNKNOWN_SERVER_ERROR)
BOTH = pytest.mark.parametrize("which,oversized", [GROUPS, TRANSACTIONS])


@pytest.fixture
def node(tmp_path: Path) -> SingleNode:
    return make_node(make_config(tmp_path, transaction_state_log_num_partitions="3"))


def store_of(node: SingleNode, which: str) -> CoordinatorStore:
    if which == "groups":
        return offsets_store(node.internal.offsets, trio_wall_clock)
    return txn_store(node.internal.transactions, trio_wall_clock)


def _raise(error: BaseException):
    def fail(*args: object, **kwargs: object) -> None:
        raise error
    return fail


@pytest.mark.parametrize("error,answer", [
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.INVALID_PRODUCER_EPOCH, E.INVALID_PRODUCER_EPOCH),  # not a coordinator matter
    (E.NONE, E.NONE),
])
@BOTH
def test_append_errors_are_answered_as_kafka_coordinators_answer(which, oversized, error,
                                                                  answer):
    assert answer_for(error, oversized) is answer


@pytest.mark.parametrize("error", [E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE,
                                   E.INVALID_FETCH_SIZE])
@BOTH
def test_a_batch_too_large_is_answered_per_coordinator(which, oversized, error):
    assert answer_for(error, oversized) is oversized


@BOTH
async def test_appends_before_the_topic_exists_are_coordinator_not_available(node, which,
                                                                             oversized):
    store = store_of(node, which)
    assert store.append("k", [(b"k", b"v")]) is E.COORDINATOR_NOT_AVAILABLE


@BOTH
async def test_a_storage_error_is_answered_not_coordinator(node, which, oversized,
                                                           monkeypatch):
    store = store_of(node, which)
    await store.ensure_topic()
    monkeypatch.setattr(store.topic, "append_records", _raise(OSError("disk gone")))
    monkeypatch.setattr(store.topic, "append", _raise(OSError("disk gone")))
    assert store.append("k", [(b"k", b"v")]) is E.NOT_COORDINATOR
    assert store.append_batch("k", batches.build_batch([(b"k", b"v")]),
                              AppendOrigin.COORDINATOR) is E.NOT_COORDINATOR


@BOTH
async def test_log_refusals_are_mapped(node, which, oversized, monkeypatch):
    store = store_of(node, which)
    await store.ensure_topic()
    too_large = KafkaApiError(E.MESSAGE_TOO_LARGE, "big")
    monkeypatch.setattr(store.topic, "append_records", _raise(too_large))
    assert store.append("k", [(b"k", b"v")]) is oversized
    fenced = KafkaApiError(E.INVALID_PRODUCER_EPOCH, "old epoch")
    monkeypatch.setattr(store.topic, "append", _raise(fenced))
    assert store.append_batch("k", b"", AppendOrigin.COORDINATOR) is E.INVALID_PRODUCER_EPOCH


@BOTH
async def test_replication_failures_are_mapped(node, which, oversized, monkeypatch):
    store = store_of(node, which)
    await store.ensure_topic()
    assert store.append("k", [(b"k", b"v")]) is E.NONE
    assert await store.wait_durable("k", 1000) is E.NONE

    async def timed_out(partition: int, timeout_ms: int) -> E:
        return E.REQUEST_TIMED_OUT
    monkeypatch.setattr(store.topic, "wait_durable", timed_out)
    assert await store.wait_durable("k", 1000) is E.COORDINATOR_NOT_AVAILABLE


@BOTH
async def test_nothing_to_append_is_no_write(node, which, oversized):
    store = store_of(node, which)
    assert store.append("k", []) is E.NONE  # no topic needed either


async def test_records_skip_markers_and_transactional_batches(node):
    store = store_of(node, "groups")
    await store.ensure_topic()
    partition = store.partition_of("k")
    assert store.append("k", [(b"a", b"1"), (b"b", None)]) is E.NONE
    transactional = batches.build_batch([(b"t", b"x")], producer_id=5, producer_epoch=0,
                                        base_sequence=0, attributes=batches.ATTR_TRANSACTIONAL)
    assert store.append_batch("k", transactional, AppendOrigin.CLIENT) is E.NONE
    store.topic.append(partition, control.marker_batch(5, 0, True, 0, trio_wall_clock()),
                       AppendOrigin.COORDINATOR)
    assert store.append("k", [(b"a", b"2")]) is E.NONE
    assert list(store.records(partition)) == [(b"a", b"1"), (b"b", None), (b"a", b"2")]
