"""Compression and encryption of remote segments, around any storage manager.

The broker loads its storage manager with ``load_storage``, which wraps it
in a ``CodecStorage``. With the
codec off (the default) a copy goes to the store untouched, as before. With
``compression.enabled`` or ``encryption.enabled`` a copy transforms every
object of the segment chunk by chunk (``segment_codec``): the .log into a
temp file beside the local segment, the indexes in memory; the storage
manager then stores those bytes as usual, plus the codec manifest object
(``rsm_manifest``), under a copy of the metadata whose
``segment_size_in_bytes`` is the stored .log's length. The segment's custom
metadata (``naming.segment_manifest``, version 3) says it is transformed and
how long the stored .log is.

Reads look at the custom metadata: a plain segment (no manifest, or a
version below 3: everything copied before the codec, or with it off) is read
straight from the store, so turning the codec on or off never strands old
segments. A transformed one loads its codec manifest (cached, with the
unwrapped data key), maps the plain range to the stored chunks covering it,
fetches those with one ranged read and decodes them. The chunk cache and
prefetch above keep holding plain bytes.

Indexes: encrypted and compressed as the .log is (Aiven does the same): the
offset, time and transaction indexes, the producer snapshot and the
leader-epoch checkpoint, each as its own object; the ``indexes`` object
holds the transformed offset and time indexes back to back.

The compression heuristic (``compression.heuristic.enabled``) skips the
.log of a segment whose first record batch is already compressed: zstd over
compressed batches costs CPU and saves nothing.

Error handling: a chunk that fails its GCM tag or zstd frame raises
``CodecError``, a data key that cannot be unwrapped ``KeyRingError``: both
``RemoteStorageError``s, not retriable, logged here once per read; the fetch
answers KAFKA_STORAGE_ERROR (``read_pool``) and counts them in
RemoteFetchDecodeErrorsPerSec.

Concurrency: thread-safe; the manifest cache is under a lock.
"""

from __future__ import annotations

import collections
import io
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog

from config.defs import ConfigDef, ConfigError
from config.defs import ConfigType as T
from storage.remote.key_ring import DATA_KEY_BYTES, PAIR_PREFIX, KeyRing, KeyRingError
from storage.remote.naming import (
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    manifest_bytes,
    segment_manifest,
    stored_log_size,
)
from storage.remote.rsm import RSM_CONFIG_PREFIX, load_rsm, parse_rsm_config, resolve_range
from storage.remote.segment_codec import (
    CodecError,
    CodecManifest,
    ObjectLayout,
    Transform,
    batches_compressed,
    decode_range,
    decode_whole,
    encode_bytes,
    encode_object,
)
from storage.remote.types import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    StrPath,
)

log = structlog.get_logger(__name__)

