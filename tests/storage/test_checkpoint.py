"""Kafka's text checkpoint files and partition.metadata."""

from __future__ import annotations

import os
import uuid

import pytest

from storage.log import checkpoint


def test_offset_checkpoint_format(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    checkpoint.write_offsets(path, {("b", 1): 99, ("a", 0): 1234, ("a", 10): 0})
    with open(path) as f:
        assert f.read() == "0\n3\na 0 1234\na 10 0\nb 1 99\n"
    assert checkpoint.read_offsets(path) == {("b", 1): 99, ("a", 0): 1234, ("a", 10): 0}
    assert os.listdir(tmp_path) == ["recovery-point-offset-checkpoint"]  # no .tmp left


def test_empty_offset_checkpoint(tmp_path):
    path = str(tmp_path / "cp")
    checkpoint.write_offsets(path, {}, fsync=True)
    with open(path) as f:
        assert f.read() == "0\n0\n"
    assert checkpoint.read_offsets(path) == {}


def test_reads_a_kafka_written_offset_checkpoint(tmp_path):
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text("0\n2\nmy-topic 0 1234\nmy.other_topic 7 5\n")
    assert checkpoint.read_offsets(str(path)) == {("my-topic", 0): 1234, ("my.other_topic", 7): 5}


@pytest.mark.parametrize("text", [
    "", "0\n", "1\n1\nt 0 5\n", "0\n2\nt 0 5\n", "0\n1\nt 0\n", "0\n1\nt x 5\n", "0\n1\nt 0 y\n",
])
def test_corrupt_offset_checkpoint_reads_as_empty(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    assert checkpoint.read_offsets(str(path)) == {}


def test_missing_checkpoint_reads_as_empty(tmp_path):
    assert checkpoint.read_offsets(str(tmp_path / "nope")) == {}
    assert checkpoint.read_epochs(str(tmp_path / "nope")) == []


def test_epochs_format_round_trip(tmp_path):
    text = checkpoint.format_epochs([(0, 0), (3, 100)])
    assert text == "0\n2\n0 0\n3 100\n"
    path = str(tmp_path / "leader-epoch-checkpoint")
    checkpoint.atomic_write(path, text)
    assert checkpoint.read_epochs(path) == [(0, 0), (3, 100)]


def test_atomic_write_replaces(tmp_path):
    path = str(tmp_path / "f")
    checkpoint.atomic_write(path, "one")
    checkpoint.atomic_write(path, "two", fsync=True)
    with open(path) as f:
        assert f.read() == "two"
    assert os.listdir(tmp_path) == ["f"]


def test_topic_id_strings_match_kafka_uuid_to_string():
    # Kafka's Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID (0, 1).
    assert checkpoint.topic_id_to_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert checkpoint.topic_id_to_str(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    tid = uuid.UUID("f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
    text = checkpoint.topic_id_to_str(tid)
    assert len(text) == 22 and "=" not in text
    assert checkpoint.topic_id_from_str(text) == tid


def test_partition_metadata(tmp_path):
    tid = uuid.UUID(int=(1 << 127) | 12345)
    checkpoint.write_partition_metadata(str(tmp_path), tid)
    assert (tmp_path / "partition.metadata").read_text() == (
        f"version: 0\ntopic_id: {checkpoint.topic_id_to_str(tid)}\n")
    assert checkpoint.read_partition_metadata(str(tmp_path)) == tid


@pytest.mark.parametrize("text", [None, "version: 0\n", "version: 0\ntopic_id: !!!\n"])
def test_bad_partition_metadata_reads_as_none(tmp_path, text):
    if text is not None:
        (tmp_path / "partition.metadata").write_text(text)
    assert checkpoint.read_partition_metadata(str(tmp_path)) is None


def test_overwrite_replaces_the_content_in_place(tmp_path):
    path = str(tmp_path / "leader-epoch-checkpoint")
    checkpoint.overwrite(path, checkpoint.format_epochs([(0, 0), (1, 50), (2, 90)]))
    inode = os.stat(path).st_ino
    checkpoint.overwrite(path, checkpoint.format_epochs([(0, 0)]))
    assert checkpoint.read_epochs(path) == [(0, 0)]  # shorter: no old tail left
    assert os.stat(path).st_ino == inode  # no rename: the same file
    assert os.listdir(tmp_path) == ["leader-epoch-checkpoint"]


def test_an_empty_epoch_checkpoint_reads_as_none(tmp_path):
    """What a process killed between overwrite's truncate and its write leaves."""
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("")
    assert checkpoint.read_epochs(str(path)) == []
