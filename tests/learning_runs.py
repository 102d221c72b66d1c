"""Training runs of the learning tests (tests/test_learning.py) and of tools/learning_broken_variants.py:
a tiny Wan with the trained VAE (modules/synthetic/tiny_vae.py), fully fine-tuned from scratch with the project's
own trainer on clips of coloured shapes, then sampled with the project's own sampler and measured with colour
masks and centroids (modules/synthetic/shape_clips.py)."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modules.synthetic.shape_clips import BLUE_SQUARE_DOWN, RED_CIRCLE_RIGHT, Motif, matches, write_motif_dataset
from modules.synthetic.shapes_training import A14B_STEPS, ANIMATE2_STEPS, FRAMES, RECIPE, REFERENCE_STEPS, SAMPLER, SIZE

SEEDS = range(5)  # sampling seeds per prompt (>= 80 %: 4 of 5)
T2V_MOTIFS = (RED_CIRCLE_RIGHT, BLUE_SQUARE_DOWN)


def learning_config(model: Path, data: Path, work: Path, **overrides) -> dict:
    """The shapes recipe (modules/synthetic/shapes_training.py: a full fine-tune from scratch) on `data`."""
    config = {
        **RECIPE, "base_model_name": str(model), "concepts": [{"path": str(data)}],
        "tensorboard": False, "sample_at_end": False,
        "backup_after_unit": "NEVER", "workspace_dir": str(work / "workspace"), "cache_dir": str(work / "cache"),
        "output_model_destination": str(work / "output"),
    }
    config.update(overrides)
    return config


def train(config: dict):
    """The project's own trainer, start to end (saves the output); returns the trainer (model still loaded)."""
    from modules.config.train_config import TrainConfig
    from modules.trainer.GenericTrainer import GenericTrainer
    from tests.torch_threads import one_torch_thread

    # one CPU thread, as the thresholds were measured: a 2000-step run is chaotic, another thread count sums in
    # another order (the runs are session fixtures, set up before the tests' own one-thread fixture)
    with one_torch_thread():
        trainer = GenericTrainer(TrainConfig.from_dict(config))
        trainer.start()
        trainer.train()
        trainer.end()
    return trainer


def sample(model, prompt: str, seed: int, image: str = "", elements: list[str] | None = None,
           frames: int = FRAMES, cfg: float = 1.0, driving_video: str = "") -> np.ndarray:
    """uint8 (F, H, W, 3) from the project's own sampler (CFG 1 unless `cfg`: against the empty prompt, which the
    T2V run's caption dropout trains)."""
    from modules.config.train_config import SampleConfig
    from modules.modelSampler.WanModelSampler import WanModelSampler

    # negative "": the runs' unconditional prompt is the empty caption (caption dropout), not Wan's negative prompt
    config = SampleConfig(prompt=prompt, negative_prompt="", frames=frames, height=SIZE, width=SIZE, steps=12,
                          cfg_scale=cfg, seed=seed, sampler=SAMPLER, image=image, elements=list(elements or []),
                          driving_video=driving_video)
    return WanModelSampler(model).generate(config, show_progress=False)


@dataclass
class T2VRun:
    model: object  # WanModel, trained
    output: Path  # the saved diffusers folder


def t2v_run(tiny_variant_dir: Path, work: Path, **overrides) -> T2VRun:
    data = write_motif_dataset(work / "data", list(T2V_MOTIFS), clips_per_motif=6, frames=FRAMES, height=SIZE,
                               width=SIZE, seed=1)
    trainer = train(learning_config(tiny_variant_dir, data, work, **overrides))
    return T2VRun(trainer.model, Path(trainer.config.output_model_destination))


def match_rate(generate, motif: Motif) -> float:
    """Fraction of SEEDS whose sample shows the motif's colour, shape and direction (`generate(prompt, seed)`)."""
    return float(np.mean([matches(generate(motif.prompt, seed), motif) for seed in SEEDS]))


# --- I2V: the first frame decides colour and start position -------------------------------------------------

I2V_CAPTION = "a circle moving right"  # the same for every clip: only the first frame tells the colour
I2V_COLOURS = ("red", "green", "blue")


def i2v_run(tiny_variant_dir: Path, work: Path, **overrides):
    motifs = [Motif("circle", colour, "right") for colour in I2V_COLOURS]
    data = write_motif_dataset(work / "data", motifs, clips_per_motif=4, frames=FRAMES, height=SIZE, width=SIZE,
                               seed=2, caption=I2V_CAPTION)
    return train(learning_config(tiny_variant_dir, data, work, **{"max_steps": REFERENCE_STEPS, **overrides})).model


