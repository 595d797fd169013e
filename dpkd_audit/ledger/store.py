"""The ledger's SQLite file: checks before opening, connections, schema, rows, errors.

Durability and crash recovery:

- rollback-journal mode ``DELETE`` with ``synchronous=EXTRA`` (FULL, plus a sync of the
  directory after the journal is unlinked, which is what makes a commit in DELETE mode durable
  across power loss; SQLite documentation, "PRAGMA synchronous"). A committed charge is in the
  main file itself, so copying the one file copies every charge (no ``-wal`` file to forget);
- every connection is opened read-write where the operating system allows it, so a *hot
  journal* left by a writer killed mid-transaction is rolled back by the next reader instead of
  failing with "attempt to write a readonly database"; only a process that may not write the
  file or its directory gets a :class:`~dpkd_audit.errors.LedgerAccessError` saying so;
- ``secure_delete`` (overwritten content is zeroed), ``cell_size_check`` (more corruption
  detected while reading) and ``trusted_schema=OFF`` on every connection.

Every ``sqlite3`` error is turned into a :class:`~dpkd_audit.errors.LedgerError` naming the file
and the cause (:func:`as_ledger_error`). Paths that are not regular files (a FIFO would block
``open`` forever, a directory or device is never a ledger) are refused before anything opens
them.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from dpkd_audit.errors import (
    LedgerAccessError,
    LedgerCorruptError,
    LedgerError,
)

__all__ = [
    "APPLICATION_ID",
    "MAGIC",
    "META_KEYS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SYNCHRONOUS_EXTRA",
    "Head",
    "Row",
    "as_ledger_error",
    "check_header",
    "check_label",
    "check_path",
    "connect",
    "create",
    "file_id",
    "is_open_ledger",
    "preflight",
    "read_head",
    "read_meta",
    "read_rows",
    "schema_version",
    "transaction",
    "write_charge",
]

MAGIC = "dpkd-audit-ledger"
SCHEMA_VERSION = 2
APPLICATION_ID = 0x64706B64  # "dpkd"
SYNCHRONOUS_EXTRA = 3
_SQLITE_HEADER = b"SQLite format 3\x00"

_TABLES = {
    "charges": "CREATE TABLE charges (seq INTEGER PRIMARY KEY, label TEXT NOT NULL, "
               "event TEXT NOT NULL, created REAL NOT NULL, pid INTEGER NOT NULL, "
               "digest TEXT NOT NULL)",
    "head": "CREATE TABLE head (id INTEGER PRIMARY KEY CHECK (id = 1), count INTEGER NOT NULL, "
            "digest TEXT NOT NULL, genesis TEXT NOT NULL, tag TEXT NOT NULL)",
    "meta": "CREATE TABLE meta (key TEXT NOT NULL, value TEXT NOT NULL)",
}
#: The exact schema (sqlite_master must hold these three tables and nothing else).
SCHEMA = "\n".join(_TABLES[name] for name in sorted(_TABLES))
#: The metadata fields of a schema-2 ledger (all covered by the genesis digest).
META_KEYS = frozenset({"magic", "schema", "epsilon", "delta", "accountant",
                       "neighboring_relation", "mac", "key_check", "ledger_id", "created"})

# SQLite primary result codes (https://www.sqlite.org/rescode.html)
_PERM, _BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN = 3, 5, 6, 8, 10, 11, 13, 14
_CONSTRAINT, _MISMATCH, _AUTH, _FORMAT, _NOTADB = 19, 20, 23, 24, 26
_READONLY_ROLLBACK = _READONLY | (3 << 8)


class Head(NamedTuple):
    """The head row: number of charges, last digest, genesis digest (of the metadata), tag."""

    count: int
    digest: str
    genesis: str
    tag: str


class Row(NamedTuple):
    """One stored charge, as read (types checked)."""

    seq: int
    label: str
    event: str
    created: float
    pid: int
    digest: str


def check_path(path: Any) -> Path:
    """``path`` as a Path; a ValueError naming ``path`` if it is not a non-empty path."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"path must be a non-empty file path (str or os.PathLike); got {path!r}")
    return Path(path)


def check_label(label: Any) -> str:
    """A charge label: non-empty text without NUL, encodable as UTF-8 (else ValueError)."""
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"label must be a non-empty string; got {label!r}")
    if "\x00" in label:
        raise ValueError(f"label must not contain NUL characters; got {label!r}")
    try:
        label.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"label must be valid Unicode text (encodable as UTF-8); got "
                         f"{label!r}") from exc
    return label


def _strict_text(data: bytes) -> str:
    return data.decode("utf-8")  # UnicodeDecodeError -> reported as damage by transaction()


