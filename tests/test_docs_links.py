"""The README and docs/ stand alone in a clone (issue #25: they linked ../shared/E2V_SPEC.md and
../shared/ARCHITECTURE.md, which a clone does not have): no link leaves the repository, every relative link
points at a file that exists, and the commands they give are ones the pinned packages install."""
from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(doc: Path) -> list[str]:
    return [target for target in LINK.findall(doc.read_text(encoding="utf-8"))
            if not re.match(r"[a-z]+:", target) and not target.startswith("#")]


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


def test_download_commands_are_the_installed_cli():
    """huggingface-hub 2.x installs `hf` (`hf download`); `huggingface-cli` is gone."""
    text = "\n".join(doc.read_text(encoding="utf-8") for doc in DOCS)
    assert "huggingface-cli" not in text
    locked = re.search(r"^huggingface-hub==(\d+)\.", (REPO_ROOT / "requirements.lock").read_text(), re.M)
    assert locked and int(locked[1]) >= 1  # the lock's huggingface-hub installs `hf` (from 1.0 on)
    assert "hf download" in text
