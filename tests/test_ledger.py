"""The ledger: refusal semantics, durability under kill -9, multi-process safety, bad files."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from dp_accounting import dp_event as _dp

from dpkd_audit import (
    BudgetExceededError,
    Ledger,
    LedgerCorruptError,
    LedgerError,
    LedgerMismatchError,
)
from dpkd_audit.accountants import PureAccountant, UnsupportedEventError
from dpkd_audit.events import ApproxDpEvent, PureDpEvent
from dpkd_audit.mechanisms.continuous import Gaussian, Laplace

# ------------------------------------------------------------------------ in-memory semantics


def test_refused_charge_records_nothing_and_mechanism_releases_nothing():
    ledger = Ledger(epsilon=1.0)
    mech = Laplace(epsilon=0.4)

    class CountingRng(np.random.Generator):
        draws = 0

        def integers(self, *args, **kwargs):  # the exact discrete Laplace's draws
            CountingRng.draws += 1
            return super().integers(*args, **kwargs)

    rng = CountingRng(np.random.PCG64(0))
    mech.release(1.0, rng=rng, ledger=ledger)
    mech.release(1.0, rng=rng, ledger=ledger)
    drawn = CountingRng.draws
    assert drawn >= 2
    with pytest.raises(BudgetExceededError, match="refused"):
        mech.release(1.0, rng=rng, ledger=ledger)
    assert CountingRng.draws == drawn  # nothing sampled after the refusal
    spent = ledger.spent()
    assert spent.charges == 2
    assert float(spent.epsilon) == pytest.approx(0.8)
    assert spent.epsilon.method == "basic composition"


def test_exact_budget_use_is_accepted_despite_float_rounding():
    ledger = Ledger(epsilon=1.0)
    for _ in range(10):
        ledger.charge(PureDpEvent(0.1), label="tenth")
    with pytest.raises(BudgetExceededError):
        ledger.charge(PureDpEvent(1e-6), label="one too many")
    assert ledger.spent().charges == 10


def test_delta_zero_budget_refuses_approximate_events():
    ledger = Ledger(epsilon=10.0, delta=0.0)
    with pytest.raises(BudgetExceededError):
        ledger.charge(ApproxDpEvent(0.1, 1e-9), label="approx")
    assert ledger.spent().charges == 0


def test_approximate_budget_sums_deltas():
    ledger = Ledger(epsilon=10.0, delta=1e-5)
    mech = Gaussian(epsilon=1.0, delta=4e-6)
    rng = np.random.default_rng(1)
    mech.release(0.0, rng=rng, ledger=ledger)
    mech.release(0.0, rng=rng, ledger=ledger)
    with pytest.raises(BudgetExceededError):
        mech.release(0.0, rng=rng, ledger=ledger)  # deltas would sum to 1.2e-5 > 1e-5


def test_unsupported_event_is_named_and_records_nothing():
    ledger = Ledger(epsilon=1.0)
    event = _dp.PoissonSampledDpEvent(0.1, _dp.GaussianDpEvent(1.0))
    with pytest.raises(UnsupportedEventError, match="PoissonSampledDpEvent"):
        ledger.charge(event, label="sgd")
    assert ledger.spent().charges == 0


def test_non_private_event_is_refused_by_any_finite_budget():
    ledger = Ledger(epsilon=100.0)
    with pytest.raises(BudgetExceededError, match="inf"):
        ledger.charge(_dp.NonPrivateDpEvent(), label="generator fitted to a non-private teacher")


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": math.nan}, "epsilon"), ({"epsilon": math.inf}, "epsilon"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta"), ({"epsilon": 1.0, "delta": -0.1}, "delta"),
    ({"epsilon": 1.0, "delta": math.nan}, "delta"), ({"epsilon": 1.0, "accountant": "pure"},
                                                      "accountant"),
])
def test_bad_budget_parameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Ledger(**kwargs)


def test_label_required_and_accountant_must_be_empty():
    ledger = Ledger(epsilon=1.0)
    with pytest.raises(ValueError, match="label"):
        ledger.charge(PureDpEvent(0.1), label="  ")
    used = PureAccountant().compose(PureDpEvent(0.1))
    with pytest.raises(ValueError, match="accountant"):
        Ledger(epsilon=1.0, accountant=used)


# ------------------------------------------------------------------------ persistence


def test_restart_resumes_spent_budget(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(epsilon=1.0, path=path) as ledger:
        ledger.charge(PureDpEvent(0.3), label="first")
        ledger.charge(_dp.SelfComposedDpEvent(_dp.LaplaceDpEvent(10.0), 4), label="four")
    reopened = Ledger(epsilon=1.0, path=path)
    assert float(reopened.spent().epsilon) == pytest.approx(0.7)
    assert [c.label for c in reopened.charges()] == ["first", "four"]
    assert reopened.charges()[1].event == _dp.SelfComposedDpEvent(_dp.LaplaceDpEvent(10.0), 4)
    with pytest.raises(BudgetExceededError):
        reopened.charge(PureDpEvent(0.31), label="too much")


def test_closed_ledger_refuses_to_charge(tmp_path):
    ledger = Ledger(epsilon=1.0, path=tmp_path / "l.sqlite")
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.charge(PureDpEvent(0.1), label="late")


def test_budget_mismatch_is_refused(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(epsilon=1.0, delta=1e-6, path=path).close()
    with pytest.raises(LedgerMismatchError, match=r"epsilon=1\.0"):
        Ledger(epsilon=2.0, delta=1e-6, path=path)


@pytest.mark.parametrize("content", [b"", b"hello, I am a text file\n", b"\x00" * 4096])
def test_foreign_or_empty_file_is_refused_and_left_alone(tmp_path, content):
    path = tmp_path / "not-a-ledger"
    path.write_bytes(content)
    with pytest.raises(LedgerCorruptError, match="refusing"):
        Ledger(epsilon=1.0, path=path)
    assert path.read_bytes() == content  # never reset


def test_other_sqlite_database_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerCorruptError, match="not a dpkd-audit ledger"):
        Ledger(epsilon=1.0, path=path)


def test_damaged_file_is_refused(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(epsilon=1.0, path=path) as ledger:
        for i in range(50):
            ledger.charge(PureDpEvent(0.01), label=f"c{i}")
    data = bytearray(path.read_bytes())
    for i in range(100, len(data), 7):  # overwrite most of the file past the header
        data[i] = 0xA5
    path.write_bytes(bytes(data))
    with pytest.raises(LedgerCorruptError):
        Ledger(epsilon=1.0, path=path)


def test_altered_charge_is_detected_by_the_digest_chain(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(epsilon=1.0, path=path) as ledger:
        ledger.charge(PureDpEvent(0.5), label="big")
        ledger.charge(PureDpEvent(0.1), label="small")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE charges SET event = replace(event, '0.5', '0.05') WHERE seq = 1")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerCorruptError, match="digest"):
        Ledger(epsilon=1.0, path=path)


def test_deleted_charge_is_detected(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(epsilon=1.0, path=path) as ledger:
        for i in range(3):
            ledger.charge(PureDpEvent(0.2), label=f"c{i}")
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM charges WHERE seq = 2")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerCorruptError):
        Ledger(epsilon=1.0, path=path)


# ------------------------------------------------------------------------ crash and concurrency

_CHILD_SETUP = textwrap.dedent("""
    import json, sys
    from dpkd_audit import Ledger, BudgetExceededError
    from dpkd_audit.events import PureDpEvent
