"""Shared fixtures: tiny random Wan models and tiny synthetic datasets, made once per test session."""
from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One CPU thread in every test process and the programs it starts: scripts/test.sh runs one xdist worker per core,
# tiny models gain nothing from a second thread (two on a busy 2-core machine wait on each other), and runs
# compared bit for bit or against measured thresholds sum in one order. Set before torch loads: OpenMP reads it once.
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_name] = "1"

REPO_ROOT = Path(__file__).resolve().parents[1]
#: torchrun with two processes, its rendezvous on a free port (--standalone): tests on two xdist workers, or two test
#: runs on one machine, never ask for the same one
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _private_home() -> None:
    """HOME is a fresh folder per test process (each xdist worker, and the programs it starts): customtkinter copies
    its fonts into ~/.fonts on import, and a Tk window with those fonts mapped dies of SIGBUS when another process
    rewrites them, so neither the user's open GUI nor another worker's window may share the tests' font folder.
    Built things worth keeping stay in the real cache (the fake-CUDA extension, ~30 s to build)."""
    os.environ.setdefault("WANTRAINER_FAKE_CUDA_DIR", str(Path.home() / ".cache" / "wantrainer" / "fake_cuda"))
    home = tempfile.mkdtemp(prefix="wantrainer-tests-home-")
    os.environ["HOME"] = home
    atexit.register(shutil.rmtree, home, ignore_errors=True)


