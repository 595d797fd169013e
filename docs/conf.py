"""Sphinx configuration of the dpkd-audit documentation site (built strictly: ``-W``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

project = "dpkd-audit"
author = "dpkd-audit developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # dataclass fields: listed once, not as duplicate objects
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the signatures carry them; no cross-reference per annotation
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
# ambiguous short names across the package's modules; and the links of the included Markdown
# (GUIDE.md, benchmarks/README.md) to repository folders and records, which are not pages of
# the site: tests/test_links.py checks that every one of them exists.
suppress_warnings = ["ref.python", "myst.xref_missing"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = "dpkd-audit"
