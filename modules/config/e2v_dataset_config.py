"""The E2V dataset JSON (the seeds' format; docs/e2v.md §1–§4, §7), as strict typed configs.

Two spellings load: the nested form (seeds 000/002: ``elements[].vae{repeat, position}``,
``elements[].clip{preprocess}``, ``processors{vae, clip}``) and the flat form (seed 001:
``vae_repeat``, ``position``, ``clip_process`` per element, ``vae_combine``, ``clip_resolution`` per
dataset). `normalize_flat_form` rewrites the flat keys into the nested ones before strict parsing;
`to_json` always writes the nested form.

Loading resolves the defaults that depend on other fields, so consumers read concrete values:
an element without ``vae.position`` gets its index in the list, ``processors.vae.resolution`` without
a value gets ``target_resolution``, a visualization processor without ``format`` gets ``pt``
(latent_save) or ``png`` (vae_decode), and ``clip: true`` becomes ``clip: {}``.

Every error is a `ConfigError` raised before any model loads, naming the key path
(``datasets[0].elements[1].vae.position``).
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
from typing import Any

from modules.util.base_config import BaseConfig, ConfigError, T, option
from modules.util.enum import ConceptType, FrameSampleStrategy

PREPROCESS_METHODS = ("pad_white", "center_crop", "resize", "letterbox")
FRAME_CONDITIONING_MODES = ("full", "index", "prefix", "first_and_last", "random")
VISUALIZATION_TYPES = ("latent_save", "vae_decode")
VISUALIZATION_DATA = ("input_latents", "noisy_latents", "conditioned_latents", "predicted_latents", "reference_images")
VISUALIZATION_FORMATS = ("pt", "safetensors", "png")
_DEFAULT_FORMAT = {"latent_save": "pt", "vae_decode": "png"}
# Element images; the suffix must end in one of these (compared case-insensitively).
IMAGE_SUFFIX_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".bmp")

# Flat form (seed 001) -> nested key path.
FLAT_ELEMENT_KEYS = {"vae_repeat": ("vae", "repeat"), "position": ("vae", "position")}
FLAT_ELEMENT_CLIP_KEY = "clip_process"
FLAT_DATASET_KEYS = {"vae_combine": ("processors", "vae", "combine"),
                     "clip_resolution": ("processors", "clip", "resolution")}


def _key(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _fail(path: str, message: str) -> None:
    raise ConfigError(f"config key '{path}' {message}")


def _check_choice(path: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        close = difflib.get_close_matches(value, allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        _fail(path, f"must be one of {', '.join(allowed)}, got '{value}'{hint}")


def _check_frames(path: str, value: int) -> None:
    if value < 1 or (value - 1) % 4:
        _fail(path, f"must be of the form 4k+1 (1, 5, 9, ... 81), got {value}")


def _check_resolution(path: str, value: list[int]) -> None:
    # Not forced to multiples of 16 here: seed 000's [480, 854] must load; the data loader rounds.
    if len(value) != 2 or any(v < 1 for v in value):
        _fail(path, f"must be [height, width] with positive integers, got {value}")


def _check_known_keys(cls: type[BaseConfig], data: Any, path: str, aliases: tuple[str, ...]) -> None:
    """Unknown-key check whose suggestion also considers the flat-form spellings."""
    if not isinstance(data, dict):
        return
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(key, names + list(aliases), n=1, cutoff=0.5)
            hint = f"; did you mean '{_key(path, close[0])}'?" if close else ""
            raise ConfigError(f"unknown config key '{_key(path, key)}'{hint}")


# --- elements (§1, §2) -----------------------------------------------------------------------------


@dataclasses.dataclass
class ElementVaeConfig(BaseConfig):
    repeat: int = option(1, "Copies of this element's frame in the reference clip (A2: 1, 4, 4).")
    position: int | None = option(None, "Layout order (ascending); default: the element's index in the list.")
    preprocess: str | None = option(None, "pad_white | center_crop | resize | letterbox; default: processors.vae.default_preprocess.")

    def validate(self, path: str) -> None:
        if self.repeat < 1:
            _fail(_key(path, "repeat"), f"must be at least 1, got {self.repeat}")
        if self.position is not None and self.position < 0:
            _fail(_key(path, "position"), f"must not be negative, got {self.position}")
        if self.preprocess is not None:
            _check_choice(_key(path, "preprocess"), self.preprocess, PREPROCESS_METHODS)


@dataclasses.dataclass
class ElementClipConfig(BaseConfig):
    preprocess: str | None = option(None, "pad_white | center_crop | resize | letterbox; default: processors.clip.default_preprocess.")

    def validate(self, path: str) -> None:
        if self.preprocess is not None:
            _check_choice(_key(path, "preprocess"), self.preprocess, PREPROCESS_METHODS)


@dataclasses.dataclass
class ElementConfig(BaseConfig):
    name: str = option("", "Element name (unique), e.g. main_subject.")
    suffixes: list[str] = option([], "File suffixes tried in order: 001<suffix>, e.g. ['_person.png', '_mask.png'].")
    required: bool = option(False, "A sample without this element is skipped; an optional one is left out.")
    vae: ElementVaeConfig = option(ElementVaeConfig(), "VAE pathway: repeat, position, preprocess.")
    clip: ElementClipConfig | bool = option(ElementClipConfig(), "CLIP pathway: {preprocess}, or false to leave the element out of CLIP.")

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any], path: str = "") -> T:
        _check_known_keys(cls, data, path, tuple(FLAT_ELEMENT_KEYS) + (FLAT_ELEMENT_CLIP_KEY,))
        return super().from_dict(data, path)  # type: ignore[misc]

    @property
    def in_clip(self) -> bool:
        return self.clip is not False

    def validate(self, path: str) -> None:
        if not self.name:
            _fail(_key(path, "name"), "is empty: give the element a name")
        suffix_path = _key(path, "suffixes")
        if not self.suffixes:
            _fail(suffix_path, "is empty: give at least one file suffix, e.g. ['_person.png']")
        seen: set[tuple[str, str]] = set()
        for i, suffix in enumerate(self.suffixes):
            if not suffix:
                _fail(_key(suffix_path, i), "is an empty string")
            if not suffix.lower().endswith(IMAGE_SUFFIX_EXTENSIONS):
                _fail(_key(suffix_path, i), f"must end in an image extension ({', '.join(IMAGE_SUFFIX_EXTENSIONS)}), got '{suffix}'")
            if suffix_key(suffix) in seen:
                _fail(_key(suffix_path, i), f"repeats the suffix '{suffix}'")
            seen.add(suffix_key(suffix))
        if self.clip is True:
            self.clip = ElementClipConfig()


def suffix_key(suffix: str) -> tuple[str, str]:
    """(body, lower-case extension): two suffixes with equal keys match the same files."""
    body, ext = os.path.splitext(suffix)
    return body, ext.lower()


# --- processors (§2–§5) --------------------------------------------------------------------------


@dataclasses.dataclass
class VaeProcessorConfig(BaseConfig):
    resolution: list[int] | None = option(None, "[height, width] of the reference clip; must equal target_resolution (the default).")
    combine: str = option("before", "before (the only mode): all references in ONE clip, encoded in one VAE call.")
    default_preprocess: str = option("pad_white", "Preprocess of elements without vae.preprocess (A2: pad_white).")
    frame_conditioning: str = option("full", "full (A2: first P frames) | index | prefix | first_and_last | random.")
    frame_index: int = option(0, "Reference frame used by frame_conditioning index (only it) and prefix (frames 0..index).")
    concatenate_mask: bool = option(True, "Feed the 4-channel frame mask (36-channel bases need it; false only for bases without mask channels).")

    def validate(self, path: str) -> None:
        if self.resolution is not None:
            _check_resolution(_key(path, "resolution"), self.resolution)
        if self.combine != "before":
            _fail(_key(path, "combine"), f"must be 'before' (the only supported mode, docs/e2v.md §3), got '{self.combine}'")
        _check_choice(_key(path, "default_preprocess"), self.default_preprocess, PREPROCESS_METHODS)
        _check_choice(_key(path, "frame_conditioning"), self.frame_conditioning, FRAME_CONDITIONING_MODES)
        if self.frame_index < 0:
            _fail(_key(path, "frame_index"), f"must not be negative, got {self.frame_index}")


@dataclasses.dataclass
class ClipProcessorConfig(BaseConfig):
    resolution: list[int] = option([512, 512], "[height, width] each element is brought to before CLIPImageProcessor (A2: 512x512).")
    default_preprocess: str = option("pad_white", "Preprocess of elements without clip.preprocess (A2: pad_white).")

    def validate(self, path: str) -> None:
        _check_resolution(_key(path, "resolution"), self.resolution)
        _check_choice(_key(path, "default_preprocess"), self.default_preprocess, PREPROCESS_METHODS)


@dataclasses.dataclass
class ProcessorsConfig(BaseConfig):
    vae: VaeProcessorConfig = option(VaeProcessorConfig(), "VAE pathway settings.")
    clip: ClipProcessorConfig = option(ClipProcessorConfig(), "CLIP pathway settings.")


# --- visualization --------------------------------------------------------------------------------


@dataclasses.dataclass
class VisualizationProcessorConfig(BaseConfig):
    type: str = option("latent_save", "latent_save | vae_decode.")
    data: list[str] = option([], "Any of input_latents, noisy_latents, conditioned_latents, predicted_latents, reference_images.")
    frames: list[int] = option([], "Frame indices to keep (negative counts from the end); [] = all.")
    format: str | None = option(None, "pt | safetensors | png; default pt for latent_save, png for vae_decode. Latents are always written as .safetensors (never pickled); \"pt\" is accepted from the seeds and means the same.")

    def validate(self, path: str) -> None:
        _check_choice(_key(path, "type"), self.type, VISUALIZATION_TYPES)
        if not self.data:
            _fail(_key(path, "data"), f"is empty: list what to save ({', '.join(VISUALIZATION_DATA)})")
        for i, name in enumerate(self.data):
            _check_choice(_key(_key(path, "data"), i), name, VISUALIZATION_DATA)
        if self.format is None:
            self.format = _DEFAULT_FORMAT[self.type]
        _check_choice(_key(path, "format"), self.format, VISUALIZATION_FORMATS)
        if self.type == "latent_save" and self.format == "png":
            _fail(_key(path, "format"), "must be pt or safetensors for latent_save (png needs vae_decode)")


@dataclasses.dataclass
class VisualizationConfig(BaseConfig):
    enabled: bool = option(False, "Save intermediate tensors during training.")
    output_dir: str = option("visualizations/{run_id}", "Output folder (a relative one is inside the run folder, workspace_dir/<run_name>); {run_id} is replaced by the start's date and time.")
    frequency: int = option(100, "Every N steps.")
    processors: list[VisualizationProcessorConfig] = option([], "What to save and how.")

    def validate(self, path: str) -> None:
        if self.frequency < 1:
            _fail(_key(path, "frequency"), f"must be at least 1, got {self.frequency}")


# --- dataset -------------------------------------------------------------------------------------


@dataclasses.dataclass
class E2VDatasetConfig(BaseConfig):
    data_root: str = option("", "Folder of 001.mp4, 001.txt, 001<suffix> element images (used as given).")
    dataset_type: str = option("e2v", "e2v (the only type).")
    type: ConceptType = option(ConceptType.STANDARD, "STANDARD (trained on) or VALIDATION (never trained on: its loss at fixed σ and noise is logged every validate_after units), as concepts[].type.")
    target_resolution: list[int] = option([480, 832], "[height, width] of the training videos and the reference clip.")
    auto_frame_buckets: bool = option(True, "Each video uses the largest 4k+1 frame count it holds, up to max_frames.")
    max_frames: int = option(81, "Upper limit (4k+1) of the automatic frame buckets.")
    frames: int = option(81, "Fixed frame count (4k+1) when auto_frame_buckets is false.")
    frame_sample_strategy: FrameSampleStrategy = option(FrameSampleStrategy.HEAD, "Which windows of each video train (as the train config's key; the references stay per sample): HEAD, SLIDE, UNIFORM, RANDOM, KEYFRAME or FULL (HEAD with auto_frame_buckets: the whole video up to max_frames).")
    frame_stride: int = option(0, "SLIDE: video frames between window starts (0 = the window's length).")
    frame_windows: int = option(4, "UNIFORM (and KEYFRAME without cuts): windows per video.")
    reshape_mode: str = option("bicubic", "bicubic (the only mode): how frames and images are resized.")
    remove_common_llm_caption_prefixes: bool = option(False, "Strip 'The video shows'-style prefixes from captions.")
    elements: list[ElementConfig] = option([], "The reference elements (1-3 in A2).")
    processors: ProcessorsConfig = option(ProcessorsConfig(), "VAE and CLIP pathway settings.")
    visualization: VisualizationConfig = option(VisualizationConfig(), "Debug output during training.")

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any], path: str = "") -> T:
        """Strict parse of one dataset in the nested or the flat form (flat keys normalised first)."""
        if isinstance(data, dict):
            data = _normalize_dataset(copy.deepcopy(data), path)
        _check_known_keys(cls, data, path, tuple(FLAT_DATASET_KEYS))
        return super().from_dict(data, path)  # type: ignore[misc]

    @property
    def max_num_frames(self) -> int:
        """F of a fixed-length dataset, or the cap of the automatic buckets."""
        return self.max_frames if self.auto_frame_buckets else self.frames

    @property
    def vae_resolution(self) -> list[int]:
        return list(self.processors.vae.resolution or self.target_resolution)

    def reference_frame_count(self, present: dict[str, bool] | None = None) -> int:
        """P = Σ vae.repeat over the present elements (all when `present` is None), docs/e2v.md §3.1."""
        return sum(e.vae.repeat for e in self.elements if present is None or present.get(e.name, False))

    def vae_preprocess(self, element: ElementConfig) -> str:
        return element.vae.preprocess or self.processors.vae.default_preprocess

    def clip_preprocess(self, element: ElementConfig) -> str | None:
        """The element's CLIP preprocess, or None when it is left out of CLIP (`clip: false`)."""
        if element.clip is False:
            return None
        own = element.clip.preprocess if isinstance(element.clip, ElementClipConfig) else None
        return own or self.processors.clip.default_preprocess

    def validate(self, path: str) -> None:
        if not self.data_root:
            _fail(_key(path, "data_root"), "is empty: set it to the dataset folder")
        _check_choice(_key(path, "dataset_type"), self.dataset_type, ("e2v",))
        _check_resolution(_key(path, "target_resolution"), self.target_resolution)
        _check_frames(_key(path, "max_frames"), self.max_frames)
        _check_frames(_key(path, "frames"), self.frames)
        if self.frame_stride < 0:
            _fail(_key(path, "frame_stride"), f"must not be negative, got {self.frame_stride}")
        if self.frame_windows < 1:
            _fail(_key(path, "frame_windows"), f"must be at least 1, got {self.frame_windows}")
        _check_choice(_key(path, "reshape_mode"), self.reshape_mode, ("bicubic",))
        vae_path = _key(path, "processors.vae")
        if self.processors.vae.resolution is None:
            self.processors.vae.resolution = list(self.target_resolution)
        elif self.processors.vae.resolution != self.target_resolution:
            _fail(_key(vae_path, "resolution"), f"must equal target_resolution {self.target_resolution} "
                  f"(the reference clip is stacked with the video latents), got {self.processors.vae.resolution}")
        self._validate_elements(_key(path, "elements"))
        p, f = self.reference_frame_count(), self.max_num_frames
        if p > f:
            frames_key = "max_frames" if self.auto_frame_buckets else "frames"
            _fail(_key(path, frames_key), f"is {f}, but the elements' vae.repeat add up to P = {p} reference "
                  "frames (P must not exceed F): raise it or lower the repeats")
        vae = self.processors.vae
        if vae.frame_conditioning in ("index", "prefix") and vae.frame_index >= p:
            _fail(_key(vae_path, "frame_index"), f"is {vae.frame_index}, but there are only P = {p} reference frames")

    def _validate_elements(self, path: str) -> None:
        if not self.elements:
            _fail(path, "is empty: configure at least one element")
        names: set[str] = set()
        positions: dict[int, int] = {}
        suffixes: dict[tuple[str, str], str] = {}
        for i, element in enumerate(self.elements):
            element_path = _key(path, i)
            if element.name in names:
                _fail(_key(element_path, "name"), f"repeats the element name '{element.name}'")
            names.add(element.name)
            defaulted = element.vae.position is None
            if defaulted:
                element.vae.position = i
            position = element.vae.position
            assert position is not None
            if position in positions:
                note = f" (defaulted to its list index {i})" if defaulted else ""
                _fail(_key(element_path, "vae.position"), f"is {position}{note}, already used by "
                      f"{_key(path, positions[position])}: positions must be distinct")
            positions[position] = i
            for j, suffix in enumerate(element.suffixes):
                owner = suffixes.get(suffix_key(suffix))
                if owner is not None:
                    _fail(_key(_key(element_path, "suffixes"), j), f"'{suffix}' is also a suffix of element '{owner}'")
                suffixes[suffix_key(suffix)] = element.name

    def layout_order(self) -> list[ElementConfig]:
        """All elements by ascending vae.position (docs/e2v.md §1)."""
        return sorted(self.elements, key=lambda e: -1 if e.vae.position is None else e.vae.position)


