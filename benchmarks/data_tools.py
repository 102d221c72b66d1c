"""The data tools' speed on the CPU with tiny models, and the real models' memory estimated from their configs.

    .venv/bin/python benchmarks/data_tools.py [--json OUT] [--quick]

- clips/min: scripts/split_clips.py's code on synthetic footage (320x180, 16 fps, a hard cut every 2 s), detection
  and cutting; also the footage's seconds handled per wall second.
- captions/s: the tiny random Qwen3-VL (modules/synthetic/tiny_vlm.py) on 48x64 clips, batch 1 and 4, 12 new tokens:
  the cost of the pipeline around the model (decode, frame sampling, preprocessing, generate, atomic writes).
- elements/s: the element tool on 64x96 clips with a true-mask segmenter (the pixels' own cost: frame choice, cut-out,
  plate) and with the tiny random SAM 3.
- memory: each real model's weights (bf16) from its published config, counted on the meta device (nothing is
  downloaded), plus Qwen3-VL's KV cache for one clip of 32 sampled frames at 480x832 and a 200-token answer.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: Published Qwen3-VL Instruct shapes (the text model is the Qwen3 LLM of that size)
QWEN3_VL = {
    "Qwen3-VL-2B-Instruct": ({"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
                              "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128},
                             {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "out_hidden_size": 2048,
                              "deepstack_visual_indexes": [5, 11, 17]}, True),
    "Qwen3-VL-4B-Instruct": ({"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
                              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128},
                             {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "out_hidden_size": 2560,
                              "deepstack_visual_indexes": [5, 11, 17]}, True),
    "Qwen3-VL-8B-Instruct": ({"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128},
                             {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "out_hidden_size": 4096,
                              "deepstack_visual_indexes": [8, 16, 24]}, False),
}
GIB = 1 << 30


def meta_parameters(build) -> int:
    import torch

    with torch.device("meta"):
        model = build()
    return sum(p.numel() for p in model.parameters())


def model_memory() -> dict:
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Sam3Config, Sam3Model
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

    rows = {}
    # one clip: 32 frames sampled at 2 fps, 480x832, the reference's per-frame cap (768 tokens of 32x32 px)
    height, width = smart_resize(32, 480, 832, 2, 32, 128 * 32 * 32, 768 * 32 * 32 * 32)
    video_tokens = 16 * (height // 32) * (width // 32)
    for name, (text, vision, tied) in QWEN3_VL.items():
        config = Qwen3VLConfig(text_config={**text, "vocab_size": 151936}, vision_config=vision,
                               tie_word_embeddings=tied)
        params = meta_parameters(lambda: Qwen3VLForConditionalGeneration(config))
        tokens = video_tokens + 64 + 200
        kv = 2 * text["num_hidden_layers"] * text["num_key_value_heads"] * text["head_dim"] * tokens * 2
        rows[name] = {"parameters_b": round(params / 1e9, 2), "weights_bf16_gib": round(params * 2 / GIB, 2),
                      "video_tokens": video_tokens, "kv_cache_gib": round(kv / GIB, 3),
                      "estimate_gib": round((params * 2 + kv) / GIB * 1.1, 1)}  # +10 %: activations, buffers
    params = meta_parameters(lambda: Sam3Model(Sam3Config()))
    rows["facebook/sam3 (Sam3Model)"] = {"parameters_b": round(params / 1e9, 2),
                                         "weights_bf16_gib": round(params * 2 / GIB, 2),
                                         "estimate_gib": round(params * 2 / GIB * 1.3, 1)}  # +30 %: 1008 px maps
    return rows


def footage(path: Path, seconds: int) -> Path:
    import numpy as np

    from modules.dataTools.clip_writer import clip_writer

    rng = np.random.default_rng(0)
    with clip_writer(path, 16.0) as writer:
        for shot in range(seconds // 2):
            colour = rng.integers(30, 225, 3)
            base = np.broadcast_to(colour, (180, 320, 3)).astype(np.uint8).copy()
            for i in range(32):
                frame = base.copy()
                frame[60:120, 10 + 8 * i:70 + 8 * i] = 255 - colour
                writer.write(frame)
    return path


def clip_speed(work: Path, seconds: int) -> dict:
    from modules.dataTools.clips import split_videos
    from modules.dataTools.shots import SplitOptions

    source = footage(work / "footage" / "film.mp4", seconds)
    start = time.perf_counter()
    report = split_videos([source], work / "clips", SplitOptions(min_seconds=1.0, wan_frames=True), progress=False)
    elapsed = time.perf_counter() - start
    return {"footage_seconds": seconds, "clips": report.written, "wall_s": round(elapsed, 2),
            "clips_per_min": round(60 * report.written / elapsed, 1),
            "footage_s_per_s": round(seconds / elapsed, 2)}


def caption_speed(work: Path, count: int) -> dict:
    from modules.dataTools.captions import CaptionOptions, caption_folder
    from modules.dataTools.vlm import Qwen3VLCaptioner
    from modules.synthetic.synthetic_data import write_video_dataset
    from modules.synthetic.tiny_vlm import write_tiny_qwen3_vl

    model = Qwen3VLCaptioner(write_tiny_qwen3_vl(work / "qwen"), device="cpu", max_new_tokens=12)
    out = {}
    for batch in (1, 4):
        data = write_video_dataset(work / f"captions-{batch}", count=count, frames=33, height=48, width=64)
        start = time.perf_counter()
        report = caption_folder(data, model, CaptionOptions(overwrite=True, batch_size=batch), progress=False)
        out[f"captions_per_s_batch{batch}"] = round(report.written / (time.perf_counter() - start), 2)
    return out


def element_speed(work: Path, count: int) -> dict:
    import shutil

    from modules.dataTools.elements import ElementJob, ElementOptions, make_elements
    from modules.dataTools.segmenter import Sam3Segmenter
    from modules.synthetic.element_scene import ColourSegmenter
    from modules.synthetic.tiny_vlm import write_tiny_sam3
    from modules.synthetic.element_scene import BLUE, RED, scene
    from modules.util.video_write import write_video

    data = work / "elements"
    data.mkdir()
    frames, _ = scene()
    for i in range(count):
        write_video(data / f"{i:03d}.mp4", frames, 16.0)
    jobs = (ElementJob("subject", "red disc", "_subject.png"), ElementJob("object", "blue box", "_object.png"),
            ElementJob("background", "", "_background.png", True))
    out = {}
    for name, segmenter in (("true_masks", ColourSegmenter({"red disc": RED, "blue box": BLUE})),
                            ("tiny_sam3", Sam3Segmenter(write_tiny_sam3(work / "sam3"), device="cpu"))):
        start = time.perf_counter()
        report = make_elements(data, segmenter, ElementOptions(jobs, overwrite=True, max_frames=20), progress=False)
        elapsed = time.perf_counter() - start
        out[f"clips_per_s_{name}"] = round(report.clips / elapsed, 2)
        out[f"elements_per_s_{name}"] = round((report.written + len(report.not_found)) / elapsed, 2)
    shutil.rmtree(data)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the result here too")
    parser.add_argument("--quick", action="store_true", help="fewer clips (a smoke run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        result = {"clips": clip_speed(work, 8 if args.quick else 60),
                  "captions": caption_speed(work, 2 if args.quick else 8),
                  "elements": element_speed(work, 2 if args.quick else 6),
                  "model_memory": model_memory()}
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
