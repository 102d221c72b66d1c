"""What scripts/evaluate.py generates: the prompts file (--prompts) and the sampling settings, read and checked
without torch, so that a bad file or value is answered before any model code imports."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from modules.config.sampling_choices import WAN_NEGATIVE_PROMPT
from modules.config.train_config import SampleConfig
from modules.util.base_config import ConfigError
from modules.util.errors import UserError


@dataclasses.dataclass(frozen=True)
class Prompt:
    prompt: str
    negative_prompt: str = WAN_NEGATIVE_PROMPT
    image: str = ""  # first frame (I2V)
    elements: tuple[str, ...] = ()  # E2V reference images (VACE: its reference images)
    control_video: str = ""  # VACE
    control_mask: str = ""  # VACE
    last_image: str = ""  # last frame (first-last-frame)


def read_prompts(path: str | Path, elements: list[str] | None = None, control_video: str = "",
                 control_mask: str = "") -> list[Prompt]:
    """A .txt file (one prompt per line; blank lines and # comments skipped) or a JSON list of prompts or of
    {"prompt", "negative_prompt", "image", "elements", "control_video", "control_mask"} objects. `elements`
    (--elements) and the control video and mask (--control-video, --control-mask) apply to every prompt that names
    none."""
    from modules.config.loading import MAX_JSON_BYTES, check_regular_file, read_json
    from modules.util.text_io import decode_text

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--prompts '{path}' is not a file: give a .txt (one prompt per line) or .json list")
    if path.suffix.lower() == ".json":
        data = read_json(path, "prompts")
        if not isinstance(data, list):
            raise UserError(f"--prompts '{path}' must hold a JSON list of prompts")
        prompts = []
        for index, entry in enumerate(data):
            if isinstance(entry, str):
                entry = {"prompt": entry}
            if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str) or \
                    set(entry) - {"prompt", "negative_prompt", "image", "last_image", "elements", "control_video",
                                 "control_mask"}:
                raise UserError(f"--prompts '{path}' entry {index} must be a string or an object with \"prompt\" "
                                "(and optionally \"negative_prompt\", \"image\", \"last_image\", \"elements\", \"control_video\", "
                                "\"control_mask\")")
            prompts.append(Prompt(entry["prompt"], entry.get("negative_prompt", WAN_NEGATIVE_PROMPT), entry.get("image", ""),
                                  tuple(entry.get("elements") or elements or ()),
                                  entry.get("control_video") or control_video, entry.get("control_mask") or control_mask,
                                  entry.get("last_image", "")))
    else:
        check_regular_file(path, "prompts", MAX_JSON_BYTES)
        lines = decode_text(path.read_bytes()).splitlines()
        prompts = [Prompt(line.strip(), elements=tuple(elements or ()), control_video=control_video,
                          control_mask=control_mask) for line in lines
                   if line.strip() and not line.strip().startswith("#")]
    if not prompts:
        raise UserError(f"--prompts '{path}' holds no prompt")
    for index, prompt in enumerate(prompts):  # before any model loads, not after the first videos
        for image in filter(None, (prompt.image, prompt.last_image, *prompt.elements, prompt.control_video,
                                   prompt.control_mask)):
            if not Path(image).is_file():
                raise UserError(f"--prompts '{path}' prompt {index}: image '{image}' does not exist (paths are "
                                "relative to the current folder)")
    return prompts


@dataclasses.dataclass
class Settings:
    frames: int = 33
    height: int = 480
    width: int = 832
    steps: int = 30
    cfg_scale: float = 5.0
    sampler: str = "uni_pc"
    scheduler: str = "simple"
    shift: float = 0.0
    seeds: int = 1  # seeds 0 .. N-1
    vace_scale: float = 1.0  # VACE: weight of the control hints
    image_guidance_scale: float = 1.0  # E2V in SkyReels-V3's layout: image guidance against zero references

    def sample(self, prompt: Prompt, seed: int) -> SampleConfig:
        try:
            return SampleConfig.from_dict({
                "prompt": prompt.prompt, "negative_prompt": prompt.negative_prompt, "image": prompt.image,
                "last_image": prompt.last_image,
                "elements": list(prompt.elements), "frames": self.frames, "height": self.height, "width": self.width,
                "steps": self.steps, "cfg_scale": self.cfg_scale, "seed": seed, "sampler": self.sampler, "scheduler": self.scheduler,
                "shift": self.shift, "control_video": prompt.control_video, "control_mask": prompt.control_mask,
                "vace_scale": self.vace_scale, "image_guidance_scale": self.image_guidance_scale}, "sample")
        except ConfigError as e:
            raise UserError(str(e).replace("config key 'sample.", "setting '--")) from None
