"""PLD epsilons at tiny deltas against prv-accountant, dp_accounting and RDP (issue 65).

Prints, for the issue's cases, this package's PLD (tilted composition), dp_accounting's own
PLDAccountant, this package's RDP and prv-accountant's [lower, estimate, upper] (Gopi, Lee,
Wutschitz 2021; ``pip install prv-accountant``, optional: skipped when missing), each with its
time; then the inverse (noise for a target at delta 1e-12, library and CLI), and the two plans
the issue measured as slow, timed in this process.

Usage: python benchmarks/pld_tiny_delta.py
"""

from __future__ import annotations

import math
import platform
import time
from importlib.metadata import version

import numpy as np
from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant

from dpkd_audit.accountants.base import NeighboringRelation
from dpkd_audit.accountants.budget import Plan, PlanKind, mixed_budget_table, solve
from dpkd_audit.accountants.dp_sgd import (
    DpSgdAccountant,
    DpSgdSchedule,
    calibrate_dp_sgd_noise,
)
from dpkd_audit.accountants.pld import PLDAccountant
from dpkd_audit.accountants.rdp import RDPAccountant

CASES = [(0.004, 1.0, 10_000, 1e-12), (0.004, 1.0, 10_000, 1e-13),
         (0.004, 1.0, 10_000, 1e-14), (0.01, 3.2, 2_000, 1e-12), (0.01, 3.2, 2_000, 1e-14)]


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def _prv(q: float, sigma: float, steps: int, delta: float) -> str:
    try:
        from prv_accountant.dpsgd import DPSGDAccountant
    except ImportError:
        return "prv-accountant not installed"
    try:
        acc = DPSGDAccountant(noise_multiplier=sigma, sampling_probability=q, eps_error=0.01,
                              delta_error=delta / 1000, max_steps=steps)
        low, est, high = acc.compute_epsilon(delta=delta, num_steps=steps)
    except ValueError as exc:
        return f"prv-accountant: {str(exc)[:60]}"
    return f"prv [{low:.4f}, {est:.4f}, {high:.4f}]"


def main() -> None:
    print(f"python {platform.python_version()}, dp_accounting {version('dp-accounting')}, "
          f"numpy {np.__version__}, {platform.machine()}")
    relation = NeighboringRelation.ADD_OR_REMOVE_ONE
    for q, sigma, steps, delta in CASES:
        event = dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(sigma))
        ours, t_ours = _timed(lambda e=event, n=steps, d=delta: float(
            PLDAccountant(relation).compose(e, n).get_epsilon(d)))
        rdp = float(RDPAccountant(neighboring_relation=relation).compose(event, steps)
                    .get_epsilon(delta))

        def theirs(e=event, n=steps, d=delta) -> float:
            acc = pld_privacy_accountant.PLDAccountant()
            acc.compose(e, n)
            return acc.get_epsilon(d)

        dpa, t_dpa = _timed(theirs)
        print(f"q={q} sigma={sigma} steps={steps} delta={delta:g}: ours PLD {ours:.4f} "
              f"({t_ours:.2f} s), dp_accounting PLD {dpa:.4f} ({t_dpa:.2f} s), RDP {rdp:.4f}, "
              f"{_prv(q, sigma, steps, delta)}")
    schedule = DpSgdSchedule(dataset_size=60_000, batch_size=256)
    for kind in (DpSgdAccountant.PLD, DpSgdAccountant.RDP):
        sigma, seconds = _timed(lambda k=kind: calibrate_dp_sgd_noise(
            schedule, epochs=20, target_epsilon=1.0, delta=1e-12, accountant=k))
        print(f"calibrate_dp_sgd_noise N=60,000 B=256 20 epochs target 1 delta 1e-12 "
              f"({kind.name}): sigma {sigma:.4f} ({seconds:.2f} s)")
    rows, seconds = _timed(lambda: solve(
        Plan(kind=PlanKind.DP_SGD, noise=None, epochs=20, dataset_size=60_000,
             batch_size=256), target_epsilon=1.0, delta=1e-12))
    print("dpkd budget dp-sgd ... --delta 1e-12 --target-epsilon 1: " + ", ".join(
        f"{r.accountant} {r.solved:.4f}" for r in rows if r.solved is not None)
        + f" ({seconds:.2f} s)")
    phases = [Plan(kind=PlanKind.SUBSAMPLED_GAUSSIAN,
                   noise=round(2.0 - 1.3 * i / 19, 4), queries=245,
                   sampling_probability=1 / 245) for i in range(20)]
    rows, seconds = _timed(lambda: mixed_budget_table(phases, delta=1e-5))
    print("20-phase DP-SGD plan (q = 1/245, 245 steps each, sigma 2.0 -> 0.7), delta 1e-5: "
          + ", ".join(f"{r.accountant} {r.epsilon:.5f}" for r in rows
                      if r.epsilon is not None and math.isfinite(r.epsilon))
          + f" ({seconds:.2f} s)")
    rows, seconds = _timed(lambda: solve(
        Plan(kind=PlanKind.SUBSAMPLED_GAUSSIAN, noise=None, queries=2000,
             sampling_probability=0.01), target_epsilon=20.0, delta=1e-6))
    print("subsampled-gaussian q=0.01, 2,000 queries, target 20 at 1e-6: " + ", ".join(
        f"{r.accountant} {r.solved:.6f}" for r in rows if r.solved is not None)
        + f" ({seconds:.2f} s)")


if __name__ == "__main__":
    main()
