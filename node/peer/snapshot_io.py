"""Weights and optimizer state as bytes for state sync: safetensors plus a msgpack skeleton, never pickle.

Weights are one safetensors blob of ``model.state_dict()``. Two honest peers with equal weights produce
byte-identical blobs, which is what lets a joiner pull different chunks of it from different donors. The
optimizer state is nested (dicts of tensors, ints, ...): :mod:`node.checkpoint_tree` splits it into flat
tensors (safetensors) and a JSON-able skeleton, packed together in one msgpack map of ``bin`` fields.
Loading checks names, shapes and dtypes against the local model before touching it.
"""

from __future__ import annotations

from typing import Any

import msgpack
import torch
from distro_node.node.checkpoint.tree import detached, flatten, unflatten
from distro_node.protocol.wire import refuse_msgpack_ext
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save


class SnapshotFormatError(ValueError):
    """State bytes from a donor do not fit the local model or strategy; the message names what differs."""


def weights_to_bytes(model: torch.nn.Module) -> bytes:
    tensors = {name: detached(t) for name, t in sorted(model.state_dict().items())}
    return st_save(tensors)


def load_weights(model: torch.nn.Module, data: bytes) -> None:
    try:
        tensors = st_load(data)
    except Exception as exc:  # safetensors raises SafetensorError / ValueError on malformed input
        raise SnapshotFormatError(f"weights do not parse: {type(exc).__name__}") from None
    local = model.state_dict()
    if set(tensors) != set(local):
        diff = sorted(set(tensors) ^ set(local))[:5]
        raise SnapshotFormatError(f"weights tensor names differ from the local model: {diff}")
    for name, t in tensors.items():
        if t.shape != local[name].shape or t.dtype != local[name].dtype:
            raise SnapshotFormatError(f"weights tensor {name!r} has shape/dtype {tuple(t.shape)}/{t.dtype}")
    model.load_state_dict(tensors, strict=True)


def optim_to_bytes(state: dict[str, Any]) -> bytes:
    skeleton, tensors = flatten(state, "optim")
    return msgpack.packb({"skeleton": skeleton, "tensors": st_save(tensors) if tensors else b""},
                         use_bin_type=True)


def optim_from_bytes(data: bytes, max_bytes: int) -> dict[str, Any]:
    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=False, max_bin_len=max_bytes,
                              max_str_len=1 << 16, max_array_len=1 << 20,
                              max_map_len=1 << 16, ext_hook=refuse_msgpack_ext)
    except Exception as exc:
        raise SnapshotFormatError(f"optimizer state does not unpack: {type(exc).__name__}") from None
    if not isinstance(doc, dict) or set(doc) != {"skeleton", "tensors"} \
            or not isinstance(doc["tensors"], bytes):
        raise SnapshotFormatError("optimizer state must be a map of skeleton and tensors")
    try:
        tensors = st_load(doc["tensors"]) if doc["tensors"] else {}
        state = unflatten(doc["skeleton"], tensors)
    except Exception as exc:
        raise SnapshotFormatError(f"optimizer state is malformed: {exc}"[:200]) from None
    if not isinstance(state, dict):
        raise SnapshotFormatError("optimizer state must be a mapping")
    return state


def without_local_momentum(strategy_name: str, state: dict[str, Any]) -> dict[str, Any]:
    """A donor's optimizer state with the parts that are the donor's *own* zeroed.

    DisTrO's momentum (``delta``) and unsent error feedback (``pending``) are per peer: copying a donor's
    would make the newcomer resend the donor's past gradients. The replicated parts (the second moment of
    the aggregate, its step count) must be the donor's, or the newcomer's updates would differ. The
    newcomer's own momentum then builds up during the warm-up rounds, before it is included.
    """
    if strategy_name != "distro":
        return state
    out = dict(state)
    delta = out.get("delta")
    if isinstance(delta, dict):
        out["delta"] = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else v
                        for k, v in delta.items()}
    out["pending"] = {}
    return out
