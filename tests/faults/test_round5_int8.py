"""Round 5's int8 causes: a file whose layers contradict their own format (a convrot_groupsize wider than the
layer, a weight_scale with the wrong number of rows, NaN scales) is one line before the model is built, not a
RuntimeError or a NaN loss blamed on the learning rate; and a `comfy_quant` entry or a header of megabytes is refused
before it is read (a 200 MB one took 2.58 GB of memory)."""
from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import load_file

from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.util.errors import UserError
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse fixture)
from tests.test_int8_files import CPU, comfy_int8_file
from tests.test_single_file_models import write


@pytest.fixture(scope="module")
def int8_state(tiny_model, tmp_path_factory) -> dict[str, torch.Tensor]:
    state = WanModelLoader().load(str(tiny_model("t2v")), CPU).transformer.state_dict()
    path, _ = comfy_int8_file(state, tmp_path_factory.mktemp("int8") / "int8.safetensors")
    return load_file(path)


def tampered(state: dict[str, torch.Tensor], path, change) -> str:
    state = dict(state)
    name = sorted(n for n in state if n.endswith(".weight_scale"))[0]
    change(state, name.removesuffix(".weight_scale"))
    return write(state, path)


def load(tiny_model, path, keep_int8: bool):
    return WanModelLoader().load(str(tiny_model("t2v")), CPU, transformer_override=path, keep_int8=keep_int8)


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message and message.startswith("config key 'transformer_override'"), message
    return message


@pytest.mark.parametrize("keep_int8", [True, False])
def test_a_group_wider_than_the_layer_is_one_line(tiny_model, int8_state, tmp_path, keep_int8):
    def wide(state, layer):
        marker = {"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 4096}
        state[layer + ".comfy_quant"] = torch.tensor(list(json.dumps(marker).encode()), dtype=torch.uint8)

    path = tampered(int8_state, tmp_path / "wide.safetensors", wide)
    with pytest.raises(UserError) as error:  # old code: RuntimeError from the Hadamard rotation
        load(tiny_model, path, keep_int8)
    assert "with convrot_groupsize 4096, but its" in one_line(error)


@pytest.mark.parametrize("keep_int8", [True, False])
def test_a_weight_scale_with_the_wrong_number_of_rows_is_one_line(tiny_model, int8_state, tmp_path, keep_int8):
    def short(state, layer):
        state[layer + ".weight_scale"] = state[layer + ".weight_scale"][:-1].clone()

    path = tampered(int8_state, tmp_path / "rows.safetensors", short)
    with pytest.raises(UserError) as error:  # old code: RuntimeError (shapes) while building or at the first step
        load(tiny_model, path, keep_int8)
    assert "output rows (one scale per row)" in one_line(error)


def test_nan_scales_are_refused_at_load(tiny_model, int8_state, tmp_path):
    def nan(state, layer):
        scale = state[layer + ".weight_scale"].clone()
        scale[0] = float("nan")
        state[layer + ".weight_scale"] = scale

    path = tampered(int8_state, tmp_path / "nan.safetensors", nan)
    with pytest.raises(UserError) as error:  # old code: loaded; the NaN stop then said "lower learning_rate"
        load(tiny_model, path, True)
    assert "has NaN or infinite values in '" in one_line(error)


def test_a_huge_comfy_quant_entry_is_refused_unread(tiny_model, int8_state, tmp_path):
    def huge(state, layer):
        text = json.dumps({"format": "int8_tensorwise", "convrot": True, "pad": "x" * (1 << 20)})
        state[layer + ".comfy_quant"] = torch.tensor(list(text.encode()), dtype=torch.uint8)

    path = tampered(int8_state, tmp_path / "huge.safetensors", huge)
    with pytest.raises(UserError) as error:  # old code: read and decoded (200 MB: 2.58 GB of memory)
        load(tiny_model, path, True)
    assert "a layer's format is a short JSON (at most 4096)" in one_line(error)


def test_a_header_of_megabytes_is_refused_unread(tiny_model, tmp_path):
    path = tmp_path / "header.safetensors"
    header = json.dumps({"__metadata__": {"junk": "x" * (17 << 20)}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(UserError) as error:
        load(tiny_model, str(path), True)
    assert "MiB header, more than the 16 MiB" in one_line(error)
