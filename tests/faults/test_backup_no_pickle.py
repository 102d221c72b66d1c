"""Resuming a backup never unpickles (issue #10, item 1), and a full disk during a backup is one line (item 2).

Backups get shared ("resume my run on your GPU"), so an attacker controls every byte of every file and
updates progress.json's checksums to match. Each test plants a pickle whose loading would create a marker
file: no resume may create it. The optimizer and scheduler states still come back exactly (safetensors +
JSON), and backups of older WanTrainers (torch.save / torch.distributed.checkpoint) are refused unread.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

import modules.modelSetup.sharding as sharding
import modules.trainer.backup as backup_module
from modules.config.train_config import TrainConfig
from modules.modelSetup.optimization import create_lr_scheduler
from modules.trainer.backup import (
    DamagedBackup,
    OldFormatBackup,
    TrainProgress,
    latest_backup,
    list_backups,
    read_backup,
    write_backup,
    write_sharded_backup,
)
from modules.trainer.backup_manifest import MANIFEST, write_manifest
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util import state_io
from modules.util.distributed import DistributedContext
from modules.util.enum import LearningRateScheduler
from modules.util.errors import UserError
from modules.util.run_folder import RunFolder, find_run
from tests.conftest import train_config_dict
from tests.run_paths import last_run, make_run

# What safetensors' Rust writer raises on a full disk (not an OSError).
DISK_FULL = SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                            'message: "No space left on device" })')
OLD_FORMAT_NAMES = ["optimizer.pt", "lr_scheduler.pt"]


class Planted:
    """Unpickling this creates `marker` (open(marker, "w")): proof that a loader ran code from the file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def plant(backup: Path, name: str, marker: Path) -> None:
    """Replace (or add) `name` with a pickle and make progress.json's checksum and the manifest match, as an
    attacker would.
    A .pt file gets torch.save's zip format (what torch.load reads, also with mmap=True), others a bare pickle."""
    target = backup / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".pt":
        torch.save(Planted(marker), target)
    else:
        target.write_bytes(pickle.dumps(Planted(marker)))
    if name != "progress.json":
        meta = json.loads((backup / "progress.json").read_text())
        meta["sha256"][name] = hashlib.sha256(target.read_bytes()).hexdigest()
        (backup / "progress.json").write_text(json.dumps(meta))
    rewrite_manifest(backup)


def rewrite_manifest(backup: Path) -> None:
    """The manifest recomputed over the backup's files as they are now (what an attacker can do)."""
    manifest = json.loads((backup / MANIFEST).read_text())
    (backup / MANIFEST).unlink()
    write_manifest(backup, manifest["run_id"], manifest["run_name"], manifest["step"], {})


def ws_run(workspace: Path) -> RunFolder:
    """The run folder "run" of `workspace`, made on first use."""
    return find_run(workspace, "run") or make_run(workspace)


def one_line_warnings(caplog) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert all("\n" not in m for m in messages), messages
    return messages


# --- a real LoRA run ---------------------------------------------------------------------------------------


def make_trainer(tiny_model, video_dataset, work: Path, **overrides) -> GenericTrainer:
    config = train_config_dict(tiny_model("t2v"), video_dataset, work, epochs=1, backup_after=1,
                               backup_after_unit="STEP", **overrides)
    return GenericTrainer(TrainConfig.from_dict(config))


@pytest.fixture(scope="module")
def trained(tiny_model, video_dataset, tmp_path_factory) -> Path:
    """A LoRA run's work folder with backups after steps 1, 2 and 3."""
    work = tmp_path_factory.mktemp("no-pickle")
    trainer = make_trainer(tiny_model, video_dataset, work)
    trainer.start()
    trainer.train()
    trainer.close()
    assert [p.name for p in list_backups(last_run(work / "workspace"))] == ["step-00000001", "step-00000002", "step-00000003"]
    return work


def backup_files(work: Path) -> list[str]:
    newest = list_backups(last_run(work / "workspace"))[-1]
    return sorted(p.relative_to(newest).as_posix() for p in newest.rglob("*") if p.is_file())


def test_a_backup_holds_only_safetensors_and_json(trained):
    assert backup_files(trained) == ["config.json", "lr_scheduler.json", "manifest.json", "optimizer.json",
                                     "optimizer.safetensors", "progress.json", "trainable.safetensors"]


@pytest.mark.parametrize("name", ["config.json", "lr_scheduler.json", "optimizer.json", "optimizer.safetensors",
                                  "progress.json", "trainable.safetensors", *OLD_FORMAT_NAMES])