@dataclass(frozen=True)
class FirstFrame:
    colour: str
    start: tuple[float, float]  # centre (x, y) at frame 0

    def write(self, path: Path) -> Path:
        from PIL import Image

        from modules.synthetic.shape_clips import directed_motion, render

        motion = directed_motion("circle", self.colour, "right", np.random.default_rng(0), SIZE, SIZE, FRAMES,
                                 start=self.start)
        Image.fromarray(render(motion, 1, SIZE, SIZE)[0]).save(path)
        return path


#: Held-out first frames: positions no training clip started from exactly, colours the run trained.
I2V_FIRST_FRAMES = (FirstFrame("green", (12.0, 13.0)), FirstFrame("red", (14.0, 35.0)))


def i2v_follows(frames: np.ndarray, first: FirstFrame) -> bool:
    """The first frame's colour shows in the generated frames (>= 2 % of pixels, twice any other colour), the
    centroid of frame 1 lies within 8 px of the start, and it moves right (> 0.3 px/frame)."""
    from modules.synthetic.shape_clips import centroids, measure

    verdict = measure(frames[1:], Motif("circle", first.colour, "right"))
    path = centroids(frames[1:2], first.colour)[0]
    near = not np.isnan(path).any() and float(np.hypot(*(path - np.array(first.start)))) < 8.0
    return verdict.colour_ok and near and verdict.moves_ok


def i2v_rate(model, first: FirstFrame, image: Path) -> float:
    return float(np.mean([i2v_follows(sample(model, I2V_CAPTION, seed, image=str(image)), first) for seed in SEEDS]))


# --- A14B: two experts, each trained on its own noise range ---------------------------------------------------

#: The tiny A14B's expert switch in these runs (its model_index.json `boundary_ratio`; the variant's own is 0.875).
#: A 48 px motif is decided at lower noise than a 720p video: at 0.875 the low-noise expert (trained on σ < 0.875)
#: generates the whole motif alone (measured: both experts 0.9, it alone 1.0); at 0.64 (the real T2V A14B's share
#: of high-noise steps: 8 of 12 under the tiny shift 3, 26 of 40 under its shift 12) it still often does (0.5, 0.9,
#: 0.7 over three training seeds). At 0.5 (10 of 12 steps high-noise) each expert alone fails on all three seeds:
#: the high-noise one gives colour and motion but rounds the square (0.6, 0.5, 0.5), the low-noise one loses the
#: colour (0.1, 0.0, 0.0), both experts 1.0.
A14B_BOUNDARY = 0.5
A14B_MIN_SCORE = 0.8  # both experts
A14B_MARGIN = 0.3  # both experts above each one alone


def write_a14b_base(folder: Path) -> Path:
    """The tiny A14B with the trained VAE, its experts switching at A14B_BOUNDARY."""
    import json

    from modules.synthetic.tiny_model import write_tiny_model

    base = write_tiny_model("a14b", folder, trained_vae=True)
    index_file = base / "model_index.json"
    index = json.loads(index_file.read_text(encoding="utf-8"))
    index["boundary_ratio"] = A14B_BOUNDARY
    index_file.write_text(json.dumps(index, indent=2), encoding="utf-8")
    return base


def a14b_run(base: Path, work: Path, **overrides):
    """Both experts trained on the T2V motifs, STEPS each (each learns only its own noise range); returns
    the trained model."""
    data = write_motif_dataset(work / "data", list(T2V_MOTIFS), clips_per_motif=6, frames=FRAMES, height=SIZE,
                               width=SIZE, seed=1)
    values = {"train_expert": "BOTH", "expert_step_share": 0.5, "max_steps": A14B_STEPS, **overrides}
    return train(learning_config(base, data, work, **values)).model


@contextlib.contextmanager
def expert_alone(model, expert: int):
    """`model` sampling with expert `expert` (0 high noise, 1 low noise) at every step."""
    both = model.transformer, model.transformer_2
    model.transformer = model.transformer_2 = both[expert]
    try:
        yield model
    finally:
        model.transformer, model.transformer_2 = both


def t2v_score(model) -> float:
    """Mean T2V match rate over both motifs (the A14B comparison's metric)."""
    return float(np.mean([match_rate(lambda prompt, seed: sample(model, prompt, seed), motif) for motif in T2V_MOTIFS]))


