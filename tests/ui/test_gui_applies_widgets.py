"""Under Xvfb: the window shows only what applies and changes only what it should — a preset sets training
settings and never the user's model or data, the model type is the checkpoint's."""
from __future__ import annotations

from modules.config.loading import PRESET_DIR
from modules.ui.controllers.app_controller import AppController
from tests.fixtures.wan_configs import TRANSFORMER_1_3B, write_config_folder


def test_a_preset_picked_in_the_top_bar_keeps_the_users_model_and_the_model_type_is_the_checkpoints(make_ui,
                                                                                                   tmp_path):
    ui = make_ui(AppController(PRESET_DIR))
    base = str(write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B))
    ui.app.config.set("base_model_name", base)
    ui.update()
    assert ui.top_bar.model_type.widget.cget("state") == "disabled"  # read from the checkpoint, not a choice
    ui.top_bar.preset_menu.set("#wan2.2 animate-2 14B lora")
    ui.top_bar._apply_preset("#wan2.2 animate-2 14B lora")  # what choosing it in the dropdown calls
    ui.update()
    assert ui.app.config.value("base_model_name") == base
    assert ui.top_bar.model_type.var.get() == "WAN_2_1" and ui.app.config.value("lora_rank") == 32
    assert ui.top_bar.variant.cget("text").startswith("variant: t2v")
    assert ui.top_bar.variant.cget("text_color") != ("#c62828", "#ff6e6e")  # no red contradiction
    ui.app.config.set("base_model_name", "")
    ui.update()
    assert ui.top_bar.model_type.widget.cget("state") == "normal"
    ui.app.vram.wait(120)  # the estimate's thread must not be inside torch when the test process exits


def test_a_t2v_sample_row_and_a_fine_tune_show_only_what_applies(make_ui, tmp_path):
    ui = make_ui()
    ui.app.config.set("base_model_name", str(write_config_folder(tmp_path / "t2v", TRANSFORMER_1_3B)))
    ui.app.samples.add(prompt="a cat")
    ui.show_tab("sampling")
    ui.update()
    rows = ui.tab("sampling").list_view.cards[0][2].rows
    assert not any(rows[name].visible for name in ("image", "last_image", "elements", "control_video",
                                                   "control_mask", "driving_video", "vace_scale"))
    assert rows["size"].visible and rows["size"].input.var.get() == "256x256"
    assert rows["sampler"].input.widget.cget("values")[:3] == ["uni_pc", "euler", "dpmpp_2m"]  # a dropdown
    ui.show_tab("LoRA")
    ui.top_bar.method.var.set("FINE_TUNE")
    ui.top_bar.method._chosen("FINE_TUNE")  # what picking it in the dropdown calls
    ui.update()
    assert not ui.tab_offered("LoRA") and ui.tabview.get() == "general"  # OneTrainer hides it for fine-tunes
    training = next(form for form in ui.tab("training").forms if "blocks_to_swap" in form.rows)
    assert not training.rows["blocks_to_swap"].visible
    ui.top_bar.method._chosen("LORA")
    ui.update()
    assert ui.tab_offered("LoRA") and training.rows["blocks_to_swap"].visible
    ui.app.vram.wait(120)


def test_a_1920_px_window_lays_the_forms_out_in_two_columns(make_ui):
    ui = make_ui()
    training = ui.show_tab("training")
    ui.geometry("1920x1080")
    ui.update()
    form = training.forms[0]
    assert form.two_columns and form.columns[1].winfo_manager() == "grid"  # the right half is used
    left, right = (len(column.grid_slaves()) for column in form.columns)
    assert left and right
    ui.geometry("1280x860")
    ui.update()
    assert not form.two_columns and not form.columns[1].winfo_manager()
