"""Textual-inversion embeddings of UMT5 (training_method EMBEDDING, and beside a LoRA): ComfyUI's injection, what
trains, resume, the files, continuing from one, sampling with one, config errors."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from modules.config.train_config import SampleConfig, TrainConfig
from modules.model.text_embedding import WanModelEmbedding, placeholder_token_ids
from modules.modelLoader.WanModelLoader import WanModelLoader
from modules.modelSaver.embedding_file import read_embedding
from modules.synthetic.synthetic_data import write_video_dataset
from modules.trainer.GenericTrainer import GenericTrainer
from modules.util.base_config import ConfigError
from modules.util.errors import UserError
from tests.conftest import stop_and_resume, train_config_dict
from tests.script_runner import run_script

PLACEHOLDER = "<sks>"


@pytest.fixture(scope="module")
def placeholder_dataset(tmp_path_factory):
    """Three clips: two captions hold the placeholder, one does not."""
    folder = write_video_dataset(tmp_path_factory.mktemp("sks"), count=3, frames=17, height=32, width=32)
    for index, caption in enumerate([f"a video of {PLACEHOLDER} moving", f"{PLACEHOLDER}, spinning fast",
                                     "a red square moving left"]):
        (folder / f"{index:03d}.txt").write_text(caption, encoding="utf-8")
    return folder


def embedding_config(tiny_model, data, work, **overrides) -> TrainConfig:
    values = {"training_method": "EMBEDDING", "embedding": {"placeholder": PLACEHOLDER, "token_count": 2,
                                                            "initial_embedding_text": "square"},
              "output_model_destination": str(work / "output" / "sks.safetensors"), "learning_rate": 0.05,
              "epochs": 2, **overrides}
    return TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), data, work, **values))


def comfyui_prompt_embeds(tokenizer, text_encoder, before: str, vectors: torch.Tensor, after: str) -> torch.Tensor:
    """The states ComfyUI computes for 'before embedding:<name> after' (comfy/sd1_clip.py): each word group tokenized
    alone with its end token cut, the vectors inserted between the groups' token embeddings, the end token (1),
    padding to 512 with pad (0) masked out, and the masked states zeroed (zero_out_masked)."""
    groups = [tokenizer(text).input_ids[:-1] for text in (before, after)]
    ids = groups[0] + groups[1] + [tokenizer.eos_token_id]
    pad = 512 - len(ids) - len(vectors)
    table = text_encoder.get_input_embeddings()
    tokens = table(torch.tensor([ids + [0] * pad])).float()
    at = len(groups[0])
    embeds = torch.cat([tokens[:, :at], vectors[None].float(), tokens[:, at:]], dim=1)
    mask = torch.tensor([[1] * (len(ids) + len(vectors)) + [0] * pad])
    with torch.no_grad():
        states = text_encoder(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
    return states * mask[..., None]


def test_prompt_embeddings_equal_comfyuis_injection(tiny_model):
    model = WanModelLoader().load(tiny_model("t2v"), torch.device("cpu"))
    width = model.text_encoder.config.d_model
    vectors = torch.randn(3, width, generator=torch.Generator().manual_seed(0))
    model.text_embedding = WanModelEmbedding(PLACEHOLDER, vectors)
    ours = model.encode_prompts([f"a video of {PLACEHOLDER} moving left"])
    theirs = comfyui_prompt_embeds(model.tokenizer, model.text_encoder, "a video of", vectors, "moving left")
    assert ours.shape == theirs.shape == (1, 512, width)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    # the vectors matter, and a prompt without the placeholder is encoded exactly as diffusers does
    plain = model.encode_prompts(["a video of square moving left"])
    assert (ours - plain).abs().max() > 1e-3
    through_ours = model.encode_with_embedding(["a video of square moving left"], model.text_embedding)
    torch.testing.assert_close(through_ours, model.encode_prompts(["a video of square moving left"],
                                                                  with_embedding=False), rtol=0, atol=1e-5)


@pytest.mark.parametrize("text, fires", [("a cat sitting", True), ("a cat, sitting", True), ("cat", True),
                                         ("a cat.", True), ("scattered leaves", False), ("a cathedral", False),
                                         ("tomcat", False), ("cats", False)])
def test_the_placeholder_is_matched_as_a_whole_word(text, fires):
    """Regression: 'cat' fired inside "scattered" and "cathedral" (a substring match)."""
    assert WanModelEmbedding("cat", torch.zeros(2, 4)).applies_to(text) is fires


def test_the_placeholder_takes_its_slots_only_where_it_is_a_whole_word():
    class Words:  # one id per word: shows where the text was split
        eos_token_id = 1

        def __call__(self, text, add_special_tokens=False):
            return type("Encoded", (), {"input_ids": [100 + len(word) for word in text.split()]})()

    embedding = WanModelEmbedding("cat", torch.zeros(2, 4))
    ids, slots = placeholder_token_ids(Words(), "scattered cat, cathedral", embedding, 512)
    assert ids == [109, 0, 0, 101, 109, 1] and slots == [1, 2]  # "scattered", the vectors, ",", "cathedral", </s>


def test_initial_vectors_are_means_of_the_text_tokens_or_tiled(tiny_model):
    model = WanModelLoader().load(tiny_model("t2v"), torch.device("cpu"))
    table = model.text_encoder.get_input_embeddings().weight.detach()
    ids = model.tokenizer("a red square", add_special_tokens=False).input_ids
    one = WanModelEmbedding.initialized(PLACEHOLDER, 1, "a red square", model.tokenizer, model.text_encoder)
    torch.testing.assert_close(one.vectors.detach()[0], table[ids].mean(dim=0))
    many = WanModelEmbedding.initialized(PLACEHOLDER, len(ids) + 2, "a red square", model.tokenizer, model.text_encoder)
    torch.testing.assert_close(many.vectors.detach(), table[[ids[i % len(ids)] for i in range(len(ids) + 2)]])


def test_an_embedding_run_changes_only_the_vectors_and_writes_a_comfyui_file(tiny_model, placeholder_dataset, tmp_path):
    trainer = GenericTrainer(embedding_config(tiny_model, placeholder_dataset, tmp_path))
    trainer.start()
    model = trainer.model
    encoder_before = {k: v.clone() for k, v in model.text_encoder.state_dict().items()}
    transformer_before = {k: v.clone() for k, v in model.transformer.state_dict().items()}
    vectors_before = model.text_embedding.vectors.detach().clone()
    trainer.train()
    paths = trainer.end()
    assert all(torch.equal(v, encoder_before[k]) for k, v in model.text_encoder.state_dict().items())
    assert all(torch.equal(v, transformer_before[k]) for k, v in model.transformer.state_dict().items())
    assert not torch.equal(model.text_embedding.vectors.detach(), vectors_before)  # both vectors trained
    assert (model.text_embedding.vectors.detach() - vectors_before).abs().amax(dim=1).min() > 0

    assert paths == [tmp_path / "output" / "sks.safetensors"]
    with safe_open(str(paths[0]), "pt") as f:
        assert list(f.keys()) == ["umt5xxl"]
        header = f.metadata()
        saved = f.get_tensor("umt5xxl")
    assert saved.shape == (2, model.text_encoder.config.d_model) and saved.dtype == torch.float32
    assert torch.equal(saved, model.text_embedding.vectors.detach().cpu())
    assert header["wantrainer.embedding.placeholder"] == PLACEHOLDER and header["wantrainer.embedding.token_count"] == "2"
    assert header["wantrainer.base_model"] == str(tiny_model("t2v"))
    assert not (tmp_path / "output" / "lora.safetensors").exists()


def test_an_embedding_run_resumes_bit_identically(tiny_model, placeholder_dataset, tmp_path):
    straight = GenericTrainer(embedding_config(tiny_model, placeholder_dataset, tmp_path / "a", epochs=3))
    straight.start()
    straight.train()
    expected = straight.setup.trainable_state()
    assert list(expected) == ["embedding.umt5xxl"]

    resumed = stop_and_resume(lambda **extra: GenericTrainer(
        embedding_config(tiny_model, placeholder_dataset, tmp_path / "b", epochs=3, **extra)), step=2)
    resumed.train()
    assert torch.equal(resumed.setup.trainable_state()["embedding.umt5xxl"], expected["embedding.umt5xxl"])


def test_only_captions_with_the_placeholder_run_umt5_in_the_step(tiny_model, placeholder_dataset, tmp_path,
                                                                 monkeypatch):
    trainer = GenericTrainer(embedding_config(tiny_model, placeholder_dataset, tmp_path, epochs=1, batch_size=1))
    trainer.start()
    assert next(trainer.model.text_encoder.parameters()).device == trainer.model.train_device  # kept for the step
    encoded: list[list[str]] = []
    original = trainer.model.encode_with_embedding
    monkeypatch.setattr(trainer.model, "encode_with_embedding",
                        lambda prompts, embedding: encoded.append(list(prompts)) or original(prompts, embedding))
    trainer.train()
    assert sorted(p for batch in encoded for p in batch) == sorted([f"a video of {PLACEHOLDER} moving",
                                                                   f"{PLACEHOLDER}, spinning fast"])


def test_lora_with_an_embedding_writes_both_and_continues_from_the_embedding(tiny_model, placeholder_dataset, tmp_path):
    config = dict(embedding={"placeholder": PLACEHOLDER, "learning_rate": 0.05}, epochs=1)
    first = GenericTrainer(TrainConfig.from_dict(train_config_dict(tiny_model("t2v"), placeholder_dataset,
                                                                   tmp_path / "a", **config)))
    first.start()
    first.train()
    paths = first.end()
    lora, embedding = tmp_path / "a" / "output" / "lora.safetensors", tmp_path / "a" / "output" / "lora_embedding.safetensors"
    assert paths == [lora, embedding]
    assert any("lora" in key for key in load_file(lora))
    assert load_file(embedding)["umt5xxl"].shape == (1, first.model.text_encoder.config.d_model)
    groups = first.optimizer.param_groups
    assert sorted(g["lr"] for g in groups) == [1e-3, 0.05]  # the vectors' own rate beside the LoRA's

    second = GenericTrainer(TrainConfig.from_dict(train_config_dict(
        tiny_model("t2v"), placeholder_dataset, tmp_path / "b", embedding_weight_path=str(embedding), **config)))
    second.start()
    assert torch.equal(second.model.text_embedding.vectors.detach(), load_file(embedding)["umt5xxl"])


def test_an_embedding_file_of_another_width_or_count_is_refused(tiny_model, placeholder_dataset, tmp_path):
    wrong = tmp_path / "wide.safetensors"
    save_file({"umt5xxl": torch.zeros(2, 4096)}, str(wrong))
    with pytest.raises(UserError, match=r"embedding_weight_path.*\(tokens, 32\)"):
        GenericTrainer(embedding_config(tiny_model, placeholder_dataset, tmp_path, embedding_weight_path=str(wrong))).start()
    three = tmp_path / "three.safetensors"
    save_file({"umt5xxl": torch.zeros(3, 32)}, str(three))
    with pytest.raises(UserError, match="holds 3 vector.*set embedding.token_count to 3"):
        GenericTrainer(embedding_config(tiny_model, placeholder_dataset, tmp_path, embedding_weight_path=str(three))).start()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_an_embedding_file_holding_nan_is_refused_before_the_model_loads(tiny_model, placeholder_dataset, tmp_path,
                                                                       monkeypatch, bad):
    """Regression: training from it skipped every step and wrote the NaN back with steps: 0."""
    path = tmp_path / "diverged.safetensors"
    vectors = torch.zeros(2, 32)
    vectors[1, 3] = bad
    save_file({"umt5xxl": vectors}, str(path))
    with pytest.raises(UserError, match=r"--embedding: '.*diverged.safetensors' holds 1 NaN/inf value"):
        read_embedding(path, 32, "--embedding")

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the embedding was checked")

    monkeypatch.setattr("modules.trainer.GenericTrainer.WanModelLoader.load_for_config", no_model)
    trainer = GenericTrainer(embedding_config(tiny_model, placeholder_dataset, tmp_path, embedding_weight_path=str(path)))
    with pytest.raises(UserError, match="config key 'embedding_weight_path': .* holds 1 NaN/inf value"):
        trainer.start()
    trainer.close()


def test_sampling_with_the_embedding_differs_only_where_the_placeholder_is(tiny_model, tmp_path):
    from modules.modelSampler.WanModelSampler import WanModelSampler

    model = WanModelLoader().load(tiny_model("t2v"), torch.device("cpu"))
    sampler = WanModelSampler(model)

    def frames(prompt: str) -> np.ndarray:
        return sampler.generate(SampleConfig(prompt=prompt, frames=5, height=32, width=32, steps=2, seed=3),
                                show_progress=False)

    without = frames(f"a {PLACEHOLDER} moving")
    plain = frames("a red square")
    model.text_embedding = WanModelEmbedding(PLACEHOLDER, 3 * torch.randn(2, model.text_encoder.config.d_model))
    assert not np.array_equal(frames(f"a {PLACEHOLDER} moving"), without)
    assert np.array_equal(frames("a red square"), plain)


def test_sample_py_applies_an_embedding_file(tiny_model, tmp_path):
    path = tmp_path / "sks.safetensors"
    save_file({"umt5xxl": 3 * torch.randn(2, 32, generator=torch.Generator().manual_seed(1))}, str(path),
              metadata={"wantrainer.embedding.placeholder": PLACEHOLDER})
    common = ["--model", str(tiny_model("t2v")), "--prompt", f"a {PLACEHOLDER} moving", "--frames", "5",
              "--height", "32", "--width", "32", "--steps", "2", "--device", "cpu"]
    for name, extra in (("plain", []), ("embedded", ["--embedding", str(path)])):
        done = run_script("sample.py", *common, *extra, "--output", str(tmp_path / f"{name}.mp4"))
        assert done.returncode == 0, done.stderr
    strips = [np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(tmp_path / f"{n}.png")) for n in
              ("plain", "embedded")]
    assert not np.array_equal(*strips)
    missing = run_script("sample.py", *common, "--embedding", str(tmp_path / "nope.safetensors"), "--output",
                         str(tmp_path / "x.mp4"))
    assert missing.returncode != 0 and "--embedding" in missing.stderr and "Traceback" not in missing.stderr


def test_a_comfyui_file_without_our_header_uses_its_stem_as_placeholder(tmp_path):
    path = tmp_path / "myconcept.safetensors"
    save_file({"umt5xxl": torch.ones(1, 8)}, str(path))
    assert read_embedding(path, 8, "--embedding").placeholder == "<myconcept>"
    other = tmp_path / "single.safetensors"
    save_file({"emb_params": torch.ones(2, 8)}, str(other))  # ComfyUI takes a file's only tensor too
    assert read_embedding(other, 8, "--embedding").token_count == 2


@pytest.mark.parametrize("values, message", [
    ({"training_method": "EMBEDDING"}, "embedding.placeholder' is required"),
    ({"training_method": "EMBEDDING", "embedding": {"placeholder": "my concept"}}, "one word"),
    ({"training_method": "FINE_TUNE", "output_model_format": "DIFFUSERS", "embedding": {"placeholder": "<x>"}},
     "LORA or EMBEDDING"),
    ({"embedding": {"placeholder": "<x>", "token_count": 0}}, "token_count' must be between 1 and 75"),
    ({"embedding_weight_path": "e.safetensors"}, "set embedding.placeholder"),
    ({"training_method": "EMBEDDING", "embedding": {"placeholder": "<x>"}, "lora_weight_path": "l.safetensors"},
     "no LoRA to continue"),
])
def test_embedding_config_errors_are_one_line(tmp_path, values, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(train_config_dict(tmp_path, tmp_path, tmp_path, **values))


def test_a_placeholder_no_caption_holds_is_refused_before_training(tiny_model, video_dataset, tmp_path):
    trainer = GenericTrainer(embedding_config(tiny_model, video_dataset, tmp_path))
    with pytest.raises(UserError, match="no training caption holds '<sks>'"):
        trainer.start()


def test_evaluate_compares_the_base_with_the_embedding(tiny_model, tmp_path):
    path = tmp_path / "sks.safetensors"
    save_file({"umt5xxl": 3 * torch.randn(2, 32, generator=torch.Generator().manual_seed(1))}, str(path),
              metadata={"wantrainer.embedding.placeholder": PLACEHOLDER})
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(f"a {PLACEHOLDER} moving\na red square\n", encoding="utf-8")
    output = tmp_path / "report"
    done = run_script("evaluate.py", "--model", str(tiny_model("t2v")), "--embedding", str(path), "--compare-base",
                      "--prompts", str(prompts), "--output", str(output), "--frames", "5", "--height", "32",
                      "--width", "32", "--steps", "2", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((output / "metrics.json").read_text())
    videos = {(v["model"], v["prompt"]): (output / v["video"]).read_bytes() for v in report["videos"]}
    assert set(report["means"]) == {"base", "trained"}
    assert videos[("base", f"a {PLACEHOLDER} moving")] != videos[("trained", f"a {PLACEHOLDER} moving")]
    assert videos[("base", "a red square")] == videos[("trained", "a red square")]  # no placeholder: unchanged


def test_ema_averages_the_vectors_and_samples_use_the_average(tiny_model, placeholder_dataset, tmp_path):
    trainer = GenericTrainer(embedding_config(tiny_model, placeholder_dataset, tmp_path, ema="CPU", ema_decay=0.5,
                                              epochs=1))
    trainer.start()
    trainer.train()
    raw = trainer.model.text_embedding.vectors.detach().clone()
    with trainer._averaged_weights(sampling=True):
        averaged = trainer.model.text_embedding.vectors.detach().clone()
    assert not torch.equal(raw, averaged)
    assert torch.equal(trainer.model.text_embedding.vectors.detach(), raw)  # restored after
    paths = trainer.end()
    assert torch.equal(load_file(paths[0])["umt5xxl"], averaged)  # the saved file holds the average


def test_an_e2v_lora_trains_an_embedding_beside_it(tiny_model, tmp_path):
    from tests.conftest import e2v_on_t2v_config

    values = e2v_on_t2v_config(tiny_model, tmp_path, embedding={"placeholder": PLACEHOLDER, "learning_rate": 0.05},
                               e2v={"image_encoder_model_name": str(tiny_model("i2v")), "export_i2v": False})
    for caption in sorted((tmp_path / "data").glob("*.txt")):
        caption.write_text(f"{PLACEHOLDER} walks past the object", encoding="utf-8")
    trainer = GenericTrainer(TrainConfig.from_dict(values))
    trainer.start()
    start = trainer.model.text_embedding.vectors.detach().clone()
    trainer.train()
    paths = trainer.end()
    assert [p.name for p in paths] == ["lora.safetensors", "lora_embedding.safetensors"]
    assert not torch.equal(load_file(paths[1])["umt5xxl"], start)
