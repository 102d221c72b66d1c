#!/usr/bin/env python
"""Evaluate a trained model: generate every prompt x seed (and with the base model, --compare-base), measure each
video and write REPORT_DIR/metrics.json and REPORT_DIR/index.html (base and trained side by side).

python scripts/evaluate.py --model DIR [--lora F] [--embedding F] --prompts FILE.txt|.json [--elements IMG ...] [--seeds N]
    --output REPORT_DIR [--compare-base] [--clip-model DIR] [--dino-model DIR]

Metrics (docs/evaluation.md): motion (optical flow), temporal consistency (CLIP: the checkpoint's image encoder,
else --clip-model's), text alignment (--clip-model), E2V element fidelity (CLIP, and DINOv2 with --dino-model).
Everything is read from local folders; nothing is downloaded.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from _bootstrap import OneLineArgumentParser, run_main  # first: import path, offline mode
from _sample_options import add_e2v_pathway_options, add_schedule_and_device_options, add_video_options


def parse_args(argv: list[str] | None = None):
    from modules.config.sampling_choices import REFERENCE_LAYOUTS

    parser = OneLineArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="diffusers Wan folder (a base, or a fine-tuned output)")
    parser.add_argument("--lora", help="the trained LoRA file (for two-expert models either expert's file)")
    parser.add_argument("--lora-scale", type=float, default=1.0,
                        help="strength the LoRA is applied with (default %(default)s)")
    parser.add_argument("--base-lora", action="append", default=[], metavar="FILE[:STRENGTH[:EXPERT]]",
                        help="a LoRA merged into the base of every run (e.g. a Lightning speed LoRA); repeat for a "
                             "stack. Default: the stack --lora's header records, where the files are found")
    parser.add_argument("--no-base-loras", action="store_true",
                        help="do not merge the base LoRAs --lora's header records")
    parser.add_argument("--embedding", help="the trained textual-inversion embedding (.safetensors, key umt5xxl); "
                                            "prompts holding its placeholder use it")
    parser.add_argument("--force", action="store_true", help="apply a LoRA whose metadata names another variant")
    parser.add_argument("--compare-base", action="store_true",
                        help="also generate with the base model: --model without --lora/--embedding, or --base-model")
    parser.add_argument("--base-model", help="the base folder to compare a full fine-tune (--model) with")
    parser.add_argument("--prompts", required=True, help=".txt (one prompt per line) or .json list")
    parser.add_argument("--elements", nargs="+", metavar="IMG", help="E2V reference images for every prompt")
    parser.add_argument("--control-video", default="", metavar="MP4",
                        help="VACE models: the control video for every prompt that names none (--elements: references)")
    parser.add_argument("--control-mask", default="", metavar="MP4|PNG", help="VACE models: its mask (white = generate)")
    parser.add_argument("--vace-scale", type=float, default=1.0, help="VACE models: weight of the control hints")
    parser.add_argument("--image-encoder", help="folder with image_encoder/ + image_processor/ for E2V on bases "
                                                "without them")
    add_e2v_pathway_options(parser)
    parser.add_argument("--reference-layout", default="auto", choices=("auto", *REFERENCE_LAYOUTS),
                        help="E2V: a2 (SkyReels-A2's) or skyreels_v3 (up to 4 references appended as latent frames); "
                             "auto: what --lora's header names, else a2")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0 .. N-1 per prompt (default 1)")
    parser.add_argument("--output", required=True, help="report folder")
    parser.add_argument("--clip-model", help="local CLIP folder (vision + text): text alignment")
    parser.add_argument("--dino-model", help="local DINOv2 folder: element fidelity on DINO features")
    add_video_options(parser, frames=33)
    parser.add_argument("--image-guidance-scale", type=float, default=1.0,
                        help="--reference-layout skyreels_v3: image guidance against all-zero references (1 = off)")
    add_schedule_and_device_options(parser)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    from modules.evaluation.prompts import Settings, read_prompts
    from modules.util.errors import UserError
    from modules.util.path_checks import check_input_file, check_not_an_input, check_writable_folder

    # the prompts, settings and paths first, before torch imports (seconds) and any model loads (minutes)
    if args.seeds < 1:
        raise UserError(f"--seeds must be at least 1, got {args.seeds}")
    prompts = read_prompts(args.prompts, args.elements, args.control_video, args.control_mask)
    settings = Settings(args.frames, args.height, args.width, args.steps, args.cfg_scale, args.sampler, args.scheduler, args.shift,
                        args.seeds, args.vace_scale, args.image_guidance_scale)
    for prompt in prompts:
        settings.sample(prompt, 0)
    if args.embedding:
        check_input_file("--embedding", args.embedding, "an embedding .safetensors file")
    trained_adds = bool(args.lora) or bool(args.embedding)  # the trained model is --model plus these
    if args.compare_base and not trained_adds and not args.base_model:
        raise UserError("--compare-base needs --lora or --embedding (the base is --model without them) or "
                        "--base-model (for a full fine-tune)")
    output = Path(args.output)
    check_writable_folder("--output", str(output))

    from modules.evaluation import encoders as enc
    from modules.evaluation.report import write_report
    from modules.evaluation.run import Encoders, Run, evaluate, write_metrics
    from modules.model.detection import detect_variant
    from modules.modelFile.base_loras import sampling_stack
    from modules.modelFile.lora_checks import check_lora_file
    from modules.modelLoader.lora_inference import attach_lora_for_inference
    from modules.modelLoader.WanModelLoader import WanModelLoader, resolve_device
    from modules.modelSampler.e2v_options import e2v_sampling_options, reference_layout_of
    from modules.modelSaver.embedding_file import read_embedding

    # then the model folders and files, by their configs and headers: still no weights
    variant = detect_variant(args.model)
    if variant.vace_layers:  # no more references than training takes
        from modules.model.vace_e2v import check_vace_references

        for index, prompt in enumerate(prompts):
            check_vace_references(len(prompt.elements), f"--prompts '{args.prompts}' prompt {index} (or --elements)")
    from modules.model.sample_inputs import check_sample_inputs

    for index, prompt in enumerate(prompts):  # what the model generates from (an I2V model: each prompt's image)
        check_sample_inputs(variant, settings.sample(prompt, 0),
                            label=lambda field, i=index: f"--prompts '{args.prompts}' prompt {i}: its {field}")
    lora = check_lora_file(args.lora, variant, args.force, "--force") if args.lora else None
    base_loras = sampling_stack(args.base_lora, lora, variant, use_header=not args.no_base_loras)
    check_not_an_input("--output", [output], [
        ("--model", args.model), ("--base-model", args.base_model), ("--prompts", args.prompts),
        ("--embedding", args.embedding), ("--image-encoder", args.image_encoder), ("--lora", args.lora),
        ("--control-video", args.control_video), ("--control-mask", args.control_mask),
        *(("--elements", e) for e in args.elements or []), *(("--base-lora", entry.path) for entry in base_loras),
        *(("--lora", file) for file in (lora.files.values() if lora is not None else ()))])
    reference_layout = reference_layout_of(args.reference_layout, lora.metadata if lora else None)
    if args.base_model:
        detect_variant(args.base_model)
    device = resolve_device(args.device)

    from modules.modelSampler.comfy_workflow import workflow_models

    encoders = Encoders()
    if args.clip_model:
        encoders.clip_pair = enc.clip_model(args.clip_model, device)
    if args.dino_model:
        encoders.dino = enc.dino_model(args.dino_model, device)
    # the checkpoint's own CLIP tower (or --image-encoder's, which the sampler uses in its place), else --clip-model's
    encoders.clip_image = enc.checkpoint_clip(args.model, device) or \
        (enc.checkpoint_clip(args.image_encoder, device) if args.image_encoder else None) or \
        (encoders.clip_pair[0] if encoders.clip_pair else None)

    def load(folder: str, stack=()):
        model = WanModelLoader().load(folder, device, base_loras=stack)
        if args.image_encoder and model.image_encoder is None:
            model.image_encoder, model.image_processor = WanModelLoader.load_image_encoder(args.image_encoder, device)
        return model

    runs = []
    if args.compare_base and not trained_adds:
        # a full fine-tune of a merged base holds the stack already: only the base gets it
        runs.append(Run("base", lambda: load(args.base_model, base_loras),
                        workflow_models(variant, args.base_model, {}, base_loras)))
        runs.append(Run("trained", lambda: load(args.model), workflow_models(variant, args.model, {}, [])))
    else:
        loaded = {}

        def base():
            loaded["model"] = load(args.model, base_loras)
            return loaded["model"]

        def trained():
            model = loaded.pop("model", None) or load(args.model, base_loras)
            if lora is not None:
                attach_lora_for_inference(model, lora, args.lora_scale)
            if args.embedding:
                model.text_embedding = read_embedding(args.embedding, model.text_encoder.config.d_model, "--embedding")
            return model

        if args.compare_base:
            runs.append(Run("base", base, workflow_models(variant, args.model, {}, base_loras)))
        runs.append(Run("trained", trained, workflow_models(variant, args.model, {}, base_loras,
                                                            lora.files if lora else None, args.lora_scale)))
    results = evaluate(runs, prompts, settings, encoders, output,
                       lambda m: e2v_sampling_options(m, args.e2v_type, args.target_layout,
                                                      reference_layout=reference_layout))
    write_metrics(results, output)
    report = write_report(results, output)
    for model, means in results["means"].items():
        print(f"{model}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(means.items())))
    for note in results["notes"]:
        print(f"note: {note}")
    print(f"report written to {report}")
    return 0


if __name__ == "__main__":
    run_main(main)
