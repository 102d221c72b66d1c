"""Reading videos (and images / .npz frame arrays) as uint8 RGB frame arrays; writing is in util.video_write.

Frames are always `uint8` arrays shaped (F, H, W, 3) in RGB order. Transparent image pixels are
composited on a background colour (white unless the caller says otherwise).
"""

import contextlib
import io
import logging
import math
import os
import zipfile
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
from PIL import Image, ImageOps, ImageSequence

from modules.config.train_config import DEFAULT_MAX_FRAME_PIXELS, WHITE
from modules.dataLoader.errors import (
    BAD_NPZ,
    MISSING_FILE,
    TOO_MANY_PIXELS,
    UNREADABLE_IMAGE,
    UNREADABLE_VIDEO,
    UNSUPPORTED_FILE,
    DataError,
)

logger = logging.getLogger(__name__)

VIDEO_EXTENSIONS = frozenset({".mp4", ".mov", ".mkv", ".webm", ".avi", ".gif"})
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp"})
NPZ_EXTENSIONS = frozenset({".npz"})
MEDIA_EXTENSIONS = VIDEO_EXTENSIONS | IMAGE_EXTENSIONS | NPZ_EXTENSIONS
# GIF and WebP are read with PIL: a video when they hold several frames, else an image. (FFmpeg decodes no
# animated WebP, and one reader gives both formats the same delay rule and transparency as images.)
ANIMATED_IMAGE_EXTENSIONS = frozenset({".gif", ".webp"})
_DEFAULT_FRAME_MS = 100  # a frame without a delay, or with one of at most _SHORTEST_FRAME_MS
# Browsers play a GIF/WebP delay of 0 or 10 ms as 100 ms, and so does ffprobe 5.1; the FFmpeg 8.1 in PyAV keeps 10 ms.
_SHORTEST_FRAME_MS = 10
_FFMPEG_EXTENSIONS = VIDEO_EXTENSIONS - ANIMATED_IMAGE_EXTENSIONS
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})


def _quiet_video_decoders() -> None:
    """Keep OpenCV's "[ WARN:0@...]" lines and FFmpeg's own messages about broken files off stderr: a broken
    file already gets one skip line. FFmpeg reads its level when OpenCV first opens a video, so this runs
    when this module is imported; a level the user set in the environment wins."""
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET
    if "OPENCV_LOG_LEVEL" not in os.environ:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)


_quiet_video_decoders()


def check_frame_pixels(path: str | os.PathLike, width: int, height: int, max_pixels: int) -> None:
    """Refuse (a `DataError` in its own skip category) a file whose header declares frames of more than
    `max_pixels` pixels, before anything is decoded: a small file may declare a huge canvas."""
    if width * height > max_pixels:
        raise DataError(path, f"its frames are {width}x{height} = {width * height} pixels, more than "
                        f"max_frame_pixels {max_pixels}: shrink it or raise max_frame_pixels", TOO_MANY_PIXELS)


def read_video_frames(
    path: str | os.PathLike,
    target_fps: float | None = None,
    max_frames: int | None = None,
    background: Sequence[int] = WHITE,
    max_pixels: int = DEFAULT_MAX_FRAME_PIXELS,
) -> tuple[np.ndarray, float]:
    """Read a video, image or .npz as (frames uint8 (F, H, W, 3) RGB, source_fps).

    With `target_fps`, frames are resampled to the timestamps k / target_fps (nearest source
    frame, timestamps inside the clip). `max_frames` caps the number of returned frames (decoding
    stops early). `source_fps` is 0.0 when unknown (images; .npz without an `fps` key and no
    `target_fps`). Transparent image pixels are composited on `background` (RGB). Raises
    `DataError` for missing, unreadable or empty files, and for frames over `max_pixels` (read from the header).
    """
    path = Path(path)
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    if target_fps is not None and not (math.isfinite(target_fps) and target_fps > 0):
        raise ValueError(f"target_fps must be a positive number, got {target_fps}")
    if not path.is_file():
        raise DataError(path, "file not found", MISSING_FILE)
    suffix = path.suffix.lower()
    if suffix in ANIMATED_IMAGE_EXTENSIONS and _frame_count(path) > 1:  # animated GIF / WebP: a video
        return _read_animated_image(path, target_fps, max_frames, background, max_pixels)
    if suffix in IMAGE_EXTENSIONS or suffix in ANIMATED_IMAGE_EXTENSIONS:  # a one-frame GIF is a still
        return read_image(path, background, max_pixels)[None], 0.0
    if suffix in NPZ_EXTENSIONS:
        frames, fps = _read_npz(path, max_pixels)
        source_fps = fps if fps is not None else (target_fps or 0.0)
        period = 1 / Fraction(source_fps) if source_fps else None  # no fps: every frame, as given
        timed = ((i * period, (i + 1) * period, frame) for i, frame in enumerate(frames)) if period else None
        picked = collect_by_time(timed, target_fps, max_frames, path) if timed else list(frames[:max_frames])
        return np.ascontiguousarray(np.stack(picked)), source_fps
    if suffix in VIDEO_EXTENSIONS:
        return _read_video(path, target_fps, max_frames, background, max_pixels=max_pixels)
    raise DataError(path, f"unsupported file type '{suffix}'", UNSUPPORTED_FILE)


