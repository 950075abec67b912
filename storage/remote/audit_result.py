"""What one audit of a partition's remote objects found (``storage.remote.audit``
runs it; the partition keeps the last one, exported as gauges)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class AuditResult:
    """One audit of one partition.

    Attributes:
        orphan_objects / orphan_bytes: objects of no live segment (or of a
            segment being deleted), older than the grace period.
        missing_segments: finished segments without a ``.log`` object.
        size_mismatches: finished segments whose ``.log`` size differs from
            the metadata's.
        examples: a few object keys or segment ids, for the log line.
    """

    orphan_objects: int = 0
    orphan_bytes: int = 0
    missing_segments: int = 0
    size_mismatches: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.orphan_objects or self.missing_segments or self.size_mismatches)
