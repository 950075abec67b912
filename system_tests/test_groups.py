"""Consumer groups end to end: real tierd processes, real clients in their own processes.

* A 3-member group of kafka-python, confluent-kafka and aiokafka consumers
  over a 6-partition topic: after every rebalance each partition is owned by
  exactly one member (checked from the members' own rebalance callbacks and
  from the broker's DescribeGroups); no two members ever own a partition at
  the same moment; a SIGKILLed member's partitions move to the survivors
  within the session timeout; a broker restart under live members causes no
  rebalance; a record is processed twice only if its first consumer died or
  failed to commit; committed offsets survive a broker restart and a new
  member resumes right after them.
* Bad input over the raw wire protocol: a JoinGroup with another protocol
  type gets INCONSISTENT_GROUP_PROTOCOL, commits and heartbeats from a stale
  generation get ILLEGAL_GENERATION, and the group stays usable.

The broker runs with group.initial.rebalance.delay.ms=0 so the first
rebalance does not wait 3 s for more members; everything else is Kafka's
defaults.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.protocol import admin as admin_api
from kafka.protocol import consumer as consumer_api
from kafka.protocol import metadata as metadata_api

from system_tests.group_member import SESSION_TIMEOUT_MS
from system_tests.harness import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 6
RECORDS_PER_PARTITION = 100
# How long a broker may take to accept connections (it replays
# __consumer_offsets first).
BROKER_START_S = 30.0
# Bound for one rebalance to settle once it has begun: members rejoin on their
# next heartbeat (1 s) and the leader assigns at once; generous for loaded CI.
SETTLE_S = 20.0
# Extra allowance after the session timeout for the survivors of a SIGKILL to
# notice (next heartbeat), rejoin and sync.
MOVE_SLACK_S = 5.0


# -- processes --------------------------------------------------------------------


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Broker:
    """``python -m broker`` on a fixed port and data dir, restartable."""

    def __init__(self, workdir: Path, overrides: tuple[str, ...] = ()) -> None:
        """``overrides``: more broker settings, key=value."""
        self.workdir = workdir
        self.overrides = overrides
        self.port = free_port()
        self.log_path = workdir / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "broker",
                 "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                 "--override", f"log.dirs={self.workdir / 'data'}",
                 "--override", "tierd.metrics.port=0",
                 "--override", "group.initial.rebalance.delay.ms=0",
                 *(arg for kv in self.overrides for arg in ("--override", kv))],
                cwd=REPO_ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + BROKER_START_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"broker exited; see {self.log_path}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"broker not accepting after {BROKER_START_S}s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


class Member:
    """One ``system_tests.group_member`` process and the events it printed."""

    def __init__(self, client: str, broker: Broker, topic: str, group: str, workdir: Path):
        self.name = client
        self.stderr_path = workdir / f"member-{client}-{time.monotonic_ns()}.err"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "system_tests.group_member", client, broker.bootstrap,
                 topic, group, client],
                cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=err)
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.killed_at: float | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def current_assignment(self) -> list[int] | None:
        """Partitions owned now (None between a revocation and the next assignment)."""
        owned = None
        for ev in self.snapshot():
            if ev["ev"] == "assigned":
                owned = ev["partitions"]
            elif ev["ev"] == "revoked":
                owned = None
        return owned

    def last_assigned_at(self) -> float:
        return max((e["t"] for e in self.snapshot() if e["ev"] == "assigned"), default=0.0)

    def processed(self) -> list[tuple[int, int, bool, float]]:
        """(partition, offset, commit ok, time) of every record handed to the member."""
        return [(p, o, ev["ok"], ev["t"]) for ev in self.snapshot() if ev["ev"] == "batch"
                for p, o in ev["records"]]

    def kill(self) -> None:
        self.killed_at = time.time()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=5)

    def diagnostics(self) -> str:
        return (f"{self.name}: rc={self.proc.poll()} events={self.snapshot()[-8:]} "
                f"stderr={self.stderr_path.read_text(errors='replace')[-2000:]}")


def wait_until(condition: Callable[[], Any], timeout: float, what: str,
               diagnostics: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{diagnostics()}")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    b.start()
    yield b
    b.stop()


# -- group checks -----------------------------------------------------------------


def exact_cover(members: list[Member], since: float) -> dict[str, list[int]] | None:
    """Each member's assignment if, since ``since``, they split the partitions exactly."""
    owned: dict[str, list[int]] = {}
    for m in members:
        current = m.current_assignment()
        if current is None or m.last_assigned_at() < since:
            return None
        owned[m.name] = current
    flat = sorted(p for o in owned.values() for p in o)
    assert len(flat) == len(set(flat)), f"partition owned twice: {owned}"
    return owned if flat == list(range(PARTITIONS)) else None


