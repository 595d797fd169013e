"""The ledger's identity (budget, accountant class and configuration, relation) and migration."""

from __future__ import annotations

import hashlib
import sqlite3
import time

import pytest

from dpkd_audit import BudgetExceededError, Ledger, LedgerMismatchError
from dpkd_audit.accountants import (
    AdvancedCompositionAccountant,
    NeighboringRelation,
    OptimalCompositionAccountant,
    PATEAccountant,
    PLDAccountant,
    PureAccountant,
    RDPAccountant,
    ShuffleAccountant,
    ShuffleBound,
)
from dpkd_audit.errors import LedgerCorruptError, LedgerVersionError
from dpkd_audit.events import PureDpEvent, event_to_json
from dpkd_audit.ledger.identity import accountant_spec

ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE


@pytest.fixture(autouse=True)
def _no_key_in_environment(monkeypatch):
    monkeypatch.delenv("DPKD_LEDGER_KEY", raising=False)
    monkeypatch.delenv("DPKD_LEDGER_KEY_FILE", raising=False)


def test_second_handle_with_another_accountant_is_refused_not_overspent(tmp_path):
    """Issue 10: Pure-created ledger reopened with RDP accepted charges up to 2.8 of 1.0."""
    path = tmp_path / "l.sqlite"
    creator = Ledger(epsilon=1.0, path=path)
    creator.charge(PureDpEvent(0.4), label="first")
    with pytest.raises(LedgerMismatchError) as info:
        Ledger(epsilon=1.0, accountant=RDPAccountant(), path=path)
    message = str(info.value)
    assert "PureAccountant" in message and "RDPAccountant" in message and str(path) in message
    with pytest.raises(LedgerMismatchError, match="RDPAccountant"):
        Ledger.open(path, accountant=RDPAccountant())
    # Ledger.open without an accountant adopts the stored one: the budget still holds
    other = Ledger.open(path)
    assert type(other.accountant) is PureAccountant
    other.charge(PureDpEvent(0.5), label="second")
    with pytest.raises(BudgetExceededError):
        other.charge(PureDpEvent(0.2), label="third")
    assert float(creator.spent().epsilon) == pytest.approx(0.9)


CONFIGURED = [
    PureAccountant(ADD_REMOVE),
    AdvancedCompositionAccountant(ADD_REMOVE),
    OptimalCompositionAccountant(max_atoms=1024),
    RDPAccountant([1.5, 2.0, 8.0, float("inf")], ADD_REMOVE, refine=False),
    PLDAccountant(ADD_REMOVE, value_discretization_interval=1e-3),
    ShuffleAccountant(1e-7, bound=ShuffleBound.CLOSED_FORM),
    PATEAccountant([2.0, 4.0], data_dependent=False, neighboring_relation=ADD_REMOVE),
]


@pytest.mark.parametrize("accountant", CONFIGURED, ids=lambda a: type(a).__name__)
def test_open_adopts_the_stored_accountant_with_its_configuration(tmp_path, accountant):
    path = tmp_path / "l.sqlite"
    Ledger(epsilon=2.0, delta=1e-5, accountant=accountant, path=path).close()
    adopted = Ledger.open(path)
    assert type(adopted.accountant) is type(accountant)
    assert accountant_spec(adopted.accountant) == accountant_spec(accountant)
    assert (adopted.epsilon, adopted.delta) == (2.0, 1e-5)
    # the same accountant, built again, is accepted by the constructor and by open()
    Ledger(epsilon=2.0, delta=1e-5, accountant=adopted.accountant, path=path).close()
    Ledger.open(path, accountant=adopted.accountant).close()


@pytest.mark.parametrize(("stored", "given", "named"), [
    (PureAccountant(), PureAccountant(ADD_REMOVE), "neighboring_relation"),
    (RDPAccountant(), RDPAccountant([2.0, 3.0]), "orders"),
    (RDPAccountant(), RDPAccountant(refine=False), "refine"),
    (PLDAccountant(), PLDAccountant(value_discretization_interval=1e-2),
     "value_discretization_interval"),
    (ShuffleAccountant(1e-6), ShuffleAccountant(1e-7), "delta_per_release"),
    (OptimalCompositionAccountant(), OptimalCompositionAccountant(max_atoms=64), "max_atoms"),
    (PATEAccountant(), PATEAccountant(data_dependent=False), "data_dependent"),
    (PureAccountant(), AdvancedCompositionAccountant(), "AdvancedCompositionAccountant"),
], ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_another_configuration_is_refused_naming_it(tmp_path, stored, given, named):
    path = tmp_path / "l.sqlite"
    Ledger(epsilon=1.0, delta=1e-5, accountant=stored, path=path).close()
    for attempt in (lambda: Ledger(epsilon=1.0, delta=1e-5, accountant=given, path=path),
                    lambda: Ledger.open(path, accountant=given)):
        with pytest.raises(LedgerMismatchError, match=named) as info:
            attempt()
        assert str(path) in str(info.value) and "stored != given" in str(info.value)


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"epsilon": 2.0, "delta": 1e-6}, r"epsilon: 1\.0 != 2\.0"),
    ({"epsilon": 1.0, "delta": 1e-7}, r"delta: 1e-06 != 1e-07"),
])
def test_another_budget_is_refused_naming_stored_and_given(tmp_path, kwargs, named):
    path = tmp_path / "l.sqlite"
    Ledger(epsilon=1.0, delta=1e-6, path=path).close()
    with pytest.raises(LedgerMismatchError, match=named):
        Ledger(path=path, **kwargs)


