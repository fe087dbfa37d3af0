"""What one peer process chooses for itself, outside the run manifest: device, precision, gradient
accumulation and where its copies of the data file and of an imported starting checkpoint live.

None of these may change what the run computes together: the device and precision only change how this peer's
own gradient is taken (its payload is its own business; the replicated update runs on CPU, see trainer.py),
gradient accumulation splits the manifest's batch without changing it, and the data path and the imported
checkpoint directory must lead to the bytes (the weights) the manifest's sha256 names. So peers with
different choices still train one run with one run id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from distro_node.node.config.load import NodeConfig
from distro_node.node.config.run import DataConfig

from ..device import AUTO_ORDER, select_device, select_precision

RESOLVED_PRECISIONS: tuple[str, ...] = ("fp32", "bf16")


class LocalSetupError(ValueError):
    """A local setting does not fit the run this peer joined (``field`` names the setting, e.g.
    ``run.grad_accum`` or ``run.data.path``). Found when the trainer is built, for joiners after the
    manifest arrived; the node reports it and exits instead of training wrongly."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


@dataclass(frozen=True)
class LocalSettings:
    """Resolved local choices (``auto`` already turned into a concrete device and precision)."""

    device: str = "cpu"
    precision: str = "fp32"
    grad_accum: int = 1
    data_path: Path | None = None
    init_from: Path | None = None
    # A joiner without the prepared dataset fetches shards into a cache of at most this many bytes.
    data_cache_bytes: int = DataConfig().cache_bytes

    def __post_init__(self) -> None:
        if self.device not in AUTO_ORDER:
            raise LocalSetupError("device", f"must be one of {AUTO_ORDER} once resolved, got {self.device!r}")
        if self.precision not in RESOLVED_PRECISIONS:
            raise LocalSetupError("precision", f"must be one of {RESOLVED_PRECISIONS} once resolved, "
                                               f"got {self.precision!r}")
        if type(self.grad_accum) is not int or self.grad_accum < 1:
            raise LocalSetupError("run.grad_accum", f"must be an int >= 1, got {self.grad_accum!r}")

    @classmethod
    def from_config(cls, config: NodeConfig, available: Mapping[str, bool] | None = None) -> LocalSettings:
        """Resolve the config's device and precision on this machine (``available``: probe when None);
        a device that is not here is a ``DeviceUnavailableError`` naming ``device``."""
        device = select_device(config.device, available)
        return cls(device=device, precision=select_precision(config.precision, device),
                   grad_accum=config.run.grad_accum, data_path=config.run.data.path,
                   init_from=config.run.init_from, data_cache_bytes=config.run.data.cache_bytes)

    def micro_batch(self, batch_size: int) -> int:
        """Sequences per micro-batch: the run's per-peer batch split ``grad_accum`` ways, evenly, so every
        micro-batch weighs the same and the averaged gradient is the whole batch's."""
        if batch_size % self.grad_accum:
            raise LocalSetupError("run.grad_accum", f"{self.grad_accum} does not divide the run's batch_size "
                                                    f"{batch_size}")
        return batch_size // self.grad_accum
