"""Sets the attention kernel on a transformer through diffusers' own dispatcher (`set_attention_backend`), after
giving its attention modules our processors; which kernels exist here is `modules/util/attention_kernels.py`."""
from __future__ import annotations

import logging

from modules.model.attention.animate2_processor import install as install_animate2
from modules.model.attention.attention_processor import install
from modules.util.attention_kernels import BACKENDS, auto_order, cuda_capability, resolve
from modules.util.enum import AttentionBackend

logger = logging.getLogger(__name__)

_LOGGED: set = set()  # what AUTO chose, said once per process


def apply_attention_backend(transformers, backend: AttentionBackend, device_type: str, training: bool,
                            what: str = "training") -> AttentionBackend:
    """Set `backend` (AUTO resolved) on every transformer, whose attention modules first get our processor (q, k
    and v in one dtype at the kernel: modules/model/attention/attention_processor.py); returns what was set."""
    chosen = resolve(backend, device_type, training)
    if backend == AttentionBackend.AUTO and (what, chosen) not in _LOGGED:
        _LOGGED.add((what, chosen))
        source = auto_order(cuda_capability())[1] if device_type == "cuda" else "torch's SDPA off a GPU"
        logger.info("attention backend for %s: %s (AUTO on %s: %s)", what, chosen.name, device_type, source)
    previous = logging.getLogger("diffusers.models.modeling_utils").level
    logging.getLogger("diffusers.models.modeling_utils").setLevel(logging.ERROR)  # its "experimental" notice
    try:
        for transformer in transformers:
            install(transformer)
            install_animate2(transformer)
            transformer.set_attention_backend(BACKENDS[chosen].dispatcher_name)
    finally:
        logging.getLogger("diffusers.models.modeling_utils").setLevel(previous)
    return chosen
