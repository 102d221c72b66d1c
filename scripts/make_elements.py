#!/usr/bin/env python
"""Make E2V element images from the clips of a dataset: SAM 3 finds each element by its text prompt, the best frame
is cut out on white as SkyReels-A2's references are, the background element is the scene without its elements.

python scripts/make_elements.py --dataset-config E2V.json --element subject=person --element object="red bag"
    [--background background] [--model SAM3_FOLDER | --download] [--plate median|frame] [--avoid-first N]
    [--max-frames 32] [--fill white|black|grey|R,G,B] [--overwrite] [--data-root FOLDER]

Writes `<clip><suffix>` (each element's first suffix in the dataset JSON) and `<clip>.elements.json` (frame, box,
mask area, score). Existing images are kept unless --overwrite; an element not found in a clip is listed, not
guessed.
"""
from __future__ import annotations

from _bootstrap import OneLineArgumentParser, run_main  # first: import path, offline mode


def parse_args(argv: list[str] | None = None):
    from modules.dataTools.model_source import DEFAULT_SEGMENTATION_MODEL

    parser = OneLineArgumentParser(description=__doc__)
    parser.add_argument("--dataset-config", required=True, help="the E2V dataset JSON (its elements and suffixes)")
    parser.add_argument("--data-root", default="", help="the dataset folder (default: the dataset's data_root)")
    parser.add_argument("--dataset", type=int, default=0, help="which dataset of the JSON (index, default 0)")
    parser.add_argument("--element", action="append", default=[], metavar="NAME=PROMPT",
                        help="an element of the dataset and what SAM 3 looks for (repeat per element)")
    parser.add_argument("--background", default=None,
                        help="the element made as the background plate (default: the one named *background*)")
    parser.add_argument("--model", default=DEFAULT_SEGMENTATION_MODEL,
                        help="a local SAM 3 folder, or a hub name with --download")
    parser.add_argument("--download", action="store_true", help="fetch --model from the Hugging Face hub")
    parser.add_argument("--plate", choices=("median", "frame"), default="median",
                        help="the background: the median of the free pixels over the clip, or the least covered frame")
    parser.add_argument("--avoid-first", type=int, default=1,
                        help="frames at a clip's start an element is not cut from unless only they show it (set it "
                             "to the frames a step trains on: a reference copied from them teaches copying)")
    parser.add_argument("--max-frames", type=int, default=32, help="frames per clip SAM 3 looks at")
    parser.add_argument("--fill", default="white",
                        help="around a cut-out: white (A2's references), black, grey or R,G,B")
    parser.add_argument("--threshold", type=float, default=0.4, help="SAM 3's detection score threshold")
    parser.add_argument("--overwrite", action="store_true", help="replace existing element images")
    parser.add_argument("--device", default="auto", help="cuda, cpu, ... (auto: a GPU when there is one)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def parse_prompts(pairs: list[str]) -> dict[str, str]:
    from modules.util.errors import UserError

    prompts = {}
    for pair in pairs:
        name, sep, prompt = pair.partition("=")
        if not sep or not name.strip() or not prompt.strip():
            raise UserError(f"--element '{pair}' must be NAME=PROMPT, e.g. subject=person")
        prompts[name.strip()] = prompt.strip()
    return prompts


def main() -> int:
    args = parse_args()
    from modules.config.e2v_dataset_config import load_dataset_config
    from modules.dataTools.elements import ElementOptions, jobs_from_dataset, make_elements, parse_fill
    from modules.dataTools.segmenter import sam3_segmenter_factory
    from modules.util.errors import UserError

    datasets = load_dataset_config(args.dataset_config).datasets
    if not 0 <= args.dataset < len(datasets):
        raise UserError(f"--dataset {args.dataset}: '{args.dataset_config}' holds {len(datasets)} dataset(s)")
    dataset = datasets[args.dataset]
    options = ElementOptions(jobs_from_dataset(dataset.elements, parse_prompts(args.element), args.background),
                             overwrite=args.overwrite, max_frames=args.max_frames, avoid_first=args.avoid_first,
                             plate=args.plate, fill=parse_fill(args.fill))
    options.check()
    segmenter = sam3_segmenter_factory(args.model, args.download, args.device, args.threshold)

    report = make_elements(args.data_root or dataset.data_root, segmenter, options, progress=not args.no_progress)
    print(report.summary())
    return 130 if report.cancelled else 0


if __name__ == "__main__":
    run_main(main)