def as_ledger_error(exc: BaseException, path: Path, doing: str) -> LedgerError:
    """Translate an ``sqlite3`` (or OS) error into a ledger error naming ``path`` and the cause.

    Args:
        exc: The error raised.
        path: The ledger file.
        doing: What was being done, e.g. ``"opening the ledger"`` or ``"charging 'x'"``.
    """
    if isinstance(exc, LedgerError):
        return exc
    if isinstance(exc, UnicodeDecodeError):
        return LedgerCorruptError(f"ledger {path}: {doing}: the file holds text that is not "
                                  f"UTF-8 ({exc}), so it was damaged or altered; refusing it")
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    raw = f"[{name}: {exc}]"
    primary = -1 if code is None else code & 0xFF
    where = f"ledger {path}: {doing}"
    if primary in (_CORRUPT, _NOTADB, _FORMAT, _CONSTRAINT, _MISMATCH):
        return LedgerCorruptError(f"{where}: the file is damaged or was altered {raw}; "
                                  "refusing to use it (it is never reset)")
    if code == _READONLY_ROLLBACK:
        return LedgerAccessError(
            f"{where}: a process that crashed mid-transaction left a hot journal "
            f"({path}-journal) that only a process allowed to write the file and its directory "
            f"can roll back {raw}; open it once with write access (nothing is lost: the "
            "unfinished charge was never acknowledged)")
    if primary == _READONLY:
        return LedgerAccessError(
            f"{where}: the file, its directory or its file system is read-only here {raw}; "
            "Ledger.open(path, read_only=True) can still read it")
    if primary == _FULL:
        return LedgerAccessError(f"{where}: the disk (or file system, or file-size limit) is "
                                 f"full {raw}; nothing was written")
    if primary in (_BUSY, _LOCKED):
        return LedgerAccessError(f"{where}: another process held the file's lock for longer "
                                 f"than the timeout {raw}")
    if primary in (_CANTOPEN, _PERM, _AUTH):
        return LedgerAccessError(f"{where}: cannot open the file or create its journal "
                                 f"({path}-journal) {raw}; check the directory and permissions")
    if primary == _IOERR:
        return LedgerAccessError(f"{where}: input/output error {raw}")
    if isinstance(exc, OSError):
        return LedgerAccessError(f"{where}: {exc}")
    if isinstance(exc, sqlite3.OperationalError) and primary in (-1, 1):
        # "no such table/column", "malformed schema"...: the structure is not what we wrote
        return LedgerCorruptError(f"{where}: the file's structure is damaged or was altered "
                                  f"{raw}; refusing to use it (it is never reset)")
    return LedgerError(f"{where}: {raw}")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _refuse_special(path: Path, mode: int, what: str = "") -> None:
    if not stat.S_ISREG(mode):
        raise LedgerAccessError(
            f"ledger {path}: {what or 'the path'} is {_kind(mode)}, not a regular file; "
            "refusing to open it (a ledger is always a regular file)")


def _check_new_path(path: Path) -> None:
    if os.path.islink(path):
        raise LedgerAccessError(f"ledger {path}: the path is a symbolic link to a missing file; "
                                "refusing to create a ledger through it")
    parent = path.parent
    try:
        parent_mode = os.stat(parent).st_mode
    except FileNotFoundError:
        raise LedgerAccessError(f"ledger {path}: the directory {parent} does not exist") from None
    except OSError as exc:
        raise LedgerAccessError(f"ledger {path}: cannot examine its directory: {exc}") from exc
    if not stat.S_ISDIR(parent_mode):
        raise LedgerAccessError(f"ledger {path}: {parent} is not a directory")


