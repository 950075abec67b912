"""A remote tier in an Azure Blob Storage container (or Azurite), through
Microsoft's ``azure-storage-blob``.

Object names, copies, ranged reads, checks and retries are
``storage.remote.object_store``'s, shared with the GCS manager; this module
owns the Azure calls and their error mapping:

- Writes: block blobs; a file larger than ``azure.upload.block.size`` goes up
  as staged blocks of that size committed in one list (the SDK's), smaller
  ones as one Put Blob.
- Reads: ranged Get Blob (``x-ms-range``), streamed; the blob's total size
  comes from the response's Content-Range.
- Credentials (the Aiven plugin's keys): ``azure.connection.string``, or
  ``azure.account.name`` with ``azure.account.key`` or ``azure.sas.token``
  (exactly one of key and token). The endpoint is ``azure.endpoint.url``, by
  default ``https://<account>.blob.core.windows.net``; a connection string
  carries its own and excludes the other keys. Secrets are never logged.

Error mapping (``classify``): BlobNotFound (and other 404s on reads and
deletes) -> RemoteResourceNotFoundError; ContainerNotFound -> fatal
RemoteStorageError; 5xx, 408, 429 and transport failures -> retriable; other
service errors (403, 400, ...) -> fatal; a response the SDK cannot parse ->
retriable.
"""

from __future__ import annotations

import base64
import binascii
import os
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

import azure.core.exceptions as aexc
import requests
import structlog
import urllib3.exceptions
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.storage.blob import BlobServiceClient, ContentSettings

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
# Azure's bounds on a staged block: the Aiven plugin's floor of 100 KiB
# (smaller blocks only multiply requests), at most 4000 MiB per block.
MIN_BLOCK_SIZE = 100 * 1024
MAX_BLOCK_SIZE = 4000 * MIB

CONFIG_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef("rsm.config.azure.container.name", ConfigType.STRING, None,
              "Blob container holding the remote tier."),
    ConfigDef("rsm.config.azure.account.name", ConfigType.STRING, None,
              "Storage account name (with account.key or sas.token)."),
    ConfigDef("rsm.config.azure.account.key", ConfigType.PASSWORD, None,
              "Shared key of the storage account."),
    ConfigDef("rsm.config.azure.sas.token", ConfigType.PASSWORD, None,
              "A shared access signature granting read, write, delete and list."),
    ConfigDef("rsm.config.azure.connection.string", ConfigType.PASSWORD, None,
              "A connection string; excludes account.name, account.key, sas.token and "
              "endpoint.url."),
    ConfigDef("rsm.config.azure.endpoint.url", ConfigType.STRING, None,
              "Blob service endpoint (e.g. Azurite's http://127.0.0.1:10000/devstoreaccount1); "
              "default https://<account>.blob.core.windows.net."),
    # 25 MiB as the Aiven plugin: a 1 GiB segment is ~40 blocks.
    ConfigDef("rsm.config.azure.upload.block.size", ConfigType.INT, 25 * MIB,
              "Block size of uploads; a file above it is staged in blocks.",
              at_least=MIN_BLOCK_SIZE, at_most=MAX_BLOCK_SIZE),
    *common_defs("azure."),
)

_NOT_FOUND_CODES = frozenset({"BlobNotFound", "ResourceNotFound"})
_FATAL_404_CODES = frozenset({"ContainerNotFound", "ContainerBeingDeleted"})


