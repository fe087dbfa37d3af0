"""`distro-node init [PATH]`: write a commented run config for the operator to edit.

The file is rendered from the config dataclasses (``render_toml``), so every key it shows is one the loader
accepts, and it is loaded back before it is put in place: a file ``init`` writes always starts a node. The
pre-fill flags go through ``load_config`` like any flag, so a bad value is refused with the field it sets
(``run.model: unknown model preset ...``) before anything touches the disk. The environment is deliberately
ignored: ``DISTRO_NODE_*`` variables of this shell should not be baked into a file meant for other machines.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from distro_node.node.cli.common import DEFAULT_CONFIG_NAME, UsageError
from distro_node.node.config.load import NodeConfig, load_config, render_toml
from distro_node.node.config.schema import DEVICES
from distro_node.node.presets import PRESETS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="write a commented config file to edit (default ./distro-node.toml)",
        description=(
            "Write a commented TOML config with every setting at its default, or at the value given by the "
            "flags below. The file is checked by loading it back before it is put in place. An existing file "
            "is never replaced unless --force is given. Other commands read ./distro-node.toml when no "
            "--config is given."
        ),
    )
    p.add_argument(
        "path", nargs="?", type=Path, default=Path(DEFAULT_CONFIG_NAME),
        help=f"where to write the config (default ./{DEFAULT_CONFIG_NAME}); missing folders are created",
    )
    p.add_argument("--force", action="store_true", help="replace PATH if it already exists")
    p.add_argument(
        "--preset", default=None, metavar="NAME",
        help=f"run.model: model preset ({' | '.join(PRESETS)}; default tiny)",
    )
    p.add_argument(
        "--strategy", default=None, metavar="NAME",
        help="run.strategy: optimizer (distro | adamw | diloco | cocktail; default distro); its settings "
        "table is written with that strategy's defaults",
    )
    p.add_argument(
        "--device", default=None, metavar="DEVICE", help=f"device: {' | '.join(DEVICES)} (default auto)"
    )
    p.add_argument(
        "--listen", action="append", default=None, metavar="MULTIADDR",
        help="network.listen: address to listen on, repeatable (default /ip4/0.0.0.0/tcp/4747)",
    )
    p.add_argument(
        "--bootstrap", action="append", default=None, metavar="MULTIADDR",
        help="network.bootstrap: a peer of the run to join through, ending in /p2p/<peer id>; repeatable "
        "(default none: this node founds a new run)",
    )
    p.add_argument(
        "--metrics-port", type=int, default=None, metavar="PORT",
        help="metrics.port: Prometheus endpoint port, 0 = any free port (default 9400)",
    )
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    """Defaults plus the pre-fill flags, validated; ConfigFieldError names the field a bad flag sets."""
    flags: dict[str, object] = {
        "run.model": args.preset,
        "run.strategy": args.strategy,
        "device": args.device,
        "network.listen": tuple(args.listen) if args.listen else None,
        "network.bootstrap": tuple(args.bootstrap) if args.bootstrap else None,
        "metrics.port": args.metrics_port,
    }
    return load_config(None, env={}, flags=flags)


def write_config(path: Path, config: NodeConfig, *, force: bool) -> None:
    """Render, verify by loading back, then place the file: by hard link when it must not replace anything
    (the link fails if the name exists, with no window between check and write), by rename with ``force``.
    Either way a reader never sees a half-written file."""
    if path.exists() and not force:
        raise UsageError("path", f"{path} already exists; pass --force to replace it")
    if path.is_dir():
        raise UsageError("path", f"{path} is a directory; give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make a plain settings file unreadable to others
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(render_toml(config))
            fh.flush()
            os.fsync(fh.fileno())
        if load_config(tmp, env={}) != config:
            raise RuntimeError("the rendered config does not load back equal (a bug in config_render)")
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise UsageError("path", f"{path} already exists; pass --force to replace it") from None
    finally:
        tmp.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    write_config(args.path, config, force=args.force)
    print(f"wrote {args.path} (preset {config.run.model}, strategy {config.run.strategy})")
    print(f"next: edit it, then `distro-node doctor --config {args.path}` to check this machine")
    return 0
