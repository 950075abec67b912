"""The Metadata handler's encoded topics, kept between requests (see
``broker.handlers.metadata``)."""

from __future__ import annotations

from dataclasses import dataclass

from replication.metadata_cache import MetadataCache


@dataclass(frozen=True, slots=True)
class EncodedTopic:
    """One topic's part of a Metadata response, encoded; ``name`` and
    ``error_code`` as the ACL guard reads them from a topic message."""

    name: str
    error_code: int
    data: bytes


class TopicEncodings:
    """Encoded topics by (name, version, listener), each with the stamp it was
    built at. Entries of topics that no longer exist are dropped when the
    cache holds more than twice as many entries as it held after the last
    sweep."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int, str | None],
                            tuple[tuple[int, int], EncodedTopic]] = {}
        self._sweep_at = 1024

    def get(self, key: tuple[str, int, str | None], stamp: tuple[int, int]
            ) -> EncodedTopic | None:
        entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] == stamp else None

    def put(self, key: tuple[str, int, str | None], stamp: tuple[int, int],
            encoded: EncodedTopic, metadata: MetadataCache) -> None:
        self._entries[key] = (stamp, encoded)
        if len(self._entries) >= self._sweep_at:
            self._entries = {k: e for k, e in self._entries.items()
                             if metadata.topic_stamp(k[0]) == e[0]}
            self._sweep_at = max(1024, 2 * len(self._entries))