@dataclasses.dataclass
class E2VDatasetFile(BaseConfig):
    datasets: list[E2VDatasetConfig] = option([], "The E2V datasets.")

    def training_shapes(self) -> tuple[list[list[int]], list[int]]:
        """([height, width] per trained dataset, its largest frame count F): what an E2V run trains at, in place
        of the train config's `resolution` and `frames`, which E2V runs do not read."""
        trained = [d for d in self.datasets if d.type == ConceptType.STANDARD] or self.datasets
        return [list(d.target_resolution) for d in trained], [d.max_num_frames for d in trained]

    def validate(self, path: str) -> None:
        if not self.datasets:
            _fail(_key(path, "datasets"), "is empty: add at least one dataset")


# --- flat form, files ------------------------------------------------------------------------------


def _move(container: dict[str, Any], flat: str, nested: tuple[str, ...], path: str) -> None:
    """Move container[flat] to container[nested[0]][nested[1]]..., refusing to overwrite."""
    value = container.pop(flat)
    target = container
    walked = path
    for part in nested[:-1]:
        walked = _key(walked, part)
        child = target.setdefault(part, {})
        if not isinstance(child, dict):
            _fail(walked, f"must be an object to take '{_key(path, flat)}' (flat form)")
        target = child
    if nested[-1] in target:
        _fail(_key(path, flat), f"and '{_key(walked, nested[-1])}' are both set: keep one")
    target[nested[-1]] = value