def broker_assignments(admin: KafkaAdminClient, group: str) -> dict[str, list[int]] | None:
    """The broker's view (DescribeGroups) if the group is Stable: client id -> partitions."""
    described = admin.describe_groups([group])[group]
    if described["group_state"] != "Stable":
        return None
    out = {}
    for m in described["members"]:
        out[m["client_id"]] = sorted(_assignment_partitions(m["member_assignment"]))
    return out


def _assignment_partitions(assignment: dict[str, Any]) -> list[int]:
    """Partitions of a consumer assignment as kafka-python's admin decodes it."""
    return [p for t in assignment["assigned_partitions"] for p in t["partitions"]]


def settle(members: list[Member], admin: KafkaAdminClient, group: str, since: float
           ) -> dict[str, list[int]]:
    """Wait for a rebalance after ``since`` to finish; check both views agree."""
    def done() -> dict[str, list[int]] | None:
        owned = exact_cover(members, since)
        if owned is None:
            return None
        on_broker = broker_assignments(admin, group)
        return owned if on_broker == owned else None

    return wait_until(done, SETTLE_S, "an exact, stable partition assignment",
                      lambda: "\n".join(m.diagnostics() for m in members))


def check_no_overlapping_ownership(members: list[Member]) -> None:
    """No partition belonged to two members at the same instant (eager protocol)."""
    spans: dict[int, list[tuple[float, float, str]]] = {}
    for m in members:
        start: float | None = None
        owned: list[int] = []
        end_of_life = m.killed_at or time.time()
        for ev in m.snapshot() + [{"ev": "revoked", "t": end_of_life, "partitions": []}]:
            if start is not None and ev["ev"] in ("assigned", "revoked", "closed"):
                for p in owned:
                    spans.setdefault(p, []).append((start, ev["t"], m.name))
                start = None
            if ev["ev"] == "assigned":
                start, owned = ev["t"], ev["partitions"]
    for p, items in spans.items():
        items.sort()
        for (_, end, who), (begin, _, other) in zip(items, items[1:], strict=False):
            assert begin >= end, f"partition {p} owned by {who} and {other} at once: {items}"


def check_duplicates_only_after_failed_commits(members: list[Member]) -> None:
    """A record seen by two members: the first one died or failed its commit."""
    first_seen: dict[tuple[int, int], tuple[str, bool]] = {}
    for name, p, o, ok, _ in sorted(
            ((m.name, p, o, ok, t) for m in members for p, o, ok, t in m.processed()),
            key=lambda r: r[4]):
        prev = first_seen.get((p, o))
        if prev is None:
            first_seen[(p, o)] = (name, ok)
        elif prev[0] != name:
            assert not prev[1], f"record {p}@{o} processed by {prev[0]} (committed) and {name}"


