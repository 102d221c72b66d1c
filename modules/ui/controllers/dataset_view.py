"""The dataset tab without Tk: the concepts as cards (name, folder, clip count, a thumbnail's source), the clips of
the chosen one with their caption and element images, and saving an edited caption (atomically)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modules.dataLoader.discovery import decode_bom
from modules.dataLoader.masks import is_mask_file, mask_path_for
from modules.dataLoader.vace_modules import is_control_file
from modules.dataLoader.video_io import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS
from modules.util.atomic import atomic_write_text
from modules.util.errors import UserError


@dataclass(frozen=True)
class Card:
    name: str
    folder: Path
    clips: int
    thumbnail: Path | None  # the first clip or still, drawn small
    problem: str = ""  # a folder that does not exist


@dataclass(frozen=True)
class ClipEntry:
    media: Path
    caption_path: Path
    elements: dict[str, Path] = field(default_factory=dict)  # element name -> image
    mask: Path | None = None

    @property
    def name(self) -> str:
        return self.media.name


def read_caption_text(path: Path) -> str:
    if not path.is_file():
        return ""
    text = decode_bom(path.read_bytes(), path)
    return text if text is not None else path.read_bytes().decode("latin-1")


class DatasetViewController:
    def __init__(self, config: Any, dataset: Any):
        self.config, self.dataset = config, dataset
        self.selected: Path | None = None
        self.clip_index = 0

    def cards(self) -> list[Card]:
        """A card per concept folder (the config's concepts, then the E2V dataset's data_root)."""
        seen, cards = set(), []
        rows = [r for r in (self.config.value("concepts") or []) if isinstance(r, dict) and r.get("path")]
        entries = [(r.get("name") or Path(str(r["path"])).name, Path(str(r["path"]))) for r in rows]
        root = self.dataset.data_root_path()
        if root is not None:
            entries.append((f"E2V: {Path(root).name}", Path(root)))
        for name, folder in entries:
            if folder in seen:
                continue
            seen.add(folder)
            if not folder.is_dir():
                cards.append(Card(name, folder, 0, None, "folder not found"))
                continue
            clips = self.clips(folder)
            cards.append(Card(name, folder, len(clips), clips[0].media if clips else None))
        return cards

    def select(self, folder: str | os.PathLike) -> list[ClipEntry]:
        self.selected = Path(folder)
        self.clip_index = 0
        return self.clips(self.selected)

    def _element_suffixes(self, folder: Path) -> dict[str, list[str]]:
        root = self.dataset.data_root_path()
        if root is None or Path(root).resolve() != folder.resolve():
            return {}
        return {str(e.get("name", "")): list(e.get("suffixes") or []) for e in self.dataset.current.get("elements", [])
                if isinstance(e, dict)}

    def clips(self, folder: Path) -> list[ClipEntry]:
        """The folder's videos and stills (not masks, controls or element images), with what belongs to each."""
        if not folder.is_dir():
            return []
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
        videos = {p.stem for p in files if p.suffix.lower() in VIDEO_EXTENSIONS}
        suffixes = self._element_suffixes(folder)
        by_name = {p.name.lower(): p for p in files}
        entries = []
        for path in files:
            suffix = path.suffix.lower()
            if suffix not in VIDEO_EXTENSIONS | IMAGE_EXTENSIONS or is_mask_file(path) or is_control_file(path):
                continue
            if suffix in IMAGE_EXTENSIONS and any(path.stem.startswith(v + "_") for v in videos):
                continue  # an element image of a clip
            if suffixes:  # each element's first suffix that exists, as the loader tries them
                elements = {}
                for name, options in suffixes.items():
                    found = next((by_name[(path.stem + s).lower()] for s in options
                                  if (path.stem + s).lower() in by_name), None)
                    if found is not None:
                        elements[name] = found
            else:
                elements = {p.stem[len(path.stem) + 1:]: p for p in files if suffix in VIDEO_EXTENSIONS
                            and p.suffix.lower() in IMAGE_EXTENSIONS and p.stem.startswith(path.stem + "_")}
            entries.append(ClipEntry(path, path.with_suffix(".txt"), elements, mask_path_for(path)))
        return entries

    def caption(self, entry: ClipEntry) -> str:
        return read_caption_text(entry.caption_path).rstrip("\n")

    def save_caption(self, entry: ClipEntry, text: str) -> Path:
        """Write the edited caption in place of the old one, atomically (UTF-8, one trailing newline)."""
        if not entry.media.exists():
            raise UserError(f"'{entry.media}' is gone: reload the dataset tab")
        try:
            atomic_write_text(entry.caption_path, text.strip() + "\n")
        except OSError as e:
            raise UserError(f"cannot write '{entry.caption_path}' ({e.strerror or e}): check the folder's "
                            "permissions") from None
        return entry.caption_path
