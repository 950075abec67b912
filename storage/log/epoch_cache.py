"""Leader-epoch cache (KIP-101): which leader epoch started at which offset.

Each entry (epoch, start_offset) says leader ``epoch`` wrote its first
record at ``start_offset``. An epoch ends where the next begins; the last
epoch ends at the log end offset. Followers (and OffsetForLeaderEpoch
clients) ask "where does epoch E end?" to find where their log diverged.
Persisted as Kafka's ``leader-epoch-checkpoint``.
"""

from __future__ import annotations

import os

from storage.log import checkpoint

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.entries: list[tuple[int, int]] = checkpoint.read_epochs(self.path)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op if known)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        self.entries.append((epoch, start_offset))
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, as Kafka's endOffsetFor.

        - the latest epoch: (it, the log end offset);
        - an epoch above every known one, or UNDEFINED: (UNDEFINED, UNDEFINED);
        - an epoch below every known one: (the requested epoch, the first
          known epoch's start offset), so a follower truncates there;
        - otherwise: (the largest known epoch <= the requested one, the start
          offset of the next known epoch).
        """
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        higher = next(((e, o) for e, o in self.entries if e > epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        floor = [(e, o) for e, o in self.entries if e <= epoch]
        if not floor:
            return epoch, higher[1]
        return floor[-1][0], higher[1]

    def epoch_for_offset(self, offset: int) -> int:
        found = UNDEFINED_EPOCH
        for e, start in self.entries:
            if start > offset:
                break
            found = e
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after ``end_offset`` (log truncation)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly below ``start_offset`` (retention / DeleteRecords)."""
        while len(self.entries) > 1 and self.entries[1][1] <= start_offset:
            self.entries.pop(0)
        if self.entries and self.entries[0][1] < start_offset:
            self.entries[0] = (self.entries[0][0], start_offset)
        self._save()

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Take ``entries`` as the whole cache (a follower rebuilt from the remote tier)."""
        self.entries = list(entries)
        self._save()

    def clear(self) -> None:
        self.entries = []
        self._save()

    def _save(self) -> None:
        checkpoint.overwrite(self.path, checkpoint.format_epochs(self.entries))
