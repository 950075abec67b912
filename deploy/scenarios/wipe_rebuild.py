"""Wipe a follower of a tiered topic; it rebuilds from the remote tier.

``python -m deploy.scenarios.wipe_rebuild --launcher STATE_FILE`` (or the
compose options). Creates a tiered topic with small segments and a small
local retention, produces a few MB, waits until most of it is tiered (and
the leader has freed its local copy), SIGKILLs a follower, waits until it
leaves the ISR, wipes its data and starts it again. Checks that it rejoins
the ISR within the deadline and that it rebuilt from the tier: its local log
start offset is above 0 (it was not re-replicated from offset 0). Prints the
rebuild time, then reads everything back from offset 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from deploy.scenarios.common import (
    CheckFailed,
    check,
    check_cluster_up,
    consume,
    create_topic,
    info,
    partition,
    produce,
    run_scenario,
    tiered_topic_configs,
    tiering_partition,
    tiering_replica,
    unique_topic,
    value,
    wait_for,
)
from deploy.scenarios.control import Control

# Share of the log that must be tiered before the follower is killed.
TIERED_SHARE = 0.75
# What a follower logs once it has rebuilt a partition from the tier (replication/fetcher.py).
REBUILT_MESSAGE = "rebuilt from the remote tier"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=4096, help="records to produce")
    parser.add_argument("--record-size", type=int, default=1024, help="bytes per record")
    parser.add_argument("--segment-bytes", type=int, default=64 * 1024,
                        help="segment.bytes of the topic")
    parser.add_argument("--local-retention-bytes", type=int, default=128 * 1024,
                        help="local.retention.bytes of the topic")


def mostly_tiered(bootstrap: str, topic: str, end: int) -> dict[str, Any] | None:
    """The leader's tiering row once most of the log is tiered and its local
    copy freed; None before."""
    row = tiering_partition(bootstrap, topic)
    tiered = row["highest_tiered_offset"]
    if tiered is not None and tiered + 1 >= TIERED_SHARE * end and row["local_log_start_offset"] > 0:
        return row
    return None


def scenario(control: Control, args: argparse.Namespace) -> None:
    timeout = args.timeout
    check_cluster_up(control, timeout)
    topic = unique_topic("wipe-rebuild")
    info(f"topic {topic}")
    with check(f"create tiered {topic} (segment.bytes {args.segment_bytes}, "
               f"local.retention.bytes {args.local_retention_bytes})"):
        create_topic(control.bootstrap, topic, tiered_topic_configs(
            args.segment_bytes, args.local_retention_bytes), timeout)

    values = [value(topic, i, args.record_size) for i in range(args.records)]
    total = args.records * args.record_size
    with check(f"produce {args.records} records ({total / 1e6:.1f} MB) acks=all"):
        offsets = produce(control.bootstrap, topic, values, timeout)
        if offsets != list(range(len(values))):
            raise CheckFailed("offsets are not 0..N-1")

    with check(f"at least {TIERED_SHARE:.0%} tiered and the leader's local copy freed"):
        row = wait_for("most of the log tiered", lambda: mostly_tiered(
            control.bootstrap, topic, len(values)), timeout)
        info(f"tiered to {row['highest_tiered_offset']} of {row['log_end_offset']}, "
             f"{row['remote_segments']} remote segments, leader's local start "
             f"{row['local_log_start_offset']}")

    with check("a follower in the ISR"):
        state = partition(control.bootstrap, topic)
        followers = [n for n in state["replicas"] if n != state["leader"] and n in state["isr"]]
        if not followers:
            raise CheckFailed(f"no follower in the ISR: {state}")
    victim = followers[0]
    info(f"leader {state['leader']}; SIGKILL follower {victim}")
    control.kill(victim)
    survivors = ",".join(a for n, a in sorted(control.brokers.items()) if n != victim)
    restarted = False
    try:
        with check(f"broker {victim} leaves the ISR"):
            wait_for(f"broker {victim} out of the ISR", lambda: victim not in partition(
                survivors, topic)["isr"], timeout)
        control.wipe(victim)
        info(f"broker {victim} wiped; starting it")
        started = time.monotonic()
        control.start(victim)
        restarted = True
    finally:
        if not restarted:
            control.start(victim)

    with check(f"broker {victim} rejoins the ISR"):
        wait_for(f"broker {victim} in the ISR", lambda: victim in partition(
            control.bootstrap, topic)["isr"], timeout)
        info(f"rebuild time: {time.monotonic() - started:.1f} s from start to in-sync")

    with check(f"broker {victim} rebuilt from the tier (local log start > 0)"):
        replica = tiering_replica(control.bootstrap, topic, victim)
        info(f"broker {victim}: state {replica['state']}, log start "
             f"{replica['log_start_offset']}, local start {replica['local_log_start_offset']}, "
             f"end {replica['log_end_offset']}")
        if not replica["local_log_start_offset"] > 0:
            raise CheckFailed(f"local log start is {replica['local_log_start_offset']}: "
                              "re-replicated from offset 0")

    log = control.broker_log(victim)
    if log is None:
        info(f"broker {victim}'s log is not available: rebuild message not checked")
    else:
        with check(f"broker {victim}'s log says it rebuilt {topic} from the remote tier"):
            lines = [line for line in log.splitlines()
                     if REBUILT_MESSAGE in line and topic in line]
            if not lines:
                raise CheckFailed(f"no {REBUILT_MESSAGE!r} line for {topic}")
            info(lines[-1].strip()[:300])

    with check(f"all {len(values)} records readable from offset 0"):
        read = consume(control.bootstrap, topic, 0, len(values), timeout)
        if [v for _, v in read] != values:
            raise CheckFailed(f"read {len(read)} records, not the {len(values)} produced")


def main(argv: list[str] | None = None) -> int:
    return run_scenario(__doc__.splitlines()[0], scenario, add_args, argv)


if __name__ == "__main__":
    sys.exit(main())
