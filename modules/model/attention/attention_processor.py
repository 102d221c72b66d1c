"""Wan's attention with q, k and v in one dtype at the kernel, for every backend of diffusers' dispatcher.

Under autocast, `torch.nn.RMSNorm` runs in float32 on CUDA (`aten::rms_norm` is on CUDA autocast's float32 list) and
the rotary embedding's float32 tables keep q and k in float32, while v comes from a Linear in the compute dtype.
torch's SDPA (NATIVE, CUDNN) casts all three to the autocast dtype itself; flash-attn's `flash_attn_func` (fp16/bf16
only), flex_attention's backward and SageAttention (one dtype across q/k/v) do not, so diffusers' own processors
hand them a mixture they refuse. `WanAttentionProcessor` is diffusers' `WanAttnProcessor` / `SkyReelsV2AttnProcessor`
(same projections, float32 norms and rotary, same I2V/FLF2V image keys) with one change: q, k and v reach each kernel
call cast to the compute dtype, the cast SDPA's autocast kernel makes, so NATIVE and CUDNN give the same numbers bit
for bit (tests/test_attention_contract.py). `install` puts it on every Wan, VACE and SkyReels-V2 attention module
(E2V's added image keys included) wherever an attention backend is applied: training, the trainer's samples,
sample.py. Under sequence parallelism its self-attention runs through Ulysses' all-to-all (`ulysses.py`)."""
from __future__ import annotations

import torch
from diffusers.models.attention_dispatch import dispatch_attention_fn
from diffusers.models.transformers.transformer_wan import _get_added_kv_projections, _get_qkv_projections
from torch.utils.checkpoint import checkpoint

from modules.model.attention.ulysses import SequenceShards, ulysses_attention
from modules.util.sliced_recompute import sliced_recompute

TEXT_TOKENS = 512  # diffusers' Wan processors: the image tokens are what precedes UMT5's 512


def compute_dtype(reference: torch.Tensor) -> torch.dtype:
    """The dtype the kernel runs in: autocast's on `reference`'s device when it is on, else `reference`'s own (v's:
    the projections' output dtype)."""
    device_type = reference.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return reference.dtype


def rotate(hidden_states: torch.Tensor, freqs_cos: torch.Tensor, freqs_sin: torch.Tensor) -> torch.Tensor:
    """Wan's rotary embedding on interleaved pairs, the arithmetic of diffusers' processor (so the numbers match)."""
    x1, x2 = hidden_states.unflatten(-1, (-1, 2)).unbind(-1)
    cos = freqs_cos[..., 0::2]
    sin = freqs_sin[..., 1::2]
    out = torch.empty_like(hidden_states)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out.type_as(hidden_states)


def _normed(norm, x: torch.Tensor, heads: int, rotary_emb) -> torch.Tensor:
    x = norm(x).unflatten(2, (heads, -1))
    return rotate(x, *rotary_emb) if rotary_emb is not None else x


NORM_SLICE_BYTES = 64 * 2 ** 20  # float32 bytes of one token slice of the q/k norm's recompute


