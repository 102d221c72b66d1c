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
    from modules.util.config.train_config import ConceptConfig, E2VConfig, SampleConfig, TrainConfig

    out = ["# Configuration keys", "",
           "Generated from `modules/util/config/train_config.py` by `python scripts/generate_config_docs.py`;",
           "a test fails when this file is stale. Configs are strict: an unknown key or a wrong type stops",
           "with one line naming the key. Presets are partial configs layered under the config file;",
           "`--config-value a.b=c` overrides one key (`concepts.0.path=data`).", ""]
    for title, cls in (("Training config (top level)", TrainConfig), ("`concepts[]`", ConceptConfig),
                       ("`samples[]`", SampleConfig), ("`e2v`", E2VConfig)):
        out += [f"## {title}", "", *_table(cls), ""]
    return "\n".join(out)


if __name__ == "__main__":
    target = ROOT / "docs" / "config.md"
    target.parent.mkdir(exist_ok=True)
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")