def _normalize_element(element: dict[str, Any], path: str) -> None:
    for flat, nested in FLAT_ELEMENT_KEYS.items():
        if flat in element:
            _move(element, flat, nested, path)
    if FLAT_ELEMENT_CLIP_KEY in element:
        value = element[FLAT_ELEMENT_CLIP_KEY]
        if value is False:
            if "clip" in element:
                _fail(_key(path, FLAT_ELEMENT_CLIP_KEY), f"and '{_key(path, 'clip')}' are both set: keep one")
            element.pop(FLAT_ELEMENT_CLIP_KEY)
            element["clip"] = False
        elif value is True:
            element.pop(FLAT_ELEMENT_CLIP_KEY)
            element.setdefault("clip", {})
        else:
            _move(element, FLAT_ELEMENT_CLIP_KEY, ("clip", "preprocess"), path)


def normalize_flat_form(data: Any) -> Any:
    """A copy of a dataset-file dict with seed 001's flat keys rewritten into the nested form.

    Per element: ``vae_repeat`` -> ``vae.repeat``, ``position`` -> ``vae.position``,
    ``clip_process`` -> ``clip.preprocess`` (``false`` -> ``clip: false``). Per dataset:
    ``vae_combine`` -> ``processors.vae.combine``, ``clip_resolution`` -> ``processors.clip.resolution``.
    A key given in both spellings is a `ConfigError`. Anything else is left for strict parsing.
    """
    if not isinstance(data, dict) or not isinstance(data.get("datasets"), list):
        return copy.deepcopy(data)
    data = copy.deepcopy(data)
    for i, dataset in enumerate(data["datasets"]):
        if isinstance(dataset, dict):
            _normalize_dataset(dataset, _key("datasets", i))
    return data


