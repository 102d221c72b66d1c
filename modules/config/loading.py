"""Reading configs from disk: migrations, preset layering, command-line overrides.

Layering (later wins): defaults < preset < config file < ``--config-value`` overrides. Each layer is a
*partial* dict; layers are deep-merged and validated once, strictly, at the end.
"""
from __future__ import annotations

import copy
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable

from modules.config.base_weight_keys import OLD_KEY as FP8_FLAG
from modules.config.base_weight_keys import upgrade_fp8_flag
from modules.config.checkpointing_config import OLD_KEYS as CHECKPOINT_KEYS
from modules.config.checkpointing_config import upgrade_old_keys
from modules.config.sampling_choices import OLD_SCHEDULERS
from modules.config.train_config import CONFIG_VERSION, ConceptConfig, TrainConfig, upgrade_compile_flag
from modules.util.atomic import atomic_write_text
from modules.util.base_config import ConfigError
from modules.util.text_io import decode_text

PRESET_DIR = Path(__file__).resolve().parents[2] / "training_presets"


def _migrate_0_to_1(data: dict[str, Any]) -> dict[str, Any]:
    # Prototype files used OneTrainer's `concept_file_name` for the concept list file.
    if "concept_file_name" in data:
        data.setdefault("concepts", data.pop("concept_file_name"))
    return data


_ADAM_KEYS = {"adam_beta1": "beta1", "adam_beta2": "beta2", "adam_epsilon": "eps"}


def _migrate_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    # Flat AdamW keys became the nested options of the two AdamW optimizers (the only ones version 1 had).
    moved = {new: data.pop(old) for old, new in _ADAM_KEYS.items() if old in data}
    if moved:
        options = data.setdefault("optimizer_options", {})
        for name in ("ADAMW", "ADAMW_8BIT"):
            if isinstance(options, dict):
                options[name] = {**moved, **(options.get(name) or {})}
    return data


def _sample_entries(data: dict[str, Any]) -> list[dict[str, Any]]:
    samples = data.get("samples")
    entries = [s for s in samples if isinstance(s, dict)] if isinstance(samples, list) else []
    return entries + ([data["sample_overrides"]] if isinstance(data.get("sample_overrides"), dict) else [])


def _old_scheduler(entry: dict[str, Any]) -> bool:
    return isinstance(entry.get("scheduler"), str) and entry["scheduler"] in OLD_SCHEDULERS


def _migrate_2_to_3(data: dict[str, Any]) -> dict[str, Any]:
    # `scheduler` named diffusers' solvers; it now names ComfyUI's schedules beside a `sampler`, where the diffusers
    # solvers keep their names with a diffusers_ prefix (the schedule stays theirs: scheduler simple).
    for entry in _sample_entries(data):
        if _old_scheduler(entry):
            entry.setdefault("sampler", "diffusers_" + entry.pop("scheduler"))
    return data


def _migrate_3_to_4(data: dict[str, Any]) -> dict[str, Any]:
    # `model_type` did nothing (the checkpoint decided) and every saved config held the default WAN_2_1; it is now
    # checked against the checkpoint, so an old file's value gives way to AUTO (the checkpoint's).
    data.pop("model_type", None)
    return data


# version N -> function upgrading a dict of version N to N + 1
def _migrate_4_to_5(data: dict[str, Any]) -> dict[str, Any]:
    # gradient_checkpointing, checkpoint_attention and keep_self_attention became one group, checkpointing (a policy
    # and kept_blocks); the old `gradient_checkpointing: true` was the default that memory_preset AUTO added to: AUTO.
    # and `compile` true / false became ON / OFF beside AUTO
    return upgrade_compile_flag(upgrade_old_keys(data))


def _migrate_5_to_6(data: dict[str, Any]) -> dict[str, Any]:
    # fp8_base_weights said what base_weight_format FP8 says: true is FP8 (fp8_scale still picks the scale), false
    # goes; true beside INT8_CONVROT is refused in one line.
    return upgrade_fp8_flag(data)


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _migrate_0_to_1, 1: _migrate_1_to_2,
                                                                      2: _migrate_2_to_3, 3: _migrate_3_to_4,
                                                                      4: _migrate_4_to_5, 5: _migrate_5_to_6}
