#!/usr/bin/env python
"""Estimate the peak GPU memory and the host RAM of a training config before starting it, from the model folder's JSON
configs alone (no weights are read): python scripts/estimate_vram.py --config-path CFG [--gpu-gib N] [--ram-gib N]
[--json]

The models behind the figures are in modules/modelSetup/memory_estimate.py, host_memory_estimate.py and
docs/performance.md."""
from __future__ import annotations

import argparse
import json

from _bootstrap import OneLineArgumentParser, run_main  # first: import path, offline mode


def main() -> int:
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-path", required=True, help="training config JSON")
    parser.add_argument("--preset-path", help="a preset layered under the config")
    parser.add_argument("--gpu-gib", type=float, help="the GPU's memory (default: the detected GPU's, if any)")
    parser.add_argument("--ram-gib", type=float, help="the machine's RAM that AUTO plans for (default: this machine's)")
    parser.add_argument("--compute-capability", help="the GPU's CUDA compute capability, e.g. 8.6 (default: the "
                        "detected GPU's): AUTO stores the base in int8 ConvRot only where that was measured faster")
    parser.add_argument("--json", action="store_true",
                        help='print {"peak_gib", "terms", "fits", "suggestions", "memory_plan", "ram_gib", '
                             '"ram_phase", "ram_terms", "ram_caching_terms", "machine_ram_gib", "ram_fits", '
                             '"refusal"}')
    args = parser.parse_args()
    if args.gpu_gib is not None and not 0 < args.gpu_gib < float("inf"):
        parser.error(f"--gpu-gib must be the GPU's memory in GiB, a number above 0, got {args.gpu_gib:g}")
    if args.ram_gib is not None and not 0 < args.ram_gib < float("inf"):
        parser.error(f"--ram-gib must be the machine's RAM in GiB, a number above 0, got {args.ram_gib:g}")
    from modules.config.e2v_dataset_config import with_dataset_shapes
    from modules.config.loading import load_train_config
    from modules.modelSetup.memory_estimate import detected_gpu_gib
    from modules.modelSetup.memory_plan import detected_capability, int8_note, planned_estimate

    config = with_dataset_shapes(load_train_config(args.config_path, args.preset_path))  # E2V: the dataset's
    gpu = args.gpu_gib if args.gpu_gib is not None else (config.gpu_memory_gib or detected_gpu_gib())
    capability = parse_capability(parser, args.compute_capability) or detected_capability()
    result, plan = planned_estimate(config, gpu, args.ram_gib, capability=capability)
    from modules.util.attention_kernels import auto_order

    order, source = auto_order(capability)
    attention = f"attention AUTO on a GPU: {', '.join(b.name for b in order)} (first available; {source})"
    if args.json:
        print(json.dumps({**result.to_json(), "memory_plan": plan.changes_json(), **plan.host.to_json(),
                          "refusal": plan.refusal, "base_weight_format": plan.config.base_weight_format.name,
                          "int8_convrot": int8_note(capability), "why": plan.why,
                          "attention_auto_order": [b.name for b in order]}, indent=2))
        return 0
    if plan.estimate is not None:
        print(plan.summary())
    print(f"base weights: {plan.config.base_weight_format.name}; {int8_note(capability)}")
    print(attention)
    for phase, terms in result.phases.items():
        print(f"{phase}: {sum(terms.values()):.2f} GiB")
        for name, gib in terms.items():
            if gib:
                print(f"  {name:<28} {gib:8.2f} GiB")
    verdict = "" if result.fits is None else (" — fits" if result.fits else f" — does NOT fit {result.gpu_gib:g} GiB")
    print(f"peak: {result.peak_gib:.2f} GiB in the {result.peak_phase} phase (with {0.5:g} GiB headroom){verdict}")
    if config.sequence_parallel > 1:
        print(f"  (each of the {config.sequence_parallel} GPUs of a sequence group: the whole model, 1/"
              f"{config.sequence_parallel} of a clip's tokens)")
    for line in result.suggestions:
        print(f"  to fit: {line}")
    print(f"host {plan.host.line()}")
    for phase, terms in plan.host.phases().items():
        print(f"  {phase}: {sum(terms.values()):.2f} GiB")
        for name, gib in terms.items():
            if gib:
                print(f"    {name:<26} {gib:8.2f} GiB")
    if plan.refusal:
        print(f"AUTO will not start: {plan.refusal}")
    return 0


def parse_capability(parser, text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        major, minor = (int(part) for part in text.split("."))
    except ValueError:
        parser.error(f"--compute-capability must be MAJOR.MINOR, e.g. 8.6, got {text!r}")
    return major, minor


if __name__ == "__main__":
    run_main(main)