def _normalize_dataset(dataset: dict[str, Any], path: str) -> dict[str, Any]:
    """In place: the flat keys of one dataset dict (and its elements) moved to the nested form."""
    for flat, nested in FLAT_DATASET_KEYS.items():
        if flat in dataset:
            _move(dataset, flat, nested, path)
    elements = dataset.get("elements")
    if isinstance(elements, list):
        for j, element in enumerate(elements):
            if isinstance(element, dict):
                _normalize_element(element, _key(_key(path, "elements"), j))
    return dataset


def load_dataset_config(path: str | os.PathLike) -> E2VDatasetFile:
    """Read and validate an E2V dataset JSON; any problem is a one-line `ConfigError` naming the file."""
    from modules.config.loading import read_json

    data = read_json(path, "dataset config")
    if not isinstance(data, dict):
        raise ConfigError(f"dataset config file '{path}' must hold a JSON object with a 'datasets' list")
    try:
        return E2VDatasetFile.from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"dataset config file '{path}': {e}") from None


def with_dataset_shapes(config: Any) -> Any:
    """A train config with the `resolution` and `frames` its E2V dataset trains at (the run's own keys are not
    read by E2V runs): what the VRAM estimate of an E2V config must size. Unchanged without `dataset_config`."""
    if not config.dataset_config:
        return config
    resolution, frames = load_dataset_config(config.dataset_config).training_shapes()
    return dataclasses.replace(config, resolution=resolution, frames=frames)


def to_json(config: E2VDatasetFile, path: str | os.PathLike | None = None) -> str:
    """The nested-form JSON text of `config` (loads back equal); also written atomically to `path` if given."""
    text = json.dumps(config.to_dict(), indent=2) + "\n"
    if path is not None:
        from modules.util.atomic import atomic_write_text

        atomic_write_text(path, text)
    return text
