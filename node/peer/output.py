"""What a peer prints: one line per event, human text or JSON lines (``--log-format json``).

The JSON form is the interface tests and the local swarm launcher read, so its field names are stable:
every line is an object with an ``event`` field; see ``docs/architecture.md`` ("peer output").
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

FORMATS = ("text", "json")


class Output:
    def __init__(self, fmt: str = "text", stream: TextIO | None = None) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
        self.fmt = fmt
        self.stream = stream or sys.stdout
        self.start = time.monotonic()

    def emit(self, event: str, text: str, **fields: Any) -> None:
        if self.fmt == "json":
            line = json.dumps({"event": event, "t": round(time.monotonic() - self.start, 3), **fields},
                              separators=(",", ":"), default=str)
        else:
            line = text
        try:
            print(line, file=self.stream, flush=True)
        except (BrokenPipeError, ValueError):
            pass  # our reader went away; training goes on


def step_text(f: dict[str, Any]) -> str:
    loss = "  -   " if f["loss"] is None else f"{f['loss']:.4f}"
    phases = " ".join(f"{k} {v * 1000:.0f}ms" for k, v in f["phases"].items())
    return (
        f"step {f['step']:>5}  loss {loss}  peers {f['included']}/{f['roster']}  "
        f"sent {f['sent_bytes'] / 1e3:.1f} kB  recv {f['recv_bytes'] / 1e3:.1f} kB  "
        f"round {f['round_s']:.2f}s  [{phases}]  weights {f['weights_hash'][:12]}"
    )
