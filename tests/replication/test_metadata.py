"""meta.properties: the log directory remembers its cluster and node id."""

from __future__ import annotations

import pytest

from replication.metadata import LocalMetadataStore, MetaPropertiesError


def test_a_log_dir_refuses_another_node_id(tmp_path):
    LocalMetadataStore(str(tmp_path), 1, "c1")
    assert "node.id=1" in (tmp_path / "meta.properties").read_text()
    LocalMetadataStore(str(tmp_path), 1, None)  # same node: fine
    with pytest.raises(MetaPropertiesError, match="node id 1.*node.id=2"):
        LocalMetadataStore(str(tmp_path), 2, None)


def test_a_log_dir_refuses_another_cluster(tmp_path):
    LocalMetadataStore(str(tmp_path), 1, "c1")
    with pytest.raises(MetaPropertiesError, match="cluster c1"):
        LocalMetadataStore(str(tmp_path), 1, "c2")
