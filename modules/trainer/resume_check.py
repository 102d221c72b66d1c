"""What a resume compares with the backup it continues: the training-relevant config keys (a change is
warned about, or refused when the backup's tensors no longer fit) and the trained tensors' shapes."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import torch

from modules.config.loading import migrate
from modules.config.train_config import E2VConfig, TrainConfig

# Keys that may change between a backup and its resume without changing the training itself.
RESUME_NEUTRAL_KEYS = {"continue_last_backup", "run_name", "overwrite_output", "resume_changed_config", "resume_fresh_optimizer", "epochs", "max_steps", "backup_after", "backup_after_unit",
                       "rolling_backup_count", "sample_after", "sample_after_unit", "sample_at_end", "samples", "sample_overrides", "tensorboard",
                       "output_model_destination", "output_model_format", "workspace_dir", "cache_dir",
                       "backup_before_save", "train_device", "data_parallel", "sequence_parallel", "save_every", "save_every_unit",
                       "save_skip_first", "rolling_save_count", "output_dtype",
                       # memory features that leave the math unchanged (AUTO may pick others on another GPU)
                       "memory_preset", "gpu_memory_gib", "checkpointing", "activation_offload", "ffn_chunks",
                       "blocks_to_swap",
                       # the old spellings of checkpointing (a backup's fingerprint of an earlier release left them out)
                       "gradient_checkpointing", "checkpoint_attention", "keep_self_attention", "offload_inactive_expert"}
RESUME_NEUTRAL_E2V_KEYS = {"export_i2v"}
# Keys that decide which tensors are trained and how the optimizer stores them (`option(structural=True)`):
# a backup written with other values cannot be loaded.
STRUCTURAL_KEYS = {f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("structural")} | {
    f"e2v.{f.name}" for f in dataclasses.fields(E2VConfig) if f.metadata.get("structural")}

_ABSENT = object()


def training_settings(config: dict, world_size: int) -> dict:
    """The config keys a resume must keep to continue the same training. batch_size counts per GPU, so
    the global batch stands in for it: 1 GPU × 4 resumes as 2 GPUs × 2 without a warning."""
    settings = {k: v for k, v in config.items() if k not in RESUME_NEUTRAL_KEYS and k != "batch_size"}
    if isinstance(settings.get("base_loras"), list):  # sample_only entries change the samples, not the training
        settings["base_loras"] = [e for e in settings["base_loras"] if not (isinstance(e, dict) and e.get("sample_only"))]
    if isinstance(settings.get("e2v"), dict):
        settings["e2v"] = {k: v for k, v in settings["e2v"].items() if k not in RESUME_NEUTRAL_E2V_KEYS}
    settings["global_batch_size"] = config.get("batch_size", 1) * world_size
    return settings


def config_fingerprint(config: TrainConfig, world_size: int) -> str:
    """sha256 of the training settings: a backup records it, a resume with another one warns."""
    training = training_settings(config.to_dict(), world_size)
    return hashlib.sha256(json.dumps(training, sort_keys=True).encode()).hexdigest()


def backup_config_changes(backup_dir: Path, backup_world_size: int, config: TrainConfig,
                          world_size: int) -> list[tuple[str, object, object]] | None:
    """(key, old, new) for each training-relevant key that differs from the backup's config.json; None when the
    backup has none or it cannot be read. The saved config is read as this WanTrainer reads any config (migrated,
    keys added since at their defaults), so a backup of an earlier release is compared by what it trained, not by
    the keys it could not know (e.g. base_weight_format)."""
    try:
        saved = json.loads((backup_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    current = json.loads(json.dumps(config.to_dict()))  # the same JSON types as the saved file
    return config_diff(training_settings(as_current_config(saved, backup_dir), backup_world_size),
                       training_settings(current, world_size))


def as_current_config(saved: dict, backup_dir: Path) -> dict:
    """A saved config dict as this version writes one: migrated and filled with the defaults of keys added since
    (left as saved when it no longer loads, e.g. a path check of a later version: every difference then shows)."""
    try:
        return json.loads(json.dumps(TrainConfig.from_dict(migrate(saved, str(backup_dir / "config.json"))).to_dict()))
    except Exception:  # noqa: BLE001 - any config this version refuses is compared as it is
        return saved


def saved_config_value(backup_dir: Path, key: str) -> int | None:
    """An integer key of the backup's config.json (None when absent, not an integer, or unreadable)."""
    try:
        value = json.loads((backup_dir / "config.json").read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unloadable_reason(backup_dir: Path, changes: list[tuple[str, object, object]],
                      saved_shapes: dict[str, torch.Size] | None, current_shapes: dict[str, torch.Size]) -> str | None:
    """Why the backup's tensors cannot be loaded (a change of what is trained: LoRA shape, targets, optimizer), as
    the one line to refuse the resume with, or None. `saved_shapes`: a whole-tensor backup's, None for shards."""
    structural = [c for c in changes if c[0] in STRUCTURAL_KEYS or c[0].split(".")[0] in STRUCTURAL_KEYS]
    mismatch = tensor_mismatch(saved_shapes, current_shapes) if saved_shapes else None
    if not structural and mismatch is None:
        return None
    what = "; ".join(describe_change(*c) for c in structural) or "the trained weights' shapes"
    detail = f" ({mismatch})" if mismatch else ""
    return (f"cannot resume from {backup_dir}: {what} changed since it was written{detail}; set it back, or train "
            "without continue_last_backup (or with another workspace_dir)")


def changed_config_refusal(backup_dir: Path, changes: list[tuple[str, object, object]]) -> str:
    """The one line refusing a backup whose training settings differ from this run's (another seed, learning
    rate, data...: likely another run's backup), and the ways out."""
    what = "; ".join(describe_change(*c) for c in changes[:4]) + ("; ..." if len(changes) > 4 else "")
    what = what or "its config fingerprint differs"
    return (f"not resuming {backup_dir}: it was written with other training settings ({what}); set them back, set "
            "resume_changed_config=true to resume it anyway, set run_name to the run to resume, or train without "
            "continue_last_backup (a new run gets its own folder)")


def config_diff(old: dict, new: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, old, new) for every differing key; nested dicts are compared key by key."""
    changes = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if isinstance(a, dict) and isinstance(b, dict):
            changes.extend(config_diff(a, b, f"{prefix}{key}."))
        elif a != b:
            changes.append((f"{prefix}{key}", a, b))
    return changes


def describe_change(key: str, old: object, new: object) -> str:
    return f"{key}: {_short(old)} -> {_short(new)}"


def tensor_mismatch(saved: dict[str, torch.Size], current: dict[str, torch.Size]) -> str | None:
    """Why tensors of shapes `saved` cannot be loaded into `current` (missing, extra or reshaped), or None."""
    missing, extra = sorted(set(current) - set(saved)), sorted(set(saved) - set(current))
    reshaped = sorted(k for k in set(saved) & set(current) if saved[k] != current[k])
    if reshaped:
        key = reshaped[0]
        return (f"{len(reshaped)} tensors differ in shape, e.g. {key}: {tuple(saved[key])} in the backup, "
                f"{tuple(current[key])} now")
    if missing or extra:
        return f"{len(missing)} trained tensors missing and {len(extra)} extra, e.g. {(missing or extra)[0]}"
    return None


def _short(value: object, limit: int = 60) -> str:
    text = "(unset)" if value is _ABSENT else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def base_lora_fingerprint(records: list[dict]) -> str:
    """The base LoRAs merged into this run's model by content (the sha256 the loader recorded for the header), not
    by path: a file replaced at the same path is another base."""
    return json.dumps([[r.get("path"), r.get("sha256"), r.get("strength"), r.get("expert")] for r in records])


def base_lora_change(backup_dir: Path, saved: str, now: str) -> str | None:
    """The one line refusing a resume whose merged base LoRAs differ in content from the backup's, or None."""
    if saved == now:
        return None
    try:
        old = {entry[0]: entry for entry in json.loads(saved)}
    except (ValueError, TypeError, IndexError, KeyError):
        old = {}
    changed = [entry[0] for entry in json.loads(now) if entry[0] in old and old[entry[0]][1] != entry[1]]
    what = (f"base LoRA '{changed[0]}' is another file than the one it was written with (its sha256 differs)"
            if changed else "the base LoRAs merged into the model differ from the ones it was written with")
    return (f"cannot resume from {backup_dir}: {what}; put the original file back, set resume_changed_config=true to "
            "resume on the new base anyway, or train without continue_last_backup")
