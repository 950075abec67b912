"""What the GCS and Azure RSMs add to the shared contract (test_rsm_contract):
settings, uploads in chunks/blocks, and failures of the store, injected by
the fault proxy between the RSM and the emulator (gcp-storage-emulator,
Azurite) or by pointing the RSM at a closed port."""

from __future__ import annotations

import base64
import contextlib
import datetime
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import structlog
from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

from config.defs import ConfigError
from storage.remote.azure import AzureRemoteStorageManager
from storage.remote.gcs import GcsRemoteStorageManager
from storage.remote.types import IndexType, RemoteResourceNotFoundError, RemoteStorageError
from system_tests.emulators import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteBlob, GcsEmulator
from system_tests.s3_fixtures import Fault, FaultProxy, free_port
from tests.storage.remote.conftest import Backend, azure_backend, gcs_backend
from tests.storage.remote.segments import SegmentFactory

KIB = 1024
# Smallest chunk / block each store takes: a 700 KB log goes up in 3 / 7 pieces.
GCS_CHUNK = 256 * KIB
AZURE_BLOCK = 100 * KIB
BIG = 700_000

STORES = ["gcs", "azure"]


def _make(store: str, request: pytest.FixtureRequest, endpoint: str | None = None,
          **extra: str) -> Backend:
    """A backend on a fresh bucket/container; ``endpoint`` replaces the emulator's
    host:port (a proxy, a closed port)."""
    if store == "gcs":
        gcs: GcsEmulator = request.getfixturevalue("gcs_emulator")
        extra = {"gcs.resumable.upload.chunk.size": str(GCS_CHUNK), **extra}
        if endpoint is not None:
            extra["gcs.endpoint.url"] = endpoint
        return gcs_backend(gcs, request.getfixturevalue("gcs_bucket"), **extra)
    azurite: AzuriteBlob = request.getfixturevalue("azurite")
    extra = {"azure.upload.block.size": str(AZURE_BLOCK), **extra}
    if endpoint is not None:
        extra["azure.endpoint.url"] = f"{endpoint}/devstoreaccount1"
    return azure_backend(azurite, request.getfixturevalue("azure_container"), **extra)


