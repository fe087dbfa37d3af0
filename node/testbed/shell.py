"""Running the testbed's ip, tc and nft commands: one place for how they are called and how they fail."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence


class NetnsError(RuntimeError):
    """A namespace, link, qdisc or firewall command failed; ``command`` is the argv that failed."""

    def __init__(self, command: Sequence[str], detail: str) -> None:
        super().__init__(f"{' '.join(command)}: {detail}")
        self.command = list(command)


def run(argv: Sequence[str], check: bool = True) -> str:
    """Run one command (30 s at most); its stdout, or NetnsError naming it when ``check`` and it failed."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(argv, proc.stderr.strip() or f"exit {proc.returncode}")
    return proc.stdout
