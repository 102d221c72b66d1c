"""The evaluation report: `index.html` beside `metrics.json` and the videos, every link relative, so the folder can
be moved or zipped. Per prompt and seed the base and the trained model side by side (playable video, frame
strip, metrics), then each model's means."""
from __future__ import annotations

import html
from pathlib import Path

from modules.util.atomic import atomic_write_text

_STYLE = """body{font-family:sans-serif;margin:24px;background:#fafafa}table{border-collapse:collapse;margin:12px 0}
td,th{border:1px solid #ccc;padding:6px;vertical-align:top;text-align:left}video,img.strip{max-width:420px;display:block}
.note{color:#666}h2{margin-top:32px}"""


def _metrics_table(values: dict[str, float]) -> str:
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.4f}</td></tr>" for k, v in sorted(values.items()))
    return f"<table class='metrics'>{rows}</table>"


def write_report(results: dict, output: Path) -> Path:
    models = list(dict.fromkeys(v["model"] for v in results["videos"]))
    cells: dict[tuple[int, int], dict[str, dict]] = {}
    prompts: dict[int, str] = {}
    for video in results["videos"]:
        cells.setdefault((video["prompt_index"], video["seed"]), {})[video["model"]] = video
        prompts[video["prompt_index"]] = video["prompt"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>WanTrainer evaluation</title>"
             f"<style>{_STYLE}</style></head><body><h1>Evaluation</h1>"]
    settings = results["settings"]
    parts.append("<p>" + ", ".join(f"{html.escape(k)}: {html.escape(str(v))}" for k, v in settings.items()) + "</p>")
    for note in results.get("notes", []):
        parts.append(f"<p class='note'>{html.escape(note)}</p>")
    parts.append("<h2>Means</h2><table><tr><th>metric</th>" + "".join(f"<th>{html.escape(m)}</th>" for m in models)
                 + "</tr>")
    keys = sorted({k for table in results["means"].values() for k in table})
    for key in keys:
        row = "".join(f"<td>{results['means'].get(m, {}).get(key, float('nan')):.4f}</td>" for m in models)
        parts.append(f"<tr><td>{html.escape(key)}</td>{row}</tr>")
    parts.append("</table><p class='note'>Definitions and limits: docs/evaluation.md.</p>")
    for (index, seed), by_model in sorted(cells.items()):
        parts.append(f"<h2>{html.escape(prompts[index])} <small>(seed {seed})</small></h2><table><tr>"
                     + "".join(f"<th>{html.escape(m)}</th>" for m in models) + "</tr><tr>")
        for model in models:
            video = by_model.get(model)
            if video is None:
                parts.append("<td></td>")
                continue
            parts.append(f"<td><video controls loop muted src='{html.escape(video['video'])}'></video>"
                         f"<img class='strip' src='{html.escape(video['strip'])}' alt='frames'>"
                         f"{_metrics_table(video['metrics'])}</td>")
        parts.append("</tr></table>")
    parts.append("</body></html>\n")
    path = output / "index.html"
    atomic_write_text(path, "".join(parts))
    return path
