"""Kill a partition leader under acks=all; nothing acknowledged is lost.

``python -m deploy.scenarios.kill_leader --launcher STATE_FILE`` (or the
compose options). Creates a topic with RF 3 and min.insync.replicas 2,
produces records idempotently with acks=all, SIGKILLs the partition leader,
checks that a new leader is elected within the deadline, produces more,
reads the partition from offset 0 (every acknowledged record exactly once,
in order), restarts the killed broker and checks that it rejoins the ISR.
"""

from __future__ import annotations

import argparse
import sys
import time

from deploy.scenarios.common import (
    CheckFailed,
    check,
    check_cluster_up,
    consume,
    create_topic,
    end_offset,
    info,
    partition,
    produce,
    run_scenario,
    unique_topic,
    value,
    wait_for,
)
from deploy.scenarios.control import Control


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=500,
                        help="records produced before and again after the kill")
    parser.add_argument("--record-size", type=int, default=200, help="bytes per record")


def verify_log(read: list[tuple[int, bytes]], acked: list[bytes]) -> None:
    """Every acknowledged value once, in the order sent; no duplicates at all."""
    values = [v for _, v in read]
    if len(set(values)) != len(values):
        dup = next(v for v in values if values.count(v) > 1)
        raise CheckFailed(f"duplicate record {dup[:40]!r}")
    offsets = [o for o, _ in read]
    if offsets != sorted(offsets):
        raise CheckFailed("offsets out of order")
    position = {v: i for i, v in enumerate(values)}
    missing = [v for v in acked if v not in position]
    if missing:
        raise CheckFailed(f"{len(missing)} acknowledged records missing, first {missing[0][:40]!r}")
    seen = [position[v] for v in acked]
    if seen != sorted(seen):
        raise CheckFailed("acknowledged records out of order")


def scenario(control: Control, args: argparse.Namespace) -> None:
    timeout = args.timeout
    check_cluster_up(control, timeout)
    topic = unique_topic("kill-leader")
    info(f"topic {topic}")
    with check(f"create {topic} (RF 3, min.insync.replicas 2)"):
        create_topic(control.bootstrap, topic, {"min.insync.replicas": "2"}, timeout)

    first = [value(topic, i, args.record_size) for i in range(args.records)]
    with check(f"produce {len(first)} records acks=all"):
        offsets = produce(control.bootstrap, topic, first, timeout)
        if offsets != list(range(len(first))):
            raise CheckFailed(f"offsets {offsets[:3]}... are not 0..{len(first) - 1}")

    with check("partition leader known, ISR full"):
        state = wait_for("a leader and 3 replicas in the ISR", lambda: (
            p if (p := partition(control.bootstrap, topic))["leader"] >= 0
            and len(p["isr"]) == 3 else None), timeout)
    victim = int(state["leader"])
    info(f"leader is broker {victim}; SIGKILL")
    control.kill(victim)
    killed_at = time.monotonic()
    survivors = ",".join(a for n, a in sorted(control.brokers.items()) if n != victim)
    try:
        with check("a new leader elected"):
            new = wait_for("a leader other than the killed broker", lambda: (
                p if (p := partition(survivors, topic))["leader"] not in (-1, victim)
                else None), timeout)
            info(f"broker {new['leader']} leads after {time.monotonic() - killed_at:.1f} s, "
                 f"ISR {new['isr']}")

        second = [value(topic, args.records + i, args.record_size) for i in range(args.records)]
        with check(f"produce {len(second)} more records acks=all"):
            produce(survivors, topic, second, timeout)

        acked = first + second
        with check("every acknowledged record exactly once, in order, from offset 0"):
            end = end_offset(survivors, topic)
            read = consume(survivors, topic, 0, end, timeout)
            verify_log(read, acked)
            info(f"read {len(read)} records, {len(acked)} acknowledged")
    finally:
        restart_at = time.monotonic()
        control.start(victim)
    with check(f"broker {victim} rejoins the ISR"):
        wait_for(f"broker {victim} in the ISR", lambda: victim in partition(
            control.bootstrap, topic)["isr"], timeout)
        info(f"back in the ISR {time.monotonic() - restart_at:.1f} s after the restart")


def main(argv: list[str] | None = None) -> int:
    return run_scenario(__doc__.splitlines()[0], scenario, add_args, argv)


if __name__ == "__main__":
    sys.exit(main())
