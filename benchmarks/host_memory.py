#!/usr/bin/env python
"""Host memory of loading a transformer: peak RSS of the project's loader against the weights' bytes; and, with
`--text-encoder`, what UMT5 holds in host memory after caching before and after the trainer frees it.

Writes a random full-size Wan transformer as a diffusers folder (config.json, sharded
`diffusion_pytorch_model-*.safetensors` and their index), one tensor at a time, so the writer never holds
the model; then loads it in a fresh subprocess with the project's loader (`WanModelLoader._load_transformer`,
what `load()` calls for `transformer/`) then reads every weight once (as a move to the device does: the pages of a
memory-mapped file are resident from then on) and reports that process's peak resident set during the load (VmHWM, reset
after the imports), the part of it above the resident set before the load, and at the end how much of the
resident set is private (RssAnon) and how much mapped file pages (RssFile: the page cache, shared and
reclaimable). Goal (issue #24): the load's peak
stays at or under 1.2 x the weights' bytes, i.e. no second copy of the weights is ever held.

    python benchmarks/host_memory.py                  # Wan2.2-TI2V-5B in bf16 (~10 GB on disk; check `free -g`)
    python benchmarks/host_memory.py --single-file    # the same weights in one file, as transformer_override
    python benchmarks/host_memory.py --layers 1       # one real-width block (~0.6 GB): what the test runs
    python benchmarks/host_memory.py --smoke          # 2 narrow layers: proves the script runs

`--text-encoder` writes a random real-width UMT5-XXL (the first --layers blocks, default all 24: 11.4 GB in bf16)
as a text_encoder/ folder, loads it with the project's loader in a fresh subprocess, reads every weight (the
encode), leaves it as caching on a GPU used to (`parked`: moved back from the device, each weight a private host
copy, which a CPU-only machine stands in for with one copy per weight) and then frees it as the trainer now does
(`WanModel.release_encoders`: the weights to the meta device, garbage collected, the C heap trimmed), reporting the
resident set (and RssAnon / RssFile) at each point. Goal: freed, the process holds under 5 % of the weights' bytes
more than right after the (memory-mapped) load.

    python benchmarks/host_memory.py --text-encoder --layers 2   # the embedding table and 2 blocks (~2.9 GB)

The folder is written under --folder (a temporary one by default) and deleted afterwards unless --keep.
Prints one JSON object; exits 1 when the goal is missed.
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

from benchmarks.gpu_step import transformer_config  # noqa: E402

GOAL = 1.2
SHARD_BYTES = 5 * 2**30  # diffusers' default max_shard_size
_ST_DTYPES = {"torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32"}


def _layout(config: dict, dtype) -> list[tuple[str, tuple[int, ...], object]]:
    """(name, shape, dtype) of every saved tensor, as `from_pretrained` would give them (the model's
    `_keep_in_fp32_modules` in float32), read from a model built on the meta device."""
    import torch
    from diffusers import WanTransformer3DModel

    with torch.device("meta"):
        model = WanTransformer3DModel.from_config(config)
    keep = set(model._keep_in_fp32_modules or ())
    return [(name, tuple(t.shape), torch.float32 if keep & set(name.split(".")) else dtype)
            for name, t in model.state_dict().items()]


def _text_encoder_layout(config: dict, dtype) -> list[tuple[str, tuple[int, ...], object]]:
    """UMT5's saved tensors: each parameter once (the embedding table is `shared.weight`; the encoder's copy is tied
    to it), in `dtype`."""
    import torch
    from transformers import UMT5Config, UMT5EncoderModel

    with torch.device("meta"):
        model = UMT5EncoderModel(UMT5Config(**config))
    return [(name, tuple(t.shape), dtype) for name, t in [*model.named_parameters(), *model.named_buffers()]]


def _write_shard(path: Path, tensors: list[tuple[str, tuple[int, ...], object]], seed: int) -> None:
    """A safetensors file written tensor by tensor: the header first (offsets known from the shapes), then each
    tensor's random bytes as they are drawn, so at most one tensor is in memory."""
    import torch

    header, offset = {}, 0
    for name, shape, dtype in tensors:
        size = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        header[name] = {"dtype": _ST_DTYPES[str(dtype)], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-aligned
    generator = torch.Generator().manual_seed(seed)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        for _, shape, dtype in tensors:
            tensor = torch.randn(shape, generator=generator, dtype=torch.float32).mul_(0.02).to(dtype)
            f.write(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
            del tensor


def write_transformer(folder: Path, config: dict, dtype, single_file: Path | None = None) -> int:
    """The diffusers folder of a random transformer (with `single_file`: only its config.json, the weights in that
    one file, diffusers-named, as `transformer_override` takes it); returns the weights' bytes."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    layout = _layout(config, dtype)
    shards: list[list] = [[]]
    size = 0
    total = 0
    for entry in layout:
        nbytes = torch.Size(entry[1]).numel() * torch.empty((), dtype=entry[2]).element_size()
        if shards[-1] and size + nbytes > SHARD_BYTES and single_file is None:
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += nbytes
        total += nbytes
    if single_file is not None:
        _write_shard(single_file, shards[0], seed=0)
    weight_map = {}
    for index, tensors in enumerate(shards if single_file is None else []):
        name = f"diffusion_pytorch_model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
        _write_shard(folder / name, tensors, seed=index)
        weight_map.update({t[0]: name for t in tensors})
    if single_file is None:
        (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    (folder / "config.json").write_text(json.dumps({"_class_name": "WanTransformer3DModel",
                                                    "_diffusers_version": "0.35.0", **config}, indent=1))
    return total


def write_text_encoder(folder: Path, config: dict, dtype) -> int:
    """A random UMT5 as a transformers folder (config.json and model.safetensors); returns the weights' bytes."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    layout = _text_encoder_layout(config, dtype)
    _write_shard(folder / "model.safetensors", layout, seed=0)
    (folder / "config.json").write_text(json.dumps({"architectures": ["UMT5EncoderModel"], "model_type": "umt5",
                                                    **config}, indent=1))
    return sum(torch.Size(shape).numel() * torch.empty((), dtype=d).element_size() for _, shape, d in layout)


def _rss() -> dict:
    return {"rss_gib": round(_status_kib("VmRSS") / 2**20, 3), "anon_gib": round(_status_kib("RssAnon") / 2**20, 3),
            "file_gib": round(_status_kib("RssFile") / 2**20, 3)}


def text_encoder_child(model_dir: str, dtype_name: str) -> None:
    """Run in the subprocess: UMT5 loaded by the project's loader, read, parked as caching on a GPU left it, then
    freed as the trainer frees it; the resident set at each point (JSON on stdout)."""
    import torch

    from modules.model.encoder_residency import EncoderResidency
    from modules.modelLoader.WanModelLoader import WanModelLoader

    points = {"baseline": _rss()}
    encoder = WanModelLoader._load_text_encoder(Path(model_dir), getattr(torch, dtype_name), "")
    points["loaded"] = _rss()
    with torch.no_grad():
        checksum = float(sum(p.reshape(-1)[::256].float().sum() for p in encoder.parameters()))
    points["read"] = _rss()
    with torch.no_grad():  # what `.to(cuda)` then `.to("cpu")` leaves: a private host copy of every weight
        for param in encoder.parameters():
            param.data = param.data.clone()
    points["parked"] = _rss()
    holder = type("Model", (), {"text_encoder": encoder, "image_encoder": None})()
    residency = EncoderResidency(loaders={"text": lambda: encoder})
    freed = residency.release(holder, ["text"])
    points["freed"] = _rss()
    print(json.dumps({"points": points, "freed_gib": round(freed, 3), "checksum": checksum}))


def _status_kib(field: str) -> int:
    """A /proc/self/status field in KiB (RssAnon: private memory; RssFile: mapped file pages)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def load_child(folder: str, dtype_name: str, override: str) -> None:
    """Run in the subprocess: imports, the baseline peak, the load, then every weight read once (as a move to
    the device reads it: pages of a memory-mapped file count from then on), the peaks (JSON on stdout)."""
    import torch

    from modules.modelLoader.WanModelLoader import WanModelLoader

    baseline = _status_kib("VmRSS")  # resident now (the imports' own peak is behind us) ...
    try:  # ... and the peak counted from here: writing 5 resets VmHWM (Linux)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    transformer = WanModelLoader._load_transformer(Path(folder).parent, Path(folder).name,
                                                   getattr(torch, dtype_name), override)
    after_load = _status_kib("VmHWM")
    with torch.no_grad():
        # one value per KiB: every page of every weight is read, with no full-size temporary beside it
        checksum = float(sum(p.reshape(-1)[::256].float().sum() for p in transformer.parameters()))
    params = sum(t.numel() * t.element_size() for t in transformer.state_dict().values())
    print(json.dumps({"baseline_rss_kib": baseline, "after_load_rss_kib": after_load, "peak_rss_kib": _status_kib("VmHWM"),
                      "rss_anon_kib": _status_kib("RssAnon"), "rss_file_kib": _status_kib("RssFile"),
                      "loaded_bytes": params, "checksum": checksum}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="5b", help="a benchmarks/gpu_step.py MODELS key (default 5b)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--smoke", action="store_true", help="2 narrow layers (proves the script runs)")
    parser.add_argument("--layers", type=int, default=None, help="only the first N blocks (a smaller real-width model)")
    parser.add_argument("--json", default="", help="also write the result to this file")
    parser.add_argument("--folder", default="", help="where to write the model (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the written folder")
    parser.add_argument("--single-file", action="store_true",
                        help="the weights in one diffusers-named file loaded as transformer_override (the loader's "
                             "single-file path) instead of the folder's shards")
    parser.add_argument("--text-encoder", action="store_true",
                        help="UMT5-XXL's host memory after caching, parked (before) and freed (now)")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--text-child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--override", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        load_child(args.child, args.dtype, args.override)
        return 0
    if args.text_child:
        text_encoder_child(args.text_child, args.dtype)
        return 0

    import torch

    if args.text_encoder:
        return text_encoder_main(args)

    config = transformer_config(args.model, layers=args.layers, smoke=args.smoke)
    root = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="wan_host_memory_"))
    folder = root / "transformer"
    try:
        single = root / "transformer.safetensors" if args.single_file else None
        weights = write_transformer(folder, config, getattr(torch, args.dtype), single)
        run = subprocess.run([sys.executable, __file__, "--child", str(folder), "--dtype", args.dtype,
                              "--override", str(single or "")],
                             capture_output=True, text=True, cwd=ROOT)
        if run.returncode:
            sys.stderr.write(run.stderr)
            return run.returncode
        child = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        if not args.keep:
            shutil.rmtree(root if not args.folder else folder, ignore_errors=True)
            if args.folder and args.single_file:
                (root / "transformer.safetensors").unlink(missing_ok=True)
    peak = child["peak_rss_kib"] * 1024
    above = peak - child["baseline_rss_kib"] * 1024
    result = {"model": args.model, "smoke": args.smoke, "layers": config["num_layers"], "source": "single file" if args.single_file else "folder", "dtype": args.dtype, "weights_bytes": weights,
              "weights_gib": round(weights / 2**30, 3), "loaded_bytes": child["loaded_bytes"],
              "baseline_rss_gib": round(child["baseline_rss_kib"] / 2**20, 3),
              "after_load_rss_gib": round(child["after_load_rss_kib"] / 2**20, 3),
              "peak_rss_gib": round(peak / 2**30, 3),
              "end_rss_anon_gib": round(child["rss_anon_kib"] / 2**20, 3),
              "end_rss_file_gib": round(child["rss_file_kib"] / 2**20, 3),
              "load_rss_gib": round(above / 2**30, 3), "load_rss_over_weights": round(above / weights, 3),
              "peak_rss_over_weights": round(peak / weights, 3), "goal": GOAL}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if args.smoke or above <= GOAL * weights else 1


def text_encoder_main(args) -> int:
    import torch

    from benchmarks.memory_fullsize import UMT5_XXL

    config = {**UMT5_XXL, "num_layers": args.layers or UMT5_XXL["num_layers"]}
    if args.smoke:
        config.update(d_model=256, d_ff=512, d_kv=32, num_heads=8, num_layers=2)  # the vocabulary: 0.13 GB
    root = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="wan_text_encoder_"))
    try:
        weights = write_text_encoder(root / "text_encoder", config, getattr(torch, args.dtype))
        run = subprocess.run([sys.executable, __file__, "--text-child", str(root), "--dtype", args.dtype],
                             capture_output=True, text=True, cwd=ROOT)
        if run.returncode:
            sys.stderr.write(run.stderr)
            return run.returncode
        child = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        if not args.keep:
            shutil.rmtree(root if not args.folder else root / "text_encoder", ignore_errors=True)
    points = child["points"]
    held = {name: round(points[name]["rss_gib"] - points["baseline"]["rss_gib"], 3) for name in points}
    result = {"component": "text_encoder", "layers": config["num_layers"], "smoke": args.smoke, "dtype": args.dtype,
              "weights_gib": round(weights / 2**30, 3), "above_baseline_gib": held, "points": points,
              "freed_gib": child["freed_gib"], "goal": "freed holds < 5 % of the weights above loaded"}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if (held["freed"] - held["loaded"]) * 2**30 < 0.05 * weights else 1


if __name__ == "__main__":
    sys.exit(main())
