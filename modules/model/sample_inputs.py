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
