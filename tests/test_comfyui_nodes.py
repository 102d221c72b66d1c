"""comfyui/wantrainer_nodes without ComfyUI: the package loads as ComfyUI loads a custom node folder, declares the
node interface ComfyUI reads, and its node gives a clone of a Wan CLIP an embeddings folder for its UMT5 tokenizer.

The fakes re-state what the node touches in ComfyUI (checked against the real code by
tools/check_comfyui_embedding_node.py at Comfy-Org/ComfyUI a125cd84): `comfy.sd.CLIP.clone()` returns a new CLIP
that SHARES its tokenizer; a Wan CLIP's tokenizer is `WanT5Tokenizer` (an `SD1Tokenizer` with clip name
`umt5xxl`), holding its `UMT5XXlTokenizer` (an `SDTokenizer`, `embedding_key` 'umt5xxl') as attribute
`clip_umt5xxl`, built with `embedding_directory` None; `folder_paths.get_folder_paths("embeddings")` lists
models/embeddings and the folders extra_model_paths.yaml adds."""
from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "comfyui" / "wantrainer_nodes"


class FakeSDTokenizer:  # comfy.sd1_clip.SDTokenizer: what tokenize_with_weights reads
    def __init__(self, embedding_key: str, embedding_directory=None):
        self.embedding_key, self.embedding_directory = embedding_key, embedding_directory


class FakeSD1Tokenizer:  # comfy.sd1_clip.SD1Tokenizer: setattr(self, "clip_" + clip_name, tokenizer(...))
    def __init__(self, clip_name: str, embedding_key: str):
        self.clip_name, self.clip = clip_name, f"clip_{clip_name}"
        setattr(self, self.clip, FakeSDTokenizer(embedding_key))


class FakeCLIP:  # comfy.sd.CLIP: clone() shares the tokenizer
    def __init__(self, tokenizer):
        self.tokenizer, self.tokenizer_options = tokenizer, {}

    def clone(self):
        clone = FakeCLIP(self.tokenizer)
        clone.tokenizer_options = self.tokenizer_options.copy()
        return clone


@pytest.fixture
def package(monkeypatch, tmp_path):
    """The node package loaded by file location (as ComfyUI's load_custom_node does), with a fake folder_paths."""
    folder_paths = types.ModuleType("folder_paths")
    folder_paths.asked = []
    folder_paths.get_folder_paths = lambda name: folder_paths.asked.append(name) or [str(tmp_path / name), "/extra"]
    monkeypatch.setitem(sys.modules, "folder_paths", folder_paths)
    assert "comfy" not in sys.modules  # no ComfyUI behind it
    spec = importlib.util.spec_from_file_location("wantrainer_nodes_under_test", PACKAGE / "__init__.py",
                                                  submodule_search_locations=[str(PACKAGE)])
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    module.folder_paths = folder_paths
    return module


def test_the_package_declares_a_node_comfyui_can_list(package):
    assert set(package.NODE_CLASS_MAPPINGS) == set(package.NODE_DISPLAY_NAME_MAPPINGS) == {"WanTrainerUMT5Embeddings"}
    node = package.NODE_CLASS_MAPPINGS["WanTrainerUMT5Embeddings"]
    assert node.INPUT_TYPES()["required"]["clip"][0] == "CLIP" and node.RETURN_TYPES == ("CLIP",)
    assert callable(getattr(node(), node.FUNCTION)) and node.CATEGORY


def test_the_node_gives_a_clone_of_a_wan_clip_the_embeddings_folders(package, tmp_path):
    wan = FakeCLIP(FakeSD1Tokenizer("umt5xxl", "umt5xxl"))
    node = package.NODE_CLASS_MAPPINGS["WanTrainerUMT5Embeddings"]()
    (enabled,) = getattr(node, node.FUNCTION)(wan)
    assert package.folder_paths.asked == ["embeddings"]
    assert enabled is not wan and enabled.tokenizer is not wan.tokenizer
    assert enabled.tokenizer.clip_umt5xxl.embedding_directory == [str(tmp_path / "embeddings"), "/extra"]
    assert wan.tokenizer.clip_umt5xxl.embedding_directory is None  # the CLIP that came in (and its users) unchanged
    assert enabled.tokenizer.clip == "clip_umt5xxl" and enabled.tokenizer.clip_name == "umt5xxl"


def test_a_clip_without_umt5_is_refused_in_one_line(package):
    sdxl = FakeCLIP(FakeSD1Tokenizer("l", "clip_l"))
    node = package.NODE_CLASS_MAPPINGS["WanTrainerUMT5Embeddings"]()
    with pytest.raises(ValueError, match="no UMT5 tokenizer") as caught:
        node.apply(sdxl)
    assert "\n" not in str(caught.value)


def test_the_package_imports_nothing_from_wantrainer():
    """It is copied alone into ComfyUI's custom_nodes/: no `modules.` import may follow it there."""
    for path in PACKAGE.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "from modules" not in text and "import modules" not in text, path
