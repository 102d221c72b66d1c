"""The tools and dataset tabs under Xvfb: each data tool runs on a small folder from the tools tab (footage cut into
clips, captions by a tiny Qwen3-VL, element images and masks by a tiny SAM 3), with its results shown; the dataset
tab shows the concepts as cards, plays a clip beside its caption, and saves an edited caption."""
from __future__ import annotations

import json

import pytest

from modules.ui.views.screenshots import pump_until as pump
from tests.test_split_clips import shot_frames, write_mp4


@pytest.fixture(scope="module")
def tiny_tool_models(tmp_path_factory):
    from modules.synthetic.tiny_vlm import write_tiny_qwen3_vl, write_tiny_sam3

    folder = tmp_path_factory.mktemp("tool-models")
    return write_tiny_qwen3_vl(folder / "qwen"), write_tiny_sam3(folder / "sam3")


def run_tool(ui, tab, tool: str, fields: dict, timeout: float = 120) -> str:
    tab.tool_choice.set(tool)
    tab._show_tool(tool)
    for key, value in fields.items():
        tab.set_field(key, value)
    tab.run_button.invoke()
    pump(ui, lambda: not ui.app.tools.running and str(tab.run_button.cget("state")) == "normal", timeout,
         f"the {tool} tool to finish")
    return tab.status_label.cget("text")


def test_the_tools_tab_runs_each_tool_on_a_folder(make_ui, tiny_tool_models, tmp_path):
    qwen, sam3 = tiny_tool_models
    footage = write_mp4(tmp_path / "footage" / "film.mp4", shot_frames([20, 24], size=64))
    folder = tmp_path / "clips"
    ui = make_ui()
    ui.app.concepts.add(path=str(folder))
    tab = ui.show_tab("tools")
    ui.update()
    assert str(folder) in tab.folder_box.cget("values")
    tab.folder_box.set(str(folder))
    tab._folder_chosen(str(folder))

    status = run_tool(ui, tab, "clips", {"input": str(footage), "min_seconds": "0.5", "wan_frames": False})
    assert "2 clip(s) written" in status, status
    assert sorted(p.name for p in folder.glob("*.mp4")) == ["film-001.mp4", "film-002.mp4"]
    assert len(tab._photos) == 2  # a thumbnail per clip
    assert ui.bottom_bar.status_text.startswith("clips: ")

    status = run_tool(ui, tab, "captions", {"model": str(qwen)})
    assert "2 caption(s) written" in status, status
    assert all((folder / f"film-00{i}.txt").read_text(encoding="utf-8").strip() for i in (1, 2))

    ui.app.dataset.new(str(folder))  # A2's layout: main_subject, object, background
    status = run_tool(ui, tab, "elements", {"model": str(sam3), "prompts": "main_subject=a square"})
    assert "2 clip(s)" in status, status
    assert (folder / "film-001_background.png").exists() and (folder / "film-001.elements.json").exists()
    assert "background" in json.loads((folder / "film-001.elements.json").read_text())["elements"]

    status = run_tool(ui, tab, "masks", {"model": str(sam3), "prompts": "a square"})
    assert "2 clip(s)" in status, status

    status = run_tool(ui, tab, "captions", {"model": str(tmp_path / "nowhere")})
    assert "no local folder" in status and "Download" in status  # one line, the model's path named


def test_the_dataset_tab_plays_a_clip_beside_its_caption_and_saves_an_edit(make_ui, tmp_path):
    from modules.synthetic.synthetic_data import write_e2v_dataset

    folder = write_e2v_dataset(tmp_path / "e2v", count=2)
    ui = make_ui()
    ui.app.concepts.add(path=str(folder), name="shapes")
    ui.app.concepts.add(path=str(tmp_path / "missing"))
    tab = ui.show_tab("dataset")
    tab.reload()
    ui.update()
    names = [(card.name, card.clips, card.problem) for card in tab.cards]
    assert names == [("shapes", 2, ""), ("missing", 0, "folder not found")]
    assert len(tab._card_photos) == 1  # a thumbnail on the card that has clips
    tab.choose(folder)
    ui.update()
    assert [e.name for e in tab.entries] == ["001.mp4", "002.mp4"]
    assert tab.entry.name == "001.mp4" and len(tab.frames) == 25 and tab._photo is not None
    assert sorted(tab.entry.elements) == ["background", "object", "subject"] and len(tab._element_photos) == 3
    assert tab.caption_box.get("1.0", "end").strip().startswith("The video shows")
    tab.caption_box.delete("1.0", "end")
    tab.caption_box.insert("1.0", "a red square drifting left  ")
    tab.save_button.invoke()
    assert (folder / "001.txt").read_text(encoding="utf-8") == "a red square drifting left\n"
    assert tab.save_label.cget("text") == "saved 001.txt"
    tab.show_clip(1)
    assert tab.entry.name == "002.mp4"
    tab.show_clip(0)
    assert tab.caption_box.get("1.0", "end").strip() == "a red square drifting left"
