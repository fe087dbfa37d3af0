"""One piece fetch's limit follows the run's rounds (node/peer/payload_exchange.py): a limit shorter than the
time a round can still use the payload cuts slow lines' fetches off and starts them over."""

from __future__ import annotations

from distro_node.node.config.schema import NetworkConfig
from distro_node.node.peer.payload_exchange import piece_fetch_timeout
from distro_node.protocol.consensus.config import RoundConfig
from distro_node.protocol.pieces_wire import PiecesConfig

RUN = bytes.fromhex("ab" * 32)
APPLY = NetworkConfig().apply_timeout_seconds


def test_default_rounds_keep_the_protocols_default_limit() -> None:
    rounds = RoundConfig(run_id=RUN, collect_timeout=10.0, leader_timeout=2.0, apply_timeout=APPLY)
    assert piece_fetch_timeout(rounds) == PiecesConfig.fetch_timeout


def test_rounds_lengthened_for_slow_lines_lengthen_the_fetch() -> None:
    rounds = RoundConfig(run_id=RUN, collect_timeout=200.0, leader_timeout=2.0, apply_timeout=APPLY)
    assert piece_fetch_timeout(rounds) == 200.0 + 2.0 + APPLY
