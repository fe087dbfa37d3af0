"""A bulk TCP transfer between two testbed namespaces, to check that a shaped link delivers its rate.

Why not iperf3: it is not installed here, and a plain socket loop measures what a Python peer can get
through the link, which is the question. Run inside namespaces with ``ip netns exec`` (node/testbed/netns.py):

    python -m distro_node.node.testbed.probe recv 10.77.0.2          # prints {"port": P}, then the result
    python -m distro_node.node.testbed.probe send 10.77.0.2 P 5 [10] # sends for 5 s (connect timeout 10 s)

The receiver reports bytes over the time from its first to its last received byte, so connection set-up is
not counted; the result is one JSON line ``{"bytes": B, "seconds": S, "mbit": M}``.
"""

from __future__ import annotations

import json
import socket
import sys
import time

CHUNK = 256 * 1024
ACCEPT_TIMEOUT_S = 60.0
IDLE_TIMEOUT_S = 30.0


def receive(host: str) -> dict[str, float]:
    with socket.create_server((host, 0)) as server:
        print(json.dumps({"port": server.getsockname()[1]}), flush=True)
        server.settimeout(ACCEPT_TIMEOUT_S)
        conn, _ = server.accept()
    with conn:
        conn.settimeout(IDLE_TIMEOUT_S)
        total, first, last = 0, 0.0, 0.0
        buf = bytearray(CHUNK)
        while n := conn.recv_into(buf):
            last = time.perf_counter()
            if total == 0:
                first = last
            total += n
    seconds = max(last - first, 1e-9)
    return {"bytes": total, "seconds": round(seconds, 4), "mbit": round(total * 8 / seconds / 1e6, 3)}


def send(host: str, port: int, seconds: float, connect_timeout: float) -> None:
    data = bytes(CHUNK)
    with socket.create_connection((host, port), timeout=connect_timeout) as conn:
        conn.settimeout(IDLE_TIMEOUT_S)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            conn.sendall(data)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "recv":
        print(json.dumps(receive(argv[1])), flush=True)
        return 0
    if len(argv) in (4, 5) and argv[0] == "send":
        send(argv[1], int(argv[2]), float(argv[3]), float(argv[4]) if len(argv) == 5 else IDLE_TIMEOUT_S)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
