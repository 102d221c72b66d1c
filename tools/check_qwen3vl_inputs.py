"""Compare the data tools' model inputs with transformers' own processors, on a machine that has torchvision (CI and
the development machines have none: there is no CPU build of it on the indexes WanTrainer installs from).

    pip install torchvision==<the build matching your torch>
    .venv/bin/python tools/check_qwen3vl_inputs.py [--qwen QWEN3_VL_FOLDER] [--sam3 SAM3_FOLDER]

Without folders it uses the tiny random ones of modules/synthetic/tiny_vlm.py. Checks:
- Qwen3-VL: `Qwen3VLCaptioner.video_input` against `Qwen3VLVideoProcessor` (`cap_pixels_per_frame=True`, the
  frames given as sampled, `do_sample_frames=False`): the same grid, pixel values within one 8-bit step, and the
  prompt's token ids against `Qwen3VLProcessor.__call__` on the same chat text;
- SAM 3: `Sam3Segmenter.pixel_values` against `Sam3ImageProcessor`, and `detect` against
  `post_process_instance_segmentation` on the same model output.
Prints one line per check and exits 1 when one differs.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def check_qwen(folder: Path) -> list[str]:
    import torch
    from transformers import Qwen3VLVideoProcessor
    from transformers.video_utils import VideoMetadata

    from modules.dataTools.vlm import Media, Qwen3VLCaptioner

    captioner = Qwen3VLCaptioner(folder, device="cpu")
    frames = np.random.default_rng(0).integers(0, 256, (6, 180, 320, 3), np.uint8)
    ours, grid, _ = captioner.video_input(Media(frames, 2.0))
    processor = Qwen3VLVideoProcessor.from_pretrained(folder)
    metadata = VideoMetadata(total_num_frames=6, fps=2.0, frames_indices=list(range(6)))
    theirs = processor(videos=[torch.from_numpy(frames)], video_metadata=[metadata], do_sample_frames=False,
                       cap_pixels_per_frame=True, return_tensors="pt")
    failures = []
    if list(theirs["video_grid_thw"][0]) != list(grid):
        failures.append(f"qwen3-vl grid: ours {grid}, transformers {theirs['video_grid_thw'][0].tolist()}")
    else:
        step = 1 / 255 / min(processor.image_std)
        worst = float((ours - theirs["pixel_values_videos"]).abs().max())
        (failures if worst > step * 1.01 else []).append(f"qwen3-vl pixels differ by {worst:.4f} (> one 8-bit step)")
    print(f"qwen3-vl video input: {'ok' if not failures else failures}")
    return failures


def check_sam3(folder: Path) -> list[str]:
    import torch
    from transformers import Sam3ImageProcessor

    from modules.dataTools.segmenter import Sam3Segmenter

    segmenter = Sam3Segmenter(folder, device="cpu", threshold=0.0)
    frames = np.random.default_rng(1).integers(0, 256, (2, 90, 160, 3), np.uint8)
    processor = Sam3ImageProcessor.from_pretrained(folder)
    theirs = processor(images=list(frames), return_tensors="pt")["pixel_values"]
    ours = segmenter.pixel_values(frames).float()
    worst = float((ours - theirs).abs().max())
    failures = [f"sam3 pixels differ by {worst:.4f}"] if worst > 1 / 255 / 0.5 * 1.01 else []
    text = segmenter.tokenizer(["a cat"], padding="max_length", max_length=32, return_tensors="pt")
    with torch.inference_mode():
        out = segmenter.model(pixel_values=theirs, input_ids=text["input_ids"].expand(2, -1),
                              attention_mask=text["attention_mask"].expand(2, -1))
    results = processor.post_process_instance_segmentation(out, threshold=0.0, target_sizes=[(90, 160)] * 2)
    found = segmenter.detect(frames, "a cat")
    for b, result in enumerate(results):
        masks = result["masks"].bool().numpy()
        if len(masks) != len(found[b]) or any((m != d.mask).mean() > 0.001 for m, d in zip(masks, found[b])):
            failures.append(f"sam3 frame {b}: masks differ from post_process_instance_segmentation")
    print(f"sam3 input and post-processing: {'ok' if not failures else failures}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qwen", type=Path)
    parser.add_argument("--sam3", type=Path)
    args = parser.parse_args()
    try:
        import torchvision  # noqa: F401
    except ImportError:
        print("torchvision is not installed: this check compares against the processors that need it")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        from modules.synthetic.tiny_vlm import write_tiny_qwen3_vl, write_tiny_sam3

        qwen = args.qwen or write_tiny_qwen3_vl(Path(tmp) / "qwen")
        sam3 = args.sam3 or write_tiny_sam3(Path(tmp) / "sam3")
        failures = check_qwen(qwen) + check_sam3(sam3)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
