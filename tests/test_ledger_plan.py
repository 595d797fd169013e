"""A plan of charges is all or nothing (``Ledger.charge_all``; issue 33: a sweep paused or killed
between its plan check and its charges kept a partial charge that ``--resume`` could not finish)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from dpkd_audit import BudgetExceededError, Ledger
from dpkd_audit.events import PureDpEvent

PLAN = 3_000  # charges per plan in the kill test: ~0.1-0.3 s of work to kill inside


@pytest.fixture(autouse=True)
def _no_key_in_environment(monkeypatch):
    monkeypatch.delenv("DPKD_LEDGER_KEY", raising=False)
    monkeypatch.delenv("DPKD_LEDGER_KEY_FILE", raising=False)


@pytest.mark.parametrize("on_disk", [True, False])
def test_a_plan_is_recorded_in_order_as_its_own_rows(tmp_path, on_disk):
    path = tmp_path / "l.sqlite" if on_disk else None
    ledger = Ledger(epsilon=10.0, path=path)
    ledger.charge(PureDpEvent(1.0), label="before")
    charges = ledger.charge_all([(PureDpEvent(0.5), "a"), (PureDpEvent(0.25), "b"),
                                 (PureDpEvent(2.0), "c")])
    assert [c.seq for c in charges] == [2, 3, 4]
    assert [c.label for c in charges] == ["a", "b", "c"]
    assert float(ledger.spent().epsilon) == pytest.approx(3.75)
    if on_disk:
        ledger.close()
        again = Ledger.open(path, read_only=True)  # the chain verifies row by row
        assert [c.label for c in again.charges()] == ["before", "a", "b", "c"]
        assert float(again.spent().epsilon) == pytest.approx(3.75)


@pytest.mark.parametrize("on_disk", [True, False])
def test_a_plan_over_the_budget_records_nothing_even_if_each_charge_fits(tmp_path, on_disk):
    path = tmp_path / "l.sqlite" if on_disk else None
    ledger = Ledger(epsilon=1.0, path=path)
    with pytest.raises(BudgetExceededError, match="other charges of its plan"):
        ledger.charge_all([(PureDpEvent(0.4), f"run {i}") for i in range(3)])
    assert ledger.spent().charges == 0
    if on_disk:
        assert Ledger.open(path, read_only=True).spent().charges == 0
    with pytest.raises(ValueError, match="at least one"):
        ledger.charge_all([])
    with pytest.raises(ValueError):
        ledger.charge_all([(PureDpEvent(0.1), "ok"), (PureDpEvent(0.1), "")])
    assert ledger.spent().charges == 0


def test_the_plan_is_checked_against_charges_made_after_an_earlier_check(tmp_path):
    """A check, then another process spends, then the plan: refused whole, nothing recorded."""
    path = tmp_path / "l.sqlite"
    planner = Ledger(epsilon=1.0, path=path)
    plan = [(PureDpEvent(0.3), "run 1"), (PureDpEvent(0.3), "run 2")]
    planner.check([e for e, _ in plan], label="sweep")  # fits now
    Ledger.open(path).charge(PureDpEvent(0.5), label="someone else")
    with pytest.raises(BudgetExceededError):
        planner.charge_all(plan)
    assert [c.label for c in Ledger.open(path, read_only=True).charges()] == ["someone else"]


def _charge_plan(path, size, go, done) -> None:  # runs in a forked child
    ledger = Ledger.open(path)
    plan = [(PureDpEvent(1e-6), f"plan charge {i}") for i in range(size)]
    go.wait()
    ledger.charge_all(plan)
    done.set()


def test_killing_a_plan_midway_leaves_all_of_it_or_none(tmp_path):
    """SIGKILL at random moments while a 3,000-charge plan is written: the file always holds
    a whole number of plans (fixed seed: deterministic delays, 12 trials; the delays span the
    plan's measured writing time, so most kills land inside it)."""
    import multiprocessing
    import random

    ctx = multiprocessing.get_context("fork")  # the child needs no imports: trials are cheap
    path = tmp_path / "l.sqlite"
    Ledger(epsilon=1.0, path=path).close()

    def trial(delay: float | None) -> bool:
        go, done = ctx.Event(), ctx.Event()
        child = ctx.Process(target=_charge_plan, args=(path, PLAN, go, done))
        child.start()
        time.sleep(0.2)  # let it open the ledger and build its plan
        started = time.perf_counter()
        go.set()
        if delay is None:
            child.join(timeout=60)
            return time.perf_counter() - started
        time.sleep(delay)
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)
        count = Ledger.open(path, read_only=True).spent().charges
        assert count % PLAN == 0, f"a partial plan: {count} charges"
        return not done.is_set()

    took = trial(None)  # how long one plan takes here
    rng = random.Random(5)
    inside = sum(trial(rng.uniform(0.0, 1.2 * took)) for _ in range(12))
    assert inside >= 3  # the test did kill inside plans
