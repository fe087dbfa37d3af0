"""Loss plots as PNG, shared by the demo command and the benchmarks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def plot_losses(
    curves: Mapping[str, Sequence[tuple[int, float]]],
    path: Path,
    *,
    title: str,
    floor: float | None = None,
    ylabel: str = "loss (nats/token)",
) -> Path:
    """Write one line per curve (label -> [(step, loss)]) and the data's loss floor, if known."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, points in curves.items():
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, label=label, linewidth=1.4)
    if floor is not None:
        ax.axhline(floor, color="gray", linestyle="--", linewidth=1, label=f"loss floor {floor:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
