"""``tierd admin configs``: describe and alter configs as ``kafka-configs`` does,
for ``--entity-type brokers`` (one broker with ``--entity-name N``, the
cluster-wide default with ``--entity-default``) and ``topics``.

    tierd admin configs describe --entity-type brokers --entity-name 1 [--all]
    tierd admin configs alter --entity-type brokers --entity-default \\
        --add-config log.retention.bytes=1073741824 --delete-config log.retention.ms

A broker's entry is asked of that broker (Kafka's routing of per-broker
configs); the default entry and topics of any broker. Requests are
DescribeConfigs (with synonyms) and IncrementalAlterConfigs, sent as built, so
the broker's error code and message reach the operator unchanged (kafka-python's
high-level calls cannot name the default entry, whose resource name is "").
"""

from __future__ import annotations

import argparse
from typing import Any

from broker.admin.common import EXIT_OK, EXIT_USAGE, AdminError, Column, emit, emit_json
from config.dynamic import ConfigSource

DYNAMIC_SOURCES = (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG,
                   ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
RESOURCE_TYPES = {"topics": 2, "brokers": 4}
OPS = {"SET": 0, "DELETE": 1, "APPEND": 2, "SUBTRACT": 3}

COLUMNS = (
    Column("name", "NAME"),
    Column("value", "VALUE"),
    Column("source", "SOURCE"),
    Column("read_only", "READ-ONLY"),
    Column("synonyms", "SYNONYMS"),
)


def register(sub: Any) -> None:
    parser = sub.add_parser("configs", help="describe or alter broker and topic configs "
                                            "(like kafka-configs)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, help_text, func in (("describe", "an entity's configs and their sources",
                                   describe),
                                  ("alter", "set or delete configs of an entity", alter)):
        p = actions.add_parser(name, help=help_text)
        p.add_argument("--entity-type", required=True, choices=sorted(RESOURCE_TYPES))
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--entity-name", help="broker id or topic name")
        which.add_argument("--entity-default", action="store_true",
                           help="the cluster-wide default of brokers")
        p.set_defaults(func=func)
    describe_parser, alter_parser = actions.choices["describe"], actions.choices["alter"]
    describe_parser.add_argument("--all", action="store_true",
                                 help="every config, not only the dynamic ones")
    alter_parser.add_argument("--add-config", action="append", default=[],
                              metavar="K=V[,K=V]", help="set configs")
    alter_parser.add_argument("--delete-config", action="append", default=[],
                              metavar="K[,K]", help="remove configs (back to the next layer)")
    alter_parser.add_argument("--validate-only", action="store_true",
                              help="let the broker check the change without applying it")


def _resource(args: argparse.Namespace) -> tuple[int, str, int | None]:
    """(resource type, resource name, broker to ask or None for any).

    Raises:
        AdminError(EXIT_USAGE): --entity-default for topics, or a broker name
            that is not an id.
    """
    rtype = RESOURCE_TYPES[args.entity_type]
    if args.entity_default:
        if args.entity_type != "brokers":
            raise AdminError("--entity-default is for --entity-type brokers", EXIT_USAGE)
        return rtype, "", None
    if args.entity_type == "brokers":
        if not args.entity_name.isdigit():
            raise AdminError(f"a broker is named by its id, got {args.entity_name!r}",
                             EXIT_USAGE)
        return rtype, args.entity_name, int(args.entity_name)
    return rtype, args.entity_name, None


def _send(args: argparse.Namespace, request: Any, node: int | None) -> Any:
    from broker.admin.topics import _cluster

    with _cluster(args) as client:
        async def ask() -> Any:
            return await client._manager.send(request, node_id=node)
        return client._manager.run(ask)


def _entity_label(args: argparse.Namespace) -> str:
    if args.entity_default:
        return "default broker configs"
    return f"configs of {args.entity_type[:-1]} {args.entity_name}"


def describe(args: argparse.Namespace) -> int:
    """Print an entity's configs (``--all``: every one) with sources and synonyms.

    Raises:
        AdminError: the broker answered an error for the entity.
    """
    from kafka.errors import for_code
    from kafka.protocol.admin import DescribeConfigsRequest

    rtype, name, node = _resource(args)
    request = DescribeConfigsRequest(resources=[(rtype, name, None)], include_synonyms=True,
                                     min_version=1)
    [result] = _send(args, request, node).results
    if result.error_code:
        raise AdminError(f"{for_code(result.error_code).message} describing "
                         f"{_entity_label(args)}: {result.error_message}")
    rows = [{"name": c.name, "value": c.value, "source": _source(c.config_source),
             "read_only": c.read_only,
             "synonyms": [f"{_source(s.source)}:{s.name}={s.value}" for s in c.synonyms]}
            for c in sorted(result.configs, key=lambda c: c.name)
            if args.all or c.config_source in DYNAMIC_SOURCES]
    emit(args, rows, COLUMNS, title=_entity_label(args))
    return EXIT_OK


def _source(number: int) -> str:
    try:
        return ConfigSource(number).name
    except ValueError:
        return str(number)


def _changes(args: argparse.Namespace) -> list[tuple[str, int, str | None]]:
    """(key, op, value) of --add-config and --delete-config.

    Raises:
        AdminError(EXIT_USAGE): nothing to do, or a malformed --add-config.
    """
    changes: list[tuple[str, int, str | None]] = []
    for item in args.add_config:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise AdminError(f"--add-config expects K=V, got {pair!r}", EXIT_USAGE)
            changes.append((key, OPS["SET"], value))
    for item in args.delete_config:
        changes += [(k.strip(), OPS["DELETE"], None) for k in item.split(",") if k.strip()]
    if not changes:
        raise AdminError("nothing to alter: give --add-config or --delete-config", EXIT_USAGE)
    return changes


def alter(args: argparse.Namespace) -> int:
    """Apply --add-config / --delete-config with IncrementalAlterConfigs.

    Raises:
        AdminError: the broker refused (INVALID_REQUEST for a key that cannot
            change dynamically, INVALID_CONFIG for an unknown key or bad value).
    """
    from kafka.errors import for_code
    from kafka.protocol.admin import IncrementalAlterConfigsRequest

    rtype, name, node = _resource(args)
    changes = _changes(args)
    request = IncrementalAlterConfigsRequest(resources=[(rtype, name, changes)],
                                             validate_only=args.validate_only)
    [result] = _send(args, request, node).responses
    if result.error_code:
        raise AdminError(f"{for_code(result.error_code).message} altering "
                         f"{_entity_label(args)}: {result.error_message}")
    shown = [f"set {k}={v}" if op == OPS["SET"] else f"deleted {k}" for k, op, v in changes]
    if args.json:
        emit_json({"entity_type": args.entity_type, "entity_name": name,
                   "validate_only": args.validate_only,
                   "set": {k: v for k, op, v in changes if op == OPS["SET"]},
                   "deleted": [k for k, op, _ in changes if op == OPS["DELETE"]]})
    else:
        verb = "validated" if args.validate_only else "altered"
        print(f"{verb} {_entity_label(args)}: {', '.join(shown)}")
    return EXIT_OK