@dataclass
class ExpertScores:
    both: float
    high_alone: float
    low_alone: float

    @property
    def both_beat_each_alone(self) -> bool:
        return self.both >= A14B_MIN_SCORE and self.both >= max(self.high_alone, self.low_alone) + A14B_MARGIN


def a14b_scores(model) -> ExpertScores:
    """t2v_score sampling with both experts, with the high-noise one alone and with the low-noise one alone."""
    with expert_alone(model, 0):
        high = t2v_score(model)
    with expert_alone(model, 1):
        low = t2v_score(model)
    return ExpertScores(t2v_score(model), high, low)


# --- E2V (A2 layout): the element image decides which shape appears -------------------------------------------

E2V_CAPTION = "a shape moving right"  # the same for every clip: only the element tells the colour
E2V_COLOURS = ("red", "green", "blue")
#: One subject element (repeat 1) takes one latent frame, so 4 sample frames (docs/e2v.md §6, separate layout):
#: 13 sample frames give the same 9 video frames as the other runs.
E2V_SAMPLE_FRAMES = FRAMES + 4


def write_element(path: Path, colour: str, centre: tuple[float, float] = (SIZE / 2, SIZE / 2)) -> Path:
    """A subject element: the colour's circle on the clips' grey. (On white, as A2's cut-outs are, the decoded
    video starts from the reference frame's white: the causal VAE decodes it with the video, and the first
    frames came out pale, under the colour masks' tolerance.)"""
    from PIL import Image

    from modules.synthetic.shape_clips import COLOURS, MOTIF_RADIUS, ShapeMotion, render

    still = ShapeMotion("circle", COLOURS[colour], centre, (0.0, 0.0), MOTIF_RADIUS * SIZE)
    Image.fromarray(render(still, 1, SIZE, SIZE)[0]).save(path)
    return path


def write_e2v_motif_dataset(folder: Path, clips_per_colour: int, seed: int) -> Path:
    """`NNN.mp4` (a circle moving right, its colour one of E2V_COLOURS), `NNN.txt` (E2V_CAPTION) and
    `NNN_subject.png` (that circle on white, at a random place), and the dataset JSON beside the folder."""
    import json

    from modules.synthetic.shape_clips import Motif, directed_motion, render
    from modules.util.video_write import write_video

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    index = 0
    for _ in range(clips_per_colour):
        for colour in E2V_COLOURS:
            motif = Motif("circle", colour, "right")
            video = render(directed_motion(motif.shape, colour, "right", rng, SIZE, SIZE, FRAMES), FRAMES, SIZE, SIZE)
            write_video(folder / f"{index:03d}.mp4", video, 16.0)
            (folder / f"{index:03d}.txt").write_text(E2V_CAPTION, encoding="utf-8")
            centre = tuple(float(v) for v in rng.uniform(0.3 * SIZE, 0.7 * SIZE, 2))
            write_element(folder / f"{index:03d}_subject.png", colour, centre)
            index += 1
    dataset = {"datasets": [{
        "data_root": str(folder), "dataset_type": "e2v", "target_resolution": [SIZE, SIZE],
        "max_frames": E2V_SAMPLE_FRAMES,
        "elements": [{"name": "subject", "suffixes": ["_subject.png"], "required": True,
                      "vae": {"repeat": 1, "position": 0}, "clip": {"preprocess": "pad_white"}}],
        "processors": {"vae": {"combine": "before", "default_preprocess": "pad_white"},
                       "clip": {"resolution": [224, 224], "default_preprocess": "pad_white"}},
    }]}
    path = folder.with_suffix(".json")
    path.write_text(json.dumps(dataset, indent=2), encoding="utf-8")
    return path


@dataclass
class E2VRun:
    model: object  # WanModel, trained (a T2V base expanded for E2V)
    output: Path  # the saved diffusers folder (FINE_TUNE, DIFFUSERS)


def e2v_run(tiny_variant_dir: Path, work: Path, **overrides) -> E2VRun:
    dataset = write_e2v_motif_dataset(work / "data", clips_per_colour=4, seed=3)
    config = learning_config(tiny_variant_dir, work / "data", work, **{"max_steps": REFERENCE_STEPS, **overrides})
    config.update({"concepts": [], "dataset_config": str(dataset), "frames": E2V_SAMPLE_FRAMES})
    trainer = train(config)
    return E2VRun(trainer.model, Path(trainer.config.output_model_destination))


