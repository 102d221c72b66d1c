"""The training config being edited: typed bindings, errors per field, presets, import and export.

The controller keeps the config as the plain dict `TrainConfig.to_dict()` gives. A widget hands it
text (or a bool, or a choice); text that does not parse is kept as "pending" and reported beside
its field, while the dict keeps the last good value. After every change the whole dict is checked
by `TrainConfig.from_dict` — the same strict check the CLI makes — and every error it names is
attached to its key. Start and Export are blocked while any error remains, so a bad value is
shown, never crashes the app, and never reaches the trainer.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from enum import Enum
from pathlib import Path
import logging
from typing import Any, Callable

from modules.config.loading import PRESET_DIR, deep_merge, load_train_config, migrate, read_json, save_config
from modules.config.train_config import BaseLoRAConfig, ConceptConfig, SampleConfig, TrainConfig
from modules.trainer.preflight import TWO_EXPERT_KEYS
from modules.ui.controllers.base_fields import VACE_KEYS, BaseFacts, base_stamp, not_for_base, read_base_facts
from modules.ui.controllers.fields import (
    FieldError,
    FieldSpec,
    field_specs,
    format_value,
    get_path,
    key_of_error,
    parse_text,
    set_path,
    short_error,
    spec_for,
)
from modules.ui.controllers.layout import sections_of, shown
from modules.ui.controllers.observable import Observable
from modules.util.atomic import atomic_write_text
from modules.util.base_config import BaseConfig, ConfigError
from modules.util.enum import ModelFormat, ModelType, TrainingMethod
from modules.util.errors import UserError

# Lists of records, edited row by row (see RecordListController).
LIST_KEYS: dict[str, type[BaseConfig]] = {"concepts": ConceptConfig, "samples": SampleConfig, "base_loras": BaseLoRAConfig}
logger = logging.getLogger(__name__)

# What a user's data is made of: a preset never changes or stores these.
USER_DATA_KEYS = ("concepts", "samples", "dataset_config")
# The user's model and the user's folders: a preset sets training settings, never these (a shipped preset's
# "models/Wan2.1-T2V-14B-Diffusers" exists on no one's disk). The model type is the checkpoint's (detected).
USER_MODEL_KEYS = ("base_model_name", "transformer_override", "transformer_2_override", "vae_override",
                   "text_encoder_override", "image_encoder_override", "lora_weight_path", "embedding_weight_path")
USER_PATH_KEYS = ("workspace_dir", "cache_dir", "output_model_destination", "run_name")
USER_KEYS = USER_DATA_KEYS + USER_MODEL_KEYS + USER_PATH_KEYS
# Keys with no widget of their own.
HIDDEN_KEYS = ("config_version",)


@dataclasses.dataclass(frozen=True)
class Preset:
    name: str  # "#wan2.1 t2v 1.3B lora" (shipped) or "my preset"
    path: Path
    shipped: bool


def _top(key: str) -> str:
    return re.split(r"[.\[]", key, maxsplit=1)[0]


class ConfigController(Observable):
    def __init__(self, preset_dir: str | os.PathLike = PRESET_DIR):
        super().__init__()
        self.preset_dir = Path(preset_dir)
        self.specs: dict[str, FieldSpec] = {
            key: spec for key, spec in field_specs(TrainConfig).items()
            if key not in HIDDEN_KEYS and key not in LIST_KEYS
        }
        self.defaults = TrainConfig().to_dict()
        self.data: dict[str, Any] = copy.deepcopy(self.defaults)
        self.pending: dict[str, Any] = {}  # key -> widget text that did not parse
        self.parse_errors: dict[str, str] = {}  # key -> full message
        self.errors: dict[str, str] = {}  # key -> full message ("" key: not tied to one field)
        # key -> what the trainer's start-up check (trainer/preflight.start_up_problems, the CLI's) refuses in the
        # config as it is: a base LoRA that is not there, a per-family sample input... shown beside its field; they
        # block Start, not Export (a config for another machine may name its paths)
        self.start_problems: dict[str, str] = {}
        # keys whose file the GUI writes at Start (the E2V dataset JSON being edited): not checked on disk before
        self.start_exempt: Callable[[], set[str]] = lambda: set()
        self.preset_name = ""
        self._variant_cache: tuple[Any, tuple[str, Any]] | None = None
        self._base_cache: tuple[Any, BaseFacts] | None = None
        self.auto_choices: dict[str, Any] = {}  # memory key -> what memory_preset AUTO sets it to (VramEstimate's plan)
        self.auto_gpu_gib: float | None = None
        self.revalidate()

    # --- reading ----------------------------------------------------------------------------------
    def spec(self, key: str) -> FieldSpec:
        return self.specs[key]

    def shows(self, key: str) -> bool:
        """Whether the form shows `key` now: only the chosen optimizer's options, the chosen loss's and schedule's,
        and what the base can use (a value set for another base stays shown, with its error, to be cleared)."""
        if key in self.errors:  # a value set where it does not apply stays shown with its error, to be cleared
            return True
        if not shown(key, self.value):
            return False
        return not self.not_for_base(key) or self.value(key) != get_path(self.defaults, key)

    def shows_tab(self, name: str) -> bool:
        """Whether tab `name` has anything to show: a tab of config fields none of which applies (the LoRA tab of a
        FINE_TUNE run, as OneTrainer hides it) is not offered."""
        keys = [key for section in sections_of(name, self.specs) for key in section.keys if key in self.specs]
        return not keys or any(self.shows(key) for key in keys)

    def base_facts(self) -> BaseFacts:
        """What the base at base_model_name is (two experts, VACE), re-read when its configs change."""
        folder = str(self.data.get("base_model_name") or "")
        stamp = base_stamp(folder)
        if self._base_cache is None or self._base_cache[0] != stamp:
            self._base_cache = (stamp, read_base_facts(folder, self.variant()))
        return self._base_cache[1]

    def not_for_base(self, key: str) -> str:
        return not_for_base(key, self.base_facts())

    def value(self, key: str) -> Any:
        return get_path(self.data, key)

    def display(self, key: str) -> Any:
        """What the widget of `key` shows: the user's unparsed text, else the formatted value."""
        if key in self.pending:
            return self.pending[key]
        if key == "model_type" and self.value(key) == ModelType.AUTO.name and self.detected_model_type():
            return self.detected_model_type()  # AUTO: what the checkpoint is
        if key in self.auto_choices:  # what the run will use, not the default AUTO replaces
            return format_value(self.specs[key], self.auto_choices[key])
        return format_value(self.specs[key], self.value(key))

    def set_auto_choices(self, changes: dict[str, Any], gpu_gib: float | None) -> bool:
        """The memory keys AUTO's plan sets for the config as it is (JSON values); True when they changed."""
        flat = {}
        for key, value in changes.items():  # a group AUTO sets (checkpointing) shows in its fields
            if hasattr(value, "to_dict"):
                flat.update({f"{key}.{field}": item for field, item in value.to_dict().items()})
            else:
                flat[key] = value.name if isinstance(value, Enum) else value
        changes = flat
        if (changes, gpu_gib) == (self.auto_choices, self.auto_gpu_gib):
            return False
        self.auto_choices, self.auto_gpu_gib = changes, gpu_gib
        return True

    def auto_note(self, key: str) -> str:
        """Beside a field AUTO set: that AUTO chose the value shown, and how to choose it yourself."""
        if key not in self.auto_choices:
            return ""
        default = get_path(self.defaults, key)
        default = ("on" if default else "off") if isinstance(default, bool) else format_value(self.specs[key], default)
        return (f"chosen by AUTO for {self.auto_gpu_gib:g} GiB (set memory_preset to MANUAL to choose yourself; "
                f"default {default})")

    def error(self, key: str) -> str:
        """The error to show beside the field `key` ("" when fine)."""
        message = self.errors.get(key) or self.start_problems.get(key, "")
        return short_error(message, key)

    def problems(self) -> list[str]:
        """Every error, as full one-line messages naming their keys, in field order."""
        order = {key: i for i, key in enumerate(self.specs)}
        return [self.errors[k] for k in sorted(self.errors, key=lambda k: (order.get(_top(k), len(order)), k))]

    @property
    def is_valid(self) -> bool:
        return not self.errors

    def build(self) -> TrainConfig:
        """The typed config; raises ConfigError with the first problem while any remains."""
        problems = self.problems()
        if problems:
            raise ConfigError(problems[0])
        return TrainConfig.from_dict(self.data)

    def build_nearest(self) -> TrainConfig | None:
        """The typed config with every field in error at its default (a row in error: its list at the default), for
        what does not need those fields (the VRAM estimate); None when that does not check either."""
        scratch = copy.deepcopy(self.data)
        for key in self.errors:
            if not key:
                return None
            if "[" in key or "." not in key:
                scratch[_top(key)] = copy.deepcopy(self.defaults.get(_top(key)))
            else:
                set_path(scratch, key, copy.deepcopy(get_path(self.defaults, key)))
        try:
            return TrainConfig.from_dict(scratch)
        except ConfigError:
            return None

    # --- editing -----------------------------------------------------------------------------------
    def set(self, key: str, value: Any) -> None:
        """Set a field from a widget (text, bool or choice) or from code (a value)."""
        self._set_parsed(key, self.specs[key], value)
        self.revalidate()
        self.notify(key)

    def _set_parsed(self, key: str, spec: FieldSpec, value: Any) -> bool:
        try:
            parsed = parse_text(spec, value)
        except FieldError as e:
            self.pending[key] = value
            self.parse_errors[key] = f"config key '{key}' {e}"
            return False
        self.pending.pop(key, None)
        self.parse_errors.pop(key, None)
        previous = get_path(self.data, key)
        set_path(self.data, key, parsed)
        if key == "training_method" and parsed != previous:
            self._follow_training_method(parsed)
        return True

    def _follow_training_method(self, method_name: str) -> None:
        """Switching LoRA / embedding <-> fine-tune switches an output format (and file name) that no longer fits:
        a LoRA or embedding is one .safetensors file (COMFY_LORA, the format that loads everywhere), a fine-tune a
        folder."""
        self.data.update(_output_for_method(TrainingMethod[method_name],
                                            ModelFormat[self.data["output_model_format"]],
                                            self.data["output_model_destination"]))
        for key in ("output_model_format", "output_model_destination"):
            self.pending.pop(key, None)
            self.parse_errors.pop(key, None)

    def set_list(self, key: str, value: list[dict[str, Any]] | str) -> None:
        """Replace a list field (`concepts`, `samples`) wholesale (rows filled up with the record's
        defaults); drops its rows' pending texts."""
        if isinstance(value, list):
            record = LIST_KEYS[key]
            defaults = record().to_dict()
            value = [{**defaults, **record.upgrade(row)} if isinstance(row, dict) else row for row in value]
        self.data[key] = copy.deepcopy(value)
        for k in [k for k in self.pending if k.startswith(f"{key}[")]:
            self.pending.pop(k)
            self.parse_errors.pop(k, None)
        self.revalidate()
        self.notify(key)

    def set_item(self, key: str, index: int, name: str, value: Any) -> None:
        """Set field `name` of row `index` of the list `key` from a widget."""
        item_cls = LIST_KEYS[key]
        spec = spec_for(name, item_cls.field_types()[name])
        path = f"{key}[{index}].{name}"
        try:
            parsed = parse_text(spec, value)
        except FieldError as e:
            self.pending[path] = value
            self.parse_errors[path] = f"config key '{path}' {e}"
        else:
            self.pending.pop(path, None)
            self.parse_errors.pop(path, None)
            self.data[key][index][name] = parsed
        self.revalidate()
        self.notify(key)

    def set_item_values(self, key: str, index: int, values: dict[str, Any],
                        pending: dict[str, tuple[Any, str]] | None = None, cleared: tuple[str, ...] = ()) -> None:
        """Set parsed `values` of row `index` of the list `key` together (a sample's size: height and width), keep
        `pending` texts that did not parse (name -> (text, reason)) beside their field, drop the `cleared` ones."""
        for name, value in values.items():
            self.data[key][index][name] = value
        for name in (*values, *cleared):
            self.pending.pop(f"{key}[{index}].{name}", None)
            self.parse_errors.pop(f"{key}[{index}].{name}", None)
        for name, (text, reason) in (pending or {}).items():
            self.pending[f"{key}[{index}].{name}"] = text
            self.parse_errors[f"{key}[{index}].{name}"] = f"config key '{key}[{index}].{name}' {reason}"
        self.revalidate()
        self.notify(key)

    def sample_fields_used(self) -> frozenset[str] | None:
        """The conditioning inputs a sample of this base takes (modules/model/sample_inputs.py); None while no
        base is read (every input is shown)."""
        from modules.model.sample_inputs import sample_fields_used

        variant = self.variant()
        if variant is None:
            return None
        e2v = bool(str(self.data.get("dataset_config") or "").strip())
        return sample_fields_used(variant, e2v, str(get_path(self.data, "e2v.reference_layout") or "a2"))

    # --- validation ---------------------------------------------------------------------------------
    def revalidate(self) -> dict[str, str]:
        """Check the whole config as the CLI would, collecting every error (not just the first)."""
        self._follow_checkpoint()
        errors = dict(self.parse_errors)
        scratch = copy.deepcopy(self.data)
        for key, item_cls in LIST_KEYS.items():
            items = scratch.get(key)
            if isinstance(items, list):
                for i, item in enumerate(items):
                    try:
                        item_cls.from_dict(item, f"{key}[{i}]")
                    except ConfigError as e:
                        errors.setdefault(key_of_error(str(e)) or f"{key}[{i}]", str(e))
                scratch[key] = []
        seen: set[str] = set()
        for _ in range(len(self.defaults) + 8):
            try:
                TrainConfig.from_dict(scratch)
                break
            except ConfigError as e:
                key = key_of_error(str(e))
                if not key or key in seen:  # not tied to one field, or the default did not help
                    errors.setdefault("", str(e))
                    break
                seen.add(key)
                errors.setdefault(key, str(e))
                # Put the default back and look for the next error.
                if "." in key and "[" not in key:
                    set_path(scratch, key, copy.deepcopy(get_path(self.defaults, key)))
                elif _top(key) in self.defaults:
                    scratch[_top(key)] = copy.deepcopy(self.defaults[_top(key)])
                else:
                    break
        for key in (*TWO_EXPERT_KEYS, *VACE_KEYS):  # set, but the base has no use for it: the run would refuse it
            reason = self.not_for_base(key)
            value = self.value(key)
            if reason and value != get_path(self.defaults, key):
                errors.setdefault(key, f"config key '{key}' is {value!r}, but it {reason}: clear it")
        self.errors = errors
        self._check_start()
        return errors

    def _check_start(self) -> bool:
        """The start-up check on the config as it is, once its fields are valid (no data check: that probes clips);
        True when what it finds changed."""
        found: dict[str, str] = {}
        if not self.errors:
            from modules.trainer.preflight import start_up_problems  # the CLI's own check

            try:
                exempt = self.start_exempt()
                for problem in start_up_problems(TrainConfig.from_dict(self.data), data=False):
                    key = problem.key or _key_holding(self.data, problem.message)
                    if _top(key) not in exempt:
                        found.setdefault(key, problem.message)
            except Exception:  # noqa: BLE001 - a check that cannot run must not take the editor down
                logger.exception("the start-up check failed")
        changed = found != self.start_problems
        self.start_problems = found
        return changed

    def recheck_start(self) -> None:
        """Run the start-up check again (a file it named may have appeared); tells the views when it changed."""
        if self._check_start():
            self.notify("start_problems")

    # --- files ------------------------------------------------------------------------------------
    def load_dict(self, data: dict[str, Any], source: str = "config") -> None:
        """Replace the config with `data` (a partial config over the defaults), checked strictly."""
        merged = deep_merge(self.defaults, migrate(data, source))
        self._replace(TrainConfig.from_dict(merged).to_dict())

    def load_file(self, path: str | os.PathLike, preset: str | None = None) -> None:
        """Load a config file exactly as `scripts/train.py --config-path` reads it."""
        self._replace(load_train_config(path, preset).to_dict())

    def _replace(self, data: dict[str, Any]) -> None:
        self.data = data
        self.pending.clear()
        self.parse_errors.clear()
        self.revalidate()
        self.notify(None)

    def export(self, path: str | os.PathLike) -> Path:
        """Write the full config as JSON (atomically) for `scripts/train.py --config-path`."""
        save_config(self.build(), path)
        return Path(path)

    # --- presets ----------------------------------------------------------------------------------
    def list_presets(self) -> list[Preset]:
        """Shipped presets ("#name") first, then the user's own, each sorted by name."""
        if not self.preset_dir.is_dir():
            return []
        files = sorted(self.preset_dir.glob("*.json"), key=lambda p: (not p.stem.startswith("#"), p.stem.lower()))
        return [Preset(p.stem, p, p.stem.startswith("#")) for p in files]

    def apply_preset(self, name: str) -> None:
        """Defaults + the preset's training settings; the user's model, data, concepts, samples and folders stay as
        they are. The preset's base LoRAs (a speed LoRA its recipe trains on) come in only when the user has none:
        a path that is not on this disk is then flagged beside its field."""
        preset = next((p for p in self.list_presets() if p.name == name), None)
        if preset is None:
            raise UserError(f"preset '{name}' not found in {self.preset_dir}")
        layer = read_json(preset.path, "preset")
        if not isinstance(layer, dict):
            raise ConfigError(f"preset file '{preset.path}' must hold a JSON object")
        merged = deep_merge(self.defaults, migrate(layer, str(preset.path)))
        for key in USER_KEYS:
            merged[key] = copy.deepcopy(self.data[key])
        if self.data["base_loras"]:
            merged["base_loras"] = copy.deepcopy(self.data["base_loras"])
        if self.detected_model_type():
            merged["model_type"] = ModelType.AUTO.name
        method = TrainingMethod[merged["training_method"]]
        merged.update(_output_for_method(method, ModelFormat[merged["output_model_format"]],
                                         merged["output_model_destination"]))
        try:
            config = TrainConfig.from_dict(merged)
        except ConfigError as e:
            raise ConfigError(f"preset '{name}': {e}") from None
        self.preset_name = name
        self._replace(config.to_dict())

    def save_preset(self, name: str) -> Path:
        """Save what differs from the defaults (without the user's data) as the user preset `name`."""
        name = name.strip()
        if not name or any(c in name for c in '/\\:*?"<>|') or name.startswith((".", "#")):
            raise UserError(f"preset name '{name}' is not usable: use letters, digits, spaces, '-' or '_' "
                            "(names starting with '#' are the shipped presets)")
        current = self.build().to_dict()
        layer = {k: v for k, v in current.items()
                 if k not in USER_KEYS and k not in HIDDEN_KEYS and v != self.defaults.get(k)}
        path = self.preset_dir / f"{name}.json"
        atomic_write_text(path, json.dumps(layer, indent=4) + "\n")
        self.preset_name = name
        self.notify("presets")
        return path

    # --- model ------------------------------------------------------------------------------------
    def _follow_checkpoint(self) -> None:
        """The model type is the checkpoint's: while base_model_name is a Wan folder its detection decides (a
        config or preset that says otherwise becomes AUTO here; the CLI refuses it), and the top bar's control shows
        the detected type and is not a choice."""
        detected = self.detected_model_type()
        if detected and self.data.get("model_type") not in (ModelType.AUTO.name, detected):
            self.data["model_type"] = ModelType.AUTO.name  # the checkpoint's (the CLI refuses a disagreeing value)
            self.pending.pop("model_type", None)
            self.parse_errors.pop("model_type", None)

    def detected_model_type(self) -> str:
        """The model type read from the checkpoint at base_model_name ("" while there is none)."""
        variant = self.variant()
        return variant.model_type.name if variant is not None else ""

    def variant(self) -> Any:
        """The WanVariant of the checkpoint at base_model_name, read from its own configs (None: no Wan folder)."""
        return self._detect()[1]

    def detected_variant(self) -> tuple[str, bool]:
        """(text, ok) describing the checkpoint at base_model_name, read from its own configs."""
        text, variant = self._detect()
        return text, variant is not None

    def _detect(self) -> tuple[str, Any]:
        folder = str(self.data.get("base_model_name", "")).strip()
        if not folder:
            return "no base model chosen", None
        index = Path(folder) / "model_index.json"
        stamp = (folder, index.stat().st_mtime_ns if index.is_file() else None)
        if self._variant_cache is None or self._variant_cache[0] != stamp:
            from modules.model.detection import detect_variant

            try:
                variant = detect_variant(folder)
                found: tuple[str, Any] = (variant.describe(), variant)
            except UserError as e:
                found = (str(e), None)
            self._variant_cache = (stamp, found)
        return self._variant_cache[1]


