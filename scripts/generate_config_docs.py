#!/usr/bin/env python
"""Writes docs/config.md from the typed configs (every key, its type, default and meaning)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _table(cls) -> list[str]:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, type_name, default, doc in cls.documentation():
        shown = json.dumps(default)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        lines.append(f"| `{name}` | {type_name} | `{shown}` | {doc} |".replace("\n", " "))
    return lines


def render() -> str:
    from modules.config import e2v_dataset_config as e2v
    from modules.config.guidance_preserving_config import GuidancePreservingConfig
    from modules.config.train_config import BaseLoRAConfig, ConceptConfig, E2VConfig, SampleConfig, TrainConfig
    from modules.optimizer.registry import OPTIMIZERS

    out = ["# Configuration keys", "",
           "Generated from the typed configs in `modules/config/` by `.venv/bin/python scripts/generate_config_docs.py`;",
           "a test fails when this file is stale. Configs are strict: an unknown key or a wrong type stops",
           "with one line naming the key. Presets are partial configs layered under the config file;",
           "`--config-value a.b=c` overrides one key (`concepts.0.path=data`).", ""]
    for title, cls in (("Training config (top level)", TrainConfig), ("`concepts[]`", ConceptConfig),
                       ("`samples[]`", SampleConfig), ("`e2v`", E2VConfig), ("`base_loras[]`", BaseLoRAConfig),
                       ("`guidance_preserving`", GuidancePreservingConfig)):
        out += [f"## {title}", "", *_table(cls), ""]
    for name, spec in OPTIMIZERS.items():  # the registry decides which blocks exist
        out += [f"## `optimizer_options.{name}`", "", spec.doc, "", *_table(spec.options), ""]
    out += ["# E2V dataset JSON (`dataset_config`)", "",
            "The format: `{\"datasets\": [ ... ]}`; the flat form (`vae_repeat`, `position`, `clip_process`,",
            "`vae_combine`, `clip_resolution`) is accepted too and read as the nested one. What each setting does to the",
            "tensors: [e2v.md](e2v.md).", ""]
    for title, cls in (("`datasets[]`", e2v.E2VDatasetConfig), ("`datasets[].elements[]`", e2v.ElementConfig),
                       ("`elements[].vae`", e2v.ElementVaeConfig), ("`elements[].clip` (or `false`)", e2v.ElementClipConfig),
                       ("`processors.vae`", e2v.VaeProcessorConfig), ("`processors.clip`", e2v.ClipProcessorConfig),
                       ("`visualization`", e2v.VisualizationConfig),
                       ("`visualization.processors[]`", e2v.VisualizationProcessorConfig)):
        out += [f"## {title}", "", *_table(cls), ""]
    return "\n".join(out)


if __name__ == "__main__":
    target = ROOT / "docs" / "config.md"
    target.parent.mkdir(exist_ok=True)
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")
