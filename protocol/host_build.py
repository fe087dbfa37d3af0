"""Building the py-libp2p host under ``P2PHost`` (host.py): which channel it speaks, and what it never does.

py-libp2p 0.8.1's ``new_host`` offers Noise, TLS, SECIO and *plaintext* by default and mplex next to yamux;
we pin exactly Noise + yamux so no peer can negotiate us down to an unauthenticated or weaker channel.
"""

from __future__ import annotations

from typing import cast

from libp2p import new_host
from libp2p.abc import IHost, IMuxedConn
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from multiaddr import Multiaddr

from .muxer_guard import GuardedYamux, install_muxer_guard
from .noise_reads import install_noise_reads
from .pubsub_records import install_record_cache
from .stream_select import OneWriteSelect


def build_libp2p_host(key_pair: KeyPair, listen: list[Multiaddr], read_pace_max_wait: float) -> IHost:
    install_muxer_guard()
    install_noise_reads(read_pace_max_wait)
    install_record_cache()
    noise = NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)
    host = new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: noise},
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): cast(type[IMuxedConn], GuardedYamux)},
        listen_addrs=listen,
        enable_mDNS=False,
        enable_upnp=False,
    )
    # py-libp2p 0.8.1's AutoConnector dials every address in the peerstore whenever there are fewer than
    # ~150 connections, including the ephemeral source ports of inbound connections, which never listen
    # (soak: 252 failed dials on the bootstrap peer in 200 rounds). Its target is the midpoint of the
    # watermarks, which no ConnectionConfig can set to "never" without also pruning every connection, so
    # its check is replaced on this host's instance; peer exchange does our dialing.
    connector = getattr(host.get_network(), "auto_connector", None)  # the swarm's, not in INetwork
    if connector is not None:
        connector.maybe_connect = _no_auto_dials
    # Streams we open negotiate their protocol in one write (stream_select.py); BasicHost keeps its client
    # on the instance, as it does the connector above.
    if hasattr(host, "multiselect_client"):
        host.multiselect_client = OneWriteSelect()
    return host


async def _no_auto_dials() -> None:
    return None
