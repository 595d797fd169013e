"""A keyed ledger stays keyed and never goes back (issue 33), through its witness.

The attacks are those found from outside: a keyed file rewritten without its MAC (a valid plain
SHA-256 chain anyone can recompute) and opened without a key; an earlier head put back with the
rows after it deleted; the file deleted (a reset). Each is refused by name; each test also
shows the attack got through the file's own checks (so the witness is what stops it).
"""

from __future__ import annotations

import sqlite3

import pytest
from ledger_helpers import rewrite_unkeyed

from dpkd_audit import Ledger
from dpkd_audit.errors import LedgerCorruptError, LedgerKeyError
from dpkd_audit.events import PureDpEvent
from dpkd_audit.ledger.witness import WITNESS_DIR_ENV, witness_path

KEY = b"k" * 32


@pytest.fixture(autouse=True)
def _own_witness_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(WITNESS_DIR_ENV, str(tmp_path / "witness"))
    monkeypatch.delenv("DPKD_LEDGER_KEY", raising=False)
    monkeypatch.delenv("DPKD_LEDGER_KEY_FILE", raising=False)


def _keyed(path, charges=3):
    ledger = Ledger(epsilon=10.0, path=path, key=KEY)
    for i in range(charges):
        ledger.charge(PureDpEvent(1.0), label=f"charge {i}")
    ledger.close()


def test_a_stripped_mac_is_refused_without_a_key(tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite"
    _keyed(path)
    rewrite_unkeyed(path)
    with pytest.raises(LedgerKeyError, match="held a keyed ledger"):
        Ledger.open(path)
    with pytest.raises(LedgerKeyError, match="held a keyed ledger"):
        Ledger.open(path, read_only=True)
    with pytest.raises(LedgerKeyError, match="no MAC"):  # the file's own check, with the key
        Ledger.open(path, key=KEY)
    # the stripped file is a valid unkeyed ledger: only the witness stops it
    monkeypatch.setenv(WITNESS_DIR_ENV, str(tmp_path / "another-machine"))
    assert Ledger.open(path).spent().charges == 3


def test_an_earlier_head_put_back_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite"
    ledger = Ledger(epsilon=10.0, path=path, key=KEY)
    ledger.charge(PureDpEvent(1.0), label="first")
    conn = sqlite3.connect(path)
    early = conn.execute("SELECT count, digest, genesis, tag FROM head").fetchone()
    conn.close()
    ledger.charge(PureDpEvent(1.0), label="second")
    ledger.charge(PureDpEvent(1.0), label="third")
    ledger.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE head SET count = ?, digest = ?, genesis = ?, tag = ? WHERE id = 1", early)
    conn.execute("DELETE FROM charges WHERE seq > 1")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerCorruptError, match="fewer than the 3 witnessed"):
        Ledger.open(path, key=KEY)
    monkeypatch.setenv(WITNESS_DIR_ENV, str(tmp_path / "another-machine"))
    assert Ledger.open(path, key=KEY).spent().charges == 1  # the file alone cannot tell


def test_another_ledger_or_another_history_at_the_path_is_refused(tmp_path):
    path, other = tmp_path / "l.sqlite", tmp_path / "other.sqlite"
    _keyed(path)
    _keyed(other, charges=5)
    path.unlink()
    other.rename(path)
    with pytest.raises(LedgerCorruptError, match="another ledger id"):
        Ledger.open(path, key=KEY)


def test_a_deleted_keyed_ledger_is_never_silently_reset(tmp_path):
    path = tmp_path / "l.sqlite"
    _keyed(path)
    path.unlink()
    with pytest.raises(LedgerKeyError, match="never reset"):
        Ledger(epsilon=10.0, path=path, key=KEY)
    with pytest.raises(LedgerKeyError, match="never reset"):
        Ledger(epsilon=10.0, path=path)
    assert not path.exists()  # nothing was created
    witness_path(path).unlink()  # on purpose, by hand: a new budget
    Ledger(epsilon=10.0, path=path, key=KEY).close()


def test_the_witness_follows_every_charge_and_tolerates_lagging(tmp_path):
    path = tmp_path / "l.sqlite"
    _keyed(path, charges=2)
    before = witness_path(path).read_bytes()
    ledger = Ledger.open(path, key=KEY)
    ledger.charge_all([(PureDpEvent(0.5), "a"), (PureDpEvent(0.5), "b")])
    assert b'"count": 4' in witness_path(path).read_bytes()
    ledger.close()
    witness_path(path).write_bytes(before)  # a witness behind the file (a crash after commit)
    assert Ledger.open(path, key=KEY).spent().charges == 4


def test_a_forged_witness_is_refused(tmp_path):
    path = tmp_path / "l.sqlite"
    _keyed(path)
    target = witness_path(path)
    target.write_text(target.read_text().replace('"count": 3', '"count": 9'))
    with pytest.raises(LedgerKeyError, match="does not verify"):
        Ledger.open(path, key=KEY)
    target.write_text("{not json")
    with pytest.raises(LedgerKeyError, match="unreadable"):
        Ledger.open(path, key=KEY)


def test_unkeyed_ledgers_write_no_witness(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(epsilon=1.0, path=path).charge(PureDpEvent(0.1), label="x")
    assert not witness_path(path).exists()


def test_an_unwritable_witness_folder_warns_but_never_loses_the_charge(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv(WITNESS_DIR_ENV, str(blocker / "witness"))
    path = tmp_path / "l.sqlite"
    with pytest.warns(RuntimeWarning, match="could not write its witness"):
        ledger = Ledger(epsilon=10.0, path=path, key=KEY)
    with pytest.warns(RuntimeWarning, match="could not write its witness"):
        ledger.charge(PureDpEvent(1.0), label="kept")
    assert Ledger.open(path, key=KEY, read_only=True).spent().charges == 1


def test_a_key_file_or_witness_that_is_the_ledger_itself_is_refused_without_opening_it(
        tmp_path, monkeypatch):
    """Opening and closing the ledger file outside SQLite drops the process's locks (issue 33):
    a key file that is an open ledger is refused on its device and inode, before any open; any
    other SQLite file is refused after reading."""
    import os

    from dpkd_audit.ledger import store as ledger_store

    path = tmp_path / "l.sqlite"
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    ledger = Ledger(epsilon=10.0, path=path, key_file=key_file)
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open",
                        lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))
    with pytest.raises(LedgerKeyError, match="a ledger this process has open"):
        Ledger.open(path, key_file=path)
    assert str(path) not in opened
    link = tmp_path / "hard-link"
    os.link(path, link)
    with pytest.raises(LedgerKeyError, match="a ledger this process has open"):
        Ledger.open(path, key_file=link)
    monkeypatch.setattr(os, "open", real_open)
    other = tmp_path / "other.sqlite"  # an SQLite file this process never opened as a ledger
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    assert not ledger_store.is_open_ledger(other)
    with pytest.raises(LedgerKeyError, match="SQLite database"):
        Ledger.open(path, key_file=other)
    ledger.charge(PureDpEvent(1.0), label="still fine")
    assert Ledger.open(path, key_file=key_file).spent().charges == 1