def preflight(path: Path) -> bool:
    """Check ``path`` before SQLite touches it; True if a file exists there.

    Raises:
        LedgerAccessError: If the path or a journal beside it is not a regular file (a FIFO,
            directory, device, socket), if its directory is missing, or it cannot be examined.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:
        raise LedgerAccessError(f"ledger {path}: a component of the path is not a directory") \
            from None
    except OSError as exc:
        raise LedgerAccessError(f"ledger {path}: cannot examine the path: {exc}") from exc
    if mode is None:
        _check_new_path(path)
        return False
    _refuse_special(path, mode)
    for suffix in ("-journal", "-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        try:
            side_mode = os.stat(side).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise LedgerAccessError(f"ledger {path}: cannot examine {side}: {exc}") from exc
        _refuse_special(path, side_mode, f"its journal {side}")
        if suffix != "-journal":
            # a ledger is never in WAL mode (journal_mode=DELETE): a -wal / -shm beside it
            # comes from elsewhere, and SQLite would merge a -wal into the file on open, even
            # read-only (issue 33). Refused by name; nothing is written.
            raise LedgerCorruptError(
                f"ledger {path}: a {suffix} file lies beside it ({side}), which a ledger never "
                "writes (it keeps a rollback journal); it may come from another SQLite "
                "database, and opening would merge it into the ledger. Move it away (keep a "
                "copy) and open the ledger again; the ledger was not touched")
    return True


#: Read-only descriptors of the ledger files this process has read a header from, by
#: (device, inode), kept open for the life of the process (see :func:`_header_fd`).
_HEADER_FDS: dict[tuple[int, int], int] = {}
#: Descriptors of a file that was replaced between the stat and the open: never closed either.
_SPARE_FDS: list[int] = []
_HEADER_LOCK = threading.Lock()


def is_open_ledger(path: str | os.PathLike) -> bool:
    """Whether ``path`` is (a link to) a ledger file this process has open (by device, inode).

    Such a file must never be opened and closed outside SQLite's connection (see
    :func:`_header_fd`): a key file or a witness that is the ledger itself is refused on this
    test, before any descriptor of it exists.
    """
    try:
        st = os.stat(path)
    except OSError:
        return False
    with _HEADER_LOCK:
        return (st.st_dev, st.st_ino) in _HEADER_FDS


def _header_fd(path: Path) -> int:
    """A read-only descriptor of the ledger file, opened once per file and never closed.

    POSIX record locks, which SQLite takes on the ledger file, belong to the process and the
    file: closing *any* descriptor of the file releases all of them, including the locks a
    connection in another thread of this process holds in the middle of a charge (SQLite's
    documentation, "How To Corrupt An SQLite Database File", 2.2). An ``os.open`` + ``os.close``
    of the ledger to read its header therefore let another process write at the same time
    (issue 33: lost acknowledged charges, a malformed file). The descriptor is opened once per
    (device, inode) and kept for the life of the process, as SQLite does with its own; one
    descriptor per distinct ledger file.

    Raises:
        LedgerAccessError: If the file cannot be opened or is not a regular file.
    """
    with _HEADER_LOCK:
        try:
            st = os.stat(path)
            _refuse_special(path, st.st_mode)
            cached = _HEADER_FDS.get((st.st_dev, st.st_ino))
            if cached is not None:
                return cached
            _prune_deleted()
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            st = os.fstat(fd)
        except OSError as exc:
            raise LedgerAccessError(f"ledger {path}: cannot read the file: {exc}") from exc
        if not stat.S_ISREG(st.st_mode):  # swapped for a FIFO or a device after the stat: not a
            os.close(fd)                  # ledger, so no SQLite lock can be on it
            _refuse_special(path, st.st_mode)
        key = (st.st_dev, st.st_ino)
        if key in _HEADER_FDS:  # replaced and back between the stat and the open: keep both
            _SPARE_FDS.append(fd)
            return _HEADER_FDS[key]
        _HEADER_FDS[key] = fd
        return fd


def _closed_if_deleted(fd: int) -> bool:
    """Close ``fd`` if its file was deleted (no link left); whether it was closed."""
    try:
        gone = os.fstat(fd).st_nlink == 0
    except OSError:
        gone = True
    if gone:
        try:
            os.close(fd)
        except OSError:
            pass
    return gone


def _prune_deleted() -> None:
    """Close the kept descriptors of ledger files that were deleted (caller holds the lock).

    A deleted file (no link left) can no longer be opened by any process by its path, so no
    charge to it can be lost by dropping its locks; this bounds the descriptors kept by a
    process that creates many short-lived ledgers (tests, temporary folders).
    """
    for key, fd in list(_HEADER_FDS.items()):
        if _closed_if_deleted(fd):
            del _HEADER_FDS[key]
    _SPARE_FDS[:] = [fd for fd in _SPARE_FDS if not _closed_if_deleted(fd)]


def check_header(path: Path) -> None:
    """Refuse a file whose first 100 bytes are not a dpkd-audit ledger's SQLite header.

    Read through :func:`_header_fd` (never closed: closing a descriptor of the ledger would drop
    the SQLite locks of every connection of this process), with ``pread``; the type is checked
    on the open descriptor, so a FIFO swapped in after :func:`preflight` cannot block.

    Raises:
        LedgerCorruptError: If the header is not SQLite's, or not a ledger's.
        LedgerAccessError: If the file cannot be read or is not a regular file.
    """
    fd = _header_fd(path)
    try:
        data = b""
        while len(data) < 100:
            chunk = os.pread(fd, 100 - len(data), len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise LedgerAccessError(f"ledger {path}: cannot read the file: {exc}") from exc
    refuse = "so it is not a dpkd-audit ledger (ledgers are created atomically); refusing to use " \
             "or reset it"
    if not data.startswith(_SQLITE_HEADER):
        what = "empty" if not data else "not an SQLite database"
        raise LedgerCorruptError(f"ledger {path}: the file exists but is {what}, {refuse}")
    app_id = int.from_bytes(data[68:72], "big") if len(data) == 100 else None
    if app_id != APPLICATION_ID:
        shown = "missing" if app_id is None else f"{app_id:#x}"
        raise LedgerCorruptError(f"ledger {path}: an SQLite file but not a dpkd-audit ledger "
                                 f"(application_id={shown}); refusing to use or reset it")
    problems = []
    if data[18] not in (1, 2) or data[19] not in (1, 2):
        problems.append(f"file format versions {data[18]}/{data[19]}")
    if data[21:24] != b"\x40\x20\x20":
        problems.append("payload fractions")
    if int.from_bytes(data[56:60], "big") != 1:
        problems.append(f"text encoding {int.from_bytes(data[56:60], 'big')} (not UTF-8)")
    if not 1 <= int.from_bytes(data[44:48], "big") <= 4:
        problems.append("schema format number")
    if problems:
        raise LedgerCorruptError(f"ledger {path}: damaged SQLite header ({', '.join(problems)});"
                                 " refusing to use it (it is never reset)")


def _uri(path: Path) -> str:
    return Path(os.path.abspath(path)).as_uri() + "?mode=rw"


def connect(path: Path, *, timeout: float, read_only: bool) -> sqlite3.Connection:
    """Open an existing ledger file (never creates one) with the ledger's pragmas.

    The connection is read-write wherever the operating system allows it, even for a read-only
    ledger, so that it can roll back a hot journal left by a crashed writer.

    Raises:
        LedgerError: As :func:`as_ledger_error`.
    """
    conn = None
    try:
        conn = sqlite3.connect(_uri(path), uri=True, timeout=timeout, isolation_level=None,
                               check_same_thread=False)
        conn.text_factory = _strict_text
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.execute("PRAGMA cell_size_check=ON")
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute(f"PRAGMA synchronous={SYNCHRONOUS_EXTRA}")
        if not read_only:
            mode = conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
            if str(mode).lower() != "delete":
                raise LedgerAccessError(f"ledger {path}: cannot switch to the rollback journal "
                                        f"(journal_mode is {mode!r}); is another program using "
                                        "it in WAL mode?")
        return conn
    except (sqlite3.Error, UnicodeDecodeError, LedgerError) as exc:
        if conn is not None:
            conn.close()
        raise as_ledger_error(exc, path, "opening the ledger") from exc


@contextmanager
def transaction(conn: sqlite3.Connection, path: Path, *, write: bool,
                doing: str) -> Iterator[None]:
    """A transaction (``BEGIN IMMEDIATE`` to write); rolled back on any error, errors translated.

    A failure that SQLite already rolled back (a full disk does) is reported as itself, not as
    "cannot rollback - no transaction is active".
    """
    try:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise as_ledger_error(exc, path, doing) from exc
    try:
        yield
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error as again:  # keep the first cause; say the rollback failed too
                exc.add_note(f"rolling back failed as well: {again}")
        if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)):
            raise as_ledger_error(exc, path, doing) from exc
        raise


def file_id(path: Path) -> tuple[int, int]:
    """``(device, inode)`` of the file now at ``path``.

    Raises:
        LedgerCorruptError: If nothing is there any more.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise LedgerCorruptError(f"ledger {path}: the file was deleted or moved while this "
                                 f"ledger had it open ({exc}); refusing to go on") from exc
    return (st.st_dev, st.st_ino)