def test_a_pickle_planted_in_a_backup_runs_no_code_on_resume(trained, tiny_model, video_dataset, tmp_path, caplog,
                                                             name):
    work = tmp_path / "work"
    shutil.copytree(trained, work)
    newest = list_backups(last_run(work / "workspace"))[-1]
    marker = tmp_path / "marker"
    plant(newest, name, marker)
    trainer = make_trainer(tiny_model, video_dataset, work, continue_last_backup=True)
    planted = {p: p.read_bytes() for p in newest.rglob("*") if p.is_file()}
    if name not in OLD_FORMAT_NAMES and name != "config.json":
        # A file changed since it was written: refused in one line naming it, and the backup kept as it is.
        with pytest.raises(UserError, match=rf"cannot resume from {newest}: {name}"):
            trainer.start()
        trainer.close()
        assert not marker.exists()
        assert {p: p.read_bytes() for p in newest.rglob("*") if p.is_file()} == planted
        return
    with caplog.at_level(logging.WARNING):
        trainer.start()
    trainer.close()
    assert not marker.exists()
    if name == "config.json":  # read as JSON only to name config changes; not part of the state
        assert trainer.progress.global_step == 3
        return
    (skipped,) = [m for m in one_line_warnings(caplog) if str(newest) in m]
    assert name in skipped and skipped.endswith("trying an older one")
    assert trainer.progress.global_step == 2  # resumed from the previous backup


# --- exact states --------------------------------------------------------------------------------------------


def trained_adamw(dtype: torch.dtype) -> tuple[list[torch.nn.Parameter], torch.optim.AdamW]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3, dtype=dtype)), torch.nn.Parameter(torch.randn(5, dtype=dtype))]
    optimizer = torch.optim.AdamW([{"params": params[:1]}, {"params": params[1:], "weight_decay": 0.0}],
                                  lr=1e-2, betas=(0.8, 0.95), amsgrad=True)
    for _ in range(3):
        step(params, optimizer)
    return params, optimizer


