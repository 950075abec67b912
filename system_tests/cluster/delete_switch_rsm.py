"""The filesystem remote storage manager with a switch that makes segment
deletes fail: while ``<rsm.config.dir>/.refuse-deletes`` exists, every
``delete_log_segment_data`` raises OSError (as a store that refuses deletes
would). Brokers load it by its dotted path
(remote.log.storage.manager.class.name), so a test can hold a remote
partition deletion between DELETE_PARTITION_STARTED and FINISHED."""

from __future__ import annotations

import os

from storage.remote.filesystem import FileSystemRemoteStorageManager
from storage.remote.types import RemoteLogSegmentMetadata

SWITCH = ".refuse-deletes"


class DeleteSwitchRemoteStorageManager(FileSystemRemoteStorageManager):
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        if os.path.exists(os.path.join(self.root, SWITCH)):
            raise OSError(f"deletes refused while {SWITCH} exists")
        super().delete_log_segment_data(metadata)
