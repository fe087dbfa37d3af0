"""The one error type every codec and validation failure raises."""

from __future__ import annotations

# Bounded set of reasons: they become a Prometheus label, so no free-form values.
REASONS: tuple[str, ...] = (
    "too_large",
    "malformed",
    "schema",
    "version",
    "run_id",
    "peer_id",
    "layout",
    "settings",
    "step",
    "tensor_set",
    "dtype",
    "length",
    "index_range",
    "index_order",
    "duplicate_index",
    "non_finite",
    "value_range",
    "norm",
)


class PayloadError(ValueError):
    """A payload was rejected; ``reason`` is one of :data:`REASONS` and safe to use as a metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown payload rejection reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
