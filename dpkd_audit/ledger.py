"""The privacy ledger: charge -> check -> persist -> release.

A :class:`Ledger` holds a budget ``(epsilon, delta)`` and an accountant. ``charge(event, label=)``
composes the event into a *copy* of the accountant and refuses (``BudgetExceededError``, nothing
recorded) if the composed epsilon at the budget's delta would exceed the budget epsilon;
otherwise it records the charge and only then returns, so a mechanism releases its output only
after its cost is on record.

With ``path``, charges live in an SQLite file:

- a charge is committed with ``synchronous=FULL`` inside the charging call, before the mechanism
  samples anything: a crash (even ``kill -9``) right after ``charge`` returns never loses it;
- every charge runs in an ``IMMEDIATE`` transaction that first re-reads the charges other
  processes committed, so several processes sharing one file can never overspend together;
- a restart resumes the spent budget; a file that is not a dpkd-audit ledger, is damaged, or was
  created for another budget is refused with a clear error, never reset. New files are built
  aside and linked into place atomically, so a half-created ledger never exists at ``path``.

Each row carries a SHA-256 digest chained to the previous row's, so a row that was altered,
removed or reordered is detected when the file is opened.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.accountants.base import Accountant, Epsilon
from dpkd_audit.accountants.pure import PureAccountant
from dpkd_audit.errors import (
    BudgetExceededError,
    LedgerCorruptError,
    LedgerError,
    LedgerMismatchError,
)
from dpkd_audit.events import event_from_json, event_to_json

__all__ = ["Charge", "Ledger", "SpentBudget"]

_MAGIC = "dpkd-audit-ledger"
_SCHEMA_VERSION = 1
_APPLICATION_ID = 0x64706B64  # "dpkd"
_SQLITE_HEADER = b"SQLite format 3\x00"
#: Relative slack on the budget comparison, absorbing float rounding of sums such as
#: 10 x 0.1 (an overspend of at most 1e-12 of the budget).
BUDGET_RTOL = 1e-12
_GENESIS = "0" * 64


@dataclasses.dataclass(frozen=True, kw_only=True)
class Charge:
    """One accepted charge."""

    seq: int
    label: str
    event: _dp.DpEvent
    created: float
    pid: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpentBudget:
    """What a ledger has spent: epsilon at the budget's delta, by its accountant."""

    epsilon: Epsilon
    delta: float
    budget_epsilon: float
    budget_delta: float
    charges: int

    @property
    def remaining_epsilon(self) -> float:
        """Budget epsilon minus spent epsilon (0 when exhausted)."""
        return max(0.0, self.budget_epsilon - float(self.epsilon))


def _digest(prev: str, seq: int, label: str, event_json: str) -> str:
    payload = f"{prev}\x1f{seq}\x1f{label}\x1f{event_json}".encode()
    return hashlib.sha256(payload).hexdigest()


