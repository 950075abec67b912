"""``tierd admin transactions``: find and abort hanging transactions, as Kafka's
kafka-transactions.sh does (KIP-664).

Theory of operation: ``list`` asks every broker's transaction coordinator
(ListTransactions), ``describe`` the id's coordinator (DescribeTransactions),
``describe-producers`` a partition's leader (DescribeProducers), and
``abort`` writes an ABORT marker on one partition through its leader
(WriteTxnMarkers with the producer id, epoch and coordinator epoch that
``describe-producers`` showed).

``find-hanging`` follows kafka-transactions' rule: a producer with an open
transaction on a partition whose last write is older than
``--max-transaction-timeout-ms`` is a candidate; it is hanging unless its
coordinator still has that transaction open on that partition (same producer
id and epoch, the partition in the transaction). A producer no coordinator
knows (the transactional id expired, or the batch bypassed the coordinator)
is hanging too. Those are the transactions no coordinator will ever end: the
partition's last stable offset stays behind them until ``abort``.

Error handling: a Kafka error becomes an ``AdminError`` naming it (exit 1);
a timeout or lost connection exits 3; bad arguments exit 2 in argparse.
"""

from __future__ import annotations

import time
from typing import Any

from kafka import TopicPartition
from kafka.admin._transactions import AbortTransactionSpec, TransactionState

from broker.admin.common import EXIT_OK, Column, admin_client, emit, emit_json
from broker.admin.groups import kafka_call

# kafka-transactions' default: transaction.max.timeout.ms's default, 15 minutes.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000
# States in which a coordinator still owes the partition a marker.
OPEN_STATES = frozenset({TransactionState.ONGOING, TransactionState.PREPARE_COMMIT,
                         TransactionState.PREPARE_ABORT, TransactionState.PREPARE_EPOCH_FENCE})
# What DescribeProducers answers (and the Java tool prints) for "none".
NONE = -1

LIST_COLUMNS = [Column("transactional_id", "TRANSACTIONAL-ID"),
                Column("coordinator", "COORDINATOR", numeric=True),
                Column("producer_id", "PRODUCER-ID", numeric=True), Column("state", "STATE")]
DESCRIBE_COLUMNS = [
    Column("coordinator", "COORDINATOR", numeric=True),
    Column("transactional_id", "TRANSACTIONAL-ID"),
    Column("producer_id", "PRODUCER-ID", numeric=True),
    Column("producer_epoch", "EPOCH", numeric=True), Column("state", "STATE"),
    Column("timeout_ms", "TIMEOUT-MS", numeric=True),
    Column("start_time_ms", "START-TIME-MS", numeric=True), Column("partitions", "PARTITIONS")]
PRODUCER_COLUMNS = [
    Column("producer_id", "PRODUCER-ID", numeric=True),
    Column("producer_epoch", "EPOCH", numeric=True),
    Column("last_sequence", "LAST-SEQUENCE", numeric=True),
    Column("last_timestamp", "LAST-TIMESTAMP", numeric=True),
    Column("coordinator_epoch", "COORDINATOR-EPOCH", numeric=True),
    Column("txn_start_offset", "TXN-START-OFFSET", numeric=True)]
HANGING_COLUMNS = [Column("topic", "TOPIC"), Column("partition", "PARTITION", numeric=True),
                   *PRODUCER_COLUMNS, Column("transactional_id", "TRANSACTIONAL-ID"),
                   Column("age_ms", "AGE-MS", numeric=True)]


