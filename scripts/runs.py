#!/usr/bin/env python
"""The runs of a workspace: each run's state (running / stopped at step N of M / finished / failed, with the reason),
last backup, outputs, samples and curves. Reads only; loads no model.

python scripts/runs.py list [--workspace-dir DIR | --config-path CFG] [--json]
python scripts/runs.py show NAME [--workspace-dir DIR | --config-path CFG] [--json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from _bootstrap import OneLineArgumentParser, run_main  # first: import path, offline mode


def parse_args(argv: list[str] | None = None):
    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{list,show}",
                                     help="list: every run, newest first; show: one run in full")
    for name, text in (("list", "every run of the workspace, newest first"), ("show", "one run in full")):
        command = commands.add_parser(name, help=text, description=text)
        if name == "show":
            command.add_argument("name", help="the run's name (its folder in the workspace; a run renamed by hand is "
                                              "also found by its former name), or the path of a run folder")
        where = command.add_mutually_exclusive_group()
        where.add_argument("--workspace-dir", help="the workspace (default: the config's workspace_dir, else "
                                                   "workspace/run, the default workspace_dir)")
        where.add_argument("--config-path", help="a training config: its workspace_dir")
        command.add_argument("--json", action="store_true", help="print JSON instead of text")
    return parser.parse_args(argv)


def workspace_of(args) -> Path:
    from modules.config.train_config import TrainConfig
    from modules.util.errors import UserError

    if args.workspace_dir:
        return Path(args.workspace_dir)
    if args.config_path:
        from modules.config.loading import read_json

        config = read_json(args.config_path)
        value = config.get("workspace_dir") if isinstance(config, dict) else None
        if value is not None and not isinstance(value, str):
            raise UserError(f"config key 'workspace_dir' in {args.config_path} must be a folder path (text)")
        if value:
            return Path(value)
    return Path(TrainConfig().workspace_dir)


def main() -> int:
    args = parse_args()
    from modules.trainer.run_catalog import describe_run, list_runs
    from modules.util.errors import UserError
    from modules.util.run_folder import find_run

    workspace = workspace_of(args)
    if args.command == "list":
        runs = list_runs(workspace)
        if args.json:
            print(json.dumps({"workspace": str(workspace), "runs": [r.to_json() for r in runs]}, indent=2))
        elif not runs:
            print(f"no runs in {workspace}")
        else:
            print(f"runs in {workspace}, newest first:")
            width = max(len(r.name) for r in runs)
            for run in runs:
                print(f"  {run.name:<{width}}  {run.describe()}")
        return 0
    run = find_run(workspace, args.name)
    folder = run.path if run is not None else Path(args.name)
    try:
        summary = describe_run(folder)
    except ValueError:
        raise UserError(f"no run '{args.name}' in {workspace}: `scripts/runs.py list` shows its runs") from None
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
        return 0
    rows = [("run", summary.name), ("state", summary.describe()), ("folder", summary.folder),
            ("created", summary.created or "-"), ("last started", summary.last_started or "-"),
            ("last backup", summary.last_backup or "none (nothing to resume)"),
            ("outputs", ", ".join(map(str, summary.outputs)) or "-"), ("samples", summary.samples_dir or "-"),
            ("curves", summary.tensorboard_dir or "-"), ("config", summary.config_path or "-")]
    if summary.recovered:
        rows.append(("note", "its run.json was missing or damaged: who it is was read from its backups"))
    for key, value in rows:
        print(f"{key + ':':<14}{value}")
    if summary.resumable and summary.config_path is not None:
        print(f"resume it:    .venv/bin/python scripts/train.py --config-path '{summary.config_path}' --config-value "
              "continue_last_backup=true")
    return 0


if __name__ == "__main__":
    run_main(main)
