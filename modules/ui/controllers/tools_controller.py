"""The tools tab without Tk: the settings of each data tool (clips, captions, elements, masks) as the fields hold them,
a run of one tool on a worker thread, its progress and results as events the window polls, and Cancel.

The tools are modules/dataTools/, called with `progress=False` (the tab draws its own bar) and a `stop` flag; the
models load inside the worker, from a local folder, or from the hub when the row's Download switch is on."""
from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from modules.util.errors import UserError

logger = logging.getLogger(__name__)

TOOLS = ("clips", "captions", "elements", "masks")

#: Each tool's fields: key -> (label, default, help). Choices are in CHOICES; switches are bool defaults.
FIELDS: dict[str, dict[str, tuple[str, Any, str]]] = {
    "clips": {
        "input": ("Footage", "", "a video file or a folder of videos (only read)"),
        "output": ("Clips folder", "", "where the clips and clips.json go (default: the chosen folder)"),
        "detector": ("Detector", "content", "content: hard cuts; adaptive: fewer false cuts on camera motion"),
        "threshold": ("Threshold", "", "empty: the detector's default (content 27, adaptive 3); lower finds more"),
        "min_seconds": ("Min seconds", "1.0", "shorter clips are dropped"),
        "max_seconds": ("Max seconds", "10.0", "longer shots are cut into pieces of this length"),
        "fps": ("FPS", "", "output frame rate; empty: the source's"),
        "wan_frames": ("4k+1 frames", True, "every clip a length Wan trains on"),
    },
    "captions": {
        "model": ("Qwen3-VL model", "", "a local folder, or a hub name with Download"),
        "download": ("Download", False, "fetch the model from the Hugging Face hub"),
        "template": ("Template", "short", "short or detailed"),
        "prompt": ("Own prompt", "", "instead of the template"),
        "trigger": ("Trigger word", "", "put before every caption"),
        "overwrite": ("Overwrite", False, "replace existing captions"),
        "batch_size": ("Batch size", "1", "clips per generate call"),
    },
    "elements": {
        "model": ("SAM 3 model", "", "a local folder, or a hub name with Download"),
        "download": ("Download", False, "fetch the model from the Hugging Face hub"),
        "prompts": ("Element prompts", "subject=person", "NAME=PROMPT per element of the E2V dataset, ';' between"),
        "plate": ("Background", "median", "median of the free pixels, or the least covered frame"),
        "fill": ("Fill", "white", "around a cut-out: white (A2's references), black, grey or R,G,B"),
        "avoid_first": ("Avoid first frames", "1", "frames at a clip's start an element is not cut from"),
        "overwrite": ("Overwrite", False, "replace existing element images"),
    },
    "masks": {
        "model": ("SAM 3 model", "", "a local folder, or a hub name with Download"),
        "download": ("Download", False, "fetch the model from the Hugging Face hub"),
        "prompts": ("Mask prompts", "person", "what the mask covers, ';' between"),
        "grow": ("Grow (px)", "0", "widen the mask"),
        "overwrite": ("Overwrite", False, "replace existing masks"),
    },
}
CHOICES = {("clips", "detector"): ("content", "adaptive"), ("captions", "template"): ("short", "detailed"),
           ("elements", "plate"): ("median", "frame")}


@dataclass(frozen=True)
class ToolEvent:
    kind: str  # "progress" (payload: (done, total or 0)), "result" (a Path), "done" (summary), "error" (one line)
    payload: Any


def _number(tool: str, key: str, text: str, kind: type = float, optional: bool = False):
    text = str(text).strip()
    if optional and not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise UserError(f"{tool}: {FIELDS[tool][key][0]} '{text}' is not a number") from None


def _pairs(text: str) -> dict[str, str]:
    """NAME=PROMPT parts between ';' (NAME= with no prompt: that element is not made)."""
    prompts = {}
    for part in (p.strip() for p in text.replace("\n", ";").split(";")):
        if part:
            name, sep, prompt = part.partition("=")
            if not sep or not name.strip():
                raise UserError(f"elements: '{part}' must be NAME=PROMPT, e.g. subject=person")
            if prompt.strip():
                prompts[name.strip()] = prompt.strip()
    return prompts