def probe_video(path: str | os.PathLike, target_fps: float, background: Sequence[int] = WHITE,
                width: int = 64, max_pixels: int = DEFAULT_MAX_FRAME_PIXELS) -> tuple[np.ndarray, tuple[int, int]]:
    """Thumbnails `width` pixels wide of the frames `read_video_frames(path, target_fps)` returns, and the
    source's (H, W): a clip's length and content, holding one full-size frame at a time."""
    size: list[tuple[int, int]] = []

    def shrink(pixels: np.ndarray) -> np.ndarray:
        height, source_width = pixels.shape[:2]
        if not size:
            size.append((height, source_width))
        return cv2.resize(pixels, (width, max(1, round(height * width / source_width))), interpolation=cv2.INTER_AREA)

    path = Path(path)
    if path.suffix.lower() in _FFMPEG_EXTENSIONS and path.is_file():
        frames, _ = _read_video(path, target_fps, None, background, shrink, max_pixels)
        return frames, size[0]
    frames, _ = read_video_frames(path, target_fps=target_fps, background=background, max_pixels=max_pixels)  # images, .npz, GIF, WebP
    return np.stack([shrink(frame) for frame in frames]), size[0]


def _frame_count(path: Path) -> int:
    """Frames of an image file (1 for a still; 0 when PIL cannot open it: read_image names the error)."""
    try:
        with Image.open(path) as image:
            return int(getattr(image, "n_frames", 1))
    except (OSError, ValueError, Image.DecompressionBombError):
        return 0


def _read_animated_image(path: Path, target_fps: float | None, max_frames: int | None,
                         background: Sequence[int], max_pixels: int) -> tuple[np.ndarray, float]:
    """An animated GIF or WebP as a video: PIL's frames (disposal and blending applied) shown for their own delays
    (`info["duration"]`, ms; <= 10 ms is 100 ms, as browsers play them), transparency composited on
    `background`, resampled by time like videos."""
    try:
        with Image.open(path) as image:
            check_frame_pixels(path, *image.size, max_pixels)  # every frame of a GIF / WebP has the canvas's size
            durations = []

            def timed():
                start = Fraction(0)
                for frame in ImageSequence.Iterator(image):
                    frame.load()  # WebP sets the frame's duration when it is decoded
                    delay = int(frame.info.get("duration") or 0)
                    duration = Fraction(delay if delay > _SHORTEST_FRAME_MS else _DEFAULT_FRAME_MS, 1000)
                    durations.append(duration)
                    yield start, start + duration, composite_alpha(np.asarray(frame.convert("RGBA")), background)
                    start += duration

            frames = collect_by_time(timed(), target_fps, max_frames, path, Fraction(1, 1000))
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(path, f"cannot decode animated image ({e})", UNREADABLE_IMAGE) from None
    if not frames:
        raise DataError(path, "no frames could be decoded", UNREADABLE_IMAGE)
    # the mean rate of the frame starts, as for videos
    rate = (len(durations) - 1) / float(sum(durations[:-1])) if len(durations) > 1 else 0.0
    return np.stack(frames), rate