def schema_version(conn: sqlite3.Connection, path: Path) -> int:
    """Check the exact schema; return 2, or the version a recognised older ledger says it is.

    Raises:
        LedgerCorruptError: If the tables are not a dpkd-audit ledger's (altered, extra objects
            such as triggers or indexes, or a changed column).
    """
    objects = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall()
    if objects == [("table", name, name, _TABLES[name]) for name in sorted(_TABLES)]:
        return SCHEMA_VERSION
    names = {row[1] for row in objects}
    if {"meta", "charges"} <= names and "head" not in names:
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except (sqlite3.Error, ValueError):
            meta = {}
        if meta.get("magic") == MAGIC and meta.get("schema") == "1":
            return 1
    raise LedgerCorruptError(
        f"ledger {path}: its SQL schema is not a dpkd-audit ledger's (found "
        f"{[(row[0], row[1]) for row in objects]}; a table, column or constraint was altered or "
        "added); refusing to use it (it is never reset)")


def read_meta(conn: sqlite3.Connection, path: Path) -> dict[str, str]:
    """All metadata fields (exactly :data:`META_KEYS`, each once, all text).

    Raises:
        LedgerCorruptError: If a field is missing, repeated, extra or not text.
    """
    meta: dict[str, str] = {}
    for key, value in conn.execute("SELECT key, value FROM meta").fetchall():
        if not (isinstance(key, str) and isinstance(value, str)) or key in meta:
            raise LedgerCorruptError(f"ledger {path}: metadata field {key!r} is repeated or "
                                     "not text; refusing to use it")
        meta[key] = value
    if set(meta) != META_KEYS:
        missing, extra = sorted(META_KEYS - set(meta)), sorted(set(meta) - META_KEYS)
        raise LedgerCorruptError(f"ledger {path}: metadata fields missing {missing} / unknown "
                                 f"{extra}; refusing to use it")
    return meta