def _output_for_method(method: TrainingMethod, fmt: ModelFormat, destination: str) -> dict[str, str]:
    """The output format and destination that fit `method`: a LoRA or embedding is one .safetensors file
    (COMFY_LORA, the format that loads everywhere), a fine-tune a folder."""
    if method == TrainingMethod.FINE_TUNE:
        return {"output_model_format": ModelFormat.DIFFUSERS.name if fmt.is_lora() else fmt.name,
                "output_model_destination": destination.removesuffix(".safetensors")}
    if method in (TrainingMethod.LORA, TrainingMethod.EMBEDDING) and not fmt.is_lora():
        suffix = "" if destination.endswith(".safetensors") else ".safetensors"
        return {"output_model_format": ModelFormat.COMFY_LORA.name,
                "output_model_destination": destination.rstrip("/\\") + suffix}
    return {"output_model_format": fmt.name, "output_model_destination": destination}


def _key_holding(data: Any, message: str, prefix: str = "") -> str:
    """The config key whose value (a path) a problem without a key names: the longest such value wins
    ("base_loras[0].path" for "cannot read LoRA file /x/speed.safetensors ..."); "" when none does."""
    found: list[tuple[int, str]] = []

    def walk(value: Any, key: str) -> None:
        if isinstance(value, dict):
            for name, inner in value.items():
                walk(inner, f"{key}.{name}" if key else name)
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                walk(inner, f"{key}[{index}]")
        elif isinstance(value, str) and len(value) > 3 and value in message:
            found.append((len(value), key))

    walk(data, prefix)
    return max(found)[1] if found else ""
