"""``tierd admin [--bootstrap-server H:P] [--json] <command> ...``

Each subcommand module has ``register(subparsers)``, which adds its parsers
and sets ``func`` to ``(args) -> exit code``. Errors become one line on
stderr and an exit code (see ``broker.admin.common``); a traceback means a
bug in the tool.
"""

from __future__ import annotations

import argparse
import os
import sys

from broker.admin.common import DEFAULT_TIMEOUT_S, EXIT_UNREACHABLE, EXIT_USAGE, AdminError, fail

# Where the tool connects when neither --bootstrap-server nor the variable is set.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "TIERD_BOOTSTRAP"


def build_parser() -> argparse.ArgumentParser:
    from broker.admin import (
        configs,
        elections,
        features,
        groups,
        rebuild_metadata,
        reconcile,
        tiering,
        topics,
        transactions,
    )

    parser = argparse.ArgumentParser(prog="tierd admin",
                                     description="The operator's tool for tierd clusters.")
    parser.add_argument("--bootstrap-server", "-b",
                        default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
                        help=f"host:port[,host:port] (default: ${BOOTSTRAP_ENV} or "
                             f"{DEFAULT_BOOTSTRAP})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="seconds to wait for the cluster (default %(default)s)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (topics, configs, groups, transactions, tiering, reconcile, rebuild_metadata,
                   elections, features):
        module.register(sub)
    _accept_late_options(parser)
    return parser


def _accept_late_options(parser: argparse.ArgumentParser) -> None:
    """Let ``--json`` also follow the subcommand (``tierd admin topics list
    --json``), as operators type it; SUPPRESS keeps the global value otherwise."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        for child in getattr(action, "choices", {}).values():
            if child._subparsers is None:
                if not any("--json" in a.option_strings for a in child._actions):
                    child.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                                       help="print JSON instead of tables")
            else:
                _accept_late_options(child)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0
    try:
        return int(args.func(args))
    except AdminError as exc:
        return fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_USAGE)
    except OSError as exc:
        return fail(f"{exc}", EXIT_UNREACHABLE)


if __name__ == "__main__":
    sys.exit(main())
