"""Checks of the paths a command writes, before any work: errors name the flag and the cause.

A command that will write a file (``--plot``, ``--ledger``) or fill a folder (``--out``) checks
first that it can, so that a typo does not cost a whole run and no directory the user did not
ask for is created (``--out`` is the one folder a command creates, with its parents).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["PATH_ARGUMENTS", "check_output_dir", "check_path_arguments", "output_dir",
           "output_file"]

#: The arguments of the ``dpkd`` commands that name a file or a folder (``dest`` -> as the
#: user wrote it).
PATH_ARGUMENTS: dict[str, str] = {
    "out": "--out", "ledger": "--ledger", "data_dir": "--data-dir", "plot": "--plot",
    "plan": "--plan", "records": "RECORDS", "paths": "PATH", "path": "PATH",
    "checkpoint_dir": "--checkpoint-dir",
}


def _refuse_empty(value: str | os.PathLike[str], flag: str) -> None:
    """An empty path is refused by name: ``Path("")`` is ``"."``, never what was meant."""
    if os.fspath(value) == "":
        raise ValueError(f"{flag} is an empty path: name a file or folder (. is the current "
                         "folder)")


def check_path_arguments(args: argparse.Namespace) -> None:
    """Refuse every empty path argument of a parsed command line (:data:`PATH_ARGUMENTS`).

    Raises:
        ValueError: Naming the flag (``--out ''`` would otherwise write into the current
            folder, ``dpkd results ''`` read it).
    """
    for dest, flag in PATH_ARGUMENTS.items():
        value = getattr(args, dest, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                _refuse_empty(item, flag)


def output_file(value: str | os.PathLike[str], flag: str) -> Path:
    """A file path the command will create or overwrite: its folder must exist and be writable.

    Raises:
        ValueError: Naming ``flag``, the path and what is wrong with it.
    """
    _refuse_empty(value, flag)
    path = Path(value)
    if path.exists() and path.is_dir():
        raise ValueError(f"{flag} must be a file path; {path} is a directory")
    if path.exists() and not path.is_file():
        raise ValueError(f"{flag} must be a regular file; {path} is not one (a FIFO, socket or "
                         "device?)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise ValueError(f"{flag}: the directory {parent} does not exist (create it first)")
    if not parent.is_dir():
        raise ValueError(f"{flag}: {parent} is not a directory")
    target = path if path.exists() else parent
    if not os.access(target, os.W_OK):
        raise ValueError(f"{flag}: {target} is not writable")
    return path


def check_output_dir(value: str | os.PathLike[str], flag: str) -> Path:
    """A folder the command will fill: refused now if it cannot be created or written.

    Creates nothing (``dpkd`` checks every ``--out`` this way before any data is loaded, so that
    a read-only or mistyped folder costs no run and a failed run leaves no empty folder).

    Raises:
        ValueError: Naming ``flag``, the path and what is wrong with it.
    """
    _refuse_empty(value, flag)
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} must be a directory; {path} is a file")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag}: {existing} is a file, so {path} cannot be created")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: {existing} is not writable")
    return path


def output_dir(value: str | os.PathLike[str], flag: str) -> Path:
    """A folder the command fills; created with its parents if missing.

    Raises:
        ValueError: Naming ``flag``, the path and what is wrong with it.
    """
    path = check_output_dir(value, flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{flag}: cannot create {path} ({exc.strerror or exc})") from exc
    return path
