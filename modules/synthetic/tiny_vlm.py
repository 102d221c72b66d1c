"""Tiny random Qwen3-VL and SAM 3 folders for the data tools' tests and benchmarks: the real transformers classes
built from shrunken configs (every width and depth cut down), with a word-level tokenizer holding the special tokens
each model needs. Nothing is downloaded; a folder is written in about a second."""
from __future__ import annotations

import json
from pathlib import Path

_WORDS = ("a an the this video clip shows image red green blue yellow grey white black circle square shape moving "
          "left right up down over on in of and with background object subject person bag dog cat man woman "
          "describe what happens one sentence short detailed camera scene element reference images is are it "
          "name named seconds").split()
_PUNCTUATION = list(".,:;!?'\"()-<>0123456789")
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>"]
#: Qwen's chat layout (an Instruct model's template, without tools or thinking)
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _word_tokenizer(specials: list[str], unk: str, **kwargs):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*specials, unk, *sorted(set(_WORDS)), *_PUNCTUATION, "user",
                                                 "assistant", "system"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token=unk, **kwargs), vocab


def write_tiny_qwen3_vl(folder: str | Path, seed: int = 0) -> Path:
    """A Qwen3-VL folder (config, safetensors weights, tokenizer with Qwen's chat template, preprocessor configs)
    that `modules.dataTools.vlm` loads as it loads Qwen/Qwen3-VL-*-Instruct."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    folder = Path(folder)
    tokenizer, vocab = _word_tokenizer(QWEN_SPECIALS, "<unk>", eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                       additional_special_tokens=QWEN_SPECIALS[1:])
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    config = Qwen3VLConfig(
        text_config={"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                     "max_position_embeddings": 2048, "rope_parameters": {
                         "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2],
                         "mrope_interleaved": True}},
        vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16,
                       "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 32,
                       "num_position_embeddings": 64, "deepstack_visual_indexes": [0, 1]},
        image_token_id=vocab["<|image_pad|>"], video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"], vision_end_token_id=vocab["<|vision_end|>"],
        tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = vocab["<|im_end|>"]
    model.generation_config.pad_token_id = vocab["<|endoftext|>"]
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    # small frames: the real defaults (shortest 128·32², longest 768·32² pixels) would upscale a 48 px clip
    video = {"size": {"shortest_edge": 32 * 32 * 2, "longest_edge": 64 * 32 * 32}, "patch_size": 16,
             "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
             "fps": 2, "min_frames": 2, "max_frames": 8, "video_processor_type": "Qwen3VLVideoProcessor"}
    image = {"size": {"shortest_edge": 32 * 32, "longest_edge": 64 * 32 * 32}, "patch_size": 16,
             "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
             "image_processor_type": "Qwen2VLImageProcessorFast"}
    (folder / "video_preprocessor_config.json").write_text(json.dumps(video, indent=1), encoding="utf-8")
    (folder / "preprocessor_config.json").write_text(json.dumps(image, indent=1), encoding="utf-8")
    return folder


def write_tiny_sam3(folder: str | Path, seed: int = 0, image_size: int = 112) -> Path:
    """A SAM 3 folder (Sam3Model config and safetensors weights, a CLIP-like tokenizer, the image processor's
    size) that `modules.dataTools.segmenter.Sam3Segmenter` loads as it loads facebook/sam3."""
    import torch
    from transformers import Sam3Config, Sam3Model

    folder = Path(folder)
    specials = ["<|startoftext|>", "<|endoftext|>"]
    tokenizer, vocab = _word_tokenizer(specials, "<unk>", bos_token=specials[0], eos_token=specials[1],
                                       pad_token=specials[1], model_max_length=32)
    grid = image_size // 14
    config = Sam3Config(
        vision_config={"backbone_config": {
            "model_type": "sam3_vit_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "image_size": image_size, "patch_size": 14, "window_size": grid // 2,
            "global_attn_indexes": [1], "pretrain_image_size": image_size // 2},
            "fpn_hidden_size": 32, "backbone_feature_sizes": [[4 * grid] * 2, [2 * grid] * 2, [grid] * 2]},
        text_config={"model_type": "clip_text_model", "vocab_size": len(vocab), "hidden_size": 32,
                     "intermediate_size": 64, "projection_dim": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                     "max_position_embeddings": 32, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1},
        geometry_encoder_config={"hidden_size": 32, "num_layers": 1, "num_attention_heads": 2,
                                 "intermediate_size": 64},
        detr_encoder_config={"hidden_size": 32, "num_layers": 1, "num_attention_heads": 2, "intermediate_size": 64},
        detr_decoder_config={"hidden_size": 32, "num_layers": 1, "num_queries": 8, "num_attention_heads": 2,
                             "intermediate_size": 64},
        mask_decoder_config={"hidden_size": 32, "num_upsampling_stages": 3, "num_attention_heads": 2})
    torch.manual_seed(seed)
    Sam3Model(config).eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    processor = {"size": {"height": image_size, "width": image_size}, "image_mean": [0.5] * 3,
                 "image_std": [0.5] * 3, "image_processor_type": "Sam3ImageProcessor"}
    (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=1), encoding="utf-8")
    return folder
