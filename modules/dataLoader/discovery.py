"""Finding samples of a concept: a folder of videos/images with .txt captions, or a JSONL manifest."""

import json
import logging
import os
import stat
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from modules.config.loading import check_regular_file, loads_json
from modules.dataLoader.errors import BAD_MANIFEST, MISSING_FILE, UNSUPPORTED_FILE, DataError
from modules.dataLoader.masks import is_mask_file, mask_path_for
from modules.dataLoader.video_io import IMAGE_EXTENSIONS, MEDIA_EXTENSIONS, VIDEO_EXTENSIONS
from modules.util.base_config import ConfigError
from modules.util.text_io import bom_encoding

logger = logging.getLogger(__name__)

FOLDER_EXTENSIONS = VIDEO_EXTENSIONS | IMAGE_EXTENSIONS
MANIFEST_SUFFIX = ".jsonl"
_MAX_NAMES_IN_WARNING = 5
MAX_CAPTION_BYTES = 1 << 20  # a prompt is a few KiB (UMT5 reads 512 tokens); 1 MiB is no caption
MAX_MANIFEST_BYTES = 256 << 20  # a million lines of paths and prompts; a bigger file is a wrong path
# Byte order marks and the encodings they announce; UTF-32 first, since its LE mark starts like UTF-16's.


@dataclass(frozen=True)
class RawSample:
    """A media file, its caption ("" when none) and the concept path (folder or .jsonl) it came from."""

    media_path: Path
    caption: str
    source: str
    mask_path: Path | None = None  # `<name>-masklabel.png/.mp4` beside it, or a manifest line's "mask"


def discover_concept(path: str | os.PathLike, include_subdirectories: bool,
                     prompt_field: str = "prompt", warn_missing_captions: bool = True,
                     side_files: Callable[[Path], bool] | None = None, not_data: Collection[Path] = (),
                     unusable: list[tuple[Path, str]] | None = None) -> list[RawSample]:
    """Samples of a concept: a folder (sorted by relative path) or a .jsonl manifest (file order).

    Logs one warning listing samples without a caption. Raises `DataError` when the path is missing
    or neither a folder nor a .jsonl file. `not_data`: folders never read as data (the run's workspace, cache and
    output, wherever they are). `unusable`: receives (path, why) of each media file that is no regular file (a link
    to a device, a pipe), for the caller to count as a skipped sample, instead of the folder's warning.
    """
    path = Path(path)
    if path.is_dir():
        samples = _scan_folder(path, include_subdirectories, side_files, not_data, unusable)
    elif path.is_file() and path.suffix.lower() == MANIFEST_SUFFIX:
        samples = read_jsonl_manifest(path, prompt_field)
    elif not path.exists():
        raise DataError(path, "concept path does not exist", MISSING_FILE)
    else:
        raise DataError(path, "concept path must be a folder or a .jsonl manifest", UNSUPPORTED_FILE)
    if warn_missing_captions:  # not when the concept's captions come from elsewhere
        _warn_missing_captions(path, samples)
    return samples


def _is_hidden(relative: Path) -> bool:
    """Whether any part of the path starts with '.' (e.g. macOS '._clip.mp4' files)."""
    return any(part.startswith(".") for part in relative.parts)


def _scan_folder(folder: Path, include_subdirectories: bool, side_files: Callable[[Path], bool] | None = None,
                 not_data: Collection[Path] = (), unusable: list[tuple[Path, str]] | None = None) -> list[RawSample]:
    """Media files of a folder with same-stem .txt captions, sorted by relative path. A sample's mask is no sample
    of its own, nor are the files `side_files` names: a sample's inputs on the base that reads them (VACE's
    `x_control.mp4`, Animate-2's `x_driving.mp4`; elsewhere such a file is a clip). What is
    left out otherwise — hidden files, entries that are no regular file (a link to a device, a pipe), symlinked
    sub-folders, which are not followed (a loop, or data outside the concept) — is one warning, counted by kind."""
    left_out: dict[str, list[str]] = {}
    media = []
    skipped_folders = {os.path.realpath(p) for p in not_data} - {os.path.realpath(folder)}
    for root, dirs, names in os.walk(folder) if include_subdirectories else [(folder, [], _names(folder))]:
        root = Path(root)
        for name in [d for d in dirs if (root / d).is_symlink()]:
            left_out.setdefault("symlinked sub-folders not followed", []).append(str((root / name).relative_to(folder)))
        for name in [d for d in dirs if os.path.realpath(root / d) in skipped_folders]:
            dirs.remove(name)  # the run's own folders: its samples must not train the next run
            left_out.setdefault("the run's workspace, cache or output folder, never data", []).append(
                str((root / name).relative_to(folder)))
        for name in names:
            path = root / name
            relative = path.relative_to(folder)
            if path.suffix.lower() not in FOLDER_EXTENSIONS or is_mask_file(path) or (side_files and side_files(path)):
                continue
            why = "hidden" if _is_hidden(relative) else None if path.is_file() else "not a regular file"
            if why == "not a regular file" and unusable is not None:
                unusable.append((path, "is not a regular file (a link to a device, a pipe or a socket)"))
            elif why:
                left_out.setdefault(why, []).append(str(relative))
            else:
                media.append(path)
    if left_out:
        logger.warning("concept %s: %s left out", folder, "; ".join(
            f"{len(items)} {why} ({', '.join(items[:_MAX_NAMES_IN_WARNING])}"
            f"{', ...' if len(items) > _MAX_NAMES_IN_WARNING else ''})" for why, items in left_out.items()))
    media.sort(key=lambda p: p.relative_to(folder).as_posix())
    return [RawSample(p, read_caption(p.with_suffix(".txt")), str(folder), mask_path_for(p)) for p in media]


