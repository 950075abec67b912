"""A remote tier in a Google Cloud Storage bucket (or a GCS-compatible
endpoint such as an emulator), through Google's ``google-cloud-storage``.

Object names, copies, ranged reads, checks and retries are
``storage.remote.object_store``'s, shared with the Azure manager; this module
owns the GCS calls and their error mapping:

- Writes: one request per object; a file larger than
  ``gcs.resumable.upload.chunk.size`` goes up as a resumable upload in chunks
  of that size (the SDK's BlobWriter).
- Reads: ranged GETs of the JSON API's media download (``alt=media``,
  ``Range: bytes=a-b``) through google-auth's authorized session, streamed,
  with the object's total size from ``Content-Range``; whole-object GETs
  (indexes) are checked against the object's CRC32C (``X-Goog-Hash``).
- Credentials (the Aiven plugin's keys): ``gcs.credentials.default`` (the
  environment's Application Default Credentials), ``gcs.credentials.json``
  (a service account key as JSON) or ``gcs.credentials.path`` (its file); at
  most one. None set: the default credentials, or anonymous access when
  ``gcs.endpoint.url`` names another endpoint (emulators). Credentials are
  never logged.

Error mapping (``classify``): 404 -> RemoteResourceNotFoundError (except a
missing bucket, which is a fatal RemoteStorageError); 5xx, 408, 429 and
transport failures -> retriable RemoteStorageError; other API errors ->
fatal RemoteStorageError.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import google.api_core.exceptions as gexc
import google.auth
import google.auth.exceptions
import google.auth.transport.requests
import google_crc32c
import requests
import structlog
import urllib3.exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.cloud.storage.exceptions import InvalidResponse
from google.oauth2 import service_account

from config.defs import ConfigDef, ConfigError, ConfigType
from storage.remote.object_store import (
    ObjectStoreRSM,
    RangeReply,
    common_defs,
    http_retriable,
)
from storage.remote.rsm import parse_rsm_config
from storage.remote.types import RemoteResourceNotFoundError, RemoteStorageError, StrPath

log = structlog.get_logger(__name__)

MIB = 1024 * 1024
# GCS takes resumable-upload chunks in multiples of 256 KiB.
GCS_CHUNK_QUANTUM = 256 * 1024
DEFAULT_ENDPOINT = "https://storage.googleapis.com"

CONFIG_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef("rsm.config.gcs.bucket.name", ConfigType.STRING, None,
              "GCS bucket holding the remote tier."),
    ConfigDef("rsm.config.gcs.endpoint.url", ConfigType.STRING, None,
              "Endpoint of a GCS-compatible service (an emulator); unset means Google's."),
    ConfigDef("rsm.config.gcs.credentials.default", ConfigType.BOOLEAN, None,
              "Use Application Default Credentials; excludes credentials.json and .path."),
    ConfigDef("rsm.config.gcs.credentials.json", ConfigType.PASSWORD, None,
              "A service account key as JSON text; excludes credentials.default and .path."),
    ConfigDef("rsm.config.gcs.credentials.path", ConfigType.STRING, None,
              "A service account key file; excludes credentials.default and .json."),
    # 25 MiB as the Aiven plugin: a 1 GiB segment is ~40 requests, each
    # buffered whole in memory while it is sent.
    ConfigDef("rsm.config.gcs.resumable.upload.chunk.size", ConfigType.INT, 25 * MIB,
              "Chunk size of resumable uploads (multiple of 256 KiB); a file above it "
              "goes up in chunks.", at_least=GCS_CHUNK_QUANTUM),
    *common_defs("gcs."),
)


class GcsRemoteStorageManager(ObjectStoreRSM):
    """RemoteStorageManager over GCS. Thread-safe: one client, shared."""

    def __init__(self, config: Mapping[str, str]) -> None:
        """Args: config: the settings in CONFIG_DEFS (``gcs.bucket.name`` required).

        Raises:
            ConfigError: a missing, invalid or conflicting setting.
        """
        values = parse_rsm_config(CONFIG_DEFS, config, required=("gcs.bucket.name",))
        self.bucket_name: str = values["gcs.bucket.name"]
        self.prefix = values["gcs.key.prefix"] or ""
        self.attempts = values["gcs.retry.max.attempts"]
        self.store = f"gs://{self.bucket_name}"
        self.chunk_size: int = values["gcs.resumable.upload.chunk.size"]
        if self.chunk_size % GCS_CHUNK_QUANTUM:
            raise ConfigError("rsm.config.gcs.resumable.upload.chunk.size", self.chunk_size,
                              "must be a multiple of 262144 (256 KiB)")
        self.endpoint: str = (values["gcs.endpoint.url"] or DEFAULT_ENDPOINT).rstrip("/")
        if urllib.parse.urlsplit(self.endpoint).scheme not in ("http", "https"):
            raise ConfigError("rsm.config.gcs.endpoint.url", self.endpoint,
                              "expected an http:// or https:// URL")
        self._timeout = (values["gcs.connect.timeout.ms"] / 1000,
                         values["gcs.read.timeout.ms"] / 1000)
        credentials, project = _credentials(values, custom_endpoint=values["gcs.endpoint.url"])
        self._client = storage.Client(
            project=project or "tierd", credentials=credentials,
            client_options={"api_endpoint": self.endpoint})
        self._bucket = self._client.bucket(self.bucket_name)
        self._session = google.auth.transport.requests.AuthorizedSession(credentials)
        log.info("gcs remote storage configured", bucket=self.bucket_name, prefix=self.prefix,
                 endpoint=self.endpoint, chunk_size=self.chunk_size)

    # -- primitives -------------------------------------------------------------

    def _put(self, name: str, data: bytes) -> None:
        self._bucket.blob(name).upload_from_string(
            data, content_type="application/octet-stream", retry=None, timeout=self._timeout)

    def _upload(self, name: str, path: StrPath) -> None:
        try:
            source = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise RemoteStorageError(f"cannot read local file {path}: {exc}") from exc
        with source:
            size = os.fstat(source.fileno()).st_size
            if size <= self.chunk_size:
                self._put(name, _read_local(source, path, size))
                return
            # A resumable upload, one request per chunk. Closing the writer
            # commits the object, so it is closed only once every byte went:
            # a failed upload's session is left to expire (GCS drops them
            # after a week; nothing is visible meanwhile).
            writer = self._bucket.blob(name).open(
                "wb", chunk_size=self.chunk_size, ignore_flush=True, retry=None,
                content_type="application/octet-stream", timeout=self._timeout)
            left = size
            while left:
                piece = _read_local(source, path, min(self.chunk_size, left))
                writer.write(piece)
                left -= len(piece)
            writer.close()

    def _media_url(self, name: str) -> str:
        return (f"{self.endpoint}/download/storage/v1/b/{urllib.parse.quote(self.bucket_name)}"
                f"/o/{urllib.parse.quote(name, safe='')}?alt=media")

    def _open_range(self, name: str, start: int, end: int) -> RangeReply:
        reply = self._session.get(self._media_url(name), headers={"Range": f"bytes={start}-{end}"},
                                  stream=True, timeout=self._timeout)
        if reply.status_code not in (200, 206):
            reply.close()
            raise _HttpStatus(reply.status_code, reply.reason or "")
        total: int | None
        if reply.status_code == 200:
            # The server ignored Range: the whole object came back.
            total = int(reply.headers.get("Content-Length", -1))
            reply.close()
            raise RemoteStorageError(f"{self.store}/{name}: the server ignored the range "
                                     f"(object of {total} bytes)", retriable=True)
        total_text = reply.headers.get("Content-Range", "").rpartition("/")[2].strip()
        total = int(total_text) if total_text.isdigit() else None
        return RangeReply(total, _ResponseBody(reply))

    def _get(self, name: str) -> bytes:
        reply = self._session.get(self._media_url(name), timeout=self._timeout)
        if reply.status_code != 200:
            raise _HttpStatus(reply.status_code, reply.reason or "")
        data = reply.content
        expected = reply.headers.get("Content-Length")
        if expected is not None and expected.isdigit() and int(expected) != len(data):
            raise RemoteStorageError(f"short response for {self.store}/{name}: got "
                                     f"{len(data)} of {expected} bytes", retriable=True)
        # A whole-object GET carries the object's CRC32C: a body cut short
        # with a matching length, or altered, shows here.
        if not _crc32c_matches(data, reply.headers.get("X-Goog-Hash", "")):
            raise RemoteStorageError(f"{self.store}/{name}: the response does not match the "
                                     "object's crc32c", retriable=True)
        return data

    def _delete(self, name: str) -> None:
        self._bucket.delete_blob(name, retry=None, timeout=self._timeout)

    def _list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        for blob in self._client.list_blobs(self.bucket_name, prefix=prefix, retry=None,
                                            timeout=self._timeout):
            modified = blob.updated.timestamp() if blob.updated is not None else 0.0
            yield blob.name, int(blob.size or 0), modified

    def classify(self, operation: str, name: str, exc: Exception) -> RemoteStorageError | None:
        """The one place where GCS failures become RemoteStorageErrors."""
        where = f"{operation} {self.store}/{name}"
        status = getattr(exc, "code", None) if isinstance(exc, gexc.GoogleAPICallError) else None
        if isinstance(exc, _HttpStatus):
            status = exc.status
        if isinstance(exc, InvalidResponse):
            # A resumable upload's chunk answered with an unexpected status.
            status = getattr(exc.response, "status_code", None)
        if isinstance(status, int):
            if status == 404 and operation in ("get", "delete"):
                return RemoteResourceNotFoundError(f"{where}: not found")
            if status == 404:
                # Only the bucket can be missing for a write or a listing.
                return RemoteStorageError(f"{where}: bucket not found: {exc}")
            return RemoteStorageError(f"{where} failed: {exc}", retriable=http_retriable(status))
        if isinstance(exc, requests.RequestException | google.auth.exceptions.TransportError
                      | urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
            return RemoteStorageError(f"{where} failed: {type(exc).__name__}: {exc}",
                                      retriable=True)
        if isinstance(exc, gexc.GoogleAPIError | google.auth.exceptions.GoogleAuthError
                      | ValueError):
            return RemoteStorageError(f"{where} failed: {type(exc).__name__}: {exc}")
        return None

    def close(self) -> None:
        """Close the HTTP sessions. Idempotent."""
        self._session.close()
        self._client.close()


class _HttpStatus(Exception):
    """A media GET answered with another status than the one asked for."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status} {reason}".rstrip())
        self.status = status