def _emulator_port(store: str, request: pytest.FixtureRequest) -> int:
    name = "gcs_emulator" if store == "gcs" else "azurite"
    port: int = request.getfixturevalue(name).port
    return port


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def direct(store: str, request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = _make(store, request)
    yield made
    made.rsm.close()


@pytest.fixture
def proxy(store: str, request: pytest.FixtureRequest) -> Iterator[FaultProxy]:
    made = FaultProxy(_emulator_port(store, request)).start()
    yield made
    made.stop()


@pytest.fixture
def proxied(store: str, request: pytest.FixtureRequest, proxy: FaultProxy) -> Iterator[Backend]:
    made = _make(store, request, proxy.endpoint_url)
    yield made
    made.rsm.close()


def test_large_log_goes_up_in_pieces_and_reads_back(direct: Backend,
                                                    segments: SegmentFactory) -> None:
    seg = segments.make(BIG)
    direct.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert direct.rsm.fetch_log_segment(seg.metadata, 0) == seg.log
    assert direct.rsm.fetch_log_segment(seg.metadata, 300_000, 650_000) == \
        seg.log[300_000:650_001]


def test_pieces_are_separate_requests(store: str, proxied: Backend, proxy: FaultProxy,
                                      segments: SegmentFactory) -> None:
    seg = segments.make(BIG)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    if store == "gcs":
        # A resumable session (POST) and one PUT per 256 KiB chunk.
        assert proxy.count("PUT", "upload_id") == 3
    else:
        assert proxy.count("PUT", "comp=block&") == 7
        assert proxy.count("PUT", "comp=blocklist") == 1


def test_transient_faults_are_retried(store: str, proxied: Backend, proxy: FaultProxy,
                                      segments: SegmentFactory) -> None:
    seg = segments.make(BIG)
    rules = [proxy.inject(Fault.ERROR_500, method="PUT", query="upload_id" if store == "gcs"
                          else "comp=block&", times=1),
             proxy.inject(Fault.RESET, method="GET", key_suffix=".log", times=1)]
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert proxied.rsm.fetch_log_segment(seg.metadata, 0) == seg.log
    assert [rule.hits for rule in rules] == [1, 1]


def test_store_down_copy_fails_retriable_and_cleanup_happens_later(
        proxied: Backend, proxy: FaultProxy, segments: SegmentFactory) -> None:
    seg = segments.make(1000)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    proxy.inject(Fault.RESET)  # the store goes away for everything
    with pytest.raises(RemoteStorageError) as info:
        proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert info.value.retriable
    with pytest.raises(RemoteStorageError) as info:
        proxied.rsm.fetch_log_segment(seg.metadata, 0)
    assert info.value.retriable and not isinstance(info.value, RemoteResourceNotFoundError)
    proxy.clear()
    proxied.rsm.delete_log_segment_data(seg.metadata)  # the expirer's later delete
    assert proxied.stored(seg.metadata) == []


@pytest.mark.parametrize("fault", [Fault.SHORT_BODY, Fault.CUT_BODY])
def test_short_log_response_is_an_error(proxied: Backend, proxy: FaultProxy,
                                        segments: SegmentFactory, fault: Fault) -> None:
    seg = segments.make(100_000)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    proxy.inject(fault, method="GET", key_suffix=".log")
    for start, end in [(0, None), (1000, 50_000)]:
        with pytest.raises(RemoteStorageError) as info:
            proxied.rsm.fetch_log_segment(seg.metadata, start, end)
        assert info.value.retriable
    proxy.clear()
    assert proxied.rsm.fetch_log_segment(seg.metadata, 1000, 50_000) == seg.log[1000:50_001]


@pytest.mark.parametrize("fault", [Fault.SHORT_BODY, Fault.CUT_BODY, Fault.CORRUPT_BODY])
def test_short_or_corrupt_index_response_is_an_error(proxied: Backend, proxy: FaultProxy,
                                          segments: SegmentFactory, fault: Fault) -> None:
    seg = segments.make(1000)
    proxied.rsm.copy_log_segment_data(seg.metadata, seg.data)
    proxy.inject(fault, method="GET", key_suffix=".timeindex")
    with pytest.raises(RemoteStorageError) as info:
        proxied.rsm.fetch_index(seg.metadata, IndexType.TIMESTAMP)
    assert info.value.retriable


def test_store_unreachable_is_retriable(store: str, request: pytest.FixtureRequest,
                                        segments: SegmentFactory) -> None:
    timeout = {f"{store}.connect.timeout.ms": "500"}
    backend = _make(store, request, f"http://127.0.0.1:{free_port()}", **timeout)
    seg = segments.make(1000)
    for call in (lambda: backend.rsm.copy_log_segment_data(seg.metadata, seg.data),
                 lambda: backend.rsm.fetch_log_segment(seg.metadata, 0),
                 lambda: backend.rsm.delete_log_segment_data(seg.metadata)):
        with pytest.raises(RemoteStorageError) as info:
            call()
        assert info.value.retriable


def test_missing_bucket_is_fatal_not_not_found(store: str, request: pytest.FixtureRequest,
                                               segments: SegmentFactory) -> None:
    if store == "gcs":
        gcs: GcsEmulator = request.getfixturevalue("gcs_emulator")
        rsm: GcsRemoteStorageManager | AzureRemoteStorageManager = GcsRemoteStorageManager(
            gcs.rsm_settings("no-such-bucket-tierd"))
    else:
        azurite: AzuriteBlob = request.getfixturevalue("azurite")
        rsm = AzureRemoteStorageManager(azurite.rsm_settings("no-such-container-tierd"))
    seg = segments.make(1000)
    with pytest.raises(RemoteStorageError) as info:
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert not info.value.retriable
    assert not isinstance(info.value, RemoteResourceNotFoundError)
    rsm.close()


GCS_BASE = {"gcs.bucket.name": "b", "gcs.endpoint.url": "http://127.0.0.1:1"}
AZURE_BASE = {"azure.container.name": "tierd", "azure.account.name": "devstoreaccount1",
              "azure.account.key": AZURITE_KEY, "azure.endpoint.url": "http://127.0.0.1:1/x"}


@pytest.mark.parametrize(("settings", "key"), [
    ({}, "rsm.config.gcs.bucket.name"),
    ({**GCS_BASE, "gcs.resumable.upload.chunk.size": "300000"},
     "rsm.config.gcs.resumable.upload.chunk.size"),
    ({**GCS_BASE, "gcs.resumable.upload.chunk.size": "1024"},
     "rsm.config.gcs.resumable.upload.chunk.size"),
    ({**GCS_BASE, "gcs.credentials.default": "true", "gcs.credentials.json": "{}"},
     "rsm.config.gcs.credentials.json"),
    ({**GCS_BASE, "gcs.credentials.json": "{not json"}, "rsm.config.gcs.credentials.json"),
    ({**GCS_BASE, "gcs.credentials.path": "/nonexistent/key.json"},
     "rsm.config.gcs.credentials.path"),
    ({**GCS_BASE, "gcs.endpoint.url": "ftp://x"}, "rsm.config.gcs.endpoint.url"),
    ({**GCS_BASE, "gcs.retry.max.attempts": "0"}, "rsm.config.gcs.retry.max.attempts"),
])
def test_invalid_gcs_settings(settings: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        GcsRemoteStorageManager(settings)
    assert info.value.key == key


@pytest.mark.parametrize(("settings", "key"), [
    ({}, "rsm.config.azure.container.name"),
    ({**AZURE_BASE, "azure.sas.token": "sv=x"}, "rsm.config.azure.sas.token"),
    ({"azure.container.name": "tierd", "azure.endpoint.url": "http://127.0.0.1:1/x"},
     "rsm.config.azure.account.key"),
    ({"azure.container.name": "tierd", "azure.account.key": AZURITE_KEY},
     "rsm.config.azure.account.name"),
    ({**AZURE_BASE, "azure.connection.string": "UseDevelopmentStorage=true"},
     "rsm.config.azure.account.name"),
    ({"azure.container.name": "tierd", "azure.connection.string": "garbage"},
     "rsm.config.azure.connection.string"),
    ({**AZURE_BASE, "azure.upload.block.size": "1000"}, "rsm.config.azure.upload.block.size"),
    ({**AZURE_BASE, "azure.endpoint.url": "ftp://x"}, "rsm.config.azure.endpoint.url"),
    ({**AZURE_BASE, "azure.account.key": "not base64!"}, "rsm.config.azure.account.key"),
])
def test_invalid_azure_settings(settings: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        AzureRemoteStorageManager(settings)
    assert info.value.key == key


def test_secrets_are_never_logged_or_in_errors() -> None:
    secret_json = '{"type": "service_account", "private_key": "SECRET-PRIVATE-KEY"}'
    with structlog.testing.capture_logs() as logs:
        AzureRemoteStorageManager(AZURE_BASE).close()
        with pytest.raises(ConfigError) as info:
            GcsRemoteStorageManager({**GCS_BASE, "gcs.credentials.json": secret_json})
    text = repr(logs) + str(info.value)
    assert logs and AZURITE_KEY not in text and "SECRET-PRIVATE-KEY" not in text


class _BadServer:
    """A loopback TCP server that answers every connection with ``reply``
    (garbage instead of HTTP), or with nothing at all (``reply`` None: a
    store that hangs), until stopped."""

    def __init__(self, reply: bytes | None) -> None:
        self._reply = reply
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="bad-store")
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            if self._reply is None:
                self._held.append(conn)  # read nothing, answer nothing
                continue
            conn.settimeout(1.0)
            with contextlib.suppress(OSError):
                conn.recv(65536)
                conn.sendall(self._reply)
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._listener.close()
        for conn in self._held:
            conn.close()


# A hanging store must fail a call within its read timeout (300 ms here) per
# attempt; this bound leaves room for a loaded machine, not for a hang.
HANG_BOUND_S = 10.0


@pytest.mark.parametrize("reply", [None, b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\n"
                                   b"Content-Length: 5\r\n\r\n<xml"])
def test_hanging_or_garbage_store_is_a_retriable_error(
        store: str, request: pytest.FixtureRequest, segments: SegmentFactory,
        reply: bytes | None) -> None:
    server = _BadServer(reply)
    settings = {f"{store}.read.timeout.ms": "300", f"{store}.retry.max.attempts": "1"}
    backend = _make(store, request, server.endpoint_url, **settings)
    seg = segments.make(1000)
    try:
        for call in (lambda: backend.rsm.copy_log_segment_data(seg.metadata, seg.data),
                     lambda: backend.rsm.fetch_log_segment(seg.metadata, 0),
                     lambda: backend.rsm.fetch_index(seg.metadata, IndexType.OFFSET)):
            started = time.monotonic()
            with pytest.raises(RemoteStorageError) as info:
                call()
            assert time.monotonic() - started < HANG_BOUND_S
            assert info.value.retriable, info.value
    finally:
        backend.rsm.close()
        server.stop()


def test_azure_connection_string_and_sas_token_work(azurite: AzuriteBlob, azure_container: str,
                                                    segments: SegmentFactory) -> None:
    """Azurite checks shared-key signatures and SAS tokens as Azure does."""
    sas = generate_account_sas(
        AZURITE_ACCOUNT, AZURITE_KEY, ResourceTypes(container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, create=True),
        expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1))
    connection = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
                  f"AccountKey={AZURITE_KEY};BlobEndpoint={azurite.endpoint_url};")
    for credentials in ({"azure.connection.string": connection},
                        {"azure.account.name": AZURITE_ACCOUNT, "azure.sas.token": sas,
                         "azure.endpoint.url": azurite.endpoint_url}):
        rsm = AzureRemoteStorageManager({"azure.container.name": azure_container, **credentials})
        seg = segments.make(1000)
        rsm.copy_log_segment_data(seg.metadata, seg.data)
        assert rsm.fetch_log_segment(seg.metadata, 10, 99) == seg.log[10:100]
        rsm.close()
    # A wrong key is refused by the store: fatal, not retried, not "not found".
    other_key = base64.b64encode(b"k" * 64).decode()
    wrong = AzureRemoteStorageManager(azurite.rsm_settings(
        azure_container, **{"azure.account.key": other_key}))
    seg = segments.make(1000)
    with pytest.raises(RemoteStorageError) as info:
        wrong.copy_log_segment_data(seg.metadata, seg.data)
    assert not info.value.retriable and not isinstance(info.value, RemoteResourceNotFoundError)
    wrong.close()
