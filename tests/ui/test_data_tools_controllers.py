"""The tools and dataset tabs' controllers without a display: the fields a tool refuses before it runs, the element
prompts, the dataset view's clips with their element images (by the E2V dataset's suffixes, as the loader finds
them) and a caption saved atomically."""
from __future__ import annotations

import pytest

from modules.synthetic.synthetic_data import write_e2v_dataset
from modules.ui.controllers.app_controller import AppController
from modules.ui.controllers.dataset_view import DatasetViewController
from modules.ui.controllers.tools_controller import ToolsController, _pairs
from modules.util.errors import UserError


@pytest.fixture
def app(tmp_path):
    (tmp_path / "presets").mkdir()
    return AppController(tmp_path / "presets")


def test_a_tool_with_a_bad_field_is_refused_in_one_line_before_it_runs(app, tmp_path):
    tools = ToolsController(app.config, app.dataset)
    with pytest.raises(UserError, match="choose the folder"):
        tools.start("captions")
    tools.folder = str(tmp_path)
    tools.set("clips", "min_seconds", "soon")
    with pytest.raises(UserError, match="Min seconds 'soon' is not a number"):
        tools.start("clips")
    with pytest.raises(UserError, match="give the model's folder"):
        tools.start("masks")
    tools.set("masks", "model", str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match="no local folder") as error:
        tools.start("masks")
    assert "\n" not in str(error.value) and not tools.running


def test_element_prompts_name_the_open_datasets_elements():
    assert _pairs("main_subject=a woman; object=; background=sky") == {"main_subject": "a woman",
                                                                       "background": "sky"}
    with pytest.raises(UserError, match="NAME=PROMPT"):
        _pairs("a woman")


def test_the_dataset_view_finds_each_element_by_its_suffixes(app, tmp_path):
    folder = write_e2v_dataset(tmp_path / "e2v", count=2)
    app.dataset.new(str(folder))  # A2's layout: main_subject is _person.png, else _subject.png
    tools = ToolsController(app.config, app.dataset)
    assert tools.element_prompts_template() == "main_subject=; object="
    view = DatasetViewController(app.config, app.dataset)
    assert [(c.name, c.clips) for c in view.cards()] == [("E2V: e2v", 2)]
    first = view.select(folder)[0]
    assert {name: path.name for name, path in first.elements.items()} == {
        "main_subject": "001_subject.png", "object": "001_object.png", "background": "001_background.png"}
    view.save_caption(first, "  a new caption\n\n")
    assert first.caption_path.read_text(encoding="utf-8") == "a new caption\n"
    assert view.caption(first) == "a new caption"
