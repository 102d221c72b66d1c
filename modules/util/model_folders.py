"""Model folders are read as safetensors only: a pickle (`pytorch_model.bin`, `.pt`, `.ckpt`) can run code when
unpickled, even through torch's restricted loader, whose error advises turning that restriction off. The real Wan diffusers
folders are all safetensors; a component that holds only a pickle is refused in one line saying how to convert
it, and every `from_pretrained` on weights passes `use_safetensors=True`, so neither diffusers nor transformers
falls back to a `.bin` (diffusers: `_fetch_index_file` / `_get_model_file`; transformers: `_get_resolved_checkpoint_files`)."""

from __future__ import annotations

from pathlib import Path

from modules.util.errors import UserError

# A diffusers model folder's weight files (`save_pretrained`): one file, or shards listed in the index
WEIGHTS_NAME = "diffusion_pytorch_model.safetensors"
WEIGHTS_INDEX_NAME = f"{WEIGHTS_NAME}.index.json"
PICKLE_SUFFIXES = frozenset({".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"})


def require_safetensors(folder: str | Path, model_class: type, instead: str = "") -> None:
    """Refuse a model folder whose weights are pickles only, naming the file and the one-line conversion
    (`model_class` is the class that loads it, whose `save_pretrained` writes safetensors). A folder without
    weights at all is left to the loader, whose error names what is missing. `instead`: what else could stand
    in (e.g. an override key), appended to the message."""
    folder = Path(folder)
    if not folder.is_dir() or any(folder.glob("*.safetensors")) or any(folder.glob("*.safetensors.index.json")):
        return
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES)
    if not pickles:
        return
    name, module = model_class.__name__, model_class.__module__.split(".")[0]
    raise UserError(
        f"'{folder / pickles[0]}' is a pickle, which WanTrainer does not read (unpickling can run code): convert "
        f"it to safetensors once, on a machine where you trust the file: python -c \"from {module} import {name}; "
        f"{name}.from_pretrained('{folder}', use_safetensors=False).save_pretrained('{folder}')\"{instead}")
