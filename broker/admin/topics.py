"""``tierd admin topics``: list, describe, create, delete and configure topics.

Every action is one or two calls of kafka-python's ``KafkaAdminClient``
(Metadata, CreateTopics, DeleteTopics, DescribeConfigs,
IncrementalAlterConfigs). Errors the broker answers with become one line
naming Kafka's error (``TOPIC_ALREADY_EXISTS``, ``INVALID_CONFIG``, ...) and
the topic, and exit code 1; a cluster that stops answering is exit code 3.

Error handling: calls run with ``raise_errors=False`` where kafka-python
offers it, so per-topic error codes are read from the response rather than
from the client's exception text.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kafka import errors as kafka_errors
from kafka.admin import ConfigResource, ConfigResourceType

from broker.admin.common import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    AdminError,
    Column,
    admin_client,
    emit,
    emit_json,
)

# Topics the broker keeps for itself; `list` and `describe` hide them unless
# asked (--internal). Kafka marks only the first two internal in Metadata, so
# the names are listed here rather than read from the response.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__remote_log_metadata"})

# Let the broker choose (num.partitions, default.replication.factor): the
# CreateTopics v4+ (KIP-464) value for "not given".
BROKER_DEFAULT = -1

# kafka-python reports each altered resource as "OK" or as str() of its
# exception: "[Error 40] InvalidConfigurationError: <the broker's message>".
_ALTER_RESULT = re.compile(r"\[Error (-?\d+)\] \w+: ?(.*)", re.DOTALL)
_ALTER_OK = "OK"

PARTITION_COLUMNS = (
    Column("partition", "PARTITION", numeric=True),
    Column("leader", "LEADER", numeric=True),
    Column("replicas", "REPLICAS"),
    Column("isr", "ISR"),
    Column("offline", "OFFLINE"),
)
CONFIG_COLUMNS = (
    Column("name", "NAME"),
    Column("value", "VALUE"),
    Column("source", "SOURCE"),
    Column("read_only", "READ-ONLY"),
    Column("sensitive", "SENSITIVE"),
)


def register(sub: Any) -> None:
    """Add this module's subcommands to ``sub``."""
    parser = sub.add_parser("topics", help="list, describe, create, delete and configure topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("list", help="topic names, one per line")
    p.add_argument("--internal", action="store_true", help="include the broker's internal topics")
    p.set_defaults(func=list_topics)

    p = actions.add_parser("describe", help="partitions: leader, replicas, ISR")
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    p.add_argument("--internal", action="store_true",
                   help="with no TOPIC, include the broker's internal topics")
    p.set_defaults(func=describe_topics)

    p = actions.add_parser("create", help="create a topic")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--partitions", type=int, default=BROKER_DEFAULT,
                   help="default: the broker's num.partitions")
    p.add_argument("--replication-factor", type=int, default=BROKER_DEFAULT,
                   help="default: the broker's default.replication.factor")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config (repeatable)")
    p.set_defaults(func=create_topic)

    p = actions.add_parser("delete", help="delete topics (asks nothing)")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.set_defaults(func=delete_topics)

    p = actions.add_parser("alter-configs", help="set or remove topic configs (incrementally)")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="set_configs",
                   help="set a config (repeatable)")
    p.add_argument("--delete", action="append", default=[], metavar="KEY", dest="delete_configs",
                   help="remove a config, back to its default (repeatable)")
    p.set_defaults(func=alter_configs)

    p = actions.add_parser("describe-configs", help="a topic's configs and where they come from")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--all", action="store_true",
                   help="every config, not only the topic's own overrides")
    p.set_defaults(func=describe_configs)


def list_topics(args: argparse.Namespace) -> int:
    """Print topic names, sorted; internal topics only with ``--internal``."""
    with _cluster(args) as client:
        names = sorted(n for n in client.list_topics() if args.internal or n not in INTERNAL_TOPICS)
    if args.json:
        emit_json(names)
    else:
        for name in names:
            print(name)
    return EXIT_OK