def produce(bootstrap: str, topic: str, per_partition: int, tag: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(per_partition):
        for p in range(PARTITIONS):
            producer.send(topic, value=f"{tag}-{p}-{i}".encode(), partition=p)
    producer.flush()
    producer.close()


def committed(admin: KafkaAdminClient, group: str) -> dict[int, int]:
    offsets = admin.list_group_offsets(group)[group]
    return {tp.partition: om.offset for tp, om in offsets.items()}


# -- the mixed-client group -----------------------------------------------------------


def test_mixed_client_group_rebalances_survives_kill_and_restart(broker: Broker,
                                                                 tmp_path: Path) -> None:
    topic, group = "orders", "billing"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    produce(broker.bootstrap, topic, RECORDS_PER_PARTITION, "a")
    members: list[Member] = []
    try:
        started = time.time()
        for client in ("kafka-python", "confluent-kafka", "aiokafka"):
            members.append(Member(client, broker, topic, group, tmp_path))
        owned = settle(members, admin, group, started)
        assert all(owned.values()), f"a member got nothing: {owned}"

        def consumed_all(per_partition: int) -> bool:
            seen = {(p, o) for m in members for p, o, ok, _ in m.processed() if ok}
            return len(seen) >= PARTITIONS * per_partition

        wait_until(lambda: consumed_all(RECORDS_PER_PARTITION), SETTLE_S, "all records",
                   lambda: "\n".join(m.diagnostics() for m in members))

        # SIGKILL the member that owns the most partitions; the others take them over.
        victim = max(members, key=lambda m: len(owned[m.name]))
        victim.kill()
        survivors = [m for m in members if m is not victim]
        after = settle(survivors, admin, group, victim.killed_at or 0)
        moved_in = max(m.last_assigned_at() for m in survivors) - (victim.killed_at or 0)
        assert moved_in <= SESSION_TIMEOUT_MS / 1000 + MOVE_SLACK_S, moved_in
        assert sorted(p for ps in after.values() for p in ps) == list(range(PARTITIONS))

        produce(broker.bootstrap, topic, 10, "b")
        wait_until(lambda: consumed_all(RECORDS_PER_PARTITION + 10), SETTLE_S,
                   "the records produced after the kill",
                   lambda: "\n".join(m.diagnostics() for m in survivors))

        # Restart the broker under the live members: the group is reloaded from
        # __consumer_offsets (Stable, same generation) and they carry on without
        # a rebalance.
        assigned_before = {m.name: m.last_assigned_at() for m in survivors}
        admin.close()
        broker.stop()
        broker.start()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        produce(broker.bootstrap, topic, 10, "c")
        wait_until(lambda: consumed_all(RECORDS_PER_PARTITION + 20), SETTLE_S,
                   "the records produced after the broker restart",
                   lambda: "\n".join(m.diagnostics() for m in survivors))
        assert {m.name: m.current_assignment() for m in survivors} == after
        assert {m.name: m.last_assigned_at() for m in survivors} == assigned_before
        for m in survivors:
            m.stop()
        check_no_overlapping_ownership(members)
        check_duplicates_only_after_failed_commits(members)
        before_restart = committed(admin, group)
        assert before_restart == {p: RECORDS_PER_PARTITION + 20 for p in range(PARTITIONS)}
    finally:
        for m in members:
            m.stop()
        admin.close()

    broker.stop()
    broker.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert committed(admin, group) == before_restart
        produce(broker.bootstrap, topic, 1, "c")
        newcomer = Member("aiokafka", broker, topic, group, tmp_path)
        try:
            wait_until(lambda: len(newcomer.processed()) >= PARTITIONS, SETTLE_S,
                       "the newcomer to read the new records", newcomer.diagnostics)
            time.sleep(0.5)  # nothing else may follow
            first: dict[int, int] = {}
            for p, o, _, _ in newcomer.processed():
                first.setdefault(p, o)
            assert first == before_restart, "newcomer did not resume at the committed offsets"
            assert len(newcomer.processed()) == PARTITIONS
        finally:
            newcomer.stop()
    finally:
        admin.close()
    assert "Traceback" not in broker.log_text()


# -- bad input over the raw protocol -------------------------------------------------


class RawClient:
    """Blocking Kafka wire client using kafka-python's message classes."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation = 0

    def call(self, request_cls: Any, response_cls: Any, version: int, **fields: Any) -> Any:
        self.correlation += 1
        body = bytes(request_cls[version](**fields).encode(version=version))
        flexible = request_cls.flexible_version_q(version)
        header = struct.pack(">hhih", request_cls.API_KEY, version, self.correlation, 4) + b"test"
        frame = header + (b"\x00" if flexible else b"") + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._exactly(4))[0]
        data = self._exactly(size)
        assert struct.unpack_from(">i", data)[0] == self.correlation
        start = 5 if flexible else 4  # no tagged fields in our response headers
        return response_cls.decode(memoryview(data[start:]), version=version)

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "broker closed the connection"
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


JOIN = (consumer_api.JoinGroupRequest, consumer_api.JoinGroupResponse)
SYNC = (consumer_api.SyncGroupRequest, consumer_api.SyncGroupResponse)
COMMIT = (consumer_api.OffsetCommitRequest, consumer_api.OffsetCommitResponse)
HEARTBEAT = (consumer_api.HeartbeatRequest, consumer_api.HeartbeatResponse)
FETCH = (consumer_api.OffsetFetchRequest, consumer_api.OffsetFetchResponse)
FIND = (metadata_api.FindCoordinatorRequest, metadata_api.FindCoordinatorResponse)
LIST = (admin_api.ListGroupsRequest, admin_api.ListGroupsResponse)
METADATA = (metadata_api.MetadataRequest, metadata_api.MetadataResponse)

ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
COORDINATOR_NOT_AVAILABLE = 15
MEMBER_ID_REQUIRED = 79


def _join(client: RawClient, group: str, member_id: str, protocol_type: str = "consumer",
          session_ms: int = 10000) -> Any:
    proto = JOIN[0][5].JoinGroupRequestProtocol
    return client.call(*JOIN, 5, group_id=group, session_timeout_ms=session_ms,
                       rebalance_timeout_ms=10000, member_id=member_id, group_instance_id=None,
                       protocol_type=protocol_type,
                       protocols=[proto(name="range", metadata=b"\x00\x00\x00\x00\x00\x00")])


def _commit(client: RawClient, group: str, generation: int, member_id: str, topic: str,
            offset: int) -> int:
    req = COMMIT[0][8]
    topic_cls = req.OffsetCommitRequestTopic
    resp = client.call(*COMMIT, 8, group_id=group, generation_id_or_member_epoch=generation,
                       member_id=member_id, group_instance_id=None, topics=[topic_cls(
                           name=topic, partitions=[topic_cls.OffsetCommitRequestPartition(
                               partition_index=0, committed_offset=offset,
                               committed_leader_epoch=-1, committed_metadata="")])])
    return int(resp.topics[0].partitions[0].error_code)


def test_bad_group_input_gets_kafka_error_codes(broker: Broker) -> None:
    topic, group = "events", "strict"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    client = RawClient(broker.bootstrap)
    try:
        found = client.call(*FIND, 4, key_type=0, coordinator_keys=[group, "other"])
        assert [(c.key, c.error_code, c.port) for c in found.coordinators] == \
            [(group, 0, broker.port), ("other", 0, broker.port)]
        txn = client.call(*FIND, 3, key="txn-1", key_type=1)
        assert (txn.error_code, txn.port) == (0, broker.port)  # the transaction coordinator

        first = _join(client, group, "")
        assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
        member = first.member_id
        joined = _join(client, group, member)
        assert (joined.error_code, joined.generation_id, joined.leader) == (0, 1, member)
        sync_req = SYNC[0][3]
        synced = client.call(*SYNC, 3, group_id=group, generation_id=1, member_id=member,
                             group_instance_id=None, assignments=[sync_req.SyncGroupRequestAssignment(
                                 member_id=member, assignment=b"")])
        assert synced.error_code == 0

        # Another protocol type cannot join a consumer group.
        other = _join(client, group, "", protocol_type="not-a-consumer")
        assert other.error_code == INCONSISTENT_GROUP_PROTOCOL
        assert _join(client, group, "", session_ms=1000).error_code == INVALID_SESSION_TIMEOUT
        assert _join(client, group, "no-such-member").error_code == UNKNOWN_MEMBER_ID

        # The leader rejoins: generation 2. Generation 1 is now stale.
        assert _join(client, group, member).generation_id == 2
        client.call(*SYNC, 3, group_id=group, generation_id=2, member_id=member,
                    group_instance_id=None, assignments=[])
        assert _commit(client, group, 1, member, topic, 5) == ILLEGAL_GENERATION
        beat = client.call(*HEARTBEAT, 4, group_id=group, generation_id=1, member_id=member,
                           group_instance_id=None)
        assert beat.error_code == ILLEGAL_GENERATION
        assert _commit(client, group, 2, "intruder", topic, 5) == UNKNOWN_MEMBER_ID
        assert _commit(client, group, 2, member, topic, 7) == 0

        # Nothing was corrupted: the good commit is there (multi-group OffsetFetch v8).
        fetch_req = FETCH[0][8]
        fetched = client.call(*FETCH, 8, require_stable=False, groups=[
            fetch_req.OffsetFetchRequestGroup(group_id=group, topics=None),
            fetch_req.OffsetFetchRequestGroup(group_id="nobody", topics=None)])
        offsets = {g.group_id: [(t.name, p.partition_index, p.committed_offset)
                                for t in g.topics for p in t.partitions] for g in fetched.groups}
        assert offsets == {group: [(topic, 0, 7)], "nobody": []}
        listed = client.call(*LIST, 4, states_filter=["Stable"])
        assert [(g.group_id, g.group_state) for g in listed.groups] == [(group, "Stable")]
        meta = client.call(*METADATA, 12, topics=None, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
        internal = {t.name: t.is_internal for t in meta.topics}
        assert internal["__consumer_offsets"] is True and internal[topic] is False
    finally:
        client.close()
    assert "Traceback" not in broker.log_text()
