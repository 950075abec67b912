"""The GCS and Azure remote tiers of a test broker, seen from outside it
(``tiered_helpers.RemoteTier``): a bucket on a ``GcsEmulator``, a container
on ``AzuriteBlob``, read and listed with Google's and Microsoft's own clients.
Names are relative to the tier's key prefix, in the S3 tier's layout
``<topic>-<topicId>/<partition>/<offset>-<uuid>.<suffix>``."""

from __future__ import annotations

from collections.abc import Mapping

from system_tests.emulators import AzuriteBlob, GcsEmulator
from system_tests.tiered_helpers import TOPIC_ID_CHARS, RemoteTier


def _test_settings(store: str) -> Mapping[str, str]:
    """Two attempts and short timeouts, so a store that is down fails a copy or
    a read within about a second (the S3 tier's S3_TEST_SETTINGS, per store)."""
    return {f"rsm.config.{store}.retry.max.attempts": "2",
            f"rsm.config.{store}.connect.timeout.ms": "1000",
            f"rsm.config.{store}.read.timeout.ms": "3000"}


def _in_topic(name: str, topic: str) -> bool:
    """Whether a name's first component is ``<topic>-<topicId>``."""
    rest = name.split("/", 1)[0].removeprefix(f"{topic}-")
    return rest != name.split("/", 1)[0] and len(rest) == TOPIC_ID_CHARS


class GcsTier(RemoteTier):
    kind = "gcs"

    def __init__(self, emulator: GcsEmulator, bucket: str, prefix: str = "tiered/") -> None:
        self.emulator = emulator
        self.bucket = bucket
        self.prefix = prefix
        self._bucket = emulator.client().bucket(bucket)

    def broker_overrides(self) -> dict[str, str]:
        return {"remote.log.storage.manager.class.name": "gcs",
                **{f"rsm.config.{k}": v for k, v in
                   self.emulator.rsm_settings(self.bucket, **{"gcs.key.prefix": self.prefix})
                   .items()},
                **_test_settings("gcs")}

    def objects(self, topic: str | None = None) -> list[str]:
        names = [b.name[len(self.prefix):] for b in self._bucket.list_blobs(prefix=self.prefix)]
        return sorted(n for n in names if topic is None or _in_topic(n, topic))

    def partition_of(self, name: str) -> int:
        return int(name.split("/")[1])

    def read(self, name: str) -> bytes:
        data: bytes = self._bucket.blob(self.prefix + name).download_as_bytes()
        return data

    def write(self, name: str, data: bytes) -> None:
        self._bucket.blob(self.prefix + name).upload_from_string(data)

    def delete(self, name: str) -> None:
        self._bucket.delete_blob(self.prefix + name)


class AzureTier(RemoteTier):
    kind = "azure"

    def __init__(self, emulator: AzuriteBlob, container: str, prefix: str = "tiered/") -> None:
        self.emulator = emulator
        self.container = container
        self.prefix = prefix
        self._container = emulator.client().get_container_client(container)

    def broker_overrides(self) -> dict[str, str]:
        return {"remote.log.storage.manager.class.name": "azure",
                **{f"rsm.config.{k}": v for k, v in
                   self.emulator.rsm_settings(self.container, **{"azure.key.prefix": self.prefix})
                   .items()},
                **_test_settings("azure")}

    def objects(self, topic: str | None = None) -> list[str]:
        names = [b.name[len(self.prefix):]
                 for b in self._container.list_blobs(name_starts_with=self.prefix)]
        return sorted(n for n in names if topic is None or _in_topic(n, topic))

    def partition_of(self, name: str) -> int:
        return int(name.split("/")[1])

    def read(self, name: str) -> bytes:
        data: bytes = self._container.download_blob(self.prefix + name).readall()
        return data

    def write(self, name: str, data: bytes) -> None:
        self._container.upload_blob(self.prefix + name, data, overwrite=True)

    def delete(self, name: str) -> None:
        self._container.delete_blob(self.prefix + name)
