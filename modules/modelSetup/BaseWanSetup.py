"""The training step of every Wan variant: σ, noise, model input, expert routing, loss.

Subclasses decide which parameters train (`WanLoRASetup`, `WanFineTuneSetup`); the step itself is
shared, so T2V, I2V, TI2V and the two-expert models differ only in what the variant descriptor says.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging

import torch
from diffusers import WanTransformer3DModel

from modules.config.train_config import TrainConfig
from modules.model.attention.backend_setup import apply_attention_backend
from modules.model.attention.ulysses import SequenceShards
from modules.model.conditioning import TRAIN_TIMESTEPS
from modules.model.sequence_parallel import shard_tokens
from modules.model.step_inputs import StepInputs, StepRandom
from modules.model.WanModel import WanModel
from modules.modelSetup import sharding
from modules.modelSetup.checkpoint_policy import BlockCheckpoint, apply_checkpoint_policy
from modules.modelSetup.chunking import split_blocks
from modules.modelSetup.compile import CompileLog, compile_blocks, compile_wanted
from modules.modelSetup.embedding_training import STATE_KEY as EMBEDDING_STATE_KEY
from modules.modelSetup.embedding_training import EmbeddingTraining
from modules.modelSetup.flow_matching import SigmaSampler, add_noise, flow_target, resolution_shift
from modules.modelSetup.guidance_preserving import distilled_sigmas, draw, guided_target, scales_at
from modules.modelSetup.lean_block import BlockSaves, lean_blocks
from modules.modelSetup.losses import elementwise_loss, huber_c_for, masked_weights, sigma_weights
from modules.modelSetup.memory import BlockSwapper, ExpertOffloader, activation_offload
from modules.util.distributed import DistributedContext
from modules.util.enum import CheckpointPolicy, CompileMode, DataParallel, WanExpert
from modules.util.errors import UserError

EXPERT_NAMES = ("transformer", "transformer_2")

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class StepOutput:
    loss: torch.Tensor
    predicted: torch.Tensor  # model prediction (flow), (B, C, T, h, w)
    target: torch.Tensor
    noisy_latents: torch.Tensor
    input_latents: torch.Tensor  # x0
    sigmas: torch.Tensor
    expert: int  # 0 = transformer, 1 = transformer_2


class BaseWanSetup:
    def __init__(self, model: WanModel, config: TrainConfig, full_train: dict[int, list[str]] | None = None):
        self.model = model
        self.config = config
        # set by prepare_device: FSDP sharding, DDP wrappers per expert, block swappers
        self._sharded = False
        self.ddp: dict[int, torch.nn.Module] = {}
        self.swappers: list[BlockSwapper] = []
        self.offloader: ExpertOffloader | None = None  # offload_inactive_expert
        self.compile_log: CompileLog | None = None  # compile: graphs per new shape
        self.checkpoints: list[BlockCheckpoint] = []  # checkpointing: each trained transformer's checkpoint function
        self.sequence: SequenceShards | None = None  # sequence_parallel: this rank's token shard of each clip
        # expert -> parameters that train fully whatever the method (E2V-expanded inputs, new modules)
        self.full_train = full_train or {}
        # a textual-inversion embedding (EMBEDDING, or LORA with embedding.placeholder)
        self.embedding_training = EmbeddingTraining(model, config) if config.trains_embedding() else None
        self.sigma_sampler = SigmaSampler(
            distribution=config.timestep_distribution, logit_mean=config.logit_mean, logit_std=config.logit_std,
            sigmoid_scale=config.sigmoid_scale, mode_scale=config.mode_scale, shift=config.timestep_shift,
            min_sigma=config.min_sigma, max_sigma=config.max_sigma,
        )
        self.distilled = self._distilled_sigmas_per_expert()

    def _distilled_sigmas_per_expert(self) -> dict[int, list[float]]:
        """guidance_preserving.distilled_timesteps: the σ each trained expert draws from ({} when unset)."""
        sigmas = distilled_sigmas(self.config.guidance_preserving)
        if not sigmas:
            return {}
        conditioning, count = self.model.conditioning, len(self.model.transformers())
        per_expert = {expert: [s for s in sigmas if conditioning.expert_for_sigma(s, count) == expert]
                      for expert, _ in self.trained_transformers()}
        for expert, own in per_expert.items():
            if not own:
                low, high = conditioning.sigma_range(expert, count)
                raise UserError(f"config key 'guidance_preserving.distilled_timesteps' has no timestep in the range of "
                                f"{EXPERT_NAMES[expert]} ({1000 * low:g} to {1000 * high:g}), which trains: add one, "
                                "or set train_expert to the other expert")
        return per_expert

    # --- which transformers train ----------------------------------------------------------------
    def trained_transformers(self) -> list[tuple[int, WanTransformer3DModel]]:
        """(expert index, transformer) pairs that receive gradients."""
        model = self.model
        if model.transformer_2 is None:
            return [(0, model.transformer)]
        expert = self.config.train_expert
        pairs = [(0, model.transformer), (1, model.transformer_2)]
        if expert == WanExpert.HIGH:
            return pairs[:1]
        if expert == WanExpert.LOW:
            return pairs[1:]
        return pairs

    def setup_trainable(self) -> list[torch.nn.Parameter]:
        """Make what this method trains trainable and return it: the transformers' part, then the embedding's."""
        params = self.setup_transformers()
        if self.embedding_training is not None:
            params += self.embedding_training.setup()
        return params

    def setup_transformers(self) -> list[torch.nn.Parameter]:
        raise NotImplementedError

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Everything that training changed, by stable names (for backups)."""
        state = self.transformer_state()
        if self.embedding_training is not None and self.embedding_training.embedding is not None:
            state.update(self.embedding_training.state())
        return state

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        state = dict(state)
        if self.embedding_training is not None:
            self.embedding_training.load_state(state)  # takes its key out
        self.load_transformer_state(state)

    def transformer_state(self) -> dict[str, torch.Tensor]:
        """What training changed in the transformers, by `{expert name}.{parameter}`."""
        raise NotImplementedError

    def load_transformer_state(self, state: dict[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def named_trained_parameters(self) -> dict[str, torch.nn.Parameter]:
        """Every trained parameter by a stable name (`{expert}.{name}`, `embedding`): what EMA averages."""
        params = {f"{expert}.{name}": p for expert, transformer in self.trained_transformers()
                  for name, p in transformer.named_parameters() if p.requires_grad and self._trains(expert, name)}
        if self.embedding_training is not None and self.embedding_training.embedding is not None:
            params["embedding"] = self.embedding_training.parameter
        return params

    def prompt_embeds(self, inputs: StepInputs) -> torch.Tensor:
        """The step's text conditioning: the batch's (cached) embeddings, with a trained embedding's captions
        encoded anew."""
        if self.embedding_training is None:
            return inputs.prompt_embeds
        return self.embedding_training.prompt_embeds(inputs)

    def _trains(self, expert: int, name: str) -> bool:
        """Whether parameter `name` of `expert` is in trainable_state() (a full fine-tune trains them all)."""
        return True

    def trainable_shapes(self) -> dict[str, torch.Size]:
        """The names and (whole, also when sharded) shapes of trainable_state(), without copying or gathering."""
        shapes = {f"{EXPERT_NAMES[expert]}.{name}": param.shape for expert, transformer in self.trained_transformers()
                  for name, param in transformer.named_parameters() if self._trains(expert, name)}
        if self.embedding_training is not None and self.embedding_training.embedding is not None:
            shapes[EMBEDDING_STATE_KEY] = self.embedding_training.parameter.shape
        return shapes

    def trained_root(self) -> torch.nn.ModuleDict:
        """The trained transformers under their model names (the keys of backups and sharded states)."""
        return torch.nn.ModuleDict({EXPERT_NAMES[expert]: t for expert, t in self.trained_transformers()})

    @property
    def sharded(self) -> bool:
        """Whether FSDP shards the trained weights (then state gathering and sampling are collective)."""
        return self._sharded

    def prepare_device(self, dist: DistributedContext | None = None) -> None:
        """Put the transformers on the train device (or shard them across ranks) and wrap them for
        data-parallel training; encoders stay where the data loader wants them."""
        dist = dist or DistributedContext()
        self._sharded = dist.enabled and self.config.data_parallel == DataParallel.FSDP
        self.swappers, self.ddp, self.offloader, self.compile_log = [], {}, None, None
        self.checkpoints, self.sequence = [], None
        device = self.model.train_device
        apply_attention_backend(self.model.transformers(), self.config.attention_backend, device.type, training=True)
        trained = self.trained_transformers()
        offload = self.config.offload_inactive_expert and len(trained) == 2 and not self._sharded
        if self.config.offload_inactive_expert and not offload:
            logger.warning("offload_inactive_expert: this run trains one transformer, so there is no idle expert to offload")
        for expert, transformer in trained:
            function = apply_checkpoint_policy(transformer, self.config)
            if function is not None:
                self.checkpoints.append(function)
            split_blocks(transformer, self.config.ffn_chunks,
                         self.config.checkpointing.resolved() == CheckpointPolicy.SPLIT_ATTENTION)
            # diffusers' blocks keeping half-precision inputs only; under every policy but NONE the FFN's backward runs
            # in slices (a checkpointed block's recompute skips it, a kept block keeps only its input)
            lean_blocks(transformer, BlockSaves(ffn_in_backward=self.config.checkpointing.recomputes(),
                                                ffn_slices=max(1, self.config.ffn_chunks)))
            if self._sharded:  # from the CPU, block by block
                sharding.shard_transformer(transformer, device, dist.world_size)
            elif self.config.blocks_to_swap:
                swapper = BlockSwapper(transformer, self.config.blocks_to_swap, device)
                if not offload:  # else the offloader places the rest: never both experts on the device at once
                    swapper.place(transformer)
                self.swappers.append(swapper)
            elif not offload:
                transformer.to(device)
            transformer.train()
        if offload:
            swapped = set().union(*(swapper.swapped_parameters() for swapper in self.swappers))
            self.offloader = ExpertOffloader([t for _, t in trained], device, swapped)
        wanted, why = compile_wanted(self.config, device)
        if wanted or self.config.compile != CompileMode.OFF:
            logger.info("%s", why)
        if wanted:
            for _, transformer in trained:
                compile_blocks(transformer)
            self.compile_log = CompileLog()
        group = dist.sequence_group(device.type)
        if group is not None:  # the ranks of one sequence group share each clip's tokens
            self.sequence = SequenceShards(group, dist.sequence_parallel, dist.rank % dist.sequence_parallel)
            for _, transformer in trained:
                shard_tokens(transformer, self.sequence)
        for expert, transformer in trained:
            trains = any(p.requires_grad for p in transformer.parameters())  # not under EMBEDDING: DDP needs some
            if dist.enabled and not self._sharded and trains:  # the bare transformer stays in the model for sampling
                from torch.nn.parallel import DistributedDataParallel

                if self.swappers or self.offloader is not None:
                    # frozen weights partly on the CPU by design: DDP neither syncs nor checks them (every rank
                    # loaded the same ones)
                    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
                        transformer, [n for n, p in transformer.named_parameters() if not p.requires_grad])
                # the gradients live in DDP's all-reduce buckets, not beside them (a 14B LoRA's: 0.6 GiB less a rank)
                self.ddp[expert] = DistributedDataParallel(
                    transformer, device_ids=[device.index] if device.type == "cuda" else None,
                    gradient_as_bucket_view=True)

    def whole_sequences(self):
        """A block in which every rank runs whole clips alone (samples, which rank 0 makes by itself)."""
        if self.sequence is None:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        self.sequence.active = False
        stack.callback(setattr, self.sequence, "active", True)
        return stack

    def parameter_groups(self, params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter] | list[dict]:
        """`params` as optimizer groups by peak learning rate: the expert's (`learning_rate_high_noise` /
        `learning_rate_low_noise`), times `lora_plus_ratio` for adapter up matrices. With one rate for all, the
        plain list, as before (so older backups' single group still loads)."""
        names = {id(p): (expert, name) for expert, transformer in self.trained_transformers()
                 for name, p in transformer.named_parameters()}
        rates = [self.peak_rate(*names[id(p)]) if id(p) in names else self.embedding_rate() for p in params]
        if set(rates) == {self.config.learning_rate}:
            return params
        groups: dict[float, list[torch.nn.Parameter]] = {}
        for param, rate in zip(params, rates):
            groups.setdefault(rate, []).append(param)
        return [{"params": members, "lr": rate} for rate, members in groups.items()]

    def peak_rate(self, expert: int, name: str) -> float:
        """The peak learning rate of parameter `name` of `expert`."""
        config = self.config
        rate = config.learning_rate
        if self.model.transformer_2 is not None:
            rate = (config.learning_rate_high_noise if expert == 0 else config.learning_rate_low_noise) or rate
        return rate * self._rate_factor(name)

    def embedding_rate(self) -> float:
        """The embedding vectors' peak learning rate (`embedding.learning_rate`, else `learning_rate`)."""
        return self.config.embedding.learning_rate or self.config.learning_rate

    def _rate_factor(self, name: str) -> float:
        """A parameter's multiplier of its expert's rate (LoRA+ in the adapter setup)."""
        return 1.0

    def trained_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer steps, in a stable order (sharding replaces the objects)."""
        params = [p for _, t in self.trained_transformers() for p in t.parameters() if p.requires_grad]
        if self.embedding_training is not None and self.embedding_training.embedding is not None:
            params.append(self.embedding_training.parameter)
        return params

    def average_other_gradients(self, dist: DistributedContext) -> None:
        """Average over the ranks the gradients that no DDP wrapper holds (a trained embedding's), as DDP does;
        every rank takes part, with zeros where its batch had no caption holding the placeholder."""
        if not dist.enabled or self.embedding_training is None or self.embedding_training.embedding is None:
            return
        param = self.embedding_training.parameter
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        dist.average_(param.grad)

    def gradient_sync(self, sync: bool):
        """No gradient all-reduce / reduce-scatter on accumulation micro steps before the last one."""
        if sync:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        if self.sharded:
            modules = [t for _, t in self.trained_transformers()]
            sharding.set_gradient_sync(modules, False)
            stack.callback(sharding.set_gradient_sync, modules, True)
        for module in self.ddp.values():
            stack.enter_context(module.no_sync())
        return stack

    def forward_module(self, expert: int) -> torch.nn.Module:
        if expert in self.ddp:
            return self.ddp[expert]
        return self.model.transformer if expert == 0 else self.model.transformer_2

    # --- whole states (collective when sharded) ---------------------------------------------------
    def gathered_transformer_weights(self) -> dict[int, dict[str, torch.Tensor]] | None:
        """Sharded: full weights per trained expert on rank 0 ({} elsewhere). Not sharded: None (the
        modules hold whole tensors already)."""
        if not self.sharded:
            return None
        return {expert: sharding.gather_parameters(t) for expert, t in self.trained_transformers()}

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """A whole-tensor backup's optimizer state (torch's own form). Sharded: rank 0 passes it, the
        other ranks {}."""
        if self.sharded:
            sharding.scatter_optimizer_state(self.trained_root(), optimizer, state)
        else:
            optimizer.load_state_dict(state)

    def save_shards(self, optimizer: torch.optim.Optimizer, folder) -> None:
        """Collective: each rank writes its part of the weights and optimizer state."""
        sharding.save_shards(self.trained_root(), optimizer, folder)

    def load_shards(self, optimizer: torch.optim.Optimizer, folder) -> None:
        """Read a sharded backup, whatever the number of ranks that wrote it (collective when distributed)."""
        sharding.load_shards(self.trained_root(), optimizer, folder)

    # --- the step --------------------------------------------------------------------------------
    def sample_sigmas(self, random: StepRandom, latent_shape: tuple[int, ...] | None = None) -> tuple[torch.Tensor, int]:
        """One σ per sample and the expert they all belong to (a batch never straddles the boundary).

        The expert is drawn from the step's stream (shared by every data-parallel rank), each σ from
        its sample's stream, truncated to that expert's range. With `dynamic_timestep_shifting` the shift
        follows the batch's resolution (`latent_shape`, (B, C, T, h, w)).
        """
        sampler = self.sigma_sampler
        if self.config.dynamic_timestep_shifting and latent_shape is not None:
            _, ph, pw = self.model.variant.patch_size
            sampler = dataclasses.replace(sampler, shift=resolution_shift((latent_shape[3] // ph) * (latent_shape[4] // pw)))
        conditioning, count = self.model.conditioning, len(self.model.transformers())
        experts = [index for index, _ in self.trained_transformers()]
        if len(experts) == 1:
            expert = experts[0]
        elif self.config.expert_step_share:  # the user's share of steps, not the σ distribution's
            expert = 0 if float(torch.rand(1, generator=random.step)) < self.config.expert_step_share else 1
        else:
            first = draw(sum(self.distilled.values(), []), random.step) if self.distilled else sampler.sample(1, random.step)
            expert = conditioning.expert_for_sigma(float(first), count)
        if self.distilled:  # a distilled sampler's steps only, uniformly
            return torch.tensor([draw(self.distilled[expert], g) for g in random.samples], dtype=torch.float32), expert
        low, high = conditioning.sigma_range(expert, count)
        sigmas = torch.cat([sampler.sample(1, g, low, high) for g in random.samples])
        return sigmas, expert

    def validation_points(self, count: int) -> list[tuple[float, int]]:
        """(σ, expert) pairs of the validation loss: `count` midpoints evenly spaced over the σ range that is
        trained ([min_sigma, max_sigma] within the trained experts' ranges), each on the expert it routes to."""
        conditioning, experts = self.model.conditioning, len(self.model.transformers())
        ranges = [conditioning.sigma_range(expert, experts) for expert, _ in self.trained_transformers()]
        low = max(min(r[0] for r in ranges), self.config.min_sigma)
        high = min(max(r[1] for r in ranges), self.config.max_sigma)
        sigmas = [low + (i + 0.5) * (high - low) / count for i in range(count)]
        return [(sigma, conditioning.expert_for_sigma(sigma, experts)) for sigma in sigmas]

    def _autocast(self):
        device = self.model.train_device
        if self.model.train_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.model.train_dtype)

    def predict(self, inputs: StepInputs, random: StepRandom) -> StepOutput:
        """The training step's forward: σ and noise drawn from the step's streams."""
        sigmas, expert = self.sample_sigmas(random, tuple(inputs.x0.shape))
        if self.compile_log is not None:
            self.compile_log.step(tuple(inputs.x0.shape))
        noise = random.randn(tuple(inputs.x0.shape[1:]))
        return self.predict_at(inputs, sigmas, noise, expert)

    def predict_at(self, inputs: StepInputs, sigmas: torch.Tensor, noise: torch.Tensor, expert: int) -> StepOutput:
        """Forward and loss at given σ (B,) and noise (like x0), on `expert` (validation fixes all three)."""
        device, dtype = self.model.train_device, self.model.train_dtype
        conditioning, payload = self.model.conditioning, inputs.payload
        x0 = inputs.x0
        sigmas, noise = sigmas.to(device), noise.to(device)
        x_t = conditioning.keep_clean(add_noise(x0, noise, sigmas), x0, payload.clean_frames)
        guidance = self.config.guidance_preserving
        # before the conditional forward, so its backward follows it as without (block swap, checkpointing)
        unconditional = self.unconditional_prediction(inputs, x_t, sigmas, expert) if guidance.enabled else None
        transformer = self.forward_module(expert)
        prompt_embeds = self.prompt_embeds(inputs)  # outside autocast: UMT5 runs in its own dtype, as at inference
        with self._autocast(), activation_offload(self.config.activation_offload, device):
            predicted = conditioning.predict(transformer, x_t, sigmas * TRAIN_TIMESTEPS, prompt_embeds, payload, dtype)
        self._check_kept_attention()
        target = flow_target(x0, noise)
        if unconditional is not None:
            target = guided_target(target, unconditional, scales_at(guidance, sigmas))
        loss = self.loss(predicted, target, sigmas, conditioning.loss_weights(x0.shape[2], payload, predicted.device),
                         payload.sample_weights, payload.loss_mask)
        return StepOutput(loss=loss, predicted=predicted, target=target, noisy_latents=x_t, input_latents=x0,
                          sigmas=sigmas, expert=expert)

    def _check_kept_attention(self) -> None:
        """After the first step with policy KEEP_ATTENTION: say so once if no kernel was kept (another backend's)."""
        kept = [c for c in self.checkpoints if c.attention is not None and not c.checked]
        if kept and torch.is_grad_enabled():
            for function in kept:
                function.checked = True
        if kept and torch.is_grad_enabled() and not any(c.matched for c in kept):
            logger.warning("checkpointing KEEP_ATTENTION: the attention backend (%s) does not run torch's SDPA "
                           "kernels, so self-attention is recomputed as under FULL", self.config.attention_backend.name)

    def unconditional_prediction(self, inputs: StepInputs, x_t: torch.Tensor, sigmas: torch.Tensor,
                                 expert: int) -> torch.Tensor:
        """The guidance-preserving target's u: the current model on the same noisy latent with the unconditional
        prompt and the same image / reference condition (as CFG at inference keeps it), on the expert that owns σ.
        Without gradient, so checkpointing neither saves nor recomputes it; on the bare module (DDP syncs only the
        conditional pass's gradients)."""
        if inputs.unconditional_embeds is None:
            raise RuntimeError("guidance_preserving is on but the batch has no unconditional_embeds")
        conditioning, payload = self.model.conditioning, inputs.payload
        transformer = self.model.transformer if expert == 0 else self.model.transformer_2
        with torch.no_grad(), self._autocast():  # Animate-2: its two passes, the driving stream keeps its caption
            return conditioning.predict(transformer, x_t, sigmas * TRAIN_TIMESTEPS, inputs.unconditional_embeds,
                                        payload, self.model.train_dtype)

    def loss(self, predicted: torch.Tensor, target: torch.Tensor, sigmas: torch.Tensor, frame_weights: torch.Tensor,
             sample_weights: torch.Tensor | None = None, loss_mask: torch.Tensor | None = None) -> torch.Tensor:
        """`loss_type`'s error over the output channels, latent cells weighted by the mask (masked training),
        latent frames weighted (clean TI2V frames and, optionally, E2V reference frames at 0), samples weighted
        by `loss_weight_fn` of their σ and their concept's weight."""
        config = self.config
        error = elementwise_loss(predicted, target, config.loss_type,
                                 huber_c_for(sigmas, config.huber_c, config.huber_schedule))
        cell_weights = None
        if loss_mask is not None:  # none by default: the plain mean stays bit-exact
            cell_weights = masked_weights(loss_mask.to(error.device), config.unmasked_weight)  # (B, 1, T, h, w)
            error = error * cell_weights
        per_frame = error.mean(dim=(1, 3, 4))  # (B, T)
        per_sample = (per_frame * frame_weights).sum(dim=1).div(frame_weights.sum().clamp(min=1))
        if cell_weights is not None and config.normalize_masked_area_loss:  # a small mask trains as hard
            area = (cell_weights.mean(dim=(1, 3, 4)) * frame_weights).sum(dim=1).div(frame_weights.sum().clamp(min=1))
            per_sample = per_sample / area.clamp(min=1e-6)
        for weights in (sigma_weights(sigmas, config.loss_weight_fn), sample_weights):
            if weights is not None:  # none by default: the plain mean stays bit-exact
                per_sample = per_sample * weights.to(per_sample.device, per_sample.dtype)
        return per_sample.mean()
