"""Encoder modules shared by the plain and the E2V data pipelines (their outputs are what the caches hold).

Each module counts its encoder calls in an `EncoderCounter`, so tests can prove that a warm cache runs
no encoder.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from modules.dataLoader.batching import encode_caption
from modules.dataLoader.pipeline import ItemContext, PipelineModule
from modules.model.WanModel import WanModel


class EncoderCounter:
    def __init__(self) -> None:
        self.calls = 0


# Openers that captioning LLMs put before the content ("The video shows a dog ..." -> "a dog ...").
_LLM_PREFIXES = re.compile(
    r"^\s*(?:in\s+)?(?:this|the)\s+(?:video|clip|footage|scene|animation)\s*(?:shows|showcases|depicts|features|"
    r"captures|presents|displays|portrays|illustrates)?\s*(?:that\s+)?[,:]?\s*",
    re.IGNORECASE,
)


def strip_llm_prefix(caption: str) -> str:
    stripped = _LLM_PREFIXES.sub("", caption, count=1)
    return stripped[:1].lower() + stripped[1:] if stripped and stripped != caption else caption


class EncodePosterior(PipelineModule):
    """VAE posterior (raw mean and std) of one pixel clip — one call, never pieces (§3.2–3.3)."""

    def __init__(self, model: WanModel, source: str, prefix: str, identity: Any, counter: EncoderCounter | None = None):
        self.model, self.identity, self.counter = model, identity, counter or EncoderCounter()
        self.name = f"EncodePosterior[{prefix}]"
        self.inputs, self.outputs = (source,), (f"{prefix}_mean", f"{prefix}_std")

    def cache_identity(self) -> Any:
        return self.identity

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        self.counter.calls += 1
        mean, std = self.model.encode_video(item[self.inputs[0]][None])
        return {self.outputs[0]: mean[0], self.outputs[1]: std[0]}


class EncodeCaption(PipelineModule):
    """UMT5 embeddings of the caption's real tokens (seq, D); batches zero-pad to 512 (§5)."""

    inputs = ("caption",)
    outputs = ("prompt_embeds",)

    def __init__(self, model: WanModel, identity: Any, strip_prefixes: bool, counter: EncoderCounter | None = None):
        self.model, self.identity, self.strip_prefixes = model, identity, strip_prefixes
        self.counter = counter or EncoderCounter()

    def cache_identity(self) -> Any:
        return [self.identity, self.strip_prefixes]

    def process(self, item: Mapping[str, Any], ctx: ItemContext) -> dict[str, Any]:
        self.counter.calls += 1
        caption = strip_llm_prefix(item["caption"]) if self.strip_prefixes else item["caption"]
        return {"prompt_embeds": encode_caption(self.model, caption)}
