"""Tiny random CLIP (image and text towers) and DINOv2 folders for the evaluation tests and the demo: made
offline like the tiny Wan models, loaded by the same code as the real ones (`--clip-model`, `--dino-model`)."""
from __future__ import annotations

import re
from pathlib import Path

_WORDS = sorted(set(re.findall(r"[a-z]+", """a an the cat dog red blue green cube ball square circle moving left right
up down fast slow small large white black gray teal purple person car tree sky water on in of and with""")))
_SPECIAL = ["<|startoftext|>", "<|endoftext|>", "<unk>"]


def write_tiny_clip(folder: str | Path, seed: int = 0) -> Path:
    """A CLIPModel (vision 32 px, patch 8; text: a word-level tokenizer) with its image processor."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.normalizers import Lowercase
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, PreTrainedTokenizerFast

    folder = Path(folder)
    vocab = {token: i for i, token in enumerate(_SPECIAL + _WORDS)}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = Lowercase()
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.post_processor = TemplateProcessing(single="<|startoftext|> $A <|endoftext|>",
                                                  special_tokens=[(t, vocab[t]) for t in _SPECIAL[:2]])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=_SPECIAL[0], eos_token=_SPECIAL[1],
                                      pad_token=_SPECIAL[1], unk_token=_SPECIAL[2], model_max_length=77)
    torch.manual_seed(seed)
    config = CLIPConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=77, bos_token_id=vocab[_SPECIAL[0]],
                         eos_token_id=vocab[_SPECIAL[1]], pad_token_id=vocab[_SPECIAL[1]]),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=8)
    CLIPModel(config).save_pretrained(folder)
    wrapped.save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def write_tiny_dino(folder: str | Path, seed: int = 0) -> Path:
    """A Dinov2Model (28 px, patch 14) with its image processor (BitImageProcessor, as facebook/dinov2-* ship)."""
    import torch
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    folder = Path(folder)
    torch.manual_seed(seed)
    Dinov2Model(Dinov2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                             image_size=28, patch_size=14)).save_pretrained(folder)
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 28, "width": 28},
                      image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]).save_pretrained(folder)
    return folder
