"""Fixtures for the RSM tests: a real moto server, GCS emulator and Azurite
over HTTP, local segments, and one ``backend`` fixture parametrised over every
built-in RSM."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from storage.remote.api import RemoteStorageManager
from storage.remote.azure import AzureRemoteStorageManager
from storage.remote.filesystem import FileSystemRemoteStorageManager
from storage.remote.gcs import GcsRemoteStorageManager
from storage.remote.s3 import S3RemoteStorageManager
from storage.remote.types import RemoteLogSegmentMetadata
from system_tests.emulators import (  # noqa: F401 - fixtures used by name
    AzuriteBlob,
    GcsEmulator,
    azure_container,
    azurite,
    gcs_bucket,
    gcs_emulator,
)
from system_tests.s3_fixtures import (  # noqa: F401 - fixtures used by name
    REGION,
    MotoServer,
    aws_test_env,
    fault_proxy,
    list_keys,
    list_uploads,
    moto_server,
    s3_bucket,
)
from tests.storage.remote.segments import SegmentFactory

# Few retries so injected faults fail fast (botocore backs off up to 1 s).
TEST_RETRY_ATTEMPTS = "2"


def s3_settings(endpoint_url: str, bucket: str, **extra: str) -> dict[str, str]:
    """RSM settings (prefix stripped) for a bucket behind ``endpoint_url``."""
    return {"bucket": bucket, "prefix": "tiered/", "region": REGION,
            "endpoint.url": endpoint_url, "retry.max.attempts": TEST_RETRY_ATTEMPTS, **extra}


@dataclass
class Backend:
    """One RSM under test plus ways to look at and tamper with its store."""

    name: str
    rsm: RemoteStorageManager
    # Names of everything stored for the segment, finished or partial.
    stored: Callable[[RemoteLogSegmentMetadata], list[str]]
    # Replace one stored object of the segment with other bytes.
    overwrite: Callable[[RemoteLogSegmentMetadata, str, bytes], None]
    # The settings the RSM was built from (prefix stripped).
    settings: dict[str, str] = field(default_factory=dict)


def filesystem_backend(root: Path) -> Backend:
    settings = {"dir": str(root)}
    rsm = FileSystemRemoteStorageManager(settings)

    def stored(md: RemoteLogSegmentMetadata) -> list[str]:
        directory = rsm.partition_dir(md.topic_id_partition)
        stem = os.path.basename(rsm.object_path(md, "log"))[: -len(".log")]
        if not os.path.isdir(directory):
            return []
        return sorted(name for name in os.listdir(directory) if name.startswith(stem))

    def overwrite(md: RemoteLogSegmentMetadata, suffix: str, data: bytes) -> None:
        Path(rsm.object_path(md, suffix)).write_bytes(data)

    return Backend("filesystem", rsm, stored, overwrite, settings)


def s3_backend(server: MotoServer, bucket: str, endpoint_url: str | None = None,
               **extra: str) -> Backend:
    settings = s3_settings(endpoint_url or server.endpoint_url, bucket, **extra)
    rsm = S3RemoteStorageManager(settings)
    client = server.client()

    def stored(md: RemoteLogSegmentMetadata) -> list[str]:
        stem = rsm.object_key(md, "log")[: -len("log")]
        return sorted(list_keys(client, bucket, stem) + list_uploads(client, bucket, stem))

    def overwrite(md: RemoteLogSegmentMetadata, suffix: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=rsm.object_key(md, suffix), Body=data)

    return Backend("s3", rsm, stored, overwrite, settings)


def gcs_backend(server: GcsEmulator, bucket: str, **extra: str) -> Backend:
    settings = server.rsm_settings(bucket, **{"gcs.retry.max.attempts": TEST_RETRY_ATTEMPTS,
                                              **extra})
    rsm = GcsRemoteStorageManager(settings)
    client_bucket = server.client().bucket(bucket)

    def stored(md: RemoteLogSegmentMetadata) -> list[str]:
        stem = rsm.object_key(md, "log")[: -len("log")]
        return sorted(blob.name for blob in client_bucket.list_blobs(prefix=stem))

    def overwrite(md: RemoteLogSegmentMetadata, suffix: str, data: bytes) -> None:
        client_bucket.blob(rsm.object_key(md, suffix)).upload_from_string(data)

    return Backend("gcs", rsm, stored, overwrite, settings)


def azure_backend(server: AzuriteBlob, container: str, **extra: str) -> Backend:
    settings = server.rsm_settings(container, **{"azure.retry.max.attempts": TEST_RETRY_ATTEMPTS,
                                                 **extra})
    rsm = AzureRemoteStorageManager(settings)
    client = server.client().get_container_client(container)

    def stored(md: RemoteLogSegmentMetadata) -> list[str]:
        stem = rsm.object_key(md, "log")[: -len("log")]
        return sorted(blob.name for blob in client.list_blobs(name_starts_with=stem))

    def overwrite(md: RemoteLogSegmentMetadata, suffix: str, data: bytes) -> None:
        client.upload_blob(rsm.object_key(md, suffix), data, overwrite=True)

    return Backend("azure", rsm, stored, overwrite, settings)


@pytest.fixture(params=["filesystem", "s3", "gcs", "azure"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each built-in RSM in turn; S3 talks to moto, GCS to gcp-storage-emulator
    and Azure to Azurite, each over HTTP."""
    if request.param == "filesystem":
        made = filesystem_backend(tmp_path / "remote")
    elif request.param == "gcs":
        made = gcs_backend(request.getfixturevalue("gcs_emulator"),
                           request.getfixturevalue("gcs_bucket"))
    elif request.param == "azure":
        made = azure_backend(request.getfixturevalue("azurite"),
                             request.getfixturevalue("azure_container"))
    else:
        request.getfixturevalue("aws_test_env")
        server = request.getfixturevalue("moto_server")
        made = s3_backend(server, request.getfixturevalue("s3_bucket"))
    try:
        yield made
    finally:
        made.rsm.close()


@pytest.fixture
def segments(tmp_path: Path) -> SegmentFactory:
    """Builds local segments (files with known bytes) and their metadata."""
    return SegmentFactory(tmp_path / "local")
