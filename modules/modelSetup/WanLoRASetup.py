"""Adapter training (LoRA, DoRA, LoHa, LoKr: `modules.adapter`) on the chosen transformer(s); everything else
frozen. What trains is what peft names as the adapter's weights, plus the fully trained modules."""
from __future__ import annotations

import logging

import torch

from modules.adapter.registry import adapter_for
from modules.modelSetup.BaseWanSetup import EXPERT_NAMES, BaseWanSetup
from modules.modelSetup.lora_targets import select_lora_targets
from modules.modelSetup.memory import store_base_weights

logger = logging.getLogger(__name__)

ADAPTER = "default"
EXPERT_PREFIX = tuple(f"{name}." for name in EXPERT_NAMES)  # keys of backups: "transformer.blocks.0..."


class WanLoRASetup(BaseWanSetup):
    def setup_transformers(self) -> list[torch.nn.Parameter]:
        config = self.config
        spec = adapter_for(config.peft_type, config.lora_decompose)
        self.trained_names: dict[int, set[str]] = {}
        params: list[torch.nn.Parameter] = []
        for expert, transformer in self.trained_transformers():
            # before injection, so the LoRA matrices stay in full precision
            keep = tuple(name.rsplit(".", 1)[0] for name in self.full_train.get(expert, []))
            store_base_weights(config, transformer, self.model.train_dtype, keep)
            full = set(self.full_train.get(expert, []))
            scope = config.vace_train_blocks if self.model.variant.vace_layers else None
            targets = [t for t in select_lora_targets(transformer, config.lora_target_modules, config.lora_blocks,
                                                      config.lora_layer_filter, scope) if f"{t}.weight" not in full]
            transformer.add_adapter(spec.peft_config(config, targets), adapter_name=ADAPTER)
            self.trained_names[expert] = spec.trainable_names(transformer, ADAPTER) | full
            expert_params = [p for n, p in transformer.named_parameters() if n in self.trained_names[expert]]
            for p in expert_params:
                p.data = p.data.float()  # adapter weights train in fp32 even on a bf16 base
                p.requires_grad_(True)
            if self.model.train_dtype != torch.float32:
                keep_input_dtype(transformer)
            logger.info("%s rank %d on %d layers of %s (%d parameters)", spec.title, config.lora_rank, len(targets),
                        EXPERT_PREFIX[expert].rstrip("."), sum(p.numel() for p in expert_params))
            params.extend(expert_params)
        return params

    def _rate_factor(self, name: str) -> float:
        """LoRA+: the adapter's up matrices at `lora_plus_ratio` times the rate."""
        ratio = self.config.lora_plus_ratio
        spec = adapter_for(self.config.peft_type, self.config.lora_decompose)
        return ratio if ratio and spec.is_up_weight(name) else 1.0

    def _trains(self, expert: int, name: str) -> bool:
        return name in self.trained_names[expert]

    def transformer_state(self) -> dict[str, torch.Tensor]:
        state = {}
        for expert, transformer in self.trained_transformers():
            for name, param in transformer.named_parameters():
                if self._trains(expert, name):
                    state[EXPERT_PREFIX[expert] + name] = param.detach().clone()
        return state

    def load_transformer_state(self, state: dict[str, torch.Tensor]) -> None:
        load_named_parameters(self, state, self._trains)


def keep_input_dtype(transformer: torch.nn.Module) -> None:
    """Adapted layers take their input in the compute dtype. peft casts a layer's input to the adapter's float32
    first: a float32 copy of every adapted layer's input (1.1 GiB for `ffn.net.2` of the 1.3B at 832x480x81) and its
    float32 gradient, which autocast then casts straight back to bf16 for the matmul. Every forward of a training
    run's transformer (step, validation, samples) runs under autocast of the compute dtype, which casts the float32
    adapter weights per matmul as it did, so the values are the same and only the copies go."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for module in transformer.modules():
        if isinstance(module, BaseTunerLayer):
            module.cast_input_dtype_enabled = False


def load_named_parameters(setup: BaseWanSetup, state: dict[str, torch.Tensor], selected) -> None:
    """Copy `state` (names prefixed by expert) into the trained transformers; every name must match."""
    expected = set()
    for expert, transformer in setup.trained_transformers():
        params = dict(transformer.named_parameters())
        for name, param in params.items():
            if not selected(expert, name):
                continue
            key = EXPERT_PREFIX[expert] + name
            expected.add(key)
            if key not in state:
                raise KeyError(f"backup has no weights for '{key}'")
            with torch.no_grad():
                param.copy_(state[key].to(param.device, param.dtype))
    extra = set(state) - expected
    if extra:
        raise KeyError(f"backup has weights the model lacks, e.g. '{sorted(extra)[0]}'")
