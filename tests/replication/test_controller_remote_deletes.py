"""The controller marks a deleted tiered topic's partitions before it lets the
topic go (``replication.controller_remote_deletes``)."""

from __future__ import annotations

import uuid

from replication.controller_remote_deletes import mark_deleted_topic
from storage.remote.types import TopicIdPartition

TIERED = {"remote.storage.enable": "true"}
TOPIC_ID = uuid.uuid4()


class Marks:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[list[TopicIdPartition]] = []

    async def __call__(self, partitions: list[TopicIdPartition]) -> None:
        self.calls.append(partitions)
        if self.fail:
            raise OSError("metadata partition without a leader")


async def test_every_partition_of_a_tiered_topic_is_marked():
    marks = Marks()
    assert await mark_deleted_topic(marks, "t", TOPIC_ID, 3, TIERED)
    assert marks.calls == [[TopicIdPartition(TOPIC_ID, "t", p) for p in range(3)]]


async def test_an_untiered_topic_goes_unmarked():
    marks = Marks()
    assert await mark_deleted_topic(marks, "t", TOPIC_ID, 3, {"remote.storage.enable": "false"})
    assert await mark_deleted_topic(marks, "t", TOPIC_ID, 3, {})
    assert await mark_deleted_topic(marks, "t", None, 3, TIERED)  # no id: nothing to name
    assert marks.calls == []


async def test_a_topic_whose_markers_fail_stays_for_the_next_attempt():
    assert not await mark_deleted_topic(Marks(fail=True), "t", TOPIC_ID, 3, TIERED)


async def test_a_controller_without_tiering_lets_the_topic_go():
    assert await mark_deleted_topic(None, "t", TOPIC_ID, 3, TIERED)