_private_home()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest work first, so that xdist (`--dist loadgroup`) starts it at once and the short tests fill in
    around it to the end: the learning runs (one `xdist_group` per trained model: its tests share one worker and
    one training; the groups that carry their cost, `cpu_minutes`, are pinned to the workers by
    tests/xdist_pinning.py, each worker's longest first), then the other slow tests, then those that load a tiny
    model (seconds each), then the rest (mostly milliseconds), each in collection order. A worker asks for more when
    2 of its tests are left, so the last ones handed out are the cheap ones and neither worker waits long for the
    other."""
    from tests.xdist_pinning import write_costs

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("xdist_group"):
            return 0
        if item.get_closest_marker("slow"):
            return 1
        return 2 if "tiny_model" in getattr(item, "fixturenames", ()) else 3

    costs = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None and "cpu_minutes" in mark.kwargs:
            costs[mark.args[0]] = mark.kwargs["cpu_minutes"]
    write_costs(config, costs)  # for the controller's scheduler (a worker of `--dist loadgroup`)
    order = {name: index for index, name in enumerate(balanced_group_order(costs))}

    def group_position(item: pytest.Item) -> int:
        mark = item.get_closest_marker("xdist_group")
        return order.get(mark.args[0], len(order)) if mark is not None else 0

    items.sort(key=lambda item: (rank(item), group_position(item)))


def balanced_group_order(costs: dict[str, float]) -> list[str]:
    """The groups split into two sets of nearly equal cost (tests/xdist_pinning.py: split_groups), each longest
    first, then interleaved: the order in which the two workers start them."""
    import itertools

    from tests.xdist_pinning import split_groups

    first, second = split_groups(costs, 2)
    return [name for pair in itertools.zip_longest(first, second) for name in pair if name is not None]


def _group_costs_path(config: pytest.Config) -> Path:
    return Path(config._tmp_path_factory.getbasetemp()) / "xdist_group_costs.json"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(The controller of an xdist run) where each worker writes the groups' costs."""
    from tests.xdist_pinning import COSTS_KEY

    node.workerinput[COSTS_KEY] = str(_group_costs_path(node.config))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadgroup` with the costed groups (the learning runs) pinned to workers: tests/xdist_pinning.py."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.xdist_pinning import make_scheduler

    return make_scheduler(config, log, _group_costs_path(config))


# Collecting imports torch, diffusers, transformers and every test module: ~430k objects that live as long as the
# process. The garbage collector waits until they are in (its full collections while they load cost ~3 s), then
# freezes them, so that each later full collection (automatic, or a test's) scans only what the tests made since,
# not ~0.5 s of the same modules again and again.
gc.disable()


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()
    gc.enable()


@pytest.fixture(scope="module", name="one_torch_thread")
def one_torch_thread_for_the_module():
    """torch on one CPU thread for a module's tests, the previous count restored after."""
    from tests.torch_threads import one_torch_thread

    with one_torch_thread():
        yield


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """tiny_model("t2v") -> Path of a tiny diffusers folder of that variant (cached for the session)."""
    from modules.synthetic.tiny_model import write_tiny_model

    made: dict[str, Path] = {}

    def make(variant: str) -> Path:
        if variant == "animate_2" and variant not in made:  # (its own writer, over the tiny I2V folder's parts)
            from modules.synthetic.tiny_animate2 import write_tiny_animate2

            made[variant] = write_tiny_animate2(tmp_path_factory.mktemp("tiny-animate_2"), i2v_folder=make("i2v"))
        if variant not in made:
            made[variant] = write_tiny_model(variant, tmp_path_factory.mktemp(f"tiny-{variant}"))
        return made[variant]

    return make


@pytest.fixture(scope="session")
def video_dataset(tmp_path_factory) -> Path:
    """Three 17-frame 64x64 mp4 clips at 16 fps with captions."""
    from modules.synthetic.synthetic_data import write_video_dataset

    return write_video_dataset(tmp_path_factory.mktemp("videos"), count=3, frames=17, height=64, width=64)


def train_config_dict(model_dir: Path, data_dir: Path, work: Path, **overrides) -> dict:
    """A small, fast LoRA config for tests."""
    config = {
        "base_model_name": str(model_dir), "concepts": [{"path": str(data_dir)}], "resolution": [32, 32],
        "frames": 9, "epochs": 2, "learning_rate": 1e-3, "lora_rank": 4, "lora_alpha": 4,
        "tensorboard": False, "sample_at_end": False,
        "workspace_dir": str(work / "workspace"), "cache_dir": str(work / "cache"),
        "output_model_destination": str(work / "output" / "lora.safetensors"),
    }
    config.update(overrides)
    if not {"checkpointing", "gradient_checkpointing", "checkpoint_attention", "keep_self_attention"} & config.keys():
        config["checkpointing"] = {"policy": "NONE"}  # fastest on the tiny models; tests that need it set a policy
    return config


def e2v_on_t2v_config(tiny_model, work: Path, **overrides) -> dict:
    """A small E2V config on the tiny T2V base (expanded to the I2V layout; CLIP from the tiny I2V folder) with
    a two-sample element dataset written under `work`."""
    import json

    from modules.synthetic.synthetic_data import e2v_dataset_json, write_e2v_dataset

    data = write_e2v_dataset(work / "data", count=2, frames=17, height=32, width=32)
    dataset = work / "dataset.json"
    dataset.write_text(json.dumps(e2v_dataset_json(data, 32, 32, 17)))
    values = {"dataset_config": str(dataset), "concepts": [], "epochs": 1,
              "e2v": {"image_encoder_model_name": str(tiny_model("i2v"))}, **overrides}
    return train_config_dict(tiny_model("t2v"), dataset, work, **values)


def trains_and_resumes_exactly(make_trainer, step: int = 2):
    """`make_trainer("full")` trained to its end (saving its outputs), then `make_trainer("stopped")` stopped after
    optimizer step `step` and resumed from its backup: the resumed run must end with bit-identical trainable
    weights. Returns the full run's trainer."""
    import torch

    trainer = make_trainer("full")
    trainer.start()
    trainer.train()
    trainer.end()
    expected = {k: v.clone() for k, v in trainer.setup.trainable_state().items()}
    resumed = stop_and_resume(lambda **o: make_trainer("stopped", **o), step)
    resumed.train()
    actual = resumed.setup.trainable_state()
    assert actual.keys() == expected.keys() and all(torch.equal(actual[k], expected[k]) for k in expected)
    return trainer


def stop_and_resume(make_trainer, step: int):
    """Trains with `make_trainer()` until a stop after optimizer step `step` (which writes a backup), then
    returns `make_trainer(continue_last_backup=True)` started from that backup, not yet trained further."""
    from modules.trainer.GenericTrainer import TrainingStopped

    first = make_trainer()
    first.start()
    first.callbacks.on_update = lambda update: first.commands.stop() if update.global_step == step else None
    with pytest.raises(TrainingStopped):
        first.train()
    resumed = make_trainer(continue_last_backup=True)
    resumed.start()
    assert resumed.progress.global_step == step
    return resumed