def read_head(conn: sqlite3.Connection, path: Path) -> Head:
    """The head row (count, last digest, tag), types checked.

    Raises:
        LedgerCorruptError: If it is missing, repeated or malformed.
    """
    rows = conn.execute("SELECT id, count, digest, genesis, tag FROM head").fetchall()
    if (len(rows) != 1 or rows[0][0] != 1 or type(rows[0][1]) is not int or rows[0][1] < 0
            or not all(isinstance(value, str) for value in rows[0][2:])):
        raise LedgerCorruptError(f"ledger {path}: the head (charge count and last digest) is "
                                 "missing or malformed; refusing to use it")
    return Head(*rows[0][1:])


def read_rows(conn: sqlite3.Connection, path: Path, *, after: int | None) -> list[Row]:
    """Charges with ``seq > after`` (all charges when ``after`` is None), by seq, types checked.

    Raises:
        LedgerCorruptError: If a row has a value of the wrong type.
    """
    sql = "SELECT seq, label, event, created, pid, digest FROM charges"
    rows = (conn.execute(sql + " ORDER BY seq") if after is None
            else conn.execute(sql + " WHERE seq > ? ORDER BY seq", (after,)))
    out = []
    for row in rows.fetchall():
        seq, label, event, created, pid, digest = row
        if not (type(seq) is int and isinstance(label, str) and isinstance(event, str)
                and type(created) is float and type(pid) is int and isinstance(digest, str)):
            raise LedgerCorruptError(f"ledger {path}: charge #{seq!r} holds a value of the wrong "
                                     "type; refusing to use it")
        out.append(Row(seq, label, event, created, pid, digest))
    return out


def write_charge(conn: sqlite3.Connection, row: Row, head: Head) -> None:
    """Insert ``row`` and set the head, inside the caller's write transaction."""
    conn.execute("INSERT INTO charges (seq, label, event, created, pid, digest) "
                 "VALUES (?, ?, ?, ?, ?, ?)", tuple(row))
    cursor = conn.execute("UPDATE head SET count = ?, digest = ?, genesis = ?, tag = ? "
                          "WHERE id = 1", tuple(head))
    if cursor.rowcount != 1:
        raise LedgerCorruptError("the head row vanished during a charge")


def create(path: Path, meta: dict[str, str], head: Head) -> None:
    """Build a new ledger beside ``path`` and link it into place atomically.

    If another process created ``path`` first, its file is kept (the caller then opens it and
    checks its identity).

    Raises:
        LedgerAccessError: If the directory is not writable, the disk is full, etc.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        conn = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            conn.execute(f"PRAGMA synchronous={SYNCHRONOUS_EXTRA}")
            conn.execute("PRAGMA journal_mode=DELETE")
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute("BEGIN")
            for name in sorted(_TABLES):
                conn.execute(_TABLES[name])
            conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", sorted(meta.items()))
            conn.execute("INSERT INTO head (id, count, digest, genesis, tag) "
                         "VALUES (1, ?, ?, ?, ?)", tuple(head))
            conn.execute("COMMIT")
        finally:
            conn.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic; fails if another process created it first
        except FileExistsError:
            pass
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except (sqlite3.Error, OSError) as exc:
        raise as_ledger_error(exc, path, "creating the ledger") from exc
    finally:
        for leftover in (tmp, Path(f"{tmp}-journal")):
            try:
                leftover.unlink(missing_ok=True)
            except OSError:
                pass
