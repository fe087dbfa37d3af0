"""Install a Debian package that a test or bench needs, when its tools are missing: Prometheus for the
metrics tests, nftables for the NAT routers of the namespace testbed.

Why the tests install them instead of skipping: CI runs on a fresh machine as root with Debian's registry
reachable, and a test that skips there proves nothing. The install runs at most once per package and
process, only as root with apt-get present; every failure is returned as the reason, for a skip, so the
suite still runs on a developer laptop. Installs are serialised over processes by a lock file (the suite's
workers collect the same modules at once, and a second apt-get would fail on dpkg's lock).
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

APT_TIMEOUT_S = 600.0
_LOCK = Path(tempfile.gettempdir()) / "distro-node-apt.lock"
_LOCK_POLL_S = 0.5


def install_missing(tools: tuple[str, ...], package: str) -> str | None:
    """None once every tool in ``tools`` is on PATH (installing ``package`` if needed), else why not."""
    if all(shutil.which(t) for t in tools):
        return None
    return _install(tools, package)


@functools.cache
def _install(tools: tuple[str, ...], package: str) -> str | None:
    hint = f"install Debian's {package!r} package (apt-get install -y {package})"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return f"{'/'.join(tools)} not found and not running as root: {hint}"
    if not shutil.which("apt-get"):
        return f"{'/'.join(tools)} not found and apt-get is not available: {hint}"
    with _LOCK.open("a") as lock:
        wait_s = 2 * APT_TIMEOUT_S  # another process's install: at most two apt-get runs
        deadline = time.monotonic() + wait_s
        while True:  # bounded by the deadline
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return f"another process held {_LOCK} for {wait_s:.0f} s: {hint}"
                time.sleep(_LOCK_POLL_S)
        if all(shutil.which(t) for t in tools):
            return None  # installed by the process that held the lock
        return _apt_install(tools, package)


def _apt_install(tools: tuple[str, ...], package: str) -> str | None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", package]):
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(command)} failed: {exc}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return f"{' '.join(command)} exited with {done.returncode}: {' | '.join(tail)}"
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        return f"the {package!r} package installed but {', '.join(missing)} still not on PATH"
    return None
