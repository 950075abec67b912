"""Real GCS and Azure Blob endpoints for tests: emulator processes on loopback.

* ``GcsEmulator`` runs ``gcp-storage-emulator`` (PyPI, in the test lock): the
  GCS JSON API, uploads (simple and resumable) and ranged media downloads.
* ``AzuriteBlob`` runs Azurite's blob service (npm, installed under
  ``.deps/azurite`` by ``scripts/install-deps.sh``) with its well-known
  development account.

Both keep their data in a directory, so ``stop()`` then ``start()`` (same
port) models an outage of the store: what was written before is still there
afterwards. Each starts on a free port and is waited for with a deadline.

Pytest fixtures (import them into a conftest.py to use them):
``gcs_emulator`` and ``azurite`` (one process per session), ``gcs_bucket``
and ``azure_container`` (a fresh one per test).
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from system_tests.harness import free_port
from system_tests.s3_fixtures import LOOPBACK, _die_with_parent

ROOT = Path(__file__).resolve().parent.parent
AZURITE_BIN = ROOT / ".deps" / "azurite" / "node_modules" / ".bin" / "azurite-blob"

# Azurite's fixed development account (documented by Microsoft; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
               "K1SZFPTOtr/KBHBeksoGMGw==")

# Node and the emulators start in about a second; 30 s covers a loaded CI machine.
STARTUP_TIMEOUT_S = 30.0
# A port picked as free can be taken before the emulator binds it; try a few.
START_ATTEMPTS = 3
PROBE_INTERVAL_S = 0.05


class _Emulator:
    """An emulator process on loopback keeping its data under ``data_dir``."""

    name = "emulator"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = data_dir / f"{self.name}.log"
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        """Start (on the previous port after a ``stop``) and wait until it answers HTTP.

        Raises:
            RuntimeError: it did not come up (its log is in the message).
        """
        fixed = self.port != 0
        for _ in range(1 if fixed else START_ATTEMPTS):
            if not fixed:
                self.port = free_port()
            with open(self.log_path, "ab") as log:
                self._process = subprocess.Popen(
                    self._command(), stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, cwd=self.data_dir, preexec_fn=_die_with_parent)
            if self._wait_ready():
                return
            self.stop()
        raise RuntimeError(f"{self.name} did not start; log:\n{self.log_path.read_text()[-4000:]}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                return False
            try:
                conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=1.0)
                conn.request("GET", "/")
                conn.getresponse().read()
                conn.close()
                return True
            except OSError:
                time.sleep(PROBE_INTERVAL_S)
        return False

    def stop(self) -> None:
        """Terminate the process (kill if it lingers); the data stays. Idempotent."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class GcsEmulator(_Emulator):
    """``gcp-storage-emulator`` (data on disk under ``data_dir``)."""

    name = "gcs-emulator"

    def _command(self) -> list[str]:
        script = Path(sys.executable).parent / "gcp-storage-emulator"
        return [str(script), "start", "--host", LOOPBACK, "--port", str(self.port), "-q"]

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project="tierd-test", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.endpoint_url})

    def create_bucket(self) -> str:
        name = f"tierd-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(name)
        return name

    def rsm_settings(self, bucket: str, **extra: str) -> dict[str, str]:
        """RSM settings (``rsm.config.`` stripped) for ``bucket`` here."""
        return {"gcs.bucket.name": bucket, "gcs.endpoint.url": self.endpoint_url,
                "gcs.key.prefix": "tiered/", **extra}


class AzuriteBlob(_Emulator):
    """Azurite's blob service (data on disk under ``data_dir``)."""

    name = "azurite"

    def _command(self) -> list[str]:
        if not AZURITE_BIN.exists():
            raise RuntimeError(f"{AZURITE_BIN} is missing: run `make deps`")
        return [str(AZURITE_BIN), "--blobHost", LOOPBACK, "--blobPort", str(self.port),
                "--location", str(self.data_dir / "data"), "--silent", "--disableTelemetry",
                "--skipApiVersionCheck", "--loose"]

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/{AZURITE_ACCOUNT}"

    def client(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(self.endpoint_url, credential={
            "account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY})

    def create_container(self) -> str:
        name = f"tierd-{uuid.uuid4().hex[:20]}"
        self.client().create_container(name)
        return name

    def rsm_settings(self, container: str, **extra: str) -> dict[str, str]:
        """RSM settings (``rsm.config.`` stripped) for ``container`` here."""
        return {"azure.container.name": container, "azure.account.name": AZURITE_ACCOUNT,
                "azure.account.key": AZURITE_KEY, "azure.endpoint.url": self.endpoint_url,
                "azure.key.prefix": "tiered/", **extra}


def broker_settings(rsm: dict[str, str], class_name: str) -> dict[str, str]:
    """Broker config entries selecting ``class_name`` with these RSM settings."""
    return {"remote.log.storage.manager.class.name": class_name,
            **{f"rsm.config.{k}": v for k, v in rsm.items()}}


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    """One GCS emulator for the session (tests isolate by bucket)."""
    server = GcsEmulator(tmp_path_factory.mktemp("gcs"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteBlob]:
    """One Azurite blob service for the session (tests isolate by container)."""
    server = AzuriteBlob(tmp_path_factory.mktemp("azurite"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def gcs_bucket(gcs_emulator: GcsEmulator) -> str:
    """A fresh, empty bucket."""
    return gcs_emulator.create_bucket()


@pytest.fixture
def azure_container(azurite: AzuriteBlob) -> str:
    """A fresh, empty container."""
    return azurite.create_container()

