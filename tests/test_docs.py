"""The documentation site builds strictly, and every tutorial's code runs as written.

The site (``docs/``, Sphinx) is built with warnings as errors (a broken reference, a bad
docstring or a missing page fails); each page's ``.. code-block:: python`` blocks run in order,
in one namespace per page, in a fresh folder: a tutorial that no longer matches the code fails.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.rst") if "_build" not in p.parts)


def _python_blocks(text: str) -> list[str]:
    blocks = re.findall(r"^\.\. code-block:: python\n\n((?:(?:    .*)?\n)+)", text, flags=re.M)
    return [textwrap.dedent(b).rstrip("\n") + "\n" for b in blocks]


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html",
                           str(DOCS), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for page in ("index", "getting-started", "api", "tutorials/audit-your-sampler"):
        assert (tmp_path / "html" / f"{page}.html").is_file(), page


def test_every_tutorial_has_code_and_the_block_finder_finds_it():
    tutorials = [p for p in PAGES if p.parent.name == "tutorials"]
    assert len(tutorials) >= 3
    assert all(_python_blocks(p.read_text()) for p in tutorials)
    assert _python_blocks(".. code-block:: python\n\n    x = 1\n\n    y = 2\n\nText\n") == \
        ["x = 1\n\ny = 2\n"]


@pytest.mark.parametrize("page", [p for p in PAGES if _python_blocks(p.read_text())],
                         ids=lambda p: str(p.relative_to(DOCS)))
def test_page_code_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for i, block in enumerate(_python_blocks(page.read_text())):
        exec(compile(block, f"{page.name}[{i}]", "exec"), namespace)
