"""``tierd admin groups``: list consumer groups, describe them with lag, reset
and delete their committed offsets, as Kafka's kafka-consumer-groups.sh does.

Theory of operation: every command is a few kafka-python admin calls. The
coordinator answers for the group (DescribeGroups, OffsetFetch, OffsetCommit,
DeleteGroups), each partition's leader for its offsets (ListOffsets), so any
broker of the cluster works as the bootstrap.

``reset-offsets`` is a dry run unless ``--execute``: it prints the plan
(current and new offset per partition) and commits nothing. Like Kafka it
refuses groups with active members, whose consumers would overwrite the
reset with their next commit, and clamps every new offset to
[log start offset, log end offset]. The plan is computed here rather than by
``KafkaAdminClient.reset_group_offsets``, which commits as it computes and
so cannot dry-run.

Error handling: a Kafka error becomes an ``AdminError`` naming it (exit 1);
a timeout or lost connection exits 3; bad arguments exit 2 in argparse.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from kafka import TopicPartition
from kafka.admin import OffsetSpec, OffsetTimestamp
from kafka.errors import (
    BrokerResponseError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    for_code,
)
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.structs import OffsetAndMetadata

from broker.admin.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    AdminError,
    Column,
    admin_client,
    emit,
    emit_json,
    fail,
)

# Group states in which no consumer holds partitions, so offsets may be reset
# (Kafka's ConsumerGroupCommand checks the same two).
INACTIVE_STATES = frozenset({"Empty", "Dead"})
# What DescribeGroups answers for a group the coordinator does not know.
DEAD = "Dead"
# ListOffsets answers this offset for a timestamp later than every record.
NO_OFFSET = -1
MS_PER_S = 1000

LIST_COLUMNS = [Column("group", "GROUP"), Column("state", "STATE"),
                Column("protocol_type", "PROTOCOL TYPE")]
DESCRIBE_COLUMNS = [
    Column("topic", "TOPIC"), Column("partition", "PARTITION", numeric=True),
    Column("committed_offset", "CURRENT-OFFSET", numeric=True),
    Column("log_end_offset", "LOG-END-OFFSET", numeric=True),
    Column("lag", "LAG", numeric=True), Column("consumer_id", "CONSUMER-ID"),
    Column("host", "HOST"), Column("client_id", "CLIENT-ID")]
RESET_COLUMNS = [
    Column("topic", "TOPIC"), Column("partition", "PARTITION", numeric=True),
    Column("current_offset", "CURRENT-OFFSET", numeric=True),
    Column("new_offset", "NEW-OFFSET", numeric=True)]
DELETE_COLUMNS = [Column("group", "GROUP"), Column("result", "RESULT")]


def register(sub: Any) -> None:
    """Add ``groups list|describe|reset-offsets|delete`` to ``sub``."""
    groups = sub.add_parser("groups", help="consumer groups: list, describe with lag, "
                                           "reset offsets, delete")
    actions = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    actions.add_parser("list", help="every group: id, state, protocol type"
                       ).set_defaults(func=list_groups)

    describe = actions.add_parser("describe", help="committed offsets, log end and lag")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    describe.add_argument("--isolation", choices=("read_uncommitted", "read_committed"),
                          default="read_uncommitted",
                          help="read_committed: lag up to the last stable offset")
    describe.set_defaults(func=describe_groups)

    reset = actions.add_parser("reset-offsets", help="move a group's committed offsets "
                                                     "(dry run unless --execute)")
    reset.add_argument("group", metavar="GROUP")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", type=topic_spec, metavar="T[:P,P]",
                       help="a topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has committed offsets for")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-datetime", type=timestamp_ms, metavar="ISO8601",
                    help="first record at or after this time (no zone: local time)")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    to.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(func=reset_offsets)

    delete = actions.add_parser("delete", help="delete empty groups with their offsets")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    delete.set_defaults(func=delete_groups)


def topic_spec(text: str) -> tuple[str, list[int] | None]:
    """Parse ``T`` or ``T:P,P`` into (topic, partitions or None for all)."""
    topic, sep, parts = text.partition(":")
    if not topic or (sep and not parts):
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P,P, got {text!r}")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"partitions must be integers: {text!r}") from None


def timestamp_ms(text: str) -> int:
    """Parse an ISO 8601 date-time (a naive one is local time) into epoch ms."""
    try:
        return round(datetime.fromisoformat(text).timestamp() * MS_PER_S)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date-time: {text!r}") from None


@contextmanager
def kafka_call(what: str) -> Iterator[None]:
    """Turn kafka-python's errors inside into one ``AdminError`` line about ``what``."""
    try:
        yield
    except BrokerResponseError as exc:
        raise AdminError(f"{what}: {exc.message} ({exc.description})") from None
    except (KafkaTimeoutError, KafkaConnectionError) as exc:
        raise AdminError(f"{what}: {type(exc).__name__}: {exc}", EXIT_UNREACHABLE) from None
    except KafkaError as exc:
        raise AdminError(f"{what}: {type(exc).__name__}: {exc}") from None


