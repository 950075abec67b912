"""What every ``tierd admin`` subcommand shares: exit codes, errors, the
connection to the cluster, and output as a table or JSON.

Exit codes (scripts rely on them):
    0  done; for checks: nothing found
    1  the cluster or store answered with an error (one line on stderr)
    2  bad usage or configuration
    3  the cluster or store could not be reached
    4  a check found problems (reconcile: orphans, missing objects, mismatches)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_FINDINGS = 4

# How long one admin call may take before the tool gives up (seconds); long
# enough for a controller failover, short enough for a script to notice.
DEFAULT_TIMEOUT_S = 30.0


class AdminError(Exception):
    """A failure to report as one line on stderr with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(slots=True)
class Column:
    """One output column: the row key, its header, right-aligned if numeric."""

    key: str
    header: str
    numeric: bool = False


def emit(args: Any, rows: Sequence[dict[str, Any]], columns: Sequence[Column],
         title: str | None = None) -> None:
    """Print ``rows`` as a table, or as a JSON list with ``--json``."""
    if getattr(args, "json", False):
        print(json.dumps(list(rows), indent=2, sort_keys=True, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False, box=None, header_style="bold")
    for col in columns:
        table.add_column(col.header, justify="right" if col.numeric else "left",
                         no_wrap=True)
    for row in rows:
        table.add_row(*(_cell(row.get(col.key)) for col in columns))
    Console(width=max(200, 0)).print(table)


def emit_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True, default=str))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def fail(message: str, exit_code: int = EXIT_FAILED) -> int:
    """Print one line on stderr and return ``exit_code``."""
    print(f"tierd admin: {message}", file=sys.stderr)
    return exit_code


@contextmanager
def admin_client(args: Any) -> Iterator[Any]:
    """A kafka-python ``KafkaAdminClient`` on ``--bootstrap-server``.

    Raises:
        AdminError(EXIT_UNREACHABLE): no broker answered.
    """
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

    timeout_ms = int(args.timeout * 1000)
    try:
        client = KafkaAdminClient(bootstrap_servers=args.bootstrap_server.split(","),
                                  client_id="tierd-admin", request_timeout_ms=timeout_ms,
                                  bootstrap_timeout_ms=timeout_ms)
    except (KafkaConnectionError, KafkaTimeoutError):
        raise AdminError(f"no broker reachable at {args.bootstrap_server}",
                         EXIT_UNREACHABLE) from None
    except KafkaError as exc:
        raise AdminError(f"cannot connect to {args.bootstrap_server}: {exc}",
                         EXIT_UNREACHABLE) from None
    try:
        yield client
    finally:
        client.close()
