"""The tiny models' tokenizer: a Unigram tokenizer trained offline (``tokenizers``) on a built-in corpus
and wrapped as a T5 tokenizer folder, so no tokenizer has to be downloaded. Deterministic: the same
corpus gives byte-identical files."""

from __future__ import annotations

import json
from pathlib import Path

TOKENIZER_VOCAB_SIZE = 384
_MIN_EXTRA_IDS = 16  # <extra_id_N> tokens at the end of the vocabulary, as T5 tokenizers have


_SUBJECTS = [
    "a cat", "a small dog", "an old man", "a young woman", "two children", "a red car",
    "a white horse", "a flock of birds", "a robot", "a chef", "a dancer", "a monkey",
    "a golden retriever", "an astronaut", "a sailboat", "a train", "a butterfly", "a panda",
    "a skateboarder", "a musician",
]  # fmt: skip
_ACTIONS = [
    "walking slowly", "running quickly", "jumping over a fence", "dancing happily",
    "playing the guitar", "eating an apple", "looking at the camera", "smiling and waving",
    "riding a bicycle", "swimming", "flying", "sleeping quietly", "cooking dinner",
    "reading a book", "climbing a tree", "turning around", "driving fast", "sitting still",
    "laughing", "singing a song",
]  # fmt: skip
_PLACES = [
    "on the beach at sunset", "in a busy city street at night", "in a green forest",
    "on a snowy mountain", "in a cozy kitchen", "under the blue sky", "in the rain",
    "next to a river", "in a desert", "on the moon", "in a quiet library", "in a park",
    "inside a spaceship", "on a wooden bridge", "in a field of flowers", "by the ocean",
    "in a crowded market", "on a rooftop", "in an empty room", "near an old castle",
]  # fmt: skip
_STYLES = [
    "cinematic lighting", "close up shot", "wide angle view", "the camera slowly pans left",
    "the camera zooms in", "high quality, detailed, 4k", "soft warm colors",
    "dramatic shadows", "slow motion", "handheld camera", "aerial drone footage",
    "natural light", "vivid colors", "black and white film", "realistic style",
]  # fmt: skip
_EXTRA_TEXT = [
    # Wan's standard negative prompt, English version.
    "Bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, "
    "images, static, overall gray, worst quality, low quality, JPEG compression residue, ugly, "
    "incomplete, extra fingers, poorly drawn hands, poorly drawn faces, deformed, disfigured, "
    "misshapen limbs, fused fingers, still picture, messy background, three legs, many people "
    "in the background, walking backwards",
    "dance monkey",
    "negative",
    "The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9",
    "A video of a person, an animal, a vehicle, a landscape, a building, water, fire, smoke.",
    "Morning, evening, night, spring, summer, autumn, winter, sunny, cloudy, foggy, windy.",
]
_ALPHABET = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"-()&/")


# The captions of ``modules.synthetic.synthetic_data`` ("a red circle moving left to right").
_SYNTHETIC_CAPTIONS = [
    f"a {colour} {shape} moving {motion}"
    for colour in ("red", "green", "blue", "yellow")
    for shape in ("circle", "square")
    for motion in ("left to right", "right to left", "top to bottom", "bottom to top")
]


def _tokenizer_corpus() -> list[str]:
    """A few hundred deterministic English caption-like sentences."""
    corpus = list(_SYNTHETIC_CAPTIONS)
    n = len(_SUBJECTS)
    for i in range(n * 12):
        subject = _SUBJECTS[i % n]
        action = _ACTIONS[(i * 7 + i // n) % len(_ACTIONS)]
        place = _PLACES[(i * 3 + 2 * (i // n)) % len(_PLACES)]
        style = _STYLES[(i * 5 + i // n) % len(_STYLES)]
        sentence = f"{subject} {action} {place}, {style}."
        corpus.append(sentence[0].upper() + sentence[1:])
    corpus.extend(_EXTRA_TEXT)
    return corpus


def build_tokenizer(vocab_size: int = TOKENIZER_VOCAB_SIZE):
    """Train a T5/UMT5-style Unigram tokenizer: <pad>=0, </s>=1, <unk>=2, pieces, sentinels."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import T5TokenizerFast

    special = ["<pad>", "</s>", "<unk>"]
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
        ]
    )
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size - _MIN_EXTRA_IDS,
        special_tokens=special,
        unk_token="<unk>",
        initial_alphabet=_ALPHABET,
        show_progress=False,
    )
    tok.train_from_iterator(_tokenizer_corpus(), trainer)
    trained = json.loads(tok.to_str())["model"]["vocab"]
    if [p for p, _ in trained[:3]] != special:
        raise RuntimeError(f"unexpected special token order in trained tokenizer: {trained[:3]}")
    # The trainer is multi-threaded (float noise in the scores) and appends the characters it
    # must keep with scores min - k * 1e-4 in the order of a randomly seeded hash set, so its raw
    # scores and ids differ from run to run (the piece set itself is stable).  Canonicalise:
    # pieces whose scores lie within 2e-4 of each other form one group that shares the group's
    # top score (rounded); groups keep their order, pieces inside a group are sorted by text.
    ranked = sorted(((str(p), float(s)) for p, s in trained[3:]), key=lambda item: -item[1])
    groups: list[list[tuple[str, float]]] = []
    for piece, score in ranked:
        if groups and groups[-1][-1][1] - score <= 2e-4:
            groups[-1].append((piece, score))
        else:
            groups.append([(piece, score)])
    learned = [
        (piece, round(group[0][1], 4)) for group in groups for piece in sorted(p for p, _ in group)
    ]
    pieces = [(p, 0.0) for p in special] + learned[: vocab_size - _MIN_EXTRA_IDS - 3]
    # Fill the rest with T5 sentinels <extra_id_N> (highest N first, as in the T5/UMT5 vocab),
    # so that len(tokenizer) == vocab_size exactly.
    extra_ids = vocab_size - len(pieces)
    vocab = pieces + [(f"<extra_id_{i}>", 0.0) for i in range(extra_ids - 1, -1, -1)]
    tokenizer = T5TokenizerFast(
        vocab=vocab,
        extra_ids=extra_ids,
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    if len(tokenizer) != vocab_size:
        raise RuntimeError(f"tiny tokenizer has {len(tokenizer)} tokens, expected {vocab_size}")
    if (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) != (0, 1, 2):
        raise RuntimeError("tiny tokenizer special token ids are not pad=0, eos=1, unk=2")
    return tokenizer


def save_tokenizer(tokenizer, directory: Path) -> None:
    tokenizer.save_pretrained(str(directory))
    # transformers 5.x no longer writes special_tokens_map.json; real UMT5 folders have it.
    special_map = directory / "special_tokens_map.json"
    if not special_map.exists():
        sentinels = sorted(
            (t for t in tokenizer.get_vocab() if t.startswith("<extra_id_")),
            key=lambda t: int(t[len("<extra_id_") : -1]),
        )
        special_map.write_text(json.dumps({"additional_special_tokens": sentinels, "eos_token": "</s>",
                                           "pad_token": "<pad>", "unk_token": "<unk>"}, indent=2, sort_keys=True) + "\n")