def list_groups(args: Any) -> int:
    """``groups list``: every group any broker coordinates."""
    with admin_client(args) as client, kafka_call("list groups"):
        listed = client.list_groups()
    rows = sorted(({"group": g["group_id"], "state": g.get("group_state"),
                    "protocol_type": g["protocol_type"]} for g in listed),
                  key=lambda row: row["group"])
    emit(args, rows, LIST_COLUMNS)
    return EXIT_OK


def describe_groups(args: Any) -> int:
    """``groups describe``: per partition, committed offset, log end offset, lag
    and the member it is assigned to; exit 1 if some group does not exist."""
    isolation = (IsolationLevel.READ_COMMITTED if args.isolation == "read_committed"
                 else IsolationLevel.READ_UNCOMMITTED)
    with admin_client(args) as client:
        descriptions = describe(client, args.groups)
        with kafka_call("fetch committed offsets"):
            committed = client.list_group_offsets({g: None for g in args.groups})
        found = [g for g in args.groups if descriptions[g]["group_state"] != DEAD or committed[g]]
        owners = {g: assigned_members(descriptions[g]) for g in found}
        partitions = set().union(*(committed[g].keys() | owners[g].keys() for g in found))
        ends = log_end_offsets(client, existing(client, partitions), isolation)
    report = [{"group": g, "state": descriptions[g]["group_state"],
               "members": len(descriptions[g]["members"]),
               "partitions": lag_rows(committed[g], owners[g], ends)} for g in found]
    if args.json:
        emit_json(report)
    else:
        for group in report:
            emit(args, group["partitions"], DESCRIBE_COLUMNS,
                 title=f"group {group['group']}: {group['state']}, "
                       f"{group['members']} member(s)")
    missing = [g for g in args.groups if g not in found]
    if missing:
        return fail(f"consumer group(s) {', '.join(missing)} do not exist", EXIT_FAILED)
    return EXIT_OK


def describe(client: Any, groups: list[str]) -> dict[str, dict[str, Any]]:
    """DescribeGroups for ``groups``; a group-level error raises ``AdminError``."""
    with kafka_call("describe groups"):
        descriptions: dict[str, dict[str, Any]] = client.describe_groups(groups)
    for group, desc in descriptions.items():
        if desc["error"]:
            raise AdminError(f"describe group {group}: {desc['error']}")
    return descriptions


def assigned_members(description: dict[str, Any]) -> dict[TopicPartition, dict[str, Any]]:
    """Which member holds each partition (only consumer-protocol assignments decode)."""
    owners = {}
    for member in description["members"]:
        assignment = member.get("member_assignment")
        if not isinstance(assignment, dict):
            continue
        for topic in assignment.get("assigned_partitions", []):
            for partition in topic["partitions"]:
                owners[TopicPartition(topic["topic"], partition)] = member
    return owners


def existing(client: Any, partitions: set[TopicPartition]) -> set[TopicPartition]:
    """The subset of ``partitions`` that metadata knows (deleted topics drop out)."""
    if not partitions:
        return set()
    with kafka_call("fetch metadata"):
        topics = client.describe_topics(sorted({tp.topic for tp in partitions}))
    known = {TopicPartition(t["name"], p["partition_index"])
             for t in topics if not t["error_code"] for p in t["partitions"]}
    return partitions & known


