"""Run under torchrun by tests/test_sequence_parallel.py: for each tiny model given, one training step of the real
setup (`prepare_device`: hooks, Ulysses processors, DDP or FSDP2 over every rank) with `sequence_parallel` = N, and
the same step in this process alone on the whole global batch. Rank 0 writes, per family and wrapper, the loss
difference and the largest gradient difference over every parameter (and the largest gradient, for scale) as JSON.

The step is the trainer's: each data rank takes its share of the global batch, every rank weights its loss by
share x world / global batch (so the average DDP and FSDP take over all ranks is the global batch's gradient), and
the σ, noise and conditioning of each sample are the same tensors in both runs. The clips have 3 x 6 x 6 latent cells
(27 tokens after patching), which no N > 1 divides evenly: the uneven cut is what runs.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from modules.config.train_config import TrainConfig  # noqa: E402
from modules.model.conditioning import ConditionPayload  # noqa: E402
from modules.model.step_inputs import StepInputs  # noqa: E402
from modules.modelLoader.WanModelLoader import WanModelLoader  # noqa: E402
from modules.modelSetup.WanFineTuneSetup import WanFineTuneSetup  # noqa: E402
from modules.util.distributed import exit_rank, init_distributed  # noqa: E402

LATENT = (3, 6, 6)  # frames, height, width of the latents: 27 tokens
REFERENCES = 2  # E2V on the I2V base: two reference images' CLIP tokens and condition frames


def inputs_for(model, batch: int, seed: int) -> tuple[StepInputs, torch.Tensor, torch.Tensor, list[int]]:
    """The global batch of one family: inputs, σ, noise, and the experts to step (both of a two-expert model)."""
    g = torch.Generator().manual_seed(seed)
    family = model.conditioning
    channels = family.latent_channels
    x0 = torch.randn(batch, channels, *LATENT, generator=g)
    text = torch.randn(batch, 512, model.transformer.config.text_dim, generator=g)
    payload = ConditionPayload()
    if family.channel_concat:  # I2V + E2V: mask and condition latents, reference frames out of the loss
        mask = torch.zeros(batch, 4, *LATENT)
        mask[:, :, :1] = 1
        payload.condition = torch.cat([mask, torch.randn(batch, channels, *LATENT, generator=g)], dim=1)
        payload.loss_frame_weights = torch.tensor([0.0, 1.0, 1.0])
    if family.image_context:
        tokens = 257 * (2 if family.paired_image_tokens else REFERENCES)
        payload.clip_embeds = torch.randn(batch, tokens, model.transformer.config.image_dim, generator=g)
    if family.per_token_timesteps:
        payload.clean_frames = 1
    if family.vace_layers:
        payload.control = torch.randn(batch, 96, *LATENT, generator=g)
        payload.control_scale, payload.dropped_frames = 0.7, 1
    sigmas = torch.rand(batch, generator=g) * 0.5 + 0.4
    noise = torch.randn(x0.shape, generator=g)
    experts = [0, 1] if model.transformer_2 is not None else [0]
    return StepInputs(x0=x0, prompt_embeds=text, payload=payload), sigmas, noise, experts


def rows(inputs: StepInputs, start: int, stop: int) -> StepInputs:
    def cut(value):
        return value[start:stop] if isinstance(value, torch.Tensor) and value.shape[0] > 1 else value

    payload = ConditionPayload(**{k: cut(v) if k != "loss_frame_weights" else v
                                  for k, v in vars(inputs.payload).items()})
    return StepInputs(x0=cut(inputs.x0), prompt_embeds=cut(inputs.prompt_embeds), payload=payload)


def gradients(setup: WanFineTuneSetup) -> dict[str, torch.Tensor]:
    grads = {}
    for expert, transformer in setup.trained_transformers():
        for name, param in transformer.named_parameters():
            grad = param.grad
            if grad is not None and hasattr(grad, "full_tensor"):  # FSDP2: this rank's shard of a DTensor
                grad = grad.full_tensor()
            grads[f"{expert}.{name}"] = torch.zeros(param.shape) if grad is None else grad.detach().clone()
    return grads


def step(loaded, config: TrainConfig, context, batch: int, seed: int) -> tuple[list[float], dict, list[int]]:
    model = copy.deepcopy(loaded)  # prepare_device wraps and shards the transformers in place
    setup = WanFineTuneSetup(model, config)
    setup.setup_trainable()
    setup.prepare_device(context)
    inputs, sigmas, noise, experts = inputs_for(model, batch, seed)
    share, offset = context.share(list(range(batch)))
    mine = rows(inputs, offset, offset + len(share))
    losses = []
    for expert in experts:
        output = setup.predict_at(mine, sigmas[offset:offset + len(share)], noise[offset:offset + len(share)], expert)
        (output.loss * len(share) * context.world_size / batch).backward()
        losses.append(float(output.loss.detach()))
    lengths = list(setup.sequence.lengths) if setup.sequence is not None else []
    return losses, gradients(setup), lengths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sequence-parallel", type=int, required=True)
    parser.add_argument("--model", action="append", required=True, help="family=folder")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    context, _ = init_distributed("cpu", args.sequence_parallel)
    alone = type(context)()  # the same step in one process
    batch = context.data_world_size
    results = {}
    for seed, entry in enumerate(args.model):
        family, folder = entry.split("=", 1)
        loaded = WanModelLoader().load(folder, torch.device("cpu"))
        reference_losses, reference = None, None
        for wrapper in ("DDP", "FSDP"):
            config = TrainConfig.from_dict({"training_method": "FINE_TUNE", "output_model_format": "DIFFUSERS",
                                            "data_parallel": wrapper, "sequence_parallel": args.sequence_parallel,
                                            "base_model_name": folder}, "check")
            if reference is None:
                reference_losses, reference, _ = step(loaded, config, alone, batch, seed)
            own_losses, own, lengths = step(loaded, config, context, batch, seed)
            # each data rank's loss is that of its share: compare the mean over the data ranks
            mean_losses = [value / context.world_size for value in context.all_sum(own_losses)]
            results[f"{family} {wrapper}"] = {
                "loss": max(abs(a - b) for a, b in zip(mean_losses, reference_losses)),
                "gradient": max(float((own[k] - reference[k]).abs().max()) for k in reference),
                "largest": max(float(v.abs().max()) for v in reference.values()),
                "parameters": len(reference), "tokens_per_rank": lengths,
                "zero_gradients": sum(1 for v in reference.values() if not v.abs().max() > 0)}
            context.barrier()
    if context.is_main:
        Path(args.output).write_text(json.dumps(results, indent=1))
    dist.barrier()
    exit_rank(0)  # gloo's threads outlive the process group (util/distributed.py)


if __name__ == "__main__":
    main()
