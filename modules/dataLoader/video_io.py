"""Reading videos (and images / .npz frame arrays) as uint8 RGB frame arrays; writing is in util.video_write.

Frames are always `uint8` arrays shaped (F, H, W, 3) in RGB order. Transparent image pixels are
composited on a background colour (white unless the caller says otherwise).
"""

import io
import logging
import math
import os
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageOps

from modules.dataLoader.errors import (
    BAD_NPZ,
    MISSING_FILE,
    UNREADABLE_IMAGE,
    UNREADABLE_VIDEO,
    UNSUPPORTED_FILE,
    DataError,
)

logger = logging.getLogger(__name__)

VIDEO_EXTENSIONS = frozenset({".mp4", ".mov", ".mkv", ".webm", ".avi"})
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp"})
NPZ_EXTENSIONS = frozenset({".npz"})
MEDIA_EXTENSIONS = VIDEO_EXTENSIONS | IMAGE_EXTENSIONS | NPZ_EXTENSIONS
WHITE = (255, 255, 255)
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})


def _quiet_video_decoders() -> None:
    """Keep OpenCV's "[ WARN:0@...]" lines and FFmpeg's own messages about broken files off stderr: a broken
    file already gets one skip line. FFmpeg reads its level when OpenCV first opens a video, so this runs
    when this module is imported; a level the user set in the environment wins."""
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET
    if "OPENCV_LOG_LEVEL" not in os.environ:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)


_quiet_video_decoders()


def read_video_frames(
    path: str | os.PathLike,
    target_fps: float | None = None,
    max_frames: int | None = None,
    background: Sequence[int] = WHITE,
) -> tuple[np.ndarray, float]:
    """Read a video, image or .npz as (frames uint8 (F, H, W, 3) RGB, source_fps).

    With `target_fps`, frames are resampled to the timestamps k / target_fps (nearest source
    frame, timestamps inside the clip). `max_frames` caps the number of returned frames (decoding
    stops early). `source_fps` is 0.0 when unknown (images; .npz without an `fps` key and no
    `target_fps`). Transparent image pixels are composited on `background` (RGB). Raises
    `DataError` for missing, unreadable or empty files.
    """
    path = Path(path)
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    if target_fps is not None and not (math.isfinite(target_fps) and target_fps > 0):
        raise ValueError(f"target_fps must be a positive number, got {target_fps}")
    if not path.is_file():
        raise DataError(path, "file not found", MISSING_FILE)
    suffix = path.suffix.lower()
    if suffix in IMAGE_EXTENSIONS:
        return read_image(path, background)[None], 0.0
    if suffix in NPZ_EXTENSIONS:
        frames, fps = _read_npz(path)
        source_fps = fps if fps is not None else (target_fps or 0.0)
        indices = resample_indices(len(frames), source_fps, target_fps, max_frames)
        return np.ascontiguousarray(frames[indices]), source_fps
    if suffix in VIDEO_EXTENSIONS:
        return _read_video(path, target_fps, max_frames)
    raise DataError(path, f"unsupported file type '{suffix}'", UNSUPPORTED_FILE)


def resample_indices(
    num_frames: int, source_fps: float, target_fps: float | None, max_frames: int | None = None
) -> list[int]:
    """Source frame indices nearest to the timestamps k / target_fps inside the clip."""
    if num_frames < 1:
        return []
    if target_fps is None or source_fps <= 0 or source_fps == target_fps:
        indices = list(range(num_frames))
    else:
        ratio = source_fps / target_fps
        count = math.ceil(num_frames / ratio - 1e-9)  # timestamps k / target_fps < duration
        indices = [min(math.floor(k * ratio + 0.5), num_frames - 1) for k in range(count)]
    return indices[:max_frames] if max_frames is not None else indices


def read_image(path: str | os.PathLike, background: Sequence[int] = WHITE) -> np.ndarray:
    """Decode an image file to (H, W, 3) RGB uint8: grey expanded, transparent pixels (RGBA, LA, palette
    or colour-key transparency) composited on `background`. Raises `DataError` naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(path, "file not found", MISSING_FILE) from None
    except OSError as e:
        raise DataError(path, f"cannot read image ({e.strerror or e})", UNREADABLE_IMAGE) from None
    rgba = _decode_transparent(path, data)
    if rgba is not None:
        return composite_alpha(rgba, background)
    buffer = np.frombuffer(data, dtype=np.uint8)  # imdecode also works for non-ASCII paths
    image = cv2.imdecode(buffer, cv2.IMREAD_COLOR) if buffer.size else None
    if image is None:
        raise DataError(path, "cannot decode image", UNREADABLE_IMAGE)
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def _decode_transparent(path: Path, data: bytes) -> np.ndarray | None:
    """(H, W, 4) RGBA of an image that has transparency, else None (also when PIL cannot identify it:
    OpenCV then decodes it, or names it unreadable). OpenCV's colour decode would drop the alpha."""
    try:
        image = Image.open(io.BytesIO(data))
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    with image:
        if image.mode not in _ALPHA_MODES and "transparency" not in image.info:
            return None
        try:
            return np.asarray(ImageOps.exif_transpose(image).convert("RGBA"))  # as OpenCV applies EXIF rotation
        except (OSError, ValueError, Image.DecompressionBombError) as e:
            raise DataError(path, f"cannot decode image ({e})", UNREADABLE_IMAGE) from None


