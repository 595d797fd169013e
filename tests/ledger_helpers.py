"""Ledger test helpers shared by the tamper, witness and reliability tests."""

from __future__ import annotations

import sqlite3

from dpkd_audit.ledger.chain import Chain
from dpkd_audit.ledger.store import SCHEMA


def rewrite_unkeyed(path, *, new_id=None):
    """Rewrite the file in place as an unkeyed ledger with a valid SHA-256 chain (anyone can)."""
    plain = Chain(None)
    conn = sqlite3.connect(path)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    meta["mac"], meta["key_check"] = plain.algorithm, plain.key_check()
    if new_id is not None:
        meta["ledger_id"] = new_id
    for key in ("mac", "key_check", "ledger_id"):
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (meta[key], key))
    genesis = digest = plain.genesis(meta, SCHEMA)
    rows = conn.execute("SELECT seq, label, event, created, pid FROM charges "
                        "ORDER BY seq").fetchall()
    for seq, label, event, created, pid in rows:
        digest = plain.charge(digest, seq, label, event, created, pid)
        conn.execute("UPDATE charges SET digest = ? WHERE seq = ?", (digest, seq))
    conn.execute("UPDATE head SET count = ?, digest = ?, genesis = ?, tag = ? WHERE id = 1",
                 (len(rows), digest, genesis, plain.head(len(rows), digest, genesis)))
    conn.commit()
    conn.close()