def read_image(path: str | os.PathLike, background: Sequence[int] = WHITE,
               max_pixels: int = DEFAULT_MAX_FRAME_PIXELS) -> np.ndarray:
    """Decode an image file to (H, W, 3) RGB uint8: grey expanded, transparent pixels (RGBA, LA, palette
    or colour-key transparency) composited on `background`. Raises `DataError` naming the file, also when its
    header (read by Pillow before anything is decoded) declares more than `max_pixels` pixels."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(path, "file not found", MISSING_FILE) from None
    except OSError as e:
        raise DataError(path, f"cannot read image ({e.strerror or e})", UNREADABLE_IMAGE) from None
    rgba = _decode_transparent(path, data, max_pixels)
    if rgba is not None:
        return composite_alpha(rgba, background)
    buffer = np.frombuffer(data, dtype=np.uint8)  # imdecode also works for non-ASCII paths
    image = cv2.imdecode(buffer, cv2.IMREAD_COLOR) if buffer.size else None
    if image is None:
        raise DataError(path, "cannot decode image", UNREADABLE_IMAGE)
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def _decode_transparent(path: Path, data: bytes, max_pixels: int) -> np.ndarray | None:
    """(H, W, 4) RGBA of an image that has transparency, else None (OpenCV then decodes it: its colour decode
    would drop the alpha). The size is checked first, from the header; an image whose header Pillow cannot
    read is unreadable (OpenCV would decode it without a look at its size)."""
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
    except Image.DecompressionBombError:  # Pillow's own limit, twice its MAX_IMAGE_PIXELS: no size to name
        raise DataError(path, f"its frames are over Pillow's limit of {2 * (Image.MAX_IMAGE_PIXELS or 0)} pixels "
                        f"and max_frame_pixels {max_pixels}: shrink it", TOO_MANY_PIXELS) from None
    except (OSError, ValueError) as e:
        raise DataError(path, f"cannot decode image ({e})", UNREADABLE_IMAGE) from None
    with image:
        check_frame_pixels(path, *image.size, max_pixels)
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


# An npz is read whole: 4 GiB of uint8 frames is 3,500 frames of 480x832, longer than any clip Wan trains on.
MAX_NPZ_BYTES = 4 << 30


def _read_npz(path: Path, max_pixels: int) -> tuple[np.ndarray, float | None]:
    """Load the frame array (key `frames`, or the only array) and the optional `fps`; arrays whose headers
    declare frames over `max_pixels` are refused before they are read (a compressed npz may be tiny)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            for name in archive.files:
                shape = _npy_shape(archive.zip, name)
                if len(shape) == 4:
                    check_frame_pixels(path, shape[2], shape[1], max_pixels)
                if math.prod(shape) > MAX_NPZ_BYTES:  # declared by the header; a compressed npz may be tiny
                    raise DataError(path, f"its array '{name}' declares {shape} = {math.prod(shape) / (1 << 30):.1f} "
                                    f"GiB, more than the {MAX_NPZ_BYTES >> 30} GiB read at once: split the clip or "
                                    "give an mp4", BAD_NPZ)
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


def _npy_shape(archive: zipfile.ZipFile, name: str) -> tuple[int, ...]:
    """The shape an npz member's .npy header declares, read without its data."""
    with archive.open(f"{name}.npy") as member:
        major, _ = np.lib.format.read_magic(member)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        return read(member)[0]


@contextlib.contextmanager
def _opened_video(path: str | os.PathLike) -> Iterator[tuple[av.container.InputContainer, av.video.stream.VideoStream]]:
    """The container and its first video stream, closed after; `DataError` for a file FFmpeg cannot open or that
    holds no video stream (an audio-only file)."""
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise DataError(path, f"cannot open video ({e})", UNREADABLE_VIDEO) from None
    with container:
        if not container.streams.video:
            raise DataError(path, "holds no video stream", UNREADABLE_VIDEO)
        yield container, container.streams.video[0]


