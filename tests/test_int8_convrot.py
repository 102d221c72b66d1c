"""int8 ConvRot base weights: the Hadamard rotation, the quantiser (bit-identical to comfy-kitchen's, ComfyUI's
kernel library), the int8 GEMM (exact emulation and torch._int_mm) and the input-gradient-only backward."""
from __future__ import annotations

import pytest
import torch

from modules.modelSetup.int8_convrot import (
    dequantize, group_size_for, hadamard, int8_convrot_linear, int8_linear, int_matmul, quantize_rows,
    quantize_weight, rotate,
)
from modules.modelSetup.int8_storage import Int8ConvRotLinear


@pytest.fixture(scope="module")
def kitchen():
    """comfy-kitchen's eager (CPU) backend: the golden reference (a test dependency, requirements.txt)."""
    ck = pytest.importorskip("comfy_kitchen")
    from comfy_kitchen.backends.eager import quantization

    with ck.use_backend("eager"):
        yield quantization


@pytest.mark.parametrize("size", [4, 16, 64, 256])
def test_hadamard_is_regular_symmetric_and_orthogonal(size):
    h = hadamard(size, torch.float64)
    assert torch.equal(h @ h.T, torch.eye(size, dtype=torch.float64))
    assert torch.equal(h, h.T)
    assert torch.equal(h.sum(0), torch.ones(size, dtype=torch.float64))  # regular: every column sums to sqrt(g)/sqrt(g)


def test_hadamard_refuses_sizes_that_are_not_powers_of_4():
    with pytest.raises(ValueError, match="power of 4"):
        hadamard(32)


def test_group_size_is_the_largest_power_of_4_that_divides():
    assert [group_size_for(k) for k in (5120, 1536, 13824, 64, 32, 6)] == [256, 256, 256, 64, 16, None]


def test_rotation_leaves_the_product_unchanged_in_float64():
    torch.manual_seed(0)
    x, w = torch.randn(7, 512, dtype=torch.float64), torch.randn(24, 512, dtype=torch.float64)
    assert torch.allclose(rotate(x, 256) @ rotate(w, 256).T, x @ w.T, rtol=0, atol=1e-12)


def test_hadamard_is_comfy_kitchens(kitchen):
    from comfy_kitchen.tensor.int8_utils import _build_hadamard

    for size in (4, 16, 64, 256):
        assert torch.equal(hadamard(size), _build_hadamard(size))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weight_quantiser_is_bit_identical_to_comfy_kitchens(kitchen, dtype):
    torch.manual_seed(1)
    weight = (torch.randn(48, 512) * 0.02).to(dtype)
    weight[3] = 0  # an all-zero row
    q, scale = quantize_weight(weight, 256)
    # we rotate in float32 whatever the stored dtype: comfy-kitchen rotates in the dtype it is given
    q_ck, scale_ck = kitchen.quantize_int8_convrot_weight(weight.float(), 256)
    assert q.dtype == torch.int8 and scale.shape == (48, 1) and scale.dtype == torch.float32
    assert torch.equal(q, q_ck) and torch.equal(scale, scale_ck)
    assert torch.equal(dequantize(q, scale, 256, torch.float32),
                       kitchen.dequantize_int8_convrot_weight(q_ck, scale_ck, 256))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activation_quantiser_and_forward_match_comfy_kitchens(kitchen, dtype):
    torch.manual_seed(2)
    x, weight, bias = torch.randn(2, 9, 512).to(dtype), torch.randn(40, 512) * 0.02, torch.randn(40).to(dtype)
    xq, xs = quantize_rows(x.reshape(-1, 512))
    xq_ck, xs_ck = kitchen.quantize_int8_rowwise(x.reshape(-1, 512))
    assert torch.equal(xq, xq_ck) and torch.equal(xs, xs_ck)
    q, scale = quantize_weight(weight, 256)
    ours = int8_linear(x, q, scale, bias, 256, "int_mm")
    theirs = kitchen.int8_linear(x, q, scale, bias, dtype, convrot=True, convrot_groupsize=256)
    assert ours.dtype == dtype and torch.equal(ours, theirs)  # what ComfyUI computes at inference


def test_emulated_gemm_is_exact_and_int_mm_agrees():
    torch.manual_seed(3)
    a = torch.randint(-128, 128, (33, 5120), dtype=torch.int8)
    b = torch.full((16, 5120), -128, dtype=torch.int8)  # the largest sums there are
    b[1:] = torch.randint(-128, 128, (15, 5120), dtype=torch.int8)
    exact = int_matmul(a, b, "emulate")
    expected = [[sum(int(p) * int(q) for p, q in zip(a[i].tolist(), b[j].tolist())) for j in (0, 7)] for i in (0, 32)]
    assert exact.dtype == torch.int64 and exact[[0, 32]][:, [0, 7]].tolist() == expected
    assert torch.equal(int_matmul(a, b, "int_mm").long(), exact)


def test_input_gradient_is_dy_times_the_dequantised_weight():
    torch.manual_seed(4)
    weight = torch.randn(24, 256) * 0.05
    q, scale = quantize_weight(weight, 64)
    x = torch.randn(5, 3, 256, requires_grad=True)
    y = int8_convrot_linear(x, q, scale, None, 64, "emulate")
    dy = torch.randn_like(y)
    y.backward(dy)
    expected = dy @ dequantize(q, scale, 64, torch.float32)
    assert torch.allclose(x.grad, expected, rtol=1e-5, atol=1e-6)


def test_lora_gradients_equal_on_the_int8_and_the_dequantised_base():
    """Two adapted layers, a loss linear in the output: the first layer's LoRA gets its gradient through the second
    base's backward (dY·dequant(W) on both), so it matches to float32 round-off; the second sees the first base's
    output, which differs by the activations' int8 rounding."""
    from peft import LoraConfig, inject_adapter_in_model

    torch.manual_seed(5)
    base = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32))
    int8 = torch.nn.Sequential(*(Int8ConvRotLinear.from_linear(layer, torch.float32, 64) for layer in base))
    dequantised = torch.nn.Sequential(*(torch.nn.Linear(64, n) for n in (64, 32)))
    for plain, layer in zip(dequantised, int8):
        plain.weight.data, plain.bias.data = layer.weight.clone(), layer.bias.data.clone()
    config = LoraConfig(r=4, lora_alpha=4, target_modules=["0", "1"], init_lora_weights=False)
    x, direction = torch.randn(20, 64), torch.randn(20, 32)  # equal inputs
    grads = []
    for model in (int8, dequantised):
        torch.manual_seed(6)
        model = inject_adapter_in_model(config, model)
        (model(x) * direction).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if "lora_" in n})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == 4
    for name in grads[0]:
        first = name.startswith("0.")
        scale = float(grads[1][name].abs().max())
        assert torch.allclose(grads[0][name], grads[1][name], rtol=0, atol=scale * (1e-5 if first else 0.05)), name
