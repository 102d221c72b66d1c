"""Encoder modules shared by the plain and the E2V data pipelines (their outputs are what the caches hold).

Each module counts its encoder calls in an `EncoderCounter`, so tests can prove that a warm cache runs
no encoder.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from diffusers.pipelines.wan.pipeline_wan import prompt_clean

from modules.dataLoader.batching import encode_caption
from modules.dataLoader.caption_text import strip_llm_prefix  # noqa: F401 - re-exported
from modules.dataLoader.pipeline import ItemContext, PipelineModule
from modules.dataLoader.skips import SkipCounter
from modules.model.WanModel import TEXT_SEQ_LEN, WanModel


class EncoderCounter:
    def __init__(self) -> None:
        self.calls = 0


class EncoderModule(PipelineModule):
    """A module that runs one of the model's encoders (`encoder`: "vae", "text" or "clip"). `use_encoder()` before
    each call counts it (a warm cache must run none) and, while caching, puts that encoder on the device first
    (`placement`, an EncoderPlacement)."""

    encoder: str
    counter: EncoderCounter
    placement = None

    def use_encoder(self) -> None:
        self.counter.calls += 1
        if self.placement is not None:
            self.placement.use(self.encoder)


class EncodePosterior(EncoderModule):
    """VAE posterior (raw mean and std) of one pixel clip — one call, never pieces (§3.2–3.3)."""

    encoder = "vae"

    def __init__(self, model: WanModel, source: str, prefix: str, identity: Any, counter: EncoderCounter | None = None,
                 placement=None):
        self.model, self.identity, self.counter = model, identity, counter or EncoderCounter()
        self.placement = placement  # an EncoderPlacement: this encoder onto the device first (while caching)
        self.name = f"EncodePosterior[{prefix}]"
        self.inputs, self.outputs = (source,), (f"{prefix}_mean", f"{prefix}_std")

    def cache_identity(self) -> Any:
        return self.identity

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        self.use_encoder()
        mean, std = self.model.encode_video(item[self.inputs[0]][None])
        return {self.outputs[0]: mean[0], self.outputs[1]: std[0]}


# A piece of UMT5's sentencepiece vocabulary is at most 16 characters (its max_sentencepiece_length), so this many
# characters of a cleaned caption give more than TEXT_SEQ_LEN tokens; cleaning only shrinks runs of whitespace.
_CLEAN_CHARS = 16 * (TEXT_SEQ_LEN + 1)


def caption_tokens(tokenizer, caption: str) -> int:
    """How many tokens UMT5 gets for a caption: the tokenizer as diffusers' encode call sees it (cleaned text,
    with </s>), without the cut at TEXT_SEQ_LEN but bounded: past it only the first characters are tokenized
    (enough to count more than TEXT_SEQ_LEN), so a caption of megabytes is counted in milliseconds."""
    text = prompt_clean(caption[: 4 * _CLEAN_CHARS])[:_CLEAN_CHARS]
    return len(tokenizer(text, add_special_tokens=True, truncation=False, verbose=False).input_ids)


class EncodeCaption(EncoderModule):
    """UMT5 embeddings of the caption's real tokens (seq, D); batches zero-pad to 512 (§5)."""

    inputs = ("caption",)
    outputs = ("prompt_embeds",)
    encoder = "text"

    def __init__(self, model: WanModel, identity: Any, strip_prefixes: bool, counter: EncoderCounter | None = None,
                 placement=None):
        self.model, self.identity, self.strip_prefixes = model, identity, strip_prefixes
        self.counter, self.placement = counter or EncoderCounter(), placement

    def cache_identity(self) -> Any:
        return [self.identity, self.strip_prefixes]

    def text(self, caption: str) -> str:
        """The text that is encoded for `caption`."""
        return strip_llm_prefix(caption) if self.strip_prefixes else caption

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        self.use_encoder()
        return {"prompt_embeds": encode_caption(self.model, self.text(item["caption"]))}

    def check_length(self, caption: str, name: str | os.PathLike, skips: SkipCounter) -> None:
        """Record (and log once) a caption that the text encoder cuts to its TEXT_SEQ_LEN tokens. Called
        once per sample in `prepare()`, so a warm cache, which never runs `process`, still reports it."""
        tokens = caption_tokens(self.model.tokenizer, self.text(caption))
        if tokens > TEXT_SEQ_LEN:
            skips.record_truncated_caption(name, TEXT_SEQ_LEN, tokens)
