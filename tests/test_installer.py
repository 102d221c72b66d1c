"""scripts/torch_spec.sh: which torch build the installer picks, and that it says so (fake GPU tools on PATH)."""
from __future__ import annotations

import shutil
import subprocess

from tests.conftest import REPO_ROOT


def pick(tmp_path, tools: dict[str, str], **env) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, script in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    head = bin_dir / "head"  # the one outside tool the script uses; nothing else of this machine is on PATH
    if not head.exists():
        head.symlink_to(shutil.which("head"))
    base = {"PATH": str(bin_dir), "ROCM_ROOT": str(tmp_path / "no-rocm"), **env}
    return subprocess.run([shutil.which("bash"), str(REPO_ROOT / "scripts" / "torch_spec.sh")], capture_output=True,
                          text=True, env=base, timeout=30, check=True)


def test_an_nvidia_gpu_gets_the_cuda_build(tmp_path):
    result = pick(tmp_path, {"nvidia-smi": "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)'"})
    assert result.stdout.strip() == "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
    assert "NVIDIA GPU found (GPU 0: NVIDIA H100" in result.stderr


def test_rocm_gets_the_rocm_build_and_a_broken_nvidia_smi_is_no_gpu(tmp_path):
    result = pick(tmp_path, {"nvidia-smi": "exit 9", "rocminfo": "echo gfx942"})
    assert result.stdout.strip().endswith("/whl/rocm6.4") and "ROCm found" in result.stderr
    (tmp_path / "rocm").mkdir()
    result = pick(tmp_path / "other", {}, ROCM_ROOT=str(tmp_path / "rocm"))
    assert result.stdout.strip().endswith("/whl/rocm6.4")


def test_no_gpu_gets_pypi_and_says_so_and_torch_spec_wins(tmp_path):
    result = pick(tmp_path, {})
    assert result.stdout.strip() == "torch==2.13.0" and "no NVIDIA or AMD GPU found" in result.stderr
    result = pick(tmp_path, {"nvidia-smi": "echo GPU 0"}, TORCH_SPEC="torch==2.12.0 --pre")
    assert result.stdout.strip() == "torch==2.12.0 --pre" and "TORCH_SPEC is set" in result.stderr


