"""Leader-epoch cache: Kafka's endOffsetFor rules, truncation, the checkpoint file."""

from __future__ import annotations

import pytest

from storage.log.epoch_cache import FILE_NAME, UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache

LEO = 30
UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


@pytest.fixture
def cache(tmp_path):
    c = LeaderEpochCache(str(tmp_path))
    for epoch, start in [(1, 0), (3, 10), (5, 20)]:
        c.assign(epoch, start)
    return c


def _file(tmp_path) -> str:
    return (tmp_path / FILE_NAME).read_text()


def test_checkpoint_file_is_kafka_format(tmp_path, cache):
    assert _file(tmp_path) == "0\n3\n1 0\n3 10\n5 20\n"  # version, count, "epoch startOffset"


def test_reads_a_kafka_written_checkpoint(tmp_path):
    (tmp_path / FILE_NAME).write_text("0\n2\n0 0\n4 1234\n")
    assert LeaderEpochCache(str(tmp_path)).entries == [(0, 0), (4, 1234)]


@pytest.mark.parametrize("text", [
    "", "1\n1\n0 0\n", "0\n3\n0 0\n", "0\n1\n0\n", "x\n", "0\n1\na b\n",
])
def test_corrupt_checkpoint_reads_as_empty(tmp_path, text):
    (tmp_path / FILE_NAME).write_text(text)
    assert LeaderEpochCache(str(tmp_path)).entries == []


def test_assign_ignores_known_or_older_epochs(tmp_path, cache):
    cache.assign(5, 25)
    cache.assign(2, 26)
    cache.assign(-1, 27)
    assert cache.entries == [(1, 0), (3, 10), (5, 20)]
    assert cache.latest_epoch == 5
    assert LeaderEpochCache(str(tmp_path)).entries == cache.entries  # persisted


def test_empty_cache():
    c = LeaderEpochCache("/nonexistent-dir-for-tierd-tests")
    assert c.latest_epoch == UNDEFINED_EPOCH
    assert c.end_offset_for(0, LEO) == UNDEFINED
    assert c.epoch_for_offset(5) == UNDEFINED_EPOCH


# Kafka's LeaderEpochFileCache.endOffsetFor(requestedEpoch, logEndOffset):
#   undefined epoch                -> (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
#   requested == latest epoch      -> (requested, logEndOffset)
#   no entry above requested       -> (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
#   no entry at or below requested -> (requested, start offset of the first entry)
#   otherwise                      -> (floor entry's epoch, start offset of the next entry)


def test_end_offset_for_undefined_epoch(cache):
    assert cache.end_offset_for(UNDEFINED_EPOCH, LEO) == UNDEFINED


def test_end_offset_for_latest_epoch_is_log_end(cache):
    assert cache.end_offset_for(5, LEO) == (5, LEO)


@pytest.mark.parametrize("epoch, expected", [(1, (1, 10)), (2, (1, 10)), (3, (3, 20)),
                                             (4, (3, 20))])
def test_end_offset_for_older_epochs(cache, epoch, expected):
    assert cache.end_offset_for(epoch, LEO) == expected


def test_end_offset_for_epoch_below_first_entry(cache):
    # Earlier epochs were removed with the data: Kafka answers the requested epoch and
    # the first known start offset, so the follower truncates there.
    assert cache.end_offset_for(0, LEO) == (0, 0)


def test_end_offset_for_epoch_above_latest_is_undefined(cache):
    assert cache.end_offset_for(6, LEO) == UNDEFINED


def test_epoch_for_offset(cache):
    assert [cache.epoch_for_offset(o) for o in (0, 9, 10, 19, 20, 99)] == [1, 1, 3, 3, 5, 5]


def test_truncate_from_end(tmp_path, cache):
    cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (3, 10)]
    cache.truncate_from_end(11)
    assert cache.entries == [(1, 0), (3, 10)]
    cache.truncate_from_end(10)
    assert cache.entries == [(1, 0)]
    assert _file(tmp_path) == "0\n1\n1 0\n"


def test_truncate_from_start(tmp_path, cache):
    cache.truncate_from_start(15)
    assert cache.entries == [(3, 15), (5, 20)]
    cache.truncate_from_start(20)
    assert cache.entries == [(5, 20)]
    cache.truncate_from_start(25)
    assert cache.entries == [(5, 25)]
    assert _file(tmp_path) == "0\n1\n5 25\n"


def test_clear(tmp_path, cache):
    cache.clear()
    assert cache.entries == [] and _file(tmp_path) == "0\n0\n"
