"""Host arenas (modelSetup/pinned_arena.py): block swap's, expert offload's and activation offload's host copies in a
few power-of-two slabs, each tensor a view holding exactly its values."""
from __future__ import annotations

import gc

import torch

from modules.modelSetup import pinned_arena
from modules.modelSetup.pinned_arena import ActivationArena, HostArena, plan_slabs, rounded_bytes

MIB = 2 ** 20


def test_the_rule_is_torchs_power_of_two_rounding():
    assert [rounded_bytes(n) for n in (0, 1, 2, 3, 64, 65, 26_214_400, 2 ** 30)] == \
        [0, 1, 2, 4, 64, 128, 32 * MIB, 2 ** 30]


def _14b_block_fp8_sizes(blocks: int) -> list[int]:
    """The frozen tensors of `blocks` Wan 14B blocks with fp8 Linear weights: 8 attention projections of 5120 x 5120,
    the FFN's 13824 x 5120 and 5120 x 13824 (1 byte), biases and norms in bf16, the modulation table in float32."""
    dim, ffn = 5120, 13824
    one = [dim * dim] * 8 + [ffn * dim] * 2 + [2 * dim] * 8 + [2 * ffn, 2 * dim] + [2 * dim] * 6 + [4 * 6 * dim]
    return one * blocks


def test_a_14b_swapped_stack_is_held_within_10_percent_of_its_bytes():
    sizes = _14b_block_fp8_sizes(30)
    capacity, places = plan_slabs(sizes)
    assert all(c & (c - 1) == 0 for c in capacity)  # powers of two: the pinned allocator holds them as they are
    held = sum(capacity)
    assert held <= 1.1 * sum(sizes)
    assert sum(rounded_bytes(s) for s in sizes) > 1.4 * sum(sizes)  # what one pinned tensor per weight held
    spans = sorted((slab, offset, offset + size) for (slab, offset), size in zip(places, sizes))
    assert all(a[0] != b[0] or a[2] <= b[1] for a, b in zip(spans, spans[1:]))  # no two items overlap
    assert all(end <= capacity[slab] for slab, _, end in spans)


def test_a_host_arena_holds_each_tensor_exactly_and_lets_the_sources_go():
    generator = torch.Generator().manual_seed(0)
    sources = [torch.randn(shape, generator=generator).to(dtype) for shape, dtype in
               [((7, 5), torch.float32), ((3,), torch.bfloat16), ((), torch.float32), ((0, 4), torch.float16),
                ((33, 9), torch.float8_e4m3fn), ((2, 2), torch.float64)]]
    sources.append(torch.randn(40, generator=generator)[3:])  # a view at an odd address
    expected = [s.clone() for s in sources]
    phases = [s.data_ptr() % pinned_arena.ALIGN for s in sources]
    released = []
    arena = HostArena(list(sources), pin=False, release=lambda i, view: released.append(i), max_slab=256)
    assert sorted(released) == list(range(len(sources)))
    for view, want, phase in zip(arena.views, expected, phases):
        assert view.dtype == want.dtype and view.shape == want.shape and view.is_contiguous()
        assert torch.equal(view.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8))
        assert view.numel() == 0 or view.data_ptr() % pinned_arena.ALIGN == phase  # same alignment: same kernels
    assert arena.nbytes == sum(s.numel() * s.element_size() for s in expected)


def test_the_activation_arena_round_trips_tensors_across_slabs_and_reuses_its_space():
    arena = ActivationArena(pin=False, slab_bytes=1024)
    tensors = [torch.arange(300, dtype=torch.float32).reshape(10, 30), torch.ones(7, dtype=torch.bool),
               torch.randn(5, 4).t(), torch.randn(65, dtype=torch.bfloat16)]  # 1200 bytes: spans two slabs
    packed = [arena.pack(t) for t in tensors]
    assert all(torch.equal(arena.unpack(p), t) for p, t in zip(packed, tensors))
    held = arena.held
    assert held == 2 * 1024 and arena.live == len(tensors)
    del packed
    gc.collect()
    assert arena.live == 0
    again = [arena.pack(t) for t in tensors]  # the next step: from the start of the same slabs
    assert arena.held == held and all(torch.equal(arena.unpack(p), t) for p, t in zip(again, tensors))


def test_activation_offload_through_the_arena_gives_the_same_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)

    def grads(offload: bool) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        arena = ActivationArena(pin=False, slab_bytes=512)
        with arena.hooks() if offload else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            loss = model(x).square().mean()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(grads(False), grads(True)))


def test_slabs_are_pinned_beside_a_gpu_and_tallied(monkeypatch):
    asked = []
    monkeypatch.setattr(torch, "empty", lambda n, dtype, pin_memory: asked.append((n, pin_memory)) or
                        torch.zeros(n, dtype=dtype))
    before = pinned_arena.TALLY.pinned_held
    HostArena([torch.ones(300), torch.ones(100)], pin=True)
    assert asked and all(p for _, p in asked)
    assert pinned_arena.TALLY.pinned_held - before == sum(rounded_bytes(n) for n, _ in asked)
