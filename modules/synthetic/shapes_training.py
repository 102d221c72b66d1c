"""The recipe that teaches a tiny Wan (random transformer, the trained VAE of `tiny_vae.py`) the motifs of
`shape_clips.py`: one place for the learning tests (tests/learning_runs.py) and `scripts/demo.py`'s default demo.

A full fine-tune: LoRA on a randomly initialised transformer learns too slowly. Measured on the T2V motifs (12
clips, 48 px, 9 frames): lr 1e-3 constant for 3000 steps left the loss at 0.72 with the smallest tiny transformer
and at 0.14 with the learning size, whose samples then had the right colour and motion but shapes of any size;
lr 3e-3 with 100 warm-up steps and a cosine decay over 4000 steps reaches 0.06, and all 5 seeds of both prompts
show their colour, shape and direction. The same over 2000 steps (half the test suite's CPU time) still passes every
learning test at its threshold, and the broken trainers still fail them (tools/learning_broken_variants.py); the
A14B run needs its 2000 steps per expert (at 1500 each, both experts scored 0.7 < 0.8). The margins are thin: on
the machine that measured them the T2V red circle shows in 4 of 5 seeds (the fifth reads square-cornered) and A14B's
both experts (0.9) beat the high-noise one alone (0.6) by exactly the 0.3 asked; the other runs score 1.0. The runs
given a reference image (I2V, E2V) score 1.0 everywhere at half the steps too (REFERENCE_STEPS, 1000; at 500 an E2V
element slips to 0.8), and their broken trainers still fail there (I2V without its first frame 0.0 / 0.0, E2V
without its elements 0.0 / 0.2 / 0.0)."""
from __future__ import annotations

SIZE = 48  # 6x6 latents, 3x3 tokens a latent frame
FRAMES = 9  # 3 latent frames
STEPS = 2000
A14B_STEPS = 2 * STEPS  # both experts: STEPS each
#: The runs given a reference image (I2V's first frame, E2V's elements): it shows the colour and the place that the
#: text-only runs must learn from the caption, and they learn in half the steps (measured: the docstring).
REFERENCE_STEPS = STEPS // 2
#: Following a driver is learnt sooner than drawing a prompt: 800 steps (the cosine over them) for Animate-2
ANIMATE2_STEPS = 800
#: The sampler the learning thresholds and the demo's verdicts were measured with: the tiny folder's own scheduler
#: (diffusers' UniPC at its shift 3), not the product's ComfyUI default (uni_pc at shift 8), which a 48 px toy was
#: never tuned for.
SAMPLER = "diffusers_default"

#: Training config keys of the recipe (the caller adds model, data, workspace and output).
RECIPE = {
    "resolution": [SIZE, SIZE], "frames": FRAMES, "epochs": 100000, "max_steps": STEPS, "batch_size": 4,
    "learning_rate": 3e-3, "learning_rate_scheduler": "COSINE", "learning_rate_warmup_steps": 100,
    "training_method": "FINE_TUNE", "output_model_format": "DIFFUSERS", "checkpointing": {"policy": "NONE"},
    "compile": "OFF",  # a model this small gains nothing from compiling (AUTO would on a GPU)
}
