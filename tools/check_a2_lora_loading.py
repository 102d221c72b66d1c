"""Which of our LoRA formats SkyReels-A2's pipeline loads on an older diffusers: A2's `A2Pipeline` is a
`DiffusionPipeline` + `WanLoraLoaderMixin`, as diffusers' `WanImageToVideoPipeline` is, so `load_lora_weights` of
the latter on the tiny I2V model is the path A2 takes. Checked with diffusers 0.33.1 (the diffusers of A2's time):
COMFY_LORA fails (its Wan converter reads lora_A/lora_B names only: KeyError), DIFFUSERS_LORA loads.

Not a test: it needs another diffusers (and a transformers it imports with) beside the installed ones:

    pip install --no-deps --target /tmp/d033 diffusers==0.33.1 transformers==4.51.3 tokenizers==0.21.1 \\
        huggingface_hub==0.30.2
    .venv/bin/python tools/check_a2_lora_loading.py /tmp/d033

The tiny folder's tokenizer is written by transformers 5, which 4.51 cannot read: it is left out (LoRA loading does
not use it), and 4.51 leaves the tiny CLIP's weights random for the same reason (unused here as well).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RUN = r"""
import diffusers
from diffusers import WanImageToVideoPipeline
print("diffusers", diffusers.__version__)
for fmt in ("COMFY_LORA", "DIFFUSERS_LORA"):
    pipe = WanImageToVideoPipeline.from_pretrained({model!r}, tokenizer=None)
    try:
        pipe.load_lora_weights({folder!r} + "/" + fmt + ".safetensors")
        print(fmt, "loads:", sum("lora" in n for n, _ in pipe.transformer.named_parameters()), "LoRA tensors")
    except Exception as e:
        print(fmt, "fails:", type(e).__name__, str(e).splitlines()[0][:200])
"""


def main(other_diffusers: str) -> int:
    from modules.modelFile.lora_formats import COMFY_LORA, DIFFUSERS_LORA, extract_from_peft
    from modules.modelSaver.WanLoRASaver import lora_metadata, save_lora
    from modules.synthetic.tiny_model import write_tiny_model
    from tests.test_adapters import injected

    work = Path(tempfile.mkdtemp())
    model = write_tiny_model("i2v", work / "i2v")
    weights = extract_from_peft(injected(model, work, lora_alpha=3))  # every block Linear, random weights
    for fmt in (COMFY_LORA, DIFFUSERS_LORA):
        save_lora(weights, work / f"{fmt}.safetensors", fmt, lora_metadata("wan-2.1-i2v"))
    code = RUN.format(model=str(model), folder=str(work))
    for path in (other_diffusers, None):
        env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # set by tests/conftest; 0.33 offline
        # then asks for a weight_name even for a local file
        env.update({"PYTHONPATH": path} if path else {})
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        print("\n".join(line for line in out.stdout.splitlines() if line.startswith(("diffusers", "COMFY", "DIFF"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
