"""The README and docs/ stand alone in a clone (they once linked ../shared/E2V_SPEC.md and ../shared/ARCHITECTURE.md,
which a clone does not have): no link leaves the repository, every relative link points at a file that exists and
every #anchor at a heading, every docs page is reachable from the README, the README stays short, user docs speak
of no issue numbers, and the commands they give are ones a fresh clone runs (the venv's Python, the pinned CLIs)."""
from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_MAX_LINES = 200  # a newcomer reads it in three minutes; the rest lives in docs/ pages by topic
# The measurement log, whose headings still name the work items its figures came from (owned by whoever re-measures
# them); every other page is for users.
MEASUREMENT_LOG = REPO_ROOT / "docs" / "performance.md"
USER_DOCS = [doc for doc in DOCS if doc != MEASUREMENT_LOG]


def _relative_links(doc: Path) -> list[str]:
    return [target for target in LINK.findall(doc.read_text(encoding="utf-8"))
            if not re.match(r"[a-z]+:", target) and not target.startswith("#")]


def _prose(doc: Path) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(doc: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, repeats numbered -1, -2, ..."""
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    for line in _prose(doc):
        heading = re.match(r"#{1,6}\s+(.*?)\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading[1].lower()).replace(" ", "-")
            repeat = counts.get(slug, 0)
            counts[slug] = repeat + 1
            anchors.add(slug if repeat == 0 else f"{slug}-{repeat}")
    return anchors


def test_no_doc_points_outside_the_repository():
    outside = [f"{doc.relative_to(REPO_ROOT)}: {m[0]}" for doc in DOCS
               for m in re.finditer(r"\.\./shared\S*|E2V_SPEC\.md|/work/\S+", doc.read_text(encoding="utf-8"))]
    assert outside == [], "the docs must hold what users need (docs/e2v.md, docs/architecture.md)"
    for doc in DOCS:
        for target in _relative_links(doc):
            resolved = (doc.parent / target.split("#")[0]).resolve()
            assert resolved.is_relative_to(REPO_ROOT), f"{doc.name}: {target}"


def test_every_relative_link_resolves():
    broken = [f"{doc.relative_to(REPO_ROOT)}: {target}" for doc in DOCS for target in _relative_links(doc)
              if not (doc.parent / target.split("#")[0]).exists()]
    assert broken == []


def test_every_anchor_names_a_heading():
    """`page.md#section` and `#section` point at a heading of that page (a renamed heading breaks them silently)."""
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or "#" not in target:
                continue
            path, anchor = target.split("#", 1)
            page = (doc.parent / path).resolve() if path else doc
            if page.suffix == ".md" and page.is_file() and anchor not in _anchors(page):
                broken.append(f"{doc.relative_to(REPO_ROOT)}: {target}")
    assert broken == []


def test_the_anchor_rule_is_githubs():
    assert {"e2v-dataset-json-dataset_config", "9-skyreels-v3s-reference-layout-e2vreference_layout-skyreels_v3",
            "on-a-distilled-base-lightning-lightx2v-causvid"} <= (
        _anchors(REPO_ROOT / "docs" / "config.md") | _anchors(REPO_ROOT / "docs" / "e2v.md")
        | _anchors(REPO_ROOT / "docs" / "models.md"))


def test_every_docs_page_is_reachable_from_the_readme():
    """A page no link leads to is a page nobody reads: follow the links from the README through the docs."""
    reached, todo = {README.resolve()}, [README]
    while todo:
        doc = todo.pop()
        for target in _relative_links(doc):
            page = (doc.parent / target.split("#")[0]).resolve()
            if page.suffix == ".md" and page.is_file() and page not in reached:
                reached.add(page)
                todo.append(page)
    unreached = [doc.relative_to(REPO_ROOT).as_posix() for doc in DOCS if doc.resolve() not in reached]
    assert unreached == []


def test_the_readme_is_read_in_three_minutes():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move topics into docs/ pages"


def test_user_docs_name_no_issue_numbers():
    """Users never saw the tracker: 'Issue #17 on a GPU' tells them nothing."""
    found = [f"{doc.relative_to(REPO_ROOT)}: {m[0]}" for doc in DOCS
             for m in re.finditer(r"(?i)\bissues?\s*#?\d+|(?<![\w&/])#\d+\b", doc.read_text(encoding="utf-8"))]
    assert found == []


def _bare_python_commands(doc: Path) -> list[str]:
    """Lines that run `python scripts/...` (or `python -m pytest`) with whatever `python` is on the PATH, except in a
    code block that activates the venv first."""
    bare = re.compile(r"(?<![\w/.\\-])python3?(?: -m \S+)? (?:scripts|benchmarks|tools)/|(?<![\w/.\\-])python3? -m pytest")
    found, fenced, activated = [], False, False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced, activated = not fenced, False
        elif fenced and "source .venv/bin/activate" in line:
            activated = True
        elif bare.search(line) and not activated:
            found.append(line.strip())
    return found


def test_commands_run_from_a_fresh_clone():
    """`python scripts/x.py` fails unless the venv is active: the docs name the venv's Python (or activate it)."""
    found = [f"{doc.relative_to(REPO_ROOT)}: {line}" for doc in USER_DOCS for line in _bare_python_commands(doc)]
    assert found == []


def test_requirements_txt_points_at_a_heading_that_exists():
    comment = (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8")
    pointer = re.search(r'see (\S+\.md) "([^"]+)"', comment)
    assert pointer, "requirements.txt names the page and heading that explain GPU installs"
    page = REPO_ROOT / pointer[1]
    headings = {re.sub(r"^#+\s*", "", line) for line in _prose(page) if line.startswith("#")}
    assert pointer[2] in headings


def test_download_commands_are_the_installed_cli():
    """huggingface-hub 2.x installs `hf` (`hf download`); `huggingface-cli` is gone."""
    text = "\n".join(doc.read_text(encoding="utf-8") for doc in DOCS)
    assert "huggingface-cli" not in text
    locked = re.search(r"^huggingface-hub==(\d+)\.", (REPO_ROOT / "requirements.lock").read_text(), re.M)
    assert locked and int(locked[1]) >= 1  # the lock's huggingface-hub installs `hf` (from 1.0 on)
    assert "hf download" in text