def step(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    sum((p.float() ** 2).sum() for p in params).backward()
    optimizer.step()


def assert_same_state(actual: dict, expected: dict) -> None:
    assert actual["param_groups"] == expected["param_groups"]
    assert [type(g["betas"]) for g in actual["param_groups"]] == [tuple] * len(expected["param_groups"])
    assert actual["state"].keys() == expected["state"].keys()
    for index, values in expected["state"].items():
        assert actual["state"][index].keys() == values.keys()
        for key, tensor in values.items():
            got = actual["state"][index][key]
            assert got.dtype == tensor.dtype and got.shape == tensor.shape, (index, key)
            assert got.reshape(-1).view(torch.uint8).tolist() == tensor.reshape(-1).view(torch.uint8).tolist(), \
                (index, key)  # bit for bit


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adamw_state_comes_back_bit_for_bit_and_keeps_training_identically(tmp_path, dtype):
    params, optimizer = trained_adamw(dtype)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    path = write_backup(ws_run(tmp_path), TrainProgress(global_step=3), {"w": params[0].detach()}, optimizer.state_dict(),
                        scheduler.state_dict(), {}, {}, keep=1)
    restored_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    restored = torch.optim.AdamW([{"params": restored_params[:1]}, {"params": restored_params[1:]}], lr=1.0)
    restored.load_state_dict(read_backup(path).optimizer)
    assert_same_state(restored.state_dict(), optimizer.state_dict())
    step(params, optimizer)
    step(restored_params, restored)
    assert all(torch.equal(a, b) for a, b in zip(params, restored_params))


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")  # no optimizer steps here
@pytest.mark.parametrize("schedule", list(LearningRateScheduler))
def test_every_shipped_lr_schedule_resumes_exactly(tmp_path, schedule):
    config = TrainConfig.from_dict(train_config_dict(tmp_path, tmp_path, tmp_path, learning_rate_scheduler=schedule.name,
                                                     learning_rate_warmup_steps=2))
    params, optimizer = trained_adamw(torch.float32)
    scheduler = create_lr_scheduler(optimizer, config, total_steps=10)
    for _ in range(4):
        scheduler.step()
    path = write_backup(ws_run(tmp_path), TrainProgress(global_step=4), {}, optimizer.state_dict(), scheduler.state_dict(),
                        {}, {}, keep=1)
    resumed = create_lr_scheduler(trained_adamw(torch.float32)[1], config, total_steps=10)
    resumed.load_state_dict(read_backup(path).lr_scheduler)
    assert resumed.state_dict() == scheduler.state_dict()
    for _ in range(4):
        scheduler.step()
        resumed.step()
        assert resumed.get_last_lr() == scheduler.get_last_lr()


def test_state_io_keeps_every_type_a_state_holds(tmp_path):
    """int keys, tuples, non-finite floats, None, bools, strings, and bitsandbytes-style 8-bit states
    (uint8 codes, float32 quantisation maps, an int step)."""
    state = {
        "state": {0: {"state1": torch.randint(0, 255, (8,), dtype=torch.uint8), "qmap1": torch.linspace(-1, 1, 256),
                      "absmax1": torch.tensor([float("nan"), 2.0]), "step": 7},
                  1: {"flags": torch.tensor([True, False]), "index": torch.arange(3), "half": torch.ones(2).half()}},
        "param_groups": [{"betas": (0.9, 0.999), "lr": 1e-4, "eps": 1e-8, "max_unorm": float("inf"),
                          "min": float("-inf"), "foreach": None, "amsgrad": False, "name": "lora", "params": [0, 1]}],
    }
    tensors, skeleton = state_io.split(state)
    text = state_io.dumps(skeleton)
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    restored = state_io.join(tensors, json.loads(text))
    groups = restored["param_groups"]
    assert groups[0]["betas"] == (0.9, 0.999) and type(groups[0]["betas"]) is tuple
    assert math.isinf(groups[0]["max_unorm"]) and groups[0]["min"] == float("-inf") and groups[0]["foreach"] is None
    assert {k: v for k, v in groups[0].items() if k not in ("max_unorm", "min")} == \
        {k: v for k, v in state["param_groups"][0].items() if k not in ("max_unorm", "min")}
    assert restored["state"].keys() == {0, 1} and restored["state"][0]["step"] == 7
    assert state_io.from_json(state_io.to_json({"x": [float("nan")]}))["x"][0] != 0  # nan stays nan


def test_state_io_refuses_what_json_cannot_hold():
    with pytest.raises(TypeError, match="cannot store"):
        state_io.split({"f": object()})
    with pytest.raises(ValueError, match="holds tensors"):
        state_io.to_json({"t": torch.zeros(1)})
    with pytest.raises(ValueError, match="malformed"):
        state_io.join({}, {"eval": "x"})


# --- backups of older WanTrainers ------------------------------------------------------------------------


def write_small_backup(workspace: Path, step_number: int) -> Path:
    params, optimizer = trained_adamw(torch.float32)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return write_backup(ws_run(workspace), TrainProgress(global_step=step_number), {"w": params[0].detach()},
                        optimizer.state_dict(), scheduler.state_dict(), {}, {}, keep=5)


def make_old_format(backup: Path, marker: Path) -> None:
    """What WanTrainer wrote before: optimizer.pt and lr_scheduler.pt (torch.save), here with code in them."""
    for name in ("optimizer.safetensors", "optimizer.json", "lr_scheduler.json"):
        (backup / name).unlink(missing_ok=True)
    meta = json.loads((backup / "progress.json").read_text())
    meta["sha256"] = {k: v for k, v in meta["sha256"].items() if k == "trainable.safetensors"}
    (backup / "progress.json").write_text(json.dumps(meta))
    for name in OLD_FORMAT_NAMES:
        plant(backup, name, marker)


def test_an_old_format_backup_is_refused_in_one_line_without_unpickling(tmp_path):
    marker = tmp_path / "marker"
    path = write_small_backup(tmp_path / "ws", 5)
    make_old_format(path, marker)
    with pytest.raises(OldFormatBackup) as refused:
        latest_backup(ws_run(tmp_path / "ws"))
    message = str(refused.value)
    assert isinstance(refused.value, UserError) and "\n" not in message
    assert str(path) in message and "older WanTrainer" in message and "unpickling" in message
    assert "continue_last_backup" in message
    assert not marker.exists()


def test_an_older_new_format_backup_behind_an_old_format_one_is_used(tmp_path, caplog):
    marker = tmp_path / "marker"
    write_small_backup(tmp_path / "ws", 1)
    make_old_format(write_small_backup(tmp_path / "ws", 2), marker)
    with caplog.at_level(logging.WARNING):
        backup = latest_backup(ws_run(tmp_path / "ws"))
    assert backup.progress.global_step == 1 and not marker.exists()
    (warning,) = one_line_warnings(caplog)
    assert "step-00000002" in warning and "older WanTrainer" in warning


# --- a full disk -----------------------------------------------------------------------------------------


def test_a_full_disk_during_a_backup_is_one_line_and_keeps_the_previous_backups(tmp_path, monkeypatch):
    previous = write_small_backup(tmp_path, 1)

    def disk_full(*args, **kwargs):
        raise DISK_FULL

    monkeypatch.setattr(backup_module, "save_file", disk_full)
    with pytest.raises(UserError) as error:
        write_small_backup(tmp_path, 2)
    assert str(error.value) == (f"cannot write the backup to '{ws_run(tmp_path).backups}' (the disk is full): free space "
                                "there or lower rolling_backup_count; the previous backups are intact")
    assert list_backups(ws_run(tmp_path)) == [previous] and read_backup(previous).progress.global_step == 1
    assert [p.name for p in ws_run(tmp_path).backups.iterdir()] == ["step-00000001"]  # no temp folder left


# --- FSDP (sharded) backups, one gloo process ----------------------------------------------------------


class Blocks(torch.nn.Module):
    """The shape `shard_transformer` expects: `blocks`, then the rest. Uneven first dims, so a chunk
    boundary falls inside a tensor when resharded."""

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(6, 5), torch.nn.Linear(5, 6)])
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x)


