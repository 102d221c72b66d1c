"""Qwen3-VL as a captioner through transformers: `Qwen3VLForConditionalGeneration.generate` on a clip's frames.

transformers' video processor for Qwen3-VL (and SAM 3's image processor) needs torchvision, which has no CPU build on
the indexes WanTrainer installs from; the rest of the model's input is built here, calling transformers' own pieces
where they need no torchvision: `smart_resize` and `Qwen3VLVideoProcessor.patchify` for the frames,
`Qwen3VLProcessor._calculate_timestamps` for the "<t seconds>" marks, Qwen2-VL's PIL image processor for stills, the
folder's tokenizer and chat template for the text. What is restated is the frame resize (bicubic with antialiasing,
rounded to 8 bits, as torchvision resizes uint8 frames) and the normalisation; `tools/check_qwen3vl_inputs.py`
compares the result with the full transformers processor on a machine that has torchvision.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from modules.util.errors import UserError

logger = logging.getLogger(__name__)

SUPPORTED_TYPES = ("qwen3_vl", "qwen3_vl_moe")
#: Qwen's chat layout, for a folder whose tokenizer carries no chat template
DEFAULT_TEMPLATE = ("<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>{prompt}<|im_end|>\n"
                    "<|im_start|>assistant\n")


@dataclass(frozen=True)
class Media:
    """One input: uint8 frames (F, H, W, 3) sampled at `fps` (F = 1 and fps 0 for a still image), the indices they
    had in a clip read at `fps`."""

    frames: np.ndarray
    fps: float


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


class Qwen3VLCaptioner:
    """A loaded Qwen3-VL folder: `caption(media, prompts)` answers each prompt about its media, greedily."""

    def __init__(self, folder: str | Path, device: str = "auto", dtype: str = "auto", max_new_tokens: int = 160):
        import torch
        from transformers import AutoConfig, AutoModelForImageTextToText, AutoTokenizer
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

        from modules.util.model_folders import require_safetensors

        self.folder = Path(folder)
        config = AutoConfig.from_pretrained(self.folder)
        if config.model_type not in SUPPORTED_TYPES:
            raise UserError(f"'{self.folder}' holds a '{config.model_type}' model; captioning takes a Qwen3-VL folder "
                            f"({', '.join(SUPPORTED_TYPES)}), e.g. Qwen/Qwen3-VL-4B-Instruct")
        self.device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                                   ("cpu" if device == "auto" else device))
        if dtype == "auto":  # bf16 on a GPU; float32 on the CPU, where bf16 matmuls are slow or missing
            self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        else:
            self.dtype = getattr(torch, dtype)
        model_class = AutoModelForImageTextToText
        require_safetensors(self.folder, model_class)
        self.model = model_class.from_pretrained(self.folder, dtype=self.dtype, use_safetensors=True).to(self.device)
        self.model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.tokenizer.padding_side = "left"  # generation continues every row from its last token
        self.max_new_tokens = max_new_tokens
        defaults = {key: getattr(Qwen3VLVideoProcessor, key) for key in
                    ("size", "patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std",
                     "fps", "min_frames", "max_frames", "max_video_tokens")}
        self.video = {**defaults, **_read_json(self.folder / "video_preprocessor_config.json")}
        self.image_config = _read_json(self.folder / "preprocessor_config.json")
        self.video_token = "<|video_pad|>"
        self.image_token = "<|image_pad|>"
        self.video_token_id = config.video_token_id
        self.image_token_id = config.image_token_id
        self.template = getattr(self.tokenizer, "chat_template", None) or self._folder_template()
        if self.template:
            self.tokenizer.chat_template = self.template

    def _folder_template(self) -> str | None:
        """The chat template the hub folders keep beside the processor (chat_template.json or .jinja), not in the
        tokenizer's config."""
        jinja = self.folder / "chat_template.jinja"
        if jinja.is_file():
            return jinja.read_text(encoding="utf-8")
        return _read_json(self.folder / "chat_template.json").get("chat_template")

    # --- frames -> the model's video input ---------------------------------------------------------------
    @property
    def sample_fps(self) -> float:
        return float(self.video["fps"])

    @property
    def max_frames(self) -> int:
        return int(self.video["max_frames"])

    def video_input(self, media: Media):
        """(pixel_values_videos (patches, C·T·P·P), grid (t, h, w), timestamps of each temporal group)."""
        import torch
        from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor, smart_resize

        v = self.video
        frames = media.frames
        if len(frames) < v["temporal_patch_size"]:  # one frame: shown for the whole group, as patchify pads
            frames = np.concatenate([frames] * v["temporal_patch_size"])[: v["temporal_patch_size"]]
        factor = v["patch_size"] * v["merge_size"]
        count = len(frames)
        # the reference's per-frame pixel cap (transformers' `cap_pixels_per_frame=True`, its default from v5.22)
        per_frame = max(min(v["max_video_tokens"] * factor * factor, v["size"]["longest_edge"] // count),
                        int(v["size"]["shortest_edge"] * 1.05))
        height, width = smart_resize(count, frames.shape[1], frames.shape[2], v["temporal_patch_size"], factor,
                                     v["size"]["shortest_edge"], per_frame * count)
        video = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()  # (T, C, H, W)
        video = torch.nn.functional.interpolate(video, size=(height, width), mode="bicubic", antialias=True,
                                                align_corners=False).round_().clamp_(0, 255)
        mean = torch.tensor(v["image_mean"]).view(1, 3, 1, 1)
        std = torch.tensor(v["image_std"]).view(1, 3, 1, 1)
        video = ((video / 255.0 - mean) / std)[None]  # (1, T, C, H, W)
        patches, grid_t, grid_h, grid_w = Qwen3VLVideoProcessor.patchify(
            None, video, v["patch_size"], v["merge_size"], v["temporal_patch_size"])
        fps = media.fps or 1.0
        stamps = Qwen3VLProcessor._calculate_timestamps(None, list(range(len(frames))), fps, v["temporal_patch_size"])
        return patches[0], (grid_t, grid_h, grid_w), stamps

    def image_input(self, image: np.ndarray):
        """(pixel_values, grid) of a still, by transformers' Qwen2-VL image processor (PIL backend)."""
        from transformers import Qwen2VLImageProcessorPil

        keys = ("size", "patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std")
        processor = Qwen2VLImageProcessorPil(**{k: self.image_config[k] for k in keys if k in self.image_config})
        out = processor(images=[image], return_tensors="pt")
        return out["pixel_values"], tuple(int(x) for x in out["image_grid_thw"][0])

    # --- text ------------------------------------------------------------------------------------------------
    def _chat_text(self, prompt: str, kind: str) -> str:
        if self.template:
            messages = [{"role": "user", "content": [{"type": kind}, {"type": "text", "text": prompt}]}]
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        text = DEFAULT_TEMPLATE.format(prompt=prompt)
        return text if kind == "video" else text.replace(self.video_token, self.image_token)

    def _expand_video(self, text: str, grid: tuple[int, int, int], stamps: Sequence[float]) -> str:
        """Qwen3-VL's video placeholder: per temporal group "<t seconds>", then the group's tokens between
        vision start and end (as transformers' Qwen3VLProcessor.replace_video_token builds it)."""
        tokens = grid[1] * grid[2] // self.video["merge_size"] ** 2
        expanded = "".join(f"<{stamps[i]:.1f} seconds><|vision_start|>{self.video_token * tokens}<|vision_end|>"
                           for i in range(grid[0]))
        block = f"<|vision_start|>{self.video_token}<|vision_end|>"
        return text.replace(block, expanded, 1) if block in text else text.replace(self.video_token, expanded, 1)

    # --- generation ------------------------------------------------------------------------------------------
    def caption(self, media: Sequence[Media], prompts: Sequence[str]) -> list[str]:
        """One answer per (media, prompt), generated in one batch (videos and stills may be mixed)."""
        import torch

        texts, videos, video_grids, images, image_grids = [], [], [], [], []
        for item, prompt in zip(media, prompts):
            if len(item.frames) == 1 and item.fps == 0:
                pixels, grid = self.image_input(item.frames[0])
                images.append(pixels)
                image_grids.append(grid)
                tokens = grid[0] * grid[1] * grid[2] // self.image_config.get("merge_size", 2) ** 2
                texts.append(self._chat_text(prompt, "image").replace(self.image_token, self.image_token * tokens, 1))
            else:
                pixels, grid, stamps = self.video_input(item)
                videos.append(pixels)
                video_grids.append(grid)
                texts.append(self._expand_video(self._chat_text(prompt, "video"), grid, stamps))
        encoded = self.tokenizer(texts, return_tensors="pt", padding=True)
        ids = encoded["input_ids"]
        types = torch.zeros_like(ids)
        types[ids == self.image_token_id] = 1
        types[ids == self.video_token_id] = 2
        inputs = {"input_ids": ids, "attention_mask": encoded["attention_mask"], "mm_token_type_ids": types}
        if videos:
            inputs["pixel_values_videos"] = torch.cat(videos).to(self.dtype)
            inputs["video_grid_thw"] = torch.tensor(video_grids)
        if images:
            inputs["pixel_values"] = torch.cat(images).to(self.dtype)
            inputs["image_grid_thw"] = torch.tensor(image_grids)
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        with torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        answers = self.tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
        return [" ".join(answer.split()) for answer in answers]
