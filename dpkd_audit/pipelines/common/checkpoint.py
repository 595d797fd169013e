"""Checkpoints of the pipelines' long training loops, so that a run cut short resumes.

A run started inside ``with Checkpoints(directory):`` saves the whole state of each long loop
(the teacher ensemble's steps, a classifier's epochs - non-private teachers, baselines,
students -, the generator's steps): model, optimizer, learning-rate schedule, the loop's seeded
CPU ``torch.Generator`` and the step reached. It saves every ``every_seconds``, when the loop
ends, and when a SIGINT arrives (``timeout --signal=INT``, Ctrl-C): the signal is held until the
step in flight has ended, the checkpoint is written, then ``KeyboardInterrupt`` is raised as
usual. A later run with the same directory starts each loop at the step its checkpoint
reached, and skips a loop whose checkpoint says it ended. On CPU the resumed run is
bit-identical to one that was never interrupted (``tests/test_checkpoint.py``).

Example:
    >>> from dpkd_audit.pipelines.common.checkpoint import Checkpoints
    >>> with Checkpoints("runs/ckpt", every_seconds=60):     # doctest: +SKIP
    ...     result = dgd.run(config, ledger=ledger, rng=rng)

**Identity.** A loop's checkpoint is ``DIR/<stage>-<hash of its key>.pt``. The key holds
everything the loop's result depends on: its config, seed, and sha256 fingerprints of its
inputs (the private images and labels, the initial model, a frozen teacher's weights and the
statistics it is matched to). A run with another config or other inputs therefore never reads
it. The file's header also names the code that wrote it (:func:`code_identity`: the sha256 of
the package's sources, its version and git commit): a checkpoint of other code is refused with
an error naming both, before any work, since other code may not continue the same
computation.

**Privacy.** A checkpoint is internal state of a computation on the private data, as private
as the data itself: keep it where the data is kept. DP-SGD loops are not checkpointed (a
resumed DP-SGD run would have to restore Opacus' accountant and its noise exactly); nor is
anything a ledger charges for. A loop that follows a DP release (the sound generator, fitted
to a DP baseline and released statistics) keys its checkpoint on a fingerprint of that
release, so a rerun that released again (for instance a GPU DP-SGD baseline, which is not
bit-reproducible) starts that loop afresh instead of mixing two releases.

**Size** (``benchmarks/checkpoint_sizes.py``, paper presets on MNIST): DGD's teacher ensemble
(250 teachers of widths 64 and 128 with Adam's moments) 392.6 MiB and DP-DFD's ResNet-34
teacher 162.5 MiB; DGD's baseline 2.2, each generator 9.8 and the reverse k-NN student 8.5 MiB.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import hashlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import torch
from torch import nn

from dpkd_audit import provenance

__all__ = ["Checkpoints", "LoopCheckpoint", "active_checkpoints", "code_identity",
           "fingerprint", "loop_checkpoint", "no_loop_checkpoint", "restore_training",
           "training_state"]

#: The format of a checkpoint file (bumped when the header changes).
FORMAT = 1
_PACKAGE_DIR = Path(__file__).resolve().parents[2]
_ACTIVE: contextvars.ContextVar[Checkpoints | None] = contextvars.ContextVar(
    "dpkd_checkpoints", default=None)
_CODE: dict[str, Any] = {}


def code_identity() -> dict[str, Any]:
    """The code a checkpoint was written by: sources' sha256, package version, git commit.

    ``sources`` hashes every ``.py`` file of the package (path and bytes, in path order), so it
    is defined on a machine that got the files without ``.git`` too; the commit is for people.
    """
    if not _CODE:
        digest = hashlib.sha256()
        for path in sorted(_PACKAGE_DIR.rglob("*.py")):
            digest.update(path.relative_to(_PACKAGE_DIR).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
        git = provenance.git_state(_PACKAGE_DIR)
        _CODE.update(sources=digest.hexdigest(), version=provenance.package_version(),
                     commit=git["git_commit"] or os.environ.get("PAPER_SH_COMMIT"))
    return dict(_CODE)


def _update(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().contiguous()
        digest.update(f"T{value.dtype}{tuple(value.shape)}".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes()
                      if value.numel() else b"")
    elif isinstance(value, np.ndarray):
        value = np.ascontiguousarray(value)
        digest.update(f"A{value.dtype.str}{value.shape}".encode())
        digest.update(value.tobytes())
    elif isinstance(value, nn.Module):
        digest.update(f"M{type(value).__name__}".encode())
        for name, tensor in value.state_dict().items():
            digest.update(name.encode())
            _update(digest, tensor)
    elif isinstance(value, Mapping):
        digest.update(b"{")
        for name in sorted(value, key=str):
            digest.update(str(name).encode() + b":")
            _update(digest, value[name])
        digest.update(b"}")
    elif isinstance(value, list | tuple):
        digest.update(b"[")
        for item in value:
            _update(digest, item)
        digest.update(b"]")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        digest.update(type(value).__name__.encode())
        _update(digest, {f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    elif isinstance(value, enum.Enum):
        digest.update(repr(value).encode())
    elif value is None or isinstance(value, bool | int | float | str):
        digest.update(repr(value).encode())
    else:
        raise TypeError(f"cannot fingerprint a {type(value).__name__}")


def fingerprint(*values: Any) -> str:
    """sha256 (hex) of arrays, tensors, modules' state, dataclasses, mappings and scalars."""
    digest = hashlib.sha256()
    for value in values:
        _update(digest, value)
    return digest.hexdigest()


