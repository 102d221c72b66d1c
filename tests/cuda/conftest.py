"""Fixtures of the CUDA suite: the learning-size tiny models (tiny_model.py's `trained_vae`: 4 blocks 128 wide and
the VAE that really reconstructs), a motif dataset at the shapes recipe's size, one latent cache for every run
(caching is not under test here) and deterministic kernels, so that runs whose math is the same are equal bit for
bit."""
from __future__ import annotations

import os

# cuBLAS is deterministic only with a fixed workspace; read when cuBLAS starts, so before any test uses CUDA
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.cuda.device import DEVICE  # noqa: E402


@pytest.fixture(scope="package", autouse=True)
def deterministic_kernels():
    """Deterministic kernels and no TF32 for this package's tests, restored after them. Warn only where an op has
    no deterministic kernel (some attention backwards): a difference from one shows as the test's max difference."""
    if DEVICE is None:
        yield
        return
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[2:]


@pytest.fixture(scope="session")
def learning_model(tmp_path_factory):
    """learning_model("t2v" | "a14b") -> a tiny diffusers folder of the learning size."""
    from modules.synthetic.tiny_model import write_tiny_model

    made = {}

    def make(variant: str):
        if variant not in made:
            made[variant] = write_tiny_model(variant, tmp_path_factory.mktemp(f"learning-{variant}"), trained_vae=True)
        return made[variant]

    return make


@pytest.fixture(scope="session")
def motifs(tmp_path_factory):
    """4 clips (2 motifs x 2) at the shapes recipe's 48 px and 9 frames: 2 steps an epoch at batch 2."""
    from modules.synthetic.shape_clips import BLUE_SQUARE_DOWN, RED_CIRCLE_RIGHT, write_motif_dataset
    from modules.synthetic.shapes_training import FRAMES, SIZE

    folder = tmp_path_factory.mktemp("motifs")
    write_motif_dataset(folder, [RED_CIRCLE_RIGHT, BLUE_SQUARE_DOWN], 2, FRAMES, SIZE, SIZE, seed=1)
    return folder


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("shared-cache")


@pytest.fixture(scope="session")
def cuda_run(learning_model, motifs, cache_dir):
    """cuda_run(work, **overrides) -> runs.Settings for the learning T2V (see tests/cuda/runs.py)."""
    from tests.cuda.runs import Settings

    return lambda work, variant="t2v", **overrides: Settings(learning_model(variant), motifs, cache_dir, work, overrides)


REPORT_ENV = "WANTRAINER_CUDA_TESTS_REPORT"


def pytest_runtest_logreport(report):
    """Each test's outcome appended to the JSON-lines file $WANTRAINER_CUDA_TESTS_REPORT as it finishes (the GPU
    kit's `correct` part reads it: a run stopped by its time limit still says what passed)."""
    path = os.environ.get(REPORT_ENV)
    if not path or (report.when != "call" and report.passed):
        return
    import json

    message = None
    if report.failed:
        message = str(report.longrepr)[-1500:]
    elif report.skipped and isinstance(report.longrepr, tuple):
        message = report.longrepr[2]
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"name": report.nodeid.split("::", 1)[-1], "when": report.when,
                              "outcome": report.outcome, "seconds": round(report.duration, 2),
                              "message": message}) + "\n")
