"""The E2V sampling options a command line asks for (sample.py, evaluate.py): pathways, target layout and,
from a dataset JSON, the element layout."""
from __future__ import annotations

from collections.abc import Mapping

from modules.config.sampling_choices import REFERENCE_LAYOUTS
from modules.dataLoader.e2v.sampling_options import E2VSamplingOptions, dataset_layout
from modules.model.reference_slots import REFERENCE_LAYOUT_KEY
from modules.model.WanModel import WanModel
from modules.util.errors import UserError


def reference_layout_of(requested: str, lora_metadata: Mapping[int, Mapping[str, str]] | None) -> str:
    """`--reference-layout`: `auto` is the layout the LoRA's header names (`REFERENCE_LAYOUT_KEY`), else A2's."""
    if requested != "auto":
        return requested
    named = {meta.get(REFERENCE_LAYOUT_KEY, "") for meta in (lora_metadata or {}).values()} - {""}
    return named.pop() if len(named) == 1 and named <= set(REFERENCE_LAYOUTS) else "a2"


def e2v_sampling_options(model: WanModel, e2v_type: str = "auto", target_layout: str = "separate",
                         dataset_config: str = "", reference_layout: str = "a2") -> E2VSamplingOptions:
    if reference_layout == "skyreels_v3":  # VAE references only (docs/e2v.md §9)
        if e2v_type in ("dual", "clip"):
            raise UserError(f"--e2v-type {e2v_type} has no meaning with --reference-layout skyreels_v3 (no CLIP "
                            "pathway): leave it at auto or vae")
        e2v_type = "vae"
    has_clip = model.variant.has_clip_branch and model.image_encoder is not None
    e2v_type = ("dual" if has_clip else "vae") if e2v_type == "auto" else e2v_type
    if e2v_type in ("dual", "clip") and not has_clip:
        raise UserError(f"--e2v-type {e2v_type} needs a model with a CLIP branch and image encoder")
    options = E2VSamplingOptions(use_vae=e2v_type != "clip", use_clip=e2v_type != "vae", target_layout=target_layout,
                                 reference_layout=reference_layout)
    if dataset_config:
        from modules.config.e2v_dataset_config import load_dataset_config

        d = load_dataset_config(dataset_config).datasets[0]
        options.layout = dataset_layout(d)
        options.clip_resolution = tuple(d.processors.clip.resolution)
    return options
