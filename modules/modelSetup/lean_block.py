"""The lean Wan block: diffusers' transformer blocks (their modules, weights and names: files load and save as
before) with a forward whose modulated norms and gated residuals keep only half-precision inputs for the backward
pass (lean_ops.py), for every family: Wan 2.1 / 2.2 (`WanTransformerBlock`: T2V, I2V's image keys, FLF2V, A14B, TI2V's
per-token timesteps, the VACE model's main blocks), VACE's hint blocks (`WanVACETransformerBlock`), SkyReels-V2
(`SkyReelsV2TransformerBlock`, diffusion forcing's per-token timesteps) and Animate-2 (`WanAnimate2TransformerBlock`,
both passes).

The attentions and the feed-forward are the blocks' own modules, called as diffusers calls them, so what wraps them
stays: the attention processors and backends, `ffn_chunks` and `checkpoint_attention` (chunking.py), LoRA and the
other adapters, fp8 / int8 base weights; the block is still the module gradient checkpointing, `keep_self_attention`,
block swap, activation offload, FSDP and `compile` see. Values and gradients are diffusers' bit for bit
(tests/test_lean_block.py), but where the feed-forward runs its backward in several token slices: its adapters'
gradients are then the sum of the slices' (lean_ffn.py).

What a block keeps for its backward is decided here, in `BlockSaves` (one place: a checkpoint policy extends it).
"""
from __future__ import annotations

import dataclasses

import torch

from modules.modelSetup.lean_ffn import backward_ffn
from modules.modelSetup.lean_ops import AffineNorm, GatedResidual, ModulatedNorm, slice_rows

_LEAN = "_wan_lean_saves"  # the BlockSaves a block runs with


@dataclasses.dataclass(frozen=True)
class BlockSaves:
    """What a lean block keeps from its forward pass for the backward, beside the attentions' and the feed-forward's
    own saved tensors: every norm and residual keeps its input in the compute dtype (nothing in float32), and
    - `norm_statistics`: each norm's per-token mean and reciprocal deviation (8 bytes a token), so the backward does
      not run the norm's reductions again;
    - `slice_bytes`: the float32 working set of one token slice of the arithmetic (forward, recompute and backward);
      0 runs each op on the whole sequence at once (diffusers' transients);
    - `ffn_in_backward` (under gradient checkpointing): the feed-forward keeps nothing but its input; the block's
      recompute skips it and its own backward runs it again in token slices whose hidden layer holds about
      `ffn_slice_bytes`, at least `ffn_slices` of them (lean_ffn.py). Off, or where the residual's gate trains
      (its gradient needs the feed-forward's output), the feed-forward runs under autograd as diffusers runs it."""

    norm_statistics: bool = True
    slice_bytes: int = 64 * 2 ** 20
    ffn_in_backward: bool = False
    ffn_slice_bytes: int = 32 * 2 ** 20
    ffn_slices: int = 1


def _tables(table: torch.Tensor, temb: torch.Tensor, per_token_axis: int | None) -> list[tuple[torch.Tensor, ...]]:
    """The six (table, temb) pairs of a block's modulation (shift, scale, gate of the attention, then of the
    feed-forward): `table` (1, 6, D) in slices (1, 1, D), `temb` (B, 6, D) in (B, 1, D), or per token along
    `per_token_axis` of a 4-D temb ((B, L, 6, D): axis 2, Wan 2.2 TI2V; (B, 6, L, D): axis 1, SkyReels-V2) in
    (B, L, D) views."""
    table = table.to(temb.device)
    if temb.ndim == 3:
        return [(table[:, k:k + 1], temb[:, k:k + 1]) for k in range(6)]
    return [(table[:, k:k + 1], temb.select(per_token_axis, k)) for k in range(6)]


