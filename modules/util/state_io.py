"""Nested states (optimizer and LR-scheduler state dicts) as tensors + JSON, so that nothing is pickled.

`split(state)` returns the state's tensors under path keys (for a safetensors file) and a JSON skeleton
that holds everything else and names the tensor at each place; `join(tensors, skeleton)` rebuilds the
state exactly: tensors as given (safetensors keeps them bit for bit, dtype included), int dict keys as
ints (torch numbers parameters), tuples as tuples (AdamW's `betas`), non-finite floats.

Skeleton nodes: JSON null, booleans, integers, strings and finite floats stand for themselves (Python's
JSON writes floats in their shortest exact form); anything else is a one-key object:
{"dict": [[key, node], ...]}, {"list": [node, ...]}, {"tuple": [node, ...]}, {"tensor": "<key>"},
{"float": "inf" | "-inf" | "nan"}.
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping

import torch

_SCALARS = (type(None), bool, int, str)
_SEQUENCES = {"list": list, "tuple": tuple}


def split(state: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """(tensors by key, JSON skeleton). A tensor's key is the JSON list of the dict keys and list indices
    leading to it, so every process derives the same key for the same place."""
    tensors: dict[str, torch.Tensor] = {}
    return tensors, _encode(state, [], tensors)


def join(tensors: Mapping[str, torch.Tensor], skeleton: Any) -> Any:
    """The state `split` took apart. Raises ValueError when the skeleton is malformed or names a tensor
    that `tensors` lacks."""
    def lookup(key: str) -> torch.Tensor:
        if key not in tensors:
            raise ValueError(f"the tensor {key} is missing")
        return tensors[key]

    return _decode(skeleton, lookup)


def tensor_keys(skeleton: Any) -> set[str]:
    """The tensor keys a skeleton refers to (it is checked as `join` would)."""
    keys: set[str] = set()
    _decode(skeleton, keys.add)
    return keys


def to_json(state: Any) -> str:
    """A state without tensors (an LR scheduler's) as JSON text."""
    tensors, skeleton = split(state)
    if tensors:
        raise ValueError(f"the state holds tensors ({next(iter(tensors))}): use split() and a safetensors file")
    return dumps(skeleton)


def from_json(text: str) -> Any:
    return join({}, json.loads(text))


def dumps(skeleton: Any) -> str:
    return json.dumps(skeleton, allow_nan=False, separators=(",", ":"))


def _encode(value: Any, path: list[Any], tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        key = json.dumps(path, separators=(",", ":"))
        tensors[key] = value
        return {"tensor": key}
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict):
        return {"dict": [[_checked_key(key, path), _encode(item, [*path, key], tensors)] for key, item in value.items()]}
    if isinstance(value, (list, tuple)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {kind: [_encode(item, [*path, index], tensors) for index, item in enumerate(value)]}
    raise TypeError(f"cannot store a {type(value).__name__} at {path} as JSON")


def _checked_key(key: Any, path: list[Any]) -> int | str:
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise TypeError(f"cannot store the dict key {key!r} at {path} as JSON (only int and str keys)")
    return key


def _decode(node: Any, lookup: Callable[[str], Any]) -> Any:
    if isinstance(node, (float, *_SCALARS)):
        return node
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError(f"malformed state JSON: {str(node)[:80]}")
    ((kind, body),) = node.items()
    if kind == "dict" and isinstance(body, list) and all(_is_entry(entry) for entry in body):
        return {key: _decode(item, lookup) for key, item in body}
    if kind in _SEQUENCES and isinstance(body, list):
        return _SEQUENCES[kind](_decode(item, lookup) for item in body)
    if kind == "tensor" and isinstance(body, str):
        return lookup(body)
    if kind == "float" and body in ("inf", "-inf", "nan"):
        return float(body)
    raise ValueError(f"malformed state JSON: {str(node)[:80]}")


def _is_entry(entry: Any) -> bool:
    return (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], (int, str))
            and not isinstance(entry[0], bool))
