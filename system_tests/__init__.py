"""Black-box system tests: real broker processes, real clients, real sockets."""
