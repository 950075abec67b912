"""ReplicaTiering: hands this broker's replicas to tiered storage as their role and configs change.

What it owns: the RemoteLogManager, reader pool and remote lookups once
tiered storage is on (``turn_on``, called once by the tiering wiring), and
the rules for which replica the RemoteLogManager should tier and how: a
leader with remote.storage.enable copies and expires, a follower only
follows the tier boundary, a replica that stops being hosted (or loses
tiering) is dropped, and turning tiering off takes the KIP-950 path.

Why it is separate from the ReplicaManager: the ReplicaManager decides a
replica's role; this object only translates each role or config change
into the RemoteLogManager's calls. With tiered storage off every method is
a no-op, so the lifecycle code reads the same either way.

Concurrency: runs on the event loop; every call returns at once (the
RemoteLogManager's own tasks do the work).
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.partition import TopicPartition
from replication.partition import Partition
from storage.remote.lookups import RemoteLookups
from storage.remote.manager import RemoteLogManager
from storage.remote.read_pool import RemoteReadPool
from storage.remote.types import TopicIdPartition


class ReplicaTiering:
    """The RemoteLogManager's view of this broker's replicas (see the module docstring).

    Args:
        node_id: this broker, to tell a leader from a follower.
    """

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        # Set once tiered storage is on (``turn_on``); None while it is off.
        self.manager: RemoteLogManager | None = None
        self.reads: RemoteReadPool | None = None
        self.lookups: RemoteLookups | None = None

    def turn_on(self, manager: RemoteLogManager, reads: RemoteReadPool,
                lookups: RemoteLookups) -> None:
        """Tiered storage is on: ``manager`` tiers this broker's partitions,
        ``reads`` and ``lookups`` serve consumers from the tier (set once by
        the tiering wiring, before ``start_all``)."""
        self.manager = manager
        self.reads = reads
        self.lookups = lookups

    def start(self, part: Partition) -> None:
        """Hand a partition with tiering on to the RemoteLogManager: a leader
        copies and expires, a follower only follows the tier boundary."""
        if self.manager is None or not part.log.config.remote_storage_enable:
            return
        if part.is_leader(self.node_id):
            self.manager.start_partition(_tip(part), part.log, lambda: part.last_stable_offset)
        else:
            self.manager.follow_partition(_tip(part), part.log)

    def follow(self, part: Partition) -> None:
        """``part`` became a follower here: it follows the tier boundary if
        tiering is on for it, and is no longer tiered otherwise."""
        if self.manager is None:
            return
        if part.log.config.remote_storage_enable:
            self.manager.follow_partition(_tip(part), part.log)
        else:
            self.manager.stop_partition(part.tp)

    def stop(self, tp: TopicPartition) -> None:
        """``tp`` is no longer hosted here."""
        if self.manager is not None:
            self.manager.stop_partition(tp)

    def config_changed(self, part: Partition, was_tiered: bool) -> None:
        """``part``'s log has new configs (``was_tiered``: remote.storage.enable before)."""
        if self.manager is None:
            return
        if part.log.config.remote_storage_enable:
            self.start(part)
            self.manager.wake()
        elif was_tiered:
            # KIP-950: turning tiering off requires remote.log.delete.on.disable.
            self.manager.disable_partition(_tip(part), part.log)

    def start_all(self, parts: Iterable[Partition]) -> None:
        """After the remote metadata is loaded: start every tiered partition, and
        resume the remote deletion of leaders whose tiering was turned off with
        remote.log.delete.on.disable (KIP-950; a restart may have cut it short)."""
        for part in parts:
            self.start(part)
            cfg = part.log.config
            if (self.manager is not None and not cfg.remote_storage_enable
                    and cfg.remote_delete_on_disable and part.is_leader(self.node_id)):
                self.manager.resume_disabled_partition(_tip(part), part.log)


def _tip(part: Partition) -> TopicIdPartition:
    return TopicIdPartition(part.topic_id, part.topic, part.index)