#: Held-out elements: each trained colour, at a place no training element had exactly.
E2V_HELD_OUT = (("green", (20.0, 27.0)), ("blue", (28.0, 22.0)), ("red", (25.0, 25.0)))


def e2v_shows(frames: np.ndarray, colour: str) -> bool:
    """The element's colour shows (>= 2 % of pixels) and the trained colours it did not give are absent: each
    covers under a fifth of what the given colour covers. (Not zero: the tiny VAE fringes a red edge with ~2 %
    green pixels; another circle would cover about as much as the given one.)"""
    from modules.synthetic.shape_clips import coverage

    given = coverage(frames, colour)
    return given >= 0.02 and all(coverage(frames, other) < 0.2 * given for other in E2V_COLOURS if other != colour)


def e2v_element_rate(model, element: Path, colour: str) -> float:
    """`e2v_rate` of the project's own sampler given `element` as the subject."""
    return e2v_rate(lambda seed: sample(model, E2V_CAPTION, seed, elements=[str(element)], frames=E2V_SAMPLE_FRAMES),
                    colour)


def e2v_rate(generate, colour: str) -> float:
    """Fraction of SEEDS whose video (`generate(seed)`, the reference frames already dropped) shows `colour` only."""
    return float(np.mean([e2v_shows(generate(seed), colour) for seed in SEEDS]))


# --- guidance-preserving fine-tune: a new motif on a T2V toy trained with caption dropout --------------------------

GUIDANCE_SCALE = 3.0
#: The toy base: the T2V motifs, a short run of the recipe with caption dropout (what CFG needs: an unconditional
#: prediction). Short on purpose (CI time); it only has to know text from no text.
GUIDANCE_BASE = {"max_steps": 300, "caption_dropout_probability": 0.2}
#: The fine-tune on the new motif: short, so a plain run shows it at CFG s more strongly than at CFG 1.
MOTIF_FINETUNE = {"max_steps": 60, "learning_rate": 1e-3, "learning_rate_scheduler": "CONSTANT",
                  "learning_rate_warmup_steps": 0}


def guidance_base(tiny_variant_dir: Path, work: Path) -> Path:
    """The saved DIFFUSERS folder of the toy base (GUIDANCE_BASE)."""
    return t2v_run(tiny_variant_dir, work, **GUIDANCE_BASE).output


def motif_finetune(base: Path, work: Path, scale: float = 0.0):
    """`base` fine-tuned on GREEN_TRIANGLE_LEFT alone (a colour, shape and direction it never saw): plainly (`scale`
    0) or with the guidance-preserving target at `scale` (the empty unconditional prompt, as the base's caption
    dropout trained it); returns the trained model."""
    from modules.synthetic.shape_clips import GREEN_TRIANGLE_LEFT

    data = write_motif_dataset(work / "data", [GREEN_TRIANGLE_LEFT], clips_per_motif=4, frames=FRAMES, height=SIZE,
                               width=SIZE, seed=3)
    values = {**MOTIF_FINETUNE, "guidance_preserving": {"scale": scale}}
    return train(learning_config(base, data, work, **values)).model


def motif_samples(model, cfg: float) -> list[np.ndarray]:
    """GREEN_TRIANGLE_LEFT sampled at classifier-free guidance `cfg`, one clip per seed of SEEDS."""
    from modules.synthetic.shape_clips import GREEN_TRIANGLE_LEFT

    return [sample(model, GREEN_TRIANGLE_LEFT.prompt, seed, cfg=cfg) for seed in SEEDS]


def shows_motif(frames: np.ndarray) -> bool:
    """Green (>= 2 % of pixels, twice any other colour), moving left (> 0.3 px/frame, more than across) and not read
    as a square (the corner ratio tells squares from round blobs; a triangle reads about 1.06, a circle 1)."""
    from modules.synthetic.shape_clips import GREEN_TRIANGLE_LEFT, measure

    verdict = measure(frames, GREEN_TRIANGLE_LEFT)
    return verdict.colour_ok and verdict.moves_ok and not verdict.shape_is("square")


def motif_profile(frames: np.ndarray) -> np.ndarray:
    """The motif's measurements of one clip as a vector: green coverage, other colours' coverage (in % of pixels),
    centroid slope along and across the motion (px/frame), blob corner ratio (x10): units of similar spread."""
    from modules.synthetic.shape_clips import GREEN_TRIANGLE_LEFT, measure

    v = measure(frames, GREEN_TRIANGLE_LEFT)
    return np.nan_to_num(np.array([100 * v.coverage, 100 * v.other_coverage, v.slope_along, v.slope_across,
                                   10 * v.corners]), nan=0.0)


