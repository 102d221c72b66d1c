#!/usr/bin/env python
"""Caption the clips of a folder with a video VLM (Qwen3-VL through transformers): one `.txt` beside each clip.

python scripts/caption.py FOLDER --model QWEN3_VL_FOLDER [--template short|detailed | --prompt TEXT]
    [--trigger WORD] [--keep-prefixes] [--overwrite] [--batch-size N] [--dataset-config E2V.json]
    [--download] [--device cuda|cpu] [--dtype bfloat16|float32]

Existing captions are kept unless --overwrite (then each is replaced atomically). With --dataset-config the folder
is an E2V dataset: each prompt names the sample's elements. The model is read from a local folder; --download
fetches --model (a hub name, default Qwen/Qwen3-VL-4B-Instruct) from the Hugging Face hub first.
"""
from __future__ import annotations

from _bootstrap import OneLineArgumentParser, run_main  # first: import path, offline mode


def parse_args(argv: list[str] | None = None):
    from modules.dataTools.model_source import DEFAULT_CAPTION_MODEL

    parser = OneLineArgumentParser(description=__doc__)
    parser.add_argument("folder", help="folder of clips (and stills) to caption")
    parser.add_argument("--model", default=DEFAULT_CAPTION_MODEL,
                        help="a local Qwen3-VL folder, or a hub name with --download")
    parser.add_argument("--download", action="store_true", help="fetch --model from the Hugging Face hub")
    parser.add_argument("--template", default="short", choices=("short", "detailed"), help="the prompt to ask")
    parser.add_argument("--prompt", default="", help="a prompt of your own instead of the template")
    parser.add_argument("--trigger", default="", help="a word put before every caption (a LoRA's trigger word)")
    parser.add_argument("--keep-prefixes", action="store_true",
                        help="keep openers like 'The video shows' (removed by default)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing captions")
    parser.add_argument("--batch-size", type=int, default=1, help="clips per generate call")
    parser.add_argument("--max-new-tokens", type=int, default=160, help="longest caption, in tokens")
    parser.add_argument("--dataset-config", default="", help="an E2V dataset JSON: caption its samples, naming "
                                                             "their elements (the first dataset whose data_root is FOLDER)")
    parser.add_argument("--device", default="auto", help="cuda, cpu, ... (auto: a GPU when there is one)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16", "float32"),
                        help="auto: bfloat16 on a GPU, float32 on the CPU")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def dataset_elements(path: str, folder: str) -> tuple:
    from pathlib import Path

    from modules.config.e2v_dataset_config import load_dataset_config
    from modules.util.errors import UserError

    datasets = load_dataset_config(path).datasets
    for dataset in datasets:
        if Path(dataset.data_root).resolve() == Path(folder).resolve():
            return tuple(dataset.elements)
    if len(datasets) == 1:
        return tuple(datasets[0].elements)
    raise UserError(f"--dataset-config '{path}' has no dataset whose data_root is '{folder}'")


def main() -> int:
    args = parse_args()
    from modules.dataTools.captions import CaptionOptions, caption_folder
    from modules.dataTools.model_source import resolve_model

    options = CaptionOptions(template=args.template, prompt=args.prompt, trigger=args.trigger,
                             strip_prefixes=not args.keep_prefixes, overwrite=args.overwrite,
                             batch_size=args.batch_size,
                             elements=dataset_elements(args.dataset_config, args.folder) if args.dataset_config else ())
    options.check()

    def captioner():
        from modules.dataTools.vlm import Qwen3VLCaptioner

        folder = resolve_model(args.model, args.download, "captioning (Qwen3-VL)")
        return Qwen3VLCaptioner(folder, args.device, args.dtype, args.max_new_tokens)

    if not args.download:  # a wrong path is said before any clip is read
        resolve_model(args.model, False, "captioning (Qwen3-VL)")
    report = caption_folder(args.folder, captioner, options, progress=not args.no_progress)
    print(report.summary())
    return 130 if report.cancelled else 0


if __name__ == "__main__":
    run_main(main)
