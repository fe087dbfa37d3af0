"""Split a strategy's nested state into flat tensors (for safetensors) and a JSON skeleton, and back.

Why not pickle (``torch.save``): a checkpoint may come from another machine or a damaged disk, and unpickling
runs code. safetensors holds only tensors, so the structure around them (dicts with str or int keys, lists,
tuples, python scalars, None) goes into the JSON manifest, with each tensor replaced by a reference to its
safetensors key. Every non-scalar node is tagged, so no user dict can be mistaken for a tensor reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from distro_node.node.checkpoint.errors import CheckpointStateError

TENSOR = "$tensor"
DICT = "$dict"
TUPLE = "$tuple"
FLOAT = "$float"
MAX_DEPTH = 64


def detached(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor safe to hand to safetensors (which refuses views sharing storage)."""
    out = tensor.detach().to("cpu")
    if not out.is_contiguous() or out.untyped_storage().nbytes() != out.numel() * out.element_size():
        out = out.contiguous().clone()
    return out


def flatten(state: Any, prefix: str) -> tuple[Any, dict[str, torch.Tensor]]:
    """(JSON skeleton, tensors by dotted key). Keys follow the path (``delta.layers.0.w``); a clash (dict keys
    may themselves contain dots) gets a ``#n`` suffix, since only the skeleton's references must be unique."""
    tensors: dict[str, torch.Tensor] = {}
    seen_storage: set[int] = set()

    def key_for(path: str) -> str:
        key, n = path, 1
        while key in tensors:
            n += 1
            key = f"{path}#{n}"
        return key

    def walk(node: Any, path: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CheckpointStateError(path, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, torch.Tensor):
            tensor = detached(node)
            if tensor.numel() and tensor.untyped_storage().data_ptr() in seen_storage:
                tensor = tensor.clone()
            if tensor.numel():
                seen_storage.add(tensor.untyped_storage().data_ptr())
            key = key_for(path)
            tensors[key] = tensor
            return {TENSOR: key}
        if node is None or isinstance(node, bool | int | str):
            return node
        if isinstance(node, float):
            return node if math.isfinite(node) else {FLOAT: repr(node)}
        if isinstance(node, Mapping):
            items = []
            for k, v in node.items():
                if isinstance(k, bool) or not isinstance(k, str | int):
                    raise CheckpointStateError(path, f"dict key {k!r} is not a str or int")
                items.append([k, walk(v, f"{path}.{k}", depth + 1)])
            return {DICT: items}
        if isinstance(node, list):
            return [walk(v, f"{path}.{i}", depth + 1) for i, v in enumerate(node)]
        if isinstance(node, tuple):
            return {TUPLE: [walk(v, f"{path}.{i}", depth + 1) for i, v in enumerate(node)]}
        raise CheckpointStateError(path, f"cannot store a {type(node).__name__} (no pickling)")

    return walk(state, prefix, 0), tensors


def unflatten(skeleton: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """Inverse of :func:`flatten`; raises ValueError on anything :func:`flatten` would not have written, and
    when the skeleton does not reference every tensor exactly once."""
    used: set[str] = set()

    def walk(node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ValueError(f"structure nested deeper than {MAX_DEPTH} levels")
        if node is None or isinstance(node, bool | int | str):
            return node
        if isinstance(node, float):
            return node
        if isinstance(node, list):
            return [walk(v, depth + 1) for v in node]
        if isinstance(node, dict) and len(node) == 1:
            tag, body = next(iter(node.items()))
            if tag == TENSOR and isinstance(body, str):
                if body not in tensors or body in used:
                    raise ValueError(f"tensor {body!r} missing or referenced twice")
                used.add(body)
                return tensors[body]
            if tag == FLOAT and body in ("nan", "inf", "-inf"):
                return float(body)
            if tag == TUPLE and isinstance(body, list):
                return tuple(walk(v, depth + 1) for v in body)
            if tag == DICT and isinstance(body, list):
                out: dict[Any, Any] = {}
                for item in body:
                    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str | int)):
                        raise ValueError("malformed dict item")
                    out[item[0]] = walk(item[1], depth + 1)
                return out
        raise ValueError(f"unexpected node {str(node)[:80]!r}")

    result = walk(skeleton, 0)
    if used != set(tensors):
        raise ValueError(f"{len(set(tensors) - used)} stored tensors are not referenced")
    return result
