"""Finding E2V samples in a folder: ``001.mp4`` + ``001.txt`` + ``001<suffix>`` per element
(docs/architecture.md, contracts, docs/e2v.md §1, §7)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from modules.config.e2v_dataset_config import ElementConfig, suffix_key
from modules.dataLoader.errors import MISSING_FILE, DataError
from modules.dataLoader.masks import is_mask_file, mask_path_for
from modules.dataLoader.vace_modules import is_control_file
from modules.dataLoader.video_io import VIDEO_EXTENSIONS

CAPTION_SUFFIX = ".txt"


@dataclass(frozen=True)
class E2VSample:
    """One sample: its base name, video, caption file (None when absent) and element images
    (None for a missing optional element), keyed by element name in config order."""

    id: str
    video: Path
    caption_path: Path | None
    element_images: dict[str, Path | None] = field(default_factory=dict)
    mask_path: Path | None = None  # `<id>-masklabel.png/.mp4` beside the video (masked training)

    def present(self) -> dict[str, bool]:
        return {name: path is not None for name, path in self.element_images.items()}


def _index_files(folder: Path) -> dict[tuple[str, str], Path]:
    """(name without extension, lower-case extension) -> path, first by name on collisions."""
    index: dict[tuple[str, str], Path] = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        stem, ext = os.path.splitext(path.name)
        index.setdefault((stem, ext.lower()), path)
    return index


def find_element_image(index: dict[tuple[str, str], Path], base: str, suffixes: Sequence[str]) -> Path | None:
    """The first suffix (in list order) for which ``base + suffix`` exists; the extension matches
    case-insensitively (``001_mask.PNG`` matches ``_mask.png``)."""
    for suffix in suffixes:
        body, ext = suffix_key(suffix)
        found = index.get((base + body, ext))
        if found is not None:
            return found
    return None


def discover_e2v_samples(
    data_root: str | os.PathLike,
    elements: Sequence[ElementConfig],
    video_exts: Iterable[str] = VIDEO_EXTENSIONS,
) -> tuple[list[E2VSample], list[tuple[Path, str]]]:
    """Samples of an E2V folder (sorted by base name) and the skipped videos with their reason.

    A video whose required element has no image is skipped, the reason naming the element and the
    file names tried (§7); the caller logs and counts skips (e.g. with `SkipCounter`). Raises
    `DataError` when `data_root` is not a folder.
    """
    root = Path(data_root)
    if not root.is_dir():
        raise DataError(root, "E2V data_root is not a folder", MISSING_FILE)
    exts = {e.lower() for e in video_exts}
    index = _index_files(root)
    samples: list[E2VSample] = []
    skips: list[tuple[Path, str]] = []
    seen: set[str] = set()
    for (stem, ext), video in sorted(index.items(), key=lambda item: item[1].name):
        if ext not in exts or is_mask_file(video) or is_control_file(video):  # 001's mask or VACE control
            continue
        if stem in seen:
            skips.append((video, f"another video has the same base name '{stem}'"))
            continue
        seen.add(stem)
        caption = index.get((stem, CAPTION_SUFFIX))
        images: dict[str, Path | None] = {}
        missing: ElementConfig | None = None
        for element in elements:
            images[element.name] = find_element_image(index, stem, element.suffixes)
            if images[element.name] is None and element.required and missing is None:
                missing = element
        if missing is not None:
            tried = ", ".join(stem + s for s in missing.suffixes)
            skips.append((video, f"required element '{missing.name}' not found (looked for {tried})"))
            continue
        samples.append(E2VSample(stem, video, caption, images, mask_path_for(video)))
    return samples, skips
