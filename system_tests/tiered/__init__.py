"""Tiered-storage (KIP-405) system tests against live tierd processes."""
