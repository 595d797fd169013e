"""A keyed ledger's witness: what this machine last saw of it, kept outside the ledger file.

A keyed ledger's chain (``chain``) stops a writer without the key from forging charges,
but everything it checks lives in the file, so two attacks on the file alone get through (issue
33): putting back an earlier head with the rows after it deleted (a rollback to an earlier,
validly tagged state: charges vanish), and stripping the MAC (rewriting the whole file as an
unkeyed ledger, whose plain SHA-256 chain anyone can recompute, then opening it without a key).

The witness closes both for every process of this machine that uses the same witness folder:
after each committed charge (and at every open for writing) a keyed ledger records its charge
count and last digest, tagged with the ledger's key (HMAC-SHA256), in small files of the
witness folder:

- a *path record*, named after the ledger's resolved absolute path (symbolic links followed):
  what lived at that path (the format and name dpkd-audit has always used, so the witnesses of
  existing ledgers are honoured as they are);
- an *id record*, named after the ledger id stored in the file: the same state, found from any
  name of the file (a hard link, a bind mount, a copy or a move keep the id), so a rollback
  through another name is refused too (issue 65);
- a *file record*, named after the file's device and inode, pointing to the first path it was
  witnessed at: a file opened under another name (a hard link, a bind mount) is held to that
  path's record too, even when its content was replaced in place by another ledger id.

Opening a ledger then requires, for every record that applies:

- a key: a keyed ledger was witnessed there, so a file without MACs is refused;
- the same ledger id, and at least the witnessed number of charges, the witnessed digest being
  the one of that charge in the file (the chain continues what was seen, never an older state
  nor another history of the same length);
- the file itself: creating a new ledger where a witnessed keyed ledger has gone is refused (a
  ledger is never reset; remove its path record, :func:`witness_path`, by hand to start a new
  budget on purpose).

Records only move forward (issue 65: an opener that wrote its witness late moved it back
behind another process's charges, and a rollback to the state in between was accepted): every
write happens under an exclusive ``flock`` of the folder's ``.lock`` file and replaces a record
only with a later state of the same history (more charges, the stored digest being the one of
that charge in the writer's file); an older or forked state never replaces it. Records are
written after the charge commits, each synced and then renamed into place, so a crash can only
leave them behind the ledger (which is accepted), never ahead of it nor half-written.

The witness does not protect against someone who can rewrite both the ledger and the witness
folder (keep the folder where the ledger's writers cannot go, e.g. the key holder's home), nor
against other machines. Anything but a regular file where a record or the lock belongs (a FIFO
would hang every open) is refused by name, never opened in blocking mode.

Folder: ``$DPKD_LEDGER_WITNESS_DIR`` (a relative value is made absolute against the working
directory once, at its first read in the process, so a process that changes directory keeps
one folder), else ``$XDG_STATE_HOME/dpkd-audit/ledger-witness`` (an absolute value only, as the
XDG specification says), else ``~/.local/state/dpkd-audit/ledger-witness`` (``$HOME`` if
absolute, else the password database's home). With none of them, a keyed ledger is refused
(:class:`~dpkd_audit.errors.LedgerAccessError` asking for ``DPKD_LEDGER_WITNESS_DIR``): its
rollback check is never dropped silently. Unkeyed ledgers have no witness (without a key,
anyone can rewrite everything); they are only checked against keyed ones (a stripped MAC).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dpkd_audit.errors import LedgerAccessError, LedgerCorruptError, LedgerError, LedgerKeyError
from dpkd_audit.ledger.chain import Chain
from dpkd_audit.ledger.identity import canonical_json
from dpkd_audit.ledger.store import is_open_ledger

__all__ = ["WITNESS_DIR_ENV", "check_witness", "witness_dir", "witness_path", "write_witness"]

#: Environment variable naming the witness folder.
WITNESS_DIR_ENV = "DPKD_LEDGER_WITNESS_DIR"
_MAX_WITNESS = 4096
_LOCK_NAME = ".lock"
_STATE_FIELDS = ("path", "ledger_id", "count", "digest")
_FILE_FIELDS = ("dev", "ino", "path")
#: The explicit folder of each value of ``$DPKD_LEDGER_WITNESS_DIR``, made absolute at its first
#: read (a relative value would otherwise be another folder after every ``chdir``).
_ABSOLUTE: dict[str, Path] = {}
_ABSOLUTE_LOCK = threading.Lock()


# --------------------------------------------------------------------------- where


def _home() -> Path | None:
    """The user's home: ``$HOME`` if absolute, else the password database's; None if neither."""
    home = os.environ.get("HOME")
    if home and os.path.isabs(home):
        return Path(home)
    try:
        import pwd

        entry = pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError, OSError):
        return None
    return Path(entry) if entry and os.path.isabs(entry) else None


def witness_dir() -> Path:
    """The witness folder, absolute (module docstring); it is created on first write.

    Raises:
        LedgerAccessError: If no folder can be located: ``DPKD_LEDGER_WITNESS_DIR`` and
            ``XDG_STATE_HOME`` unset (or relative) and no home directory, or a relative
            ``DPKD_LEDGER_WITNESS_DIR`` read for the first time in a deleted working directory.
    """
    explicit = os.environ.get(WITNESS_DIR_ENV)
    if explicit:
        with _ABSOLUTE_LOCK:
            found = _ABSOLUTE.get(explicit)
            if found is None:
                try:
                    found = Path(os.path.abspath(explicit))
                except OSError as exc:  # the working directory was deleted
                    raise LedgerAccessError(
                        f"{WITNESS_DIR_ENV}={explicit!r} is relative and the working directory "
                        f"cannot be read ({exc}); set it to an absolute folder") from exc
                _ABSOLUTE[explicit] = found
        return found
    state = os.environ.get("XDG_STATE_HOME")
    if state and os.path.isabs(state):
        return Path(state) / "dpkd-audit" / "ledger-witness"
    home = _home()
    if home is None:
        raise LedgerAccessError(
            "cannot locate the ledger witness folder, where keyed ledgers record what this "
            f"machine saw of them: {WITNESS_DIR_ENV} is not set, XDG_STATE_HOME is "
            f"{os.environ.get('XDG_STATE_HOME')!r} (must be an absolute path), and there is no "
            f"home directory (HOME is {os.environ.get('HOME')!r}, and user id {os.getuid()} has "
            f"no absolute home in the password database); set {WITNESS_DIR_ENV} to an absolute "
            "folder that the ledger's writers cannot modify")
    return home / ".local" / "state" / "dpkd-audit" / "ledger-witness"


def _location(ledger: Path) -> Path:
    """The ledger's resolved absolute path (symbolic links followed): its path records' key."""
    return Path(os.path.abspath(ledger)).resolve()


def _record_name(kind: str, key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()[:40]
    return f"{digest}.json" if kind == "path" else f"{kind}-{digest}.json"


def witness_path(ledger: Path) -> Path:
    """The path record of the ledger at ``ledger`` (named by its resolved absolute path).

    Removing it by hand is how a new budget is started on purpose where a keyed ledger lived.

    Raises:
        LedgerAccessError: If the witness folder cannot be located (:func:`witness_dir`).
    """
    return witness_dir() / _record_name("path", str(_location(ledger)))


def _id_path(folder: Path, ledger_id: str) -> Path:
    return folder / _record_name("id", ledger_id)


def _file_path(folder: Path, file_id: tuple[int, int]) -> Path:
    return folder / _record_name("file", f"{file_id[0]}:{file_id[1]}")


def _holds(path: Path, file_id: tuple[int, int]) -> bool:
    """Whether the file now at ``path`` is the file ``(device, inode)``."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == tuple(file_id)


