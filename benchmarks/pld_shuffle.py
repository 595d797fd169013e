"""Issue 9 benchmarks, in one process: exact RR compositions in the PLD accountant and the
O(sqrt n) FMT21 shuffle bound.

Run: ``python benchmarks/pld_shuffle.py``.

(a) n-fold k-ary randomized response (k = 10; p = 0.5, epsilon0 = ln 11 = 2.40 per release, and
    p = 0.853, epsilon0 = 1.00), epsilon at delta = 1e-5, value_discretization_interval 1e-4:
    - ours: ``PLDAccountant`` (exact lattice power, discretised once);
    - the previous implementation (repeated FFT squaring of the one-release PLD, still in the
      module as ``_self_compose``);
    - dp_accounting's PLD: ``from_randomized_response(p, k).self_compose(n)`` (its one-shot FFT
      power; the PLD of dp_accounting's REPLACE_ONE convention for this event is the same
      three-atom PLD, with atoms rounded up to the grid);
    - dp_accounting's ``PLDAccountant(REPLACE_ONE).compose(event, n)``, which in dp_accounting
      0.6.0 ignores ``count`` for ``RandomizedResponseDpEvent`` (it composes one release).
    FFT methods are skipped when their grid would exceed 5e7 points (~0.4 GB per array).
(b) FMT21 numerical epsilon (epsilon0 = 1, delta = 1e-6) at n = 10^3 .. 10^9: ours (cold
    caches) with its seconds and peak traced memory, and for n <= 10^7 the previous O(n)
    implementation (kept below, verbatim logic, not in the package).
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy
from dp_accounting import dp_event as _dp
from dp_accounting.pld import pld_privacy_accountant as dpa_accountant
from dp_accounting.pld import privacy_loss_distribution as dpa_pld

from dpkd_audit._math import shuffle as _shuffle_math

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from shuffle_reference import old_numerical_epsilon

from dpkd_audit.accountants import NeighboringRelation
from dpkd_audit.accountants.pld import PLDAccountant
from dpkd_audit.accountants.pld import evaluation as pld_eval
from dpkd_audit.accountants.pld import specs as pld_specs

DELTA_RR = 1e-5
INTERVAL = 1e-4
MAX_FFT_POINTS = 5e7


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


# =========================================================================== (a) RR


def rr_line(name: str, seconds: float | None, eps: float | None, ours_seconds: float | None,
            note: str = "") -> None:
    """One line; ``ours_seconds`` None: no time ratio printed."""
    if seconds is None:
        print(f"    {name:<44} {'skipped':>10}   {note}")
        return
    ratio = f"{seconds / ours_seconds:7.0f}x ours" if ours_seconds else " " * 12
    print(f"    {name:<44} {seconds:9.4f} s   eps {eps:14.6f}   {ratio} {note}")


def randomized_response(p: float, n: int) -> None:
    k = 10
    event = _dp.RandomizedResponseDpEvent(p, k)
    loss = math.log1p(k * (1 - p) / p)
    grid = 2 * n * loss / INTERVAL
    pld_specs.lattice_pld.cache_clear()
    t_ours, e_ours = timed(lambda: float(PLDAccountant().compose(event, n).get_epsilon(DELTA_RR)))
    print(f"  {n:>6,} x RR(p={p}, k={k}), epsilon0 = {loss:.4f}, loss grid ~{grid:.1e} points")
    rr_line("ours (exact lattice power)", t_ours, e_ours, None)
    if grid <= MAX_FFT_POINTS:
        single = PLDAccountant().event_pld(event)
        t_old, e_old = timed(lambda: pld_eval._pld_epsilon(
            pld_specs._self_compose(single, n), DELTA_RR))
        rr_line("previous: repeated FFT squaring", t_old, e_old, t_ours)
        t_ref, e_ref = timed(lambda: dpa_pld.from_randomized_response(
            p, k, value_discretization_interval=INTERVAL).self_compose(n)
            .get_epsilon_for_delta(DELTA_RR))
        rr_line("dp_accounting PLD self_compose(n)", t_ref, e_ref, t_ours)
    else:
        rr_line("previous: repeated FFT squaring", None, None, t_ours, "grid too large")
        rr_line("dp_accounting PLD self_compose(n)", None, None, t_ours, "grid too large")
    t_acc, e_acc = timed(lambda: dpa_accountant.PLDAccountant(
        NeighboringRelation.REPLACE_ONE, value_discretization_interval=INTERVAL)
        .compose(event, n).get_epsilon(DELTA_RR))
    rr_line("dp_accounting PLDAccountant.compose(e, n)", t_acc, e_acc, None,
            "(ignores count: one release)")


# =========================================================================== (b) shuffle


def new_numerical_epsilon(eps0: float, n: int, delta: float) -> float:
    _shuffle_math._numerical_epsilon.cache_clear()
    _shuffle_math._window.cache_clear()
    return _shuffle_math.numerical_epsilon(eps0, n, delta)


def peak_megabytes(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1e6


def shuffle() -> None:
    print("(b) FMT21 numerical epsilon, epsilon0 = 1, delta = 1e-6 (cold caches)")
    print(f"  {'n':>13}  {'ours eps':>22} {'s':>8} {'peak MB':>8}   "
          f"{'previous eps':>22} {'s':>8} {'peak MB':>8}  {'rel diff':>9}")
    for exponent in range(3, 10):
        n = 10**exponent
        t_new, e_new = timed(lambda n=n: new_numerical_epsilon(1.0, n, 1e-6))
        mb_new = peak_megabytes(lambda n=n: new_numerical_epsilon(1.0, n, 1e-6))
        old = ""
        if n <= 10**7:
            t_old, e_old = timed(lambda n=n: old_numerical_epsilon(1.0, n, 1e-6))
            mb_old = peak_megabytes(lambda n=n: old_numerical_epsilon(1.0, n, 1e-6))
            old = (f"{e_old:22.17g} {t_old:8.3f} {mb_old:8.1f}  "
                   f"{(e_new - e_old) / e_old:9.1e}")
        print(f"  {n:>13,}  {e_new:22.17g} {t_new:8.3f} {mb_new:8.1f}   {old}")


def main() -> None:
    version = importlib.metadata.version("dp-accounting")
    print(f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
          f"dp_accounting {version}, {platform.machine()}, {os.cpu_count()} cpus")
    print(f"(a) n-fold k-ary randomized response, epsilon at delta = {DELTA_RR}, "
          f"interval {INTERVAL}")
    for n in (100, 1_000, 10_000):
        randomized_response(0.5, n)
    p_one = 10 / (math.e + 9)  # epsilon0 = 1
    for n in (1_000, 10_000):
        randomized_response(round(p_one, 6), n)
    shuffle()


if __name__ == "__main__":
    main()
