"""A keyed ledger's witness: what this machine last saw of it, kept outside the ledger file.

A keyed ledger's chain (``chain``) stops a writer without the key from forging charges,
but everything it checks lives in the file, so two attacks on the file alone get through (issue
33): putting back an earlier head with the rows after it deleted (a rollback to an earlier,
validly tagged state: charges vanish), and stripping the MAC (rewriting the whole file as an
unkeyed ledger, whose plain SHA-256 chain anyone can recompute, then opening it without a key).

The witness closes both for every process of this machine that uses the same witness folder:
after each committed charge (and at creation) a keyed ledger writes, beside nothing it owns, a
small file naming the ledger's path, id, charge count and last digest, tagged with the ledger's
key (HMAC-SHA256). Opening a ledger at that path then requires:

- a key: the path held a keyed ledger, so a file without MACs there is refused;
- the same ledger id, and at least the witnessed number of charges, the witnessed digest being
  the one of that charge in the file (the chain continues what was seen, never an older state);
- the file itself: creating a new ledger where a witnessed keyed ledger has gone is refused (a
  ledger is never reset; remove the witness by hand to start a new budget on purpose).

The witness is written after the charge commits, by replacing the file atomically, so a crash
can only leave it behind the ledger (which is accepted), never ahead of it. It does not protect
against someone who can rewrite both the ledger and the witness folder (keep the folder where
the ledger's writers cannot go, e.g. the key holder's home), nor against other machines.

Folder: ``$DPKD_LEDGER_WITNESS_DIR``, else ``$XDG_STATE_HOME/dpkd-audit/ledger-witness``, else
``~/.local/state/dpkd-audit/ledger-witness``. Unkeyed ledgers have no witness (without a key,
anyone can rewrite everything).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from dpkd_audit.errors import LedgerCorruptError, LedgerKeyError
from dpkd_audit.ledger.chain import Chain
from dpkd_audit.ledger.identity import canonical_json
from dpkd_audit.ledger.store import is_open_ledger

__all__ = ["WITNESS_DIR_ENV", "check_witness", "witness_dir", "witness_path", "write_witness"]

#: Environment variable naming the witness folder.
WITNESS_DIR_ENV = "DPKD_LEDGER_WITNESS_DIR"
_MAX_WITNESS = 4096


def witness_dir() -> Path:
    """The witness folder (module docstring); it is created on first write."""
    explicit = os.environ.get(WITNESS_DIR_ENV)
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "dpkd-audit" / "ledger-witness"


def witness_path(ledger: Path) -> Path:
    """The witness file of the ledger at ``ledger`` (named by its resolved absolute path)."""
    name = hashlib.sha256(str(Path(os.path.abspath(ledger)).resolve()).encode()).hexdigest()
    return witness_dir() / f"{name[:40]}.json"


def _tag(chain: Chain, fields: dict[str, Any]) -> str:
    return chain.witness(canonical_json(fields))


def write_witness(ledger: Path, chain: Chain, *, ledger_id: str, count: int,
                  digest: str) -> None:
    """Record that the keyed ledger at ``ledger`` holds ``count`` charges ending in ``digest``.

    Called after the charge committed. A failure to write (a full or read-only folder) is a
    warning, never an error: the charge is already durable, and a witness that lags is
    accepted.
    """
    if not chain.keyed:
        return
    fields = {"path": str(Path(os.path.abspath(ledger)).resolve()), "ledger_id": ledger_id,
              "count": count, "digest": digest}
    payload = json.dumps({**fields, "tag": _tag(chain, fields)}, sort_keys=True)
    target = witness_path(ledger)
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".witness-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(payload)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        warnings.warn(f"ledger {ledger}: could not write its witness {target} ({exc}); the "
                      "charge is recorded, but a rollback of the file to before it would not "
                      "be detected", RuntimeWarning, stacklevel=3)


def _read(ledger: Path) -> tuple[Path, dict[str, Any] | None]:
    target = witness_path(ledger)
    if is_open_ledger(target):  # never open and close a ledger's file (its locks would go)
        raise LedgerKeyError(f"ledger {ledger}: its witness {target} is a ledger file; the "
                             "witness folder was tampered with")
    try:
        with open(target, "rb") as fh:
            data = fh.read(_MAX_WITNESS + 1)
    except FileNotFoundError:
        return target, None
    except OSError as exc:  # as good as no witness (whoever can break the folder can empty it)
        warnings.warn(f"ledger {ledger}: cannot read its witness {target} ({exc}); opening it "
                      "without the rollback check", RuntimeWarning, stacklevel=4)
        return target, None
    try:
        witness = json.loads(data) if len(data) <= _MAX_WITNESS else None
        if not (isinstance(witness, dict) and isinstance(witness.get("count"), int)
                and all(isinstance(witness.get(k), str)
                        for k in ("path", "ledger_id", "digest", "tag"))):
            raise ValueError("not a witness")
    except ValueError as exc:
        raise LedgerKeyError(f"ledger {ledger}: its witness {target} is unreadable ({exc}); "
                             "it records a keyed ledger at this path: restore the witness, or "
                             "remove it if you know the ledger's history is intact") from exc
    return target, witness


def check_witness(ledger: Path, chain: Chain, *, exists: bool, ledger_id: str | None = None,
                  digests: list[str] | None = None) -> None:
    """Refuse a ledger file that contradicts what this machine witnessed at its path.

    Args:
        ledger: The ledger's path.
        chain: The chain of the handle opening it (keyed or not).
        exists: Whether a ledger file is there (False: it is about to be created).
        ledger_id: The file's ledger id (when it exists).
        digests: The file's charge digests, in order (when it exists).

    Raises:
        LedgerKeyError: If a keyed ledger was witnessed here and the file has no key, is gone,
            or the witness does not verify under the key given.
        LedgerCorruptError: If the file is another ledger, or an older state of this one.
    """
    target, witness = _read(ledger)
    if witness is None:
        return
    if not exists:
        raise LedgerKeyError(
            f"ledger {ledger}: a keyed ledger lived at this path ({witness['count']} charges "
            f"witnessed in {target}) and its file is gone; a ledger is never reset: put the "
            "file back, or remove the witness if you mean to start a new budget here")
    if not chain.keyed:
        raise LedgerKeyError(
            f"ledger {ledger}: this path held a keyed ledger (witness {target}), and the file "
            "is opened without a key or holds no MAC (was its MAC stripped?): open it with its "
            "key")
    fields = {k: witness[k] for k in ("path", "ledger_id", "count", "digest")}
    if not Chain.equal(witness["tag"], _tag(chain, fields)):
        raise LedgerKeyError(f"ledger {ledger}: its witness {target} does not verify under the "
                             "key given (another key, or the witness was altered)")
    problem = None
    if ledger_id != witness["ledger_id"]:
        problem = "it is not the ledger witnessed at this path (another ledger id)"
    elif digests is None or len(digests) < witness["count"]:
        problem = (f"it holds {0 if digests is None else len(digests)} charges, fewer than the "
                   f"{witness['count']} witnessed (an earlier state was put back)")
    elif witness["count"] and not Chain.equal(digests[witness["count"] - 1], witness["digest"]):
        problem = f"its charge #{witness['count']} is not the one witnessed"
    if problem:
        raise LedgerCorruptError(f"ledger {ledger}: {problem} (witness {target}); refusing to "
                                 "use it (it is never reset)")
