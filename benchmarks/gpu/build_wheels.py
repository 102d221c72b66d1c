#!/usr/bin/env python
"""The wheels the lent GPU machine lacks, pinned as requirements.txt and requirements.lock pin them, in one folder
that travels with the working tree (it has no network; tree + wheels <= 64 MiB).

    python benchmarks/gpu/build_wheels.py            # pip download into .whl/ (ignored by git), then check it
    python benchmarks/gpu/build_wheels.py --list     # what would be fetched, as JSON (no network)
    python benchmarks/gpu/build_wheels.py --check    # the folder holds exactly the plan (one wheel per package)

What the machine has is its image's package list (MACHINE_HAS, read from the device docs' KINDS.md, 2026-11-17):
a package of requirements.txt that is not there is fetched, with every dependency the lock names for it ("# via")
that is not there either. The machine's Python is 3.12 (KINDS.md): pure-Python wheels serve any version; the two
binary ones, av and wcwidth, are abi3 wheels (cp311-abi3, cp310-abi3), which every later CPython loads, so one
file each covers 3.11 to 3.13. Left out on purpose: torch and pytest (the machine's own), customtkinter (the GUI,
not run there), comfy-kitchen (the int8 tests' CPU reference, 68 MiB) and bitsandbytes (optional, 41 MiB: with
av's 34 MiB over the limit; ADAMW_8BIT's test skips).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / ".whl"
PYTHON = "3.12"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64"]
LIMIT_MIB = 64  # the device tool's limit on what travels: the working tree and the carried wheels together
NOT_FETCHED = {"torch", "pytest", "customtkinter", "comfy-kitchen"}  # comfy-kitchen: a CPU test reference, 68 MiB
# The GPU image's Python packages (the device docs' KINDS.md, "Python packages already there", 2026-11-17).
MACHINE_HAS = set("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentence-transformers sentencepiece setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(path: Path) -> dict[str, str]:
    """name -> pinned version of each `name==version` line of requirements.txt (ranges, e.g. torch's, are skipped)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)", line)
        if match:
            pins[normalise(match.group(1))] = match.group(2)
    return pins


def lock_entries(path: Path) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, the packages it is there for) from the lock's `name==version` entries and `# via` notes."""
    entries = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", path.read_text(encoding="utf-8")):
        match = re.match(r"([A-Za-z0-9_.\-]+)==([^\s;\\]+)", block)
        if match:
            via = {normalise(v) for v in re.findall(r"#\s+(?:via\s+)?([A-Za-z0-9_.\-]+)\s*$", block, re.M)} - {"via"}
            entries[normalise(match.group(1))] = (match.group(2), via)
    return entries


def plan(root: Path = ROOT) -> dict[str, str]:
    """name -> version of every wheel to fetch: the pinned packages the machine lacks and, transitively, the lock's
    dependencies of them that it lacks too."""
    pins = requirements(root / "requirements.txt")
    lock = lock_entries(root / "requirements.lock")
    wanted = {name: version for name, version in pins.items() if name not in MACHINE_HAS | NOT_FETCHED}
    queue = list(wanted)
    while queue:
        parent = queue.pop()
        for name, (version, via) in lock.items():
            if parent in via and name not in wanted and name not in MACHINE_HAS | NOT_FETCHED:
                wanted[name] = version
                queue.append(name)
    for name, version in wanted.items():  # the lock and requirements.txt must agree (the lock is made from it)
        if name in lock and lock[name][0] != version:
            raise SystemExit(f"{name}: requirements.txt pins {version}, requirements.lock {lock[name][0]}: "
                             "regenerate the lock (scripts/lock_requirements.sh)")
    return dict(sorted(wanted.items()))


def wheel_name(path: Path) -> tuple[str, str]:
    """(normalised name, version) of a wheel file (PEP 427: name-version-...)."""
    name, version = path.name.split("-")[:2]
    return normalise(name), version


def check(folder: Path, wanted: dict[str, str]) -> list[str]:
    """What is wrong with the folder against the plan (empty: nothing): missing, extra or doubled wheels."""
    found: dict[str, list[str]] = {}
    for wheel in folder.glob("*.whl"):
        name, version = wheel_name(wheel)
        found.setdefault(name, []).append(version)
    problems = [f"missing {name}=={version}" for name, version in wanted.items() if found.get(name) != [version]]
    problems += [f"not in the plan: {name} {versions}" for name, versions in found.items() if name not in wanted]
    return problems


def size_mib(folder: Path) -> float:
    return round(sum(p.stat().st_size for p in folder.glob("*.whl")) / 2**20, 1)


def tree_mib(root: Path = ROOT) -> float | None:
    """What travels besides the wheels: tracked files and untracked ones git does not ignore (None without git, as
    in the copy of the tree on the GPU machine)."""
    try:
        names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                               capture_output=True, check=True).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        return None
    return round(sum((root / n.decode()).stat().st_size for n in names if n and (root / n.decode()).is_file())
                 / 2**20, 1)


def download(folder: Path, wanted: dict[str, str], python: str) -> None:
    folder.mkdir(exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               python, "--implementation", "cp", *platforms, "-d", str(folder),
               *[f"{name}=={version}" for name, version in wanted.items()]]
    subprocess.run(command, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the plan as JSON and stop (no network)")
    parser.add_argument("--check", action="store_true", help="check the folder against the plan (no network)")
    parser.add_argument("--folder", type=Path, default=FOLDER)
    parser.add_argument("--python", default=PYTHON, help=f"the GPU machine's Python (default {PYTHON})")
    args = parser.parse_args()
    wanted = plan()
    if args.list:
        print(json.dumps(wanted, indent=1))
        return 0
    if not args.check:
        download(args.folder, wanted, args.python)
    problems = check(args.folder, wanted)
    wheels, tree = size_mib(args.folder), tree_mib()
    total = round(wheels + tree, 1) if tree is not None else None
    print(json.dumps({"folder": str(args.folder), "wheels": wanted, "wheels_mib": wheels, "tree_mib": tree,
                      "total_mib": total, "limit_mib": LIMIT_MIB, "problems": problems}, indent=1))
    if problems:
        print("wheel folder: " + "; ".join(problems), file=sys.stderr)
    return 1 if problems or (total or 0) > LIMIT_MIB else 0


if __name__ == "__main__":
    sys.exit(main())
