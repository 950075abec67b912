"""``tierd admin features describe|upgrade|downgrade``: the cluster's feature
levels (KIP-584), as ``kafka-features`` shows and changes them.

``describe`` lists every feature the broker supports with its finalized level
and the finalized-features epoch (ApiVersions). ``upgrade`` and ``downgrade``
take ``--feature NAME=LEVEL`` (repeatable) and send one UpdateFeatures request
(kafka-python's ``update_features``): all the changes are applied or none.
``downgrade`` is a safe downgrade unless ``--unsafe``; a level of 0 disables
the feature. ``--dry-run`` validates without changing anything.

Exit codes: 0 done; 1 the cluster refused (INVALID_UPDATE_VERSION,
FEATURE_UPDATE_FAILED, CLUSTER_AUTHORIZATION_FAILED: ALTER on the cluster is
needed); 2 bad usage.
"""

from __future__ import annotations

import argparse
from typing import Any

from broker.admin.common import EXIT_OK, EXIT_USAGE, AdminError, Column, emit

COLUMNS = (
    Column("feature", "FEATURE"),
    Column("supported_min", "SUPPORTED MIN", numeric=True),
    Column("supported_max", "SUPPORTED MAX", numeric=True),
    Column("finalized", "FINALIZED LEVEL", numeric=True),
    Column("epoch", "EPOCH", numeric=True),
)
UPDATE_COLUMNS = (Column("feature", "FEATURE"), Column("level", "LEVEL", numeric=True),
                  Column("result", "RESULT"))


def register(sub: Any) -> None:
    """Add ``features`` and its subcommands to ``sub``."""
    p = sub.add_parser("features", help="describe or change the cluster's feature levels")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("describe", help="supported and finalized feature levels"
                       ).set_defaults(func=describe)
    for name, helptext in (("upgrade", "raise feature levels"),
                           ("downgrade", "lower feature levels (0: disable)")):
        a = actions.add_parser(name, help=helptext)
        a.add_argument("--feature", action="append", required=True, metavar="NAME=LEVEL",
                       help="a feature and its new level (repeatable)")
        a.add_argument("--dry-run", action="store_true",
                       help="validate the change without applying it")
        if name == "downgrade":
            a.add_argument("--unsafe", action="store_true",
                           help="allow a downgrade that may lose metadata")
        a.set_defaults(func=update)


def describe(args: argparse.Namespace) -> int:
    from broker.admin.topics import _cluster

    with _cluster(args) as client:
        found = client.describe_features()
    rows = [{"feature": name, "supported_min": info.get("supported", (None, None))[0],
             "supported_max": info.get("supported", (None, None))[1],
             "finalized": info.get("finalized", (0, 0))[1],
             "epoch": info.get("finalized_epoch")}
            for name, info in sorted(found.items())]
    emit(args, rows, COLUMNS, title="features")
    return EXIT_OK


def _levels(specs: list[str]) -> dict[str, int]:
    levels: dict[str, int] = {}
    for spec in specs:
        name, sep, level = spec.partition("=")
        if not sep or not name or not level.lstrip("-").isdigit():
            raise AdminError(f"--feature takes NAME=LEVEL, got {spec!r}", EXIT_USAGE)
        if name in levels:
            raise AdminError(f"feature {name} given twice", EXIT_USAGE)
        levels[name] = int(level)
    return levels


def update(args: argparse.Namespace) -> int:
    """Send the levels; one row per feature.

    Raises:
        AdminError: bad usage, or the cluster refused the change.
    """
    from broker.admin.topics import _cluster

    levels = _levels(args.feature)
    kind = ("UPGRADE" if args.action == "upgrade"
            else "UNSAFE_DOWNGRADE" if args.unsafe else "SAFE_DOWNGRADE")
    with _cluster(args) as client:
        results = client.update_features({name: (kind, level) for name, level in levels.items()},
                                         validate_only=args.dry_run,
                                         timeout_ms=int(args.timeout * 1000))
    rows = [{"feature": name, "level": level,
             "result": ("valid" if args.dry_run else "done")
             if results.get(name) == "OK" else results.get(name)}
            for name, level in levels.items()]
    emit(args, rows, UPDATE_COLUMNS, title=f"features {args.action}")
    return EXIT_OK
