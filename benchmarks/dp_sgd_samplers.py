"""DP-SGD epsilons under the samplers people run, beside the Feldman-Shenfeld reference code.

For a few schedules (N, B, sigma, epochs, delta 1e-5) this prints the Poisson figure Opacus
reports, the shuffled-batch upper bound (no amplification) and its lower bound (Chua et al.
2024 construction), the sequential bound, and balls-in-bins (random allocation) with each RDP
direction on its own. Where the ``random-allocation`` package (Feldman and Shenfeld's reference
implementation; ``pip install random-allocation pandas``) imports, its "direct" remove and add
figures are printed beside ours, computed in the same process.

Usage: ``python benchmarks/dp_sgd_samplers.py``
"""

from __future__ import annotations

import time

import numpy as np

from dpkd_audit.accountants.dp_sgd import DpSgdSchedule
from dpkd_audit.accountants.dp_sgd_sampling import (
    DpSgdSampling,
    random_allocation_rdp,
    sampling_epsilon,
)
from dpkd_audit.accountants.rdp.conversion import epsilon_from_rdp

SCHEDULES = [  # (N, B, sigma, epochs)
    (60_000, 64, 1.0, 10),      # Opacus's MNIST example at its defaults
    (60_000, 64, 0.466, 10),    # the same, sigma for Opacus's 8.6 (make_private_with_epsilon)
    (60_000, 256, 0.6, 10),
    (1_437, 64, 0.8, 5),        # digits
    (1_000, 250, 1.0, 1),
]
DELTA = 1e-5


def _reference(sigma: float, t: int, epochs: int) -> tuple[float, float] | None:
    try:
        from random_allocation.comparisons.definitions import (
            Direction,
            PrivacyParams,
            SchemeConfig,
        )
        from random_allocation.random_allocation_scheme.direct import allocation_epsilon_direct
    except ImportError:
        return None
    params = PrivacyParams(sigma=sigma, num_steps=t, num_selected=1, num_epochs=epochs,
                           epsilon=None, delta=DELTA)
    config = SchemeConfig(allocation_direct_alpha_orders=list(range(2, 61)))
    return (allocation_epsilon_direct(params, config, Direction.REMOVE),
            allocation_epsilon_direct(params, config, Direction.ADD))


def main() -> None:
    print("| N | B | sigma | epochs | Poisson (Opacus) | shuffle upper | shuffle lower | "
          "sequential | balls-in-bins | RA remove (ours / ref) | RA add (ours / ref) | s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, b, sigma, epochs in SCHEDULES:
        start = time.perf_counter()
        schedule = DpSgdSchedule(dataset_size=n, batch_size=b)
        bounds = {s: sampling_epsilon(schedule, sampling=s, noise_multiplier=sigma,
                                      epochs=epochs, delta=DELTA) for s in DpSgdSampling}
        t = schedule.steps_per_epoch
        orders = np.arange(2, 257)
        remove, add = random_allocation_rdp(sigma, t, epochs, orders)
        ours = (epsilon_from_rdp(orders, remove, DELTA)[0],
                epsilon_from_rdp(orders, add, DELTA)[0])
        seconds = time.perf_counter() - start
        ref = _reference(sigma, t, epochs)
        shown = [f"{o:.4g} / {'-' if ref is None else f'{r:.4g}'}"
                 for o, r in zip(ours, ref or (None, None), strict=True)]
        shuffle = bounds[DpSgdSampling.SHUFFLE]
        print(f"| {n:,} | {b} | {sigma:g} | {epochs} | "
              f"{bounds[DpSgdSampling.POISSON].epsilon:.4g} | {shuffle.epsilon:.4g} | "
              f"{shuffle.epsilon_lower:.4g} | {bounds[DpSgdSampling.SEQUENTIAL].epsilon:.4g} | "
              f"{bounds[DpSgdSampling.BALLS_IN_BINS].epsilon:.4g} | {shown[0]} | {shown[1]} | "
              f"{seconds:.1f} |")


if __name__ == "__main__":
    main()