class _ResponseBody:
    """A streamed requests response as ``read(n)`` / ``close()``."""

    def __init__(self, reply: requests.Response) -> None:
        self._reply = reply
        self._raw: Any = reply.raw

    def read(self, size: int) -> bytes:
        data: bytes = self._raw.read(size)
        return data

    def close(self) -> None:
        self._reply.close()


def _read_local(source: Any, path: StrPath, length: int) -> bytes:
    """``length`` bytes of an open local file; a short read means it changed.

    Raises:
        RemoteStorageError: not retriable: the local segment is unreadable.
    """
    try:
        data: bytes = source.read(length)
    except OSError as exc:
        raise RemoteStorageError(f"cannot read local file {path}: {exc}") from exc
    if len(data) != length:
        raise RemoteStorageError(f"local file {path} shrank while being copied")
    return data


def _crc32c_matches(data: bytes, goog_hash: str) -> bool:
    """Whether ``data`` has the crc32c in an ``X-Goog-Hash`` header (True if none)."""
    for part in goog_hash.split(","):
        algorithm, _, value = part.strip().partition("=")
        if algorithm == "crc32c" and value:
            return base64.b64encode(google_crc32c.Checksum(data).digest()).decode() == value
    return True


def _credentials(values: Mapping[str, Any], custom_endpoint: str | None) -> tuple[Any, str | None]:
    """(credentials, project) from the gcs.credentials.* settings.

    Raises:
        ConfigError: more than one source, or one that cannot be loaded.
    """
    use_default, text, path = (values["gcs.credentials.default"], values["gcs.credentials.json"],
                               values["gcs.credentials.path"])
    chosen = [k for k, v in (("default", use_default), ("json", text), ("path", path))
              if v not in (None, False)]
    if len(chosen) > 1:
        raise ConfigError("rsm.config.gcs.credentials." + chosen[1], "(set)",
                          "set at most one of gcs.credentials.default, .json and .path")
    try:
        if text is not None:
            info = json.loads(text)
            return (service_account.Credentials.from_service_account_info(
                info, scopes=["https://www.googleapis.com/auth/devstorage.read_write"]),
                info.get("project_id"))
        if path is not None:
            sa = service_account.Credentials.from_service_account_file(
                path, scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
            return sa, sa.project_id
        if use_default or custom_endpoint is None:
            creds, project = google.auth.default(
                scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
            return creds, project
    except (ValueError, OSError, google.auth.exceptions.GoogleAuthError) as exc:
        # The message names the source, never the secret.
        key = "json" if text is not None else "path" if path is not None else "default"
        raise ConfigError("rsm.config.gcs.credentials." + key, "(hidden)",
                          f"cannot load credentials: {type(exc).__name__}") from None
    return AnonymousCredentials(), None