class ToolsController:
    def __init__(self, config: Any, dataset: Any):
        self.config, self.dataset = config, dataset
        self.values = {tool: {key: spec[1] for key, spec in fields.items()} for tool, fields in FIELDS.items()}
        self.folder = ""
        self.events: queue.Queue[ToolEvent] = queue.Queue()
        self.worker: threading.Thread | None = None
        self._stop = threading.Event()
        self.results: list[Path] = []
        self.last_summary = ""

    # --- what the fields offer ------------------------------------------------------------------------------
    def folders(self) -> list[str]:
        """The concepts' folders and the E2V dataset's data_root: what a tool usually runs on."""
        found = [str(row.get("path")) for row in (self.config.value("concepts") or [])
                 if isinstance(row, dict) and row.get("path")]
        root = self.dataset.data_root_path()
        if root is not None and str(root) not in found:
            found.append(str(root))
        return found

    def element_prompts_template(self) -> str:
        """'name=; name=' for the open E2V dataset's elements that are no background: what to fill in."""
        names = [str(e.get("name", "")) for e in self.dataset.current.get("elements", []) if isinstance(e, dict)]
        return "; ".join(f"{n}=" for n in names if n and "background" not in n.lower())

    def set(self, tool: str, key: str, value: Any) -> None:
        self.values[tool][key] = value

    @property
    def running(self) -> bool:
        return self.worker is not None and self.worker.is_alive()

    # --- a run ---------------------------------------------------------------------------------------------------
    def start(self, tool: str) -> None:
        """Check the fields (a UserError names the bad one), then run `tool` on the worker thread."""
        if self.running:
            raise UserError("a tool is running: wait for it, or Cancel it")
        if not self.folder.strip() and not (tool == "clips" and self.values["clips"]["input"]):
            raise UserError(f"{tool}: choose the folder to work on")
        job = self._job(tool)
        self._stop.clear()
        self.results = []
        self.worker = threading.Thread(target=self._run, args=(job,), daemon=True, name=f"tool-{tool}")
        self.worker.start()

    def cancel(self) -> None:
        self._stop.set()

    def poll(self) -> list[ToolEvent]:
        events = []
        while True:
            try:
                events.append(self.events.get_nowait())
            except queue.Empty:
                return events

    def _run(self, job: Callable[[], Any]) -> None:
        try:
            report = job()
            self.last_summary = report.summary()
            self.events.put(ToolEvent("done", self.last_summary))
        except UserError as e:
            self.events.put(ToolEvent("error", str(e)))
        except Exception as e:  # noqa: BLE001 - a tool's failure is shown, not a crash of the window
            logger.exception("the tool failed")
            self.events.put(ToolEvent("error", f"{type(e).__name__}: {e}"))

    def _result(self, path: Path, done: list[int], total: int) -> None:
        self.results.append(Path(path))
        done[0] += 1
        self.events.put(ToolEvent("result", Path(path)))
        self.events.put(ToolEvent("progress", (done[0], total)))

    def _job(self, tool: str) -> Callable[[], Any]:
        v = self.values[tool]
        folder = Path(self.folder.strip()) if self.folder.strip() else None
        stop = self._stop.is_set
        done = [0]
        if tool == "clips":
            from modules.dataTools.clips import split_videos
            from modules.dataTools.shots import SplitOptions

            options = SplitOptions(detector=v["detector"], threshold=_number(tool, "threshold", v["threshold"],
                                                                                optional=True),
                                   min_seconds=_number(tool, "min_seconds", v["min_seconds"]),
                                   max_seconds=_number(tool, "max_seconds", v["max_seconds"]),
                                   fps=_number(tool, "fps", v["fps"], optional=True), wan_frames=bool(v["wan_frames"]))
            try:
                options.check()
            except ValueError as e:
                raise UserError(f"clips: {e}") from None
            source, output = v["input"] or str(folder), v["output"] or str(folder)
            return lambda: split_videos([source], output, options, stop, False,
                                        lambda path: self._result(path, done, 0))
        model = str(v["model"]).strip()
        if not model:
            raise UserError(f"{tool}: give the model's folder (or a hub name and tick Download)")
        if not v["download"]:  # a wrong folder is said at once, before any clip is read
            from modules.dataTools.model_source import resolve_model

            resolve_model(model, False, "captioning (Qwen3-VL)" if tool == "captions" else "segmentation (SAM 3)",
                          "model")
        if tool == "captions":
            from modules.dataTools.captions import CaptionOptions, caption_folder, find_jobs

            options = CaptionOptions(template=v["template"], prompt=v["prompt"], trigger=v["trigger"],
                                     overwrite=bool(v["overwrite"]),
                                     batch_size=_number(tool, "batch_size", v["batch_size"], int),
                                     elements=self._dataset_elements(folder))
            options.check()
            total = len(find_jobs(folder, options))

            def captioner():
                from modules.dataTools.model_source import resolve_model
                from modules.dataTools.vlm import Qwen3VLCaptioner

                return Qwen3VLCaptioner(resolve_model(model, bool(v["download"]), "captioning (Qwen3-VL)"))

            return lambda: caption_folder(folder, captioner, options, stop, False,
                                          lambda path, _text: self._result(path.with_suffix(".txt"), done, total))

        def segmenter():
            from modules.dataTools.model_source import resolve_model
            from modules.dataTools.segmenter import Sam3Segmenter

            return Sam3Segmenter(resolve_model(model, bool(v["download"]), "segmentation (SAM 3)"))

        from modules.dataTools.elements import clips_of

        total = len(clips_of(folder))
        if tool == "elements":
            from modules.dataTools.elements import ElementOptions, jobs_from_dataset, make_elements, parse_fill

            elements = self._dataset_elements(folder)
            if not elements:
                raise UserError("elements: open the E2V dataset JSON (E2V elements tab) whose data_root is the folder")
            options = ElementOptions(jobs_from_dataset(elements, _pairs(str(v["prompts"]))),
                                     overwrite=bool(v["overwrite"]), plate=v["plate"], fill=parse_fill(v["fill"]),
                                     avoid_first=_number(tool, "avoid_first", v["avoid_first"], int))
            options.check()
            return lambda: make_elements(folder, segmenter, options, stop, False,
                                         lambda clip: self._element_results(clip, options, done, total))
        from modules.dataTools.masks import MaskOptions, make_masks

        options = MaskOptions(tuple(p.strip() for p in str(v["prompts"]).split(";") if p.strip()),
                              overwrite=bool(v["overwrite"]), grow=_number(tool, "grow", v["grow"], int))
        options.check()
        return lambda: make_masks(folder, segmenter, options, stop, False,
                                  lambda clip: self._result(clip.with_name(clip.stem + "-masklabel.mp4"), done, total))

    def _element_results(self, clip: Path, options: Any, done: list[int], total: int) -> None:
        made = [clip.with_name(clip.stem + job.suffix) for job in options.elements]
        self.results += [p for p in made if p.exists()]
        for path in made:
            if path.exists():
                self.events.put(ToolEvent("result", path))
        done[0] += 1
        self.events.put(ToolEvent("progress", (done[0], total)))

    def _dataset_elements(self, folder: Path | None) -> tuple:
        """The open E2V dataset's elements (typed), when its data_root is `folder`; else none."""
        from modules.config.e2v_dataset_config import E2VDatasetFile

        root = self.dataset.data_root_path()
        if folder is None or root is None or Path(root).resolve() != folder.resolve():
            return ()
        try:
            typed = E2VDatasetFile.from_dict({"datasets": [self.dataset.current]})
        except Exception as e:  # noqa: BLE001 - the E2V elements tab shows the problem on its field
            raise UserError(f"the E2V dataset has an error ({e}): fix it in the E2V elements tab") from None
        return tuple(typed.datasets[0].elements)