def _read_video(path: Path, target_fps: float | None, max_frames: int | None,
                background: Sequence[int] = WHITE, shrink=None,
                max_pixels: int = DEFAULT_MAX_FRAME_PIXELS) -> tuple[np.ndarray, float]:
    """Decode a video with FFmpeg through PyAV, by presentation timestamps, streaming and keeping only the frames
    we need; rotation metadata is applied as players do, an alpha channel composited like images'. Frames over
    `max_pixels` are refused: the stream's declared size before decoding, each decoded frame's before its
    conversion (a stream may change size)."""
    with _opened_video(path) as (container, stream):
        check_frame_pixels(path, stream.codec_context.width, stream.codec_context.height, max_pixels)
        stream.thread_type = "AUTO"
        rate = stream.average_rate or stream.guessed_rate
        source_fps = float(rate) if rate else 0.0
        seen: list[Fraction] = []  # each frame's start, as decoded; then None once the stream ended

        def timed():
            for start, end, frame in _timed_frames(container.decode(stream), stream.time_base, rate):
                seen.append(start)
                yield start, end, frame
            seen.append(None)

        try:
            tick = Fraction(stream.time_base) if stream.time_base else Fraction(0)
            frames = collect_by_time(timed(), target_fps, max_frames, path, tick,
                                     lambda frame: _frame_pixels(frame, background, shrink, path, max_pixels))
        except (av.error.FFmpegError, ValueError) as e:
            raise DataError(path, f"decoder error ({e})", UNREADABLE_VIDEO) from None
    if not frames:
        raise DataError(path, "no frames could be decoded", UNREADABLE_VIDEO)
    changed = next((i for i, f in enumerate(frames) if f.shape != frames[0].shape), None)
    if changed is not None:  # a stream may change size (the pixel check above allows it): no clip of one shape
        (h0, w0), (h1, w1) = frames[0].shape[:2], frames[changed].shape[:2]
        raise DataError(path, f"its frame size changes mid-stream ({w0}x{h0}, then {w1}x{h1} at frame {changed}): "
                        "re-encode it at one size", UNREADABLE_VIDEO)
    if len(seen) > 2 and seen[-1] is None and seen[-2] > 0:  # read to its end: the mean rate of its frame starts
        source_fps = (len(seen) - 2) / float(seen[-2])  # (a last frame's duration is often a muxer's guess)
    return np.stack(frames), source_fps


def video_header(path: str | os.PathLike) -> tuple[float, float]:
    """(mean frame rate, seconds) of the first video stream as the header gives them (0.0 where it gives none);
    `DataError` for a file FFmpeg cannot open or that holds no video stream (an audio-only file)."""
    with _opened_video(path) as (container, stream):
        rate = stream.average_rate or stream.guessed_rate
        if stream.duration and stream.time_base:
            seconds = float(stream.duration * stream.time_base)
        else:
            seconds = container.duration / av.time_base if container.duration else 0.0
        return (float(rate) if rate else 0.0), max(0.0, seconds)


def stream_video_frames(path: str | os.PathLike, target_fps: float | None, shrink=None,
                        background: Sequence[int] = WHITE, max_pixels: int = DEFAULT_MAX_FRAME_PIXELS,
                        facts: dict | None = None) -> Iterator[np.ndarray]:
    """`read_video_frames` of an FFmpeg video one frame at a time, for videos too long to hold: the same
    timestamps, rotation, alpha and pixel budget. A decoder error after some frames (a damaged tail) raises
    `DataError` once the frames before it were given; so does a change of frame size mid-stream. `facts` (a dict)
    gets `rotation` (degrees, from the display matrix) and `variable_rate` (see `frames_by_time`) when they apply."""
    facts = {} if facts is None else facts

    def load(frame: av.VideoFrame) -> np.ndarray:
        if frame.rotation:
            facts["rotation"] = frame.rotation
        return _frame_pixels(frame, background, shrink, path, max_pixels)

    path = Path(path)
    with _opened_video(path) as (container, stream):
        check_frame_pixels(path, stream.codec_context.width, stream.codec_context.height, max_pixels)
        stream.thread_type = "AUTO"
        rate = stream.average_rate or stream.guessed_rate
        tick = Fraction(stream.time_base) if stream.time_base else Fraction(0)
        timed = _timed_frames(container.decode(stream), stream.time_base, rate)
        shape = None
        try:
            for index, pixels in enumerate(frames_by_time(timed, target_fps, None, path, tick, load, facts)):
                if shape is not None and pixels.shape != shape:
                    raise DataError(path, f"its frame size changes mid-stream at frame {index}: re-encode it at "
                                    "one size", UNREADABLE_VIDEO)
                shape = pixels.shape
                yield pixels
        except (av.error.FFmpegError, ValueError) as e:
            raise DataError(path, f"decoder error ({e})", UNREADABLE_VIDEO) from None


def _timed_frames(decoded, time_base, rate):
    """(start, end) in seconds (Fractions, from the first frame) and each decoded frame. A frame's end is the next
    one's start; the last one's is its start plus its duration (or one frame period). A frame without a timestamp
    starts where the one before ended."""
    first, previous = None, None
    for frame in decoded:
        if frame.pts is not None and time_base is not None:
            start = Fraction(frame.pts) * Fraction(time_base)
            if first is None:
                first = start
            start -= first
        else:
            start = previous[0] + previous[1] if previous is not None else Fraction(0)
        if previous is not None:  # a broken file's timestamps may step back: never before the frame shown
            start = max(start, previous[0])
            yield previous[0], start, previous[2]
        duration = Fraction(frame.duration) * Fraction(time_base) if frame.duration and time_base else None
        if duration is None:
            duration = 1 / Fraction(rate) if rate else Fraction(1)
        previous = (start, duration, frame)
    if previous is not None:
        yield previous[0], previous[0] + previous[1], previous[2]