""")


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CHILD_SETUP + textwrap.dedent(code), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("kill_after", [1, 7, 25])
def test_kill_9_right_after_a_charge_loses_nothing(tmp_path, kill_after):
    path = tmp_path / "l.sqlite"
    child = _python("""
        ledger = Ledger(epsilon=1000.0, path=sys.argv[1])
        i = 0
        while True:
            ledger.charge(PureDpEvent(0.001), label=f"c{i}")
            print(i, flush=True)   # printed only after charge() returned
            i += 1
    """, str(path))
    acknowledged = []
    for line in child.stdout:
        acknowledged.append(int(line))
        if len(acknowledged) >= kill_after:
            os.kill(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    labels = [c.label for c in Ledger(epsilon=1000.0, path=path).charges()]
    # every acknowledged charge survived, in order; at most the in-flight one may follow
    assert labels[: len(acknowledged)] == [f"c{i}" for i in acknowledged]
    assert len(labels) <= len(acknowledged) + 1


def test_four_processes_never_overspend(tmp_path):
    path = tmp_path / "shared.sqlite"
    budget = 1.0
    Ledger(epsilon=budget, path=path).close()
    children = [_python("""
        import random
        rnd = random.Random(int(sys.argv[2]))
        ledger = Ledger(epsilon=1.0, path=sys.argv[1])
        out = []
        for i in range(40):
            eps = rnd.choice([0.013, 0.021, 0.034, 0.055])
            try:
                ledger.charge(PureDpEvent(eps), label=f"p{sys.argv[2]}-{i}")
                out.append(["ok", eps])
            except BudgetExceededError:
                out.append(["refused", eps])
            except Exception as exc:
                out.append(["other:" + type(exc).__name__, eps])
        print(json.dumps(out))
    """, str(path), str(seed)) for seed in range(4)]
    outcomes = []
    for child in children:
        stdout, stderr = child.communicate(timeout=300)
        assert child.returncode == 0, stderr
        outcomes.extend(json.loads(stdout))
    kinds = {kind for kind, _ in outcomes}
    assert kinds <= {"ok", "refused"}  # every refusal was a BudgetExceededError
    accepted = [eps for kind, eps in outcomes if kind == "ok"]
    assert "refused" in kinds  # 160 attempts averaging 0.03 cannot all fit in 1.0
    assert math.fsum(accepted) <= budget * (1 + 1e-12)
    charges = Ledger(epsilon=budget, path=path).charges()
    assert len(charges) == len(accepted)
    assert math.fsum(c.event.epsilon for c in charges) == pytest.approx(math.fsum(accepted))
    # the budget was used up: no remaining room for the smallest charge
    assert budget - math.fsum(accepted) < 0.013 + 1e-9


def test_concurrent_creation_yields_one_ledger(tmp_path):
    path = tmp_path / "new.sqlite"
    children = [_python("""
        ledger = Ledger(epsilon=1.0, path=sys.argv[1])
        ledger.charge(PureDpEvent(0.1), label=sys.argv[2])
        print("ok")
    """, str(path), f"p{i}") for i in range(4)]
    for child in children:
        _stdout, stderr = child.communicate(timeout=120)
        assert child.returncode == 0, stderr
    assert sorted(c.label for c in Ledger(epsilon=1.0, path=path).charges()) == [
        "p0", "p1", "p2", "p3"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_charges_are_visible_to_other_handles_immediately(tmp_path):
    path = tmp_path / "l.sqlite"
    a = Ledger(epsilon=1.0, path=path)
    b = Ledger(epsilon=1.0, path=path)
    a.charge(PureDpEvent(0.6), label="a")
    start = time.perf_counter()
    with pytest.raises(BudgetExceededError):
        b.charge(PureDpEvent(0.6), label="b")
    assert time.perf_counter() - start < 5
    assert b.spent().charges == 1


_RACER = """
    import threading, time
    path, seconds, name, reader = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
    ledger = Ledger.open(path)
    stop = threading.Event()
    errors = []

    def open_and_close():  # a second handle in another thread of the same process
        while not stop.is_set():
            try:
                Ledger.open(path, read_only=True).close()
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(f"reader: {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=open_and_close, daemon=True)
    if reader == "1":
        thread.start()
    acknowledged = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            label = f"{name}-{len(acknowledged)}"
            ledger.charge(PureDpEvent(1e-6), label=label)
            acknowledged.append(label)
    except Exception as exc:  # noqa: BLE001 - reported below
        errors.append(f"writer: {type(exc).__name__}: {exc}")
    stop.set()
    if reader == "1":
        thread.join()
    print(json.dumps({"acknowledged": acknowledged, "errors": errors}))
"""

#: Seconds of the race below. Measured with the header read by os.open + os.close (the bug of
#: issue 33), both processes with a reader thread, 2 cores shared with a training run: 4 of 4
#: runs of 8 s failed (SQLITE_IOERR_RDLOCK in a writer; with one reader thread only 1 of 3);
#: with the fix 4 of 4 passed. False-failure rate with the fix: 0 (the race is gone).
RACE_SECONDS = 8.0


def test_a_second_handle_in_another_thread_never_drops_the_writers_lock(tmp_path):
    """Issue 33: two processes charge one ledger while each also opens and closes read-only
    handles in a second thread. Closing a descriptor of the ledger file used to drop
    the process's SQLite (POSIX) locks, so the other process wrote during a charge: I/O errors,
    lost acknowledged charges, a malformed file. Checked: no error anywhere, every acknowledged
    charge in the file, the file still opens."""
    path = tmp_path / "race.sqlite"
    Ledger(epsilon=1e6, path=path).close()
    children = [_python(_RACER, str(path), str(RACE_SECONDS), name, "1") for name in "ab"]
    acknowledged, errors = [], []
    for child in children:
        stdout, stderr = child.communicate(timeout=120)
        assert child.returncode == 0, stderr
        result = json.loads(stdout)
        acknowledged += result["acknowledged"]
        errors += result["errors"]
    assert errors == []
    labels = {c.label for c in Ledger.open(path).charges()}  # opens: not malformed
    assert set(acknowledged) <= labels
    assert len(acknowledged) > 50  # both really charged during the race


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_stray_wal_beside_a_ledger_is_refused_and_never_merged(tmp_path, suffix):
    """Issue 33: SQLite merges a -wal beside a database into it on open, even read-only; a
    ledger never writes one (rollback journal), so a stray one is refused by name."""
    import sqlite3
    from pathlib import Path

    path = tmp_path / "l.sqlite"
    with Ledger(epsilon=1.0, path=path) as ledger:
        ledger.charge(PureDpEvent(0.25), label="a")
    other = tmp_path / "other.sqlite"  # a WAL-mode database whose -wal is copied beside it
    conn = sqlite3.connect(other)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    stray = Path(f"{path}{suffix}")
    source = Path(f"{other}{suffix}")
    stray.write_bytes(source.read_bytes() if source.exists() else b"\0" * 32)
    conn.close()
    before = path.read_bytes()
    for opener in (lambda: Ledger.open(path, read_only=True), lambda: Ledger.open(path),
                   lambda: Ledger(epsilon=1.0, path=path)):
        with pytest.raises(LedgerCorruptError, match=rf"a {suffix} file lies beside it"):
            opener()
    assert path.read_bytes() == before and stray.exists()
    stray.unlink()
    assert [c.label for c in Ledger.open(path, read_only=True).charges()] == ["a"]


def test_descriptors_kept_for_headers_do_not_pile_up_for_deleted_ledgers(tmp_path):
    """The header descriptor of each ledger file is kept for the process's life (issue 33), but
    not once the file is deleted: a process creating many short-lived ledgers keeps few."""
    from dpkd_audit.ledger import store as ledger_store

    def kept() -> int:
        return len(ledger_store._HEADER_FDS) + len(ledger_store._SPARE_FDS)

    before = kept()  # other tests' ledgers (their folders are not deleted) stay counted
    for i in range(60):
        path = tmp_path / f"l{i}.sqlite"
        with Ledger(epsilon=1.0, path=path) as ledger:
            ledger.charge(PureDpEvent(0.1), label="x")
        path.unlink()
    Ledger(epsilon=1.0, path=tmp_path / "last.sqlite").close()
    assert kept() - before < 10