def describe_topics(args: argparse.Namespace) -> int:
    """Print each topic's id, partition count, replication factor and partitions.

    Raises:
        AdminError: a named topic does not exist (or another per-topic error).
    """
    with _cluster(args) as client:
        described = client.describe_topics(args.topics or None)
    for topic in described:
        if topic["error_code"]:
            raise _broker_error(topic["error_code"], None, "describing", topic["name"])
    if not args.topics and not args.internal:
        described = [t for t in described if t["name"] not in INTERNAL_TOPICS]
    topics = sorted((_topic_view(t) for t in described), key=lambda t: t["topic"])
    if args.json:
        emit_json(topics)
        return EXIT_OK
    for topic in topics:
        print(f"topic {topic['topic']}  id {topic['topic_id']}  partitions "
              f"{topic['partition_count']}  replication factor {topic['replication_factor']}")
        emit(args, topic["partitions"], PARTITION_COLUMNS)
    return EXIT_OK


def create_topic(args: argparse.Namespace) -> int:
    """Create one topic and wait until every partition has a leader.

    Raises:
        AdminError: the broker refused (TOPIC_ALREADY_EXISTS, INVALID_CONFIG,
            INVALID_REPLICATION_FACTOR, POLICY_VIOLATION, ...), or the topic
            had no leaders within ``--timeout``; EXIT_USAGE for a malformed
            ``--config``.
    """
    configs = _parse_pairs(args.config, "--config")
    spec = {"num_partitions": args.partitions, "replication_factor": args.replication_factor,
            "configs": configs}
    with _cluster(args) as client:
        response = client.create_topics({args.topic: spec}, raise_errors=False)
        [result] = response["topics"]
        if result["error_code"]:
            raise _broker_error(result["error_code"], result["error_message"], "creating",
                                args.topic)
        try:
            client.wait_for_topics([args.topic], timeout_ms=int(args.timeout * 1000))
        except kafka_errors.KafkaTimeoutError as exc:
            raise AdminError(f"created topic '{args.topic}', but it is not ready: {exc}") from None
    created = {"topic": args.topic, "topic_id": result["topic_id"],
               "partitions": result["num_partitions"],
               "replication_factor": result["replication_factor"]}
    if args.json:
        emit_json(created)
    else:
        print(f"created topic {args.topic} (id {created['topic_id']}, "
              f"{created['partitions']} partition(s), replication factor "
              f"{created['replication_factor']})")
    return EXIT_OK


def delete_topics(args: argparse.Namespace) -> int:
    """Delete the named topics; report the ones deleted, then any failures.

    Raises:
        AdminError: the broker refused at least one topic (all refusals on one line).
    """
    with _cluster(args) as client:
        response = client.delete_topics(args.topics, raise_errors=False)
    deleted = [{"topic": r["name"], "topic_id": r.get("topic_id")}
               for r in response["topics"] if not r["error_code"]]
    failures = [_broker_error(r["error_code"], r["error_message"], "deleting", r["name"])
                for r in response["topics"] if r["error_code"]]
    if args.json:
        emit_json(deleted)
    else:
        for topic in deleted:
            print(f"deleted topic {topic['topic']}")
    if failures:
        raise AdminError("; ".join(str(f) for f in failures))
    return EXIT_OK


def alter_configs(args: argparse.Namespace) -> int:
    """Set and remove topic configs with IncrementalAlterConfigs (other keys stay).

    Raises:
        AdminError: the broker refused (INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION,
            POLICY_VIOLATION, ...); EXIT_USAGE for nothing to do, a malformed
            ``--set`` or a key both set and deleted.
    """
    to_set = _parse_pairs(args.set_configs, "--set")
    both = sorted(set(to_set) & set(args.delete_configs))
    if both:
        raise AdminError(f"both set and deleted: {', '.join(both)}", EXIT_USAGE)
    if not to_set and not args.delete_configs:
        raise AdminError("nothing to alter: give --set KEY=VALUE or --delete KEY", EXIT_USAGE)
    ops: dict[str, tuple[str, str | None]] = {key: ("SET", value) for key, value in to_set.items()}
    ops.update({key: ("DELETE", None) for key in args.delete_configs})
    resource = ConfigResource(ConfigResourceType.TOPIC, args.topic, ops)
    with _cluster(args) as client:
        # raise_on_unknown=False: the broker, not the client's list, judges keys.
        response = client.alter_configs([resource], raise_on_unknown=False, incremental=True)
    outcome = response["topic"][args.topic]
    if outcome != _ALTER_OK:
        raise _alter_error(outcome, args.topic)
    if args.json:
        emit_json({"topic": args.topic, "set": to_set, "deleted": sorted(args.delete_configs)})
    else:
        changes = [f"set {k}={v}" for k, v in to_set.items()]
        changes += [f"deleted {k}" for k in args.delete_configs]
        print(f"altered topic {args.topic}: {', '.join(changes)}")
    return EXIT_OK


