"""Partition state, the replica manager and cluster metadata."""