def _names(folder: Path) -> list[str]:
    """The folder's own entries that are not folders (sub-folders are only read with include_subdirectories)."""
    return [entry.name for entry in os.scandir(folder) if not entry.is_dir()]


def decode_bom(data: bytes, path: Path) -> str | None:
    """The text of `data` in the encoding its byte order mark names, or None when it has none. Bytes that
    do not fit that encoding become U+FFFD with a warning (a BOM leaves no better guess)."""
    encoding, skip = bom_encoding(data)
    if encoding is None:
        return None
    try:
        return data[skip:].decode(encoding)
    except UnicodeDecodeError:
        logger.warning("%s: text is not valid %s although its byte order mark says so; "
                       "replacing the bad bytes", path, encoding.upper())
        return data[skip:].decode(encoding, errors="replace")


def read_caption(path: Path) -> str:
    """The stripped text of a caption file; "" if missing. The encoding of a byte order mark (UTF-8,
    UTF-16/32 LE/BE); without one UTF-8, falling back to latin-1 with a warning. One that cannot be read (a
    folder named like a caption, no permission) is "" with a warning: the sample trains uncaptioned, and the
    concept's missing-caption warning counts it."""
    try:
        st = path.stat()
        reason = None if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) else \
            "is not a regular file (a device, pipe or socket)"
        if reason is None and st.st_size > MAX_CAPTION_BYTES:
            reason = f"is {st.st_size} bytes, more than a caption can be ({MAX_CAPTION_BYTES})"
        if reason is not None:  # checked before reading: a pipe's read never returns, a huge file fills memory
            logger.warning("caption %s %s: its sample trains without a caption", path, reason)
            return ""
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    except OSError as e:
        reason = "is a folder, not a text file" if path.is_dir() else f"cannot be read ({e.strerror or e})"
        logger.warning("caption %s %s: its sample trains without a caption", path, reason)
        return ""
    text = decode_bom(data, path)
    if text is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            logger.warning("%s: caption is not valid UTF-8, reading it as latin-1", path)
            text = data.decode("latin-1")
    return text.strip()


def _warn_missing_captions(concept: Path, samples: list[RawSample]) -> None:
    """One warning naming (some of) the samples with an empty caption."""
    missing = [s.media_path.name for s in samples if not s.caption]
    if not missing:
        return
    shown = ", ".join(missing[:_MAX_NAMES_IN_WARNING]) + (", ..." if len(missing) > _MAX_NAMES_IN_WARNING else "")
    logger.warning(
        "%s: %d of %d samples have no caption (training them with an empty prompt): %s",
        concept, len(missing), len(samples), shown,
    )


def read_jsonl_manifest(path: str | os.PathLike, prompt_field: str = "prompt") -> list[RawSample]:
    """Samples from lines `{"path": ..., "prompt": ...}`; relative paths are resolved from the manifest's folder.

    UTF-8, or the encoding a byte order mark names. Blank lines are ignored; `caption` is accepted instead
    of `prompt`. Raises `DataError` naming the file and line number for a bad line. File existence is
    checked later, when reading.
    """
    path = Path(path)
    try:
        check_regular_file(path, "manifest", MAX_MANIFEST_BYTES)
    except ConfigError as e:
        raise DataError(path, str(e).split(f"'{path}' ", 1)[-1], BAD_MANIFEST) from None
    try:
        data = path.read_bytes()
        text = decode_bom(data, path)
        if text is None:
            text = data.decode("utf-8")
    except FileNotFoundError as e:
        raise DataError(path, "manifest not found", MISSING_FILE) from e
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(path, f"cannot read manifest ({type(e).__name__}: {e})", BAD_MANIFEST) from e
    samples = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            samples.append(_parse_manifest_line(path, number, line, prompt_field))
    return samples


def _parse_manifest_line(manifest: Path, number: int, line: str, prompt_field: str = "prompt") -> RawSample:
    """One manifest line as a RawSample."""

    def fail(reason: str) -> DataError:
        return DataError(manifest, f"line {number}: {reason}", BAD_MANIFEST)

    try:
        entry = loads_json(line, "this line")  # the depth guard and integer limits of every JSON reader
    except json.JSONDecodeError as e:
        raise fail(f"invalid JSON ({e.msg} at column {e.colno})") from e
    except ConfigError as e:
        raise fail(str(e).removeprefix("this line ")) from None
    if not isinstance(entry, dict):
        raise fail('expected an object like {"path": ..., "prompt": ...}')
    media = entry.get("path")
    if not isinstance(media, str) or not media:
        raise fail('missing "path" string')
    caption = entry.get("prompt", entry.get("caption", "")) if prompt_field == "prompt" else entry.get(prompt_field, "")
    if caption is None:
        caption = ""
    if not isinstance(caption, str):
        raise fail(f'"{prompt_field}" must be a string')
    media_path = Path(media)
    if not media_path.is_absolute():
        media_path = manifest.parent / media_path
    if media_path.suffix.lower() not in MEDIA_EXTENSIONS:
        raise fail(f"unsupported file type '{media_path.suffix}' for {media}")
    mask = entry.get("mask")
    if mask is not None and (not isinstance(mask, str) or not mask):
        raise fail('"mask" must be a path string')
    mask_path = None
    if mask:
        mask_path = Path(mask) if Path(mask).is_absolute() else manifest.parent / mask
    return RawSample(media_path, caption.strip(), str(manifest), mask_path)
