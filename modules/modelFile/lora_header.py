"""The header entries that say what a LoRA file is, written by `modelSaver/WanLoRASaver.py` and read back by the
loader, the merge and the sampling scripts (`lora_checks.py`, `base_loras.py`). VARIANT_KEY (`wan-2.1-t2v`,
`wan-2.2-a14b-t2v`, ...) is `lora_formats`', whose reader reads it too."""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

EXPERT_KEY = "wantrainer.expert"  # `high_noise` / `low_noise`; absent for one-expert models
BOUNDARY_KEY = "wantrainer.boundary_ratio"  # two-expert models: where the experts split (of 1000 timesteps)
BASE_CONFIG_HASH_KEY = "wantrainer.base_transformer_config"  # `transformer_config_hash` of the base
ADAPTER_KEY = "wantrainer.adapter"
BASE_LORAS_KEY = "wantrainer.base_loras"  # JSON list of the LoRAs merged into the base: name, path, sha256, strength
# E2V-expanded bases: the expanded transformer config, so a sampler or a merge rebuilds the layout from the file
TRANSFORMER_CONFIG_KEY = "wantrainer.transformer_config"
EXPERT_NAMES = ("high_noise", "low_noise")  # by expert index: transformer, transformer_2


def stack_header(records: Iterable[Mapping[str, Any]], expert: int) -> dict[str, str]:
    """The trained LoRA's header entry for the base LoRAs merged into `expert` ({} when none): not the
    `training_only` ones, which the LoRA is used without."""
    stack = [{key: record[key] for key in ("name", "path", "sha256", "strength")}
             for record in records if expert in record["experts"] and not record.get("training_only")]
    return {BASE_LORAS_KEY: json.dumps(stack, separators=(",", ":"))} if stack else {}


def read_stack(metadata: Mapping[str, str]) -> list[dict[str, Any]]:
    """The base-LoRA records of a LoRA header ([] when it has none or they do not parse)."""
    try:
        stack = json.loads(metadata.get(BASE_LORAS_KEY, "") or "[]")
    except ValueError:
        return []
    return [s for s in stack if isinstance(s, dict) and {"name", "strength"} <= s.keys()] \
        if isinstance(stack, list) else []
