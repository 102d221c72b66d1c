#!/usr/bin/env python
"""Train a Wan model: python scripts/train.py --config-path CFG.json [--preset-path P] [--config-value a.b=c ...]"""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from _bootstrap import run_main  # first: import path, offline mode


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-path", help="training config JSON")
    parser.add_argument("--preset-path", help="a preset file or the name of a shipped preset, layered under the config")
    parser.add_argument("--config-value", action="append", default=[], metavar="KEY=VALUE",
                        help="override one key (JSON value), e.g. epochs=3 or concepts.0.path=data; repeatable")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    if not args.config_path and not args.preset_path:
        print("error: give --config-path (and/or --preset-path)", file=sys.stderr)
        return 2
    from modules.config.loading import load_train_config
    from modules.trainer.preflight import check_paths

    # The config and every check that needs neither torch nor a model first: importing the trainer (diffusers' Wan
    # pipelines) takes many seconds, a config error should not wait for it. The data verdict is the trainer's start.
    config = load_train_config(args.config_path, args.preset_path, args.config_value)
    config_files = [path for path in (args.config_path, args.preset_path) if path and Path(path).is_file()]
    check_paths(config, config_files)

    from modules.trainer.GenericTrainer import GenericTrainer
    from modules.util.commands import StopSignalHandler, TrainCommands
    from modules.util.distributed import exit_rank

    commands = TrainCommands()
    request_stop = StopSignalHandler(commands)  # first Ctrl-C/SIGTERM: stop after this step; second: stop now
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    trainer = GenericTrainer(config, commands=commands, config_files=config_files)
    code = _run(trainer)
    if trainer.dist.enabled:
        exit_rank(code)
    return code


def _run(trainer) -> int:
    """Train, save, report; the exit code."""
    from modules.trainer.GenericTrainer import TrainingStopped

    try:
        trainer.start()
        trainer.train()
    except TrainingStopped as stopped:
        trainer.close()
        if stopped.path is not None:
            print(f"stopped: backup written to {stopped.path}; resume with --config-value continue_last_backup=true")
        elif stopped.reason:
            print(f"stopped: {stopped.reason}")
        else:
            print("stopped at once: no backup written (the last scheduled one, if any, is intact)")
        return 130
    except BaseException:
        trainer.close()
        raise
    paths = trainer.end()
    for path in paths:
        print(f"model written to {path}")
    for path in trainer.sample_paths:
        print(f"sample written to {path}")
    if trainer.snapshot_paths:
        print(f"{len(trainer.snapshot_paths)} snapshot file(s) written to {trainer.snapshot_paths[0].parent}")
    return 0


if __name__ == "__main__":
    run_main(main)
