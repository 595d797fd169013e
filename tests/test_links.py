"""Every relative link in the committed Markdown points to a file or folder that exists.

GUIDE.md and benchmarks/README.md are also pages of the documentation site (``docs/guide.rst``,
``docs/benchmarks.rst``, through myst-parser); their links to repository folders (records,
reports) are not pages there, so the strict docs build does not check them (``docs/conf.py``
suppresses ``myst.xref_missing``): this test does, for every tracked ``.md`` file.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
_FENCED = re.compile(r"```.*?```", flags=re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def _markdown_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True,
                                text=True, timeout=60, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):  # not a git checkout (an sdist)
        listed = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.md")
                  if not {".venv", "node_modules", "_build"} & set(p.parts)]
    return [ROOT / name for name in sorted(listed)]


def relative_links(text: str) -> list[str]:
    """The link targets of ``text`` that name a path (not a URL, not an in-page anchor)."""
    text = _INLINE_CODE.sub("", _FENCED.sub("", text))
    return [target for target in _LINK.findall(text)
            if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target) and not target.startswith("#")]


def test_the_link_finder_finds_paths_and_skips_urls_anchors_and_code():
    text = ("[a](reports/x/) ![plot](p.png) [u](https://x.org/a) [s](#setup) `[c](no.md)`\n"
            "```\n[fenced](no.md)\n```\n[b](GUIDE.md#auditing)")
    assert relative_links(text) == ["reports/x/", "p.png", "GUIDE.md#auditing"]


def test_markdown_files_are_found():
    names = {str(p.relative_to(ROOT)) for p in _markdown_files()}
    assert {"README.md", "GUIDE.md", "benchmarks/README.md"} <= names


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_paths(path):
    broken = [target for target in relative_links(path.read_text())
              if not (path.parent / target.split("#")[0]).exists()]
    assert not broken, f"{path.relative_to(ROOT)}: links to missing paths: {broken}"