MIB = 1024 * 1024
CONFIG_DEFS: list[ConfigDef] = [
    ConfigDef(RSM_CONFIG_PREFIX + "compression.enabled", T.BOOLEAN, False,
              "Compress every object of a segment copied from now on with zstd, chunk by "
              "chunk (ranged reads stay ranged)."),
    ConfigDef(RSM_CONFIG_PREFIX + "compression.heuristic.enabled", T.BOOLEAN, False,
              "With compression.enabled: leave a segment's .log uncompressed when its first "
              "record batch is already compressed by the producer."),
    # 4 MiB: the read chunk (fetch.chunk.size) default, so one cached chunk
    # is one stored chunk; Aiven's plugin recommends starting there too.
    ConfigDef(RSM_CONFIG_PREFIX + "chunk.size", T.INT, 4 * MIB,
              "Plain bytes per independently compressed/encrypted chunk of a remote object.",
              at_least=1, at_most=1024 * MIB - 1),
    ConfigDef(RSM_CONFIG_PREFIX + "encryption.enabled", T.BOOLEAN, False,
              "Encrypt every object of a segment copied from now on with AES-256-GCM under a "
              "random per-segment data key wrapped by the active RSA key pair."),
    ConfigDef(RSM_CONFIG_PREFIX + "encryption.key.pair.id", T.STRING, None,
              "Id of the key pair (in encryption.key.pairs) that wraps new data keys."),
    ConfigDef(RSM_CONFIG_PREFIX + "encryption.key.pairs", T.LIST, None,
              "Ids of every key pair: the active one and those that old segments need."),
]
# Documented beside CONFIG_DEFS; read by key_ring (``<id>`` is a pair's id).
KEY_FILE_DEFS: list[ConfigDef] = [
    ConfigDef(RSM_CONFIG_PREFIX + PAIR_PREFIX + "<id>.public.key.file", T.STRING, None,
              "PEM file of the RSA public key of pair <id> (wraps data keys)."),
    ConfigDef(RSM_CONFIG_PREFIX + PAIR_PREFIX + "<id>.private.key.file", T.STRING, None,
              "PEM file of the RSA private key of pair <id> (unwraps data keys)."),
]
KEYS = frozenset(d.name.removeprefix(RSM_CONFIG_PREFIX) for d in CONFIG_DEFS)

# Codec manifests (with their unwrapped data keys) kept for reads: a few
# hundred bytes to a few KiB each; as many as the chunk cache's segments.
_MANIFEST_CACHE_ENTRIES = 4096
# Settings whose presence means a key ring is configured (to read old segments).
ACTIVE_OR_PAIRS = frozenset({"encryption.key.pair.id", "encryption.key.pairs"})


def load_storage(class_name: str, config: Mapping[str, str]) -> CodecStorage:
    """``rsm.load_rsm``'s storage manager wrapped in the codec, which takes
    its own settings out of ``config`` and hands the rest on.

    Raises:
        ConfigError: as ``load_rsm``, or invalid codec settings.
    """
    inner_config, codec_config = split_settings(config)
    return CodecStorage(load_rsm(class_name, inner_config), codec_config)


def split_settings(settings: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the storage manager's settings, the codec's) from stripped rsm.config.* ones."""
    def ours(key: str) -> bool:
        return key in KEYS or key.startswith(PAIR_PREFIX)
    return ({k: v for k, v in settings.items() if not ours(k)},
            {k: v for k, v in settings.items() if ours(k)})


@dataclass(frozen=True, slots=True)
class _Decoder:
    """A transformed segment's codec manifest with its data key unwrapped."""

    manifest: CodecManifest
    data_key: bytes | None

    def transform(self, layout: ObjectLayout) -> Transform:
        return Transform(layout.compressed, self.data_key)


