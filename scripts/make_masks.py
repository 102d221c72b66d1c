#!/usr/bin/env python
"""Make masks for masked training: `<clip>-masklabel.mp4` beside each clip, white where SAM 3 finds a prompt.

python scripts/make_masks.py FOLDER --prompt person [--prompt "red bag"] [--grow 4] [--model SAM3_FOLDER | --download]
    [--overwrite]

The masks are what `masked_training` reads (docs/data.md). Existing masks are kept unless --overwrite; a clip where
no prompt is found gets no mask and is listed.
"""
from __future__ import annotations

from _bootstrap import OneLineArgumentParser, run_main  # first: import path, offline mode


def parse_args(argv: list[str] | None = None):
    from modules.dataTools.model_source import DEFAULT_SEGMENTATION_MODEL

    parser = OneLineArgumentParser(description=__doc__)
    parser.add_argument("folder", help="folder of clips")
    parser.add_argument("--prompt", action="append", default=[], help="what the mask covers (repeat for more)")
    parser.add_argument("--grow", type=int, default=0, help="widen the mask by this many pixels")
    parser.add_argument("--model", default=DEFAULT_SEGMENTATION_MODEL,
                        help="a local SAM 3 folder, or a hub name with --download")
    parser.add_argument("--download", action="store_true", help="fetch --model from the Hugging Face hub")
    parser.add_argument("--threshold", type=float, default=0.4, help="SAM 3's detection score threshold")
    parser.add_argument("--overwrite", action="store_true", help="replace existing masks")
    parser.add_argument("--device", default="auto", help="cuda, cpu, ... (auto: a GPU when there is one)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    from modules.dataTools.masks import MaskOptions, make_masks
    from modules.dataTools.segmenter import sam3_segmenter_factory

    options = MaskOptions(tuple(args.prompt), overwrite=args.overwrite, grow=args.grow)
    options.check()
    segmenter = sam3_segmenter_factory(args.model, args.download, args.device, args.threshold)

    report = make_masks(args.folder, segmenter, options, progress=not args.no_progress)
    print(report.summary())
    return 130 if report.cancelled else 0


if __name__ == "__main__":
    run_main(main)