# --------------------------------------------------------------------------- records


def _tag(chain: Chain, record: dict[str, Any]) -> str:
    return chain.witness(canonical_json({k: record[k] for k in _STATE_FIELDS}))


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "a special file"


def _not_regular(ledger: Path, target: Path, mode: int) -> LedgerAccessError:
    return LedgerAccessError(
        f"ledger {ledger}: its witness {target} is {_kind(mode)}, not a regular file; refusing "
        "to read it (the witness folder was tampered with): restore the witness file there, or "
        "remove what is there if you know the ledger's history is intact")


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _valid(record: Any, kind: str) -> bool:
    """Whether ``record`` has the fields of a state record, or of a file record."""
    if not isinstance(record, dict):
        return False
    if kind == "file":
        return (_natural(record.get("dev")) and _natural(record.get("ino"))
                and isinstance(record.get("path"), str))
    return (_natural(record.get("count"))
            and all(isinstance(record.get(k), str) for k in ("path", "ledger_id", "digest", "tag")))


def _read(target: Path, ledger: Path, kind: str = "state") -> dict[str, Any] | None:
    """The record at ``target``; None if there is none (or it cannot be read: a warning).

    Never blocks: anything but a regular file is refused before and after a non-blocking open.

    Raises:
        LedgerKeyError: If the record is unreadable, or is a ledger file this process has open.
        LedgerAccessError: If a FIFO, directory, device or socket is there.
    """
    if is_open_ledger(target):  # never open and close a ledger's file (its locks would go)
        raise LedgerKeyError(f"ledger {ledger}: its witness {target} is a ledger file; the "
                             "witness folder was tampered with")
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # as good as no witness (whoever can break the folder can empty it)
        warnings.warn(f"ledger {ledger}: cannot read its witness {target} ({exc}); opening it "
                      "without the rollback check", RuntimeWarning, stacklevel=4)
        return None
    if not stat.S_ISREG(mode):
        raise _not_regular(ledger, target, mode)
    try:  # O_NONBLOCK: a FIFO swapped in after the stat cannot hang the open
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        warnings.warn(f"ledger {ledger}: cannot read its witness {target} ({exc}); opening it "
                      "without the rollback check", RuntimeWarning, stacklevel=4)
        return None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(ledger, target, mode)
        chunks, size = [], 0
        while size <= _MAX_WITNESS:
            chunk = os.read(fd, _MAX_WITNESS + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        record = json.loads(data) if len(data) <= _MAX_WITNESS else None
        if not _valid(record, kind):
            raise ValueError("not a witness")
    except ValueError as exc:
        raise LedgerKeyError(f"ledger {ledger}: its witness {target} is unreadable ({exc}); "
                             "it records a keyed ledger: restore the witness, or remove it if "
                             "you know the ledger's history is intact") from exc
    return record


# --------------------------------------------------------------------------- check


def check_witness(ledger: Path, chain: Chain, *, exists: bool, ledger_id: str | None = None,
                  digests: Sequence[str] | None = None,
                  file_id: tuple[int, int] | None = None) -> None:
    """Refuse a ledger file that contradicts what this machine witnessed of it.

    The records that apply (module docstring): the path record of ``ledger``'s resolved path;
    with a file, the id record of its ledger id, and the path record of the first name its
    device and inode were witnessed under, if that name still holds the same file.

    Args:
        ledger: The ledger's path.
        chain: The chain of the handle opening it (keyed or not).
        exists: Whether a ledger file is there (False: it is about to be created).
        ledger_id: The file's ledger id (when it exists).
        digests: The file's charge digests, in order (when it exists).
        file_id: The file's ``(device, inode)`` (when it exists).

    Raises:
        LedgerKeyError: If a keyed ledger was witnessed here and the file has no key, is gone,
            or a record does not verify under the key given.
        LedgerCorruptError: If the file is another ledger, or an older state or another
            history of this one.
        LedgerAccessError: If a keyed ledger's witness folder cannot be located, or something
            other than a regular file is where a record belongs.
    """
    try:
        folder = witness_dir()
    except LedgerAccessError as exc:
        if chain.keyed:
            raise LedgerAccessError(f"ledger {ledger}: {exc}") from None
        warnings.warn(f"ledger {ledger}: {exc}. This unkeyed ledger is opened without checking "
                      "that no keyed ledger was witnessed at its path (a stripped MAC)",
                      RuntimeWarning, stacklevel=3)
        return
    try:
        mode = os.stat(folder).st_mode
    except FileNotFoundError:
        return  # nothing was ever witnessed in this folder
    except OSError as exc:  # as good as no witness (whoever can break the folder can empty it)
        mode = None
        problem = str(exc)
    else:
        problem = f"it is {_kind(mode)}"
    if mode is None or not stat.S_ISDIR(mode):
        warnings.warn(f"ledger {ledger}: cannot read its witness folder {folder} ({problem}); "
                      "opening it without the rollback check", RuntimeWarning, stacklevel=3)
        return
    location = _location(ledger)
    target = folder / _record_name("path", str(location))
    record = _read(target, ledger)
    if not exists:
        if record is not None:
            raise LedgerKeyError(
                f"ledger {ledger}: a keyed ledger lived at this path ({record['count']} charges "
                f"witnessed in {target}) and its file is gone; a ledger is never reset: put the "
                "file back, or remove the witness if you mean to start a new budget here")
        return
    found: list[tuple[Path, dict[str, Any], str]] = []
    if record is not None:
        found.append((target, record, "this path held a keyed ledger"))
    if ledger_id is not None:
        target = _id_path(folder, ledger_id)
        record = _read(target, ledger)
        if record is not None:
            found.append((target, record, f"its ledger id {ledger_id} was witnessed as a keyed "
                                          "ledger"))
    if file_id is not None:
        pointer = _read(_file_path(folder, file_id), ledger, "file")
        alias = None if pointer is None else Path(pointer["path"])
        if alias is not None and alias != location and _holds(alias, file_id):
            target = folder / _record_name("path", str(alias))
            record = _read(target, ledger)
            if record is not None:
                found.append((target, record, f"this file is also {alias} (the same device and "
                                              "inode), which held a keyed ledger"))
    for target, record, why in found:
        _check_record(ledger, chain, target, record, why, ledger_id=ledger_id, digests=digests)


def _check_record(ledger: Path, chain: Chain, target: Path, record: dict[str, Any], why: str,
                  *, ledger_id: str | None, digests: Sequence[str] | None) -> None:
    """Refuse the file unless it continues the state ``record`` (read from ``target``)."""
    if not chain.keyed:
        raise LedgerKeyError(
            f"ledger {ledger}: {why} (witness {target}), and the file is opened without a key "
            "or holds no MAC (was its MAC stripped?): open it with its key")
    if not Chain.equal(record["tag"], _tag(chain, record)):
        raise LedgerKeyError(f"ledger {ledger}: its witness {target} does not verify under the "
                             "key given (another key, or the witness was altered)")
    count = record["count"]
    problem = None
    if ledger_id != record["ledger_id"]:
        problem = "it is not the ledger witnessed there (another ledger id)"
    elif digests is None or len(digests) < count:
        problem = (f"it holds {0 if digests is None else len(digests)} charges, fewer than the "
                   f"{count} witnessed (an earlier state was put back)")
    elif count and not Chain.equal(digests[count - 1], record["digest"]):
        problem = (f"its charge #{count} is not the one witnessed (its history was rewritten "
                   "after that charge was seen)")
    if problem:
        raise LedgerCorruptError(f"ledger {ledger}: {problem} (witness {target}: {why}); "
                                 "refusing to use it (it is never reset)")


# --------------------------------------------------------------------------- write


@contextlib.contextmanager
def _folder_lock(folder: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive ``flock`` of the folder's lock file (never blocks on a FIFO).

    Raises:
        OSError: If the lock file is not a regular file, is a ledger, or the lock is not
            granted within ``timeout`` seconds.
    """
    lock = folder / _LOCK_NAME
    if is_open_ledger(lock):  # never open and close a ledger's file (its locks would go)
        raise OSError(f"the witness lock {lock} is a ledger file")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY
                 | os.O_CLOEXEC, 0o600)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(f"the witness lock {lock} is {_kind(mode)}, not a regular file")
        deadline, pause = time.monotonic() + timeout, 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise OSError(f"the witness lock {lock} was not granted within {timeout:g} "
                                  "s") from None
                time.sleep(pause)
                pause = min(2 * pause, 0.05)
        yield
    finally:
        os.close(fd)  # releases the flock


def _replace(target: Path, payload: str) -> None:
    """Write ``payload`` to ``target`` atomically: synced, then renamed into place."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".witness-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _advance(target: Path, ledger: Path, chain: Chain, state: dict[str, Any],
             history: Sequence[str] | None) -> str | None:
    """Replace the record at ``target`` by ``state`` if that moves it forward (under the lock).

    Returns:
        None if the record now holds ``state`` or a later state of the same history; else why
        the stored record was kept (it is never replaced by an older or forked state).
    """
    stored = _read(target, ledger)
    if stored is not None:
        if not Chain.equal(stored["tag"], _tag(chain, stored)):
            return "it does not verify under this ledger's key"
        if stored["ledger_id"] != state["ledger_id"]:
            return f"it records another ledger (id {stored['ledger_id']})"
        count, digest = stored["count"], stored["digest"]
        if count > state["count"]:
            return None  # already ahead: a late writer never moves it back
        if count == state["count"]:
            if Chain.equal(digest, state["digest"]):
                return None
            return f"it records another history at charge #{count}"
        if count and history is not None and not (
                len(history) >= count and Chain.equal(history[count - 1], digest)):
            return f"it records another history at charge #{count}"
    _replace(target, json.dumps({**state, "tag": _tag(chain, state)}, sort_keys=True))
    return None


def _point(folder: Path, ledger: Path, file_id: tuple[int, int], location: Path) -> None:
    """Record the first path the file ``file_id`` was witnessed under (while it holds it)."""
    target = _file_path(folder, file_id)
    stored = _read(target, ledger, "file")
    if stored is not None and (stored["path"] == str(location)
                               or _holds(Path(stored["path"]), file_id)):
        return  # still the file's first witnessed name
    record = {"dev": int(file_id[0]), "ino": int(file_id[1]), "path": str(location)}
    _replace(target, json.dumps(record, sort_keys=True))


def write_witness(ledger: Path, chain: Chain, *, ledger_id: str, count: int, digest: str,
                  history: Sequence[str] | None = None,
                  file_id: tuple[int, int] | None = None, timeout: float = 60.0) -> None:
    """Record that the keyed ledger at ``ledger`` holds ``count`` charges ending in ``digest``.

    Called after the charge committed, by whoever opened or charged the ledger. Under the
    folder's lock, each record (path, id) moves forward only: a record holding more charges,
    or another history, is kept as it is (module docstring).

    Args:
        ledger: The ledger's path.
        chain: The ledger's chain (nothing is written without a key).
        ledger_id: The file's ledger id.
        count: Its number of charges.
        digest: Its last digest (the genesis digest when it holds no charge).
        history: Its charge digests, in order (``count`` of them): a record is advanced only
            if its digest is the one of its charge in this history. None skips that check.
        file_id: The file's ``(device, inode)``, for the file record.
        timeout: Seconds to wait for the folder's lock.

    A failure to write (a full or read-only folder, a lock not granted, a record that is not a
    regular file) is a warning, never an error: the charge is already durable, and a witness
    that lags is accepted.
    """
    if not chain.keyed:
        return
    target: Path | str = "in the witness folder"
    kept = []
    try:
        folder = witness_dir()
        location = _location(ledger)
        state = {"path": str(location), "ledger_id": ledger_id, "count": count,
                 "digest": digest}
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _folder_lock(folder, timeout):
            for target in (folder / _record_name("path", str(location)),
                           _id_path(folder, ledger_id)):
                why = _advance(target, ledger, chain, state, history)
                if why:
                    kept.append(f"{target}: {why}")
            if file_id is not None:
                target = _file_path(folder, file_id)
                _point(folder, ledger, file_id, location)
    except (OSError, LedgerError) as exc:
        warnings.warn(f"ledger {ledger}: could not write its witness {target} ({exc}); the "
                      "charge is recorded, but a rollback of the file to before it would not "
                      "be detected", RuntimeWarning, stacklevel=3)
        return
    if kept:
        warnings.warn(f"ledger {ledger}: kept its witness as it is ({'; '.join(kept)}): another "
                      "file with this ledger's path or id was charged differently (a copy, or a "
                      "rewritten history); the next open of one of them is refused",
                      RuntimeWarning, stacklevel=3)