def _frame_pixels(frame: av.VideoFrame, background: Sequence[int], shrink=None, path: str | os.PathLike = "",
                  max_pixels: int = DEFAULT_MAX_FRAME_PIXELS) -> np.ndarray:
    """RGB uint8 of a decoded frame: alpha composited on `background`, the display matrix's rotation applied,
    passed through `shrink` when given."""
    check_frame_pixels(path, frame.width, frame.height, max_pixels)
    if frame.format.has_palette or any(c.is_alpha for c in frame.format.components):  # rgba, yuva, ProRes 4444
        pixels = composite_alpha(frame.to_ndarray(format="rgba"), background)
    else:
        pixels = frame.to_ndarray(format="rgb24")
    if frame.rotation:  # the display matrix: counter-clockwise degrees, as np.rot90 turns
        pixels = np.ascontiguousarray(np.rot90(pixels, k=round(frame.rotation / 90) % 4))
    return shrink(pixels) if shrink is not None else pixels


def collect_by_time(timed, target_fps: float | None, max_frames: int | None,
                    name: str | os.PathLike = "", tick: Fraction = Fraction(0), load=None) -> list[np.ndarray]:
    """`frames_by_time` as a list."""
    return list(frames_by_time(timed, target_fps, max_frames, name, tick, load))


def frames_by_time(timed, target_fps: float | None, max_frames: int | None = None, name: str | os.PathLike = "",
                   tick: Fraction = Fraction(0), load=None, facts: dict | None = None) -> Iterator[np.ndarray]:
    """The frames shown at the timestamps k / target_fps (k = 0, 1, ... while inside the clip), one by one: for each,
    the frame whose start is nearest (a tie goes to the later frame, as rounding half up does; for a constant rate
    this is frame round(k · source_fps / target_fps)). Without `target_fps`, every frame. `timed` yields
    (start, end, frame) in display order, starts from 0; decoding stops as soon as `max_frames` are picked.
    Gaps between starts that differ by more than 1 % and one `tick` (the timestamps' unit) are noted once per
    file as a variable frame rate. `load` turns a picked frame into its array, once, and only if it is picked
    (a decoded video frame's colour conversion is then skipped for the frames a lower rate drops). `facts` (a dict)
    gets `variable_rate`: the shortest and longest frame shown, in seconds, when the rate varies."""
    load = load or (lambda frame: frame)
    count = 0
    step = 1 / Fraction(target_fps) if target_fps else None
    k = 0
    previous = None  # (start, end, frame) of the frame before
    periods = set()
    for start, end, frame in timed:
        if previous is not None:  # a last frame's end is often a muxer's guess: starts only
            periods.add(start - previous[0])
        if step is None:
            yield load(frame)
            count += 1
        elif previous is not None:  # timestamps nearer the previous frame's start than this one's
            middle = (previous[0] + start) / 2
            pixels = None
            while k * step < middle:
                pixels = load(previous[2]) if pixels is None else pixels
                yield pixels
                count += 1
                k += 1
                if max_frames is not None and count >= max_frames:
                    return
        if max_frames is not None and count >= max_frames:
            return
        previous = (start, end, frame)
    if step is not None and previous is not None:  # the rest of the clip shows the last frame
        pixels = None
        while k * step < previous[1] and (max_frames is None or count < max_frames):
            pixels = load(previous[2]) if pixels is None else pixels
            yield pixels
            count += 1
            k += 1
    if len(periods) > 1 and max(periods) > Fraction(101, 100) * min(periods) + tick:
        _note_variable_rate(name, float(min(periods)), float(max(periods)))
        if facts is not None:
            facts["variable_rate"] = (float(min(periods)), float(max(periods)))


_VARIABLE_RATE_NOTED: set[str] = set()


def _note_variable_rate(name: str | os.PathLike, shortest: float, longest: float) -> None:
    """One line per file and run: a variable-frame-rate video, resampled by its timestamps."""
    if str(name) in _VARIABLE_RATE_NOTED:
        return
    _VARIABLE_RATE_NOTED.add(str(name))
    logger.info("%s: variable frame rate (frames shown %.1f to %.1f ms); resampled by its timestamps", name,
                1000 * shortest, 1000 * longest)
