#!/usr/bin/env python
"""Peak host memory of loading a ComfyUI int8 ConvRot transformer file whose one `comfy_quant` entry is a huge JSON
(the round-5 report: 200 MB of it took 2.58 GB), against the intact file. Each load runs in its own process
(`ru_maxrss` is per process; Linux carries a parent's peak into its children, so this script imports no torch).
Measured on this machine: intact 0.39 GiB loaded; 200 MiB entry refused in one line at 0.38 GiB (the previous code
loaded it at 2.33 GiB peak).

    .venv/bin/python benchmarks/int8_marker_memory.py [--marker-mib 200]

Needs comfy-kitchen (the int8 quantiser the tests use). Prints one line per file: loaded or refused, and the peak.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LOAD = """
import resource, sys, torch
sys.path.insert(0, {repo!r})
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.util.errors import UserError
try:
    WanModelLoader().load({model!r}, torch.device("cpu"), transformer_override={file!r}, keep_int8=True)
    outcome = "loaded"
except UserError as e:
    outcome = "refused: " + str(e)[:110] + "..."
print(f"{{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f}} GiB peak, {{outcome}}")
"""


MAKE = """
import json, sys, torch
from pathlib import Path
sys.path.insert(0, {repo!r})
from safetensors.torch import load_file, save_file
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.synthetic.tiny_model import write_tiny_model
from tests.test_int8_files import comfy_int8_file
folder = Path({folder!r})
model = write_tiny_model("t2v", folder / "tiny")
state = WanModelLoader().load(str(model), torch.device("cpu")).transformer.state_dict()
intact, _ = comfy_int8_file(state, folder / "intact.safetensors")
tensors = load_file(intact)
name = sorted(n for n in tensors if n.endswith(".comfy_quant"))[0]
text = json.dumps({{"format": "int8_tensorwise", "convrot": True, "pad": "x" * ({mib} << 20)}})
tensors[name] = torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8)
save_file(tensors, str(folder / "huge.safetensors"))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--marker-mib", type=int, default=200)
    args = parser.parse_args()
    # every step in a child of this torch-free process: Linux carries a parent's peak RSS into its children
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-c", MAKE.format(repo=str(REPO), folder=folder, mib=args.marker_mib)],
                       check=True, capture_output=True, timeout=600)
        model = str(Path(folder) / "tiny")
        for label, file in (("intact file", "intact"), (f"{args.marker_mib} MiB comfy_quant", "huge")):
            code = LOAD.format(repo=str(REPO), model=model, file=str(Path(folder) / f"{file}.safetensors"))
            result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
            print(f"{label}: {result.stdout.strip() or result.stderr.strip()[-300:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
