#!/usr/bin/env python
"""The learning tests' thresholds fail on deliberately broken trainers: runs the runs of tests/test_learning.py
with one fault patched into the training step (the sampler untouched) and prints each test's metric.

    python tools/learning_broken_variants.py [--only flip|drop|drop-e2v|swap|no-unconditional|int8-unrotated|
        drop-driving] [--work DIR]

- flip: the flow-matching target's sign flipped (x0 − ε instead of ε − x0) — T2V match rate per prompt;
- drop: the reference (first-frame latents and CLIP image tokens) zeroed while training — I2V follow rate;
- drop-e2v: the same for E2V's element references (VAE condition and CLIP tokens), on the I2V base — the
  element-decides rate;
- swap: each A14B expert trained on the other's noise range — both-experts score against each alone;
- no-unconditional: the guidance-preserving fine-tune without its unconditional pass (the target left as it is) —
  tests/test_learning_guidance.py's gap ratio;
- int8-unrotated: the int8 ConvRot forward without its activation rotation (x meets the rotated weight as it is) —
  tests/test_learning_int8.py's motif rate and profile distance;
- drop-driving: Animate-2's driving stream (its latents and CLIP tokens) zeroed while training (the driving pass
  still runs) — tests/test_learning_animate2.py's follow rate.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@contextlib.contextmanager
def patched(owner, name: str, value):
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def flipped_target():
    import modules.modelSetup.BaseWanSetup as setup

    return patched(setup, "flow_target", lambda x0, noise: x0 - noise)


def dropped_references():
    from modules.model.conditioning import VariantConditioning

    original = VariantConditioning.transformer_inputs

    def without_references(self, noisy, timesteps, prompt_embeds, payload, dtype):
        clip = None if payload.clip_embeds is None else payload.clip_embeds * 0
        return original(self, noisy, timesteps, prompt_embeds,
                        dataclasses.replace(payload, condition=None, clip_embeds=clip), dtype)

    return patched(VariantConditioning, "transformer_inputs", without_references)


def dropped_driving_stream():
    import torch

    import modules.model.conditioning as conditioning

    original = conditioning.two_pass_forward

    def without_driving(transformer, latents, condition, driving_latents, driving_condition, *args, **kwargs):
        # the all-ones mask stays (it marks every frame as driving); the latents under it are zeros
        driving_condition = torch.cat([driving_condition[:, :4], driving_condition[:, 4:] * 0], dim=1)
        args = list(args)
        args[-1] = None if args[-1] is None else args[-1] * 0  # CLIP of driving frame 0
        return original(transformer, latents, condition, driving_latents * 0, driving_condition, *args, **kwargs)

    return patched(conditioning, "two_pass_forward", without_driving)


def swapped_experts():
    from modules.model.conditioning import VariantConditioning

    original = VariantConditioning.sigma_range
    return patched(VariantConditioning, "sigma_range",
                   lambda self, expert, experts=2: original(self, 1 - expert, experts) if experts == 2 else
                   original(self, expert, experts))


def no_unconditional_pass():
    import modules.modelSetup.BaseWanSetup as setup

    stack = contextlib.ExitStack()
    stack.enter_context(patched(setup.BaseWanSetup, "unconditional_prediction", lambda self, inputs, x_t, *a: x_t))
    stack.enter_context(patched(setup, "guided_target", lambda target, unconditional, scales: target))
    return stack


def unrotated_int8_forward():
    import modules.modelSetup.int8_convrot as int8

    original = int8.int8_linear
    # the Hadamard rotation is its own inverse: rotating x first undoes the forward's own rotation
    return patched(int8, "int8_linear", lambda x, qweight, scale, bias, group, backend=None: original(
        int8.rotate(x, group), qweight, scale, bias, group, backend))


def report(what: str, rate: float) -> None:
    print(f"{what} {rate:.2f} (test threshold >= 0.80: {'PASSES' if rate >= 0.8 else 'fails'})", flush=True)


def run_flip(work: Path) -> None:
    from modules.synthetic.tiny_model import write_tiny_model
    from tests.learning_runs import T2V_MOTIFS, match_rate, sample, t2v_run

    base = write_tiny_model("t2v", work / "t2v-base", trained_vae=True)
    with flipped_target():
        model = t2v_run(base, work / "t2v-flip").model
    for motif in T2V_MOTIFS:
        report(f"flip: T2V '{motif.prompt}' match rate", match_rate(lambda prompt, seed: sample(model, prompt, seed),
                                                                    motif))


def run_drop(work: Path) -> None:
    from modules.synthetic.tiny_model import write_tiny_model
    from tests.learning_runs import I2V_FIRST_FRAMES, i2v_rate, i2v_run

    base = write_tiny_model("i2v", work / "i2v-base", trained_vae=True)
    with dropped_references():
        model = i2v_run(base, work / "i2v-drop")
    for i, first in enumerate(I2V_FIRST_FRAMES):
        rate = i2v_rate(model, first, first.write(work / f"first-{i}.png"))
        report(f"drop: I2V first frame {first} follow rate", rate)


def run_drop_e2v(work: Path) -> None:
    from modules.synthetic.tiny_model import write_tiny_model
    from tests.learning_runs import E2V_HELD_OUT, e2v_element_rate, e2v_run, write_element

    base = write_tiny_model("i2v", work / "e2v-base", trained_vae=True)
    with dropped_references():
        model = e2v_run(base, work / "e2v-drop").model
    for i, (colour, centre) in enumerate(E2V_HELD_OUT):
        element = write_element(work / f"element-{i}.png", colour, centre)
        report(f"drop-e2v: E2V {colour} element rate", e2v_element_rate(model, element, colour))


def run_swap(work: Path) -> None:
    from tests.learning_runs import A14B_MARGIN, A14B_MIN_SCORE, a14b_run, a14b_scores, write_a14b_base

    base = write_a14b_base(work / "a14b-base")
    with swapped_experts():
        model = a14b_run(base, work / "a14b-swap")
    scores = a14b_scores(model)
    verdict = "PASSES" if scores.both_beat_each_alone else "fails"
    print(f"swap: A14B score both {scores.both:.2f}, high-noise expert alone {scores.high_alone:.2f}, low-noise alone "
          f"{scores.low_alone:.2f} (test: both >= {A14B_MIN_SCORE:.2f} and >= each alone + {A14B_MARGIN}: {verdict})",
          flush=True)


def run_no_unconditional(work: Path) -> None:
    from modules.synthetic.tiny_model import write_tiny_model
    from tests.learning_runs import guidance_base, guidance_scores
    from tests.test_learning_guidance import GAP_RATIO

    base = guidance_base(write_tiny_model("t2v", work / "guidance-tiny", trained_vae=True), work / "guidance-base")
    with no_unconditional_pass():
        scores = guidance_scores(base, work / "guidance-broken")
    ratio = scores.guided_gap / scores.plain_gap
    print(f"no-unconditional: guided CFG 1 vs plain CFG s {scores.guided_gap:.3f}, plain CFG 1 vs CFG s "
          f"{scores.plain_gap:.3f}, ratio {ratio:.3f} (test: < {GAP_RATIO}: {'PASSES' if ratio < GAP_RATIO else 'fails'})",
          flush=True)


def run_int8_unrotated(work: Path) -> None:
    from modules.synthetic.tiny_model import write_tiny_model
    from tests.learning_runs import INT8_BASE, int8_lora_clips, profile_distance, shows_motif, t2v_run
    from tests.test_learning_int8 import PROFILE_DISTANCE

    base = t2v_run(write_tiny_model("t2v", work / "int8-tiny", trained_vae=True), work / "int8-base",
                   **INT8_BASE).output
    stored = int8_lora_clips(base, work / "int8-stored", "BF16")
    with unrotated_int8_forward():
        broken = int8_lora_clips(base, work / "int8-broken", "INT8_CONVROT")
    rate, distance = sum(map(shows_motif, broken)) / len(broken), profile_distance(broken, stored)
    verdict = "PASSES" if rate >= 0.8 and distance < PROFILE_DISTANCE else "fails"
    print(f"int8-unrotated: motif rate {rate:.2f}, profile distance to the stored base {distance:.3f} (test: rate "
          f">= 0.8 and distance < {PROFILE_DISTANCE}: {verdict})", flush=True)


def run_drop_driving(work: Path) -> None:
    from tests.learning_runs import ANIMATE2_HELD_OUT, animate2_rate, animate2_run, write_animate2_base

    base = write_animate2_base(work / "animate2-base")
    with dropped_driving_stream():
        model = animate2_run(base, work / "animate2-drop")
    for colour, direction, start in ANIMATE2_HELD_OUT:
        report(f"drop-driving: Animate-2 {colour} reference driven {direction} follow rate",
               animate2_rate(model, colour, direction, start, work / "animate2-held-out"))


RUNS = {"flip": run_flip, "drop": run_drop, "drop-e2v": run_drop_e2v, "swap": run_swap,
        "no-unconditional": run_no_unconditional, "int8-unrotated": run_int8_unrotated,
        "drop-driving": run_drop_driving}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(RUNS), action="append", help="run only these faults")
    parser.add_argument("--work", default=None, help="folder for the runs (default: a temporary one)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # the learning tests' arithmetic (tests/test_learning.py)
    with contextlib.ExitStack() as stack:
        work = Path(args.work) if args.work else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for name in args.only or list(RUNS):
            RUNS[name](work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
