"""One verdict on a config's concepts, before any model loads: per concept, which samples train (the planned items)
and which are skipped, by reason, and what refuses the run. The trainer's start-up (`trainer/preflight.py`, whose
items the data loader then encodes, so nothing is judged twice), `scripts/dataset_stats.py` and the GUI's concepts
tab (Count clips, and the line beside each concept: `concept_verdict`) all ask this module.

Per family (what the base reads beside each clip):
- every base: the clip is a regular, readable file with at least one frame (probed: frame count at the training fps
  and size, cached with the latents); with masked_training its mask is beside it;
- Wan2.2-Animate-2: its driving video and reference image are beside it (`animate2_triplets.py`), and the driving
  video is not the target itself (the copying trap: refuses the run, naming the file);
- VACE: `<name>_control.mp4` and `_control_mask` files are a clip's inputs, never clips.
An E2V dataset (`dataset_config`) has its own checks (`dataLoader/e2v/`)."""
from __future__ import annotations

import collections
import dataclasses
import logging
from pathlib import Path

from modules.config.loading import load_concepts
from modules.config.train_config import ConceptConfig, TrainConfig
from modules.dataLoader.animate2_triplets import (
    DRIVING_SUFFIX,
    REFERENCE_SUFFIX,
    check_not_a_copy,
    is_stream_file,
    triplet_for,
)
from modules.dataLoader.cache import DiskCache, file_fingerprint
from modules.dataLoader.concept_options import concept_options
from modules.dataLoader.concept_selection import check_concepts
from modules.dataLoader.discovery import RawSample
from modules.dataLoader.errors import BAD_DRIVING, MISSING_FILE, DataError
from modules.dataLoader.frames import largest_4k1
from modules.dataLoader.item_plan import ItemPlanner, PlannedItem
from modules.dataLoader.masks import BAD_MASK, MISSING_MASK
from modules.dataLoader.skips import SkipCounter, SkippedSample
from modules.dataLoader.video_io import probe_video
from modules.model.folder_facts import is_animate2_base
from modules.model.vace_e2v import is_vace_folder
from modules.util.enum import ConceptType
from modules.util.errors import UserError

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ConceptVerdict:
    concept: ConceptConfig
    key: str  # the config key to show it beside: "concepts[2]" ("concepts" for a concept file)
    files: list[RawSample]  # the media files found (a clip's side files and masks are no files of their own)
    items: list[PlannedItem]  # what trains: every window x length x resolution of each usable sample
    skipped: list[SkippedSample]  # each skipped file with its reason
    error: str = ""  # why this concept stops the run before any model loads ("" when it does not)

    @property
    def usable(self) -> int:
        """Samples that give at least one item."""
        return len({item.sample.media_path for item in self.items})

    def skip_counts(self) -> dict[str, int]:
        return dict(collections.Counter(entry.category for entry in self.skipped))

    def summary(self) -> str:
        """One line for the GUI and the logs: "5 files: 3 usable, 2 skipped (missing file: 2)", or the error."""
        if self.error:
            return self.error
        counts = ", ".join(f"{reason}: {n}" for reason, n in self.skip_counts().items())
        skipped = f", {len(self.skipped)} skipped ({counts})" if self.skipped else ""
        return f"{len(self.files)} files: {self.usable} usable{skipped}"


def never_data(config: TrainConfig) -> list[Path]:
    """The run's own folders: its workspace (runs, samples), cache and output never train it, wherever they are."""
    found = [Path(config.workspace_dir), Path(config.cache_dir)]
    if config.output_model_destination:
        found.append(Path(config.output_model_destination))
    return found


def data_family(config: TrainConfig) -> str:
    """'animate_2', 'vace' or 'clips': what the base reads beside each clip (torch-free, from the folder's JSON)."""
    if is_animate2_base(config.base_model_name):
        return "animate_2"
    return "vace" if is_vace_folder(config.base_model_name) else "clips"


