"""Textual-inversion embeddings for UMT5: new input-embedding rows that a placeholder word in a prompt stands for.

The vectors enter the encoder as ComfyUI injects an `embedding:<name>` (comfy/sd1_clip.py, `process_tokens`):
the text around the placeholder is tokenized piece by piece, the vectors are spliced in between the pieces'
token embeddings, `</s>` ends the sequence, and the encoder runs on those input embeddings. UMT5's own vocabulary
and weights never change, so a file of vectors is the whole result (`modules/modelSaver/embedding_file.py`).

The placeholder is matched as a whole word, as ComfyUI finds `embedding:<name>`: it starts the text or follows
whitespace, and ends the text or is followed by whitespace or punctuation (`, . ; : ! ?`; ComfyUI strips
commas). `cat` fires in "a cat, sitting" and "a cat." but not in "scattered" or "cathedral".
"""
from __future__ import annotations

import re

import numpy as np
import torch
from diffusers.pipelines.wan.pipeline_wan import prompt_clean
from transformers import PreTrainedTokenizerBase, UMT5EncoderModel

#: The key ComfyUI's Wan text encoder reads an embedding file's tensor from (`embedding_key='umt5xxl'`).
EMBEDDING_KEY = "umt5xxl"


class WanModelEmbedding(torch.nn.Module):
    """`token_count` trainable input vectors (token_count, d_model) that `placeholder` stands for in prompts."""

    def __init__(self, placeholder: str, vectors: torch.Tensor):
        super().__init__()
        if not placeholder or any(c.isspace() for c in placeholder):
            raise ValueError(f"an embedding placeholder is one word, got {placeholder!r}")
        self.placeholder = placeholder
        self.pattern = placeholder_pattern(placeholder)
        self.vectors = torch.nn.Parameter(vectors.detach().float().clone(), requires_grad=False)

    @property
    def token_count(self) -> int:
        return self.vectors.shape[0]

    def applies_to(self, text: str) -> bool:
        return self.pattern.search(prompt_clean(text)) is not None

    @classmethod
    def initialized(cls, placeholder: str, token_count: int, initial_text: str, tokenizer: PreTrainedTokenizerBase,
                    text_encoder: UMT5EncoderModel) -> "WanModelEmbedding":
        """Vectors started from the token embeddings of `initial_text`: each vector the mean of its share of the
        text's tokens (one vector: the mean of all), tiled when the text has fewer tokens than vectors."""
        ids = tokenizer(initial_text, add_special_tokens=False).input_ids
        if not ids:
            raise ValueError(f"'{initial_text}' gives no tokens")
        with torch.no_grad():
            table = text_encoder.get_input_embeddings().weight
            rows = table[torch.tensor(ids, device=table.device)].float().cpu()
        if len(ids) >= token_count:
            groups = np.array_split(np.arange(len(ids)), token_count)
            vectors = torch.stack([rows[torch.from_numpy(g)].mean(dim=0) for g in groups])
        else:
            vectors = rows[torch.arange(token_count) % len(ids)]
        return cls(placeholder, vectors)


def placeholder_pattern(placeholder: str) -> re.Pattern[str]:
    """The placeholder as a whole word (see the module's docstring)."""
    return re.compile(rf"(?<!\S){re.escape(placeholder)}(?=[\s,.;:!?]|$)")


def placeholder_token_ids(tokenizer: PreTrainedTokenizerBase, text: str, embedding: WanModelEmbedding,
                          max_length: int) -> tuple[list[int], list[int]]:
    """Token ids of `text` with each placeholder taking `token_count` slots (id 0 there), and the slots' positions.

    The pieces between placeholders are tokenized on their own, without special tokens, and `</s>` ends the
    sequence (cut to `max_length` with it), as ComfyUI tokenizes around an `embedding:` word."""
    ids: list[int] = []
    slots: list[int] = []
    for index, piece in enumerate(embedding.pattern.split(prompt_clean(text))):
        if index:
            slots += range(len(ids), len(ids) + embedding.token_count)
            ids += [0] * embedding.token_count
        piece = piece.strip()
        if piece:
            ids += tokenizer(piece, add_special_tokens=False).input_ids
    ids = ids[:max_length - 1] + [tokenizer.eos_token_id]
    return ids, [s for s in slots if s < len(ids) - 1]


def encode_with_embedding(tokenizer: PreTrainedTokenizerBase, text_encoder: UMT5EncoderModel, prompts: list[str],
                          embedding: WanModelEmbedding, max_length: int) -> torch.Tensor:
    """(B, max_length, D) float32 UMT5 states of prompts holding the placeholder, the real tokens' states followed
    by zeros as diffusers' `_get_t5_prompt_embeds` lays them out; differentiable in `embedding.vectors`."""
    table = text_encoder.get_input_embeddings()
    device, dtype = table.weight.device, table.weight.dtype
    sequences = [placeholder_token_ids(tokenizer, prompt, embedding, max_length) for prompt in prompts]
    # The encoder runs on the longest real sequence, not max_length: masked positions add nothing to the real
    # ones, so the states equal a full-length pass's, at a fraction of the cost for short captions.
    length = max(len(ids) for ids, _ in sequences)
    rows, masks = [], []
    for ids, slots in sequences:
        embeds = table(torch.tensor(ids, device=device)).float()
        if slots:
            vectors = embedding.vectors.to(device).repeat(len(slots) // embedding.token_count + 1, 1)[:len(slots)]
            embeds = embeds.index_copy(0, torch.tensor(slots, device=device), vectors)  # out of place: differentiable
        pad = length - len(ids)
        rows.append(torch.cat([embeds, embeds.new_zeros(pad, embeds.shape[1])]))
        masks.append(torch.tensor([1] * len(ids) + [0] * pad, device=device))
    mask = torch.stack(masks)
    states = text_encoder(inputs_embeds=torch.stack(rows).to(dtype), attention_mask=mask).last_hidden_state
    states = states.float() * mask[..., None]
    return torch.cat([states, states.new_zeros(len(prompts), max_length - length, states.shape[2])], dim=1)
