#!/usr/bin/env python
"""Generate a video: python scripts/sample.py --model DIR [--base-lora FILE[:S]] [--lora FILE] [--embedding FILE] --prompt P [--image I] --output X.mp4|.gif|.webp

A distilled (Lightning) stack: --base-lora lightning.safetensors --steps 4 --cfg-scale 1 --shift 5 --sampler euler

SkyReels-A2's infer.py recipe: --elements SUBJECT OBJECT BACKGROUND --sampler diffusers_unipc --shift 8 --e2v-posterior sample

SkyReels-V3's reference-to-video layout (read from --lora's header, or --reference-layout skyreels_v3): --elements IMG [IMG ...] (1 to 4)
--cfg-scale 7.5 --image-guidance-scale 5 (its pipeline's defaults) --sampler diffusers_unipc --shift 5 --e2v-posterior sample"""
from __future__ import annotations

import argparse
import os

from _bootstrap import run_main  # first: import path, offline mode
from _sample_options import add_e2v_pathway_options, add_schedule_and_device_options, add_video_options


def parse_args() -> argparse.Namespace:
    from modules.config.sampling_choices import E2V_POSTERIORS, REFERENCE_LAYOUTS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="diffusers Wan folder (a base or a fine-tuned output)")
    parser.add_argument("--lora", help="LoRA file (diffusers, ComfyUI or musubi format); for two-expert models "
                                       "either expert's file, its sibling is found by name")
    parser.add_argument("--lora-scale", type=float, default=1.0,
                        help="strength the LoRA is applied with (default %(default)s)")
    parser.add_argument("--base-lora", action="append", default=[], metavar="FILE[:STRENGTH[:EXPERT]]",
                        help="a LoRA merged into the base before --lora (e.g. a Lightning speed LoRA; EXPERT high, low "
                             "or both for two-expert models); repeat for a stack. Default: the stack --lora's header "
                             "records (the base it was trained on), where the files are found")
    parser.add_argument("--no-base-loras", action="store_true",
                        help="do not merge the base LoRAs --lora's header records")
    parser.add_argument("--embedding", metavar="FILE",
                        help="textual-inversion embedding (.safetensors, key umt5xxl: ours or ComfyUI's); prompts "
                             "holding its placeholder (the file's, e.g. <sks>; else <file stem>) use its vectors")
    parser.add_argument("--force", action="store_true",
                        help="apply a LoRA whose metadata names another Wan variant (with a warning) instead of refusing it")
    parser.add_argument("--prompt", required=True, help="what the video shows")
    parser.add_argument("--negative-prompt", help="what it should not show (used with --cfg-scale above 1); default: "
                                                   "Wan's own negative prompt, as ComfyUI's Wan templates; '' for none")
    parser.add_argument("--image", help="first frame (needed by I2V models, optional for TI2V)")
    parser.add_argument("--last-image", help="last frame (first-last-frame: FLF2V models, or I2V models trained with "
                        "last_frame_condition)")
    parser.add_argument("--elements", nargs="+", metavar="IMG",
                        help="E2V reference images in layout order (subject, object, background)")
    parser.add_argument("--control-video", metavar="MP4", help="VACE models: the control video to follow (depth, pose, "
                        "edges, ... or a source video to inpaint with --control-mask); --elements are its references")
    parser.add_argument("--control-mask", metavar="MP4|PNG", help="VACE models: white where the model generates, "
                        "black where the control video is kept")
    parser.add_argument("--vace-scale", type=float, default=1.0, help="VACE models: weight of the control hints")
    parser.add_argument("--driving-video", metavar="MP4", help="Animate-2 models: the driving video whose motion "
                        "--image (the reference) follows")
    parser.add_argument("--dataset-config", help="E2V dataset JSON whose element layout (repeats, preprocessing) "
                                                 "to use; default: A2's (repeats 1/4/4)")
    add_e2v_pathway_options(parser)
    parser.add_argument("--reference-layout", default="auto", choices=("auto", *REFERENCE_LAYOUTS),
                        help="E2V: where the references enter (the training config's e2v.reference_layout): a2 "
                             "(SkyReels-A2's condition channels and CLIP) or skyreels_v3 (one latent frame each, "
                             "appended after the video's, up to 4); auto: what --lora's header names, else a2")
    for component in ("transformer", "transformer-2", "vae", "text-encoder", "image-encoder"):
        parser.add_argument(f"--{component}-file", metavar="FILE",
                            help=f"single-file {component.replace('-', ' ')} (e.g. ComfyUI's) replacing the folder's, "
                                 f"as the config key {component.replace('-', '_')}_override")
    parser.add_argument("--image-encoder", help="folder with image_encoder/ + image_processor/ for bases without "
                                                "them (E2V LoRAs trained on T2V bases with the CLIP pathway)")
    add_video_options(parser, frames=81)
    parser.add_argument("--image-guidance-scale", type=float, default=1.0,
                        help="--reference-layout skyreels_v3: image guidance against all-zero references "
                             "(SkyReels-V3's dual guidance; 1 = off)")
    parser.add_argument("--seed", type=int, default=42, help="random seed of the noise (default %(default)s)")
    parser.add_argument("--e2v-posterior", default="mode", choices=E2V_POSTERIORS,
                        help="E2V condition: the VAE posterior's mode, or a sample drawn with the seed right after "
                             "the noise (SkyReels-A2)")
    parser.add_argument("--attention-backend", default="AUTO",
                        choices=["AUTO", "NATIVE", "FLASH", "CUDNN", "FLEX", "SAGE"],
                        help="attention kernel (diffusers' dispatcher); AUTO: the first available of FLASH, CUDNN, "
                             "NATIVE on a GPU")
    add_schedule_and_device_options(parser)
    parser.add_argument("--output", required=True, help="output .mp4, .gif or .webp (a .png strip is written beside it)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    from modules.config.train_config import SampleConfig
    from modules.modelSampler.video_output import check_video_output

    # the sample's values and the output's format first, before the seconds torch and diffusers take to import
    sample = SampleConfig.from_dict({
        "prompt": args.prompt, **({"negative_prompt": args.negative_prompt} if args.negative_prompt is not None else {}), "image": args.image or "",
        "last_image": args.last_image or "",
        "elements": args.elements or [], "control_video": args.control_video or "",
        "control_mask": args.control_mask or "", "vace_scale": args.vace_scale,
        "driving_video": args.driving_video or "",
        "frames": args.frames, "height": args.height, "width": args.width, "steps": args.steps,
        "cfg_scale": args.cfg_scale, "image_guidance_scale": args.image_guidance_scale, "seed": args.seed,
        "sampler": args.sampler, "scheduler": args.scheduler, "shift": args.shift, "e2v_posterior": args.e2v_posterior,
    }, "sample")
    check_video_output(args.output)

    from modules.model.attention.backend_setup import apply_attention_backend
    from modules.model.detection import detect_variant
    from modules.model.sample_inputs import check_sample_inputs
    from modules.model.vace_e2v import check_vace_references
    from modules.modelFile.base_loras import sampling_stack
    from modules.modelFile.lora_checks import check_lora_file
    from modules.modelLoader.lora_inference import attach_lora_for_inference
    from modules.modelLoader.WanModelLoader import WanModelLoader, resolve_device
    from modules.modelSampler.comfy_workflow import workflow_models
    from modules.modelSampler.e2v_options import e2v_sampling_options, reference_layout_of
    from modules.modelSampler.WanModelSampler import WanModelSampler
    from modules.modelSaver.embedding_file import read_embedding
    from modules.util.attention_kernels import unavailable
    from modules.util.enum import AttentionBackend
    from modules.util.errors import UserError
    from modules.util.path_checks import check_input_file, check_not_an_input

    # everything else that can be checked without the weights is, before they load
    variant = detect_variant(args.model)
    if variant.vace_layers:  # no more references than training takes
        check_vace_references(len(args.elements or []), "--elements")
    check_sample_inputs(variant, sample)  # e.g. an Animate-2 model without --driving-video
    lora = check_lora_file(args.lora, variant, args.force, "--force") if args.lora else None
    base_loras = sampling_stack(args.base_lora, lora, variant, use_header=not args.no_base_loras)
    overrides = {f"{name}_override": getattr(args, f"{name}_file") or ""
                 for name in ("transformer", "transformer_2", "vae", "text_encoder", "image_encoder")}
    for key, file in overrides.items():
        if file:
            check_input_file(f"--{key.removesuffix('_override').replace('_', '-')}-file", file, "a .safetensors file")
    if args.embedding:
        check_input_file("--embedding", args.embedding, "an embedding .safetensors file")
    inputs = [("--model", args.model), ("--lora", args.lora), ("--embedding", args.embedding),
              ("--image", args.image), ("--last-image", args.last_image), ("--control-video", args.control_video),
              ("--driving-video", args.driving_video),
              ("--control-mask", args.control_mask), ("--dataset-config", args.dataset_config),
              ("--image-encoder", args.image_encoder), *(("--elements", e) for e in args.elements or []),
              *(("--base-lora", entry.path) for entry in base_loras),
              *(("--lora", file) for file in (lora.files.values() if lora is not None else ())),
              *((f"--{key.removesuffix('_override').replace('_', '-')}-file", f) for key, f in overrides.items())]
    strip = os.path.splitext(args.output)[0] + ".png"  # the frames strip written beside the video
    check_not_an_input("--output", [args.output, strip], inputs)
    model = WanModelLoader().load(args.model, resolve_device(args.device), base_loras=base_loras, **overrides)
    if args.image_encoder and model.image_encoder is None:
        model.image_encoder, model.image_processor = WanModelLoader.load_image_encoder(args.image_encoder, model.train_device)
    if lora is not None:
        attach_lora_for_inference(model, lora, args.lora_scale)
    if args.embedding:
        model.text_embedding = read_embedding(args.embedding, model.text_encoder.config.d_model, "--embedding")
        if not model.text_embedding.applies_to(args.prompt):
            print(f"note: the prompt holds no {model.text_embedding.placeholder}, so the embedding changes nothing")
    backend = AttentionBackend[args.attention_backend]
    problem = unavailable(backend, model.train_device.type, training=False) if backend != AttentionBackend.AUTO else None
    if problem:
        raise UserError(f"--attention-backend {backend.name} {problem}: choose AUTO or NATIVE")
    apply_attention_backend(model.transformers(), backend, model.train_device.type, training=False, what="sampling")
    options = e2v_sampling_options(model, args.e2v_type, args.target_layout, args.dataset_config or "",
                                   reference_layout_of(args.reference_layout, lora.metadata if lora else None))
    models = workflow_models(variant, args.model, overrides, base_loras, lora.files if lora else None, args.lora_scale)
    path = WanModelSampler(model, options, models).sample_to_file(sample, args.output)
    print(f"video written to {path} (frames strip: {path.with_suffix('.png')})")
    return 0


if __name__ == "__main__":
    run_main(main)
