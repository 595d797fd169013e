"""Tampering and damage: every edit is refused on open (LedgerCorruptError), never reset.

Edits are made as the sqlite3 shell would make them (Python's sqlite3 module, same library).
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3

import pytest
from dp_accounting import dp_event as _dp

from dpkd_audit import Ledger, LedgerCorruptError, LedgerError
from dpkd_audit.errors import LedgerKeyError
from dpkd_audit.events import PureDpEvent
from dpkd_audit.ledger.chain import Chain
from dpkd_audit.ledger.store import SCHEMA

KEY = b"0123456789abcdef-test-key"


@pytest.fixture(autouse=True)
def _no_key_in_environment(monkeypatch):
    monkeypatch.delenv("DPKD_LEDGER_KEY", raising=False)
    monkeypatch.delenv("DPKD_LEDGER_KEY_FILE", raising=False)


def _ledger(path, n=5, **kwargs):
    with Ledger(epsilon=1.0, path=path, **kwargs) as ledger:
        for i in range(n):
            ledger.charge(PureDpEvent(0.1), label=f"c{i}")
    return path


def _sql(path, *statements):
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def _refused(path, match=None, **kwargs):
    """Every way of opening ``path`` raises LedgerCorruptError naming it; the file is untouched."""
    before = path.read_bytes()
    for attempt in (lambda: Ledger.open(path, **kwargs),
                    lambda: Ledger.open(path, read_only=True, **kwargs),
                    lambda: Ledger(epsilon=1.0, path=path, **kwargs)):
        with pytest.raises(LedgerCorruptError, match=match) as info:
            attempt()
        assert str(path) in str(info.value)
    assert path.read_bytes() == before  # never reset, never "repaired"
    return str(info.value)


# ------------------------------------------------------------------------ rows and head


@pytest.mark.parametrize("statement", [
    "DELETE FROM charges WHERE seq = 5",                   # the last row
    "DELETE FROM charges WHERE seq >= 4",                  # the last rows
    "DELETE FROM charges",                                 # all rows
    "DELETE FROM charges WHERE seq = 3",                   # a middle row
    "UPDATE charges SET event = replace(event, '0.1', '0.01') WHERE seq = 2",
    "UPDATE charges SET label = 'x' WHERE seq = 1",
    "UPDATE charges SET created = created + 1 WHERE seq = 4",
    "UPDATE charges SET pid = pid + 1 WHERE seq = 5",
    "UPDATE charges SET seq = 9 WHERE seq = 5",
    "INSERT INTO charges SELECT 6, label, event, created, pid, digest FROM charges WHERE seq = 5",
    "UPDATE head SET count = 4",
    "UPDATE head SET count = 0",
    "DELETE FROM head",
    "UPDATE head SET tag = 'x'",
])
def test_row_and_head_edits_are_refused(tmp_path, statement):
    path = _ledger(tmp_path / "l.sqlite")
    _sql(path, statement)
    _refused(path)


def test_deleting_all_rows_of_a_fresh_ledger_with_rows_reported(tmp_path):
    path = _ledger(tmp_path / "l.sqlite")
    _sql(path, "DELETE FROM charges")
    message = _refused(path)
    assert "head records 5 charges but the file holds 0" in message


# ------------------------------------------------------------------------ metadata


@pytest.mark.parametrize("statement", [
    "UPDATE meta SET value = '5.0' WHERE key = 'epsilon'",           # the budget
    "UPDATE meta SET value = '0.5' WHERE key = 'delta'",
    "UPDATE meta SET value = replace(value, 'PureAccountant', 'RDPAccountant') "
    "WHERE key = 'accountant'",                                       # the accountant
    "UPDATE meta SET value = replace(value, 'REPLACE_ONE', 'ADD_OR_REMOVE_ONE')",  # relation
    "UPDATE meta SET value = 'ADD_OR_REMOVE_ONE' WHERE key = 'neighboring_relation'",
    "UPDATE meta SET value = 'x' WHERE key = 'ledger_id'",
    "UPDATE meta SET value = '0.0' WHERE key = 'created'",
    "UPDATE meta SET value = '1' WHERE key = 'schema'",
    "DELETE FROM meta WHERE key = 'created'",
    "INSERT INTO meta VALUES ('note', 'extra')",
    "INSERT INTO meta SELECT key, value FROM meta WHERE key = 'epsilon'",
])
def test_metadata_edits_are_refused(tmp_path, statement):
    path = _ledger(tmp_path / "l.sqlite")
    _sql(path, statement)
    _refused(path)


def test_editing_the_budget_is_refused_even_with_the_edited_budget(tmp_path):
    path = _ledger(tmp_path / "l.sqlite")
    _sql(path, "UPDATE meta SET value = '5.0' WHERE key = 'epsilon'")
    with pytest.raises(LedgerCorruptError, match="metadata"):
        Ledger(epsilon=5.0, path=path)


def test_metadata_edit_while_a_handle_is_open_stops_it(tmp_path):
    path = _ledger(tmp_path / "l.sqlite")
    ledger = Ledger.open(path)
    _sql(path, "UPDATE meta SET value = '5.0' WHERE key = 'epsilon'")
    with pytest.raises(LedgerCorruptError, match="metadata changed"):
        ledger.charge(PureDpEvent(0.1), label="late")


def test_rows_deleted_while_a_handle_is_open_stop_it(tmp_path):
    path = _ledger(tmp_path / "l.sqlite")
    ledger = Ledger.open(path)
    _resign_unkeyed(path, drop_last=True)  # a consistent, re-signed file with one row less
    with pytest.raises(LedgerCorruptError, match="fewer than the 5"):
        ledger.charges()


def test_file_replaced_while_open_is_refused(tmp_path):
    path = _ledger(tmp_path / "l.sqlite")
    ledger = Ledger.open(path)
    copy = tmp_path / "copy.sqlite"
    shutil.copy(path, copy)
    copy.replace(path)  # an identical copy, but not the file this handle opened
    with pytest.raises(LedgerCorruptError, match="replaced"):
        ledger.charge(PureDpEvent(0.1), label="into the old inode")


# ------------------------------------------------------------------------ schema


def test_one_bit_flip_in_the_schema_text_is_refused_even_when_quick_check_passes(tmp_path):
    """Issue 10: a one-bit flip in the schema passed quick_check and opened empty."""
    path = _ledger(tmp_path / "l.sqlite")
    original = path.read_bytes()
    offsets = []
    for statement in SCHEMA.split("\n"):
        start = original.find(statement.encode())
        assert start > 0
        offsets.extend(range(start, start + len(statement)))
    passed_quick_check = opened = 0
    for offset in offsets:  # every byte of the three CREATE statements, one bit each
        data = bytearray(original)
        data[offset] ^= 1 << (offset % 7)
        path.write_bytes(bytes(data))
        try:
            conn = sqlite3.connect(path)
            passed_quick_check += conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
            conn.close()
        except (sqlite3.Error, UnicodeDecodeError):  # SQLite itself saw the damage
            pass
        try:
            Ledger.open(path).close()
            opened += 1
        except LedgerCorruptError:
            pass
    assert opened == 0
    assert passed_quick_check > 50  # the flips SQLite itself does not notice are covered too


@pytest.mark.parametrize("statement", [
    "CREATE TRIGGER t AFTER INSERT ON charges BEGIN DELETE FROM charges; END",
    "CREATE INDEX i ON charges (label)",
    "CREATE TABLE extra (x)",
    "CREATE VIEW v AS SELECT * FROM charges",
    "ALTER TABLE charges ADD COLUMN note TEXT",
    "DROP TABLE head",
])
def test_schema_changes_are_refused(tmp_path, statement):
    path = _ledger(tmp_path / "l.sqlite")
    _sql(path, statement)
    _refused(path, match="schema")


def test_wal_mode_set_by_another_program_is_undone_without_loss(tmp_path):
    path = _ledger(tmp_path / "l.sqlite")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.close()
    ledger = Ledger.open(path)
    assert ledger.pragmas()["journal_mode"] == "delete"
    assert ledger.spent().charges == 5


# ------------------------------------------------------------------------ random damage


def _state(ledger):
    return ([(c.seq, c.label, c.event, c.created, c.pid) for c in ledger.charges()],
            float(ledger.spent().epsilon))


@pytest.mark.parametrize("keyed", [False, True])
def test_random_bit_flips_are_refused_or_harmless(tmp_path, keyed):
    """Fuzzing: 1-3 random bit flips anywhere; open refuses (a LedgerError) or sees no change.

    Never a raw sqlite3 error, never another exception, never a different state (fixed seed).
    """
    kwargs = {"key": KEY} if keyed else {}
    path = tmp_path / "l.sqlite"
    with Ledger(epsilon=10.0, delta=1e-5, path=path, **kwargs) as ledger:
        for i in range(12):
            ledger.charge(PureDpEvent(0.05 * (1 + i % 3)), label=f"release {i}")
            ledger.charge(_dp.LaplaceDpEvent(20.0 + i), label=f"laplace {i}")
    original = path.read_bytes()
    reference = _state(Ledger.open(path, **kwargs))
    rng = random.Random(20240610 + keyed)
    outcomes: dict[str, int] = {}
    for _ in range(1000):
        data = bytearray(original)
        for _ in range(rng.choice([1, 1, 2, 3])):
            offset = rng.randrange(len(data))
            data[offset] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        try:
            ledger = Ledger.open(path, timeout=5, **kwargs)
            state = _state(ledger)
            ledger.close()
        except LedgerError as exc:
            outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
            continue
        assert state == reference  # opened: nothing that counts may have changed
        outcomes["unchanged"] = outcomes.get("unchanged", 0) + 1
    assert outcomes.get("LedgerCorruptError", 0) > 150, outcomes  # ~1/3 land in live data


# ------------------------------------------------------------------------ keyed MAC


def _resign_unkeyed(path, *, drop_last=False):
    """What a writer without the key can do: recompute the whole chain with plain SHA-256."""
    conn = sqlite3.connect(path)
    if drop_last:
        conn.execute("DELETE FROM charges WHERE seq = (SELECT max(seq) FROM charges)")
    conn.execute("UPDATE meta SET value = 'sha256' WHERE key = 'mac'")
    conn.execute("UPDATE meta SET value = '' WHERE key = 'key_check'")
    chain = Chain(None)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    genesis = digest = chain.genesis(meta, SCHEMA)
    rows = conn.execute("SELECT seq, label, event, created, pid FROM charges ORDER BY seq")
    count = 0
    for seq, label, event, created, pid in rows.fetchall():
        digest = chain.charge(digest, seq, label, event, created, pid)
        conn.execute("UPDATE charges SET digest = ? WHERE seq = ?", (digest, seq))
        count += 1
    conn.execute("UPDATE head SET count = ?, digest = ?, genesis = ?, tag = ?",
                 (count, digest, genesis, chain.head(count, digest, genesis)))
    conn.commit()
    conn.close()


def test_keyed_ledger_needs_its_key(tmp_path, monkeypatch):
    path = _ledger(tmp_path / "l.sqlite", key=KEY)
    with pytest.raises(LedgerKeyError, match="no key was given"):
        Ledger.open(path)
    with pytest.raises(LedgerKeyError, match="not the key"):
        Ledger.open(path, key=b"another key of 16+ bytes")
    assert Ledger.open(path, key=KEY).keyed
    key_file = tmp_path / "ledger.key"
    key_file.write_bytes(KEY + b"\n")
    assert Ledger.open(path, key_file=key_file).spent().charges == 5
    monkeypatch.setenv("DPKD_LEDGER_KEY", KEY.decode())
    assert Ledger.open(path).spent().charges == 5
    monkeypatch.delenv("DPKD_LEDGER_KEY")
    monkeypatch.setenv("DPKD_LEDGER_KEY_FILE", str(key_file))
    assert Ledger.open(path).spent().charges == 5
    with pytest.raises(LedgerKeyError, match="cannot read"):
        Ledger.open(path, key_file=tmp_path / "missing.key")
    os.mkfifo(tmp_path / "fifo.key")
    with pytest.raises(LedgerKeyError, match="not a regular file"):
        Ledger.open(path, key_file=tmp_path / "fifo.key")  # refused, not read forever
    with pytest.raises(ValueError, match="key_file"):
        Ledger.open(path, key=KEY, key_file=key_file)


def test_without_the_key_a_writer_cannot_recompute_a_keyed_chain(tmp_path):
    path = _ledger(tmp_path / "l.sqlite", key=KEY)
    _sql(path, "DELETE FROM charges WHERE seq = 5")
    _refused(path, key=KEY)
    # stripping the MAC and re-signing with SHA-256 is refused when the key is given
    path = _ledger(tmp_path / "m.sqlite", key=KEY)
    _resign_unkeyed(path, drop_last=True)
    with pytest.raises(LedgerKeyError, match="has no MAC"):
        Ledger.open(path, key=KEY)


def test_truncation_to_an_earlier_head_needs_the_key(tmp_path):
    path = tmp_path / "l.sqlite"
    ledger = Ledger(epsilon=1.0, path=path, key=KEY)
    for i in range(5):
        ledger.charge(PureDpEvent(0.1), label=f"c{i}")
    conn = sqlite3.connect(path)
    count, digest = conn.execute("SELECT seq, digest FROM charges WHERE seq = 4").fetchone()
    conn.execute("DELETE FROM charges WHERE seq = 5")
    unkeyed_tag = Chain(None).head(count, digest, ledger._genesis)
    conn.execute("UPDATE head SET count = ?, digest = ?, tag = ?", (count, digest, unkeyed_tag))
    conn.commit()
    conn.close()
    _refused(path, key=KEY)


def test_unkeyed_chain_only_detects_naive_edits(tmp_path):
    """The documented limit: without a key, a writer who recomputes the chain is not detected."""
    path = _ledger(tmp_path / "l.sqlite")
    _resign_unkeyed(path, drop_last=True)
    assert Ledger.open(path).spent().charges == 4


def test_an_older_copy_put_back_is_detected_only_through_the_witness(tmp_path, monkeypatch):
    """Rolling back the whole file: a keyed ledger's witness (on this machine) refuses it; the
    documented limit remains without a key, or where the witness is not (another machine)."""
    from dpkd_audit.errors import LedgerCorruptError

    path = _ledger(tmp_path / "l.sqlite", n=2, key=KEY)
    old = path.read_bytes()
    with Ledger.open(path, key=KEY) as ledger:
        ledger.charge(PureDpEvent(0.5), label="later")
    path.write_bytes(old)
    with pytest.raises(LedgerCorruptError, match="fewer than the 3 witnessed"):
        Ledger.open(path, key=KEY)
    monkeypatch.setenv("DPKD_LEDGER_WITNESS_DIR", str(tmp_path / "another-machine"))
    assert Ledger.open(path, key=KEY).spent().charges == 2
    plain = _ledger(tmp_path / "plain.sqlite", n=2, key=None)
    old = plain.read_bytes()
    with Ledger.open(plain) as ledger:
        ledger.charge(PureDpEvent(0.5), label="later")
    plain.write_bytes(old)
    assert Ledger.open(plain).spent().charges == 2