class Ledger:
    """A privacy budget filter, in memory or persisted in an SQLite file.

    Args:
        epsilon: Budget epsilon (finite, > 0).
        delta: Budget delta in [0, 1). With delta = 0 the default accountant is basic (pure)
            composition.
        accountant: An *empty* accountant used as the template for accounting (default:
            :class:`~dpkd_audit.accountants.PureAccountant`).
        path: SQLite file for a durable, multi-process ledger; ``None`` keeps it in memory.
        timeout: Seconds to wait for another process holding the file's write lock.

    Raises:
        ValueError: For bad parameters.
        LedgerCorruptError: If ``path`` exists but is not a sound dpkd-audit ledger.
        LedgerMismatchError: If ``path`` holds a ledger created for another budget.
    """

    def __init__(self, *, epsilon: float, delta: float = 0.0,
                 accountant: Accountant | None = None, path: str | os.PathLike | None = None,
                 timeout: float = 60.0) -> None:
        self._epsilon = _validate.check_epsilon(epsilon)
        self._delta = _validate.check_delta(delta)
        if accountant is None:
            accountant = PureAccountant()
        if not isinstance(accountant, Accountant):
            raise ValueError("accountant must be a dpkd_audit Accountant instance (e.g. "
                             f"PureAccountant()); got {type(accountant).__name__}")
        if not accountant.is_empty:
            raise ValueError("accountant must be empty (nothing composed yet); the ledger's "
                             "charges are its only history")
        self._template = accountant.copy()
        self._accountant = accountant.copy()
        self._timeout = _validate.check_positive("timeout", timeout)
        self._lock = threading.Lock()
        self._charges: list[Charge] = []
        self._last_digest = _GENESIS
        self._path = None if path is None else Path(path)
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        if self._path is not None:
            self._open()

    @classmethod
    def open(cls, path: str | os.PathLike, *, accountant: Accountant | None = None,
             timeout: float = 60.0) -> Ledger:
        """Open an existing ledger file with the budget stored in it.

        Raises:
            LedgerError: If ``path`` does not exist.
            LedgerCorruptError: If it is not a sound dpkd-audit ledger.
        """
        path = Path(path)
        if not path.exists():
            raise LedgerError(f"no ledger at {path}")
        cls._validate_header(path)
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)
            try:
                meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            finally:
                conn.close()
            epsilon, delta = float(meta["epsilon"]), float(meta["delta"])
        except (sqlite3.DatabaseError, KeyError, ValueError) as exc:
            raise LedgerCorruptError(
                f"{path} is not a readable dpkd-audit ledger ({exc}); refusing to use it") from exc
        return cls(epsilon=epsilon, delta=delta, accountant=accountant, path=path,
                   timeout=timeout)

    # ------------------------------------------------------------------ properties
    @property
    def epsilon(self) -> float:
        """Budget epsilon."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """Budget delta."""
        return self._delta

    @property
    def path(self) -> Path | None:
        """The SQLite file, or None for an in-memory ledger."""
        return self._path

    def __repr__(self) -> str:
        where = "in memory" if self._path is None else str(self._path)
        return (f"Ledger(epsilon={self._epsilon}, delta={self._delta}, "
                f"accountant={type(self._template).__name__}, {where})")

    # ------------------------------------------------------------------ public API
    def charge(self, event: _dp.DpEvent, *, label: str) -> Charge:
        """Record ``event`` against the budget, or refuse it and record nothing.

        Returns:
            The recorded :class:`Charge` (durably committed when the ledger has a path).

        Raises:
            BudgetExceededError: If the budget would be exceeded.
            UnsupportedEventError: If the accountant cannot account for ``event``.
            ValueError: For an empty label.
        """
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"label must be a non-empty string; got {label!r}")
        self._template.copy().compose(event)  # UnsupportedEventError naming the event
        event_json = event_to_json(event)
        with self._lock:
            if self._closed:
                raise LedgerError("this ledger was closed; open the file again to charge")
            if self._conn is None:
                trial = self._check(event, label)
                charge = Charge(seq=len(self._charges) + 1, label=label, event=event,
                                created=time.time(), pid=os.getpid())
                self._accountant = trial
                self._charges.append(charge)
                return charge
            with self._write_transaction():
                self._sync()
                trial = self._check(event, label)
                seq = len(self._charges) + 1
                digest = _digest(self._last_digest, seq, label, event_json)
                created = time.time()
                self._conn.execute(
                    "INSERT INTO charges (seq, label, event, created, pid, digest) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (seq, label, event_json, created, os.getpid(), digest))
            # committed: only now does the in-memory state advance
            charge = Charge(seq=seq, label=label, event=event, created=created, pid=os.getpid())
            self._accountant = trial
            self._charges.append(charge)
            self._last_digest = digest
            return charge

    def check(self, events: Sequence[_dp.DpEvent], *, label: str) -> Epsilon:
        """Would charging ``events`` (in order) fit the budget? Records nothing.

        A pipeline calls this before any work starts, so that a run the budget cannot pay for
        fails at once rather than after an hour of training.

        Returns:
            The spent epsilon the ledger would report after charging all of ``events``.

        Raises:
            BudgetExceededError: If they would not fit (message as for :meth:`charge`).
            UnsupportedEventError: If the accountant cannot account for one of them.
        """
        events = list(events)
        if not events:
            raise ValueError("events must hold at least one DpEvent")
        composed = _dp.ComposedDpEvent(events) if len(events) > 1 else events[0]
        with self._lock:
            if self._conn is not None:
                self._sync()
            return self._check(composed, label).get_epsilon(self._delta)

    def spent(self) -> SpentBudget:
        """The budget spent so far (re-read from the file first, if any)."""
        with self._lock:
            if self._conn is not None:
                self._sync()
            eps = self._accountant.get_epsilon(self._delta)
            return SpentBudget(epsilon=eps, delta=self._delta, budget_epsilon=self._epsilon,
                               budget_delta=self._delta, charges=len(self._charges))

    def charges(self) -> list[Charge]:
        """All accepted charges, oldest first (re-read from the file first, if any)."""
        with self._lock:
            if self._conn is not None:
                self._sync()
            return list(self._charges)

    def close(self) -> None:
        """Close the SQLite connection (the ledger cannot charge afterwards)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._closed = True

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _check(self, event: _dp.DpEvent, label: str) -> Accountant:
        trial = self._accountant.copy().compose(event)
        after = trial.get_epsilon(self._delta)
        if math.isnan(after) or after > self._epsilon * (1.0 + BUDGET_RTOL):
            before = self._accountant.get_epsilon(self._delta)
            raise BudgetExceededError(
                f"charge {label!r} refused: {type(event).__name__} would bring epsilon from "
                f"{float(before):.6g} to {float(after):.6g} ({after.method}) at delta="
                f"{self._delta:g}, over the budget epsilon={self._epsilon:g}; nothing was "
                f"recorded")
        return trial

    def _connect(self, path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(str(path), timeout=self._timeout, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    @contextmanager
    def _write_transaction(self) -> Iterator[None]:
        conn = self._conn
        if conn is None:  # pragma: no cover - internal invariant
            raise LedgerError("ledger has no open file")
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")

    def _open(self) -> None:
        path = self._path
        if path is None:  # pragma: no cover - internal invariant
            raise LedgerError("ledger has no path")
        if not path.exists():
            self._create(path)
        self._validate_header(path)
        try:
            conn = self._connect(path)
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise LedgerCorruptError(f"{path}: SQLite integrity check failed: {check}")
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            if app_id != _APPLICATION_ID or not {"meta", "charges"} <= tables:
                raise LedgerCorruptError(
                    f"{path} is an SQLite file but not a dpkd-audit ledger (application_id="
                    f"{app_id:#x}, tables={sorted(tables)}); refusing to use or reset it")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            raise LedgerCorruptError(f"{path} is not a readable dpkd-audit ledger: {exc}") from exc
        if meta.get("magic") != _MAGIC or meta.get("schema") != str(_SCHEMA_VERSION):
            conn.close()
            raise LedgerCorruptError(f"{path}: unknown ledger format {meta.get('magic')!r} "
                                     f"schema {meta.get('schema')!r}")
        try:
            stored = (float(meta["epsilon"]), float(meta["delta"]))
        except (KeyError, ValueError) as exc:
            conn.close()
            raise LedgerCorruptError(f"{path}: ledger metadata is damaged ({exc})") from exc
        if stored != (self._epsilon, self._delta):
            conn.close()
            raise LedgerMismatchError(
                f"{path} holds a ledger for budget epsilon={stored[0]}, delta={stored[1]}; "
                f"asked for epsilon={self._epsilon}, delta={self._delta}")
        self._conn = conn
        self._sync()

    @staticmethod
    def _validate_header(path: Path) -> None:
        try:
            with open(path, "rb") as fh:
                header = fh.read(len(_SQLITE_HEADER))
        except OSError as exc:
            raise LedgerError(f"cannot read ledger file {path}: {exc}") from exc
        if header != _SQLITE_HEADER:
            what = "empty" if not header else "not an SQLite database"
            raise LedgerCorruptError(
                f"{path} exists but is {what}, so it is not a dpkd-audit ledger (ledgers are "
                "created atomically); refusing to use or reset it")

    def _create(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            conn = sqlite3.connect(str(tmp), isolation_level=None)
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA application_id={_APPLICATION_ID}")
            conn.execute("BEGIN")
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                "CREATE TABLE charges (seq INTEGER PRIMARY KEY, label TEXT NOT NULL, "
                "event TEXT NOT NULL, created REAL NOT NULL, pid INTEGER NOT NULL, "
                "digest TEXT NOT NULL)")
            conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("magic", _MAGIC), ("schema", str(_SCHEMA_VERSION)),
                ("epsilon", repr(self._epsilon)), ("delta", repr(self._delta)),
                ("accountant", type(self._template).__name__), ("created", repr(time.time())),
            ])
            conn.execute("COMMIT")
            conn.close()
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)  # atomic, fails if another process created it first
            except FileExistsError:
                pass
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except FileNotFoundError as exc:
            raise LedgerError(f"cannot create ledger {path}: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)

    def _sync(self) -> None:
        """Compose the charges other processes committed since this one last looked."""
        if self._conn is None:  # pragma: no cover - internal invariant
            raise LedgerError("ledger has no open file")
        rows = self._conn.execute(
            "SELECT seq, label, event, created, pid, digest FROM charges WHERE seq > ? "
            "ORDER BY seq", (len(self._charges),)).fetchall()
        if not rows:
            return
        accountant = self._accountant.copy()
        charges, digest = [], self._last_digest
        for seq, label, event_json, created, pid, stored_digest in rows:
            expected_seq = len(self._charges) + len(charges) + 1
            digest = _digest(digest, seq, label, event_json)
            if seq != expected_seq or digest != stored_digest:
                raise LedgerCorruptError(
                    f"{self._path}: charge #{seq} does not match the chain of digests (the file "
                    "was altered or damaged); refusing to use it")
            try:
                event = event_from_json(event_json)
                accountant.compose(event)
            except (ValueError, KeyError, TypeError) as exc:
                raise LedgerCorruptError(
                    f"{self._path}: charge #{seq} holds an unreadable event: {exc}") from exc
            charges.append(Charge(seq=seq, label=label, event=event, created=created, pid=pid))
        self._accountant = accountant
        self._charges.extend(charges)
        self._last_digest = digest
