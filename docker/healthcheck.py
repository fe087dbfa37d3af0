"""Container health check: exit 0 when this node's /metrics answers with distro_ metrics, else 1.

Run by the image's HEALTHCHECK, with the standard library only (a health check must not depend on the
package importing cleanly). The port comes from DISTRO_NODE_METRICS__PORT when set, else 9400, the image's
configured port; a node that moved its port in a mounted config file should set the variable too.
"""

from __future__ import annotations

import os
import sys
import urllib.request

DEFAULT_PORT = 9400
TIMEOUT_SECONDS = 4.0  # under the HEALTHCHECK --timeout, so a hung node reports unhealthy, not a timeout


def check(port: int, host: str = "127.0.0.1") -> str | None:
    """None when healthy, else why not."""
    url = f"http://{host}:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
            body = response.read(1 << 20)  # a few KiB expected; a cap, not a size
    except OSError as exc:  # URLError, refused, timeout, reset
        return f"{url}: {exc}"
    if b"distro_build_info" not in body:
        return f"{url}: answered, but not with distro-node metrics"
    return None


def main() -> int:
    text = os.environ.get("DISTRO_NODE_METRICS__PORT", "").strip()
    try:
        port = int(text) if text else DEFAULT_PORT
    except ValueError:
        print(f"unhealthy: DISTRO_NODE_METRICS__PORT={text!r} is not a port", file=sys.stderr)
        return 1
    problem = check(port)
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
