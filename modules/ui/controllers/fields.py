"""What the GUI shows for a config field, read from the typed configs' own metadata.

`field_specs(TrainConfig)` turns every dataclass field into a `FieldSpec` (label, widget kind, choices,
doc, default) so that views are generated, not written field by field: enums become dropdowns, bools
switches, lists editors, and the field's doc is shown beside it. `parse_text` / `format_value`
convert between what a widget holds (text, a bool, a choice) and the config value; a text that
does not parse raises `FieldError` with a short reason the view shows next to the field.
"""
from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from enum import Enum
from typing import Any

from modules.config.loading import loads_json
from modules.config.sampling_choices import E2V_POSTERIORS, REFERENCE_LAYOUTS, SAMPLE_SAMPLERS, SAMPLE_SCHEDULERS
from modules.util.base_config import INT_MAX, INT_MIN, BaseConfig, ConfigError
from modules.util.resolution_text import parse_resolution_text, resolution_text

# Widget kinds a view knows how to draw.
BOOL, CHOICE, INT, FLOAT, TEXT, PATH, INT_LIST, TEXT_LIST, JSON, RESOLUTION = (
    "bool", "choice", "int", "float", "text", "path", "int_list", "text_list", "json", "resolution")

# String fields that name a file or folder: which picker the "..." button opens.
PATH_MODES = {
    "base_model_name": "dir", "transformer_override": "file", "transformer_2_override": "file",
    "vae_override": "file", "text_encoder_override": "file", "image_encoder_override": "file",
    "workspace_dir": "dir", "cache_dir": "dir", "output_model_destination": "save",
    "dataset_config": "file", "lora_weight_path": "file", "image_encoder_model_name": "dir",
    "path": "dir", "image": "file", "data_root": "dir", "output_dir": "dir", "control_video": "file",
    "control_mask": "file", "last_image": "file", "driving_video": "file",
}

# String fields with a fixed set of values (modules/config/sampling_choices.py): dropdowns, whatever their doc says.
CHOICES_BY_NAME = {"sampler": SAMPLE_SAMPLERS, "scheduler": SAMPLE_SCHEDULERS, "e2v_posterior": E2V_POSTERIORS,
                   "reference_layout": REFERENCE_LAYOUTS}
# What an optional dropdown shows for "not set" (null).
NOT_SET = "—"

# A string field whose doc starts with "a | b | c:" offers exactly those values.
_CHOICES_IN_DOC = re.compile(r"^\s*([\w.-]+(?:\s*\|\s*[\w.-]+)+)\s*:")

_LABEL_WORDS = {"lora": "LoRA", "fps": "FPS", "vae": "VAE", "clip": "CLIP", "e2v": "E2V", "lr": "LR",
                "dtype": "dtype", "adam": "Adam", "id": "ID", "cfg": "CFG", "llm": "LLM"}


class FieldError(ValueError):
    """A widget's text that is not a valid value for its field (the message is shown beside it)."""


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    key: str  # path in the config dict: "epochs", "e2v.e2v_type", "processors.vae.resolution"
    label: str
    kind: str  # one of the widget kinds above
    doc: str = ""
    default: Any = None  # JSON form (enums by name)
    choices: tuple[str, ...] = ()
    path_mode: str = ""  # dir | file | save, for PATH
    optional: bool = False  # the value may be None (null): an empty widget means "not set"

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[-1]


def label_for(name: str) -> str:
    words = name.split("_")
    out = [_LABEL_WORDS.get(w, w) for w in words]
    if out and out[0] == words[0]:
        out[0] = out[0].capitalize()
    return " ".join(out)


def spec_for(key: str, tp: Any, doc: str = "", default: Any = None) -> FieldSpec:
    """The FieldSpec of one annotated field (`tp` is the dataclass annotation)."""
    name = key.rsplit(".", 1)[-1]
    if name in ("resolution", "target_resolution"):  # [height, width] (or a list of them): shown as "832x480"
        optional = type(None) in typing.get_args(tp)
        doc = f"Width x height, e.g. 832x480 (the config file holds [height, width]: {doc})"
        return FieldSpec(key, f"{label_for(name)} (W x H)", RESOLUTION, doc, default, optional=optional)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        inner = spec_for(key, next(a for a in args if a is not type(None)), doc, default)
        return dataclasses.replace(inner, optional=True)
    kind, choices, path_mode = JSON, (), ""
    if tp is bool:
        kind = BOOL
    elif isinstance(tp, type) and issubclass(tp, Enum):
        kind, choices = CHOICE, tuple(m.name for m in tp)
    elif tp is int:
        kind = INT
    elif tp is float:
        kind = FLOAT
    elif tp is str:
        found = _CHOICES_IN_DOC.match(doc)
        if name in CHOICES_BY_NAME:
            kind, choices = CHOICE, CHOICES_BY_NAME[name]
        elif found:
            kind, choices = CHOICE, tuple(v.strip() for v in found.group(1).split("|"))
        elif name in PATH_MODES:
            kind, path_mode = PATH, PATH_MODES[name]
        else:
            kind = TEXT
    elif origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        if item is int:
            kind = INT_LIST
        elif item is str:
            kind = TEXT_LIST
    return FieldSpec(key, label_for(name), kind, doc, default, choices, path_mode)


