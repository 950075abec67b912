"""``tierd admin tiering status``: where each partition's data lives
(``tiering dump-metadata``: ``broker.admin.tiering_dump``).

Every broker is asked with DescribeTiering (``protocol.tierd_apis``) for the
partitions it hosts; the leader's answer gives the partition's row (log
start, local log start, highest tiered offset, log end, copy lag, remote and
local sizes) and the followers' answers their state — a follower rebuilding
from the remote tier shows ``BuildingRemoteLogAuxState``, with its failed
attempts and last error. ``--replicas`` prints one row per replica instead.
A broker that does not answer is reported on stderr (exit 1) and its rows
are missing; the other brokers' rows are still printed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from broker.admin import tiering_dump
from broker.admin.common import (
    EXIT_FAILED,
    EXIT_OK,
    AdminError,
    Column,
    admin_client,
    emit,
    fail,
)

# Kafka's internal topics (and ours), hidden unless --internal or named.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state",
                             "__remote_log_metadata"})

PARTITION_COLUMNS = (
    Column("topic", "TOPIC"), Column("partition", "PART", True),
    Column("leader", "LEADER", True), Column("log_start_offset", "LOG START", True),
    Column("local_log_start_offset", "LOCAL START", True),
    Column("highest_tiered_offset", "TIERED TO", True),
    Column("log_end_offset", "LOG END", True),
    Column("copy_lag_segments", "LAG SEGS", True), Column("copy_lag_bytes", "LAG BYTES", True),
    Column("remote_segments", "REMOTE SEGS", True), Column("remote_bytes", "REMOTE BYTES", True),
    Column("local_bytes", "LOCAL BYTES", True), Column("followers", "FOLLOWERS"),
)
REPLICA_COLUMNS = (
    Column("topic", "TOPIC"), Column("partition", "PART", True), Column("broker", "BROKER", True),
    Column("role", "ROLE"), Column("state", "STATE"), Column("leader_epoch", "EPOCH", True),
    Column("log_start_offset", "LOG START", True),
    Column("local_log_start_offset", "LOCAL START", True),
    Column("highest_tiered_offset", "TIERED TO", True),
    Column("log_end_offset", "LOG END", True), Column("local_bytes", "LOCAL BYTES", True),
    Column("aux_state_failures", "REBUILD FAILS", True), Column("aux_state_error", "LAST ERROR"),
)
# Fields of a replica's answer, as the JSON output names them.
_REPLICA_FIELDS = ("role", "leader_epoch", "log_start_offset", "local_log_start_offset",
                   "highest_tiered_offset", "high_watermark", "log_end_offset", "local_bytes",
                   "local_segments", "copy_lag_bytes", "copy_lag_segments", "remote_bytes",
                   "remote_segments", "remote_storage_enabled", "aux_state_failures",
                   "aux_state_error")


@dataclass(slots=True)
class Snapshot:
    """Every broker's answer, by partition; brokers that did not answer."""

    replicas: dict[tuple[str, int], dict[int, dict[str, Any]]] = field(default_factory=dict)
    unknown: set[str] = field(default_factory=set)
    unreachable: dict[int, str] = field(default_factory=dict)


def register(sub: Any) -> None:
    parser = sub.add_parser("tiering", help="tiered storage state per partition")
    tsub = parser.add_subparsers(dest="tiering_command", metavar="COMMAND", required=True)
    status = tsub.add_parser(
        "status", help="log start, local start, tiered offset, end, lag, sizes, follower state")
    status.add_argument("topics", nargs="*", metavar="TOPIC", help="topics (default: all)")
    status.add_argument("--replicas", action="store_true",
                        help="one row per replica instead of one per partition")
    status.add_argument("--internal", action="store_true", help="include internal topics")
    status.add_argument("--watch", type=float, metavar="SECONDS",
                        help="refresh every SECONDS until interrupted")
    status.add_argument("--count", type=int, metavar="N",
                        help="with --watch: stop after N refreshes")
    status.set_defaults(func=run_status)
    tiering_dump.register(tsub)


def run_status(args: Any) -> int:
    with admin_client(args) as client:
        refreshes = 0
        while True:
            snap = collect(client, args.topics)
            code = _print(args, snap, clear=args.watch is not None and not args.json)
            refreshes += 1
            if args.watch is None or (args.count is not None and refreshes >= args.count):
                return code
            time.sleep(args.watch)


