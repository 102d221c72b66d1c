"""Typed, strict configs on plain dataclasses.

Every config is a dataclass deriving from `BaseConfig`. Loading is strict: an unknown key or a value of
the wrong type raises a `ConfigError` that names the full key path (``concepts[0].pth``) and suggests
the closest valid key. Dumping gives plain JSON types (enums by name), and
``from_dict(to_dict(c)) == c`` for every config.

Fields carry their documentation in ``metadata["doc"]`` (see `option`), from which docs/config.md is
generated, so code and docs cannot drift apart.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import sys
import types
import typing
from enum import Enum
from typing import Any, TypeVar, Union

from modules.util.errors import UserError

T = TypeVar("T", bound="BaseConfig")


class ConfigError(UserError):
    """A config value the user must fix; the message names the key."""


def option(default: Any, doc: str, structural: bool = False, **kwargs: Any) -> Any:
    """A dataclass field with a default and the documentation shown in docs/config.md and the GUI.
    `structural`: the key decides which tensors train and how the optimizer stores them, so a backup written
    with another value cannot be resumed."""
    metadata = {"doc": doc, **({"structural": True} if structural else {}), **kwargs.pop("metadata", {})}
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        factory = (lambda d=default: _deep_copy(d))
        return dataclasses.field(default_factory=factory, metadata=metadata, **kwargs)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def _deep_copy(value: Any) -> Any:
    import copy

    return copy.deepcopy(value)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "one of " + ", ".join(m.name for m in tp)
    if isinstance(tp, type) and issubclass(tp, BaseConfig):
        return "an object"
    if origin is list:
        return "a list"
    if origin is dict:
        return "an object"
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    return str(tp)


# What torch.manual_seed and every 64-bit counter accept (a seed from -2^63 to 2^64 - 1).
INT_MIN, INT_MAX = -(1 << 63), (1 << 64) - 1


def _short_int(value: int) -> str:
    """A huge integer as its first digits and length, not 4,000 digits in a one-line error."""
    text = str(abs(value)) if value.bit_length() < 10_000 else None
    if text is not None and len(text) <= 30:
        return str(value)
    digits = f"{len(text)} digits" if text is not None else f"{value.bit_length()} bits"
    return f"{'-' if value < 0 else ''}{text[:6] if text else ''}... ({digits})"


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Check `value` against the annotation `tp` and convert it (enums from names, nested configs)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, path)
            except ConfigError as e:
                errors.append(e)
        # An arm whose shape matched failed deeper down (e.g. a typo inside a list item): report that.
        deeper = [e for e in errors if not str(e).startswith(f"config key '{path}' must be")]
        if deeper:
            raise deeper[0]
        raise ConfigError(f"config key '{path}' must be {_type_name(tp)}, got {value!r}")
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not INT_MIN <= value <= INT_MAX:  # torch's seeds and counters are 64-bit
                raise ConfigError(f"config key '{path}' is {_short_int(value)}, beyond 64 bits: give a whole number "
                                  f"from {INT_MIN} to {INT_MAX}")
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, int) and abs(value) > sys.float_info.max:
                raise ConfigError(f"config key '{path}' is {_short_int(value)}, too large for a number")
            if not math.isfinite(value):  # JSON parsers accept NaN and Infinity; no setting means them
                raise ConfigError(f"config key '{path}' must be a finite number, got {value!r}")
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type) and issubclass(tp, Enum):
        if isinstance(value, tp):
            return value
        if isinstance(value, str):
            for member in tp:
                if member.name.lower() == value.lower():
                    return member
            close = difflib.get_close_matches(value.upper(), [m.name for m in tp], n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"config key '{path}' must be one of {', '.join(m.name for m in tp)}, got '{value}'{hint}"
            )
    elif isinstance(tp, type) and issubclass(tp, BaseConfig):
        if isinstance(value, tp):
            return value
        if isinstance(value, dict):
            return tp.from_dict(value, path)
    elif origin is list:
        (item_type,) = typing.get_args(tp) or (Any,)
        if isinstance(value, (list, tuple)):
            return [_convert(v, item_type, _join(path, i)) for i, v in enumerate(value)]
    elif origin is dict:
        key_type, value_type = typing.get_args(tp) or (str, Any)
        if isinstance(value, dict):
            return {_convert(k, key_type, path): _convert(v, value_type, _join(path, str(k))) for k, v in value.items()}
    else:  # pragma: no cover - a field annotation we do not support is a programming error
        raise TypeError(f"unsupported config annotation {tp!r} at {path}")
    raise ConfigError(f"config key '{path}' must be {_type_name(tp)}, got {value!r}")


def _dump(value: Any) -> Any:
    if isinstance(value, BaseConfig):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


@dataclasses.dataclass
class BaseConfig:
    """Base of every typed config: strict `from_dict`, lossless `to_dict`."""

    @classmethod
    def field_types(cls) -> dict[str, Any]:
        return typing.get_type_hints(cls)

    @classmethod
    def upgrade(cls, data: dict[str, Any], path: str = "") -> dict[str, Any]:
        """`data` with the old names of this record's keys replaced by the current ones (a record read from any
        source: a config, a concept file, a GUI row). Subclasses with renamed keys override it."""
        return data

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any], path: str = "") -> T:
        if not isinstance(data, dict):
            raise ConfigError(f"config key '{path or '<root>'}' must be an object, got {data!r}")
        data = cls.upgrade(data, path)
        hints = cls.field_types()
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        kwargs = {}
        for key, value in data.items():
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
                hint = f"; did you mean '{_join(path, close[0])}'?" if close else ""
                raise ConfigError(f"unknown config key '{_join(path, key)}'{hint}")
            kwargs[key] = _convert(value, hints[key], _join(path, key))
        config = cls(**kwargs)
        config.validate(path)
        return config

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}

    def validate(self, path: str) -> None:
        """Cross-field checks; raise ConfigError naming the key. Subclasses override."""

    @classmethod
    def documentation(cls) -> list[tuple[str, str, Any, str]]:
        """(name, type description, default, doc) for every field, for docs and the GUI."""
        hints = cls.field_types()
        rows = []
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            rows.append((f.name, _type_name(hints[f.name]), _dump(default), f.metadata.get("doc", "")))
        return rows
