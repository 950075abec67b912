"""Swapping cleaned segments into a log, crash-safe as Kafka's ``replaceSegments``.

The cleaner writes ``<base>.log.cleaned`` (and ``.index``/``.timeindex``/
``.txnindex`` ``.cleaned``), fsynced, where ``<base>`` is the first of the
segments it replaces. The swap then, all on the event loop with no wait in
between (so no read or append sees a half-swapped log):

1. ``commit``: the index files ``.cleaned`` -> ``.swap``, then the log file
   ``.log.cleaned`` -> ``.log.swap``. That last rename is the commit point:
   a ``.log.swap`` on disk means a whole cleaned segment.
2. ``retire``: every file of the replaced segments -> ``.deleted``.
3. ``finish``: ``.log.swap`` -> ``.log``, then the indexes.

Recovery (``recover``, before the log opens its segments) follows from the
commit point: ``.cleaned`` files are an unfinished group and go; a
``.log.swap`` completes: the segments whose base offsets lie in the swap's
range [base, its last offset] are what it replaces, so they go and the swap
files take their names; index ``.swap`` files without a ``.log.swap`` (a
crash inside step 1) go; ``.deleted`` files go. A replaced segment beyond
the swap's last offset (its records were all cleaned away) may survive a
crash between steps 1 and 2: it holds only records superseded later in the
log, in offset order, so the log stays valid and the next pass cleans it
again. A missing index is rebuilt from the log when the segment opens.
"""

from __future__ import annotations

import os

import structlog

from protocol import records
from storage.log.file_deleter import DELETED_SUFFIX, unlink_all
from storage.log.segment import filename_prefix

log = structlog.get_logger(__name__)

CLEANED = ".cleaned"
SWAP = ".swap"
DELETED = DELETED_SUFFIX
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
SEGMENT_SUFFIXES = (".log", *INDEX_SUFFIXES)


def _prefix(directory: str, base: int) -> str:
    return os.path.join(directory, filename_prefix(base))


def _rename_if_exists(src: str, dst: str) -> bool:
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        return False
    return True


def commit(directory: str, base: int) -> None:
    """Step 1: the cleaned files become swap files, the log file last."""
    prefix = _prefix(directory, base)
    for suffix in INDEX_SUFFIXES:
        _rename_if_exists(prefix + suffix + CLEANED, prefix + suffix + SWAP)
    os.rename(prefix + ".log" + CLEANED, prefix + ".log" + SWAP)


def retire(directory: str, base: int) -> list[str]:
    """Step 2 for one replaced segment (closed first): its files -> ``.deleted``.

    Returns:
        The renamed paths, for deletion off the event loop.
    """
    prefix = _prefix(directory, base)
    out = []
    for suffix in SEGMENT_SUFFIXES:
        if _rename_if_exists(prefix + suffix, prefix + suffix + DELETED):
            out.append(prefix + suffix + DELETED)
    return out


def finish(directory: str, base: int) -> None:
    """Step 3: the swap files take the segment's names, the log file first."""
    prefix = _prefix(directory, base)
    os.rename(prefix + ".log" + SWAP, prefix + ".log")
    for suffix in INDEX_SUFFIXES:
        # A cleaned segment may have no .txnindex (no aborted transaction kept).
        _rename_if_exists(prefix + suffix + SWAP, prefix + suffix)


def remove_cleaned(directory: str, base: int) -> None:
    """Delete the ``.cleaned`` files of ``base`` (a group never swapped in)."""
    unlink_all([_prefix(directory, base) + s + CLEANED for s in SEGMENT_SUFFIXES])




def _last_offset(path: str) -> int | None:
    """Last offset of the whole batches in ``path`` (None if it holds none)."""
    last = None
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        position = 0
        while position + records.HEADER_SIZE <= size:
            f.seek(position)
            header = records.parse_header(f.read(records.HEADER_SIZE), 0)
            end = position + header.size
            if header.batch_length <= 0 or end > size:
                break
            last = header.last_offset
            position = end
    return last


def recover(directory: str) -> None:
    """Finish or undo whatever a crash left of a swap (see the module doc).

    Call before the segments are opened.
    """
    names = os.listdir(directory)
    for name in names:
        if name.endswith((CLEANED, DELETED)):
            os.unlink(os.path.join(directory, name))
    bases = sorted(int(name[:-len(".log" + SWAP)]) for name in names
                   if name.endswith(".log" + SWAP) and name[:20].isdigit())
    segment_bases = sorted(int(name[:-4]) for name in names
                           if name.endswith(".log") and name[:-4].isdigit())
    for base in bases:
        last = _last_offset(_prefix(directory, base) + ".log" + SWAP)
        end = base if last is None else last
        replaced = [b for b in segment_bases if base <= b <= end]
        log.warning("completing a cleaned-segment swap a crash interrupted", directory=directory,
                    base_offset=base, last_offset=last, replaces=replaced)
        for b in replaced:
            if b != base:
                unlink_all([_prefix(directory, b) + s for s in SEGMENT_SUFFIXES])
        if base in segment_bases:
            unlink_all([_prefix(directory, base) + s for s in INDEX_SUFFIXES])
        finish(directory, base)
    for name in os.listdir(directory):
        if name.endswith(SWAP):
            os.unlink(os.path.join(directory, name))