def register(sub: Any) -> None:
    """Add ``transactions list|describe|describe-producers|abort|find-hanging``."""
    txns = sub.add_parser("transactions", help="transactions: list, describe, find and abort "
                                               "hanging ones")
    actions = txns.add_subparsers(dest="transactions_command", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every transactional id the coordinators know")
    listing.add_argument("--state", action="append", default=[], metavar="STATE",
                         help="only this state (Kafka's names: Ongoing, Empty, ...; repeatable)")
    listing.add_argument("--producer-id", action="append", type=int, default=[],
                         metavar="PID", help="only this producer id (repeatable)")
    listing.add_argument("--duration-ms", type=int, metavar="MS",
                         help="only transactions open for longer than MS")
    listing.set_defaults(func=list_transactions)

    describe = actions.add_parser("describe", help="one transactional id's current transaction")
    describe.add_argument("--transactional-id", required=True, metavar="ID")
    describe.set_defaults(func=describe_transaction)

    producers = actions.add_parser("describe-producers",
                                   help="the producers a partition's leader knows")
    _partition_args(producers)
    producers.add_argument("--broker-id", type=int, metavar="ID",
                           help="ask this replica instead of the leader")
    producers.set_defaults(func=describe_producers)

    abort = actions.add_parser("abort", help="write an ABORT marker for a producer's open "
                                             "transaction on one partition")
    _partition_args(abort)
    abort.add_argument("--producer-id", type=int, required=True, metavar="PID")
    abort.add_argument("--producer-epoch", type=int, required=True, metavar="EPOCH")
    abort.add_argument("--coordinator-epoch", type=int, required=True, metavar="EPOCH",
                       help="as describe-producers shows it (-1 there: give 0)")
    abort.set_defaults(func=abort_transaction)

    hanging = actions.add_parser("find-hanging", help="open transactions no coordinator "
                                                      "will end")
    hanging.add_argument("--topic", metavar="T", help="only this topic (default: all)")
    hanging.add_argument("--partition", type=int, metavar="P", help="only this partition")
    hanging.add_argument("--max-transaction-timeout-ms", type=int,
                         default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, metavar="MS",
                         help="older than this is suspect (default %(default)s)")
    hanging.set_defaults(func=find_hanging)


def _partition_args(parser: Any) -> None:
    parser.add_argument("--topic", required=True, metavar="T")
    parser.add_argument("--partition", type=int, required=True, metavar="P")


def list_transactions(args: Any) -> int:
    """``transactions list``: every coordinator's ids, filtered as asked."""
    with admin_client(args) as client, kafka_call("list transactions"):
        by_broker = client.list_transactions(
            producer_id_filters=args.producer_id or None, state_filters=args.state or None,
            duration_filter_ms=args.duration_ms)
    rows = sorted(({"transactional_id": t.transactional_id, "coordinator": broker,
                    "producer_id": t.producer_id, "state": t.state.value}
                   for broker, listed in by_broker.items() for t in listed),
                  key=lambda row: row["transactional_id"])
    emit(args, rows, LIST_COLUMNS)
    return EXIT_OK


def describe_transaction(args: Any) -> int:
    """``transactions describe``: state, producer, timeout, start and partitions."""
    txn_id = args.transactional_id
    with admin_client(args) as client, kafka_call(f"describe transaction {txn_id}"):
        d = client.describe_transactions([txn_id])[txn_id]
    row = {"transactional_id": txn_id, "coordinator": d.coordinator_id,
           "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
           "state": d.state.value, "timeout_ms": d.transaction_timeout_ms,
           "start_time_ms": d.transaction_start_time_ms,
           "partitions": sorted(f"{tp.topic}:{tp.partition}" for tp in d.topic_partitions)}
    emit(args, [row], DESCRIBE_COLUMNS)
    return EXIT_OK


def describe_producers(args: Any) -> int:
    """``transactions describe-producers``: the partition's active producers."""
    tp = TopicPartition(args.topic, args.partition)
    with admin_client(args) as client, kafka_call(f"describe producers of {tp.topic}-"
                                                  f"{tp.partition}"):
        states = client.describe_producers([tp], broker_id=args.broker_id)[tp]
    emit(args, [_producer_row(p) for p in states.active_producers], PRODUCER_COLUMNS)
    return EXIT_OK


def _producer_row(p: Any) -> dict[str, Any]:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
            "coordinator_epoch": p.coordinator_epoch,
            "txn_start_offset": p.current_transaction_start_offset}


def abort_transaction(args: Any) -> int:
    """``transactions abort``: the ABORT marker, written by the partition's leader."""
    tp = TopicPartition(args.topic, args.partition)
    spec = AbortTransactionSpec(tp, args.producer_id, args.producer_epoch,
                                args.coordinator_epoch)
    with admin_client(args) as client, kafka_call(f"abort transaction on {tp.topic}-"
                                                  f"{tp.partition}"):
        client.abort_transaction(spec)
    result = {"topic": tp.topic, "partition": tp.partition, "producer_id": args.producer_id,
              "producer_epoch": args.producer_epoch, "result": "aborted"}
    if args.json:
        emit_json(result)
    else:
        print(f"aborted the transaction of producer {args.producer_id} (epoch "
              f"{args.producer_epoch}) on {tp.topic}-{tp.partition}")
    return EXIT_OK


def find_hanging(args: Any) -> int:
    """``transactions find-hanging``: see the module docstring for the rule."""
    with admin_client(args) as client:
        partitions = _partitions(client, args.topic, args.partition)
        with kafka_call("describe producers"):
            states = client.describe_producers(partitions) if partitions else {}
        now = int(time.time() * 1000)
        candidates = [(tp, p) for tp, state in sorted(states.items())
                      for p in state.active_producers
                      if p.current_transaction_start_offset != NONE
                      and now - p.last_timestamp > args.max_transaction_timeout_ms]
        ids = _transactional_ids(client, {p.producer_id for _, p in candidates})
        with kafka_call("describe transactions"):
            described = client.describe_transactions(sorted(set(ids.values())))
    rows = []
    for tp, p in candidates:
        txn_id = ids.get(p.producer_id)
        d = described.get(txn_id) if txn_id is not None else None
        if d is not None and d.state in OPEN_STATES and d.producer_epoch == p.producer_epoch \
                and d.producer_id == p.producer_id and tp in d.topic_partitions:
            continue  # its coordinator will end it
        rows.append({"topic": tp.topic, "partition": tp.partition, **_producer_row(p),
                     "transactional_id": txn_id, "age_ms": now - p.last_timestamp})
    emit(args, rows, HANGING_COLUMNS)
    return EXIT_OK


def _partitions(client: Any, topic: str | None, partition: int | None) -> list[TopicPartition]:
    """The partitions to search: one, a topic's, or every non-internal topic's."""
    if topic is not None and partition is not None:
        return [TopicPartition(topic, partition)]
    with kafka_call("describe topics"):
        names = [topic] if topic is not None else \
            [t for t in client.list_topics() if not t.startswith("__")]
        described = client.describe_topics(names) if names else []
    return sorted(TopicPartition(t["name"], p["partition_index"])
                  for t in described for p in t["partitions"])


def _transactional_ids(client: Any, producer_ids: set[int]) -> dict[int, str]:
    """Producer id -> the transactional id a coordinator has it under."""
    if not producer_ids:
        return {}
    with kafka_call("list transactions"):
        by_broker = client.list_transactions(producer_id_filters=sorted(producer_ids))
    return {t.producer_id: t.transactional_id for listed in by_broker.values() for t in listed
            if t.producer_id in producer_ids}
