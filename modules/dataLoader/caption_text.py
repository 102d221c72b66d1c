"""Caption text rules shared by the data loaders and the captioning tool (one place for each)."""
from __future__ import annotations

import re

# Openers that captioning LLMs put before the content ("The video shows a dog ..." -> "a dog ...").
_LLM_PREFIXES = re.compile(
    r"^\s*(?:in\s+)?(?:this|the)\s+(?:video|clip|footage|scene|animation)\s*(?:shows|showcases|depicts|features|"
    r"captures|presents|displays|portrays|illustrates)?\s*(?:that\s+)?[,:]?\s*",
    re.IGNORECASE,
)


def strip_llm_prefix(caption: str) -> str:
    """`remove_common_llm_caption_prefixes`: "The video shows a dog" -> "a dog" (the first letter lowered)."""
    stripped = _LLM_PREFIXES.sub("", caption, count=1)
    return stripped[:1].lower() + stripped[1:] if stripped and stripped != caption else caption
