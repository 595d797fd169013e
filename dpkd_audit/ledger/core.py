"""The privacy ledger: charge -> check -> persist -> release.

A :class:`Ledger` holds a budget ``(epsilon, delta)`` and an accountant. ``charge(event, label=)``
composes the event into a *copy* of the accountant and refuses (``BudgetExceededError``, nothing
recorded) if the composed epsilon at the budget's delta would exceed the budget epsilon;
otherwise it records the charge and only then returns, so a mechanism releases its output only
after its cost is on record.

With ``path``, charges live in an SQLite file (:mod:`dpkd_audit.ledger.store`):

- a charge is committed (``synchronous=EXTRA``: FULL plus a directory sync) inside the charging
  call, before the mechanism samples anything: a crash (even ``kill -9``) right after ``charge``
  returns never loses it, and a crash in the middle of one is rolled back by the next process
  that opens the file, reader or writer;
- every charge runs in a ``BEGIN IMMEDIATE`` transaction that first re-reads (and verifies) the
  charges other processes committed, so processes sharing one file can never overspend together;
- the ledger's identity (budget, accountant class and configuration, neighbouring relation) is
  stored in the file and checked on every open: ``Ledger(..., path=existing)`` with another one
  is refused (:class:`~dpkd_audit.errors.LedgerMismatchError`); ``Ledger.open(path)`` adopts it;
- every metadata field, every charge and the head (row count and last digest, written in the
  same transaction as each charge) are covered by a chain of SHA-256 digests, or HMAC-SHA256
  with a key (:mod:`dpkd_audit.ledger.chain`); a file that was damaged, edited, truncated or is
  not a ledger is refused (:class:`~dpkd_audit.errors.LedgerCorruptError`), never reset.
  Without a key the chain detects accidental damage and naive edits only; nothing here protects
  against deleting the whole file or putting back an older copy of it.

New files are built aside and linked into place atomically, so a half-created ledger never
exists at ``path``.

Every event is checked at the door, before anything is written (all of a plan's events before
the first byte): by its own constructors again (:func:`~dpkd_audit.events.validate_event`, as
an event can be built around them), and, with a file, by reading it back from the JSON stored,
so a charge the ledger accepts is one every later open can account for (issue 65).
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.accountants.base import Accountant, Epsilon
from dpkd_audit.accountants.pure import PureAccountant
from dpkd_audit.errors import (
    BudgetExceededError,
    LedgerAccessError,
    LedgerCorruptError,
    LedgerError,
    LedgerKeyError,
    LedgerMismatchError,
    LedgerVersionError,
)
from dpkd_audit.events import event_from_json, event_to_json, validate_event
from dpkd_audit.ledger import store as _store
from dpkd_audit.ledger.chain import Chain, resolve_key
from dpkd_audit.ledger.identity import (
    BUDGET_RTOL,
    LedgerIdentity,
    accountant_from_spec,
    accountant_spec,
    canonical_json,
    parse_spec,
)
from dpkd_audit.ledger.witness import check_witness, write_witness

__all__ = ["BUDGET_RTOL", "Charge", "Ledger", "SpentBudget"]


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
        """Budget epsilon minus spent epsilon (0 when exhausted; inf for an unbounded ledger)."""
        if math.isinf(self.budget_epsilon):
            return math.inf
        return max(0.0, self.budget_epsilon - float(self.epsilon))


class Ledger:
    """A privacy budget filter, in memory or persisted in an SQLite file.

    Args:
        epsilon: Budget epsilon (finite, > 0; ``math.inf`` only with ``unbounded=True``).
        delta: Budget delta in [0, 1). With delta = 0 the default accountant is basic (pure)
            composition.
        accountant: An *empty* accountant used as the template for accounting (default:
            :class:`~dpkd_audit.accountants.PureAccountant`). Part of the ledger's identity.
        path: SQLite file for a durable, multi-process ledger (created if missing, in an
            existing directory); ``None`` keeps it in memory.
        timeout: Seconds to wait for another process holding the file's write lock.
        key: MAC key (bytes or text, at least 16 bytes) protecting the file with HMAC-SHA256.
        key_file: A file holding the MAC key (instead of ``key``). Without either, the key is
            read from ``DPKD_LEDGER_KEY`` (the key) or ``DPKD_LEDGER_KEY_FILE`` (a path) if set.
        unbounded: With ``epsilon=math.inf``, a ledger that refuses nothing and only records,
            for runs whose record-level epsilon is infinite anyway (a published pipeline's
            ``NonPrivateDpEvent``, which a finite budget refuses). Explicit, so that an
            infinite epsilon computed by mistake never becomes a budget that cannot run out.
            ``Ledger.open`` adopts a stored unbounded budget.

    Raises:
        ValueError: For bad parameters (the message names the parameter).
        LedgerMismatchError: If ``path`` holds a ledger of another budget, accountant (class or
            configuration) or neighbouring relation (``Ledger.open`` adopts the stored one).
        LedgerCorruptError: If ``path`` exists but is not a sound dpkd-audit ledger.
        LedgerKeyError: If the file's key is missing or wrong, or a key was given for a file
            without one.
        LedgerAccessError: If the file cannot be read or written (missing directory, read-only
            file, full disk, not a regular file, lock timeout).
        LedgerVersionError: If the file was written by an older dpkd-audit (see
            :meth:`migrate`).
    """

    def __init__(self, *, epsilon: float, delta: float = 0.0,
                 accountant: Accountant | None = None, path: str | os.PathLike | None = None,
                 timeout: float = 60.0, key: bytes | str | None = None,
                 key_file: str | os.PathLike | None = None, unbounded: bool = False) -> None:
        if not isinstance(unbounded, bool):
            raise ValueError(f"unbounded must be a bool; got {unbounded!r}")
        if unbounded:
            if epsilon != math.inf:
                raise ValueError(f"unbounded=True needs epsilon=math.inf; got epsilon={epsilon!r}")
        else:
            epsilon = _validate.check_epsilon(epsilon)  # finite: an infinite budget is opt-in
        delta = _validate.check_delta(delta)
        if accountant is None:
            accountant = PureAccountant()
        self._setup(accountant, path, timeout, read_only=False)
        self._epsilon, self._delta = epsilon, delta
        if self._path is None:
            if key is not None or key_file is not None:
                raise ValueError("key and key_file apply only to a ledger with a path")
            return
        self._chain = Chain(resolve_key(key, key_file)[0])
        self._attach(adopt=False)

    @classmethod
    def open(cls, path: str | os.PathLike, *, accountant: Accountant | None = None,
             timeout: float = 60.0, key: bytes | str | None = None,
             key_file: str | os.PathLike | None = None, read_only: bool = False) -> Ledger:
        """Open an existing ledger file, adopting the budget and accountant stored in it.

        Args:
            path: The ledger file (never created here).
            accountant: If given, it must equal the stored accountant (class, configuration,
                neighbouring relation); if None, the stored one is rebuilt and adopted.
            timeout: Seconds to wait for another process holding the file's lock.
            key: MAC key, as for the constructor.
            key_file: File holding the MAC key, as for the constructor.
            read_only: Open for reading only (``charge`` is refused); works on a file this
                process may not write, unless a crashed writer left a journal to roll back.

        Raises:
            LedgerAccessError: If nothing (or not a regular file) is at ``path``, or it cannot
                be read or (unless ``read_only``) written.
            LedgerMismatchError: If ``accountant`` differs from the stored one.
            LedgerCorruptError, LedgerKeyError, LedgerVersionError: As for the constructor.
        """
        if not isinstance(read_only, bool):
            raise ValueError(f"read_only must be a bool; got {read_only!r}")
        self = cls.__new__(cls)
        self._setup(accountant, path, timeout, read_only=read_only)  # the one path check
        self._chain = Chain(resolve_key(key, key_file)[0])
        self._attach(adopt=True)
        return self

    def _setup(self, accountant: Accountant | None, path: Any, timeout: float, *,
               read_only: bool) -> None:
        if accountant is not None:
            if not isinstance(accountant, Accountant):
                raise ValueError("accountant must be a dpkd_audit Accountant instance (e.g. "
                                 f"PureAccountant()); got {type(accountant).__name__}")
            if not accountant.is_empty:
                raise ValueError("accountant must be empty (nothing composed yet); the ledger's "
                                 "charges are its only history")
        self._template: Accountant | None = None if accountant is None else accountant.copy()
        self._accountant: Accountant | None = None if accountant is None else accountant.copy()
        self._timeout = _validate.check_positive("timeout", timeout)
        self._path = None if path is None else _store.check_path(path)
        self._read_only = read_only
        self._lock = threading.Lock()
        self._charges: list[Charge] = []
        self._digests: list[str] = []  # the charges' digests, in order (for the witness)
        self._last_digest = self._genesis = ""
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._meta: dict[str, str] = {}
        self._file_id = (0, 0)
        self._pid = os.getpid()
        self._inherited: list[sqlite3.Connection] = []
        self._chain = Chain(None)
        self._epsilon = self._delta = math.nan

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

    @property
    def accountant(self) -> Accountant:
        """A fresh, empty copy of the ledger's accountant (with its configuration)."""
        return self._template.copy()  # type: ignore[union-attr]

    @property
    def identity(self) -> LedgerIdentity:
        """Budget and accountant description: what every open of the file checks."""
        return LedgerIdentity(epsilon=self._epsilon, delta=self._delta,
                              accountant=accountant_spec(self._template))  # type: ignore[arg-type]

    @property
    def keyed(self) -> bool:
        """Whether the file is protected by a keyed MAC (False in memory)."""
        return self._path is not None and self._chain.keyed

    @property
    def read_only(self) -> bool:
        """Whether this handle was opened with ``read_only=True``."""
        return self._read_only

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
            ValueError: For an empty label, or an event its own constructor refuses (one built
                around it, e.g. with ``object.__setattr__``) or that a file could not read back.
            LedgerError: If the file cannot be written or was altered; nothing was acknowledged.
        """
        return self.charge_all([(event, label)])[0]

    def charge_all(self, items: Sequence[tuple[_dp.DpEvent, str]]) -> list[Charge]:
        """Record every ``(event, label)`` of a plan, in order, or none of them.

        One write transaction: the budget is checked for the whole plan against the ledger as it
        is inside the transaction (charges other processes made since a :meth:`check` count), and
        a crash, a kill or a pause anywhere before the commit leaves none of the plan's charges
        (a sweep's plan is all-or-nothing, issue 33). Each charge is its own row of the chain,
        exactly as if made by :meth:`charge` one after the other.

        Returns:
            The recorded charges, in order.

        Raises:
            BudgetExceededError: If the plan as a whole would exceed the budget (nothing
                recorded).
            UnsupportedEventError: If the accountant cannot account for one of the events.
            ValueError: For an empty plan, an item that is not an ``(event, label)`` pair, an
                empty label, or an event its own constructor refuses (one built around it) or
                that a file could not read back; every item is checked before anything is
                written.
            LedgerError: If the file cannot be written or was altered; nothing was acknowledged.
        """
        events, labels, event_jsons = self._door(items)
        plan = events[0] if len(events) == 1 else _dp.ComposedDpEvent(events)
        plan_label = labels[0] if len(labels) == 1 else \
            f"{labels[0]} (and the {len(labels) - 1} other charges of its plan)"
        with self._lock:
            if self._closed:
                raise LedgerError("this ledger was closed; open the file again to charge")
            if self._path is None:
                trial = self._check(plan, plan_label)
                created, pid = time.time(), os.getpid()
                charges = [Charge(seq=len(self._charges) + i, label=label, event=event,
                                  created=created, pid=pid)
                           for i, (event, label) in enumerate(zip(events, labels, strict=True),
                                                              start=1)]
                self._accountant = trial
                self._charges.extend(charges)
                return charges
            if self._read_only:
                raise LedgerError(f"ledger {self._path} was opened read-only; open it with "
                                  "read_only=False to charge")
            conn = self._connection()
            created, pid = time.time(), os.getpid()
            shown = plan_label if len(plan_label) <= 60 else plan_label[:57] + "..."
            with _store.transaction(conn, self._path, write=True,
                                    doing=f"charging {shown!r} (not recorded)"):
                self._same_file(conn)
                head = self._read_head(conn)
                self._catch_up(conn, head)  # others' charges, composed before the budget check
                trial = self._check(plan, plan_label)
                seq, digest, genesis = head.count, head.digest, self._genesis
                digests = []
                for label, event_json in zip(labels, event_jsons, strict=True):
                    seq += 1
                    digest = self._chain.charge(digest, seq, label, event_json, created, pid)
                    digests.append(digest)
                    _store.write_charge(
                        conn, _store.Row(seq, label, event_json, created, pid, digest),
                        _store.Head(seq, digest, genesis, self._chain.head(seq, digest, genesis)))
            # committed: only now does the in-memory state advance
            first = head.count + 1
            charges = [Charge(seq=first + i, label=label, event=event, created=created, pid=pid)
                       for i, (event, label) in enumerate(zip(events, labels, strict=True))]
            self._accountant = trial
            self._charges.extend(charges)
            self._digests.extend(digests)
            self._last_digest = digest
            self._witness()
            return charges

    def _door(self, items: Any) -> tuple[list[_dp.DpEvent], list[str], list[str]]:
        """Check a whole plan before anything is written: its events, labels, serialisation.

        Every event is checked by its own constructors again (:func:`validate_event`, nested
        events included), since a frozen event can be built around them (issue 65: a negative
        epsilon charged lowered the spent budget, then the file refused to open); the rebuilt
        event is what is accounted for and stored. With a file, each event must also read back
        from its JSON as itself, or a later open would refuse the file.

        Returns:
            The checked events, labels, and the events' JSON (for a file; else empty).

        Raises:
            ValueError: Naming the plan's item (index and label) and what is wrong with it.
            UnsupportedEventError: If the accountant cannot account for one of the events.
        """
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise ValueError("items must be a sequence of (event, label) pairs; got "
                             f"{type(items).__name__}")
        items = list(items)
        if not items:
            raise ValueError("items must hold at least one (event, label) pair")
        events, labels, event_jsons = [], [], []
        for i, item in enumerate(items, start=1):
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise ValueError(f"items[{i - 1}] must be an (event, label) pair; got "
                                 f"{type(item).__name__} {item!r:.100}")
            labels.append(_store.check_label(item[1]))
            name = "event" if len(items) == 1 else f"event #{i} of the plan"
            name = f"{name} (label {labels[-1]!r:.60})"
            event = validate_event(item[0], name)
            self._template.copy().compose(event)  # type: ignore[union-attr] # names the event
            if self._path is not None:
                event_json = event_to_json(event)
                try:
                    stored = event_from_json(event_json)
                except (ValueError, TypeError, KeyError) as exc:
                    raise ValueError(f"{name} {type(event).__name__} cannot be stored in a "
                                     f"ledger file (it would not read back: {exc}); nothing "
                                     "was recorded") from exc
                if stored != event:
                    raise ValueError(f"{name} {event!r:.200} does not read back from its JSON "
                                     f"as itself (read {stored!r:.200}); nothing was recorded")
                event_jsons.append(event_json)
            events.append(event)
        return events, labels, event_jsons

    def check(self, events: Sequence[_dp.DpEvent], *, label: str) -> Epsilon:
        """Would charging ``events`` (in order) fit the budget? Records nothing.

        A pipeline calls this before any work starts, so that a run the budget cannot pay for
        fails at once rather than after an hour of training.

        Returns:
            The spent epsilon the ledger would report after charging all of ``events``.

        Raises:
            BudgetExceededError: If they would not fit (message as for :meth:`charge`).
            UnsupportedEventError: If the accountant cannot account for one of them.
            ValueError: If there are none, or one is refused by its own constructor.
        """
        events = [validate_event(event, f"events[{i}]") for i, event in enumerate(events)]
        if not events:
            raise ValueError("events must hold at least one DpEvent")
        composed = _dp.ComposedDpEvent(events) if len(events) > 1 else events[0]
        with self._lock:
            self._refresh()
            return self._check(composed, label).get_epsilon(self._delta)

    def spent(self) -> SpentBudget:
        """The budget spent so far (re-read from the file first, if any)."""
        with self._lock:
            self._refresh()
            eps = self._accountant.get_epsilon(self._delta)  # type: ignore[union-attr]
            return SpentBudget(epsilon=eps, delta=self._delta, budget_epsilon=self._epsilon,
                               budget_delta=self._delta, charges=len(self._charges))

    def charges(self) -> list[Charge]:
        """All accepted charges, oldest first (re-read from the file first, if any)."""
        with self._lock:
            self._refresh()
            return list(self._charges)

    def pragmas(self) -> dict[str, Any]:
        """The SQLite settings of the live connection, read back (empty in memory).

        Keys: ``journal_mode``, ``synchronous`` (3 = EXTRA), ``secure_delete``,
        ``cell_size_check``, ``trusted_schema``, ``busy_timeout`` (ms), ``application_id``.
        """
        with self._lock:
            if self._path is None or self._closed:
                return {}
            conn = self._connection()
            try:
                return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in (
                    "journal_mode", "synchronous", "secure_delete", "cell_size_check",
                    "trusted_schema", "busy_timeout", "application_id")}
            except sqlite3.Error as exc:
                raise _store.as_ledger_error(exc, self._path, "reading settings") from exc

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

    # ------------------------------------------------------------------ budget
    def _check(self, event: _dp.DpEvent, label: str) -> Accountant:
        trial = self._accountant.copy().compose(event)  # type: ignore[union-attr]
        after = trial.get_epsilon(self._delta)
        if math.isnan(after) or after > self._epsilon * (1.0 + BUDGET_RTOL):
            before = self._accountant.get_epsilon(self._delta)  # type: ignore[union-attr]
            raise BudgetExceededError(
                f"charge {label!r} refused: {type(event).__name__} would bring epsilon from "
                f"{float(before):.6g} to {float(after):.6g} ({after.method}) at delta="
                f"{self._delta:g}, over the budget epsilon={self._epsilon:g}; nothing was "
                f"recorded")
        return trial

    # ------------------------------------------------------------------ file: open
    def _corrupt(self, what: str) -> LedgerCorruptError:
        return LedgerCorruptError(f"ledger {self._path}: {what}; refusing to use it (the file "
                                  "was damaged or altered; it is never reset)")

    def _attach(self, *, adopt: bool) -> None:
        path: Path = self._path  # type: ignore[assignment]
        if not _store.preflight(path):  # the one look before SQLite touches the file
            if adopt:
                raise LedgerAccessError(f"no ledger at {path} (Ledger.open never creates one; "
                                        "Ledger(epsilon=..., path=...) does)")
            check_witness(path, self._chain, exists=False)  # a keyed ledger here is never reset
            self._create_file(path)
        _store.check_header(path)
        if not self._read_only and not os.access(path.parent, os.W_OK | os.X_OK):
            raise LedgerAccessError(f"ledger {path}: its directory {path.parent} is not writable "
                                    "(SQLite creates its journal there); Ledger.open(path, "
                                    "read_only=True) can still read it")
        conn = _store.connect(path, timeout=self._timeout, read_only=self._read_only)
        try:
            with _store.transaction(conn, path, write=not self._read_only,
                                    doing="opening the ledger"):
                rows = self._load(conn, adopt=adopt)
                check_witness(path, self._chain, exists=True, ledger_id=self._meta["ledger_id"],
                              digests=[row.digest for row in rows], file_id=self._file_id)
            self._apply(rows)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        if not self._read_only:
            self._witness()

    def _witness(self) -> None:
        """Record this keyed ledger's state outside the file (:mod:`.witness`)."""
        write_witness(self._path, self._chain,  # type: ignore[arg-type]
                      ledger_id=self._meta["ledger_id"], count=len(self._charges),
                      digest=self._last_digest, history=self._digests, file_id=self._file_id,
                      timeout=self._timeout)

    def _create_file(self, path: Path) -> None:
        meta = {
            "magic": _store.MAGIC, "schema": str(_store.SCHEMA_VERSION),
            "epsilon": repr(self._epsilon), "delta": repr(self._delta),
            "accountant": canonical_json(accountant_spec(self._template)),  # type: ignore[arg-type]
            "neighboring_relation": self._template.neighboring_relation.name,  # type: ignore[union-attr]
            "mac": self._chain.algorithm, "key_check": self._chain.key_check(),
            "ledger_id": secrets.token_hex(16), "created": repr(time.time()),
        }
        genesis = self._chain.genesis(meta, _store.SCHEMA)
        _store.create(path, meta, _store.Head(0, genesis, genesis,
                                              self._chain.head(0, genesis, genesis)))

    def _load(self, conn: sqlite3.Connection, *, adopt: bool) -> list[_store.Row]:
        """Verify the whole file (schema, key, chain, head), then its identity; return its rows."""
        path = self._path
        version = _store.schema_version(conn, path)  # type: ignore[arg-type]
        if version != _store.SCHEMA_VERSION:
            raise LedgerVersionError(
                f"ledger {path} was written by an older dpkd-audit (schema {version}), which "
                "stored neither its accountant's configuration nor a head; migrate it once with "
                "Ledger.migrate(path, accountant=<the accountant it was used with>) (a backup is "
                "kept), while no process uses it")
        meta = _store.read_meta(conn, path)  # type: ignore[arg-type]
        if meta["magic"] != _store.MAGIC or meta["schema"] != str(_store.SCHEMA_VERSION):
            raise self._corrupt(f"unknown ledger format {meta['magic']!r} schema "
                                f"{meta['schema']!r}")
        self._check_key(meta)
        rows = _store.read_rows(conn, path, after=None)  # type: ignore[arg-type]
        head = self._read_head(conn)
        genesis = self._chain.genesis(meta, _store.SCHEMA)
        if not Chain.equal(genesis, head.genesis):
            raise self._corrupt("its metadata (budget, accountant, relation, key settings, "
                                "ledger id) does not match the digest recorded in its head")
        self._verify(rows, genesis, 0, head)
        self._meta = meta
        self._genesis = self._last_digest = genesis
        self._file_id = _store.file_id(path)  # type: ignore[arg-type]
        self._adopt_identity(meta, adopt=adopt)
        return rows

    def _check_key(self, meta: dict[str, str]) -> None:
        path, stored = self._path, meta["mac"]
        if stored not in ("sha256", "hmac-sha256"):
            raise self._corrupt(f"unknown MAC algorithm {stored!r}")
        if stored == "hmac-sha256" and not self._chain.keyed:
            raise LedgerKeyError(
                f"ledger {path} is protected by a key (HMAC-SHA256) and no key was given: pass "
                "key= or key_file=, or set DPKD_LEDGER_KEY or DPKD_LEDGER_KEY_FILE")
        if stored == "sha256" and self._chain.keyed:
            raise LedgerKeyError(
                f"ledger {path} has no MAC (created without a key, or its MAC was stripped), but "
                "a key was given: refusing it, since a file without a MAC cannot show it was not "
                "rewritten (unset the key to open an unkeyed ledger)")
        if not Chain.equal(meta["key_check"], self._chain.key_check()):
            raise LedgerKeyError(f"ledger {path}: the key given is not the key the file was "
                                 "created with (or its key check was altered)")

    def _adopt_identity(self, meta: dict[str, str], *, adopt: bool) -> None:
        try:
            epsilon = _validate.check_positive("epsilon", float(meta["epsilon"]), allow_inf=True)
            delta = _validate.check_delta(float(meta["delta"]))
            spec = parse_spec(meta["accountant"])
            if spec.get("neighboring_relation") != meta["neighboring_relation"]:
                raise ValueError("neighbouring relation differs from the accountant's")
        except (ValueError, AttributeError) as exc:
            raise self._corrupt(f"its identity (budget, accountant) is unreadable: {exc}") \
                from exc
        stored = LedgerIdentity(epsilon=epsilon, delta=delta, accountant=spec)
        if adopt and self._template is None:
            try:
                self._template = accountant_from_spec(spec)
            except ValueError as exc:
                raise LedgerMismatchError(f"ledger {self._path}: {exc}") from exc
            self._accountant = self._template.copy()
            self._epsilon, self._delta = epsilon, delta
            return
        given = LedgerIdentity(
            epsilon=epsilon if adopt else self._epsilon, delta=delta if adopt else self._delta,
            accountant=accountant_spec(self._template))  # type: ignore[arg-type]
        differences = stored.differences(given)
        if differences:
            raise LedgerMismatchError(
                f"ledger {self._path} holds a ledger for {stored.describe()}; asked for "
                f"{given.describe()} (stored != given: {'; '.join(differences)}). Refusing: "
                "another budget or accountant would report another spent epsilon for the same "
                "charges. Ledger.open(path) adopts the stored budget and accountant")
        self._epsilon, self._delta = epsilon, delta

    # ------------------------------------------------------------------ file: chain
    def _read_head(self, conn: sqlite3.Connection) -> _store.Head:
        head = _store.read_head(conn, self._path)  # type: ignore[arg-type]
        if not Chain.equal(head.tag, self._chain.head(head.count, head.digest, head.genesis)):
            raise self._corrupt(f"the head (count {head.count}) does not match its tag")
        if self._genesis and not Chain.equal(head.genesis, self._genesis):
            raise self._corrupt("the head changed its metadata digest while this ledger had it "
                                "open")
        return head

    def _verify(self, rows: list[_store.Row], digest: str, known: int,
                head: _store.Head) -> None:
        """Check that ``rows`` extend the chain from ``digest`` (after ``known``) to ``head``."""
        if head.count < known:
            raise self._corrupt(f"it now holds {head.count} charges, fewer than the {known} this "
                                "handle already read (charges were deleted, or an older copy was "
                                "put back)")
        for i, row in enumerate(rows, start=known + 1):
            if row.seq != i:
                raise self._corrupt(f"charge #{i} is missing (found #{row.seq} in its place)")
            digest = self._chain.charge(digest, row.seq, row.label, row.event, row.created,
                                        row.pid)
            if not Chain.equal(digest, row.digest):
                raise self._corrupt(f"charge #{row.seq} does not match the chain of digests")
        total = known + len(rows)
        if total != head.count or not Chain.equal(digest, head.digest):
            raise self._corrupt(
                f"the head records {head.count} charges but the file holds {total} (or its last "
                "digest differs): rows were deleted, added or the head was altered")

    def _apply(self, rows: list[_store.Row]) -> None:
        """Compose verified rows into the accountant; only then advance the in-memory state."""
        if not rows:
            return
        accountant = self._accountant.copy()  # type: ignore[union-attr]
        charges = []
        for row in rows:
            try:
                event = event_from_json(row.event)
                accountant.compose(event)
            except Exception as exc:  # any decoding or accounting failure is damage
                raise self._corrupt(f"charge #{row.seq} holds an event this ledger cannot "
                                    f"account for ({type(exc).__name__}: {exc})") from exc
            charges.append(Charge(seq=row.seq, label=row.label, event=event, created=row.created,
                                  pid=row.pid))
        self._accountant = accountant
        self._charges.extend(charges)
        self._digests.extend(row.digest for row in rows)
        self._last_digest = rows[-1].digest

    def _catch_up(self, conn: sqlite3.Connection, head: _store.Head) -> None:
        """Re-read, verify and compose the charges committed since this handle last looked."""
        known = len(self._charges)
        rows = [] if head.count == known else _store.read_rows(
            conn, self._path, after=known)  # type: ignore[arg-type]
        self._verify(rows, self._last_digest, known, head)
        self._apply(rows)

    def _same_file(self, conn: sqlite3.Connection) -> None:
        """Refuse to go on if ``path`` was replaced or the metadata changed while open."""
        if _store.file_id(self._path) != self._file_id:  # type: ignore[arg-type]
            raise self._corrupt("the file at this path was replaced while this ledger had it "
                                "open (its charges so far are in the file it opened)")
        if _store.read_meta(conn, self._path) != self._meta:  # type: ignore[arg-type]
            raise self._corrupt("its metadata changed while this ledger had it open")

    def _connection(self) -> sqlite3.Connection:
        """The live connection (a new one after ``fork``: SQLite connections must not cross)."""
        if self._conn is None:
            raise LedgerError(f"ledger {self._path} was closed; open the file again")
        if os.getpid() != self._pid:
            self._inherited.append(self._conn)  # never used (nor closed) in this process
            self._conn = _store.connect(self._path, timeout=self._timeout,  # type: ignore[arg-type]
                                        read_only=self._read_only)
            self._pid = os.getpid()
        return self._conn

    def _refresh(self) -> None:
        if self._path is None or self._closed:
            return
        conn = self._connection()
        with _store.transaction(conn, self._path, write=False, doing="reading the ledger"):
            self._same_file(conn)
            self._catch_up(conn, self._read_head(conn))

    # ------------------------------------------------------------------ migration
    @classmethod
    def migrate(cls, path: str | os.PathLike, *, accountant: Accountant,
                timeout: float = 60.0, key: bytes | str | None = None,
                key_file: str | os.PathLike | None = None) -> Path:
        """Rewrite a schema-1 ledger (dpkd-audit before issue 10) in the current format.

        The old file's chain is verified and its stored accountant *name* must match
        ``accountant``; the configuration (orders, relation...) was never stored, so the caller
        states it. Run it while no process uses the ledger. Implemented in
        :mod:`dpkd_audit.ledger.migrate`.

        Returns:
            The path of the backup of the old file (``PATH.schema1.bak``).
        """
        from dpkd_audit.ledger.migrate import migrate_schema1

        return migrate_schema1(cls, _store.check_path(path), accountant=accountant, timeout=timeout,
                               key=key, key_file=key_file)

