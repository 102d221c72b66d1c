#!/usr/bin/env python
"""Peak host memory (RSS) of merging a base LoRA into the full-size Wan2.2-TI2V-5B transformer (random weights).

Writes a random 5B transformer as a diffusers folder (bfloat16, sharded like save_pretrained, one tensor in memory
at a time: ~10 GB on disk) and a random rank-R COMFY_LORA on the default targets of all 30 blocks into a temp
folder, then in a fresh process loads the transformer as the model loader does (`from_pretrained`) and merges the
LoRA through the project's merge (`modules/modelFile/base_loras.py`, what `base_loras` runs at load time). The
temp folder is deleted at the end.

The child reports VmHWM (peak RSS) after the load, resets it (`/proc/self/clear_refs` 5) and reports it again
after the merge, so the merge's own peak is separated from the loader's; plus RssAnon / RssFile (file pages of
mmapped weights count in RSS but are page cache) and the weights' bytes.

    python benchmarks/base_lora_merge_memory.py                 # 5B at full size, rank 64 (needs ~12 GB RAM, 11 GB disk)
    python benchmarks/base_lora_merge_memory.py --smoke         # 2 narrow blocks: seconds
Prints one JSON object (and writes it to --json FILE).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _status() -> dict[str, int]:
    """VmHWM, VmRSS, RssAnon, RssFile of this process in bytes (Linux)."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
            values[key] = int(rest.split()[0]) * 1024
    return values


def _gib(n: float) -> float:
    return round(n / 2 ** 30, 3)


def write_inputs(folder: Path, config: dict, rank: int) -> tuple[Path, Path, int]:
    """(transformer folder, LoRA file, weight bytes): random weights written a tensor at a time."""
    import torch
    from diffusers import WanTransformer3DModel

    from modules.config.train_config import DEFAULT_LORA_TARGETS
    from modules.modelFile.lora_formats import COMFY_LORA, LoRALayer, LoRAWeights
    from modules.modelSaver.diffusers_folder import write_transformer_folder
    from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
    from modules.util.safetensors_io import TensorSpec

    with torch.device("meta"):
        model = WanTransformer3DModel.from_config(config)
    specs = {name: TensorSpec(torch.bfloat16, tuple(t.shape)) for name, t in model.state_dict().items()}
    generator = torch.Generator().manual_seed(0)

    def produce(name: str) -> torch.Tensor:
        return (torch.randn(specs[name].shape, generator=generator) * 0.02).to(torch.bfloat16)

    transformer = folder / "transformer"
    write_transformer_folder(transformer, config, specs, produce, max_shard_bytes=5 * 10**9)
    targets = tuple(t for t in DEFAULT_LORA_TARGETS if "add_" not in t)  # T2V/TI2V blocks have no image projections
    layers = {}
    for name, spec in specs.items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.startswith("blocks.") and module.endswith(targets):
            out_features, in_features = spec.shape
            layers[module] = LoRALayer(torch.randn(rank, in_features, generator=generator) * 0.01,
                                       torch.randn(out_features, rank, generator=generator) * 0.01, float(rank))
    lora = folder / "lora.safetensors"
    save_lora(LoRAWeights(layers=layers), lora, COMFY_LORA, lora_metadata("wan-2.2-ti2v"), dtype=torch.bfloat16)
    return transformer, lora, sum(spec.nbytes for spec in specs.values())


def child(transformer: str, lora: str) -> dict:
    """Load as the model loader does, then merge; memory around each."""
    import torch
    from diffusers import WanTransformer3DModel

    from modules.modelFile.base_loras import merge_stack, read_base_lora

    before = _status()
    model = WanTransformer3DModel.from_pretrained(transformer, torch_dtype=torch.bfloat16)
    loaded = _status()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the merge's own peak from here
    read = read_base_lora(lora)
    merge_stack(model, [(read, 1.0)])
    merged = _status()
    return {"before": before, "after_load": loaded, "after_merge": merged,
            "lora_modules": len(read.weights.layers)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2 narrow blocks instead of the full 5B")
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--workdir", help="where the temp folder goes (default: the system temp)")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0

    from benchmarks.gpu_step import transformer_config

    config = transformer_config("5b", smoke=args.smoke)
    folder = Path(tempfile.mkdtemp(prefix="base-lora-bench-", dir=args.workdir))
    try:
        transformer, lora, weight_bytes = write_inputs(folder, config, args.rank)
        proc = subprocess.run([sys.executable, __file__, "--child", str(transformer), str(lora)],
                              capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="2"))
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            return 1
        measured = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    load, merge = measured["after_load"], measured["after_merge"]
    result = {
        "model": "5b-smoke" if args.smoke else "5b", "rank": args.rank, "lora_modules": measured["lora_modules"],
        "weights_gib": _gib(weight_bytes),
        "rss_before_load_gib": _gib(measured["before"]["VmRSS"]),
        "peak_rss_load_gib": _gib(load["VmHWM"]),
        "rss_after_load_gib": _gib(load["VmRSS"]), "rss_anon_after_load_gib": _gib(load["RssAnon"]),
        "rss_file_after_load_gib": _gib(load["RssFile"]),
        "peak_rss_merge_gib": _gib(merge["VmHWM"]),
        "rss_after_merge_gib": _gib(merge["VmRSS"]), "rss_anon_after_merge_gib": _gib(merge["RssAnon"]),
        "merge_peak_over_weights": round(merge["VmHWM"] / weight_bytes, 3),
        "merge_extra_over_loaded_gib": _gib(merge["VmHWM"] - load["VmRSS"]),
        "process_peak_over_weights": round(max(load["VmHWM"], merge["VmHWM"]) / weight_bytes, 3),
        # without what the process held before loading (torch, diffusers: ~0.4 GiB of code and libraries)
        "merge_peak_over_weights_net": round((merge["VmHWM"] - measured["before"]["VmRSS"]) / weight_bytes, 3),
        "process_peak_over_weights_net": round((max(load["VmHWM"], merge["VmHWM"]) - measured["before"]["VmRSS"])
                                               / weight_bytes, 3),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
