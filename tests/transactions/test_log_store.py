"""__transaction_state records: replay folds them into per-id metadata (last
record wins, a tombstone removes the id, an unreadable record is skipped)."""

from __future__ import annotations

from pathlib import Path

from broker.transactions.log_store import load_txns, txn_record, txn_store
from broker.transactions.state import TxnMetadata, TxnState
from protocol.errors import ErrorCode as E
from tests.coordinator.conftest import make_config, make_node, trio_wall_clock


async def test_replay_keeps_the_last_record_per_id(tmp_path: Path):
    node = make_node(make_config(tmp_path, transaction_state_log_num_partitions="1"))
    store = txn_store(node.internal.transactions, trio_wall_clock)
    await store.ensure_topic()
    first = TxnMetadata("a", 1, 0, 60_000, TxnState.EMPTY, last_update_timestamp=5)
    later = TxnMetadata("a", 1, 1, 60_000, TxnState.EMPTY, last_update_timestamp=6)
    gone = TxnMetadata("b", 2, 0, 60_000, TxnState.EMPTY, last_update_timestamp=5)
    for txn in (first, gone, later):
        assert store.append(txn.transactional_id,
                            [txn_record(txn.transactional_id, txn)]) is E.NONE
    assert store.append("b", [txn_record("b", None)]) is E.NONE  # tombstone
    assert store.append("c", [(b"\x00\x09junk", b"x")]) is E.NONE  # unknown key version
    assert load_txns(store, 0) == {"a": later}