class _Lean:
    """The shared arithmetic of every family's block, around its attention and feed-forward calls."""

    def __init__(self, saves: BlockSaves):
        self.saves = saves

    def modulated(self, x: torch.Tensor, norm: torch.nn.Module, shift, scale) -> torch.Tensor:
        rows = slice_rows(x, self.saves.slice_bytes)
        return ModulatedNorm.apply(x, norm.eps, rows, self.saves.norm_statistics, *shift, *scale)

    def normed(self, x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
        """diffusers' `norm2(x.float()).type_as(x)`: an affine layer norm, or the input itself (nn.Identity)."""
        if isinstance(norm, torch.nn.Identity):
            return x
        rows = slice_rows(x, self.saves.slice_bytes)
        return AffineNorm.apply(x, norm.weight, norm.bias, norm.eps, rows, self.saves.norm_statistics)

    def gated(self, x: torch.Tensor, branch: torch.Tensor, gate) -> torch.Tensor:
        return GatedResidual.apply(x, branch, slice_rows(x, self.saves.slice_bytes), *gate)

    def feed_forward(self, ffn: torch.nn.Module, x: torch.Tensor, gate) -> torch.Tensor:
        saves = self.saves
        if saves.ffn_in_backward and torch.is_grad_enabled() and not torch.compiler.is_compiling() \
                and not any(t.requires_grad for t in gate):
            return backward_ffn(ffn, x, saves.ffn_slice_bytes, saves.ffn_slices)
        return ffn(x)

    def block(self, x, mod, norm1, self_attention, norm2, cross_attention, norm3, ffn) -> torch.Tensor:
        """Self-attention, cross-attention and feed-forward with their residuals: the body of every Wan block."""
        x = self.gated(x, self_attention(self.modulated(x, norm1, mod[0], mod[1])), mod[2])
        x = x + cross_attention(self.normed(x, norm2))
        return self.gated(x, self.feed_forward(ffn, self.modulated(x, norm3, mod[3], mod[4]), mod[5]), mod[5])


def _wan(lean: _Lean):
    def forward(self, hidden_states, encoder_hidden_states, temb, rotary_emb):
        mod = _tables(self.scale_shift_table, temb, per_token_axis=2)
        return lean.block(hidden_states, mod, self.norm1, lambda h: self.attn1(h, None, None, rotary_emb), self.norm2,
                          lambda h: self.attn2(h, encoder_hidden_states, None, None), self.norm3, self.ffn)

    return forward


def _vace(lean: _Lean):
    def forward(self, hidden_states, encoder_hidden_states, control_hidden_states, temb, rotary_emb):
        if self.proj_in is not None:
            control_hidden_states = self.proj_in(control_hidden_states) + hidden_states
        mod = _tables(self.scale_shift_table, temb, per_token_axis=2)
        control_hidden_states = lean.block(
            control_hidden_states, mod, self.norm1, lambda h: self.attn1(h, None, None, rotary_emb), self.norm2,
            lambda h: self.attn2(h, encoder_hidden_states, None, None), self.norm3, self.ffn)
        conditioning_states = self.proj_out(control_hidden_states) if self.proj_out is not None else None
        return conditioning_states, control_hidden_states

    return forward


def _skyreels(lean: _Lean):
    def forward(self, hidden_states, encoder_hidden_states, temb, rotary_emb, attention_mask):
        mod = _tables(self.scale_shift_table, temb, per_token_axis=1)
        return lean.block(hidden_states, mod, self.norm1, lambda h: self.attn1(h, None, attention_mask, rotary_emb),
                          self.norm2, lambda h: self.attn2(h, encoder_hidden_states, None, None), self.norm3, self.ffn)

    return forward


def _animate2(lean: _Lean):
    def forward(self, hidden_states, temb, encoder_hidden_states, kv_cache, kv_cache_mode, rotary_emb, grid_sizes,
                encoder_hidden_states_image=None, reference_rotary_emb=None, reference_grid_sizes=None,
                attention_mask=None, origin_latent_frames=None, origin_latent_hw=None):
        mod = _tables(self.modulation, temb, per_token_axis=2)

        def self_attention(normed):
            return self.self_attn(
                normed, rotary_emb=rotary_emb, grid_sizes=grid_sizes, kv_cache=kv_cache, kv_cache_mode=kv_cache_mode,
                rope_stride=self.refer_stride if kv_cache_mode == "extract" else 1,
                reference_rotary_emb=reference_rotary_emb, reference_grid_sizes=reference_grid_sizes,
                reference_rope_stride=self.refer_stride, attention_mask=attention_mask,
                origin_latent_frames=origin_latent_frames, origin_latent_hw=origin_latent_hw)

        def cross_attention(normed):
            return self.cross_attn(normed, encoder_hidden_states=encoder_hidden_states,
                                   encoder_hidden_states_image=encoder_hidden_states_image)

        # Animate-2 names its norms by diffusers' original layout: norm3 before the cross-attention, norm2 the FFN's
        return lean.block(hidden_states, mod, self.norm1, self_attention, self.norm3, cross_attention, self.norm2,
                          self.ffn)

    return forward


FORWARDS = {"WanTransformerBlock": _wan, "WanVACETransformerBlock": _vace, "SkyReelsV2TransformerBlock": _skyreels,
            "WanAnimate2TransformerBlock": _animate2}
# the norms each family modulates (without weights of their own in every released config: ModulatedNorm has none)
MODULATED_NORMS = {"WanAnimate2TransformerBlock": ("norm1", "norm2")}


def _family(block: torch.nn.Module) -> str | None:
    """The block's diffusers class (by ancestry: FSDP2's fully_shard renames a block's class to a subclass), None
    where the lean forward does not apply (a modulated norm with weights of its own: diffusers' forward stays)."""
    family = next((cls.__name__ for cls in type(block).__mro__ if cls.__name__ in FORWARDS), None)
    norms = MODULATED_NORMS.get(family, ("norm1", "norm3"))
    if family is None or any(getattr(getattr(block, name), "weight", None) is not None for name in norms):
        return None
    return family


def _blocks(transformer: torch.nn.Module) -> list[torch.nn.Module]:
    return [*getattr(transformer, "blocks", ()), *getattr(transformer, "vace_blocks", ())]


def lean_blocks(transformer: torch.nn.Module, saves: BlockSaves | None = BlockSaves()) -> int:
    """Give every block of `transformer` the lean forward keeping `saves`, or diffusers' own forward again (None).
    Idempotent: a block that runs the lean forward with these saves already (compiled, perhaps) is left as it is.
    Returns how many blocks run the lean forward."""
    count = 0
    for block in _blocks(transformer):
        family = _family(block)
        if family is None:
            continue
        if saves is None:
            if block.__dict__.pop(_LEAN, None) is not None:
                block.__dict__.pop("forward", None)
            continue
        if block.__dict__.get(_LEAN) != saves:
            block.forward = FORWARDS[family](_Lean(saves)).__get__(block)
            block.__dict__[_LEAN] = saves
        count += 1
    return count


def is_lean(block: torch.nn.Module) -> bool:
    return _LEAN in block.__dict__