def _pins(text: str) -> dict[str, str]:
    import re

    return {m[1].lower().replace("_", "-"): m[2] for m in re.finditer(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", text, re.M)}


def test_the_lock_pins_what_requirements_txt_pins_each_with_hashes():
    """requirements.lock is generated from requirements.txt (scripts/lock_requirements.sh): a pin changed in one
    and not the other would install different packages on the locked path."""
    lock = (REPO_ROOT / "requirements.lock").read_text(encoding="utf-8")
    wanted = _pins((REPO_ROOT / "requirements.txt").read_text(encoding="utf-8"))
    locked = _pins(lock)
    assert {name: locked.get(name) for name in wanted} == wanted, "run scripts/lock_requirements.sh"
    entries = [block for block in lock.split("\n") if block and not block.startswith((" ", "#"))]
    assert len(entries) >= len(locked) > len(wanted)  # the dependencies are pinned too (some twice, by marker)
    for entry in entries:  # every package line continues with its hashes
        assert entry.endswith("\\"), entry
    assert lock.count("--hash=sha256:") >= len(locked)
    assert not [n for n in locked if n == "torch" or n.startswith(("nvidia-", "cuda-")) or n == "triton"]


FAKE_PYTHON = """#!/bin/sh
# a venv's python that installs nothing: it logs pip's arguments, and imports what pip "installed"
d=$(dirname "$0")/..
if [ "$1" = -c ]; then
  case "$2" in *version_info*) echo "${FAKE_PYTHON_VERSION:-3.11.7}"; exit 0 ;; esac
  case "$2" in *torch*) [ -f "$d/has-torch" ] || exit 1 ;; esac
  case "$2" in *diffusers*) [ -f "$d/has-diffusers" ] || exit 1 ;; esac
  case "$2" in *print*) echo 2.13.0 ;; esac
  exit 0
fi
echo "$*" >> "$d/pip.log"
case "$*" in *"install torch=="*) touch "$d/has-torch" ;; *" -r requirements"*) touch "$d/has-diffusers" ;; esac
"""


def install(tmp_path, *args: str, ok: bool = True, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """scripts/install.sh in a copy of the repository whose .venv has a fake python, on a machine with no GPU
    tools (PATH holds only the shell tools the scripts use): what it says and what it asks pip for."""
    repo = tmp_path / "repo"
    if not repo.exists():
        (repo / "scripts").mkdir(parents=True)
        for name in ("scripts/install.sh", "scripts/torch_spec.sh", "requirements.txt", "requirements.lock"):
            shutil.copy(REPO_ROOT / name, repo / name)
        (repo / ".venv" / "bin").mkdir(parents=True)
        (repo / ".venv" / "bin" / "python").write_text(FAKE_PYTHON)
        (repo / ".venv" / "bin" / "python").chmod(0o755)
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for tool in ("bash", "cat", "cut", "dirname", "head", "sha256sum", "touch"):
            (bin_dir / tool).symlink_to(shutil.which(tool))
    log = repo / ".venv" / "pip.log"
    log.unlink(missing_ok=True)
    env = {"PATH": str(tmp_path / "bin"), "ROCM_ROOT": str(tmp_path / "no-rocm"), **env}
    result = subprocess.run([shutil.which("bash"), str(repo / "scripts" / "install.sh"), *args], capture_output=True,
                            text=True, env=env, timeout=30)
    assert (result.returncode == 0) == ok, result.stderr
    return result, (log.read_text().splitlines() if log.exists() else [])


def test_install_sh_locked_installs_the_lock_with_hashes_then_the_cpu_torch(tmp_path):
    result, pip = install(tmp_path, "--locked")
    assert "no NVIDIA or AMD GPU found" in result.stderr  # it picks the CPU and says so
    assert pip == ["-m pip install --quiet --upgrade pip",
                   "-m pip install --require-hashes --no-deps -r requirements.lock",  # every file hash-checked
                   "-m pip install torch==2.13.0",  # then torch: its dependencies are already there, from the lock
                   "-m pip check"]
    stamp = (tmp_path / "repo" / ".venv" / ".requirements.sha256").read_text().splitlines()
    assert [line.split(" ")[1] for line in stamp] == ["requirements.lock", "requirements.txt"]
    again, pip = install(tmp_path, "--locked")
    assert pip == []  # installed: a second run does nothing, and says what it does meanwhile (it sat silent ~12 s)
    assert again.stdout.splitlines() == ["checking .venv: requirements.lock was installed; importing torch and "
                                         "diffusers to be sure (a few seconds)...", ".venv is up to date: nothing to "
                                                                                     "install"]


def test_switching_between_start_ui_demo_and_test_sh_installs_nothing_again(tmp_path):
    """start-ui.sh and demo.sh install requirements.txt, test.sh the lock made from it: after each has run once,
    switching between them starts at once (it re-ran pip every time while the stamp held only the last file)."""
    assert install(tmp_path)[1][-1] == "-m pip install -r requirements.txt"  # start-ui.sh, first run
    assert install(tmp_path, "--locked")[1][1:2] == ["-m pip install --require-hashes --no-deps -r requirements.lock"]
    for _ in range(2):
        assert install(tmp_path)[1] == []  # start-ui.sh / demo.sh after test.sh
        assert install(tmp_path, "--locked")[1] == []  # test.sh after them
    requirements = tmp_path / "repo" / "requirements.txt"
    requirements.write_text(requirements.read_text() + "# changed\n")
    assert install(tmp_path)[1][-1] == "-m pip install -r requirements.txt"  # a changed file installs again
    assert install(tmp_path, "--locked")[1][1:2] == ["-m pip install --require-hashes --no-deps -r requirements.lock"]


def test_install_sh_unlocked_installs_torch_then_requirements_txt(tmp_path):
    result, pip = install(tmp_path)
    assert "no NVIDIA or AMD GPU found" in result.stderr
    assert pip == ["-m pip install --quiet --upgrade pip", "-m pip install torch==2.13.0",
                   "-m pip install -r requirements.txt"]


def test_install_sh_refuses_other_options_and_ci_takes_the_locked_path():
    bad = subprocess.run([shutil.which("bash"), str(REPO_ROOT / "scripts" / "install.sh"), "--frozen"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown option '--frozen'" in bad.stderr
    assert "install.sh --locked" in (REPO_ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")  # CI's path


def test_install_sh_needs_python_3_11_and_says_so_in_one_line(tmp_path):
    """The pins need Python 3.11+ (diffusers, transformers, numpy, pillow, av): an older one ends at once with one
    line naming the interpreter, its version and what to do, before pip runs or a .venv is made."""
    result, pip = install(tmp_path, ok=False, FAKE_PYTHON_VERSION="3.10.12")  # an existing .venv of 3.10
    assert result.returncode == 1 and pip == []
    assert result.stderr.splitlines() == [
        "install.sh: WanTrainer needs Python 3.11 or newer, and .venv/bin/python is 3.10.12: delete .venv and run "
        "again with PYTHON=python3.11 bash scripts/install.sh (or newer)"]
    shutil.rmtree(tmp_path / "repo" / ".venv")  # no venv yet: the interpreter that would make it is checked
    old = tmp_path / "bin" / "python3.10"
    old.write_text(FAKE_PYTHON)
    old.chmod(0o755)
    result, _ = install(tmp_path, ok=False, PYTHON=str(old), FAKE_PYTHON_VERSION="3.10.12")
    assert len(result.stderr.splitlines()) == 1 and f"{old} is 3.10.12: install one" in result.stderr
    assert not (tmp_path / "repo" / ".venv").exists()
    result, _ = install(tmp_path, ok=False, PYTHON=str(tmp_path / "bin" / "no-such-python"))
    assert "no-such-python is not a Python that runs" in result.stderr
    assert install(tmp_path / "new", FAKE_PYTHON_VERSION="3.12.1")[1][0] == "-m pip install --quiet --upgrade pip"