# Keys only older versions have: a file without `config_version` that holds one is of that version.
LEGACY_KEYS = {**{key: 1 for key in _ADAM_KEYS}, **{key: 4 for key in CHECKPOINT_KEYS}, FP8_FLAG: 5}


def migrate(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Upgrade a (partial) config dict to CONFIG_VERSION. A dict without a version is current."""
    data = copy.deepcopy(data)
    legacy = [LEGACY_KEYS[key] for key in data if key in LEGACY_KEYS]
    legacy += [2] if any(_old_scheduler(entry) for entry in _sample_entries(data)) else []  # old scheduler values
    version = data.get("config_version", min(legacy) if legacy else CONFIG_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ConfigError(f"config key 'config_version' in {source} is {version!r}: it must be a whole number from 0 "
                          f"to {CONFIG_VERSION} (or leave it out for the current version)")
    if version > CONFIG_VERSION:
        raise ConfigError(
            f"config key 'config_version' in {source} is {version!r}; this WanTrainer reads up to {CONFIG_VERSION} — update WanTrainer"
        )
    while version < CONFIG_VERSION:
        data = MIGRATIONS[version](data)
        version += 1
    if "config_version" in data:
        data["config_version"] = CONFIG_VERSION
    return data


# Deeper than any config, concept list or dataset file needs (they nest < 10 levels), and far below the depth at
# which json's parser -- and every recursive walk over the result (merge, from_dict) -- overflows the stack.
MAX_JSON_DEPTH = 100
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def json_depth(text: str) -> int:
    """How deep the lists and objects of a JSON text nest, counted without recursion (brackets in strings
    do not count): the running sum of opening minus closing brackets, over bytes (UTF-8 keeps ASCII bytes
    out of multi-byte characters)."""
    import numpy as np  # here: reading a config stays light for the scripts' fast start-up

    data = np.frombuffer(_JSON_STRING.sub('""', text).encode("utf-8"), dtype=np.uint8)
    if not len(data):
        return 0
    opening = (data == ord("[")) | (data == ord("{"))
    closing = (data == ord("]")) | (data == ord("}"))
    return max(0, int(np.cumsum(opening.astype(np.int64) - closing).max()))


def loads_json(text: str, what: str) -> Any:
    """`json.loads` for text a user wrote: nesting deeper than MAX_JSON_DEPTH is a ConfigError naming `what`,
    not a RecursionError. Raises json.JSONDecodeError for text that is not JSON."""
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ConfigError(f"{what} nests lists/objects more than {MAX_JSON_DEPTH} levels deep: no WanTrainer file "
                          "does; fix the file")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as e:  # an integer longer than Python converts (sys.get_int_max_str_digits())
        raise ConfigError(f"{what} holds a number too long to read ({first_words(e)}): no setting needs it; fix "
                          "the file") from None


def first_words(error: Exception) -> str:
    return str(error).split(":")[0]


# No config, preset, concept list, prompts or dataset file comes near this; a bigger one is a wrong path.
MAX_JSON_BYTES = 64 << 20


def check_regular_file(path: Path, what: str, limit: int) -> None:
    """Before reading: `path` is a regular file (not a FIFO, a device or a socket, whose read blocks forever or
    never ends) of at most `limit` bytes. One line naming the file otherwise."""
    try:
        st = path.stat()
    except OSError as e:
        raise ConfigError(f"{what} file '{path}' cannot be read ({e.strerror or e}): check the path") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what} file '{path}' is not a regular file (a device, pipe or socket): give a file")
    if st.st_size > limit:
        raise ConfigError(f"{what} file '{path}' is {st.st_size / (1 << 20):.0f} MiB, more than the "
                          f"{limit / (1 << 20):.0f} MiB such a file can be: is it the right file?")


def read_json(path: str | os.PathLike, what: str = "config") -> Any:
    """A JSON file as saved by any editor (UTF-8, or UTF-8/UTF-16 with a byte-order mark)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} file '{path}' is a folder, not a JSON file: give the path of the .json file")
    if not path.exists():
        raise ConfigError(f"{what} file '{path}' does not exist: check the path")
    check_regular_file(path, what, MAX_JSON_BYTES)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{what} file '{path}' cannot be read ({e.strerror or e}): check its permissions") from None
    try:
        return loads_json(decode_text(data), f"{what} file '{path}'")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} file '{path}' is not UTF-8 text ({e.reason} at byte {e.start}): "
                          "save it as UTF-8") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{what} file '{path}' is not valid JSON ({e}): fix the file") from None


