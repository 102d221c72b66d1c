"""Where a tool's model comes from: a local folder, or the Hugging Face hub only when the user asks for it
(`--download` / the GUI's *Download* switch). Nothing is fetched otherwise, and an offline machine gets one line."""
from __future__ import annotations

import os
from pathlib import Path

from modules.util.errors import UserError

DEFAULT_CAPTION_MODEL = "Qwen/Qwen3-VL-4B-Instruct"
DEFAULT_SEGMENTATION_MODEL = "facebook/sam3"
#: What a captioning or segmentation folder needs; weights are safetensors only (util/model_folders.py)
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.jinja", "*.model", "tokenizer*", "merges.txt", "vocab*"]


def resolve_model(name: str, download: bool, what: str, option: str = "--model") -> Path:
    """A local folder holding `config.json`, as given; else, with `download`, the hub repository `name` fetched into
    the hub cache (safetensors and configs only); else a one-line error saying both ways."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"{option} '{path}' holds no config.json: give the folder of a {what} model "
                            "(as downloaded from the hub)")
        return path
    if not download:
        raise UserError(f"{option} '{name}' is no local folder: give the folder of a {what} model, or add --download "
                        f"(GUI: tick Download) to fetch '{name}' from the Hugging Face hub once")
    return _download(name, what, option)


def _download(repo: str, what: str, option: str) -> Path:
    os.environ["HF_HUB_OFFLINE"] = "0"  # the scripts start offline (scripts/_bootstrap.py): this is the user's ask
    from huggingface_hub import constants, snapshot_download

    constants.HF_HUB_OFFLINE = False
    try:
        return Path(snapshot_download(repo, allow_patterns=ALLOW_PATTERNS))
    except Exception as e:  # connection, DNS, proxy, 401/404: all one line
        kind = type(e).__name__
        if "Offline" in kind or "Connect" in kind or "Timeout" in kind or "Resolve" in str(e):
            raise UserError(f"cannot reach the Hugging Face hub to download {what} model '{repo}' (offline?): "
                            f"download it where there is a network and pass its folder to {option}") from None
        raise UserError(f"downloading {what} model '{repo}' failed ({kind}: {str(e).splitlines()[0][:160]}): "
                        f"check the name, or pass a local folder to {option}") from None