class CodecStorage:
    """A RemoteStorageManager that transforms segments around ``inner``.

    Anything else ``inner`` offers (listing, ``COPIES_RUN_PYTHON``, its
    paths) is reached through this object unchanged.
    """

    def __init__(self, inner: Any, settings: Mapping[str, str]) -> None:
        """Args:
            inner: the storage manager that stores the bytes.
            settings: the codec's stripped settings (``split_settings``).

        Raises:
            ConfigError: invalid settings, unreadable key files, or a codec
                turned on over a manager that cannot store a codec manifest.
        """
        values = parse_rsm_config(CONFIG_DEFS, {k: v for k, v in settings.items()
                                                if k in KEYS})
        self.inner = inner
        self.compress: bool = values["compression.enabled"]
        self.heuristic: bool = values["compression.heuristic.enabled"]
        self.encrypt: bool = values["encryption.enabled"]
        self.chunk_size: int = values["chunk.size"]
        if self.heuristic and not self.compress:
            raise ConfigError(RSM_CONFIG_PREFIX + "compression.heuristic.enabled", "true",
                              "needs rsm.config.compression.enabled=true")
        # The ring is loaded whenever it is configured: a broker that stopped
        # encrypting must still read what it encrypted before.
        self.keys = (KeyRing.from_settings(settings)
                     if self.encrypt or ACTIVE_OR_PAIRS & settings.keys() else None)
        if (self.compress or self.encrypt) and not hasattr(inner, "fetch_codec_manifest"):
            raise ConfigError(RSM_CONFIG_PREFIX + "compression.enabled", "true",
                              f"{type(inner).__name__} cannot store codec manifests")
        self._lock = threading.Lock()
        self._decoders: collections.OrderedDict[Any, _Decoder] = collections.OrderedDict()

    def __getattr__(self, name: str) -> Any:
        # Only called for what this class lacks: the inner manager's extras.
        return getattr(self.__dict__["inner"] if "inner" in self.__dict__ else None, name)

    # -- copy ---------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              data: LogSegmentData) -> bytes | None:
        """See RemoteStorageManager.copy_log_segment_data."""
        if not (self.compress or self.encrypt):
            result: bytes | None = self.inner.copy_log_segment_data(metadata, data)
            return result
        data_key = os.urandom(DATA_KEY_BYTES) if self.encrypt else None
        segment = metadata.remote_log_segment_id.id
        log_transform = Transform(self.compress and not (
            self.heuristic and batches_compressed(_head(data.log_segment))), data_key)
        index_transform = Transform(self.compress, data_key)
        layouts: dict[str, ObjectLayout] = {}
        encoded: dict[str, bytes | None] = {}
        sources = {IndexType.OFFSET: data.offset_index, IndexType.TIMESTAMP: data.time_index,
                   IndexType.TRANSACTION: data.transaction_index,
                   IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot_index,
                   IndexType.LEADER_EPOCH: data.leader_epoch_index}
        for index_type, source in sources.items():
            suffix = INDEX_SUFFIXES[index_type]
            if source is None:
                encoded[suffix] = None
                continue
            encoded[suffix], layouts[suffix] = encode_bytes(
                _read_all(source), index_transform, segment, suffix, self.chunk_size)
        key_id, wrapped = self.keys.wrap(data_key) if (self.keys and data_key) else (None, None)
        fd, tmp = _temp_beside(data.log_segment)
        try:
            with os.fdopen(fd, "wb") as out:
                stored = []
                for chunk, _ in encode_object(_pieces(data.log_segment, self.chunk_size),
                                              log_transform, segment, LOG_SUFFIX,
                                              self.chunk_size):
                    out.write(chunk)
                    stored.append(len(chunk))
            layouts[LOG_SUFFIX] = ObjectLayout(metadata.segment_size_in_bytes, self.chunk_size,
                                               log_transform.compress, tuple(stored))
            manifest = CodecManifest(layouts, key_id, wrapped)
            stored_md = replace(metadata, segment_size_in_bytes=sum(stored))
            self.inner.copy_log_segment_data(stored_md, LogSegmentData(
                tmp, encoded["index"] or b"", encoded["timeindex"] or b"",
                encoded["txnindex"], encoded["snapshot"],
                encoded["leader_epoch_checkpoint"] or b"", manifest.to_json()))
        except OSError as exc:
            raise RemoteStorageError(f"cannot transform {data.log_segment}: {exc}",
                                     retriable=True) from exc
        finally:
            _unlink_quietly(tmp)
        return segment_manifest(data, stored_log_size=sum(stored))

    # -- fetch --------------------------------------------------------------

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        """See RemoteStorageManager.fetch_log_segment: plain bytes."""
        stored_size = stored_log_size(metadata)
        if stored_size is None:
            plain: bytes = self.inner.fetch_log_segment(metadata, start_position, end_position)
            return plain
        start, end = resolve_range(metadata, start_position, end_position)
        decoder = self._decoder(metadata)
        layout = _layout(decoder.manifest, LOG_SUFFIX)
        first, last = layout.chunk_span(start, end)
        starts = layout.stored_starts()
        stored_md = replace(metadata, segment_size_in_bytes=stored_size)
        stored = self.inner.fetch_log_segment(stored_md, starts[first], starts[last + 1] - 1)
        plain = self._decoded(metadata, lambda: decode_range(
            stored, starts[first], layout, first, last, decoder.transform(layout),
            metadata.remote_log_segment_id.id, LOG_SUFFIX))
        skip = start - first * layout.chunk_size
        return plain[skip:skip + end - start + 1]

    def open_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                         end_position: int | None = None) -> Any:
        """The inner manager's stream of a plain segment; the decoded bytes
        of a transformed one (a chunk decodes whole, so there is no earlier
        byte to hand out)."""
        opener = getattr(self.inner, "open_log_segment", None)
        if stored_log_size(metadata) is None and opener is not None:
            return opener(metadata, start_position, end_position)
        return io.BytesIO(self.fetch_log_segment(metadata, start_position, end_position))

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """See RemoteStorageManager.fetch_index: plain bytes."""
        stored: bytes = self.inner.fetch_index(metadata, index_type)
        if stored_log_size(metadata) is None:
            return stored
        suffix = INDEX_SUFFIXES[index_type]
        decoder = self._decoder(metadata)
        layout = _layout(decoder.manifest, suffix)
        return self._decoded(metadata, lambda: decode_whole(
            stored, layout, decoder.transform(layout), metadata.remote_log_segment_id.id,
            suffix))

    def fetch_combined_indexes(self, metadata: RemoteLogSegmentMetadata) -> bytes:
        """The offset index then the time index, plain (layout 2's ``indexes``).

        Raises:
            RemoteResourceNotFoundError: the inner manager keeps none.
        """
        fetch = getattr(self.inner, "fetch_combined_indexes", None)
        if fetch is None:
            raise RemoteResourceNotFoundError("the storage manager keeps no indexes objects")
        stored: bytes = fetch(metadata)
        if stored_log_size(metadata) is None:
            return stored
        decoder = self._decoder(metadata)
        offsets, times = (_layout(decoder.manifest, s) for s in ("index", "timeindex"))
        split = offsets.stored_size
        segment = metadata.remote_log_segment_id.id
        return self._decoded(metadata, lambda: decode_whole(
            stored[:split], offsets, decoder.transform(offsets), segment, "index")
            + decode_whole(stored[split:], times, decoder.transform(times), segment,
                           "timeindex"))

    def _decoder(self, metadata: RemoteLogSegmentMetadata) -> _Decoder:
        """The segment's codec manifest and data key, cached.

        Raises:
            CodecError, KeyRingError: unreadable manifest, key not unwrappable
                (logged).
        """
        segment_id = metadata.remote_log_segment_id
        with self._lock:
            cached = self._decoders.get(segment_id)
            if cached is not None:
                self._decoders.move_to_end(segment_id)
                return cached
        raw = self.inner.fetch_codec_manifest(metadata)
        manifest = self._decoded(metadata, lambda: CodecManifest.from_json(raw))
        data_key = None
        if manifest.key_id is not None and manifest.wrapped_key is not None:
            if self.keys is None:
                error = KeyRingError(f"segment {segment_id} is encrypted with key pair "
                                     f"{manifest.key_id!r} but no key ring is configured")
                _log_failure(metadata, error)
                raise error
            key_id, wrapped = manifest.key_id, manifest.wrapped_key
            data_key = self._decoded(metadata, lambda: self.keys.unwrap(  # type: ignore[union-attr]
                key_id, wrapped))
        decoder = _Decoder(manifest, data_key)
        with self._lock:
            self._decoders[segment_id] = decoder
            while len(self._decoders) > _MANIFEST_CACHE_ENTRIES:
                self._decoders.popitem(last=False)
        return decoder

    @staticmethod
    def _decoded(metadata: RemoteLogSegmentMetadata, decode: Any) -> Any:
        """``decode()``, logging a codec or key failure before it propagates."""
        try:
            return decode()
        except CodecError as exc:  # KeyRingError included
            _log_failure(metadata, exc)
            raise

    def restored_metadata(self, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
        """For tools rebuilding lost metadata from the store (``tierd admin
        rebuild-metadata``): ``metadata`` named from a listing, its size the
        stored .log's, made readable here. A transformed segment (it has a
        codec manifest object) gets its plain size and the custom metadata
        its copy recorded; any other comes back as it is.

        Raises:
            RemoteStorageError: the store failed; CodecError: an unreadable manifest.
        """
        fetch = getattr(self.inner, "fetch_codec_manifest", None)
        if fetch is None:
            return metadata
        try:
            manifest = CodecManifest.from_json(fetch(metadata))
        except RemoteResourceNotFoundError:
            return metadata
        layouts = manifest.objects
        log_layout = _layout(manifest, LOG_SUFFIX)
        lengths = [_layout(manifest, suffix).size for suffix in ("index", "timeindex")]
        custom = manifest_bytes(INDEX_SUFFIXES[IndexType.TRANSACTION] in layouts,
                                INDEX_SUFFIXES[IndexType.PRODUCER_SNAPSHOT] in layouts,
                                lengths, log_layout.stored_size)
        return replace(metadata, segment_size_in_bytes=log_layout.size, custom_metadata=custom)

    # -- delete, close --------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """See RemoteStorageManager.delete_log_segment_data (the manifest too)."""
        with self._lock:
            self._decoders.pop(metadata.remote_log_segment_id, None)
        self.inner.delete_log_segment_data(metadata)

    def close(self) -> None:
        self.inner.close()


def _log_failure(metadata: RemoteLogSegmentMetadata, exc: Exception) -> None:
    log.error("cannot decode remote segment", segment=str(metadata.remote_log_segment_id),
              start_offset=metadata.start_offset, error=str(exc))


def _layout(manifest: CodecManifest, suffix: str) -> ObjectLayout:
    layout = manifest.objects.get(suffix)
    if layout is None:
        raise CodecError(f"the codec manifest has no {suffix} object")
    return layout


def _read_all(source: StrPath | bytes) -> bytes:
    if isinstance(source, bytes):
        return source
    try:
        with open(source, "rb") as f:
            return f.read()
    except OSError as exc:
        raise RemoteStorageError(f"cannot read local file {source}: {exc}") from exc


def _head(path: StrPath) -> bytes:
    """The first bytes of the .log: enough for the first batch's attributes."""
    try:
        with open(path, "rb") as f:
            return f.read(64)
    except OSError as exc:
        raise RemoteStorageError(f"cannot read local segment {path}: {exc}") from exc


def _pieces(path: StrPath, chunk_size: int) -> Iterator[bytes]:
    """The local .log in chunks of ``chunk_size`` bytes (the last shorter)."""
    try:
        with open(path, "rb", buffering=0) as f:
            while True:
                piece = f.read(chunk_size)
                if not piece:
                    return
                while len(piece) < chunk_size:
                    more = f.read(chunk_size - len(piece))
                    if not more:
                        break
                    piece += more
                yield piece
    except OSError as exc:
        raise RemoteStorageError(f"cannot read local segment {path}: {exc}") from exc


def _temp_beside(log_segment: StrPath) -> tuple[int, str]:
    """A temp file in the local segment's directory (its ``.tmp`` suffix means
    the log's recovery removes it after a crash).

    Raises:
        RemoteStorageError: retriable (the partition may be being deleted).
    """
    directory = os.path.dirname(os.path.abspath(log_segment))
    try:
        return tempfile.mkstemp(prefix=os.path.basename(log_segment) + ".",
                                suffix=".rsm.tmp", dir=directory)
    except OSError as exc:
        raise RemoteStorageError(f"cannot create a temp file in {directory}: {exc}",
                                 retriable=True) from exc


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
