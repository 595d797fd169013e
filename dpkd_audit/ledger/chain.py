"""The ledger's chain of digests, optionally keyed (HMAC-SHA256).

Everything a ledger file holds is covered by one chain:

- the *genesis* digest covers every ``meta`` field (magic, schema version, budget, accountant
  and its configuration, neighbouring relation, MAC algorithm, key check, ledger id, creation
  time) and the exact SQL schema;
- charge ``i``'s digest covers the previous digest and every field of the row (seq, label,
  event, created, pid);
- the *head* (row count and last digest), updated in the same transaction as each charge, is
  covered by a tag, so deleting the last rows (or all of them) no longer matches the head.

Without a key the digests are plain SHA-256: they detect accidental damage and naive edits
(deleting or editing rows or metadata with the sqlite3 shell), but anyone who can write the file
can recompute them. With a key (HMAC-SHA256, Bellare-Canetti-Krawczyk 1996; RFC 2104) a writer
without the key cannot produce a valid chain or head. Neither, on its own, protects against
deleting the whole file or putting back an older copy of it; for keyed ledgers the witness
(:mod:`dpkd_audit.ledger.witness`) does, on the machine that used the ledger.

The key comes from ``key=`` / ``key_file=``, or else from the environment: ``DPKD_LEDGER_KEY``
(the key itself) or ``DPKD_LEDGER_KEY_FILE`` (a file holding it).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

from dpkd_audit.errors import LedgerKeyError
from dpkd_audit.ledger.identity import canonical_json
from dpkd_audit.ledger.store import is_open_ledger

__all__ = ["KEY_ENV", "KEY_FILE_ENV", "MIN_KEY_BYTES", "Chain", "resolve_key"]

#: Environment variable holding the ledger MAC key itself (text, at least 16 bytes).
KEY_ENV = "DPKD_LEDGER_KEY"
#: Environment variable holding the path of a file that holds the key.
KEY_FILE_ENV = "DPKD_LEDGER_KEY_FILE"
#: Shortest accepted key, in bytes (128 bits).
MIN_KEY_BYTES = 16
_MAX_KEY_FILE = 65536


def _key_bytes(value: bytes, source: str) -> bytes:
    key = value.strip()
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{source} must hold at least {MIN_KEY_BYTES} bytes of key (surrounding "
                         f"whitespace ignored); got {len(key)}")
    return key


def resolve_key(key: bytes | str | None = None,
                key_file: str | os.PathLike | None = None) -> tuple[bytes | None, str]:
    """The MAC key to use and where it came from.

    Args:
        key: The key itself (bytes or text), or None.
        key_file: A file holding the key, or None.

    Returns:
        ``(key, source)``: ``key`` is None (and ``source`` "no key") when neither argument nor
        ``DPKD_LEDGER_KEY`` / ``DPKD_LEDGER_KEY_FILE`` is set.

    Raises:
        ValueError: If both arguments (or both variables) are given, or a key is too short or
            of the wrong type.
        LedgerKeyError: If the key file cannot be read.
    """
    if key is not None and key_file is not None:
        raise ValueError("give key or key_file, not both")
    if key is None and key_file is None:
        env_key, env_file = os.environ.get(KEY_ENV), os.environ.get(KEY_FILE_ENV)
        for name, value in ((KEY_ENV, env_key), (KEY_FILE_ENV, env_file)):
            if value is not None and not value.strip():
                # an empty variable is a key someone meant to give: never an unkeyed ledger
                raise ValueError(f"{name} is set but empty; set it to the key (or the key "
                                 f"file's path), or unset it for a ledger without a key")
        if env_key and env_file:
            raise ValueError(f"set only one of {KEY_ENV} and {KEY_FILE_ENV}")
        if env_key:
            return _key_bytes(env_key.encode(), KEY_ENV), f"${KEY_ENV}"
        if not env_file:
            return None, "no key"
        key_file, source = env_file, f"${KEY_FILE_ENV}={env_file}"
    elif key is not None:
        if isinstance(key, str):
            key = key.encode()
        if not isinstance(key, bytes):
            raise ValueError(f"key must be bytes or str; got {type(key).__name__}")
        return _key_bytes(key, "key"), "key="
    else:
        if not isinstance(key_file, (str, os.PathLike)):
            raise ValueError(f"key_file must be a path; got {key_file!r}")
        source = f"key_file={key_file}"
    return _key_bytes(_read_key_file(Path(key_file)), f"key file {key_file}"), source


def _read_key_file(path: Path) -> bytes:
    """The key file's bytes; refuses (without blocking) anything but a small regular file.

    A ledger this process has open is refused before it is opened (closing a descriptor of it
    would drop the locks of a charge in flight: :func:`dpkd_audit.ledger.store.is_open_ledger`),
    and any SQLite database after reading (a key file is never one).
    """
    if is_open_ledger(path):
        raise LedgerKeyError(f"the ledger key file {path} is a ledger this process has open; "
                             "give the file that holds the key")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise LedgerKeyError(f"the ledger key file {path} is not a regular file")
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(_MAX_KEY_FILE + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise LedgerKeyError(f"cannot read the ledger key file {path}: {exc}") from exc
    if data.startswith(b"SQLite format 3\x00"):
        raise LedgerKeyError(f"the ledger key file {path} is an SQLite database (the ledger "
                             "itself?); give the file that holds the key")
    if len(data) > _MAX_KEY_FILE:
        raise LedgerKeyError(f"the ledger key file {path} is larger than {_MAX_KEY_FILE} bytes; "
                             "is it the right file?")
    return data


class Chain:
    """Digest functions of one ledger: SHA-256, or HMAC-SHA256 under ``key``.

    Args:
        key: The MAC key, or None for plain SHA-256.
    """

    def __init__(self, key: bytes | None) -> None:
        self._key = key

    @property
    def algorithm(self) -> str:
        """``"hmac-sha256"`` with a key, ``"sha256"`` without."""
        return "sha256" if self._key is None else "hmac-sha256"

    @property
    def keyed(self) -> bool:
        """Whether a key is in use."""
        return self._key is not None

    def _f(self, domain: str, payload: str) -> str:
        message = f"{domain}\x1f{payload}".encode()
        if self._key is None:
            return hashlib.sha256(message).hexdigest()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def key_check(self) -> str:
        """A short value that tells a wrong key from a tampered file ("" without a key)."""
        return "" if self._key is None else self._f("key-check", "dpkd-audit-ledger")[:16]

    def genesis(self, meta: dict[str, str], schema: str) -> str:
        """Digest of every metadata field and the SQL schema: the chain's first link."""
        return self._f("genesis", canonical_json([sorted(meta.items()), schema]))

    def charge(self, prev: str, seq: int, label: str, event: str, created: float,
               pid: int) -> str:
        """Digest of one charge row, chained to ``prev``."""
        return self._f("charge", canonical_json([prev, seq, label, event, repr(created), pid]))

    def witness(self, payload: str) -> str:
        """The tag of a witness record (:mod:`dpkd_audit.ledger.witness`), under the key."""
        return self._f("witness", payload)

    def head(self, count: int, digest: str, genesis: str) -> str:
        """Tag of the head: ``count`` charges ending in ``digest``, after ``genesis``."""
        return self._f("head", canonical_json([count, digest, genesis]))

    @staticmethod
    def equal(a: str, b: str) -> bool:
        """Constant-time comparison of two digests."""
        return hmac.compare_digest(a.encode(), b.encode())
