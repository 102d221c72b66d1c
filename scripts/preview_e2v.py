#!/usr/bin/env python
"""Write the exact E2V conditioning the trainer feeds the transformer for one sample.

    python scripts/preview_e2v.py --config-path CFG.json --sample 001 --output DIR

DIR/<ID>.safetensors holds `mask` (4, T, h, w), `condition_latents` (posterior mode, normalised),
`clip_embeds` (257·N, D) and `target_latents` (x0 with posterior modes); DIR/<ID>.png shows the
reference mini-video frames above the mask per latent frame."""
from __future__ import annotations

import argparse
from pathlib import Path

from _bootstrap import run_main  # first: import path, offline mode


def mask_strip(mask, frame_size: int):
    """One tile per latent frame: its 4 mask channels side by side (white = conditioned)."""
    import numpy as np

    _, t, _, _ = mask.shape
    tiles = []
    for k in range(t):
        channels = [np.full((frame_size, frame_size // 4), 255 * float(mask[c, k, 0, 0]), np.uint8) for c in range(4)]
        tile = np.concatenate(channels, axis=1)
        tile[:, :1] = 128  # frame boundary
        tiles.append(tile)
    return np.repeat(np.concatenate(tiles, axis=1)[..., None], 3, axis=2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-path", required=True, help="the training config JSON (as scripts/train.py reads it)")
    parser.add_argument("--preset-path", help="a preset file or the name of a shipped preset, layered under the config")
    parser.add_argument("--config-value", action="append", default=[], metavar="KEY=VALUE",
                        help="override one key (JSON value), e.g. frames=17; repeatable")
    parser.add_argument("--sample", required=True, help="sample id (base name, e.g. 001)")
    parser.add_argument("--output", required=True, help="output folder")
    args = parser.parse_args()

    import numpy as np
    from PIL import Image
    from safetensors.torch import save_file

    from modules.config.e2v_dataset_config import load_dataset_config
    from modules.config.loading import load_train_config
    from modules.dataLoader.WanE2VDataLoader import WanE2VDataLoader
    from modules.modelLoader.WanModelLoader import WanModelLoader, resolve_device
    from modules.modelSetup.e2v_expansion import prepare_e2v_model
    from modules.util.errors import UserError

    config = load_train_config(args.config_path, args.preset_path, args.config_value)
    if not config.dataset_config:
        raise UserError("config key 'dataset_config' is empty: preview_e2v needs an E2V dataset JSON")
    load_dataset_config(config.dataset_config)  # validate before loading any model
    model = WanModelLoader().load_for_config(config, resolve_device(config.train_device))
    prepare_e2v_model(model, config)  # a T2V base gets the I2V input layout, as the trainer gives it
    data = WanE2VDataLoader(config, model)
    data.prepare()
    tensors, references = data.preview(args.sample)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / f"{args.sample}.safetensors"))
    frames = ((references.permute(1, 2, 3, 0).numpy() + 1) * 127.5).round().clip(0, 255).astype(np.uint8)
    height = frames.shape[1] if len(frames) else 64
    rows = [np.concatenate(list(frames), axis=1)] if len(frames) else []
    if "mask" in tensors:
        rows.append(mask_strip(tensors["mask"], height))
    print(f"wrote {out / f'{args.sample}.safetensors'} ({', '.join(f'{k} {tuple(v.shape)}' for k, v in tensors.items())})")
    if not rows:  # e2v_type 'clip': no VAE pathway, so no reference frames and no mask to draw
        print(f"no {args.sample}.png: the '{data.e2v_type}' pathway has no reference frames or mask")
        return 0
    width = max(r.shape[1] for r in rows)
    padded = [np.pad(r, ((0, 4), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    Image.fromarray(np.concatenate(padded, axis=0)).save(out / f"{args.sample}.png")
    print(f"wrote {out / f'{args.sample}.png'} ({references.shape[1]} reference frames, mask per latent frame)")
    return 0


if __name__ == "__main__":
    run_main(main)
