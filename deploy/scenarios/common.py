"""What the scenarios share: check reporting, waits with deadlines, and the
cluster seen through Kafka clients (kafka-python) and ``tierd admin``.

Every wait polls a condition until a deadline; nothing relies on a fixed
sleep. Admin clients are created per call: a broker killed a moment ago may
still be in the metadata, and a fresh client simply tries the next one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from deploy.scenarios.control import Control, ControlError, add_control_args, control_from_args

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
# Client request timeout: long enough for a loaded machine, short enough to retry.
REQUEST_TIMEOUT_MS = 10_000
# Bound on one `tierd admin` call.
ADMIN_CLI_TIMEOUT_S = 60.0
POLL_S = 0.25


class CheckFailed(Exception):
    """A check did not hold; the message says why."""


class NotYetKnown(CheckFailed):
    """What was asked is missing from the answering broker's view, which may
    be behind: a broker just restarted answers Metadata before the
    controller has sent it the topics. ``wait_for`` asks again."""


def wait_for(what: str, fn: Callable[[], T | None], timeout_s: float,
             interval_s: float = POLL_S) -> T:
    """Poll ``fn`` until it returns something truthy.

    Raises:
        CheckFailed: the deadline passed (with the last error ``fn`` raised).
    """
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except NotYetKnown as exc:
            last_error = exc
        except CheckFailed:
            raise
        except Exception as exc:  # brokers restarting refuse connections meanwhile
            last_error = exc
        if time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    detail = f" (last error: {type(last_error).__name__}: {last_error})" if last_error else ""
    raise CheckFailed(f"not within {timeout_s:.0f} s: {what}{detail}")


# info() lines of the check in progress, printed after its result line.
_pending: list[str] | None = None


@contextmanager
def check(what: str) -> Iterator[None]:
    """Print ``check: <what> ... ok`` or ``... FAIL: <why>`` around a block."""
    global _pending
    print(f"check: {what} ...", end=" ", flush=True)
    _pending = []
    try:
        yield
    except CheckFailed as exc:
        _end(f"FAIL: {exc}")
        raise
    except Exception as exc:
        _end(f"FAIL: {type(exc).__name__}: {exc}")
        raise CheckFailed(str(exc)) from exc
    _end("ok")


def _end(result: str) -> None:
    global _pending
    lines, _pending = _pending or [], None
    print(result, flush=True)
    for line in lines:
        info(line)


def info(message: str) -> None:
    """Print ``info: <message>`` (after the result of the check in progress)."""
    if _pending is not None:
        _pending.append(message)
    else:
        print(f"info: {message}", flush=True)


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def run_scenario(description: str, body: Callable[[Control, argparse.Namespace], None],
                 add_args: Callable[[argparse.ArgumentParser], None] | None = None,
                 argv: list[str] | None = None) -> int:
    """Parse the common options, run ``body``, print the verdict; the exit code."""
    parser = argparse.ArgumentParser(description=description)
    add_control_args(parser)
    parser.add_argument("--timeout", type=float, default=90.0,
                        help="deadline of each wait, seconds (default %(default)s)")
    if add_args is not None:
        add_args(parser)
    args = parser.parse_args(argv)
    control = control_from_args(parser, args)
    info(f"cluster {control.bootstrap}")
    started = time.monotonic()
    try:
        body(control, args)
        verdict = True
    except CheckFailed:
        verdict = False
    except ControlError as exc:
        print(f"check: cluster action ... FAIL: {exc}", flush=True)
        verdict = False
    except Exception:
        traceback.print_exc(file=sys.stdout)
        print("check: scenario ran to the end ... FAIL: unexpected error", flush=True)
        verdict = False
    info(f"took {time.monotonic() - started:.1f} s")
    print(f"VERDICT: {'PASS' if verdict else 'FAIL'}", flush=True)
    return 0 if verdict else 1


# -- the cluster through kafka-python -------------------------------------------


def servers(bootstrap: str) -> list[str]:
    return [a for a in bootstrap.split(",") if a]


def admin_call(bootstrap: str, call: Callable[[Any], T]) -> T:
    """``call(admin)`` on a fresh KafkaAdminClient, closed afterwards."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=servers(bootstrap),
                             request_timeout_ms=REQUEST_TIMEOUT_MS,
                             bootstrap_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        return call(admin)
    finally:
        admin.close()


def registered_brokers(bootstrap: str) -> list[int]:
    return sorted(b["broker_id"] for b in admin_call(
        bootstrap, lambda a: a.describe_cluster())["brokers"])


def partition(bootstrap: str, topic: str, index: int = 0) -> dict[str, Any]:
    """{leader, replicas, isr} of one partition, as a broker's metadata says."""
    [described] = admin_call(bootstrap, lambda a: a.describe_topics([topic]))
    for p in described["partitions"]:
        if p["partition_index"] == index:
            return {"leader": p["leader_id"], "replicas": list(p["replica_nodes"]),
                    "isr": sorted(p["isr_nodes"])}
    raise NotYetKnown(f"{topic} has no partition {index}")


