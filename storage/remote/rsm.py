"""How the broker loads a RemoteStorageManager (the interface is ``storage.remote.api``),
and helpers its implementations share.

A remote storage manager (RSM) moves the bytes of closed segments to and from
a remote tier and knows nothing else: which segments exist, and in which
state, is the remote log metadata manager's business. That split is the
KIP's: the metadata is strongly consistent, so the RSM may sit on an
eventually consistent store and never needs to list it.

Implementations plug in by config (``remote.log.storage.manager.class.name``):
the built-ins ``filesystem``, ``s3``, ``gcs`` and ``azure``, or a dotted path ``pkg.mod.Class``
to any class whose constructor takes the ``rsm.config.*`` settings (prefix
stripped, values as strings) and which has the methods below.
"""

from __future__ import annotations

import binascii
import importlib
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from config.defs import ConfigDef, ConfigError
from storage.log.checkpoint import topic_id_from_str, topic_id_to_str
from storage.remote.api import RemoteStorageManager, SegmentObjectName
from storage.remote.types import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageError,
    StrPath,
    TopicIdPartition,
)

log = structlog.get_logger(__name__)

CLASS_NAME_KEY = "remote.log.storage.manager.class.name"

# Kafka's remote.log.storage.manager.impl.prefix default: keys under it are
# handed to the RSM with the prefix stripped.
RSM_CONFIG_PREFIX = "rsm.config."

BUILTIN_RSMS: dict[str, str] = {
    "filesystem": "storage.remote.filesystem.FileSystemRemoteStorageManager",
    "s3": "storage.remote.s3.S3RemoteStorageManager",
    "gcs": "storage.remote.gcs.GcsRemoteStorageManager",
    "azure": "storage.remote.azure.AzureRemoteStorageManager",
}


# ``<20-digit start offset>-<22-character segment uuid>.``: storage.remote.naming.
# UUID_CHARS is also the length of a topic id in a partition's directory or prefix.
_OFFSET_DIGITS = 20
UUID_CHARS = 22
_STEM_CHARS = _OFFSET_DIGITS + 1 + UUID_CHARS


def parse_uuid(text: str) -> uuid.UUID | None:
    """Kafka's Uuid.toString back to a ``uuid.UUID``; None if it is not one
    (exactly: a text that decodes but is not what Uuid.toString writes is not)."""
    try:
        parsed = topic_id_from_str(text)
    except (binascii.Error, ValueError):
        return None
    return parsed if topic_id_to_str(parsed) == text else None


def parse_object_name(tip: TopicIdPartition, file_name: str) -> SegmentObjectName | None:
    """Parse ``<offset>-<uuid>.<suffix>`` of a segment of ``tip``; None if it is not one."""
    offset = file_name[:_OFFSET_DIGITS]
    separators = file_name[_OFFSET_DIGITS:_OFFSET_DIGITS + 1] + file_name[_STEM_CHARS:_STEM_CHARS + 1]
    suffix = file_name[_STEM_CHARS + 1:]
    segment_uuid = parse_uuid(file_name[_OFFSET_DIGITS + 1:_STEM_CHARS])
    if not offset.isdigit() or separators != "-." or not suffix or segment_uuid is None:
        return None
    return SegmentObjectName(RemoteLogSegmentId(tip, segment_uuid), int(offset), suffix)


def load_rsm(class_name: str, config: Mapping[str, str]) -> RemoteStorageManager:
    """Instantiate the configured remote storage manager.

    Args:
        class_name: ``filesystem``, ``s3``, or ``pkg.mod.Class``.
        config: the ``rsm.config.*`` settings with the prefix stripped.

    Raises:
        ConfigError: unknown or unloadable class, a class that does not
            implement RemoteStorageManager, or invalid settings.
    """
    path = BUILTIN_RSMS.get(class_name, class_name)
    module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(CLASS_NAME_KEY, class_name,
                          f"expected one of {sorted(BUILTIN_RSMS)} or a dotted path pkg.mod.Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(CLASS_NAME_KEY, class_name,
                          f"cannot import {module_name}: {exc}") from exc
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ConfigError(CLASS_NAME_KEY, class_name, f"{module_name} has no class {attr}")
    rsm = cls(dict(config))
    if not isinstance(rsm, RemoteStorageManager):
        raise ConfigError(CLASS_NAME_KEY, class_name,
                          "the class does not implement the RemoteStorageManager methods")
    return rsm


def rsm_config(broker_values: Mapping[str, Any]) -> dict[str, str]:
    """The ``rsm.config.*`` entries of a broker config, prefix stripped."""
    return {key[len(RSM_CONFIG_PREFIX):]: str(value) for key, value in broker_values.items()
            if key.startswith(RSM_CONFIG_PREFIX)}


def parse_rsm_config(defs: Sequence[ConfigDef], config: Mapping[str, str],
                     required: Sequence[str] = ()) -> dict[str, Any]:
    """Typed settings for an RSM from its stripped ``rsm.config.*`` strings.

    Args:
        defs: one ConfigDef per setting, named with the full
            ``rsm.config.`` key so errors name what the user wrote.
        config: the stripped settings.
        required: stripped keys that must be present.

    Returns:
        stripped key -> typed value (the default where unset).

    Raises:
        ConfigError: a missing required key or an invalid value.
    """
    by_key = {d.name.removeprefix(RSM_CONFIG_PREFIX): d for d in defs}
    unknown = sorted(set(config) - set(by_key))
    if unknown:
        # Keys only, never values: they may hold secrets.
        log.warning("ignoring unknown remote storage settings",
                    keys=[RSM_CONFIG_PREFIX + k for k in unknown])
    values: dict[str, Any] = {}
    for key, d in by_key.items():
        raw = config.get(key)
        if raw is None or not str(raw).strip():
            if key in required:
                raise ConfigError(d.name, raw, "required")
            values[key] = d.default
        else:
            values[key] = d.parse(raw)
    return values


def resolve_range(metadata: RemoteLogSegmentMetadata, start_position: int,
                  end_position: int | None) -> tuple[int, int]:
    """Validate a fetch range and clip it to the segment.

    Returns:
        (start, end), both inclusive, within the segment.

    Raises:
        ValueError: negative start, or end before start (a caller bug).
        RemoteStorageError: start at or past the end of the segment.
    """
    if start_position < 0 or (end_position is not None and end_position < start_position):
        raise ValueError(f"bad fetch range {start_position}..{end_position}")
    last = metadata.segment_size_in_bytes - 1
    if start_position > last:
        raise RemoteStorageError(
            f"start position {start_position} is past the end of remote segment "
            f"{metadata.remote_log_segment_id} ({metadata.segment_size_in_bytes} bytes)")
    end = last if end_position is None else min(end_position, last)
    return start_position, end


def check_log_size(metadata: RemoteLogSegmentMetadata, log_segment: StrPath) -> None:
    """Refuse to copy a .log whose size disagrees with the metadata.

    Reads check the stored object against ``segment_size_in_bytes``, so a
    copy with a wrong size would only fail later, on every read.

    Raises:
        RemoteStorageError: unreadable file or size mismatch (not retriable).
    """
    try:
        size = os.stat(log_segment).st_size
    except OSError as exc:
        raise RemoteStorageError(f"cannot read local segment {log_segment}: {exc}") from exc
    if size != metadata.segment_size_in_bytes:
        raise RemoteStorageError(
            f"local segment {log_segment} is {size} bytes but the metadata of "
            f"{metadata.remote_log_segment_id} says {metadata.segment_size_in_bytes}")
