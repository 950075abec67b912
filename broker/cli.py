"""Command line: ``tierd --config server.properties [--override key=value ...]``,
or ``tierd admin ...`` for the operator's tool (``broker.admin``)."""

from __future__ import annotations

import argparse
import logging
import resource
import sys

import structlog
import trio

from config import BrokerConfig, ConfigError

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def configure_logging(fmt: str, level: str) -> None:
    """structlog to stderr: readable console lines, or JSON objects."""
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


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
    configure_logging("json" if args.log_json else "console", "info")
    try:
        config = BrokerConfig.load(args.config, args.override)
    except ConfigError as exc:
        print(f"tierd: configuration error: {exc}", file=sys.stderr)
        return 2
    fmt = "json" if args.log_json else config["tierd.log.format"]
    configure_logging(fmt, config["tierd.log.level"])
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