def deep_merge(base: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """Merge `layer` over `base`; nested objects merge key by key, lists and scalars are replaced."""
    merged = copy.deepcopy(base)
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def resolve_preset(name_or_path: str) -> Path:
    """A preset is a path, or the name of a shipped preset ("#lora 1.3B" or "lora 1.3B")."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    stem = name_or_path.removeprefix("#").removesuffix(".json")
    shipped = PRESET_DIR / f"#{stem}.json"
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("#*.json")))
    raise ConfigError(f"preset '{name_or_path}' not found: give a file path or one of {names}")


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """``a.b.0.c=value`` -> (['a', 'b', 0, 'c'], value); the value is JSON when it parses, else a string."""
    if "=" not in text:
        raise ConfigError(f"--config-value '{text}' must look like key=value (e.g. epochs=3)")
    key, raw = text.split("=", 1)
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in key.strip().split(".")]
    try:
        value = loads_json(raw, f"--config-value '{key.strip()}'")
    except json.JSONDecodeError:
        value = raw
    return parts, value


def apply_override(data: dict[str, Any], parts: list[str | int], value: Any) -> None:
    target: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        _check_container(target, parts, i)
        if isinstance(target, list):
            if not isinstance(part, int) or part > len(target):
                raise ConfigError(f"--config-value: index {part} is out of range in '{'.'.join(map(str, parts))}'")
            if part == len(target):  # one past the end appends, so `concepts.0.path=...` works on []
                target.append([] if isinstance(nxt, int) else {})
            target = target[part]
        else:
            if part not in target or target[part] is None:
                target[part] = [] if isinstance(nxt, int) else {}
            target = target[part]
    _check_container(target, parts, len(parts) - 1)
    last = parts[-1]
    if isinstance(target, list):
        if not isinstance(last, int) or last > len(target):
            raise ConfigError(f"--config-value: index {last} is out of range in '{'.'.join(map(str, parts))}'")
        if last == len(target):
            target.append(value)
        else:
            target[last] = value
    else:
        target[last] = value


def _check_container(target: Any, parts: list[str | int], i: int) -> None:
    """A dotted key may only go into objects and lists: `epochs.x` into a number is a one-line error."""
    if isinstance(target, (dict, list)):
        return
    key, parent = ".".join(map(str, parts)), ".".join(map(str, parts[:i]))
    if parent == "concepts" and isinstance(target, str):
        raise ConfigError(f"--config-value '{key}': 'concepts' is the concept file '{target}', not a list: edit "
                          "that file, or give the whole list (--config-value 'concepts=[{\"path\": ...}]')")
    raise ConfigError(f"--config-value '{key}': '{parent}' holds {json.dumps(target)}, not an object or list, so "
                      f"'{parts[i]}' cannot be set inside it: set '{parent}=...' instead")


def load_concepts(path: str | os.PathLike) -> list[ConceptConfig]:
    data = read_json(path, "concept")
    if not isinstance(data, list):
        raise ConfigError(f"concept file '{path}' must hold a JSON list of concepts")
    return [ConceptConfig.from_dict(item, f"concepts[{i}]") for i, item in enumerate(data)]


def load_train_config(
    config_path: str | os.PathLike | None = None,
    preset: str | None = None,
    overrides: list[str] | None = None,
) -> TrainConfig:
    merged: dict[str, Any] = {}
    if preset:
        preset_path = resolve_preset(preset)
        merged = deep_merge(merged, migrate(_as_object(read_json(preset_path, "preset"), preset_path), str(preset_path)))
    if config_path:
        merged = deep_merge(merged, migrate(_as_object(read_json(config_path), config_path), str(config_path)))
    for text in overrides or []:
        parts, value = parse_override(text)
        if len(parts) == 1 and parts[0] in LEGACY_KEYS:  # an old key on the command line: where it lives now
            merged = deep_merge(merged, migrate({parts[0]: value}, "--config-value"))
            continue
        apply_override(merged, parts, value)
    merged["config_version"] = CONFIG_VERSION
    return TrainConfig.from_dict(merged)


def _as_object(data: Any, path: str | os.PathLike) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a JSON object")
    return data


def save_config(config: TrainConfig, path: str | os.PathLike) -> None:
    atomic_write_text(path, json.dumps(config.to_dict(), indent=4) + "\n")