class AzureRemoteStorageManager(ObjectStoreRSM):
    """RemoteStorageManager over Azure Blob Storage. Thread-safe: one client, shared."""

    def __init__(self, config: Mapping[str, str]) -> None:
        """Args: config: the settings in CONFIG_DEFS (``azure.container.name`` required).

        Raises:
            ConfigError: a missing, invalid or conflicting setting.
        """
        values = parse_rsm_config(CONFIG_DEFS, config, required=("azure.container.name",))
        self.container_name: str = values["azure.container.name"]
        self.prefix = values["azure.key.prefix"] or ""
        self.attempts = values["azure.retry.max.attempts"]
        self.block_size: int = values["azure.upload.block.size"]
        options: dict[str, Any] = {
            # Retries are object_store's, the same for every store.
            "retry_total": 0,
            "connection_timeout": values["azure.connect.timeout.ms"] / 1000,
            "read_timeout": values["azure.read.timeout.ms"] / 1000,
            "max_block_size": self.block_size,
            "max_single_put_size": self.block_size,
        }
        service = _service_client(values, options)
        self.endpoint: str = service.url
        self.store = f"{self.endpoint.rstrip('/')}/{self.container_name}"
        self._service = service
        self._container = service.get_container_client(self.container_name)
        log.info("azure remote storage configured", container=self.container_name,
                 prefix=self.prefix, endpoint=self.endpoint, block_size=self.block_size)

    # -- primitives -------------------------------------------------------------

    def _put(self, name: str, data: bytes) -> None:
        self._container.upload_blob(name, data, overwrite=True, content_settings=_OCTETS)

    def _upload(self, name: str, path: StrPath) -> None:
        try:
            source = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise RemoteStorageError(f"cannot read local file {path}: {exc}") from exc
        with source:
            size = os.fstat(source.fileno()).st_size
            self._container.upload_blob(name, source, length=size, overwrite=True,
                                        content_settings=_OCTETS, max_concurrency=1)

    def _open_range(self, name: str, start: int, end: int) -> RangeReply:
        ranges: list[str] = []

        def keep_range(reply: Any) -> None:
            ranges.append(reply.http_response.headers.get("Content-Range", ""))

        # The downloader reports the range's size; the blob's is in the first
        # response's Content-Range ("bytes a-b/total").
        downloader = self._container.download_blob(name, offset=start, length=end - start + 1,
                                                   max_concurrency=1, raw_response_hook=keep_range)
        total = ranges[0].rpartition("/")[2].strip() if ranges else ""
        return RangeReply(int(total) if total.isdigit() else None, _DownloadBody(downloader))

    def _get(self, name: str) -> bytes:
        # validate_content: each response's MD5 (the service's, per range) is
        # checked, so an altered body raises instead of returning.
        downloader = self._container.download_blob(name, max_concurrency=1,
                                                   validate_content=True)
        data: bytes = downloader.readall()
        if len(data) != downloader.properties.size:
            raise RemoteStorageError(f"short response for {self.store}/{name}: got {len(data)} "
                                     f"of {downloader.properties.size} bytes", retriable=True)
        return data

    def _delete(self, name: str) -> None:
        self._container.delete_blob(name)

    def _list(self, prefix: str) -> Iterator[tuple[str, int, float]]:
        for blob in self._container.list_blobs(name_starts_with=prefix):
            modified = blob.last_modified.timestamp() if blob.last_modified else 0.0
            yield blob.name, int(blob.size or 0), modified

    def classify(self, operation: str, name: str, exc: Exception) -> RemoteStorageError | None:
        """The one place where Azure failures become RemoteStorageErrors."""
        where = f"{operation} {self.store}/{name}"
        # azure-core's transport is requests: its errors can escape unwrapped.
        if isinstance(exc, aexc.ServiceRequestError | aexc.ServiceResponseError
                      | aexc.IncompleteReadError | requests.RequestException
                      | urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
            return RemoteStorageError(f"{where} failed: {type(exc).__name__}: {exc}",
                                      retriable=True)
        if isinstance(exc, aexc.HttpResponseError):
            code = str(getattr(exc, "error_code", None) or "")
            status = int(exc.status_code or 0)
            if status < 400:
                # No answer, or a good one whose body broke off (the SDK wraps
                # the read error in an HttpResponseError).
                return RemoteStorageError(f"{where} failed reading the response: {exc}",
                                          retriable=True)
            if code in _FATAL_404_CODES:
                return RemoteStorageError(f"{where}: {code}")
            if code in _NOT_FOUND_CODES or (status == 404 and operation in ("get", "delete")):
                return RemoteResourceNotFoundError(f"{where}: not found ({code or status})")
            return RemoteStorageError(f"{where} failed: {code or status} {exc.reason or ''}"
                                      .rstrip(), retriable=http_retriable(status))
        if isinstance(exc, ValueError):
            # The SDK's word for a response it cannot parse (e.g. a ranged
            # download answered without Content-Range): the store misbehaved.
            return RemoteStorageError(f"{where}: malformed response: {exc}", retriable=True)
        if isinstance(exc, aexc.AzureError):
            # validate_content's failure is a bare AzureError: the bytes were
            # altered on the way, the next transfer may be whole.
            altered = str(exc).startswith("MD5 mismatch")
            return RemoteStorageError(f"{where} failed: {type(exc).__name__}: {exc}",
                                      retriable=altered)
        return None

    def close(self) -> None:
        """Close the HTTP pipeline. Idempotent."""
        self._service.close()


_OCTETS = ContentSettings(content_type="application/octet-stream")


class _DownloadBody:
    """A ranged download as ``read(n)`` / ``close()``."""

    def __init__(self, downloader: Any) -> None:
        self._downloader = downloader

    def read(self, size: int) -> bytes:
        data: bytes = self._downloader.read(size)
        return data

    def close(self) -> None:
        """The SDK holds no connection between reads: nothing to release."""


def _service_client(values: Mapping[str, Any], options: dict[str, Any]) -> BlobServiceClient:
    """The blob service client for the credential settings.

    Raises:
        ConfigError: conflicting or missing credentials, or a bad endpoint.
    """
    connection = values["azure.connection.string"]
    account, key, sas = (values["azure.account.name"], values["azure.account.key"],
                         values["azure.sas.token"])
    endpoint = values["azure.endpoint.url"]
    if connection is not None:
        for other in ("account.name", "account.key", "sas.token", "endpoint.url"):
            if values["azure." + other] is not None:
                raise ConfigError("rsm.config.azure." + other, "(set)",
                                  "cannot be set together with azure.connection.string")
        try:
            return BlobServiceClient.from_connection_string(connection, **options)
        except ValueError as exc:
            raise ConfigError("rsm.config.azure.connection.string", "(hidden)",
                              f"invalid: {type(exc).__name__}") from None
    if key is not None and sas is not None:
        raise ConfigError("rsm.config.azure.sas.token", "(set)",
                          "set azure.account.key or azure.sas.token, not both")
    if key is None and sas is None:
        raise ConfigError("rsm.config.azure.account.key", None,
                          "set azure.connection.string, azure.account.key or azure.sas.token")
    if account is None and (key is not None or endpoint is None):
        raise ConfigError("rsm.config.azure.account.name", None,
                          "required with azure.account.key, or without azure.endpoint.url")
    if key is not None:
        try:
            base64.b64decode(key, validate=True)
        except binascii.Error:
            raise ConfigError("rsm.config.azure.account.key", "(hidden)",
                              "not a base64 account key") from None
    url = endpoint or f"https://{account}.blob.core.windows.net"
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ConfigError("rsm.config.azure.endpoint.url", url,
                          "expected an http:// or https:// URL")
    credential: Any = (AzureNamedKeyCredential(account, key) if key is not None
                       else AzureSasCredential(sas.lstrip("?")))
    return BlobServiceClient(url, credential=credential, **options)
