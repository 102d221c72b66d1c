"""Round 4's data causes: a clip whose frame size changes mid-stream is one skipped, counted sample (and one line
in sample.py's --control-video), an npz declaring gigabytes is refused before it is read, `*_control` names are
dropped only on VACE bases, every media file left out of a concept folder is logged and counted, and a transformer
config that contradicts its weights is refused before the model is built from it."""
from __future__ import annotations

import io
import json
import logging
import os
import shutil
import zipfile
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from modules.dataLoader.discovery import discover_concept
from modules.dataLoader.errors import DataError
from modules.dataLoader.vace_modules import is_control_file
from modules.dataLoader.video_io import read_video_frames
from modules.util.errors import UserError
from tests.faults.test_data_faults import load_model, plain_loader  # noqa: F401  (fixture)
from tests.faults.test_fault_suite import one_thread  # noqa: F401  (autouse: one torch thread here too)


def _ts(width: int, height: int, frames: int, value: int) -> bytes:
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mpegts") as container:
        stream = container.add_stream("mpeg2video", rate=16)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for _ in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((height, width, 3), value, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


def size_changing_clip(path: Path) -> Path:
    """An MPEG-TS stream (FFmpeg finds it by its content whatever the name) that is 64x64, then 48x32."""
    path.write_bytes(_ts(64, 64, 9, 100) + _ts(48, 32, 9, 200))
    return path


def test_a_frame_size_change_mid_stream_is_a_data_error(tmp_path):
    clip = size_changing_clip(tmp_path / "clip.mp4")
    with pytest.raises(DataError, match=r"frame size changes mid-stream \(64x64, then 48x32"):
        read_video_frames(clip, target_fps=16, max_frames=17)  # old code: numpy's ValueError from np.stack


def test_a_clip_changing_size_is_skipped_and_counted(load_model, video_dataset, tmp_path):
    data = Path(shutil.copytree(video_dataset, tmp_path / "data"))
    size_changing_clip(data / "003.mp4")
    (data / "003.txt").write_text("a changing clip")
    loader = plain_loader(load_model("t2v"), data, tmp_path, latent_caching=False)
    loader.prepare()
    assert {item.sample.media_path.name for item in loader.items} == {"000.mp4", "001.mp4", "002.mp4"}
    (entry,) = loader.skips.entries
    assert entry.path.endswith("003.mp4") and "frame size changes mid-stream" in entry.message


def test_an_npz_declaring_gigabytes_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.npz"  # a header saying (100000, 480, 832, 3) over 16 bytes of data
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("frames.npy", np.lib.format.MAGIC_PREFIX + b"\x01\x00" + _npy_header((100_000, 480, 832, 3))
                         + b"\0" * 16)
    with pytest.raises(DataError, match=r"declares \(100000, 480, 832, 3\) = 111.6 GiB, more than the 4 GiB"):
        read_video_frames(path)


def _npy_header(shape) -> bytes:
    text = repr({"descr": "|u1", "fortran_order": False, "shape": shape}).encode()
    padding = 64 - (10 + len(text) + 1) % 64
    text += b" " * padding + b"\n"
    return len(text).to_bytes(2, "little") + text


def test_control_names_are_clips_on_a_non_vace_base_and_controls_on_a_vace_base(tmp_path):
    for name in ("walk.mp4", "walk_control.mp4", "jump_control_mask.mp4"):
        (tmp_path / name).write_bytes(b"")
    plain = {s.media_path.name for s in discover_concept(tmp_path, False, warn_missing_captions=False)}
    vace = {s.media_path.name for s in discover_concept(tmp_path, False, warn_missing_captions=False,
                                                         side_files=is_control_file)}
    assert plain == {"walk.mp4", "walk_control.mp4", "jump_control_mask.mp4"}  # old code: dropped silently
    assert vace == {"walk.mp4"}


def test_every_media_file_left_out_is_logged_and_counted(tmp_path, caplog):
    (tmp_path / "a.mp4").write_bytes(b"")
    (tmp_path / "._a.mp4").write_bytes(b"")  # macOS metadata
    os.symlink("/dev/zero", tmp_path / "device.mp4")
    os.mkfifo(tmp_path / "pipe.mp4")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.mp4").write_bytes(b"")
    os.symlink(elsewhere, tmp_path / "linked")
    with caplog.at_level(logging.WARNING):
        found = discover_concept(tmp_path, True, warn_missing_captions=False)
    assert [s.media_path.name for s in found] == ["a.mp4"]
    assert "1 symlinked sub-folders not followed (linked)" in caplog.text
    assert "2 not a regular file (" in caplog.text and "device.mp4" in caplog.text and "pipe.mp4" in caplog.text
    assert "1 hidden (._a.mp4)" in caplog.text


@pytest.mark.parametrize("key, value, named", [("num_layers", 1_000_000, "num_layers is 1000000, but the weights "
                                                                          "have 2"),
                                               ("attention_head_dim", 4096, "num_attention_heads × attention_head_dim"),
                                               ("ffn_dim", 999, "ffn_dim is 999, but the weights have")])
def test_a_transformer_config_that_contradicts_its_weights_is_refused_before_building(tiny_model, tmp_path, key,
                                                                                      value, named):
    from modules.modelLoader.WanModelLoader import WanModelLoader

    model = Path(shutil.copytree(tiny_model("t2v"), tmp_path / "model"))
    config_file = model / "transformer" / "config.json"
    config = json.loads(config_file.read_text())
    config[key] = value
    config_file.write_text(json.dumps(config))
    with pytest.raises(UserError, match=f"config.json': {named}"):
        WanModelLoader().load(str(model), torch.device("cpu"))


def test_a_control_video_changing_size_is_one_line_for_sample_py(tmp_path):
    from modules.modelSampler.sample_video import read_sample_video

    clip = size_changing_clip(tmp_path / "control.mp4")
    with pytest.raises(UserError, match=r"^sample control_video '.*control.mp4' cannot be read \(its frame"):
        read_sample_video(str(clip), "control_video", 16.0, 17, 64, 64)
