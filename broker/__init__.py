"""The tierd daemon: trio TCP server, request dispatch, handlers, metrics, CLI."""
