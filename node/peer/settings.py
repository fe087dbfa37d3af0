"""How `distro-node join` turns its three config layers into the daemon's settings.

Layers: config file (``--config`` / ``$DISTRO_NODE_CONFIG``) < ``DISTRO_NODE_*`` environment < flags, through
``node.config.load_config`` so every bad value is a ``ConfigLoadError`` naming its dotted field.

Why a fourth, lowest layer (``LOCAL_DEFAULTS``): the node config's defaults describe a production daemon
(listen on 0.0.0.0:4747, metrics on 9400, identity under ~/.distro-node). `join` run by hand or by tests
without any config must keep working as it always did: several peers on one machine, each on loopback with a
free port, a fresh identity, and nothing written to the home directory; a peer joining through a bootstrap
peer on another machine listens on all interfaces (any free port) instead, since it takes part beyond this
machine. So a field that no layer sets falls back to the local default below; a field set anywhere (file,
env, flag) is honoured as set. ``data_dir`` follows the same rule: unset means "no persistent state" (no
identity file, no checkpoints).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from distro_node.node.config.load import ConfigFieldError, NodeConfig, load_config
from distro_node.node.config.sources import read_env, read_toml, sources
from distro_node.optimizer.config import ScheduleConfig
from distro_node.protocol.identity import load_or_create_identity, peer_id_of

from .manifest import ManifestError, RoundSettings, RunManifest
from .reach_addrs import default_listen
from .run_data import founder_data_spec
from .run_init import INIT_FIELD, founder_init_spec

# Fields no layer set take these values (see the module docstring for why); ``network.listen`` follows the
# bootstrap peers instead (reach_addrs.default_listen: all interfaces when they are on other machines).
LOCAL_DEFAULTS: dict[str, Any] = {
    "metrics.port": 0,
}
# Sign updates on the small presets want a far larger step than the optimizer's 1.2B default
# (node/cli/simulate.py DEMO_DISTRO_LR); used when no layer sets a DisTrO learning rate.
DEMO_DISTRO_LR = 3e-3


@dataclass(frozen=True)
class JoinSettings:
    """The loaded config plus what join derives from it."""

    config: NodeConfig
    explicit: frozenset[str]  # dotted fields some layer set
    data_dir: Path | None  # None: no persistent state
    key_file: Path | None  # None: a fresh identity per process
    checkpoint_dir: Path | None  # None: checkpoints off


def explicit_fields(path: Path | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> frozenset[str]:
    """Dotted names of every field the file, the environment or a (non-None) flag sets."""
    names: set[str] = set()
    if path is not None:
        try:
            names |= set(sources(read_toml(path)))
        except ValueError:
            pass  # load_config reports the file error itself, with its line number
    names |= set(sources(read_env(env)))
    names |= {k for k, v in flags.items() if v is not None}
    return frozenset(names)


def load_join_settings(
    path: Path | None, flags: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> JoinSettings:
    """Load and validate; raises ``ConfigLoadError`` (a ValueError: exit 2) naming the field."""
    env = os.environ if env is None else env
    if path is None and env.get("DISTRO_NODE_CONFIG"):
        path = Path(env["DISTRO_NODE_CONFIG"])
    explicit = explicit_fields(path, env, flags)
    layered = {k: v for k, v in LOCAL_DEFAULTS.items() if k not in explicit}
    layered.update({k: v for k, v in flags.items() if v is not None})
    config = load_config(path, env=env, flags=layered)
    if "network.listen" not in explicit:
        listen = default_listen(config.network.bootstrap)
        config = replace(config, network=replace(config.network, listen=listen))
    data_dir = config.data_dir.expanduser() if "data_dir" in explicit else None
    key_file = config.key_file if data_dir is not None or "network.key_file" in explicit else None
    checkpoint_dir: Path | None = None
    if config.checkpoint.enabled and (data_dir is not None or "checkpoint.dir" in explicit):
        checkpoint_dir = config.checkpoint_dir
    return JoinSettings(config, explicit, data_dir, key_file, checkpoint_dir)


def founder_manifest(settings: JoinSettings, rounds: RoundSettings | None = None) -> RunManifest:
    """The manifest a founder creates from the ``[run]`` table.

    The strategy settings go into the manifest only when some layer set them (so a run's id does not change
    with every new optimizer default); a DisTrO run without a learning rate gets ``DEMO_DISTRO_LR``, also
    when other schedule fields (warmup, cosine horizon) are set. A data file is hashed here (sha256 and size
    go into the manifest, the path stays local); ``run.grad_clip`` becomes the manifest's ``grad_clip`` and
    ``[run.rounds]`` its ``rounds`` (unless ``rounds`` is given). With ``run.init_from`` the checkpoint
    directory is read and hashed here: its config.json becomes the model shape (so setting ``run.model`` as
    well is refused) and its weights hash the manifest's ``init``.
    """
    run = settings.config.run
    init = founder_init_spec(run.init_from)
    if init.kind != "seed" and "run.model" in settings.explicit:
        raise ConfigFieldError("run.model", f"cannot be combined with {INIT_FIELD}: the imported config.json "
                                            "sets the model shape")
    if rounds is None:
        rounds = RoundSettings.from_config(run.rounds)
    strategy_settings: dict[str, Any] = {}
    if any(name.startswith("run.strategy_settings") for name in settings.explicit):
        strategy_settings = asdict(run.strategy_settings) if run.strategy_settings is not None else {}
    if run.strategy == "distro" and "run.strategy_settings.schedule.lr" not in settings.explicit:
        schedule = dict(strategy_settings.get("schedule") or asdict(ScheduleConfig()))
        schedule["lr"] = DEMO_DISTRO_LR
        strategy_settings["schedule"] = schedule
    try:
        return RunManifest.found(preset=run.model if init.kind == "seed" else "", strategy=run.strategy,
                                 settings=strategy_settings, batch_size=run.batch_size, seq_len=run.seq_len,
                                 seed=run.seed, data_seed=run.data.seed, grad_clip=run.grad_clip,
                                 data=founder_data_spec(run.data), init=init, rounds=rounds,
                                 founder=_founder_id(settings), genesis=_genesis_id(settings))
    except ManifestError as exc:
        name = "strategy_settings" if exc.field == "settings" else exc.field
        raise ConfigFieldError(f"run.{name}", str(exc)) from None


def _genesis_id(settings: JoinSettings) -> str:
    """An open run founded with a kept key names it as the root of its chain of attested rosters; a fresh
    identity per process would name a peer that is gone after a restart, so it names none."""
    if settings.config.run.admission == "permissioned" or settings.key_file is None:
        return ""
    return str(peer_id_of(load_or_create_identity(settings.key_file)))


def _founder_id(settings: JoinSettings) -> str:
    """A permissioned run names its founder's peer id; the key must be kept (a file), since every ticket the
    founder issues is checked against it for the whole run."""
    if settings.config.run.admission != "permissioned":
        return ""
    if settings.key_file is None:
        raise ConfigFieldError("network.key_file", "a permissioned run's founder needs a key file (or a data "
                                                   "dir): its tickets are signed by that key")
    return str(peer_id_of(load_or_create_identity(settings.key_file)))
