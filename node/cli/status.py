"""`distro-node status`: what the node running on this machine is doing, read from its metrics endpoint.

The URL defaults to the config's ``metrics.host``/``metrics.port`` (the config is found as for every other
command), so on the node's machine ``distro-node status`` needs no flags. Exit code 0 with the status, 1 when
no node answers or the endpoint is not a node's, 2 for a bad ``--url``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from distro_node.node.cli.common import UsageError, config_path
from distro_node.node.cli.status_scrape import DEFAULT_TIMEOUT, NodeStatus, StatusError, check_url, scrape
from distro_node.node.config.load import load_config
from distro_node.node.doctor.report import human_bytes, human_seconds

_REACHABILITY = {
    "public": "public: two peers dialed this node back on a fresh connection",
    "private": "private: peers could not dial this node back (behind a NAT or firewall)",
    "unknown": "unknown: fewer than two peers have answered a dial-back probe yet",
}

def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="show what the running node is doing (step, loss, peers, bytes, phase times, rejections)",
        description=(
            "Read the running node's Prometheus endpoint and print its step, loss, peers and the trust "
            "assumption (votes a step needs, lying peers tolerated), payload bytes sent "
            "and received, step and phase times, closed rounds, rejected payloads by reason, banned peers, "
            "weights-hash agreement and bandwidth reduction. Exit code 1 when no node answers."
        ),
    )
    p.add_argument(
        "--url", default=None,
        help="metrics URL (default http://<metrics.host>:<metrics.port>/metrics from the config, "
        "http://127.0.0.1:9400/metrics with no config)",
    )
    p.add_argument(
        "--config", type=Path, default=None, metavar="PATH",
        help="config file to take metrics.host/port from (default $DISTRO_NODE_CONFIG, else "
        "./distro-node.toml if present)",
    )
    p.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
        help=f"seconds to wait for the whole answer (default {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=run)


def url_from_config(config_file: Path | None) -> tuple[str, str]:
    """(URL, how it was found) from ``metrics.host``/``metrics.port``. A wildcard bind address is reached
    through loopback, the way the node's own machine sees it."""
    config = load_config(config_path(config_file))
    host = config.metrics.host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and ip.is_unspecified:
        host = "::1" if ip.version == 6 else "127.0.0.1"
    if ip is not None and ip.version == 6:
        host = f"[{ipaddress.ip_address(host)}]"
    where = f"metrics.host={config.metrics.host}, metrics.port={config.metrics.port}"
    if not config.metrics.enabled:
        where += ", and metrics.enabled = false: the node serves no metrics"
    return f"http://{host}:{config.metrics.port}/metrics", where


def _ratio(value: float | None, fmt: str) -> str:
    return "not reported yet" if value is None else fmt.format(value)


def render(url: str, st: NodeStatus, now: float) -> str:
    up = f", up {human_seconds(now - st.started_unix)}" if st.started_unix else ""
    lines = [f"node at {url} (distro-node {st.version or '?'}{up})"]

    def row(name: str, value: str) -> None:
        lines.append(f"  {name:<21}{value}")

    if not st.steps_observed:
        row("step", "no step completed yet")
    else:
        row("step", f"{st.step}")
        row("loss", f"{st.loss:.4f}" if st.loss is not None else "-")
        row("step time", f"{human_seconds(st.step_mean_seconds or 0.0)} mean over {st.steps_observed} steps")
        phases = ", ".join(
            f"{name} {human_seconds(p.mean_seconds or 0.0)}" for name, p in st.phases.items()
        )
        row("phases (mean)", phases or "-")
    row("tokens trained", f"{st.tokens:,}")
    if st.data_shards:
        epoch = f", epoch {st.data_epoch:.3f}" if st.data_epoch is not None else ""
        row("data", f"{st.data_shards_cached} of {st.data_shards} train shards held{epoch}; fetched "
                    f"{st.data_shards_fetched} ({human_bytes(st.data_bytes_fetched)}), faulty servers "
                    f"{st.blob_faulty}")
    row("peers", f"{st.peers}")
    if st.isolated_seconds:
        row("connections", f"none for {human_seconds(st.isolated_seconds)}: redialing known peers until one "
                           "answers")
    if st.vote_quorum:
        row("trust", f"a step needs {st.vote_quorum} signed votes; safe while at most {st.faults_tolerated} "
                     f"of {st.peers} peers lie")
    row("admission", "permissioned: only the founder and holders of its tickets are served and heard"
        if st.permissioned else "open: anyone may join (after a warm-up, without a vote until active)")
    row("reachability", _REACHABILITY.get(st.reachability, st.reachability))
    if any(st.connections.values()) or st.relay_reservations:
        kinds = ", ".join(f"{n} {kind}" for kind, n in st.connections.items())
        row("connections", f"{kinds}; reachable through {st.relay_reservations} relay(s)")
    row("payload sent", human_bytes(st.sent_bytes))
    row("payload received", human_bytes(st.received_bytes))
    row("rounds", ", ".join(f"{k} {v}" for k, v in st.rounds.items()) or "-")
    row("rejected payloads", ", ".join(f"{k} {v}" for k, v in sorted(st.rejected.items())) or "none")
    row("banned peers", f"{st.banned}")
    row("weights agreement", _ratio(st.weights_agreement_ratio, "{:.1%} of announcing peers agree"))
    row("bandwidth reduction", _ratio(st.bandwidth_reduction_ratio, "{:,.0f}x less than dense bf16"))
    if st.checkpoints and st.last_checkpoint_unix:
        when = datetime.fromtimestamp(st.last_checkpoint_unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        row("checkpoints", f"{st.checkpoints}, last {when}")
    else:
        row("checkpoints", f"{st.checkpoints}")
    if st.resident_bytes is not None:
        row("memory (RSS)", human_bytes(st.resident_bytes))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.url is not None:
        try:
            url = check_url(args.url)
        except ValueError as exc:
            raise UsageError("--url", str(exc)) from None
        where = "the node's endpoint is set by metrics.host and metrics.port in its config"
    else:
        url, where = url_from_config(args.config)
    if not args.timeout > 0:
        raise UsageError("--timeout", f"must be > 0, got {args.timeout}")
    try:
        status = scrape(url, args.timeout)
    except StatusError as exc:
        if exc.unreachable:
            message = f"no node answering at {url}: is `distro-node join` running? {where} ({exc})"
            print(message, file=sys.stderr)
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"url": url, **status.to_dict()}, indent=1))
    else:
        print(render(url, status, time.time()))
    return 0
