"""A bulk TCP transfer between two testbed namespaces, to check that a shaped link delivers its rate.

Why not iperf3: it is not installed here, and a plain socket loop measures what a Python peer can get
through the link, which is the question. Run inside namespaces with ``ip netns exec`` (node/testbed/netns.py):

    python -m distro_node.node.testbed.probe recv 10.77.0.2          # prints {"port": P}, then the result
    python -m distro_node.node.testbed.probe send 10.77.0.2 P 5 [10] # sends for 5 s (connect timeout 10 s)
    python -m distro_node.node.testbed.probe recv-paced 10.77.0.2 0.05  # reads as the daemon does

The sender's bytes are a run of the largest Noise messages (a 2-byte length, then 65,535 bytes), which the
plain receiver takes as bytes and ``recv-paced`` reads message by message with the daemon's reader
(protocol/noise_reads.py, paced for at most the given seconds), so bench/acks.py can count what each way
of reading has the kernel acknowledge. The receiver reports bytes over the time from its first to its last
received byte, so connection set-up is not counted; the result is one JSON line ``{"bytes": B,
"seconds": S, "mbit": M}``.
"""

from __future__ import annotations

import json
import socket
import sys
import time

MESSAGE = 65_535  # the largest Noise message, what a bulk yamux frame is sent as
CHUNK = 4 * (2 + MESSAGE)  # four whole messages a send, so a sender that stops ends on a message's end
ACCEPT_TIMEOUT_S = 60.0
IDLE_TIMEOUT_S = 30.0
MAX_MESSAGES = 1 << 20  # a paced receiver's bound: 64 GiB, far beyond any probe's run


class _Tally:
    """Bytes received, over the time from the first to the last of them (set-up not counted)."""

    def __init__(self) -> None:
        self.total, self.first, self.last = 0, 0.0, 0.0

    def add(self, n: int) -> None:
        self.last = time.perf_counter()
        if self.total == 0:
            self.first = self.last
        self.total += n

    def result(self) -> dict[str, float]:
        seconds = max(self.last - self.first, 1e-9)
        return {"bytes": self.total, "seconds": round(seconds, 4),
                "mbit": round(self.total * 8 / seconds / 1e6, 3)}


def receive(host: str) -> dict[str, float]:
    with socket.create_server((host, 0)) as server:
        print(json.dumps({"port": server.getsockname()[1]}), flush=True)
        server.settimeout(ACCEPT_TIMEOUT_S)
        conn, _ = server.accept()
    with conn:
        conn.settimeout(IDLE_TIMEOUT_S)
        tally = _Tally()
        buf = bytearray(CHUNK)
        while n := conn.recv_into(buf):
            tally.add(n)
    return tally.result()


def receive_paced(host: str, max_wait: float) -> dict[str, float]:
    """As :func:`receive`, reading Noise-framed messages with the daemon's reader."""
    import trio  # only here: the plain probe runs without them
    from distro_node.protocol.noise_reads import PacedNoiseReader, install_noise_reads
    from libp2p.io.exceptions import IncompleteReadError
    from libp2p.io.trio import TrioTCPStream
    from libp2p.network.connection.raw_connection import RawConnection

    async def run() -> dict[str, float]:
        install_noise_reads(max_wait)
        listeners = await trio.open_tcp_listeners(0, host=host)
        print(json.dumps({"port": listeners[0].socket.getsockname()[1]}), flush=True)
        with trio.fail_after(ACCEPT_TIMEOUT_S):
            stream = await listeners[0].accept()
        reader = PacedNoiseReader(RawConnection(TrioTCPStream(stream), initiator=False))
        tally = _Tally()
        for _ in range(MAX_MESSAGES):
            try:
                with trio.fail_after(IDLE_TIMEOUT_S):
                    message = await reader.read_msg()
            except IncompleteReadError:
                break  # the sender is done (it stops at a message's end)
            tally.add(len(message) + 2)
        await stream.aclose()
        for listener in listeners:
            await listener.aclose()
        return tally.result()

    return trio.run(run)


def send(host: str, port: int, seconds: float, connect_timeout: float) -> None:
    data = (MESSAGE.to_bytes(2, "big") + bytes(MESSAGE)) * (CHUNK // (2 + MESSAGE))
    with socket.create_connection((host, port), timeout=connect_timeout) as conn:
        conn.settimeout(IDLE_TIMEOUT_S)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            conn.sendall(data)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "recv":
        print(json.dumps(receive(argv[1])), flush=True)
        return 0
    if len(argv) == 3 and argv[0] == "recv-paced":
        print(json.dumps(receive_paced(argv[1], float(argv[2]))), flush=True)
        return 0
    if len(argv) in (4, 5) and argv[0] == "send":
        send(argv[1], int(argv[2]), float(argv[3]), float(argv[4]) if len(argv) == 5 else IDLE_TIMEOUT_S)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
