"""Where a follower's local log restarts when it rebuilds from the remote tier:
the choice between KIP-405's earliest local offset and KIP-1023's last tiered
offset + 1, as a pure function of what the leader reports.

Theory of operation
-------------------
KIP-405 restarts a follower that fell below its leader's local log start at
that start (ListOffsets -4): it then replicates the leader's whole local log,
although most of it (all but the untiered tail) is also in the tier. KIP-1023
(``follower.fetch.last.tiered.offset.enable``) restarts it at the first offset
not tiered yet (ListOffsets -6, "earliest pending upload"), taking the leader
epochs and producer state of everything below from the tier; it also applies
to a follower with no local data at all (a wiped broker, a replica added by a
reassignment), which the leader may never answer OFFSET_MOVED_TO_TIERED_STORAGE
because its local log still reaches back far enough.

A restart point is only worth taking above the follower's own log end (it
would otherwise drop data it holds) and above the log start (below it there is
nothing to rebuild from); otherwise the follower fetches from where it is.
"""

from __future__ import annotations

from dataclasses import dataclass

# ListOffsets' answer for "no such offset".
UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class LeaderBounds:
    """What the leader reported (ListOffsets -2, -4 and -6, with epochs)."""

    log_start: int
    local_start: int
    local_epoch: int
    # -6: UNKNOWN when not asked (KIP-405 mode), when the topic is not tiered,
    # or while the leader does not know where its tier ends.
    pending_upload: int = UNKNOWN
    pending_epoch: int = UNKNOWN


def restart_point(bounds: LeaderBounds, follower_end: int,
                  last_tiered: bool) -> tuple[int, int] | None:
    """(offset the follower's local log restarts at, the leader's epoch there),
    or None: fetch from ``follower_end``, nothing to rebuild.

    Args:
        bounds: the leader's offsets.
        follower_end: the follower's log end offset.
        last_tiered: KIP-1023 mode; without it, only a follower below the
            leader's local start restarts, at that start (KIP-405).
    """
    if last_tiered and bounds.pending_upload >= bounds.local_start:
        start, epoch = bounds.pending_upload, bounds.pending_epoch
    elif follower_end < bounds.local_start:
        start, epoch = bounds.local_start, bounds.local_epoch
    else:
        return None
    if start <= follower_end or start <= bounds.log_start:
        return None
    return start, epoch
