"""One-time migration of schema-1 ledgers (dpkd-audit before issue 10) to the current format.

Schema 1 stored the budget and only the accountant's class *name*, and chained the rows
(``sha256(prev | seq | label | event)``) without a head. Opening such a file now raises
:class:`~dpkd_audit.errors.LedgerVersionError`; :func:`migrate_schema1` (``Ledger.migrate``)
verifies the old chain, rebuilds the ledger with the accountant the caller states (its class
name must match the stored one), keeps the old file as ``PATH.schema1.bak`` and puts the new
file in place atomically, while holding the old file's write lock.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Protocol

from dpkd_audit.accountants.base import Accountant
from dpkd_audit.errors import (
    LedgerAccessError,
    LedgerCorruptError,
    LedgerMismatchError,
    LedgerVersionError,
)
from dpkd_audit.events import event_from_json
from dpkd_audit.ledger import store as _store
from dpkd_audit.ledger.identity import BUDGET_RTOL

__all__ = ["migrate_schema1"]


class _LedgerClass(Protocol):
    """What :func:`migrate_schema1` needs of the ledger class.

    ``Ledger.migrate`` hands over ``cls``, so this module does not import the one that calls it.
    """

    def __call__(self, **kwargs: Any) -> Any: ...

    def open(self, path: Any, **kwargs: Any) -> Any: ...


_V1_GENESIS = "0" * 64


def _v1_digest(prev: str, seq: int, label: str, event_json: str) -> str:
    return hashlib.sha256(f"{prev}\x1f{seq}\x1f{label}\x1f{event_json}".encode()).hexdigest()


def migrate_schema1(cls: _LedgerClass, path: Path, *, accountant: Accountant, timeout: float,
                    key: bytes | str | None, key_file: str | os.PathLike | None) -> Path:
    """Rewrite the schema-1 ledger at ``path`` in the current format; return the backup's path.

    Raises:
        ValueError: If ``accountant`` is not an empty Accountant.
        LedgerVersionError: If ``path`` is not a schema-1 ledger.
        LedgerMismatchError: If ``accountant``'s class is not the stored one, or the old charges
            exceed the budget under it.
        LedgerCorruptError: If the old file fails its chain.
        LedgerAccessError: If the file cannot be written, or the backup already exists.
    """
    if not isinstance(accountant, Accountant) or not accountant.is_empty:
        raise ValueError("accountant must be an empty dpkd_audit Accountant (the one the ledger "
                         f"was used with); got {accountant!r}")
    if not _store.preflight(path):
        raise LedgerAccessError(f"no ledger at {path}")
    _store.check_header(path)
    backup = Path(f"{path}.schema1.bak")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.migrate.tmp")
    conn = _store.connect(path, timeout=timeout, read_only=False)
    try:
        with _store.transaction(conn, path, write=True, doing="migrating the ledger"):
            version = _store.schema_version(conn, path)
            if version != 1:
                raise LedgerVersionError(f"ledger {path} is already in the current format "
                                         f"(schema {version}); nothing to migrate")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            try:
                epsilon, delta = float(meta["epsilon"]), float(meta["delta"])
                stored_name = meta["accountant"]
                if not (epsilon > 0 and 0 <= delta < 1):  # NaN fails both
                    raise ValueError(f"budget epsilon={epsilon!r}, delta={delta!r}")
            except (KeyError, ValueError, TypeError) as exc:
                raise LedgerCorruptError(f"ledger {path}: schema-1 metadata is damaged ({exc}); "
                                         "refusing to migrate it") from exc
            if stored_name != type(accountant).__name__:
                raise LedgerMismatchError(
                    f"ledger {path} was used with {stored_name}; accountant= is "
                    f"{type(accountant).__name__}: give the accountant it was used with")
            rows = _store.read_rows(conn, path, after=None)
            digest = _V1_GENESIS
            for i, row in enumerate(rows, start=1):
                digest = _v1_digest(digest, row.seq, row.label, row.event)
                if row.seq != i or digest != row.digest:
                    raise LedgerCorruptError(f"ledger {path}: charge #{row.seq} does not match "
                                             "the schema-1 chain; refusing to migrate it")
                try:
                    event_from_json(row.event)
                except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                    # a crafted event (nested 20,000 deep, wrong types): damage, not a traceback
                    raise LedgerCorruptError(
                        f"ledger {path}: charge #{row.seq} holds an event that cannot be read "
                        f"({type(exc).__name__}); refusing to migrate it") from None
            if backup.exists():
                raise LedgerAccessError(f"ledger {path}: the backup {backup} already exists; "
                                        "move it away first")
            tmp.unlink(missing_ok=True)
            new = cls(epsilon=epsilon, delta=delta, accountant=accountant, path=tmp,
                      timeout=timeout, key=key, key_file=key_file)
            chain, new_conn = new._chain, new._connection()
            with _store.transaction(new_conn, tmp, write=True, doing="writing the migrated copy"):
                head = new._read_head(new_conn)
                prev = head.digest
                for row in rows:
                    prev = chain.charge(prev, row.seq, row.label, row.event, row.created, row.pid)
                    _store.write_charge(new_conn, row._replace(digest=prev), _store.Head(
                        row.seq, prev, head.genesis, chain.head(row.seq, prev, head.genesis)))
            new.close()
            check = cls.open(tmp, accountant=accountant, timeout=timeout, key=key,
                             key_file=key_file)
            spent = check.spent()
            check.close()
            if len(check.charges()) != len(rows) or not (
                    float(spent.epsilon) <= epsilon * (1 + BUDGET_RTOL)):
                raise LedgerMismatchError(
                    f"ledger {path}: under {type(accountant).__name__} its {len(rows)} charges "
                    f"spend epsilon={float(spent.epsilon):.6g} > budget {epsilon:g}; is it the "
                    "accountant (and configuration) the ledger was used with?")
            os.link(path, backup)
            os.replace(tmp, path)
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except OSError as exc:
        raise _store.as_ledger_error(exc, path, "migrating the ledger") from exc
    finally:
        conn.close()
        tmp.unlink(missing_ok=True)
    return backup
