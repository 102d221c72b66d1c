"""Data parallel: 2 processes (gloo, CPU) end with the weights of 1 process with the same global batch."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from safetensors.torch import load_file

from tests.conftest import REPO_ROOT, TORCHRUN, train_config_dict
from tests.run_paths import last_run, run_dir
from tests.script_runner import run_script

pytestmark = pytest.mark.slow


def train(args: list[str], config: dict, path) -> subprocess.CompletedProcess:
    """scripts/train.py under torchrun, or (args [python]) as one process: that one in the test process (a new
    interpreter's imports cost ~8 CPU-s; torchrun's ranks and test_end_to_end run the script as real processes)."""
    path.write_text(json.dumps(config))
    if args == [sys.executable]:
        result = run_script("train.py", "--config-path", str(path))
        assert result.returncode == 0, result.stderr[-3000:]
        return result
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([*args, str(REPO_ROOT / "scripts" / "train.py"), "--config-path", str(path)],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.parametrize("method", ["EMBEDDING", "LORA"])
def test_two_gloo_processes_train_an_embedding_and_a_lora_as_one_process_with_the_same_global_batch(
        tiny_model, tmp_path, method):
    """DDP on the LoRA; the embedding's vectors are outside DDP's wrapper: their gradients are averaged by hand, with
    zeros from a rank whose rows hold no placeholder (two of the four captions hold it)."""
    from modules.synthetic.synthetic_data import write_video_dataset

    data = write_video_dataset(tmp_path / "data", count=4, frames=9, height=32, width=32)
    for index in range(2):
        (data / f"{index:03d}.txt").write_text(f"a video of <sks> number {index}", encoding="utf-8")
    # float32 files: DDP's average differs from one process's gradient by float32 round-off only, but no rounding to
    # bfloat16 should add a step of its own on top
    common = dict(epochs=2, backup_before_save=False, training_method=method, learning_rate=0.01,
                  embedding={"placeholder": "<sks>", "token_count": 2}, output_dtype="FLOAT32")
    single = train_config_dict(tiny_model("t2v"), data, tmp_path / "one", batch_size=4, **common)
    double = train_config_dict(tiny_model("t2v"), data, tmp_path / "two", batch_size=2, **common)
    train([sys.executable], single, tmp_path / "one.json")
    train(TORCHRUN, double, tmp_path / "two.json")
    name = "lora.safetensors" if method == "EMBEDDING" else "lora_embedding.safetensors"
    one = load_file(str(tmp_path / "one" / "output" / name))["umt5xxl"]
    two = load_file(str(tmp_path / "two" / "output" / name))["umt5xxl"]
    assert float((one - two).abs().max()) < 1e-5
    from transformers import AutoTokenizer, UMT5EncoderModel

    from modules.model.text_embedding import WanModelEmbedding

    folder = tiny_model("t2v")
    start = WanModelEmbedding.initialized("<sks>", 2, "*", AutoTokenizer.from_pretrained(folder / "tokenizer"),
                                          UMT5EncoderModel.from_pretrained(folder / "text_encoder"))
    assert float((one - start.vectors.detach()).abs().max()) > 1e-3  # the vectors did train
    if method == "LORA":  # DDP's average of the LoRA's gradients
        one = load_file(single["output_model_destination"])
        two = load_file(double["output_model_destination"])
        assert one.keys() == two.keys()
        # AdamW divides by the gradients' own size, so round-off in a near-zero gradient (lora_up starts at zero)
        # becomes a few percent of a step: 1.2e-4 to 1.6e-4 here at lr 0.01, as large as 1e-4 on another CPU's
        # kernels. Training on half the batch (what a rank that did not average would do) differs by 0.04.
        assert max(float((one[k] - two[k]).abs().max()) for k in one) < 1e-3
        assert max(float(v.abs().max()) for v in one.values()) > 1e-2  # the LoRA did train
    # only rank 0 wrote: one log file
    assert len(list((run_dir(tmp_path / "two" / "workspace") / "logs").iterdir())) == 1


def _transformer_weights(output_dir) -> dict:
    from safetensors.torch import load_file as load

    return load(str(output_dir / "transformer" / "diffusion_pytorch_model.safetensors"))


def _max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def test_fsdp_full_fine_tune_matches_one_process_and_backups_move_between_strategies(tiny_model, tmp_path):
    """Full fine-tune in one process (global batch 4) against runs that switch between one process and
    2 FSDP ranks (batch 2 each) after 2 steps through a backup: a whole-tensor backup scattered to the
    shards, and a sharded backup (each rank wrote its part) resumed by one process. (2 ranks resuming a
    sharded backup: the Ctrl-C test below.) Exercises
    sharded training (gradient accumulation, clipping, checkpointing), collective backups and resume,
    collective sampling and the gathered final save."""
    from modules.synthetic.synthetic_data import write_video_dataset

    data = write_video_dataset(tmp_path / "data", count=8, frames=9, height=32, width=32)
    model = tiny_model("t2v")
    single = [sys.executable]
    torchrun = TORCHRUN

    def run(args: list[str], name: str, max_steps: int, **extra) -> dict:
        config = train_config_dict(
            model, data, tmp_path / name, training_method="FINE_TUNE", output_model_format="DIFFUSERS",
            output_model_destination=str(tmp_path / name / "output"), batch_size=4 if args is single else 2,
            epochs=10, gradient_accumulation_steps=2, max_steps=max_steps, learning_rate=1e-3, max_grad_norm=0.05,
            data_parallel="FSDP", gradient_checkpointing=True, continue_last_backup=True,
            overwrite_output=True, **extra)  # a resumed run's model replaces its first half's
        result = train(args, config, tmp_path / f"{name}-{max_steps}.json")
        assert "changed since it was written" not in result.stderr  # 1 GPU x 4 = 2 GPUs x 2, DDP or FSDP
        return _transformer_weights(tmp_path / name / "output")

    reference = run(single, "one", 4)  # data_parallel is ignored in a single process
    # One held-out clip on 2 sharded ranks: rank 1 runs an uncounted pass so the collectives pair.
    held_out = write_video_dataset(tmp_path / "held_out", count=1, frames=9, height=32, width=32, seed=3)
    validation = dict(concepts=[{"path": str(data)}, {"path": str(held_out), "type": "VALIDATION"}],
                      validate_after=1, validate_after_unit="STEP")
    halfway = run(single, "to_fsdp", 2, **validation)
    sample = [{"prompt": "a cat", "frames": 5, "height": 32, "width": 32, "steps": 2}]
    sharded_from_whole = run(torchrun, "to_fsdp", 4, samples=sample, sample_at_end=True, **validation)
    first_half = run(torchrun, "from_fsdp", 2)
    single_from_shards = run(single, "from_fsdp", 4)

    initial = load_file(str(model / "transformer" / "diffusion_pytorch_model.safetensors"))
    differences = {"2 ranks resumed a whole-tensor backup": _max_difference(sharded_from_whole, reference),
                   "one process resumed a sharded backup": _max_difference(single_from_shards, reference)}
    print("max difference to one process:", differences)
    assert _max_difference(reference, initial) > 1e-3  # it trained
    assert _max_difference(first_half, initial) > 1e-4
    assert _max_difference(sharded_from_whole, halfway) > 1e-4  # the sharded ranks did train steps 3-4
    assert all(value < 1e-5 for value in differences.values()), differences
    assert (run_dir(tmp_path / "from_fsdp" / "workspace") / "backup" / "step-00000002" / "shards").is_dir()
    logs = "".join(p.read_text() for p in (run_dir(tmp_path / "to_fsdp" / "workspace") / "logs").iterdir())
    assert all(f"validation loss at step {step}: " in logs for step in (1, 2, 3, 4))
    # the sharded run sampled on every rank; rank 0 wrote the video
    assert len(list((run_dir(tmp_path / "to_fsdp" / "workspace") / "samples").glob("*.mp4"))) == 1


def test_ctrl_c_under_torchrun_stops_fsdp_ranks_together_and_their_backup_resumes_exactly(tiny_model, tmp_path):
    """A Ctrl-C in a terminal reaches torchrun and both ranks (SIGINT to the process group), then torchrun
    forwards it once more. The ranks must stop after the same step, write one sharded backup together and
    exit; resuming it must give the weights of an uninterrupted run, bit for bit."""
    from modules.trainer.backup import list_backups
    from modules.synthetic.synthetic_data import write_video_dataset

    data = write_video_dataset(tmp_path / "data", count=8, frames=9, height=32, width=32)
    model = tiny_model("t2v")

    def config(name: str, batch_size: int, max_steps: int, **extra) -> dict:
        return train_config_dict(
            model, data, tmp_path / name, training_method="FINE_TUNE", output_model_format="DIFFUSERS",
            output_model_destination=str(tmp_path / name / "output"), batch_size=batch_size, epochs=10_000,
            max_steps=max_steps, learning_rate=1e-3, data_parallel="FSDP", **extra)

    stopped = config("stopped", 2, 10_000, backup_after=1, backup_after_unit="STEP", rolling_backup_count=2)
    (tmp_path / "stopped.json").write_text(json.dumps(stopped))
    command = [*TORCHRUN, str(REPO_ROOT / "scripts" / "train.py"), "--config-path", str(tmp_path / "stopped.json")]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 300
        while not list(run_dir(stopped["workspace_dir"]).glob("backup/step-*")) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert process.poll() is None, "training ended before the signal"
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "stopping after this step" in stderr and "no backup written" not in stderr, stderr[-3000:]
    backup = list_backups(last_run(stopped["workspace_dir"]))[-1]
    assert (backup / "shards").is_dir()
    stop_step = int(backup.name.split("-")[1])

    torchrun = TORCHRUN
    result = train(torchrun, config("stopped", 2, stop_step + 2, continue_last_backup=True), tmp_path / "resume.json")
    assert f"resumed from {backup}" in result.stderr
    train(torchrun, config("reference", 2, stop_step + 2), tmp_path / "reference.json")
    difference = _max_difference(_transformer_weights(tmp_path / "stopped" / "output"),
                                 _transformer_weights(tmp_path / "reference" / "output"))
    print(f"stopped after step {stop_step}; resumed vs uninterrupted (both FSDP): max difference {difference}")
    assert difference == 0.0


COMPILE_ON_THE_CPU = """import runpy, sys
sys.path[:0] = [{root!r}, {scripts!r}]
import modules.modelSetup.compile as compile_module
compile_module.BACKEND = "aot_eager"  # as tests/test_compile.py: inductor's C++ codegen takes minutes on 2 cores
sys.argv = [{train!r}, *sys.argv[1:]]
runpy.run_path({train!r}, run_name="__main__")
"""


def test_compiled_blocks_train_under_fsdp_as_the_eager_ones(tiny_model, tmp_path):
    """compile: true with data_parallel FSDP. Regression: fully_shard gives each block a subclass
    (FSDPWanTransformerBlock), which the by-name match missed, so nothing was compiled under FSDP."""
    from modules.synthetic.synthetic_data import write_video_dataset

    data = write_video_dataset(tmp_path / "data", count=8, frames=9, height=32, width=32)
    wrapper = tmp_path / "train_aot_eager.py"
    wrapper.write_text(COMPILE_ON_THE_CPU.format(root=str(REPO_ROOT), scripts=str(REPO_ROOT / "scripts"),
                                                 train=str(REPO_ROOT / "scripts" / "train.py")))
    torchrun = [*TORCHRUN, str(wrapper)]

    def run(name: str, **extra):
        config = train_config_dict(
            tiny_model("t2v"), data, tmp_path / name, training_method="FINE_TUNE", output_model_format="DIFFUSERS",
            output_model_destination=str(tmp_path / name / "output"), batch_size=2, epochs=10, max_steps=3,
            learning_rate=1e-3, data_parallel="FSDP", gradient_checkpointing=True, **extra)
        (tmp_path / f"{name}.json").write_text(json.dumps(config))
        result = subprocess.run([*torchrun, "--config-path", str(tmp_path / f"{name}.json")], capture_output=True,
                                text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stderr, _transformer_weights(tmp_path / name / "output")

    _, eager = run("eager")
    log, compiled = run("compiled", compile=True)
    assert "compile: 2 WanTransformerBlock blocks compiled" in log  # each rank compiled the tiny model's 2 blocks
    assert "graph(s) added" in log
    difference = _max_difference(eager, compiled)
    print(f"FSDP, compiled vs eager after 3 steps: max difference {difference}")
    assert difference < 1e-6
