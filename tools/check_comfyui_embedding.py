"""Runs ComfyUI's own embedding path (SDTokenizer.tokenize_with_weights with load_embed reading our file from an
embeddings folder, then SDClipModel.process_tokens) on an embedding file we write, and compares the UMT5 states
with ours for the same prompt.

Not a test: it needs a ComfyUI source tree, which CI does not have. tests/test_embedding.py re-states ComfyUI's
injection; this checks that re-statement against the real code. From the repo root:

    git clone https://github.com/Comfy-Org/ComfyUI /tmp/comfyui && pip install --target /tmp/comfydeps einops
    .venv/bin/python tools/check_comfyui_embedding.py /tmp/comfyui /tmp/comfydeps

ComfyUI's Wan tokenizer is `UMT5XXlTokenizer` (sentencepiece); the tiny model's tokenizer is a transformers one, so
SDTokenizer gets the same arguments as UMT5XXlTokenizer passes (embedding_key 'umt5xxl', no start token, </s> end,
pad 0, min_length 512) with the tiny tokenizer in its place. The encoder is the tiny model's UMT5 for both sides:
what is compared is the file reading, the tokenization around `embedding:<name>` and the injection.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from modules.model.text_embedding import WanModelEmbedding  # noqa: E402
from modules.modelLoader.WanModelLoader import WanModelLoader  # noqa: E402
from modules.modelSaver.embedding_file import read_embedding, save_embedding  # noqa: E402
from modules.synthetic.tiny_model import write_tiny_model  # noqa: E402
from tools.check_comfyui_adapters import StubModules  # noqa: E402

PROMPTS = [("a video of embedding:sks moving left", "a video of <sks> moving left"),
           ("embedding:sks, spinning fast", "<sks>, spinning fast"),
           ("a red embedding:sks and a blue embedding:sks", "a red <sks> and a blue <sks>")]


def main(comfy_root: str, deps: str) -> int:
    sys.path[:0] = [comfy_root, deps]
    sys.meta_path.append(StubModules())
    import comfy.options

    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu"]  # ComfyUI's model management reads its command line at import
    import comfy.sd1_clip as sd1

    work = Path(tempfile.mkdtemp())
    model = WanModelLoader().load(write_tiny_model("t2v", work / "tiny"), torch.device("cpu"))
    width = model.text_encoder.config.d_model
    trained = WanModelEmbedding("<sks>", torch.randn(3, width, generator=torch.Generator().manual_seed(0)))
    folder = work / "embeddings"
    save_embedding(trained, folder / "sks.safetensors", "tiny")
    model.text_embedding = read_embedding(folder / "sks.safetensors", width, "check")

    tokenizer = sd1.SDTokenizer(str(work / "tiny" / "tokenizer"), pad_with_end=False, embedding_directory=str(folder),
                                embedding_size=width, embedding_key="umt5xxl", tokenizer_class=AutoTokenizer,
                                has_start_token=False, pad_to_max_length=False, max_length=99999999, min_length=512,
                                pad_token=0)
    table = model.text_encoder.get_input_embeddings()
    transformer = SimpleNamespace(get_input_embeddings=lambda: lambda ids, out_dtype=None: table(ids).to(out_dtype))
    clip = SimpleNamespace(special_tokens={"end": 1, "pad": 0}, transformer=transformer)
    worst = 0.0
    for comfy_prompt, our_prompt in PROMPTS:
        batches = tokenizer.tokenize_with_weights(comfy_prompt)
        tokens = [[token for token, *_ in batch] for batch in batches]
        embeds, mask, _, info = sd1.SDClipModel.process_tokens(clip, tokens, "cpu")
        with torch.no_grad():
            states = model.text_encoder(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
        theirs = states * mask[..., None]  # zero_out_masked
        ours = model.encode_prompts([our_prompt])
        difference = float((ours - theirs).abs().max())
        worst = max(worst, difference)
        print(f"{comfy_prompt!r}: {len(info)} embedding(s) injected at {[i['index'] for i in info]}, "
              f"{int(mask.sum())} tokens, max |ours - ComfyUI| = {difference:.2e}")
    print(f"worst difference: {worst:.2e}")
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