def create_topic(bootstrap: str, topic: str, configs: dict[str, str], timeout_s: float,
                 partitions: int = 1, rf: int = 3) -> None:
    """Create ``topic`` and wait until every partition has a leader and a full ISR."""
    from kafka.admin import NewTopic

    admin_call(bootstrap, lambda a: a.create_topics(
        [NewTopic(topic, partitions, rf, topic_configs=configs)]))
    wait_for(f"{topic} led with a full ISR", lambda: all(
        (p := partition(bootstrap, topic, i))["leader"] >= 0 and len(p["isr"]) == rf
        for i in range(partitions)), timeout_s)


def producer(bootstrap: str, timeout_s: float) -> Any:
    """An idempotent acks=all producer that retries through leader changes."""
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=servers(bootstrap), acks="all",
                         enable_idempotence=True, linger_ms=5, batch_size=64 * 1024,
                         max_in_flight_requests_per_connection=1,
                         request_timeout_ms=REQUEST_TIMEOUT_MS,
                         delivery_timeout_ms=int(timeout_s * 1000), retries=1_000_000,
                         retry_backoff_ms=200, max_block_ms=int(timeout_s * 1000))


def value(topic: str, index: int, size: int) -> bytes:
    """The record with ``index``: unique, recognisable, padded to ``size`` bytes."""
    head = f"{topic}:{index:09d}:".encode()
    return head + b"x" * max(0, size - len(head))


def produce(bootstrap: str, topic: str, values: list[bytes], timeout_s: float) -> list[int]:
    """Send ``values`` to partition 0 (acks=all) and return their offsets.

    Raises:
        CheckFailed: a record was not acknowledged within ``timeout_s``.
    """
    prod = producer(bootstrap, timeout_s)
    try:
        futures = [prod.send(topic, v, partition=0) for v in values]
        prod.flush(timeout=timeout_s)
        offsets = []
        for i, future in enumerate(futures):
            try:
                offsets.append(future.get(timeout=max(1.0, timeout_s)).offset)
            except Exception as exc:
                raise CheckFailed(f"record {i} of {len(values)} not acknowledged: "
                                  f"{type(exc).__name__}: {exc}") from None
        return offsets
    finally:
        prod.close(timeout=5)


def end_offset(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=servers(bootstrap),
                             request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def consume(bootstrap: str, topic: str, start: int, until: int,
            timeout_s: float) -> list[tuple[int, bytes]]:
    """(offset, value) of partition 0 from ``start`` up to offset ``until`` (exclusive)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=servers(bootstrap), enable_auto_commit=False,
                             fetch_max_wait_ms=200, request_timeout_ms=REQUEST_TIMEOUT_MS,
                             max_partition_fetch_bytes=1024 * 1024)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, start)
        out: list[tuple[int, bytes]] = []

        def more() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend((r.offset, r.value) for r in records)
            return consumer.position(tp) >= until

        wait_for(f"offsets {start}..{until - 1} of {topic} read "
                 f"(got {len(out)})", more, timeout_s, interval_s=0)
        return [(o, v) for o, v in out if o < until]
    finally:
        consumer.close()


# -- the cluster through `tierd admin` -----------------------------------------


def tierd_admin(bootstrap: str, *args: str) -> Any:
    """Run ``python -m broker admin --json ARGS`` and return its parsed JSON output.

    A broker that does not answer makes the tool exit 1 but still print the
    other brokers' rows; those are returned.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-m", "broker", "admin", "--bootstrap-server",
                           bootstrap, "--json", "--timeout", "15", *args],
                          capture_output=True, text=True, cwd=REPO_ROOT, env=env,
                          timeout=ADMIN_CLI_TIMEOUT_S, check=False)
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise RuntimeError(f"tierd admin {' '.join(args)} exited {done.returncode}: "
                           f"{done.stderr.strip()[-500:]}") from None


def tiering_partition(bootstrap: str, topic: str) -> dict[str, Any]:
    """The leader's row of partition 0 in ``tierd admin tiering status``."""
    rows = tierd_admin(bootstrap, "tiering", "status", topic)
    for row in rows:
        if row["partition"] == 0 and row.get("leader") is not None:
            return dict(row)
    raise RuntimeError(f"no leader row for {topic}-0 in tiering status")


def tiering_replica(bootstrap: str, topic: str, broker_id: int) -> dict[str, Any]:
    """One replica's row of partition 0 in ``tierd admin tiering status --replicas``."""
    rows = tierd_admin(bootstrap, "tiering", "status", "--replicas", topic)
    for row in rows:
        if row["partition"] == 0 and row["broker"] == broker_id:
            return dict(row)
    raise RuntimeError(f"broker {broker_id} reports no replica of {topic}-0")


def tiered_topic_configs(segment_bytes: int, local_retention_bytes: int) -> dict[str, str]:
    return {"min.insync.replicas": "2", "remote.storage.enable": "true",
            "segment.bytes": str(segment_bytes),
            "local.retention.bytes": str(local_retention_bytes)}


def check_cluster_up(control: Control, timeout_s: float) -> None:
    """The first check of every scenario: all three brokers registered."""
    expected = sorted(control.brokers)
    with check(f"brokers {expected} registered"):
        wait_for(f"brokers {expected} registered",
                 lambda: registered_brokers(control.bootstrap) == expected, timeout_s)
