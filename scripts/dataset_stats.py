#!/usr/bin/env python
"""What a config's concepts train on, without loading any model: files, usable samples, training items per
window length, seconds, buckets, captions missing / empty / cut, skipped files by reason.

python scripts/dataset_stats.py --config-path CFG.json [--json] [--no-cache]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from _bootstrap import OneLineArgumentParser, run_main  # first: import path, offline mode


def parse_args(argv: list[str] | None = None):
    parser = OneLineArgumentParser(description=__doc__)
    parser.add_argument("--config-path", required=True, help="training config JSON")
    parser.add_argument("--preset-path", help="a preset layered under the config")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--no-cache", action="store_true",
                        help="probe every clip anew instead of reading (and filling) the run's cache")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    from modules.dataLoader.statistics import dataset_statistics
    from modules.util.config.loading import load_train_config

    config = load_train_config(args.config_path, args.preset_path)
    fps, tokenizer = _model_facts(Path(config.base_model_name), config.fps)
    stats = dataset_statistics(config, fps, tokenizer, use_cache=not args.no_cache)
    if args.json:
        print(json.dumps({"concepts": [s.to_json() for s in stats], "items": sum(s.items for s in stats
                                                                                 if s.type == "STANDARD")}, indent=2))
        return 0
    for s in stats:
        print(f"{s.name} ({s.type.lower()}, {s.path})")
        print(f"  {s.files} files, {s.samples} usable samples, {s.seconds:.1f} s, {s.items} items per epoch")
        print("  items per length: " + ", ".join(f"{k} frames: {v}" for k, v in sorted(s.items_per_length.items())))
        print("  buckets: " + ", ".join(f"{k}: {v}" for k, v in s.buckets.items()))
        truncated = "not counted (no tokenizer)" if s.captions["truncated"] is None else s.captions["truncated"]
        print(f"  captions: {s.captions['missing']} missing, {s.captions['empty']} empty, {truncated} cut at 512 tokens")
        if s.skipped:
            print("  skipped: " + ", ".join(f"{reason}: {n}" for reason, n in s.skipped.items()))
    print(f"{sum(s.items for s in stats if s.type == 'STANDARD')} training items per epoch")
    return 0


def _model_facts(model_dir: Path, fps: float):
    """The training fps (the config's, else the variant's, read from the folder's JSON configs) and the UMT5
    tokenizer when the folder has one: files that are read in a second, no weights."""
    from modules.model.WanVariant import detect_variant

    if not fps:
        fps = detect_variant(model_dir).fps
    tokenizer = None
    if (model_dir / "tokenizer").is_dir():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir / "tokenizer")
    else:
        print(f"note: {model_dir / 'tokenizer'} is missing: captions cut at 512 tokens are not counted", file=sys.stderr)
    return fps, tokenizer


if __name__ == "__main__":
    run_main(main)