def normed(norm, x: torch.Tensor, heads: int, rotary_emb=None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`norm(x)` split into heads and rotated, in float32 under autocast, then cast to `dtype` (None: kept in
    float32). With gradients, recomputed in the backward pass from `x` a token slice at a time
    (util/sliced_recompute.py): autograd would otherwise keep float32 copies of q and k (the norm's input and the
    rotary's) for the backward, where `x` is the projection's output in the compute dtype, and the recompute's float32
    working set (the norm's and the rotary's intermediates and gradients, several tensors of q's size) would be whole.
    The same operations run on each token's row again, so values and gradients are the same bit for bit (a trained
    norm weight, whose gradient sums over tokens: unsliced). Not when `x` is float32 outside autocast (a float32
    run, the CPU's tests and demo): no float32 copy to spare there, and recomputing is pure cost."""
    rotary = tuple(rotary_emb) if rotary_emb is not None else ()

    def compute(part: torch.Tensor, *tables: torch.Tensor) -> torch.Tensor:
        out = _normed(norm, part, heads, tables or None)
        return out if dtype is None else out.to(dtype)

    if not torch.is_grad_enabled() or (x.dtype == torch.float32 and not torch.is_autocast_enabled(x.device.type)):
        return compute(x, *rotary)
    if torch.compiler.is_compiling():  # dynamo traces a checkpoint (the slices' autograd.grad it would not)
        return checkpoint(compute, x, *rotary, use_reentrant=False, preserve_rng_state=False)
    params = [p for p in norm.parameters() if p.requires_grad]
    slices = 1 if params else -(-x.shape[0] * x.shape[1] * x.shape[2] * 4 // NORM_SLICE_BYTES)
    return sliced_recompute(compute, x, extras=rotary, params=params, slices=slices)


class WanAttentionProcessor:
    """One processor object per attention module (diffusers' `set_attention_backend` writes the backend on it)."""

    _attention_backend = None
    _parallel_config = None
    _sequence_shards: SequenceShards | None = None  # sequence parallel: this rank's token shard (model/sequence_parallel)

    def _attend(self, query, key, value, attn_mask, parallel_config):
        return self._kernel(query, key, value, attn_mask, parallel_config).flatten(2, 3)

    def _kernel(self, query, key, value, attn_mask, parallel_config):
        return dispatch_attention_fn(query, key, value, attn_mask=attn_mask, dropout_p=0.0, is_causal=False,
                                     backend=self._attention_backend, parallel_config=parallel_config)

    def _self_attend(self, query, key, value, attn_mask):
        shards = self._sequence_shards
        if shards is None or not shards.active:
            return self._attend(query, key, value, attn_mask, self._parallel_config)
        return ulysses_attention(lambda q, k, v: self._kernel(q, k, v, attn_mask, None), query, key, value,
                                 shards).flatten(2, 3)

    def __call__(self, attn, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        image_states = None
        if attn.add_k_proj is not None:  # I2V / FLF2V: CLIP image tokens first, then the text's
            split = encoder_hidden_states.shape[1] - TEXT_TOKENS
            image_states, encoder_hidden_states = encoder_hidden_states[:, :split], encoder_hidden_states[:, split:]
        query, key, value = _get_qkv_projections(attn, hidden_states, encoder_hidden_states)
        dtype = compute_dtype(value)
        # The norms and rotary run in float32 and each kernel call casts for itself, as SDPA's autocast does; a q
        # that two kernels read (I2V's text and image attention) stays float32 until each cast, so its gradients
        # add up in float32, bit for bit as before. A float32 q / k is kept no longer than needed.
        query = normed(attn.norm_q, query, attn.heads, rotary_emb, None if image_states is not None else dtype)
        key = normed(attn.norm_k, key, attn.heads, rotary_emb, dtype)
        inputs = (query.to(dtype), key.to(dtype), value.unflatten(2, (attn.heads, -1)).to(dtype))
        del key, value
        if image_states is None:
            del query
        if encoder_hidden_states is None:
            out = self._self_attend(*inputs, attention_mask)
        else:
            out = self._attend(*inputs, attention_mask, None)
        del inputs
        if image_states is not None:
            key_img, value_img = _get_added_kv_projections(attn, image_states)
            key_img = normed(attn.norm_added_k, key_img, attn.heads, dtype=dtype)
            out = out + self._attend(query.to(dtype), key_img.to(dtype),
                                     value_img.unflatten(2, (attn.heads, -1)).to(dtype), None, None)
        return attn.to_out[1](attn.to_out[0](out))


def install(transformer: torch.nn.Module) -> None:
    """Give every Wan-style attention module of `transformer` (Wan, VACE, SkyReels-V2; E2V's added image keys
    included) a `WanAttentionProcessor`, keeping the backend and parallel config its processor had."""
    for module in transformer.modules():
        processor = getattr(module, "processor", None)
        if processor is None or isinstance(processor, WanAttentionProcessor) or not hasattr(module, "norm_q"):
            continue
        if type(module).__name__ == "WanAnimate2Attention":  # its own processors: animate2_processor.install
            continue
        ours = WanAttentionProcessor()
        ours._attention_backend = getattr(processor, "_attention_backend", None)
        ours._parallel_config = getattr(processor, "_parallel_config", None)
        ours._sequence_shards = getattr(processor, "_sequence_shards", None)
        module.set_processor(ours)
