"""Command line: ``tierd --config server.properties [--override key=value ...]``,
or ``tierd admin ...`` for the operator's tool (``broker.admin``)."""

from __future__ import annotations

import argparse
import resource
import sys

import trio

from config import BrokerConfig, ConfigError
from config.log_output import configure_logging


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tierd", description=__doc__)
    parser.add_argument("--config", help="server.properties file (Kafka key names)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config key (repeatable)")
    parser.add_argument("--log-json", action="store_true", help="log JSON lines")
    return parser.parse_args(argv)


def raise_open_file_limit() -> None:
    """Every open segment holds descriptors (log and indexes), and internal topics
    have 50 partitions each: lift the soft limit to the hard one, as Kafka's
    packaging advises operators to."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["admin"]:
        from broker.admin.cli import main as admin_main

        return admin_main(argv[1:])
    args = parse_args(argv)
    raise_open_file_limit()
    configure_logging("info", json_lines=args.log_json)
    try:
        config = BrokerConfig.load(args.config, args.override)
    except ConfigError as exc:
        print(f"tierd: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config["tierd.log.level"],
                      json_lines=args.log_json or config["tierd.log.format"] == "json")
    from broker.app import ListenError, run
    from replication.metadata import MetaPropertiesError
    from replication.zookeeper import ZkConfigError

    try:
        trio.run(run, config)
    except (ListenError, MetaPropertiesError, ZkConfigError) as exc:
        print(f"tierd: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"tierd: configuration error: {exc}", file=sys.stderr)
        return 2
    return 0
