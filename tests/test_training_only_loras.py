"""`base_loras[].training_only` (a de-distill training adapter): merged while training, taken out for samples and
saved weights (restored bit for bit afterwards), left out of the saved LoRA's header; the memory features that keep
weights where they cannot be taken out are refused at start-up."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from modules.config.train_config import TrainConfig
from modules.modelFile.lora_header import BASE_LORAS_KEY, stack_header
from modules.modelFile.training_only_loras import check_memory_features, without_training_only
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.errors import UserError
from tests.conftest import train_config_dict
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread for tiny models)
from tests.test_base_loras import base_transformer, random_file


def test_a_full_fine_tune_trains_on_the_adapter_and_samples_and_saves_without_it(tiny_model, video_dataset, tmp_path):
    model_dir = tiny_model("t2v")
    lora, _ = random_file("lora", model_dir, tmp_path)
    # a negligible learning rate: the trained weights stay the merged ones (to 1e-12), so what samples and saves see is exactly checkable
    config = train_config_dict(model_dir, video_dataset, tmp_path, epochs=1, max_steps=1, learning_rate=1e-12,
                               training_method="FINE_TUNE", output_model_format="DIFFUSERS",
                               output_model_destination=str(tmp_path / "out"),
                               base_loras=[{"path": str(lora), "strength": 0.7, "training_only": True}],
                               samples=[{"prompt": "a", "frames": 5, "height": 32, "width": 32, "steps": 1}])
    trainer = GenericTrainer(TrainConfig.from_dict(config))
    trainer.start()
    base = base_transformer(model_dir).state_dict()
    name = "blocks.0.attn1.to_q.weight"
    param = dict(trainer.model.transformer.named_parameters())[name]
    merged = param.detach().clone()
    assert not torch.allclose(merged, base[name])  # training sees the adapter
    seen = []
    trainer._sample = lambda samples=None: seen.append(param.detach().clone()) or []
    trainer.sample()
    torch.testing.assert_close(seen[0], base[name], rtol=0, atol=1e-6)  # samples do not
    assert torch.equal(param, merged)  # and training goes on from the very same weights
    trainer.train()
    saved = load_file(str(trainer.end()[0] / "transformer" / "diffusion_pytorch_model.safetensors"))
    torch.testing.assert_close(saved[name], base[name], rtol=0, atol=1e-6)  # nor do the saved weights


def test_the_saved_loras_header_leaves_training_only_loras_out():
    records = [{"name": "lightning.safetensors", "path": "/l", "sha256": "a", "strength": 1.0, "experts": [0]},
               {"name": "dedistill.safetensors", "path": "/d", "sha256": "b", "strength": 1.0, "experts": [0],
                "training_only": True}]
    assert '"lightning.safetensors"' in stack_header(records, 0)[BASE_LORAS_KEY]
    assert "dedistill" not in stack_header(records, 0)[BASE_LORAS_KEY]
    assert stack_header(records[1:], 0) == {}


@pytest.mark.parametrize("fp8, swapped, sharded, key", [(True, False, False, "base_weight_format FP8"),
                                                        (False, True, False, "blocks_to_swap"),
                                                        (False, False, True, "FSDP")])
def test_memory_features_that_hold_weights_elsewhere_are_refused_with_training_only_loras(fp8, swapped, sharded, key):
    class Model:
        training_only_loras, sample_only_loras = [(0, object(), 1.0)], []

    with pytest.raises(UserError, match=key):
        check_memory_features(Model(), fp8, swapped, sharded)
    Model.training_only_loras = []
    check_memory_features(Model(), fp8, swapped, sharded)  # nothing to take out: any feature goes
