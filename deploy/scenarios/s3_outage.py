"""Pause the S3 store: produce and local reads continue, tiering catches up after.

``python -m deploy.scenarios.s3_outage --launcher STATE_FILE`` (or the
compose options). Creates a tiered topic, produces and waits until it is
tiered, then pauses the S3 endpoint. During the outage: every produce round
(acks=all) and every read of the records just produced (local data) must
finish within ``--op-timeout``; the copy lag must grow. Then the store is
resumed: the copy lag must drain to 0 within the deadline and the whole
partition, including the tiered (remote) part, must be readable from offset 0.
The store is resumed whatever happens.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from deploy.scenarios.common import (
    POLL_S,
    CheckFailed,
    check,
    check_cluster_up,
    consume,
    create_topic,
    info,
    produce,
    run_scenario,
    tiered_topic_configs,
    tiering_partition,
    unique_topic,
    value,
    wait_for,
)
from deploy.scenarios.control import Control


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=1024,
                        help="records produced before the outage, and per round during it")
    parser.add_argument("--rounds", type=int, default=3, help="produce rounds during the outage")
    parser.add_argument("--record-size", type=int, default=1024, help="bytes per record")
    parser.add_argument("--segment-bytes", type=int, default=64 * 1024,
                        help="segment.bytes of the topic")
    parser.add_argument("--local-retention-bytes", type=int, default=128 * 1024,
                        help="local.retention.bytes of the topic")
    parser.add_argument("--outage-seconds", type=float, default=10.0,
                        help="keep S3 paused at least this long, seconds")
    parser.add_argument("--op-timeout", type=float, default=30.0,
                        help="deadline of one produce or read during the outage, seconds")


def tiered_row(bootstrap: str, topic: str, end: int) -> dict[str, Any] | None:
    """The leader's row once everything but the active segment is tiered.

    The high watermark must be at the end too: a closed segment above it is
    not yet a copy candidate (no lag), and would be copied a moment later.
    """
    row = tiering_partition(bootstrap, topic)
    tiered = row["highest_tiered_offset"]
    settled = row["high_watermark"] == row["log_end_offset"] == end
    return row if (settled and tiered is not None and tiered >= 0
                   and row["copy_lag_segments"] == 0) else None


def hold_still(bootstrap: str, topic: str, tiered_before: int, until: float) -> int:
    """Poll tiering status until the monotonic time ``until``; the number of polls.

    Raises:
        CheckFailed: the tiered offset moved (a copy succeeded with S3 paused).
    """
    polls = 0
    while True:
        row = tiering_partition(bootstrap, topic)
        polls += 1
        if row["highest_tiered_offset"] != tiered_before:
            raise CheckFailed(f"tiered offset moved to {row['highest_tiered_offset']} "
                              f"(was {tiered_before}) with S3 paused")
        if time.monotonic() >= until:
            return polls
        time.sleep(min(POLL_S, max(0.0, until - time.monotonic())))


def scenario(control: Control, args: argparse.Namespace) -> None:
    timeout = args.timeout
    check_cluster_up(control, timeout)
    topic = unique_topic("s3-outage")
    info(f"topic {topic}")
    with check(f"create tiered {topic}"):
        create_topic(control.bootstrap, topic, tiered_topic_configs(
            args.segment_bytes, args.local_retention_bytes), timeout)

    values = [value(topic, i, args.record_size) for i in range(args.records)]
    with check(f"produce {len(values)} records acks=all before the outage"):
        produce(control.bootstrap, topic, values, timeout)
    with check("tiered before the outage (copy lag 0)"):
        before = wait_for("copy lag 0 with a tiered offset", lambda: tiered_row(
            control.bootstrap, topic, len(values)), timeout)
        tiered_before = int(before["highest_tiered_offset"])
        info(f"tiered to {tiered_before} of {before['log_end_offset']}")

    info("pausing S3")
    control.pause_s3()
    paused_at = time.monotonic()
    try:
        # A copy that finished while the pause took effect is not the outage's.
        tiered_before = int(tiering_partition(control.bootstrap, topic)["highest_tiered_offset"])
        for round_no in range(args.rounds):
            batch = [value(topic, len(values) + i, args.record_size) for i in range(args.records)]
            first = len(values)
            with check(f"outage round {round_no + 1}: produce {len(batch)} records acks=all "
                       f"within {args.op_timeout:.0f} s"):
                started = time.monotonic()
                offsets = produce(control.bootstrap, topic, batch, args.op_timeout)
                if offsets[0] != first:
                    raise CheckFailed(f"first offset {offsets[0]}, expected {first}")
                info(f"acknowledged in {time.monotonic() - started:.1f} s")
            values += batch
            with check(f"outage round {round_no + 1}: read them back (local data) "
                       f"within {args.op_timeout:.0f} s"):
                read = consume(control.bootstrap, topic, first, len(values), args.op_timeout)
                if [v for _, v in read] != batch:
                    raise CheckFailed(f"read {len(read)} records, not the {len(batch)} produced")

        with check("copy lag grows during the outage"):
            row = wait_for("copy_lag_segments > 0", lambda: (
                r if (r := tiering_partition(control.bootstrap, topic))["copy_lag_segments"] > 0
                else None), timeout)
            info(f"copy lag {row['copy_lag_segments']} segments / {row['copy_lag_bytes']} bytes")
        with check(f"the tiered offset stands still until the outage is "
                   f"{args.outage_seconds:.0f} s old"):
            polls = hold_still(control.bootstrap, topic, tiered_before,
                               paused_at + args.outage_seconds)
            info(f"tiered to {tiered_before} in all {polls} polls during the outage")
    finally:
        control.resume_s3()
        info(f"S3 resumed after {time.monotonic() - paused_at:.1f} s")

    resumed_at = time.monotonic()
    with check("copy lag drains to 0 after the outage"):
        row = wait_for("copy lag 0 and the tiered offset past the outage", lambda: (
            r if (r := tiering_partition(control.bootstrap, topic))["copy_lag_segments"] == 0
            and r["highest_tiered_offset"] > tiered_before else None), timeout)
        info(f"drained in {time.monotonic() - resumed_at:.1f} s; tiered to "
             f"{row['highest_tiered_offset']}, leader's local start {row['local_log_start_offset']}"
             + (" (offset 0 is remote)" if row["local_log_start_offset"] > 0 else ""))

    with check(f"all {len(values)} records readable from offset 0 (remote data)"):
        read = consume(control.bootstrap, topic, 0, len(values), timeout)
        if [v for _, v in read] != values:
            raise CheckFailed(f"read {len(read)} records, not the {len(values)} produced")


def main(argv: list[str] | None = None) -> int:
    return run_scenario(__doc__.splitlines()[0], scenario, add_args, argv)


if __name__ == "__main__":
    sys.exit(main())
