"""Every link in the repository's Markdown files resolves: relative links to a file or folder inside the
repository, everything else to a public web address."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# [text](target "title") and ![alt](target); reference definitions "[label]: target"
INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
PUBLIC = re.compile(r"^https?://(?!localhost\b|127\.|0\.0\.0\.0|10\.|192\.168\.)[A-Za-z0-9.-]+\.[A-Za-z]{2,}(/|$)")
# where the repository's own Markdown lives (not virtual environments or run folders a user may add)
DOC_DIRS = ("docs", "benchmarks", "recipes", "gpse_dgl")


def markdown_files(root: Path = ROOT) -> list[Path]:
    return sorted([*root.glob("*.md"), *(p for d in DOC_DIRS for p in (root / d).rglob("*.md"))])


def links(text: str) -> list[str]:
    """Link targets of a Markdown text, code spans and fenced blocks left out."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return INLINE.findall(text) + REFERENCE.findall(text)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for target in links(path.read_text(encoding="utf-8")):
        if target.startswith("#") or target.startswith("mailto:"):
            continue
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            if not PUBLIC.match(target):
                found.append(f"{target} (not a public web address)")
            continue
        if target.startswith("/"):
            found.append(f"{target} (absolute path: link relative to the file instead)")
            continue
        resolved = (path.parent / target.split("#", 1)[0]).resolve()
        if not resolved.is_relative_to(root):
            found.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            found.append(f"{target} (no such file)")
    return found


def test_markdown_files_were_found():
    names = {p.relative_to(ROOT).as_posix() for p in markdown_files()}
    assert {"README.md", "docs/ARCHITECTURE.md", "docs/INSTALL.md", "benchmarks/RESULTS.md"} <= names


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_resolve(path):
    assert not broken_links(path), f"{path.relative_to(ROOT)}: {broken_links(path)}"


def test_the_check_sees_bad_links(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "A.md").write_text("x")
    page = tmp_path / "docs" / "page.md"
    page.write_text("[ok](A.md#part) [up](../docs/A.md) [web](https://example.org/x) [here](#top)\n"
                    "[gone](B.md) [out](../../elsewhere.md) ![abs](/work/x.png) [local](http://localhost:8000/)\n"
                    "[file](file:///tmp/x) `[code](C.md)`\n[ref]: missing/D.md\n")
    assert [item.split(" (")[0] for item in broken_links(page, tmp_path)] == [
        "B.md", "../../elsewhere.md", "/work/x.png", "http://localhost:8000/", "file:///tmp/x", "missing/D.md"]


def test_setup_cfg_references_resolve():
    """setup.cfg names docs by path (e.g. docs/INSTALL.md); each must exist."""
    text = (ROOT / "setup.cfg").read_text(encoding="utf-8")
    named = set(re.findall(r"\b((?:docs|benchmarks|recipes)/[\w./-]+\.(?:md|yaml|py))\b", text))
    assert named, "setup.cfg names no docs any more: drop this test"
    assert [name for name in sorted(named) if not (ROOT / name).is_file()] == []
