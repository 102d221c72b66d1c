#!/usr/bin/env python
"""Check tests/comfyui_nodes.py (the node inputs our workflow test validates against) with ComfyUI's source.

    python tools/check_comfy_workflow.py --comfyui PATH/TO/ComfyUI

Reads each node class's INPUT_TYPES (nodes.py style: "name": (...) under "required" / "optional") or io.Schema
inputs (comfy_api style: io.<Type>.Input("name", ..., optional=True)) and its outputs from the source text (no
import: ComfyUI's node modules need all of ComfyUI), and prints every difference in input names, required vs
optional, and output count. Exit 1 on a difference.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FILES = ("nodes.py", "comfy_extras/nodes_model_advanced.py", "comfy_extras/nodes_hunyuan.py",
         "comfy_extras/nodes_images.py", "comfy_extras/nodes_video.py", "comfy_extras/nodes_wan.py")


def class_blocks(root: Path) -> dict[str, str]:
    blocks = {}
    for name in FILES:
        text = re.sub(r"^\s*#.*$", "", (root / name).read_text(encoding="utf-8"), flags=re.M)  # commented-out inputs
        starts = [(m.group(1), m.start()) for m in re.finditer(r"^class (\w+)\b", text, re.M)]
        for (cls, start), (_, end) in zip(starts, starts[1:] + [("", len(text))]):
            blocks.setdefault(cls, text[start:end])
    return blocks


def parsed(block: str) -> tuple[set[str], set[str], int]:
    """(required input names, optional ones, output count) of one node class's source."""
    if "io.Schema(" in block:
        required, optional = set(), set()
        for m in re.finditer(r'io\.\w+\.Input\(\s*"(\w+)"(.*?)\)(?=,\s*\n|\s*\n\s*\])', block, re.S):
            (optional if "optional=True" in m.group(2) else required).add(m.group(1))
        return required, optional, len(re.findall(r"io\.\w+\.Output\(", block))
    body = block[block.index("def INPUT_TYPES"):]
    body = body[:body.index("RETURN_TYPES")] if "RETURN_TYPES" in body else body
    hidden = body.find('"hidden"')
    body = body[:hidden] if hidden >= 0 else body
    split = body.find('"optional"')
    names = lambda text: set(re.findall(r'"(\w+)"\s*:\s*\(', text))  # noqa: E731
    required, optional = (names(body[:split]), names(body[split:])) if split >= 0 else (names(body), set())
    returns = re.search(r"RETURN_TYPES\s*=\s*\(([^)]*)\)", block)
    count = len([r for r in returns.group(1).split(",") if r.strip()]) if returns else 0
    return required, optional, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--comfyui", required=True, type=Path, help="a ComfyUI checkout (its folder with nodes.py)")
    args = parser.parse_args()
    from tests.comfyui_nodes import NODES

    blocks, differences = class_blocks(args.comfyui), 0
    for node, (required, optional, outputs) in NODES.items():
        if node not in blocks:
            print(f"{node}: not found in {', '.join(FILES)}")
            differences += 1
            continue
        theirs = parsed(blocks[node])
        ours = (set(required), set(optional), len(outputs))
        if theirs != ours:
            differences += 1
            print(f"{node}: ComfyUI required {sorted(theirs[0])} optional {sorted(theirs[1])} outputs {theirs[2]}; "
                  f"tests/comfyui_nodes.py required {sorted(ours[0])} optional {sorted(ours[1])} outputs {ours[2]}")
    print(f"{len(NODES)} nodes checked, {differences} differ")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