def side_files_of(family: str):
    """The files beside a clip that its base reads as the clip's inputs, not as clips (None: every file is a clip)."""
    if family == "vace":
        from modules.dataLoader.vace_modules import is_control_file  # here: it imports the model's classes

        return is_control_file
    return is_stream_file if family == "animate_2" else None


def run_fps(config: TrainConfig) -> float:
    """The fps clips train at: the config's, else the variant's (read from the folder's JSON, no weights)."""
    if config.fps:
        return config.fps
    from modules.model.detection import detect_variant  # here: the registry imports diffusers' classes

    return detect_variant(config.base_model_name).fps


class DataVerdict:
    """The verdicts of one config's concepts (one planner and cache for all of them). `use_cache`: the clips'
    probes are read from (and written to) the run's cache when latent caching is on, as training reads them."""

    def __init__(self, config: TrainConfig, fps: float | None = None, use_cache: bool = True):
        self.config = config
        self.family = data_family(config)
        cache = DiskCache(config.cache_dir) if use_cache and config.latent_caching else None
        self.planner = ItemPlanner(fps or run_fps(config), config.transparent_background, cache, config.seed,
                                   config.max_frame_pixels, side_files=side_files_of(self.family),
                                   not_data=never_data(config))

    def concepts(self, concept_type: ConceptType | None = None) -> list[tuple[str, ConceptConfig]]:
        """(key, concept) of every enabled concept (of `concept_type`), in config order."""
        config = self.config
        if isinstance(config.concepts, str):
            return [("concepts", c) for c in load_concepts(config.concepts)
                    if c.enabled and concept_type in (None, c.type)]
        return [(f"concepts[{i}]", c) for i, c in enumerate(config.concepts)
                if c.enabled and concept_type in (None, c.type)]

    def all(self, concept_type: ConceptType | None = None) -> list[ConceptVerdict]:
        return [self.concept(concept, key) for key, concept in self.concepts(concept_type)]

    def concept(self, concept: ConceptConfig, key: str = "concepts") -> ConceptVerdict:
        """One concept's verdict; a concept path that is not there is its error."""
        skips = SkipCounter()
        try:
            files = self.planner.samples(concept, skips)
        except UserError as e:
            return ConceptVerdict(concept, key, [], [], skips.entries, error=str(e))
        usable = [sample for sample in files if self._has_inputs(sample, skips)]
        if self.family == "animate_2" and files and not usable:
            return ConceptVerdict(concept, key, files, [], skips.entries, error=_no_triplets(concept))
        items = self.planner.plan(concept, concept_options(concept, self.config), skips, always_probe=True,
                                  samples=usable)
        error = ""
        if self.family == "animate_2":
            items = self._driven(items, skips)
            error = _copying_trap(items)
        return ConceptVerdict(concept, key, files, [] if error else items, skips.entries, error)

    def _has_inputs(self, sample: RawSample, skips: SkipCounter) -> bool:
        """What the family reads beside the clip is there (counted as the loader counts it when it is not)."""
        if self.config.masked_training:
            path = sample.mask_path
            if path is None:
                skips.record(sample.media_path, MISSING_MASK, "masked_training is on and it has no "
                             f"{sample.media_path.stem}-masklabel.png or .mp4 beside it")
                return False
            try:
                file_fingerprint(path)
            except OSError as e:
                skips.record(path, BAD_MASK, f"cannot read the mask ({e})")
                return False
        if self.family == "animate_2":
            found = triplet_for(sample.media_path)
            if isinstance(found, str):
                skips.record(sample.media_path, MISSING_FILE, f"Animate-2 needs its inputs beside it: {found}")
                return False
        return True

    def _driven(self, items: list[PlannedItem], skips: SkipCounter) -> list[PlannedItem]:
        """The items whose driving video and reference image read and whose driving video covers the window (at the
        clip's fps, as the loader decodes it); a sample that fails is skipped and counted once, as the loader would
        at its first window."""
        kept, failed, driving_frames = [], set(), {}
        for item in items:
            path = item.sample.media_path
            if path in failed:
                continue
            triplet = triplet_for(path)
            fps = item.clip["fps"]
            try:
                if (triplet.driving, fps) not in driving_frames:
                    probe_video(triplet.reference, 1.0)  # decodes: a broken reference is this sample's skip
                    driving_frames[triplet.driving, fps] = self.planner.probe(
                        triplet.driving, file_fingerprint(triplet.driving), fps, False).frames
            except (DataError, OSError) as e:
                failed.add(path)
                skips.record(getattr(e, "path", triplet.driving), BAD_DRIVING, getattr(e, "reason", str(e)))
                continue
            needed, held = _window_end(item), driving_frames[triplet.driving, fps]
            if held < needed:
                failed.add(path)
                skips.record(triplet.driving, BAD_DRIVING, f"the driving video holds {held} frames at {fps:g} fps, its "
                             f"clip's window ends at frame {needed}: give it at least the clip's length")
                continue
            kept.append(item)
        return kept


