#!/usr/bin/env python
"""What a config's concepts (an E2V config: its datasets) train on, without loading any model: files, usable
samples, training items per window length, seconds, buckets, captions missing / empty / cut, skipped files by reason.

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
    from modules.config.loading import load_train_config
    from modules.dataLoader.e2v.statistics import e2v_dataset_statistics
    from modules.dataLoader.statistics import dataset_statistics, describe, model_facts

    config = load_train_config(args.config_path, args.preset_path)
    fps, tokenizer = model_facts(Path(config.base_model_name), config.fps)
    if tokenizer is None:
        print(f"note: {Path(config.base_model_name) / 'tokenizer'} is missing: captions cut at 512 tokens are not "
              "counted", file=sys.stderr)
    count = e2v_dataset_statistics if config.dataset_config else dataset_statistics  # E2V: the dataset JSON's
    stats = count(config, fps, tokenizer, use_cache=not args.no_cache)
    if args.json:
        print(json.dumps({"concepts": [s.to_json() for s in stats], "items": sum(s.items for s in stats
                                                                                 if s.type == "STANDARD")}, indent=2))
    else:
        print("\n".join(describe(stats)))
    return 0


if __name__ == "__main__":
    run_main(main)
