"""DP-SGD plans: ours against Opacus and dp_accounting on the same plan, in one process.

Run: ``python benchmarks/dp_sgd.py``. For each plan (dataset size N, batch size B, epochs,
noise multiplier sigma; Poisson rate q = 1/ceil(N/B) and ceil(N/B) steps per epoch, Opacus's
convention) it prints the epsilon at delta = 1e-5 from our RDP and PLD accountants, Opacus's RDP
and PRV accountants and dp_accounting's RDP and PLD accountants, with seconds; then the noise
multiplier each solves for a target epsilon of 3 (ours: Brent's method to 1e-6 relative;
Opacus: ``get_noise_multiplier``, bisection to 0.01 in epsilon).
"""

from __future__ import annotations

import importlib.metadata
import platform
import time
import warnings

import numpy as np
import opacus
from dp_accounting import dp_event as _dp
from dp_accounting.pld import PLDAccountant as DpaPLD
from dp_accounting.rdp import RdpAccountant as DpaRDP
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from dpkd_audit.accountants import NeighboringRelation
from dpkd_audit.accountants.dp_sgd import (
    DpSgdAccountant,
    DpSgdSchedule,
    calibrate_dp_sgd_noise,
    dp_sgd_epsilon,
)

DELTA = 1e-5
PLANS = [(60_000, 256, 60, 1.1), (60_000, 600, 15, 0.8), (50_000, 1024, 100, 2.0)]


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, float(value)


def opacus_epsilon(cls, sigma, q, steps):
    accountant = cls()
    accountant.history = [(sigma, q, steps)]
    return accountant.get_epsilon(DELTA)


def main() -> None:
    warnings.simplefilter("ignore")
    print(f"python {platform.python_version()}, opacus {opacus.__version__}, dp_accounting "
          f"{importlib.metadata.version('dp-accounting')}, numpy {np.__version__}, "
          f"{platform.machine()}; delta = {DELTA}")
    for n, b, epochs, sigma in PLANS:
        schedule = DpSgdSchedule(dataset_size=n, batch_size=b)
        q, steps = schedule.sampling_probability, schedule.steps(epochs)
        event = _dp.SelfComposedDpEvent(_dp.PoissonSampledDpEvent(q, _dp.GaussianDpEvent(sigma)),
                                        steps)
        print(f"N={n:,} B={b} epochs={epochs} sigma={sigma}: q={q:.6g}, {steps:,} steps")
        lines = [
            ("ours RDP", lambda s=schedule, e=epochs, g=sigma: dp_sgd_epsilon(
                s, noise_multiplier=g, epochs=e, delta=DELTA)),
            ("Opacus RDPAccountant", lambda g=sigma, q=q, t=steps: opacus_epsilon(
                RDPAccountant, g, q, t)),
            ("dp_accounting RdpAccountant", lambda e=event: DpaRDP().compose(e).get_epsilon(
                DELTA)),
            ("ours PLD (interval 1e-4)", lambda s=schedule, e=epochs, g=sigma: dp_sgd_epsilon(
                s, noise_multiplier=g, epochs=e, delta=DELTA, accountant=DpSgdAccountant.PLD)),
            ("dp_accounting PLDAccountant", lambda e=event: DpaPLD(
                NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
                .compose(e).get_epsilon(DELTA)),
            ("Opacus PRVAccountant (upper)", lambda g=sigma, q=q, t=steps: opacus_epsilon(
                PRVAccountant, g, q, t)),
        ]
        for name, fn in lines:
            seconds, eps = timed(fn)
            print(f"  {name:<30} epsilon {eps:9.5f}   {seconds:7.3f} s")
        ours_s, ours = timed(lambda s=schedule, e=epochs: calibrate_dp_sgd_noise(
            s, epochs=e, target_epsilon=3.0, delta=DELTA))
        theirs_s, theirs = timed(lambda q=q, t=steps: get_noise_multiplier(
            target_epsilon=3.0, target_delta=DELTA, sample_rate=q, steps=t, accountant="rdp"))
        print(f"  noise for epsilon 3 (RDP): ours {ours:.6f} ({ours_s:.2f} s), Opacus "
              f"{theirs:.6f} ({theirs_s:.2f} s)")


if __name__ == "__main__":
    main()