def _window_end(item: PlannedItem) -> int:
    """The frame a planned window ends at, as the loader's decoder cuts it (a RANDOM window: anywhere in the clip)."""
    start, total = item.clip["start"], item.probe.frames
    if start is None:
        return total
    return start + largest_4k1(max(1, min(item.clip["frames"], total - start)))


def _no_triplets(concept: ConceptConfig) -> str:
    return (f"concept '{concept.path}': no clip has its Animate-2 inputs beside it: put '<name>{DRIVING_SUFFIX}.mp4' "
            f"and '<name>{REFERENCE_SUFFIX}.png' next to each '<name>.mp4'")


def _copying_trap(items: list[PlannedItem]) -> str:
    """The first usable sample whose driving video is its target (or whose reference is a driving frame), as a
    one-line error ("" when none)."""
    for path in dict.fromkeys(item.sample.media_path for item in items):
        try:
            check_not_a_copy(triplet_for(path))
        except UserError as e:
            return str(e)
    return ""


def concept_verdict(config: TrainConfig, index: int) -> ConceptVerdict:
    """The verdict of `config.concepts[index]` (the GUI's line beside a concept). Raises a one-line `UserError` when
    the base folder cannot say what the clips train at."""
    concepts = load_concepts(config.concepts) if isinstance(config.concepts, str) else config.concepts
    key = "concepts" if isinstance(config.concepts, str) else f"concepts[{index}]"
    return DataVerdict(config).concept(concepts[index], key)


@dataclasses.dataclass
class RunVerdict:
    """Start-up's verdict: the concepts' verdicts by type (the loaders' planned items)."""

    training: list[ConceptVerdict]
    validation: list[ConceptVerdict]

    def of_type(self, concept_type: ConceptType) -> list[ConceptVerdict]:
        return self.training if concept_type == ConceptType.STANDARD else self.validation

    def skipped(self) -> list[SkippedSample]:
        return [entry for verdict in self.training + self.validation for entry in verdict.skipped]


def check_data(config: TrainConfig) -> RunVerdict:
    """Start-up's data check: every concept judged, one line per concept logged (its skips were logged as found);
    a concept's error, or no usable training sample at all, is a one-line `UserError` about its key."""
    check_concepts(config)  # a STANDARD concept to train on
    judge = DataVerdict(config)
    verdict = RunVerdict(judge.all(ConceptType.STANDARD), judge.all(ConceptType.VALIDATION))
    for concept in verdict.training + verdict.validation:
        if concept.error:
            raise UserError.about(concept.key, concept.error)
        logger.info("%s (%s): %s", concept.concept.display_name(), concept.key, concept.summary())
    if not any(concept.items for concept in verdict.training):
        skipped = collections.Counter(e.category for e in verdict.skipped())
        why = ", ".join(f"{n} {reason}" for reason, n in skipped.items()) or "no video or image found"
        raise UserError.about("concepts", f"config key 'concepts': no usable training sample ({why}): check the "
                                          "dataset")
    return verdict
