"""Provenance of result records: version, git commit, time, library versions (no torch)."""

from __future__ import annotations

import datetime
import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dpkd_audit import provenance as provenance_module
from dpkd_audit.provenance import LIBRARIES, git_state, package_version, provenance

ROOT = Path(__file__).resolve().parents[1]
HAS_GIT = shutil.which("git") is not None


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def _repo_with_package(root: Path, package: str = "dpkd_audit") -> Path:
    """A fresh git repository with one commit holding ``package/__init__.py``."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q")
    folder = root / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("x = 1\n")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return folder


def test_block_has_every_field_with_installed_versions():
    prov = provenance(now=datetime.datetime(2026, 1, 2, 3, 4, 5, 678,
                                            tzinfo=datetime.timezone(datetime.timedelta(hours=2))))
    assert prov["package"] == "dpkd-audit"
    assert prov["package_version"] == importlib.metadata.version("dpkd-audit")
    assert prov["created_utc"] == "2026-01-02T01:04:05Z"  # converted to UTC, no microseconds
    assert prov["python"] == ".".join(map(str, sys.version_info[:3]))
    assert set(prov) == {"package", "package_version", "git_commit", "git_dirty", "created_utc",
                         "python", "platform", "versions"}
    assert len(prov["versions"]) == len(LIBRARIES)
    for name in ("numpy", "torch", "scikit-learn", "scipy"):
        assert prov["versions"][name] == importlib.metadata.version(name)
    faiss = [name for name in prov["versions"] if name.startswith("faiss")]
    assert len(faiss) == 1 and prov["versions"][faiss[0]] is not None


def test_default_time_is_now_in_utc():
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0, tzinfo=None)
    stamp = provenance()["created_utc"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    parsed = datetime.datetime.fromisoformat(stamp[:-1])
    assert before <= parsed <= before + datetime.timedelta(minutes=5)


@pytest.mark.parametrize("now", [datetime.datetime(2026, 1, 1), "2026-01-01", 0])
def test_naive_or_non_datetime_now_is_refused(now):
    with pytest.raises(ValueError, match="now must be a timezone-aware datetime; got"):
        provenance(now=now)


def test_missing_library_is_recorded_as_none(monkeypatch):
    monkeypatch.setattr(provenance_module, "LIBRARIES", (("numpy",), ("no-such-dist-xyz",)))
    assert provenance()["versions"] == {"numpy": importlib.metadata.version("numpy"),
                                        "no-such-dist-xyz": None}


@pytest.mark.skipif(not HAS_GIT, reason="git is not installed")
def test_this_checkout_reports_its_head():
    try:
        head = _git(ROOT, "rev-parse", "HEAD")
    except subprocess.CalledProcessError:  # pragma: no cover - tests run outside a checkout
        pytest.skip("not a git checkout")
    state = git_state()
    assert state["git_commit"] == head and isinstance(state["git_dirty"], bool)
    assert provenance()["git_commit"] == head


@pytest.mark.skipif(not HAS_GIT, reason="git is not installed")
def test_commit_and_dirty_flag_of_a_repository(tmp_path):
    folder = _repo_with_package(tmp_path / "clone")
    head = _git(tmp_path / "clone", "rev-parse", "HEAD")
    assert git_state(folder) == {"git_commit": head, "git_dirty": False}
    (folder / "untracked.py").write_text("")
    assert git_state(folder)["git_dirty"] is False  # untracked files do not count
    (folder / "__init__.py").write_text("x = 2\n")
    assert git_state(folder) == {"git_commit": head, "git_dirty": True}


@pytest.mark.skipif(not HAS_GIT, reason="git is not installed")
def test_a_copy_inside_another_repository_is_not_that_repositorys_commit(tmp_path):
    # e.g. site-packages of a virtual environment inside some project's checkout
    folder = _repo_with_package(tmp_path / "project", ".venv/lib/site-packages/dpkd_audit")
    assert git_state(folder) == {"git_commit": None, "git_dirty": None}


def test_outside_a_checkout_and_without_git_the_commit_is_none(tmp_path, monkeypatch):
    folder = tmp_path / "dpkd_audit"
    folder.mkdir()
    assert git_state(folder) == {"git_commit": None, "git_dirty": None}
    assert git_state(tmp_path / "missing") == {"git_commit": None, "git_dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no git executable to be found
    assert git_state() == {"git_commit": None, "git_dirty": None}
    prov = provenance()
    assert prov["git_commit"] is None and prov["package_version"] == package_version()


def test_provenance_imports_no_torch_and_no_pipelines():
    code = ("import sys; from dpkd_audit.provenance import provenance; provenance(); "
            "print('torch' in sys.modules, any(m.startswith('dpkd_audit.pipelines') "
            "for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False False"