def profile_distance(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """Mean over seeds of the Euclidean distance between the two clips' motif_profile."""
    return float(np.mean([np.linalg.norm(motif_profile(x) - motif_profile(y)) for x, y in zip(a, b)]))


@dataclass
class GuidanceScores:
    """Clips of the new motif after each fine-tune, and how close CFG 1 after the guidance-preserving one comes to
    CFG s after the plain one."""

    plain_at_1: list[np.ndarray]
    plain_at_s: list[np.ndarray]
    guided_at_1: list[np.ndarray]

    @property
    def plain_gap(self) -> float:
        """profile_distance(plain at CFG 1, plain at CFG s): what guidance adds after a plain fine-tune."""
        return profile_distance(self.plain_at_1, self.plain_at_s)

    @property
    def guided_gap(self) -> float:
        """profile_distance(guided at CFG 1, plain at CFG s)."""
        return profile_distance(self.guided_at_1, self.plain_at_s)

    def rate(self, clips: list[np.ndarray]) -> float:
        return float(np.mean([shows_motif(frames) for frames in clips]))


def guidance_scores(base: Path, work: Path) -> GuidanceScores:
    """Both fine-tunes of `base` on the new motif and their samples (GUIDANCE_SCALE)."""
    plain = motif_finetune(base, work / "plain")
    plain_at_1, plain_at_s = motif_samples(plain, 1.0), motif_samples(plain, GUIDANCE_SCALE)
    del plain
    guided = motif_finetune(base, work / "guided", GUIDANCE_SCALE)
    return GuidanceScores(plain_at_1, plain_at_s, motif_samples(guided, 1.0))


# --- a LoRA on an int8 ConvRot base: the new motif learned as on the unquantised base ------------------------------

#: The toy base: the T2V motifs, a short run of the recipe (its weights only have to be worth quantising).
INT8_BASE = {"max_steps": 300}
#: The LoRA on the new motif, on the base as stored (float32 here) and quantised at load (INT8_CONVROT).
INT8_LORA = {"training_method": "LORA", "lora_rank": 16, "lora_alpha": 16, "max_steps": 100, "learning_rate": 5e-3,
             "learning_rate_scheduler": "CONSTANT", "learning_rate_warmup_steps": 0}


def int8_lora_clips(base: Path, work: Path, base_weight_format: str) -> list[np.ndarray]:
    """`base` with a LoRA fine-tuned on GREEN_TRIANGLE_LEFT alone, its base weights in `base_weight_format`;
    the motif's clips at CFG 1, one per seed of SEEDS."""
    from modules.synthetic.shape_clips import GREEN_TRIANGLE_LEFT

    data = write_motif_dataset(work / "data", [GREEN_TRIANGLE_LEFT], clips_per_motif=4, frames=FRAMES, height=SIZE,
                               width=SIZE, seed=3)
    config = learning_config(base, data, work, **INT8_LORA, base_weight_format=base_weight_format)
    config.pop("output_model_format")  # a LoRA file, not the recipe's DIFFUSERS folder
    return motif_samples(train(config).model, 1.0)


# --- Animate-2: the driving video moves the reference's colour ------------------------------------------------------

ANIMATE2_CAPTION = "a circle moving"  # the same for every clip: the reference tells the colour, the driving video where
ANIMATE2_COLOURS = ("red", "green", "blue")
ANIMATE2_DIRECTIONS = ("right", "down", "left", "up")
#: The driving stream's performer: another shape in a colour no target has (a run that copies it shows yellow)
DRIVER_SHAPE, DRIVER_COLOUR = "square", "yellow"
#: The model's own frame rate: neither stream is resampled
ANIMATE2_FPS = 24.0


@dataclass(frozen=True)
class DrivenClip:
    """A target clip's motion: the colour's circle where the driving square is, frame by frame."""

    colour: str
    direction: str
    motion: object  # ShapeMotion of the target (the driver has its start, velocity and size)

    def target(self) -> np.ndarray:
        from modules.synthetic.shape_clips import render

        return render(self.motion, FRAMES, SIZE, SIZE)

    def driving(self) -> np.ndarray:
        from modules.synthetic.shape_clips import COLOURS, render

        return render(dataclasses.replace(self.motion, shape=DRIVER_SHAPE, rgb=COLOURS[DRIVER_COLOUR]), FRAMES, SIZE,
                      SIZE)

    def path(self) -> np.ndarray:
        """(F, 2) the circle's centre (x, y) in each frame."""
        start, velocity = np.array(self.motion.start), np.array(self.motion.velocity)
        return start + np.arange(FRAMES)[:, None] * velocity


def driven_clip(colour: str, direction: str, rng: np.random.Generator, start=None) -> DrivenClip:
    from modules.synthetic.shape_clips import directed_motion

    motion = directed_motion("circle", colour, direction, rng, SIZE, SIZE, FRAMES, start=start)
    return DrivenClip(colour, direction, motion)


def write_animate2_motif_dataset(folder: Path, clips_per_pair: int, seed: int) -> Path:
    """`NNN.mp4` (a circle of one of ANIMATE2_COLOURS moving one of ANIMATE2_DIRECTIONS), `NNN_driving.mp4` (the
    yellow square on the same path), `NNN_reference.png` (the circle at a random place) and `NNN.txt`."""
    from modules.util.video_write import write_video

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    index = 0
    for _ in range(clips_per_pair):
        for colour in ANIMATE2_COLOURS:
            for direction in ANIMATE2_DIRECTIONS:
                clip = driven_clip(colour, direction, rng)
                write_video(folder / f"{index:03d}.mp4", clip.target(), ANIMATE2_FPS)
                write_video(folder / f"{index:03d}_driving.mp4", clip.driving(), ANIMATE2_FPS)
                (folder / f"{index:03d}.txt").write_text(ANIMATE2_CAPTION, encoding="utf-8")
                centre = tuple(float(v) for v in rng.uniform(0.3 * SIZE, 0.7 * SIZE, 2))
                write_element(folder / f"{index:03d}_reference.png", colour, centre)  # where it stands: not the video's
                index += 1
    return folder


def write_animate2_base(folder: Path) -> Path:
    from modules.synthetic.tiny_animate2 import write_tiny_animate2

    return write_tiny_animate2(folder, trained_vae=True)


ANIMATE2_CLIPS_PER_PAIR = 3


def animate2_run(base: Path, work: Path, **overrides):
    """The recipe on the driven clips (a full fine-tune of the random Animate-2 transformer), ANIMATE2_STEPS long;
    the trained model."""
    data = write_animate2_motif_dataset(work / "data", clips_per_pair=ANIMATE2_CLIPS_PER_PAIR, seed=5)
    return train(learning_config(base, data, work, **{"max_steps": ANIMATE2_STEPS, **overrides})).model


#: Held-out pairs: a reference colour and a driving path (from a start no training clip had exactly)
ANIMATE2_HELD_OUT = (("green", "right", (12.0, 20.0)), ("red", "up", (30.0, 36.0)), ("blue", "down", (20.0, 12.0)))


def animate2_follows(frames: np.ndarray, clip: DrivenClip) -> bool:
    """The reference's colour shows (>= 2 % of pixels, twice any other colour, the driver's yellow included), its
    centroid moves the driver's way (> 0.3 px/frame, more than across) and stays within 8 px of the driver's centre
    on average over the frames."""
    from modules.synthetic.shape_clips import Motif, centroids, measure

    verdict = measure(frames, Motif("circle", clip.colour, clip.direction))
    path = centroids(frames, clip.colour)
    seen = ~np.isnan(path).any(axis=1)
    near = seen.sum() >= 3 and float(np.mean(np.hypot(*(path[seen] - clip.path()[seen]).T))) < 8.0
    return verdict.colour_ok and verdict.moves_ok and near


def animate2_rate(model, colour: str, direction: str, start: tuple[float, float], work: Path) -> float:
    """Fraction of SEEDS whose sample of the held-out pair (`colour`'s reference, the driver moving `direction` from
    `start`) follows the driver in the reference's colour."""
    from modules.util.video_write import write_video

    clip = driven_clip(colour, direction, np.random.default_rng(0), start=start)
    work.mkdir(parents=True, exist_ok=True)
    driving = work / f"held-out-{colour}-{direction}_driving.mp4"
    write_video(driving, clip.driving(), ANIMATE2_FPS)
    reference = write_element(work / f"held-out-{colour}_reference.png", colour, (SIZE / 2, SIZE / 2))
    return float(np.mean([animate2_follows(sample(model, ANIMATE2_CAPTION, seed, image=str(reference),
                                                  driving_video=str(driving)), clip) for seed in SEEDS]))