def describe_configs(args: argparse.Namespace) -> int:
    """Print a topic's configs: its own overrides, or every config with ``--all``.

    Raises:
        AdminError: the topic does not exist.
    """
    resource = ConfigResource(ConfigResourceType.TOPIC, args.topic)
    with _cluster(args) as client:
        # kafka-python drops DescribeConfigs' per-resource error code (an
        # unknown topic comes back as no configs), so ask Metadata first.
        [topic] = client.describe_topics([args.topic])
        if topic["error_code"]:
            raise _broker_error(topic["error_code"], None, "describing configs of", args.topic)
        response = client.describe_configs([resource],
                                           config_filter="all" if args.all else "modified")
    configs = response.get("topic", {}).get(args.topic, {})
    rows = [{"name": name, "value": entry["value"], "source": entry["config_source"],
             "read_only": entry["read_only"], "sensitive": entry["is_sensitive"]}
            for name, entry in sorted(configs.items())]
    emit(args, rows, CONFIG_COLUMNS, title=f"configs of topic {args.topic}")
    return EXIT_OK


@contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[Any]:
    """``admin_client(args)``, with kafka-python's exceptions turned into AdminError.

    Raises:
        AdminError(EXIT_UNREACHABLE): no broker reachable, or one stopped answering.
        AdminError(EXIT_FAILED): an error the calls above did not handle (an error
            answer, or a broker too old for the request).
    """
    with admin_client(args) as client:
        try:
            yield client
        except (kafka_errors.KafkaConnectionError, kafka_errors.KafkaTimeoutError) as exc:
            raise AdminError(f"cluster at {args.bootstrap_server} did not answer: {exc}",
                             EXIT_UNREACHABLE) from None
        except kafka_errors.BrokerResponseError as exc:
            raise AdminError(f"{exc.message}: {exc.description}") from None
        except kafka_errors.KafkaError as exc:  # e.g. IncompatibleBrokerVersion
            raise AdminError(str(exc)) from None


def _broker_error(code: int, message: str | None, action: str, topic: str) -> AdminError:
    """One line naming Kafka's error for ``code``, what we were doing, and the topic."""
    error = kafka_errors.for_code(code)
    return AdminError(f"{error.message} {action} topic '{topic}': {message or error.description}")


def _alter_error(outcome: str, topic: str) -> AdminError:
    """The AdminError for one resource's failed outcome from ``alter_configs``."""
    match = _ALTER_RESULT.fullmatch(outcome)
    if match is None:
        return AdminError(f"altering configs of topic '{topic}': {outcome}")
    return _broker_error(int(match[1]), match[2], "altering configs of", topic)


def _parse_pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; the value may contain '=' and may be empty.

    Raises:
        AdminError(EXIT_USAGE): an item without '=' or with an empty key.
    """
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AdminError(f"{flag} expects KEY=VALUE, got {item!r}", EXIT_USAGE)
        pairs[key] = value
    return pairs


def _topic_view(topic: dict[str, Any]) -> dict[str, Any]:
    """A Metadata topic entry as the tool prints it."""
    partitions = [{"partition": p["partition_index"], "leader": p["leader_id"],
                   "leader_epoch": p["leader_epoch"], "replicas": p["replica_nodes"],
                   "isr": p["isr_nodes"], "offline": p["offline_replicas"]}
                  for p in sorted(topic["partitions"], key=lambda p: p["partition_index"])]
    return {"topic": topic["name"], "topic_id": topic["topic_id"],
            "internal": topic["name"] in INTERNAL_TOPICS,
            "partition_count": len(partitions),
            "replication_factor": max((len(p["replicas"]) for p in partitions), default=0),
            "partitions": partitions}
