"""`compile`: regional compilation of the transformer's repeated block (AUTO: on a CUDA GPU with triton).

Each `WanTransformerBlock`'s `forward` goes through `torch.compile` (diffusers' `_repeated_blocks` names that
class; its `compile_repeated_blocks` would compile the module's whole call, hooks included). Compiling the
forward only keeps the module hooks eager: block swap's weight copies (side streams, events) and the idle-expert
offload run as before, and gradient checkpointing calls the block as usual, so its recompute runs the compiled
code again. The blocks share one code object, so dynamo compiles once and reuses the graphs for every block.

Shapes change with buckets (frames, height, width: the token count). `dynamic=True` traces symbolic sizes from
the first call, so a new bucket reuses the graph; compiling statically first and dynamically on the second shape
(torch's default) would also let a checkpointed block's recompute pick a different graph than its forward,
which the checkpoint rejects. The compiled graphs are cached across runs (inductor's FX graph and AOTAutograd caches and
triton's kernels, in one persistent folder: `graph_cache_dir`), so a run of a shape compiled before loads its graphs
instead of compiling them again; dynamo still traces the block at each start. What can still add graphs: the first
block's input needs no gradient (frozen patch embedding) while later ones do, square buckets (h == w, duck sizing), batch size 1 against larger ones and
gradient mode (sampling, validation). `CompileLog` logs the graph count whenever a step brings a new shape, so a
recompile storm shows in the log; set TORCH_LOGS=recompiles for the reasons.
"""
from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import torch

from modules.config.train_config import TrainConfig
from modules.util.enum import CompileMode

logger = logging.getLogger(__name__)

BACKEND = "inductor"  # tests on the CPU use "aot_eager" (inductor compiles C++ for minutes on 2 cores)
# Graphs one block may need (grad mode x first-block input x square buckets x batch 1): above torch's 8, so a
# run that samples and validates never falls back to eager.
RECOMPILE_LIMIT = 32


def compile_wanted(config: TrainConfig, device: torch.device) -> tuple[bool, str]:
    """Whether `config` compiles the blocks on `device`, and why (AUTO's reason, for the log)."""
    if config.compile != CompileMode.AUTO:
        return config.compile == CompileMode.ON, f"compile {config.compile.name}"
    if device.type != "cuda" or torch.version.hip:
        return False, "compile AUTO: off (not a CUDA GPU)"
    if importlib.util.find_spec("triton") is None:
        return False, "compile AUTO: off (the 'triton' package is not installed; pip install triton)"
    if config.int8_base():
        return False, "compile AUTO: off (an int8 ConvRot base has not been compiled on a GPU yet)"
    return True, "compile AUTO: on (a CUDA GPU with triton; the compile tests pass there)"


def graph_cache_dir() -> Path:
    """Where compiled graphs persist between runs: TORCHINDUCTOR_CACHE_DIR where the user set it, else
    ~/.cache/wantrainer/torch_compile (XDG_CACHE_HOME respected); inductor's default is a temporary folder (which
    inductor writes into the variable once it has used it: that value is not the user's)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen and os.path.abspath(chosen) != os.path.abspath(default_cache_dir()):
        return Path(chosen)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "wantrainer" / "torch_compile"


def enable_graph_cache() -> Path:
    """Turn on inductor's FX graph cache and the AOTAutograd cache in `graph_cache_dir` (inductor keeps triton's
    kernels there too), before the first compilation. Returns the folder."""
    folder = graph_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)  # read by inductor whenever it needs the folder
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    if hasattr(functorch_config, "enable_autograd_cache"):
        functorch_config.enable_autograd_cache = True
    return folder


def compile_blocks(transformer: torch.nn.Module) -> int:
    """Compile the forward of every repeated block of `transformer` (after adapters are injected and memory
    features set up). Returns how many blocks were compiled; a second call compiles nothing more."""
    repeated = tuple(getattr(transformer, "_repeated_blocks", None) or ("WanTransformerBlock",))
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    cache = enable_graph_cache()
    count = 0
    for module in transformer.modules():
        # by the class's ancestry: FSDP2's fully_shard swaps a block's class for a subclass (FSDPWanTransformerBlock)
        is_block = any(cls.__name__ in repeated for cls in type(module).__mro__)
        if is_block and not getattr(module, "_wan_compiled", False):
            module.forward = torch.compile(module.forward, backend=BACKEND, dynamic=True)
            module._wan_compiled = True
            count += 1
    logger.info("compile: %d %s blocks compiled (backend %s, dynamic shapes; graphs cached across runs in %s)", count,
                "/".join(repeated), BACKEND, cache)
    return count


def compiled_graphs() -> int:
    """Graphs dynamo compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class CompileLog:
    """Logs the graphs the compiled blocks needed: after the first step of each new input shape, and after any
    other step (or the sampling / validation before it) that compiled more, which a recompile storm would do."""

    def __init__(self):
        self.seen: set[tuple[int, ...]] = set()
        self.graphs = compiled_graphs()
        self.last: tuple[tuple[int, ...], bool] | None = None
        self.messages: list[str] = []  # what was logged (tests read it)

    def step(self, shape: tuple[int, ...]) -> None:
        """Call at the start of each training forward with the latent shape (B, C, T, h, w)."""
        self._report()
        self.last = (shape, shape not in self.seen)
        self.seen.add(shape)

    def _report(self) -> None:
        if self.last is None:
            return
        graphs = compiled_graphs()
        added, self.graphs = graphs - self.graphs, graphs
        shape, new = self.last
        if new:
            message = f"compile: new shape {list(shape)} ({len(self.seen)} so far): {added} graph(s) added, {graphs} in all"
        elif added:
            message = (f"compile: {added} graph(s) added since a step of a known shape {list(shape)} (sampling and "
                       f"validation count here too), {graphs} in all; TORCH_LOGS=recompiles tells why")
        else:
            return
        logger.info(message)
        self.messages.append(message)
