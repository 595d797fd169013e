"""Where a result record came from: package version, git commit, time, library versions.

Every record writer (``dpkd run``, ``dpkd sweep``, the audit records) puts :func:`provenance`
under the key ``"provenance"``, so that a committed result says which code produced it. This
module uses the standard library only (library versions are read from the installed
distributions' metadata, never by importing them), so any layer may import it, including the
torch-free ones (``mechanisms``, ``accountants``, ``audit``, ``ledger``).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["DISTRIBUTION", "LIBRARIES", "git_state", "package_version", "provenance"]

#: The distribution name of this package (``pip show dpkd-audit``).
DISTRIBUTION = "dpkd-audit"

#: Libraries whose versions every record carries, by distribution name. Each entry lists the
#: alternatives that provide the same module (``faiss-cpu`` or a GPU build); the first one
#: installed is recorded under its own name, and the first name with ``None`` when none is.
LIBRARIES: tuple[tuple[str, ...], ...] = (
    ("numpy",),
    ("scipy",),
    ("torch",),
    ("faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cu11", "faiss"),
    ("scikit-learn",),
    ("dp-accounting",),
    ("umap-learn",),  # the rknn ``umap`` representation: its releases move the embedding
    ("opacus",),
)

_PACKAGE_DIR = Path(__file__).resolve().parent
_GIT_TIMEOUT_S = 10.0
#: Variables that would point git at another repository than the package's own.
_GIT_ENV_OVERRIDES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                      "GIT_CEILING_DIRECTORIES")


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_version() -> str | None:
    """The installed version of ``dpkd-audit`` (its metadata), or ``None`` if not installed."""
    return _distribution_version(DISTRIBUTION)


def _git(args: Sequence[str], cwd: Path) -> str | None:
    """Output of ``git ARGS`` in ``cwd``, or ``None`` when git is absent or fails."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_OVERRIDES}
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=_GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(package_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Commit and dirtiness of the git checkout the package is imported from.

    The package directory must be the ``dpkd_audit`` folder at the top of a git work tree
    (``pip install -e .`` from a clone, or running from the clone): an installed copy inside
    some other repository (a virtual environment in a checkout, say) is not mistaken for one.

    Args:
        package_dir: The package folder to look at (default: this package's own).

    Returns:
        ``{"git_commit": HEAD's full hash or None, "git_dirty": bool or None}``; ``None`` when
        the package is not run from a git checkout, git is not installed, or git fails.
        ``git_dirty`` is true when tracked files differ from HEAD (untracked files ignored).
    """
    directory = Path(package_dir).resolve() if package_dir is not None else _PACKAGE_DIR
    unknown: dict[str, Any] = {"git_commit": None, "git_dirty": None}
    if not directory.is_dir():
        return unknown
    top = _git(["rev-parse", "--show-toplevel"], directory)
    if not top or Path(top).resolve() / directory.name != directory:
        return unknown
    commit = _git(["rev-parse", "--verify", "HEAD"], directory)
    if not commit:
        return unknown
    status = _git(["status", "--porcelain", "--untracked-files=no"], directory)
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def provenance(*, now: datetime.datetime | None = None) -> dict[str, Any]:
    """The provenance block of a result record (JSON-ready).

    Args:
        now: The moment to record (default: the current time); must be timezone-aware.

    Returns:
        A dict with ``package`` (``"dpkd-audit"``), ``package_version`` (installed metadata, or
        ``None``), ``git_commit`` and ``git_dirty`` (see :func:`git_state`; ``None`` outside a
        git checkout), ``created_utc`` (ISO 8601, UTC, seconds, ending in ``Z``), ``python``,
        ``platform`` and ``versions`` (distribution name -> version or ``None``, for
        :data:`LIBRARIES`).

    Raises:
        ValueError: If ``now`` is not a timezone-aware ``datetime``.
    """
    if now is None:
        now = datetime.datetime.now(datetime.UTC)
    elif not isinstance(now, datetime.datetime) or now.utcoffset() is None:
        raise ValueError(f"now must be a timezone-aware datetime; got {now!r}")
    stamp = now.astimezone(datetime.UTC).replace(microsecond=0, tzinfo=None)
    versions: dict[str, str | None] = {}
    for alternatives in LIBRARIES:
        found = next(((name, v) for name in alternatives
                      if (v := _distribution_version(name)) is not None), None)
        name, version = found if found is not None else (alternatives[0], None)
        versions[name] = version
    return {
        "package": DISTRIBUTION,
        "package_version": package_version(),
        **git_state(),
        "created_utc": stamp.isoformat() + "Z",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }
