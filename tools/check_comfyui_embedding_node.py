"""Checks comfyui/wantrainer_nodes against ComfyUI's real code: stock ComfyUI ignores `embedding:<name>` for Wan's
UMT5 tokenizer, and with the node the placeholder's vectors (read from a file we write, by ComfyUI's `load_embed`)
reach the encoder input (`SDClipModel.process_tokens`).

Not a test: it needs a ComfyUI source tree, which CI does not have (tests/test_comfyui_nodes.py re-states the
interface with a fake). Checked at Comfy-Org/ComfyUI a125cd84b054a57729b5eecab930ca9408719832. From the repo root:

    git clone https://github.com/Comfy-Org/ComfyUI /tmp/comfyui && pip install --target /tmp/comfydeps einops
    .venv/bin/python tools/check_comfyui_embedding_node.py /tmp/comfyui /tmp/comfydeps

What is real: `comfy.sd.CLIP` (its clone and tokenize), `WanT5Tokenizer` / `UMT5XXlTokenizer` / `SDTokenizer`
(built as `comfy.sd.load_clip` builds them, with the embeddings folder stock ComfyUI passes), `load_embed`,
`process_tokens`, `folder_paths`, and the node package loaded as ComfyUI loads a custom node folder. What is not:
the sentencepiece model (a small one trained here: UMT5's is 4 MB and not in the source tree), the encoder
(process_tokens gets a random 4096-wide embedding table; no 5.7 B parameter UMT5-XXL is built) and the
CLIP's model patcher (a stand-in: no model is loaded).
"""
from __future__ import annotations

import importlib.util
import io
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from modules.model.text_embedding import WanModelEmbedding  # noqa: E402
from modules.modelSaver.embedding_file import save_embedding  # noqa: E402
from modules.synthetic.tiny_tokenizer import _tokenizer_corpus  # noqa: E402
from tools.check_comfyui_adapters import StubModules  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WIDTH = 4096  # UMT5XXlTokenizer's embedding_size
PROMPT = "a video of embedding:sks moving left"


def sentencepiece_model() -> bytes:
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(_tokenizer_corpus()), model_writer=model, vocab_size=200,
                                             pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    return model.getvalue()


def load_node_package():
    """As ComfyUI's nodes.load_custom_node loads a folder: its __init__.py by file location."""
    folder = REPO / "comfyui" / "wantrainer_nodes"
    spec = importlib.util.spec_from_file_location("custom_nodes_wantrainer", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(comfy_root: str, deps: str) -> int:
    sys.path[:0] = [comfy_root, deps]
    sys.meta_path.append(StubModules())
    import comfy.options

    comfy.options.enable_args_parsing()
    sys.argv = [sys.argv[0], "--cpu"]
    import comfy.sd
    import comfy.sd1_clip
    import folder_paths
    from comfy.text_encoders.wan import WanT5Tokenizer

    work = Path(tempfile.mkdtemp())
    embeddings = work / "models" / "embeddings"
    folder_paths.folder_names_and_paths["embeddings"] = ([str(embeddings)], folder_paths.supported_pt_extensions)
    vectors = torch.randn(3, WIDTH, generator=torch.Generator().manual_seed(0))
    save_embedding(WanModelEmbedding("<sks>", vectors), embeddings / "sks.safetensors", "check")

    clip = comfy.sd.CLIP(no_init=True)  # the fields CLIP.__init__ sets, without loading an encoder
    clip.patcher = SimpleNamespace(clone=lambda: None)
    clip.cond_stage_model, clip.layer_idx, clip.tokenizer_options = None, None, {}
    clip.use_clip_schedule, clip.apply_hooks_to_conds = False, None
    clip.tokenizer = WanT5Tokenizer(embedding_directory=folder_paths.get_folder_paths("embeddings"),  # as load_clip
                                    tokenizer_data={"spiece_model": sentencepiece_model()})

    stock = clip.tokenize(PROMPT)["umt5xxl"][0]
    stock_vectors = sum(torch.is_tensor(token) for token, _ in stock)
    words = [token for token, _ in stock if token != 0]  # before the padding to 512
    print(f"stock ComfyUI: {stock_vectors} embedding vectors in the tokens of {PROMPT!r}; its words are "
          f"tokenized as text: {clip.tokenizer.clip_umt5xxl.tokenizer.tokenizer.id_to_piece(words)}")

    package = load_node_package()
    node = package.NODE_CLASS_MAPPINGS["WanTrainerUMT5Embeddings"]()
    (enabled,) = getattr(node, node.FUNCTION)(clip)
    tokens = enabled.tokenize(PROMPT)["umt5xxl"][0]
    injected = [i for i, (token, _) in enumerate(tokens) if torch.is_tensor(token)]
    exact = all(torch.equal(tokens[i][0], vectors[n]) for n, i in enumerate(injected))
    again = sum(torch.is_tensor(token) for token, _ in clip.tokenize(PROMPT)["umt5xxl"][0])
    print(f"with the node: vectors at {injected} (file's vectors exactly: {exact}); the input CLIP still "
          f"gives {again} (unchanged)")

    table = torch.nn.Embedding(200, WIDTH)
    stand_in = SimpleNamespace(special_tokens={"end": 1, "pad": 0}, transformer=SimpleNamespace(
        get_input_embeddings=lambda: lambda ids, out_dtype=None: table(ids).to(out_dtype)))
    with torch.no_grad():
        embeds, _, _, info = comfy.sd1_clip.SDClipModel.process_tokens(stand_in, [[t for t, _ in tokens]], "cpu")
    spliced = all(torch.equal(embeds[0, i], vectors[n]) for n, i in enumerate(injected))
    print(f"process_tokens: {len(info)} embedding(s) spliced into the encoder input, rows equal the file's: {spliced}")
    ok = stock_vectors == 0 and len(injected) == 3 and exact and again == 0 and spliced
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
