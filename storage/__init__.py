"""Storage: the local log (storage.log) and the remote tier (storage.remote)."""