@pytest.fixture
def process_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def fsdp_setup(seed: int, shard: bool = True) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    root = torch.nn.ModuleDict({"transformer": Blocks(seed)})
    if shard:
        sharding.shard_transformer(root["transformer"], torch.device("cpu"), 1)
    return root, torch.optim.AdamW(root.parameters(), lr=1e-2, betas=(0.8, 0.9))


def train_step(root: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    root["transformer"](torch.linspace(-1, 1, 12).reshape(2, 6)).square().sum().backward()
    optimizer.step()


def sharded_backup(workspace: Path, root, optimizer, step_number: int) -> Path:
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return write_sharded_backup(ws_run(workspace), TrainProgress(global_step=step_number),
                                lambda folder: sharding.save_shards(root, optimizer, folder), scheduler.state_dict(),
                                {}, {}, keep=5, dist=DistributedContext())


def full_weights(root: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.full_tensor() if hasattr(v, "full_tensor") else v.detach() for k, v in root.state_dict().items()}


@pytest.mark.parametrize("shard_resumed", [True, False], ids=["sharded", "one-process"])
def test_a_sharded_backup_resumes_exactly(process_group, tmp_path, shard_resumed):
    root, optimizer = fsdp_setup(0)
    train_step(root, optimizer)
    path = sharded_backup(tmp_path, root, optimizer, 1)
    assert sorted(p.name for p in (path / "shards").iterdir()) == ["rank-00000.safetensors", "state.json"]
    resumed_root, resumed = fsdp_setup(1, shard=shard_resumed)
    sharding.load_shards(resumed_root, resumed, latest_backup(ws_run(tmp_path)).shards)
    assert resumed.param_groups[0]["betas"] == (0.8, 0.9)
    for _ in range(2):
        train_step(root, optimizer)
        train_step(resumed_root, resumed)
    expected, actual = full_weights(root), full_weights(resumed_root)
    assert all(torch.equal(expected[k], actual[k]) for k in expected)


@pytest.mark.parametrize("name", ["lr_scheduler.json", "progress.json", "shards/rank-00000.safetensors",
                                  "shards/state.json", "shards/.metadata"])
def test_a_pickle_planted_in_a_sharded_backup_runs_no_code(process_group, tmp_path, caplog, name):
    root, optimizer = fsdp_setup(0)
    train_step(root, optimizer)
    sharded_backup(tmp_path, root, optimizer, 1)
    train_step(root, optimizer)
    newest = sharded_backup(tmp_path, root, optimizer, 2)
    marker = tmp_path / "marker"
    plant(newest, name, marker)
    if name != "shards/.metadata":  # damaged, not old: refused naming the file (and kept, never overwritten)
        with pytest.raises(DamagedBackup, match=rf"cannot resume from {newest}: .*{name.split('/')[-1]}"):
            latest_backup(ws_run(tmp_path))
        assert not marker.exists()
        return
    with caplog.at_level(logging.WARNING):
        backup = latest_backup(ws_run(tmp_path))
        sharding.load_shards(*fsdp_setup(1), backup.shards)
    assert not marker.exists()
    assert backup.progress.global_step == 1
    (warning,) = one_line_warnings(caplog)
    assert str(newest) in warning and name.split("/")[-1] in warning


def test_a_full_disk_while_writing_shards_is_one_line(process_group, tmp_path, monkeypatch):
    root, optimizer = fsdp_setup(0)
    train_step(root, optimizer)
    previous = sharded_backup(tmp_path, root, optimizer, 1)
    monkeypatch.setattr(sharding, "save_file", lambda *args, **kwargs: (_ for _ in ()).throw(DISK_FULL))
    with pytest.raises(UserError, match=r"\(the disk is full\).*the previous backups are intact$"):
        sharded_backup(tmp_path, root, optimizer, 2)
    assert list_backups(ws_run(tmp_path)) == [previous]
