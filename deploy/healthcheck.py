"""Container health check: the broker's Kafka listener answers ApiVersions.

The port comes from TIERD_LISTENERS (the broker's own environment override,
``PLAINTEXT://host:port``), else 9092. Exit 0 healthy, 1 not.
"""

import os
import socket
import struct
import sys

# ApiVersions v0 request: size, api key 18, version 0, correlation id, client id.
_CLIENT = b"tierd-healthcheck"
_BODY = struct.pack(">hhih", 18, 0, 1, len(_CLIENT)) + _CLIENT
_REQUEST = struct.pack(">i", len(_BODY)) + _BODY


def main() -> int:
    listener = os.environ.get("TIERD_LISTENERS", "PLAINTEXT://127.0.0.1:9092").split(",")[0]
    port = int(listener.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            sock.sendall(_REQUEST)
            header = sock.recv(8)
    except OSError as exc:
        print(f"unhealthy: {exc}")
        return 1
    if len(header) < 8 or struct.unpack(">ii", header)[1] != 1:
        print("unhealthy: no ApiVersions answer")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