def training_state(model: nn.Module, optimizer: torch.optim.Optimizer, schedule: Any,
                   rng: torch.Generator, **extra: Any) -> dict[str, Any]:
    """A loop's state: model, optimizer, learning-rate schedule, seeded generator, ``extra``."""
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(), "rng": rng.get_state(), **extra}


def restore_training(saved: Mapping[str, Any], model: nn.Module,
                     optimizer: torch.optim.Optimizer, schedule: Any,
                     rng: torch.Generator) -> None:
    """Put a :func:`training_state` back into the loop's objects (its ``extra`` is the caller's)."""
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    schedule.load_state_dict(saved["schedule"])
    rng.set_state(saved["rng"])


class Checkpoints:
    """Where the long loops of the runs started inside ``with`` this object save their state.

    Args:
        directory: Folder of the checkpoint files (created if missing).
        every_seconds: Seconds (> 0) between two saves of a running loop; a loop also saves
            when it ends and on SIGINT.
        clock: Monotonic seconds (tests).

    Raises:
        ValueError: For a bad ``every_seconds``, or a ``directory`` that is not a folder.
    """

    def __init__(self, directory: str | os.PathLike[str], *, every_seconds: float = 120.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if (isinstance(every_seconds, bool) or not isinstance(every_seconds, int | float)
                or not math.isfinite(every_seconds) or every_seconds <= 0):
            raise ValueError(f"every_seconds must be a finite number > 0; got {every_seconds!r}")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"checkpoint directory {self.directory} exists and is not a folder")
        self.every_seconds = float(every_seconds)
        self.clock = clock
        #: (stage, step reached, total) of each loop resumed from a checkpoint, in order.
        self.resumed: list[tuple[str, int, int]] = []
        self._tokens: list[contextvars.Token[Checkpoints | None]] = []

    def __enter__(self) -> Checkpoints:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._tokens.pop())

    def take_resumed(self) -> list[dict[str, Any]]:
        """The loops resumed since the last call (``stage``, ``step``, ``total``); clears them."""
        taken = [{"stage": stage, "step": step, "total": total}
                 for stage, step, total in self.resumed]
        self.resumed.clear()
        return taken

    def loop(self, stage: str, key: Mapping[str, Any]) -> LoopCheckpoint:
        """The checkpoint of loop ``stage`` whose result depends on ``key`` (JSON-able).

        Raises:
            ValueError: If ``stage`` is not a plain name (letters, digits, ``_``, ``-``).
        """
        if not isinstance(stage, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", stage):
            raise ValueError(f"stage must be a plain name of letters, digits, _ and - (1-64 "
                             f"characters): it names the checkpoint file; got {stage!r}")
        text = json.dumps({"stage": stage, **key}, sort_keys=True)
        name = f"{stage}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.pt"
        return LoopCheckpoint(self, self.directory / name, stage=stage, key=text)


def active_checkpoints() -> Checkpoints | None:
    """The :class:`Checkpoints` of the innermost ``with`` around this call, or ``None``."""
    return _ACTIVE.get()


def loop_checkpoint(stage: str, key: Callable[[], Mapping[str, Any]]) -> LoopCheckpoint:
    """Loop ``stage``'s checkpoint in the active :class:`Checkpoints`, else one that does nothing.

    ``key`` is called only when checkpoints are active (fingerprints cost a pass over inputs).
    """
    checkpoints = active_checkpoints()
    if checkpoints is None:
        return no_loop_checkpoint(stage, key)
    return checkpoints.loop(stage, key())


def no_loop_checkpoint(stage: str, key: Callable[[], Mapping[str, Any]]) -> LoopCheckpoint:
    """A checkpoint that does nothing, with :func:`loop_checkpoint`'s signature."""
    return LoopCheckpoint(None, None, stage=stage, key="")


class LoopCheckpoint:
    """One loop's checkpoint: :meth:`load` before the loop, :meth:`step_done` after each step.

    Use as a context manager around the loop: inside it a SIGINT is held until the next
    :meth:`step_done`, which saves and then raises ``KeyboardInterrupt`` (a second SIGINT
    raises at once). Made by :meth:`Checkpoints.loop`; without a :class:`Checkpoints` (``path``
    ``None``) every method does nothing.
    """

    def __init__(self, owner: Checkpoints | None, path: Path | None, *, stage: str,
                 key: str) -> None:
        self.owner, self.path, self.stage, self.key = owner, path, stage, key
        self._interrupted = False
        self._previous: Any = None
        self._installed = False
        self._last_save = 0.0 if owner is None else owner.clock()

    @property
    def enabled(self) -> bool:
        """Whether this loop is checkpointed."""
        return self.path is not None

    def __enter__(self) -> LoopCheckpoint:
        if self.enabled and threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._hold)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
        if self._interrupted and exc[0] is None:
            self._interrupted = False
            raise KeyboardInterrupt

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        if self._interrupted:  # a second SIGINT: stop now
            raise KeyboardInterrupt
        self._interrupted = True

    def load(self) -> tuple[int, dict[str, Any]] | None:
        """``(steps done, state)`` from the checkpoint file, or ``None`` if there is none.

        Raises:
            ValueError: If the file was written by other code or for another key, or is not a
                checkpoint.
        """
        if self.path is None or not self.path.exists():
            return None
        try:
            data = torch.load(self.path, map_location="cpu", weights_only=True)
            header = json.loads(data["header"])
            step, state = int(data["step"]), data["state"]
        except Exception as error:  # any unreadable file is refused by name
            raise ValueError(f"checkpoint {self.path} cannot be read as a checkpoint "
                             f"({type(error).__name__}); remove it to start stage "
                             f"{self.stage!r} afresh") from None
        code = code_identity()
        if header.get("format") != FORMAT or header.get("code", {}).get("sources") \
                != code["sources"]:
            theirs = header.get("code", {})
            raise ValueError(
                f"checkpoint {self.path} of stage {self.stage!r} was written by other code "
                f"(sources sha256 {str(theirs.get('sources'))[:12]}, version "
                f"{theirs.get('version')}, commit {str(theirs.get('commit'))[:10]}); this is "
                f"sources {code['sources'][:12]}, version {code['version']}, commit "
                f"{str(code['commit'])[:10]}: run the code that wrote it, or remove the file "
                "to start the stage afresh")
        if header.get("key") != self.key:
            raise ValueError(f"checkpoint {self.path} of stage {self.stage!r} was written for "
                             f"another config or other inputs: its key is {header.get('key')}, "
                             f"this run's is {self.key}; remove the file to start afresh")
        total = int(header.get("total", -1))
        if self.owner is not None:
            self.owner.resumed.append((self.stage, step, total))
        print(f"[dpkd] {self.stage}: resumed at step {step} of {total} from {self.path}",
              file=sys.stderr, flush=True)
        return step, state

    def step_done(self, step: int, total: int, state: Callable[[], Mapping[str, Any]]) -> None:
        """After step ``step`` (of ``total``; counted from 1): save if due, ended or interrupted.

        Raises:
            KeyboardInterrupt: After saving, if a SIGINT arrived during the step.
        """
        if self.path is None or self.owner is None:
            return
        now = self.owner.clock()
        if step >= total or self._interrupted or now - self._last_save >= \
                self.owner.every_seconds:
            self.save(step, total, state())
            self._last_save = self.owner.clock()
        if self._interrupted:
            self._interrupted = False
            raise KeyboardInterrupt

    def save(self, step: int, total: int, state: Mapping[str, Any]) -> None:
        """Write the checkpoint atomically (a temporary file, fsync, rename)."""
        if self.path is None:
            return
        header = {"format": FORMAT, "stage": self.stage, "key": self.key,
                  "code": code_identity(), "total": total}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as handle:
            torch.save({"header": json.dumps(header, sort_keys=True), "step": step,
                        "state": dict(state)}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
