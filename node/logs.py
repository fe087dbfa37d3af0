"""Process-wide logging: one stderr handler, in the format the operator chose, at the configured level.

Why here and not left to each library: py-libp2p logs routine events (a stream closed by the peer, a
protocol the peer does not speak) at WARNING and ERROR, often with a full traceback, so an unconfigured
daemon printed multi-line stacks that looked like crashes, in plain text even when the operator asked for
JSON. So every record, ours and third-party, goes through the one handler installed here; third-party
records are held to ``ERROR`` whatever the level (py-libp2p at DEBUG or INFO is thousands of lines a minute
that say nothing about our run) and shown without their traceback unless the level is ``debug``. Our own
records keep their tracebacks: they are real faults.

stdout stays the daemon's event stream (one step line or JSON object per event, node/peer/output.py); log
records go to stderr, so tools reading events never see a log line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import TextIO

OUR_LOGGER = "distro_node"
# Third-party libraries whose WARNING-level records are routine for a peer-to-peer daemon.
NOISY = ("libp2p", "multiaddr", "trio", "async_service", "asyncio")
LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_HANDLER_MARK = "_distro_node_handler"
# py-libp2p's reports of failures that reach our code as exceptions: (logger, message prefix).
_HANDLED_FAILURES = (
    ("libp2p.host.basic_host", "Failed to open stream to peer"),  # multi-line, names lock statistics
    ("libp2p.transport.tcp.tcp", "Failed to open TCP stream"),  # a dial that failed: our DialError
)


class LogSetupError(ValueError):
    """An unknown level or format name; the message names it."""


class _ThirdParty(logging.Filter):
    """Keeps other libraries' records to one line: the exception's type and text instead of its stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == OUR_LOGGER or record.name.startswith(OUR_LOGGER + "."):
            return True
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(exc).__name__}: {exc})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        record.stack_info = None
        return True


class _HandledByUs(logging.Filter):
    """Drops py-libp2p's ERROR report of a failure that reaches our code as an exception (a stream that
    could not be opened, a dial that failed) unless debugging: the exception says what it means (a peer that
    does not speak the protocol, a peer that left) and is logged there at the right level. Seen when a peer
    is asked for a protocol before identify has told us it is not a member, and as peers leave."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(self.prefix):
            return logging.getLogger(OUR_LOGGER).isEnabledFor(logging.DEBUG)
        return True


def _adopt_libp2p_logs() -> None:
    """py-libp2p, when imported without LIBP2P_DEBUG, detaches its logger (no handler, no propagation), so
    its warnings and errors went to Python's last-resort handler: plain lines on stderr among our JSON.
    Import it here (the daemon needs it anyway) and send its records through our handler like any other
    library's. With LIBP2P_DEBUG set, py-libp2p's own logging is what the user asked for and is left alone."""
    if os.environ.get("LIBP2P_DEBUG"):
        return
    try:
        import libp2p  # noqa: F401 (the import is what detaches the logger)
    except ImportError:
        return
    logging.getLogger("libp2p").propagate = True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, matching the daemon's ``--log-format json`` event lines."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "event": "log",
            "time": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def _formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        text = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
        text.converter = time.localtime
        return text
    raise LogSetupError(f"log format must be text or json, got {fmt!r}")


def configure_logging(level: str, fmt: str, stream: TextIO | None = None) -> logging.Handler:
    """Install the one handler on the root logger (replacing one installed earlier by this function, so
    calling it twice, as tests do, never doubles lines). Returns the handler."""
    if level not in LEVELS:
        raise LogSetupError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_formatter(fmt))
    handler.addFilter(_ThirdParty())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = LEVELS[level]
    root.setLevel(numeric)
    logging.getLogger(OUR_LOGGER).setLevel(numeric)
    for name in NOISY:
        logging.getLogger(name).setLevel(max(numeric, logging.ERROR))
    _adopt_libp2p_logs()
    for name, prefix in _HANDLED_FAILURES:
        source = logging.getLogger(name)
        if not any(isinstance(f, _HandledByUs) for f in source.filters):
            source.addFilter(_HandledByUs(prefix))
    logging.captureWarnings(True)
    return handler