def field_specs(config_cls: type[BaseConfig], prefix: str = "", expand: bool = True) -> dict[str, FieldSpec]:
    """key -> FieldSpec for every field of `config_cls`; nested configs are expanded to "e2v.x" keys."""
    hints = config_cls.field_types()
    specs: dict[str, FieldSpec] = {}
    for name, _type_text, default, doc in config_cls.documentation():
        key = f"{prefix}{name}"
        tp = hints[name]
        if expand and isinstance(tp, type) and issubclass(tp, BaseConfig):
            specs.update(field_specs(tp, f"{key}.", expand))
            continue
        specs[key] = spec_for(key, tp, doc, default)
    return specs


def parse_text(spec: FieldSpec, value: Any) -> Any:
    """The config value for what a widget holds; raises FieldError with a short reason."""
    if spec.kind == BOOL:
        if isinstance(value, bool):
            return value
        raise FieldError("must be on or off")
    if not isinstance(value, str):
        return value  # already a value (set programmatically)
    text = value.strip()
    if spec.optional and (not text or (spec.kind == CHOICE and text == NOT_SET)):
        return None
    if spec.kind == INT:
        try:
            number = int(text)  # more digits than Python converts is a ValueError too
        except ValueError:
            raise FieldError("must be a whole number" if len(text) < 100 else "is too long for a number") from None
        if not INT_MIN <= number <= INT_MAX:
            raise FieldError(f"must be a whole number from {INT_MIN} to {INT_MAX} (64 bits)")
        return number
    if spec.kind == FLOAT:
        try:
            number = float(text)
        except ValueError:
            raise FieldError("must be a number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise FieldError("must be a finite number")
        return number
    if spec.kind == INT_LIST:
        if text.startswith("["):
            try:
                items = loads_json(text, "the list")
            except (json.JSONDecodeError, ConfigError):
                raise FieldError("must be whole numbers separated by commas") from None
            if not isinstance(items, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
                raise FieldError("must be whole numbers separated by commas")
            return items
        try:
            return [int(part) for part in re.split(r"[,\s]+", text) if part]
        except ValueError:
            raise FieldError("must be whole numbers separated by commas") from None
    if spec.kind == TEXT_LIST:
        return [part.strip() for part in re.split(r"[,\n]", value) if part.strip()]
    if spec.kind == JSON:
        try:
            return loads_json(text, "the value")  # the depth guard and integer limits of every JSON reader
        except ConfigError as e:
            raise FieldError(str(e).removeprefix("the value ")) from None
        except json.JSONDecodeError as e:
            try:  # a list may be typed without its outer brackets ("256, 448" as before resolution took lists)
                return loads_json(f"[{text}]", "the value")
            except (json.JSONDecodeError, ConfigError):
                raise FieldError(f"must be JSON ({e.msg})") from None
    if spec.kind == RESOLUTION:
        sizes = parse_resolution_text(text)
        if sizes is not None:
            return sizes
        try:  # the config's own JSON, [height, width], with or without its outer brackets
            return loads_json(text if text.startswith("[") else f"[{text}]", "the value")
        except (json.JSONDecodeError, ConfigError):
            raise FieldError("must be width x height, e.g. 832x480 (several: 832x480, 1280x720)") from None
    if spec.kind == CHOICE and spec.choices and value not in spec.choices:
        raise FieldError(f"must be one of {', '.join(spec.choices)}")
    return value  # TEXT, PATH, CHOICE keep spaces exactly as typed


def format_value(spec: FieldSpec, value: Any) -> Any:
    """What a widget shows for a config value: text, or a bool for switches."""
    if spec.kind == BOOL:
        return bool(value)
    if value is None:
        return NOT_SET if spec.kind == CHOICE else ""
    if spec.kind == FLOAT and isinstance(value, float):
        return repr(value)  # round-trips exactly
    if spec.kind == INT_LIST and isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if spec.kind == TEXT_LIST and isinstance(value, list):
        return "\n".join(str(v) for v in value)
    if spec.kind == JSON:
        return json.dumps(value)
    if spec.kind == RESOLUTION:
        return resolution_text(value)
    if isinstance(value, Enum):
        return value.name
    return str(value)


def get_path(data: dict[str, Any], key: str, default: Any = None) -> Any:
    """data["a"]["b"] for key "a.b" (default when a level is missing)."""
    target: Any = data
    for part in key.split("."):
        if not isinstance(target, dict) or part not in target:
            return default
        target = target[part]
    return target


def set_path(data: dict[str, Any], key: str, value: Any) -> None:
    """data["a"]["b"] = value for key "a.b", creating missing levels."""
    parts = key.split(".")
    target = data
    for part in parts[:-1]:
        if not isinstance(target.get(part), dict):
            target[part] = {}
        target = target[part]
    target[parts[-1]] = value


_KEY_IN_MESSAGE = re.compile(r"config key '([^']+)'")


def key_of_error(message: str) -> str:
    """The key a ConfigError names ("concepts[0].path"), or "" when it names none."""
    found = _KEY_IN_MESSAGE.search(message)
    return found.group(1) if found else ""


def short_error(message: str, key: str) -> str:
    """The error without its "config key 'x'" prefix, for showing right beside field x."""
    prefix = f"config key '{key}' "
    return message[len(prefix):] if key and message.startswith(prefix) else message


def same_value(spec: FieldSpec, a: Any, b: Any) -> bool:
    """Whether two widget texts mean the same value ("0.10" and "0.1"): a view then leaves the text the
    user is typing alone instead of rewriting it."""
    if a == b:
        return True
    try:
        return parse_text(spec, a) == parse_text(spec, b)
    except FieldError:
        return False
