"""``tierd admin leader-election``: preferred or unclean leader elections,
as ``kafka-leader-election`` runs them.

``--election-type preferred|unclean`` with either ``--topic T --partition P``
(``--partition`` repeatable) or ``--all-topic-partitions``. One ElectLeaders
request goes to the controller (kafka-python's ``elect_leaders``). Each
partition is reported as ELECTED, ELECTION_NOT_NEEDED (a valid leader is
already in place, not a failure) or the error Kafka names; with
``--all-topic-partitions`` only the partitions that needed an election are
reported, as ``kafka-leader-election`` does.

Exit codes: 0 when no partition failed; 1 when one did (the rows say which)
or the whole request was refused (CLUSTER_AUTHORIZATION_FAILED: ALTER on the
cluster is needed).
"""

from __future__ import annotations

import argparse
from typing import Any

from kafka import errors as kafka_errors
from kafka.protocol.admin import ElectionType

from broker.admin.common import EXIT_FAILED, EXIT_OK, AdminError, Column, emit
from broker.admin.topics import _cluster

ELECTED = "ELECTED"
NOT_NEEDED = "ELECTION_NOT_NEEDED"

COLUMNS = (
    Column("topic", "TOPIC"),
    Column("partition", "PARTITION", numeric=True),
    Column("result", "RESULT"),
    Column("message", "MESSAGE"),
)


def register(sub: Any) -> None:
    """Add ``leader-election`` to ``sub``."""
    p = sub.add_parser("leader-election",
                       help="move leadership to preferred replicas, or elect unclean leaders")
    p.add_argument("--election-type", required=True, choices=("preferred", "unclean"),
                   type=str.lower, help="preferred: the first replica leads again if in sync; "
                   "unclean: a partition without a live leader takes any live replica")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic of --partition")
    which.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition of every topic")
    p.add_argument("--partition", type=int, action="append", default=[],
                   help="a partition of --topic (repeatable)")
    p.set_defaults(func=leader_election)


def leader_election(args: argparse.Namespace) -> int:
    """Run the election and print one row per partition.

    Raises:
        AdminError: bad usage, the request refused as a whole, or the cluster unreachable.
    """
    if args.topic is not None and not args.partition:
        raise AdminError("--topic needs --partition", 2)
    if args.all_topic_partitions and args.partition:
        raise AdminError("--partition goes with --topic, not --all-topic-partitions", 2)
    kind = ElectionType.PREFERRED if args.election_type == "preferred" else ElectionType.UNCLEAN
    wanted = None if args.all_topic_partitions else {args.topic: sorted(set(args.partition))}
    with _cluster(args) as client:
        response = client.elect_leaders(kind, topic_partitions=wanted,
                                        timeout_ms=int(args.timeout * 1000), raise_errors=False)
    top = getattr(response, "error_code", 0)
    if top:
        error = kafka_errors.for_code(top)
        raise AdminError(f"{error.message} electing leaders: {error.description}")
    rows = [_row(t.topic, p) for t in response.replica_election_results
            for p in t.partition_result]
    if args.all_topic_partitions:
        rows = [r for r in rows if r["result"] != NOT_NEEDED]
    rows.sort(key=lambda r: (r["topic"], r["partition"]))
    emit(args, rows, COLUMNS, title=f"{args.election_type} leader election")
    failed = any(r["result"] not in (ELECTED, NOT_NEEDED) for r in rows)
    return EXIT_FAILED if failed else EXIT_OK


def _row(topic: str, p: Any) -> dict[str, Any]:
    result = ELECTED if p.error_code == 0 else kafka_errors.for_code(p.error_code).message
    return {"topic": topic, "partition": p.partition_id, "result": result,
            "message": p.error_message}