def composite_alpha(rgba: np.ndarray, background: Sequence[int] = WHITE) -> np.ndarray:
    """uint8 (H, W, 4) RGBA over an opaque RGB `background` -> uint8 (H, W, 3) RGB."""
    alpha = rgba[..., 3:].astype(np.float32) / 255.0
    colour = np.asarray(background, dtype=np.float32).reshape(1, 1, 3)
    blended = rgba[..., :3].astype(np.float32) * alpha + colour * (1.0 - alpha)
    return np.ascontiguousarray(np.rint(blended).astype(np.uint8))


def _read_npz(path: Path) -> tuple[np.ndarray, float | None]:
    """Load the frame array (key `frames`, or the only array) and the optional `fps`."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(path, f"cannot load npz ({type(e).__name__}: {e})", BAD_NPZ) from e
    fps_array = arrays.pop("fps", None)
    if "frames" in arrays:
        frames = arrays["frames"]
    elif len(arrays) == 1:
        frames = next(iter(arrays.values()))
    else:
        raise DataError(path, f"npz needs a 'frames' array, has {sorted(arrays)}", BAD_NPZ)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise DataError(
            path, f"npz frames must be uint8 (F, H, W, 3), got {frames.dtype} {frames.shape}", BAD_NPZ
        )
    if frames.shape[0] == 0:
        raise DataError(path, "npz holds 0 frames", BAD_NPZ)
    fps = None
    if fps_array is not None:
        try:
            fps = float(np.asarray(fps_array).reshape(-1)[0])
        except (ValueError, TypeError, IndexError) as e:
            raise DataError(path, f"npz 'fps' is not a number: {fps_array!r}", BAD_NPZ) from e
        if not (math.isfinite(fps) and fps > 0):
            raise DataError(path, f"npz 'fps' must be positive, got {fps}", BAD_NPZ)
    return frames, fps


def _iter_decoded(capture: cv2.VideoCapture) -> Iterator[np.ndarray]:
    """Yield BGR frames until the decoder stops."""
    while True:
        ok, frame = capture.read()
        if not ok or frame is None:
            return
        yield frame


def _read_video(path: Path, target_fps: float | None, max_frames: int | None) -> tuple[np.ndarray, float]:
    """Decode a video with OpenCV/FFmpeg, streaming and keeping only the frames we need."""
    capture = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    try:
        if not capture.isOpened():
            raise DataError(path, "cannot open video (unreadable or not a video)", UNREADABLE_VIDEO)
        source_fps = float(capture.get(cv2.CAP_PROP_FPS) or 0.0)
        if not (math.isfinite(source_fps) and source_fps > 0):
            logger.warning("%s: video reports no frame rate; not resampling", path)
            source_fps = 0.0
        frames = _collect_frames(_iter_decoded(capture), source_fps, target_fps, max_frames)
    except cv2.error as e:
        raise DataError(path, f"decoder error: {str(e).strip().splitlines()[-1]}", UNREADABLE_VIDEO) from e
    finally:
        capture.release()
    if not frames:
        raise DataError(path, "no frames could be decoded", UNREADABLE_VIDEO)
    array = np.stack(frames)
    return np.ascontiguousarray(array[..., ::-1]), source_fps  # BGR -> RGB


def _collect_frames(
    decoded: Iterator[np.ndarray], source_fps: float, target_fps: float | None, max_frames: int | None
) -> list[np.ndarray]:
    """Pick decoded frames at timestamps k / target_fps (nearest frame), stopping early."""
    resample = target_fps is not None and source_fps > 0 and source_fps != target_fps
    ratio = source_fps / target_fps if resample else 1.0
    picked: list[np.ndarray] = []
    k = 0
    index = -1
    last = None
    for index, frame in enumerate(decoded):
        last = frame
        while math.floor(k * ratio + 0.5) == index:
            picked.append(frame)
            k += 1
            if max_frames is not None and len(picked) >= max_frames:
                return picked
    # Timestamps still inside the clip whose nearest frame would be past the end: use the last one.
    num_frames = index + 1
    while last is not None and k * ratio < num_frames - 1e-9:
        picked.append(last)
        k += 1
        if max_frames is not None and len(picked) >= max_frames:
            break
    return picked
