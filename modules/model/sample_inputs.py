"""What a sample must give and must not give for the model it samples (an image for I2V, a reference image and a
driving video for Animate-2, ...), from the variant alone: the sampler checks it as it generates, and start-up
(`trainer/preflight`), `sample.py` and `evaluate.py` check it before any weights load."""
from __future__ import annotations

from collections.abc import Callable

from modules.config.sample_config import SampleConfig
from modules.model.WanVariant import WanVariant
from modules.util.errors import UserError

Label = Callable[[str], str]  # a sample field -> how to name it ("config key 'samples[0].image'", "--image")


def option_label(field: str) -> str:
    """The command-line option of a sample field (sample.py / evaluate.py)."""
    return "--" + field.replace("_", "-")


def check_sample_inputs(variant: WanVariant, sample: SampleConfig, label: Label = option_label,
                        key: str = "") -> None:
    """One-line `UserError` (about `key`.field, for the GUI) when `sample` lacks an input the variant generates from
    or gives one it does not follow. E2V samples (elements) are checked against the run's layout by the sampler."""
    def refuse(field: str, message: str) -> UserError:
        return UserError.about(f"{key}.{field}" if key else field, f"{label(field)}: {message}")

    name = variant.name
    if variant.vace_layers:
        if sample.driving_video:
            raise refuse("driving_video", f"only Animate-2 models follow a driving video (this is {name}): remove it")
        return
    if name == "animate_2":
        for field in ("image", "driving_video"):
            if not getattr(sample, field):
                raise refuse(field, "an Animate-2 model animates a reference image with a driving video: give the "
                                    "sample both an image and a driving_video")
        return
    if sample.driving_video:
        raise refuse("driving_video", f"only Animate-2 models follow a driving video (this is {name}): remove it")
    if sample.elements:
        return
    if variant.fps_embedding:  # SkyReels-V2: our own loop, from the prompt alone
        if variant.channel_concat_condition:
            raise refuse("image", f"sampling the {name} model (an image-to-video model with an fps embedding) is "
                                  "not supported yet: sample it without the fps embedding's checkpoint")
        return
    if sample.control_video:
        raise refuse("control_video", f"only VACE models follow a control video (this is {name}): remove it")
    needs_image = variant.channel_concat_condition
    if needs_image and not sample.image:
        raise refuse("image", f"the {name} model generates from an image: give the sample an image")
    if variant.paired_image_tokens and not sample.last_image:
        raise refuse("last_image", f"the {name} model generates between a first and a last frame: give the sample "
                                   "an image and a last_image")
    if sample.last_image and not needs_image:
        raise refuse("last_image", f"only I2V-layout models take a last image (this is {name}): remove it")


# A sample's inputs that only some models follow (everything else — prompt, size, steps, seed, sampler — every model).
CONDITIONING_FIELDS = ("image", "last_image", "elements", "control_video", "control_mask", "driving_video",
                       "vace_scale", "image_guidance_scale", "e2v_posterior")


def sample_fields_used(variant: WanVariant, e2v: bool, reference_layout: str = "a2") -> frozenset[str]:
    """The conditioning fields of a sample that `variant` follows (the rules `check_sample_inputs` and the sampler
    keep): the GUI's sample rows show these. `e2v`: the run trains on an E2V dataset, so its samples take elements."""
    if variant.vace_layers:  # a control video (and mask) and reference images
        return frozenset({"control_video", "control_mask", "vace_scale", "elements"})
    if variant.name == "animate_2":  # a reference image animated by a driving video
        return frozenset({"image", "driving_video"})
    used = set()
    if e2v:
        used |= {"elements", "e2v_posterior"}
        if reference_layout == "skyreels_v3":  # image guidance against all-zero references
            used.add("image_guidance_scale")
    if variant.fps_embedding:  # SkyReels-V2: its own loop, from the prompt alone
        return frozenset(used)
    if variant.channel_concat_condition:  # I2V layouts: a first frame, and a last one (FLF2V needs it)
        used |= {"image", "last_image"}
    elif variant.expand_timesteps:  # TI2V: an optional first frame
        used.add("image")
    return frozenset(used)