def test_default_accountant_is_pure_so_an_rdp_file_needs_open(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(epsilon=1.0, delta=1e-5, accountant=RDPAccountant(), path=path).close()
    with pytest.raises(LedgerMismatchError, match=r"Ledger\.open\(path\) adopts"):
        Ledger(epsilon=1.0, delta=1e-5, path=path)
    assert type(Ledger.open(path).accountant) is RDPAccountant


class _CustomAccountant(PureAccountant):
    """A user accountant with one results-changing parameter."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale

    def ledger_config(self) -> dict:
        return {"scale": self.scale}


def test_custom_accountant_is_checked_and_must_be_passed_again(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(epsilon=1.0, accountant=_CustomAccountant(2.0), path=path).close()
    Ledger(epsilon=1.0, accountant=_CustomAccountant(2.0), path=path).close()
    with pytest.raises(LedgerMismatchError, match="scale"):
        Ledger(epsilon=1.0, accountant=_CustomAccountant(3.0), path=path)
    with pytest.raises(LedgerMismatchError, match="pass an equal instance"):
        Ledger.open(path)
    with pytest.raises(LedgerMismatchError, match="_CustomAccountant"):
        Ledger(epsilon=1.0, path=path)  # a subclass is not its base class
    assert Ledger.open(path, accountant=_CustomAccountant(2.0)).spent().charges == 0


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"path": 3}, "path"), ({"path": ""}, "path"), ({"timeout": 0}, "timeout"),
    ({"key": "short"}, "key"), ({"key": 5}, "key"),
])
def test_bad_file_parameters_are_named(tmp_path, kwargs, name):
    kwargs = {"path": tmp_path / "l.sqlite", **kwargs}
    with pytest.raises(ValueError, match=name):
        Ledger(epsilon=1.0, **kwargs)


def test_open_read_only_must_be_a_bool(tmp_path):
    Ledger(epsilon=1.0, path=tmp_path / "l.sqlite").close()
    with pytest.raises(ValueError, match="read_only"):
        Ledger.open(tmp_path / "l.sqlite", read_only="yes")


def test_key_for_an_in_memory_ledger_is_refused():
    with pytest.raises(ValueError, match="key"):
        Ledger(epsilon=1.0, key=b"k" * 32)


# ------------------------------------------------------------------------ schema-1 files


def _schema1_file(path, charges, accountant="PureAccountant", epsilon=1.0):
    """A ledger as dpkd-audit wrote it before issue 10 (schema 1)."""
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA application_id={0x64706B64}")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("CREATE TABLE charges (seq INTEGER PRIMARY KEY, label TEXT NOT NULL, "
                 "event TEXT NOT NULL, created REAL NOT NULL, pid INTEGER NOT NULL, "
                 "digest TEXT NOT NULL)")
    conn.executemany("INSERT INTO meta VALUES (?, ?)", [
        ("magic", "dpkd-audit-ledger"), ("schema", "1"), ("epsilon", repr(epsilon)),
        ("delta", "0.0"), ("accountant", accountant), ("created", repr(time.time()))])
    prev = "0" * 64
    for seq, (label, eps) in enumerate(charges, start=1):
        event = event_to_json(PureDpEvent(eps))
        prev = hashlib.sha256(f"{prev}\x1f{seq}\x1f{label}\x1f{event}".encode()).hexdigest()
        conn.execute("INSERT INTO charges VALUES (?, ?, ?, ?, ?, ?)",
                     (seq, label, event, 1.0e9 + seq, 4242, prev))
    conn.commit()
    conn.close()


def test_schema1_file_is_refused_with_a_migration_hint_then_migrated(tmp_path):
    path = tmp_path / "old.sqlite"
    _schema1_file(path, [("a", 0.25), ("b", 0.5)])
    before = path.read_bytes()
    with pytest.raises(LedgerVersionError, match=r"Ledger\.migrate"):
        Ledger.open(path)
    with pytest.raises(LedgerVersionError, match="schema 1"):
        Ledger(epsilon=1.0, path=path)
    assert path.read_bytes() == before  # refused, not reset
    with pytest.raises(LedgerMismatchError, match="PureAccountant"):
        Ledger.migrate(path, accountant=RDPAccountant())
    backup = Ledger.migrate(path, accountant=PureAccountant())
    assert backup.read_bytes() == before
    migrated = Ledger.open(path)
    assert [(c.label, c.created, c.pid) for c in migrated.charges()] == [
        ("a", 1.0e9 + 1, 4242), ("b", 1.0e9 + 2, 4242)]
    assert float(migrated.spent().epsilon) == pytest.approx(0.75)
    with pytest.raises(BudgetExceededError):
        migrated.charge(PureDpEvent(0.3), label="too much")
    with pytest.raises(LedgerVersionError, match="already"):
        Ledger.migrate(path, accountant=PureAccountant())


def test_schema1_file_with_a_broken_chain_is_not_migrated(tmp_path):
    path = tmp_path / "old.sqlite"
    _schema1_file(path, [("a", 0.25), ("b", 0.5)])
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM charges WHERE seq = 1")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerCorruptError, match="schema-1 chain"):
        Ledger.migrate(path, accountant=PureAccountant())
    assert not (tmp_path / "old.sqlite.schema1.bak").exists()


def test_schema1_file_over_its_budget_is_refused_not_migrated(tmp_path):
    # the README promises: a migration that would hold more than the budget is refused
    path = tmp_path / "old.sqlite"
    _schema1_file(path, [("a", 0.75), ("b", 0.5)], epsilon=1.0)
    before = path.read_bytes()
    with pytest.raises(LedgerMismatchError, match=r"spend epsilon=1\.25 > budget 1"):
        Ledger.migrate(path, accountant=PureAccountant())
    assert path.read_bytes() == before
    assert not (tmp_path / "old.sqlite.schema1.bak").exists()


def test_an_accountant_answering_nan_is_refused_before_anything_is_recorded(tmp_path):
    import math

    from dpkd_audit.accountants.base import BoundKind, Epsilon

    class NanAccountant(PureAccountant):
        def get_epsilon(self, target_delta):
            if self.is_empty:
                return super().get_epsilon(target_delta)
            return Epsilon(math.nan, method="stub", kind=BoundKind.UPPER_BOUND)

    for path in (None, tmp_path / "l.sqlite"):
        ledger = Ledger(epsilon=1.0, accountant=NanAccountant(), path=path)
        with pytest.raises(BudgetExceededError, match="refused"):
            ledger.charge(PureDpEvent(0.1), label="nan")
        assert ledger.charges() == []


def test_an_empty_key_in_the_environment_is_an_error_not_an_unkeyed_ledger(tmp_path,
                                                                           monkeypatch):
    for name in ("DPKD_LEDGER_KEY", "DPKD_LEDGER_KEY_FILE"):
        monkeypatch.delenv("DPKD_LEDGER_KEY", raising=False)
        monkeypatch.delenv("DPKD_LEDGER_KEY_FILE", raising=False)
        monkeypatch.setenv(name, "")
        with pytest.raises(ValueError, match=f"{name} is set but empty"):
            Ledger(epsilon=1.0, path=tmp_path / "k.sqlite")
        assert not (tmp_path / "k.sqlite").exists()


@pytest.mark.parametrize("event_text", [
    '{"__event__": "dp_accounting.dp_event:ComposedDpEvent", "fields": {"events": '
    + "[" * 20_000 + "]" * 20_000 + "}}",
    '{"__event__": "dp_accounting.dp_event:LaplaceDpEvent", "fields": {"noise_multiplier": '
    '"x"}}',
    '{"__event__": 7}',
])
def test_schema1_file_with_a_crafted_event_is_refused_as_corrupt(tmp_path, event_text):
    path = tmp_path / "old.sqlite"
    _schema1_file(path, [])
    conn = sqlite3.connect(path)
    digest = hashlib.sha256(f"{'0' * 64}\x1f1\x1fx\x1f{event_text}".encode()).hexdigest()
    conn.execute("INSERT INTO charges VALUES (1, 'x', ?, 1.0, 1, ?)", (event_text, digest))
    conn.commit()
    conn.close()
    with pytest.raises(LedgerCorruptError, match=r"cannot be read|damaged"):
        Ledger.migrate(path, accountant=PureAccountant())


@pytest.mark.parametrize("epsilon", [float("nan"), -1.0, 0.0])
def test_schema1_file_with_a_crafted_budget_is_refused_as_corrupt(tmp_path, epsilon):
    path = tmp_path / "old.sqlite"
    _schema1_file(path, [("a", 0.25)], epsilon=epsilon)
    with pytest.raises(LedgerCorruptError, match="metadata is damaged"):
        Ledger.migrate(path, accountant=PureAccountant())
