"""ZooKeeper for cluster mode: Kafka's znode layout, through kazoo, off the event loop.

Layout and JSON formats are Kafka's ZooKeeper mode (``ZkData.scala``), so
Kafka's own tools can read a tierd cluster's state:

    /cluster/id                               {"version":"1","id":...}
    /controller                  ephemeral    {"version":1,"brokerid":N,"timestamp":"ms"}
    /controller_epoch                         "N"
    /brokers/ids/<id>            ephemeral    {"version":5,"host","port","endpoints":[...],...}
    /brokers/topics/<t>                       {"version":3,"topic_id","partitions":{"0":[..]},...}
    /brokers/topics/<t>/partitions/<p>/state  {"version":1,"controller_epoch","leader",
                                               "leader_epoch","isr":[..]}
    /config/topics/<t>                        {"version":1,"config":{...}}
    /config/brokers/<id>|<default>            {"version":1,"config":{...}}
    /config/changes/config_change_<seq>       {"version":2,"entity_path":"topics/<t>"}
    /admin/delete_topics/<t>
    /latest_producer_id_block                 {"version":1,"broker","block_start","block_end"}

``ZkClient`` owns the session, its worker threads and the watches, and the
topic znodes and producer id block; other concerns keep their znodes in a
module of their own that calls through it: ``zk_membership`` (broker
registrations, /controller and its epoch), ``zk_partition_states``,
``zk_configs`` and ``zk_acls``.

Concurrency: every kazoo call runs in a worker thread (``trio.to_thread``,
one CapacityLimiter), never on the event loop. Watches fire on kazoo's
threads; they only hand a wake-up to trio (``TrioToken.run_sync_soon``) and
the trio side re-reads what changed, so a burst of changes coalesces into
one read and nothing queues without bound.

Error handling: calls retry through short connection losses (kazoo's command
retry, up to ``RETRY_DEADLINE_S``), so a ZooKeeper restart stalls metadata
changes, not the data path. Compare-and-set conflicts come back as None, not
exceptions. Start-up problems (unreachable servers, missing chroot, a broker
id registered by a live broker) raise ``ZkConfigError`` with a message for
the operator.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import structlog
import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

from storage.log.checkpoint import topic_id_from_str, topic_id_to_str

log = structlog.get_logger(__name__)

# How long a call keeps retrying through a lost connection before failing.
RETRY_DEADLINE_S = 60.0
# Producer ids per block claimed from /latest_producer_id_block (Kafka's size).
PRODUCER_ID_BLOCK = 1000
# Worker threads for ZooKeeper calls (they block on the network).
ZK_THREADS = 4
PERSISTENT = ("/brokers/ids", "/brokers/topics", "/config/topics", "/config/changes",
              "/admin/delete_topics", "/cluster")


class ZkConfigError(Exception):
    """ZooKeeper cannot be used as configured (the broker exits with this message)."""


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    topic_id: uuid.UUID
    partitions: dict[int, list[int]]


def json_bytes(data: dict[str, Any] | str) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def user_node(user: str) -> str:
    """A user name as a znode name (Kafka URL-encodes it: '/' cannot appear)."""
    return quote(user, safe="")


def _split_chroot(connect: str) -> tuple[str, str]:
    servers, slash, chroot = connect.partition("/")
    return servers, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""



def settled(result: Any, *expected: type[BaseException]) -> tuple[Any, BaseException | None]:
    """A kazoo async result, waited for: (value, None), or (None, the error)
    for an error of an ``expected`` kind; any other error is raised. Expected
    errors are not raised: a raised exception's traceback ties frames, the
    result and itself into a cycle only the garbage collector frees, and a
    batch of thousands left a pause of 100 ms and more to collect."""
    result.wait()
    error = result.exception
    if error is None:
        return result.value, None
    if isinstance(error, expected):
        return None, error
    raise error

def create_async(client: KazooClient, path: str, data: bytes,
                  include_data: bool = False) -> Any:
    """kazoo's ``create_async`` for a batch, without its closures: each call of
    that one ties three nested functions and its result into a reference
    cycle, about 50 objects that only the cycle collector frees, and the
    controller's creation of a few thousand partitions left enough of them to
    trigger full collections of 100 ms and more. The request is the same
    (kazoo's inner create); an error raised at once comes back in the result.
    """
    try:
        return client._create_async_inner(path, data, OPEN_ACL_UNSAFE, 0,
                                          include_data=include_data)
    except Exception as exc:  # the session is closing: kazoo fails the call at once
        result = client.handler.async_result()
        result.set_exception(exc)
        return result


class ZkClient:
    def __init__(self, client: KazooClient, servers: str, session_timeout_ms: int) -> None:
        self.client = client
        self.servers = servers
        self.session_timeout_s = session_timeout_ms / 1000
        self._limiter = trio.CapacityLimiter(ZK_THREADS)
        self._token = trio.lowlevel.current_trio_token()
        self._session_id = client.client_id[0] if client.client_id else None
        self._lost = trio.Event()
        self._sessions: list[trio.Event] = []
        client.add_listener(self._on_state)

    # -- connection ----------------------------------------------------------------

    @classmethod
    async def connect(cls, connect: str, session_timeout_ms: int,
                      connection_timeout_ms: int) -> ZkClient:
        """Connect (checking the chroot exists) and create the persistent paths.

        Raises:
            ZkConfigError: unreachable within the timeout, or the chroot is missing.
        """
        servers, chroot = _split_chroot(connect)
        timeout = connection_timeout_ms / 1000

        def open_client() -> KazooClient:
            if chroot:
                probe = KazooClient(hosts=servers, timeout=session_timeout_ms / 1000)
                try:
                    probe.start(timeout=timeout)
                except Exception:
                    probe.close()
                    raise ZkConfigError(f"cannot reach ZooKeeper at {servers} within "
                                        f"{connection_timeout_ms} ms") from None
                try:
                    if probe.exists(chroot) is None:
                        raise ZkConfigError(f"chroot {chroot} does not exist in ZooKeeper at "
                                            f"{servers}; create it first")
                finally:
                    probe.stop()
                    probe.close()
            retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0, ignore_expire=False,
                               deadline=RETRY_DEADLINE_S)
            client = KazooClient(hosts=servers + chroot, timeout=session_timeout_ms / 1000,
                                 command_retry=retry,
                                 connection_retry=KazooRetry(max_tries=-1, max_delay=1.0))
            try:
                client.start(timeout=timeout)
            except Exception:
                client.close()
                raise ZkConfigError(f"cannot reach ZooKeeper at {servers} within "
                                    f"{connection_timeout_ms} ms") from None
            for path in PERSISTENT:
                client.ensure_path(path)
            return client

        client = await trio.to_thread.run_sync(open_client)
        log.info("connected to ZooKeeper", servers=servers, chroot=chroot or "/",
                 session_timeout_ms=session_timeout_ms)
        return cls(client, servers, session_timeout_ms)

    def _on_state(self, state: str) -> None:
        """kazoo thread: hand connection state changes to trio."""
        try:
            self._token.run_sync_soon(self._state_changed, state)
        except trio.RunFinishedError:
            pass

    def _state_changed(self, state: str) -> None:
        log.info("ZooKeeper connection state", state=str(state))
        if state == KazooState.LOST:
            self._lost.set()
        elif state == KazooState.CONNECTED:
            session = self.client.client_id[0] if self.client.client_id else None
            if session != self._session_id:
                self._session_id = session
                self._lost = trio.Event()
                for event in self._sessions:
                    event.set()

    async def new_sessions(self) -> AsyncIterator[None]:
        """Yields after each new session (the old one expired): re-create ephemerals."""
        event = trio.Event()
        self._sessions.append(event)
        try:
            while True:
                await event.wait()
                event = trio.Event()
                self._sessions[-1:] = [event]
                yield None
        finally:
            if event in self._sessions:
                self._sessions.remove(event)

    async def session_lost(self) -> None:
        """Until the current session is lost (expired, or the client closed)."""
        await self._lost.wait()

    async def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return await trio.to_thread.run_sync(lambda: fn(*args, **kw), limiter=self._limiter)

    async def call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """Run ``fn`` (kazoo calls on ``self.client``) in one of the ZooKeeper threads."""
        return await self._call(fn, *args, **kw)

    async def close(self) -> None:
        def stop() -> None:
            self.client.stop()
            self.client.close()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(stop)

    # -- watches -----------------------------------------------------------------------

    async def _watch(self, register: Callable[[Callable[..., Any]], Any],
                     read: Callable[[], Any]) -> AsyncIterator[Any]:
        """Register a kazoo watch (in a worker thread); yield ``read()`` after each firing.

        Firings while a read is under way coalesce into one more read.
        """
        holder = {"event": trio.Event()}

        def fire() -> None:
            holder["event"].set()

        def callback(*_: Any) -> None:
            try:
                self._token.run_sync_soon(fire)
            except trio.RunFinishedError:
                pass

        await self._call(register, callback)
        while True:
            await holder["event"].wait()
            holder["event"] = trio.Event()
            yield await read()

    async def watch_children(self, path: str) -> AsyncIterator[None]:
        """Yields each time the children of ``path`` change."""
        async for _ in self._watch(lambda cb: self.client.ChildrenWatch(path, cb),
                                   trio.lowlevel.checkpoint):
            yield None

    async def watch_node(self, path: str) -> AsyncIterator[None]:
        """Yields now and each time ``path`` is created, changed or deleted."""
        async for _ in self._watch(lambda cb: self.client.DataWatch(path, cb),
                                   trio.lowlevel.checkpoint):
            yield None

    async def watch_topics(self) -> AsyncIterator[list[str]]:
        """Yields the topic list whenever a topic is added, removed or re-assigned."""
        watched: set[str] = set()
        wake: dict[str, Callable[..., Any]] = {}

        def register(cb: Callable[..., Any]) -> None:
            wake["cb"] = cb
            self.client.ChildrenWatch("/brokers/topics", cb)

        async def read() -> list[str]:
            topics = await self.get_topics()
            for topic in topics:
                if topic not in watched:  # partition count changes rewrite the topic znode
                    watched.add(topic)
                    await self._call(self.client.DataWatch, f"/brokers/topics/{topic}",
                                     wake["cb"])
            return topics

        async for topics in self._watch(register, read):
            yield topics

    async def watch_topic_deletions(self) -> AsyncIterator[list[str]]:
        async for topics in self._watch(
                lambda cb: self.client.ChildrenWatch("/admin/delete_topics", cb),
                self.get_topics_to_delete):
            yield topics

    async def watch_config_changes(self, kind: str = "topics") -> AsyncIterator[list[str]]:
        """Yields the entities of ``kind`` (topics, brokers) named by config change
        notifications newer than the last."""
        seen = {"last": ""}

        async def read() -> list[str]:
            names = sorted(await self._call(self.client.get_children, "/config/changes"))
            fresh = [n for n in names if n > seen["last"]]
            if names:
                seen["last"] = names[-1]
            topics = []
            for name in fresh:
                try:
                    data, _ = await self._call(self.client.get, f"/config/changes/{name}")
                except NoNodeError:
                    continue
                path = json.loads(data).get("entity_path", "")
                if path.startswith(f"{kind}/"):
                    topics.append(path[len(kind) + 1:])
            return topics

        seen["last"] = max(await self._call(self.client.get_children, "/config/changes"),
                           default="")
        async for topics in self._watch(
                lambda cb: self.client.ChildrenWatch("/config/changes", cb), read):
            if topics:
                yield topics

    # -- cluster id --------------------------------------------------------

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        def run() -> str:
            try:
                self.client.create("/cluster/id", json_bytes({"version": "1", "id": proposed}))
                return proposed
            except NodeExistsError:
                data, _ = self.client.get("/cluster/id")
                return str(json.loads(data)["id"])
        return str(await self._call(run))

    # -- topics --------------------------------------------------------------------------

    async def get_topics(self) -> list[str]:
        return sorted(await self._call(self.client.get_children, "/brokers/topics"))

    async def get_topic_assignment(self, topic: str) -> TopicAssignment | None:
        try:
            data, _ = await self._call(self.client.get, f"/brokers/topics/{topic}")
        except NoNodeError:
            return None
        info = json.loads(data)
        return TopicAssignment(topic_id_from_str(info["topic_id"]),
                               {int(p): [int(r) for r in rs]
                                for p, rs in info["partitions"].items()})

    @staticmethod
    def _assignment_json(topic_id: uuid.UUID, partitions: dict[int, list[int]]) -> bytes:
        return json_bytes({"partitions": {str(p): rs for p, rs in sorted(partitions.items())},
                      "topic_id": topic_id_to_str(topic_id), "adding_replicas": {},
                      "removing_replicas": {}, "version": 3})

    async def create_topic_assignment(self, topic: str, topic_id: uuid.UUID,
                                      partitions: dict[int, list[int]]) -> bool:
        try:
            await self._call(self.client.create, f"/brokers/topics/{topic}",
                             self._assignment_json(topic_id, partitions))
            return True
        except NodeExistsError:
            return False

    async def set_topic_assignment(self, topic: str, topic_id: uuid.UUID,
                                   partitions: dict[int, list[int]]) -> None:
        await self._call(self.client.set, f"/brokers/topics/{topic}",
                         self._assignment_json(topic_id, partitions))

    async def mark_topic_for_deletion(self, topic: str) -> None:
        try:
            await self._call(self.client.create, f"/admin/delete_topics/{topic}", b"")
        except NodeExistsError:
            pass

    async def get_topics_to_delete(self) -> list[str]:
        return sorted(await self._call(self.client.get_children, "/admin/delete_topics"))

    async def delete_topic(self, topic: str) -> None:
        def run() -> None:
            for path in (f"/brokers/topics/{topic}", f"/config/topics/{topic}",
                         f"/admin/delete_topics/{topic}"):
                try:
                    self.client.delete(path, recursive=True)
                except NoNodeError:
                    pass
        await self._call(run)

    # -- producer ids --------------------------------------------------------------------

    async def allocate_producer_id_block(self, node_id: int) -> tuple[int, int]:
        """Claim the next PRODUCER_ID_BLOCK ids: (first, end exclusive)."""
        path = "/latest_producer_id_block"

        def run() -> tuple[int, int]:
            while True:
                try:
                    data, stat = self.client.get(path)
                except NoNodeError:
                    data, stat = b"", None
                start = int(json.loads(data)["block_end"]) + 1 if data else 0
                end = start + PRODUCER_ID_BLOCK - 1
                block = json_bytes({"version": 1, "broker": node_id, "block_start": str(start),
                               "block_end": str(end)})
                try:
                    if stat is None:
                        self.client.create(path, block)
                    else:
                        self.client.set(path, block, version=stat.version)
                    return start, end + 1
                except (BadVersionError, NodeExistsError):
                    continue
        return tuple(await self._call(run))  # type: ignore[return-value]