def log_end_offsets(client: Any, partitions: set[TopicPartition],
                    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> dict[TopicPartition, int]:
    """ListOffsets latest: the high watermark, or the last stable offset under
    read_committed."""
    return list_offsets(client, {tp: OffsetSpec.LATEST for tp in partitions}, isolation)


def list_offsets(client: Any, specs: dict[TopicPartition, Any],
                 isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> dict[TopicPartition, int]:
    """ListOffsets for ``specs`` (OffsetSpec or timestamp) at their leaders."""
    if not specs:
        return {}
    with kafka_call("list offsets"):
        answers = client.list_partition_offsets(specs, isolation_level=isolation)
    return {tp: answer.offset for tp, answer in answers.items()}


def lag_rows(committed: dict[TopicPartition, OffsetAndMetadata],
             owners: dict[TopicPartition, dict[str, Any]],
             ends: dict[TopicPartition, int]) -> list[dict[str, Any]]:
    """One row per committed or assigned partition, sorted by topic and partition."""
    rows = []
    for tp in sorted(committed.keys() | owners.keys()):
        current = committed[tp].offset if tp in committed and committed[tp].offset >= 0 else None
        end = ends.get(tp)
        member = owners.get(tp, {})
        rows.append({"topic": tp.topic, "partition": tp.partition,
                     "committed_offset": current, "log_end_offset": end,
                     "lag": end - current if end is not None and current is not None else None,
                     "consumer_id": member.get("member_id"), "host": member.get("client_host"),
                     "client_id": member.get("client_id")})
    return rows


def reset_offsets(args: Any) -> int:
    """``groups reset-offsets``: print the plan; commit it with ``--execute``.

    Raises:
        AdminError: the group has active members (also on a dry run, as in
            Kafka), nothing to reset, or the broker refused a call.
    """
    with admin_client(args) as client:
        state = describe(client, [args.group])[args.group]
        if state["group_state"] not in INACTIVE_STATES:
            raise AdminError(
                f"group {args.group} is {state['group_state']} with "
                f"{len(state['members'])} active member(s); offsets can only be reset "
                "when it is Empty: stop its consumers first")
        with kafka_call(f"fetch committed offsets of {args.group}"):
            committed = client.list_group_offsets({args.group: None})[args.group]
        current = {tp: oam.offset for tp, oam in committed.items() if oam.offset >= 0}
        partitions = (set(current) if args.all_topics
                      else named_partitions(client, args.topic))
        if not partitions:
            raise AdminError(f"group {args.group} has no committed offsets to reset")
        plan = new_offsets(client, args, partitions, current)
        if args.execute:
            commit(client, args.group, plan, committed)
    rows = [{"topic": tp.topic, "partition": tp.partition, "current_offset": current.get(tp),
             "new_offset": offset} for tp, offset in sorted(plan.items())]
    emit(args, rows, RESET_COLUMNS,
         title=f"{args.group}: " + ("committed" if args.execute else "dry run (--execute commits)"))
    return EXIT_OK


def named_partitions(client: Any, specs: list[tuple[str, list[int] | None]]
                     ) -> set[TopicPartition]:
    """The partitions ``--topic`` names; unknown topics or partitions raise ``AdminError``."""
    with kafka_call("fetch metadata"):
        topics = client.describe_topics(sorted({topic for topic, _ in specs}))
    known: dict[str, set[int]] = {}
    for topic in topics:
        if topic["error_code"]:
            error = for_code(topic["error_code"])
            raise AdminError(f"topic {topic['name']}: {error.message} ({error.description})")
        known[topic["name"]] = {p["partition_index"] for p in topic["partitions"]}
    partitions = set()
    for topic, wanted in specs:
        unknown = set(wanted or ()) - known[topic]
        if unknown:
            raise AdminError(f"topic {topic} has no partition(s) "
                             f"{', '.join(map(str, sorted(unknown)))}")
        partitions |= {TopicPartition(topic, p) for p in wanted or known[topic]}
    return partitions


def new_offsets(client: Any, args: Any, partitions: set[TopicPartition],
                current: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """The reset target of each partition, clamped to [log start, log end].

    Returns:
        partition -> new offset. ``--to-datetime`` takes the first record at or
        after the time, or the log end when there is none (Kafka's rule).

    Raises:
        AdminError: ``--shift-by`` on a partition without a committed offset.
    """
    start = list_offsets(client, {tp: OffsetSpec.EARLIEST for tp in partitions})
    end = log_end_offsets(client, partitions)
    if args.to_earliest:
        wanted = start
    elif args.to_latest:
        wanted = end
    elif args.to_offset is not None:
        wanted = dict.fromkeys(partitions, args.to_offset)
    elif args.to_datetime is not None:
        found = list_offsets(client, dict.fromkeys(partitions, OffsetTimestamp(args.to_datetime)))
        wanted = {tp: end[tp] if offset == NO_OFFSET else offset for tp, offset in found.items()}
    else:
        without = sorted(tp for tp in partitions if tp not in current)
        if without:
            raise AdminError(f"cannot shift {without[0].topic}:{without[0].partition}: "
                             "the group has no committed offset there")
        wanted = {tp: current[tp] + args.shift_by for tp in partitions}
    return {tp: min(max(wanted[tp], start[tp]), end[tp]) for tp in partitions}


def commit(client: Any, group: str, plan: dict[TopicPartition, int],
           committed: dict[TopicPartition, OffsetAndMetadata]) -> None:
    """OffsetCommit ``plan`` for ``group`` as no member, keeping commit metadata.

    Raises:
        AdminError: some partition was refused (e.g. UNKNOWN_MEMBER_ID when a
            consumer joined since the state check); names the first.
    """
    offsets = {tp: OffsetAndMetadata(offset, committed[tp].metadata if tp in committed else "",
                                     None) for tp, offset in plan.items()}
    with kafka_call(f"commit offsets of {group}"):
        errors = client.alter_group_offsets(group, offsets)
    failed = sorted((tp, err) for tp, err in errors.items() if err.errno)
    if failed:
        tp, err = failed[0]
        raise AdminError(f"commit offsets of {group}: {tp.topic}:{tp.partition}: "
                         f"{err.message} ({err.description}); {len(failed)} partition(s) failed")


def delete_groups(args: Any) -> int:
    """``groups delete``: delete Empty groups and their offsets; exit 1 if any failed."""
    with admin_client(args) as client, kafka_call("delete groups"):
        results = client.delete_groups(args.groups)
    rows = [{"group": g, "result": results.get(g, "no answer")} for g in args.groups]
    emit(args, rows, DELETE_COLUMNS)
    failed = [f"{row['group']}: {row['result']}" for row in rows if row["result"] != "OK"]
    if failed:
        return fail(f"not deleted: {'; '.join(failed)}", EXIT_FAILED)
    return EXIT_OK
