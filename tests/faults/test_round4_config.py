"""Round 4's config and input-file causes: each ends in one line naming the key or file, at start-up (before a model
loads) or before the file is read — integers beyond what Python converts or beyond 64 bits, JSON files that are
not regular files or are huge, keys that do nothing on the chosen base, files the run would read only later."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from modules.config.loading import load_concepts, load_train_config, loads_json
from modules.config.train_config import TrainConfig
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import REPO_ROOT, train_config_dict
from tests.faults.test_startup_checks import no_model_load, start_error  # noqa: F401  (fixture)

HUGE = "9" * 5000  # more digits than Python's int() converts (sys.get_int_max_str_digits() is 4300)


def write(tmp_path, text, name="config.json"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------------- JSON integers


def test_an_integer_too_long_for_python_is_one_line_in_every_reader(tmp_path):
    from modules.config.e2v_dataset_config import load_dataset_config
    from modules.dataLoader.discovery import read_jsonl_manifest
    from modules.dataLoader.errors import DataError
    from modules.evaluation.prompts import read_prompts

    with pytest.raises(ConfigError, match=r"config file '.*' holds a number too long to read"):
        load_train_config(write(tmp_path, f'{{"epochs": {HUGE}}}'))
    with pytest.raises(ConfigError, match=r"concept file .* holds a number too long"):
        load_concepts(write(tmp_path, f'[{{"path": "x", "repeats": {HUGE}}}]', "concepts.json"))
    with pytest.raises(ConfigError, match=r"dataset config file .* holds a number too long"):
        load_dataset_config(write(tmp_path, f'{{"datasets": {HUGE}}}', "dataset.json"))
    with pytest.raises(ConfigError, match=r"prompts file .* holds a number too long"):
        read_prompts(write(tmp_path, f'[{{"prompt": {HUGE}}}]', "prompts.json"))
    with pytest.raises(DataError, match=r"line 1: holds a number too long"):
        read_jsonl_manifest(write(tmp_path, f'{{"path": "a.mp4", "n": {HUGE}}}\n', "m.jsonl"))
    with pytest.raises(ConfigError, match=r"--config-value 'seed' holds a number too long"):
        load_train_config(write(tmp_path, "{}"), overrides=[f"seed={HUGE}"])


@pytest.mark.parametrize("key", ["seed", "samples.0.seed", "epochs"])
def test_an_integer_beyond_64_bits_names_its_key(tmp_path, key):
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key.replace('.0.', '[0].')}' is 1844674")):
        load_train_config(write(tmp_path, "{}"), overrides=[f"{key}={2 ** 64 + 1}"])
    assert load_train_config(write(tmp_path, "{}"), overrides=[f"seed={2 ** 64 - 1}"]).seed == 2 ** 64 - 1


def test_an_integer_too_large_for_a_float_key_names_it(tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'learning_rate' is .* too large for a number"):
        load_train_config(write(tmp_path, json.dumps({"learning_rate": 10 ** 400})))


def test_the_manifest_line_depth_guard(tmp_path):
    from modules.dataLoader.discovery import read_jsonl_manifest
    from modules.dataLoader.errors import DataError

    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(DataError, match=r"line 2: nests lists/objects more than 100 levels"):
        read_jsonl_manifest(write(tmp_path, f'{{"path": "a.mp4"}}\n{deep}\n', "m.jsonl"))


def test_gui_fields_refuse_huge_and_64_bit_overflowing_integers():
    from modules.ui.controllers.fields import INT, JSON, FieldError, FieldSpec, parse_text

    with pytest.raises(FieldError, match="too long for a number"):
        parse_text(FieldSpec("seed", "seed", INT), HUGE)
    with pytest.raises(FieldError, match="64 bits"):
        parse_text(FieldSpec("seed", "seed", INT), str(2 ** 64))
    with pytest.raises(FieldError, match="number too long"):
        parse_text(FieldSpec("resolution", "resolution", JSON), f"[{HUGE}]")
    assert loads_json("[1, 2]", "x") == [1, 2]


# ------------------------------------------------------------------------------------------- input files


def test_a_config_that_is_a_pipe_is_refused_before_reading(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"config file '.*config.json' is not a regular file"):
        load_train_config(fifo)  # old code: read_bytes() on a FIFO blocks forever


def test_a_huge_config_is_refused_before_reading(tmp_path):
    big = tmp_path / "config.json"
    with open(big, "wb") as f:
        f.truncate(65 << 20)  # sparse: no disk used
    with pytest.raises(ConfigError, match=r"config file '.*' is 65 MiB, more than the 64 MiB"):
        load_train_config(big)


def test_a_manifest_that_is_not_a_regular_file_is_refused(tmp_path):
    from modules.dataLoader.discovery import read_jsonl_manifest
    from modules.dataLoader.errors import DataError

    fifo = tmp_path / "m.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        read_jsonl_manifest(fifo)


def test_a_caption_that_is_a_pipe_or_huge_is_not_read(tmp_path, caplog):
    from modules.dataLoader.discovery import read_caption

    os.mkfifo(tmp_path / "a.txt")
    with open(tmp_path / "b.txt", "wb") as f:
        f.truncate(8 << 20)
    assert read_caption(tmp_path / "a.txt") == "" and read_caption(tmp_path / "b.txt") == ""
    assert "not a regular file" in caplog.text and "more than a caption can be" in caplog.text


def test_captions_are_counted_by_a_bounded_tokenisation():
    from modules.dataLoader.encoding_modules import caption_tokens
    from modules.model.WanModel import TEXT_SEQ_LEN

    seen = []

    class Tokenizer:  # one token per word, as far as it is given text
        def __call__(self, text, **kwargs):
            seen.append(len(text))
            return type("Ids", (), {"input_ids": text.split() + ["</s>"]})()

    assert caption_tokens(Tokenizer(), "a cat") == 3
    assert caption_tokens(Tokenizer(), "word " * 2_000_000) > TEXT_SEQ_LEN  # 10 MB of caption
    assert max(seen) <= 16 * (TEXT_SEQ_LEN + 1)


def test_an_empty_or_truncated_train_lock_is_stale(tmp_path):
    from modules.trainer.workspace_lock import LOCK_FILE, WorkspaceLock

    for text in ("", '{"pid": 1, "ho'):
        (tmp_path / LOCK_FILE).write_text(text)
        lock = WorkspaceLock.take(tmp_path)  # old code: "in use by another training run (pid None ...)"
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
        lock.release()


@pytest.mark.parametrize("content", ["[]", "3", '"transformer"'])
def test_a_model_index_that_is_not_an_object_is_one_line(tiny_model, tmp_path, content):
    import shutil

    from modules.model.detection import detect_variant

    model = shutil.copytree(tiny_model("t2v"), tmp_path / "model")
    (model / "model_index.json").write_text(content)
    with pytest.raises(UserError, match=r"model_index.json' holds .* not a JSON object"):
        detect_variant(model)


# ------------------------------------------------------------------------------------------- keys vs the base


def test_vace_context_scale_on_a_non_vace_base_is_refused(tiny_model, video_dataset, tmp_path, no_model_load):
    message = start_error(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, vace_context_scale=0.5))
    assert message.startswith("config key 'vace_context_scale' is 0.5, but it applies to VACE models")


def test_last_frame_condition_on_t2v_is_refused_before_loading(tiny_model, video_dataset, tmp_path, no_model_load):
    message = start_error(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, last_frame_condition=True))
    assert message.startswith("config key 'last_frame_condition' needs an I2V-layout base")


def test_a_samples_missing_control_video_is_refused_before_loading(tiny_model, video_dataset, tmp_path,
                                                                     no_model_load):
    sample = {"prompt": "x", "control_video": str(tmp_path / "gone.mp4")}
    message = start_error(train_config_dict(tiny_model("vace"), video_dataset, tmp_path, samples=[sample]))
    assert message.startswith("config key 'samples[0].control_video': ") and "gone.mp4' does not exist" in message


def test_a_corrupt_lora_weight_path_is_refused_before_loading(tiny_model, video_dataset, tmp_path, no_model_load):
    bad = tmp_path / "cut.safetensors"
    bad.write_bytes(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":")  # a header cut short
    message = start_error(train_config_dict(tiny_model("t2v"), video_dataset, tmp_path, lora_weight_path=str(bad)))
    assert message.startswith("config key 'lora_weight_path': ") and "cut.safetensors" in message


def test_more_vace_references_than_training_takes_are_refused(tiny_model, video_dataset, tmp_path, no_model_load):
    image = tmp_path / "ref.png"
    image.write_bytes(b"png")
    sample = {"prompt": "x", "elements": [str(image)] * 6}
    message = start_error(train_config_dict(tiny_model("vace"), video_dataset, tmp_path, samples=[sample]))
    assert "samples[0].elements' gives 6 reference images, but a VACE base takes at most 4" in message
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "sample.py"), "--model", tiny_model("vace"),
                             "--prompt", "x", "--elements", *[str(image)] * 6, "--output", str(tmp_path / "o.mp4")],
                            capture_output=True, text=True, timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode != 0 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "--elements gives 6 reference images" in errors[0]


@pytest.mark.parametrize("override", ["resolution=[480000, 832]", "samples.0.height=99984"])
def test_a_resolution_beyond_4096_px_a_side_is_refused(tmp_path, override):
    with pytest.raises(ConfigError, match=r"has a side of \d+ px, more than 4096"):
        load_train_config(write(tmp_path, "{}"), overrides=[override])
