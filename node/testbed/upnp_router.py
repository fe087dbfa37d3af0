"""A home router offering UPnP IGD for the namespace testbed: Debian's miniupnpd in a NAT router namespace.

Why: node/peer/upnp.py asks the router to forward our port, and only a real IGD shows that the request,
the mapping and the dial-back confirmation fit together. The NAT router (node/testbed/nat.py, kind ``drop``)
keeps its rules; miniupnpd gets a table of its own whose chains it fills with one DNAT rule (and a forward
accept) per mapping. The router's forward chain already accepts DNAT'd connections (``ct status dnat``).

miniupnpd refuses to map anything when its WAN address is in a private or reserved range (the mapping could
not be reached from the internet), so a network built for it uses ``netns.PUBLIC_LOOKING_SUBNET``.

Needs ``miniupnpd`` (Debian's package; the nftables backend) besides what nat.py needs; the test installs
it through node/testbed/debian.py. The daemon runs in the foreground (``-d``) so it is stopped by its pid.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
import uuid
from collections import deque
from pathlib import Path

from .nat import LAN_IF, WAN_IF
from .shell import NetnsError, run

TABLE = "miniupnpd"
READY_LINE = "HTTP listening on port"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0

_RULES = f"""table inet {TABLE} {{
    chain forward_miniupnpd {{
    }}
    chain prerouting_miniupnpd {{
    }}
    chain postrouting_miniupnpd {{
    }}
    chain forward {{
        type filter hook forward priority filter; policy accept;
        jump forward_miniupnpd
    }}
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        jump prerouting_miniupnpd
    }}
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        jump postrouting_miniupnpd
    }}
}}
"""


def config(lan_prefix: str) -> str:
    """miniupnpd.conf: IGD on the LAN side only, no NAT-PMP, mappings only for the LAN's high ports."""
    return f"""ext_ifname={WAN_IF}
listening_ip={LAN_IF}
http_port=0
enable_natpmp=no
enable_upnp=yes
secure_mode=yes
system_uptime=yes
uuid={uuid.uuid4()}
upnp_table_name={TABLE}
upnp_nat_table_name={TABLE}
upnp_forward_chain=forward_miniupnpd
upnp_nat_chain=prerouting_miniupnpd
upnp_nat_postrouting_chain=postrouting_miniupnpd
allow 1024-65535 {lan_prefix} 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
"""


class UpnpRouter:
    """miniupnpd running in ``router`` (a namespace); use as a context manager or call :meth:`stop`."""

    def __init__(self, router: str, lan_prefix: str) -> None:
        self.router = router
        self._dir = tempfile.TemporaryDirectory(prefix="miniupnpd-")
        folder = Path(self._dir.name)
        (folder / "rules.nft").write_text(_RULES)
        (folder / "miniupnpd.conf").write_text(config(lan_prefix))
        self.log: deque[str] = deque(maxlen=200)
        self._ready = threading.Event()
        try:
            run(["ip", "netns", "exec", router, "nft", "-f", str(folder / "rules.nft")])
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", router, "miniupnpd", "-d", "-f", str(folder / "miniupnpd.conf"),
                 "-P", str(folder / "miniupnpd.pid")],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        except BaseException:
            self._dir.cleanup()
            raise
        threading.Thread(target=self._drain, daemon=True).start()
        if not self._ready.wait(START_TIMEOUT_S):
            self.stop()
            raise NetnsError(["miniupnpd"], f"not ready within {START_TIMEOUT_S:g}s: "
                                            f"{' | '.join(list(self.log)[-5:])}")

    def _drain(self) -> None:
        """Read the daemon's debug output to the end (a full pipe would stall it), noting when it serves."""
        stream = self.proc.stderr
        if stream is None:
            return
        for line in stream:
            self.log.append(line.rstrip())
            if READY_LINE in line:
                self._ready.set()

    def mappings(self) -> list[str]:
        """The DNAT rules miniupnpd holds now (one per mapping)."""
        listed = run(["ip", "netns", "exec", self.router, "nft", "list", "chain", "inet", TABLE,
                      "prerouting_miniupnpd"])
        return [line.strip() for line in listed.splitlines() if "dnat" in line]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        self._dir.cleanup()

    def __enter__(self) -> UpnpRouter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