def collect(client: Any, topics: list[str]) -> Snapshot:
    """Ask every registered broker; merge the answers by partition."""
    from kafka.errors import KafkaError

    from protocol.tierd_apis import DescribeTieringRequest

    try:
        brokers = sorted(b["broker_id"] for b in client.describe_cluster()["brokers"])
    except KafkaError as exc:
        raise AdminError(f"describe cluster failed: {exc}") from None
    request_topics = None
    if topics:
        request_topics = [DescribeTieringRequest.TopicRequest(name=t, partition_indexes=[])
                          for t in topics]
    snap = Snapshot()
    answered_topics: set[str] = set()

    async def ask(node: int) -> Any:
        return await client._manager.send(DescribeTieringRequest(topics=request_topics),
                                          node_id=node)

    for node in brokers:
        try:
            response = client._manager.run(ask, node)
        except (KafkaError, OSError) as exc:
            snap.unreachable[node] = f"{type(exc).__name__}: {exc}"
            continue
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code:
                    continue
                answered_topics.add(topic.name)
                row = {name: getattr(p, name) for name in _REPLICA_FIELDS}
                # v1 on: the topic's metadata is being rebuilt (rebuild-metadata).
                row["metadata_rebuilding"] = bool(getattr(p, "metadata_rebuilding", False))
                row["state"] = p.follower_state or ("Leading" if p.role == "leader" else None)
                row["leader_id"] = p.leader_id
                snap.replicas.setdefault((topic.name, p.partition_index), {})[node] = row
    snap.unknown = set(topics) - answered_topics
    return snap


def partition_rows(snap: Snapshot, include_internal: bool) -> list[dict[str, Any]]:
    """One row per partition from its leader's answer (or, with the leader
    silent, from the replica with the highest leader epoch)."""
    rows = []
    for (topic, index), by_node in sorted(snap.replicas.items()):
        if topic in INTERNAL_TOPICS and not include_internal:
            continue
        leaders = [n for n, r in by_node.items() if r["role"] == "leader"]
        source = leaders[0] if leaders else max(by_node, key=lambda n: by_node[n]["leader_epoch"])
        view = by_node[source]
        rows.append({
            "topic": topic, "partition": index,
            "leader": source if leaders else None,
            **{k: view[k] for k in _REPLICA_FIELDS if k not in ("role", "aux_state_failures",
                                                                "aux_state_error")},
            "followers": [_follower(n, by_node[n]) for n in sorted(by_node) if n != source],
            "replicas": {str(n): by_node[n] for n in sorted(by_node)},
        })
    return rows


def replica_rows(snap: Snapshot, include_internal: bool) -> list[dict[str, Any]]:
    rows = []
    for (topic, index), by_node in sorted(snap.replicas.items()):
        if topic in INTERNAL_TOPICS and not include_internal:
            continue
        for node in sorted(by_node):
            rows.append({"topic": topic, "partition": index, "broker": node, **by_node[node]})
    return rows


def _follower(node: int, row: dict[str, Any]) -> str:
    text = f"{node}:{row['state']}"
    if row["aux_state_failures"]:
        text += f"({row['aux_state_failures']} failed)"
    return text


def _print(args: Any, snap: Snapshot, clear: bool) -> int:
    internal = args.internal or any(t in INTERNAL_TOPICS for t in args.topics)
    if args.replicas:
        rows, columns = replica_rows(snap, internal), REPLICA_COLUMNS
    else:
        rows, columns = partition_rows(snap, internal), PARTITION_COLUMNS
    if clear:
        print("\033[2J\033[H", end="")
    if args.json and args.watch is not None:
        print(json.dumps(rows, sort_keys=True, default=str), flush=True)
    else:
        emit(args, rows, columns)
    code = EXIT_OK
    for name in sorted(snap.unknown):
        code = fail(f"topic {name!r}: no broker hosts it (UNKNOWN_TOPIC_OR_PARTITION)",
                    EXIT_FAILED)
    for node, error in sorted(snap.unreachable.items()):
        code = fail(f"broker {node} did not answer: {error}", EXIT_FAILED)
    return code
