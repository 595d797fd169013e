"""What the float-safe Gaussian costs: its noise against the textbook one, and where it refuses.

Run: ``python benchmarks/float_safe_gaussian.py``. For each epsilon (delta 1e-5, L2 sensitivity
1) and number of changed coordinates c, prints the float-safe ``Gaussian``'s noise parameter
sigma_g g divided by Balle-Wang's sigma (``TextbookGaussian``), the grid and the noise in grid
steps, or the refusal (the exact sampler stops at 30,000 grid steps), and the seconds its
construction (calibration) took. The README's table of float-safe mechanisms quotes it.
"""

from __future__ import annotations

import math
import platform
import time

from dpkd_audit.mechanisms import Gaussian, TextbookGaussian

EPSILONS = (10.0, 1.0, 0.1, 0.01, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5)
COORDINATES = (1, 2, 100, 3000)


def main() -> None:
    print(f"python {platform.python_version()}, {platform.machine()}; delta 1e-5, sensitivity 1")
    print(f"{'epsilon':>8} {'c':>5} {'noise / textbook':>17} {'grid':>7} {'steps':>8} "
          f"{'seconds':>8}")
    for eps in EPSILONS:
        textbook = TextbookGaussian(epsilon=eps, delta=1e-5).sigma
        for c in COORDINATES:
            start = time.perf_counter()
            try:
                mech = Gaussian(epsilon=eps, delta=1e-5, coordinates=c)
            except ValueError as exc:
                print(f"{eps:>8g} {c:>5} refused: {str(exc).split(': ', 1)[1][:70]}")
                continue
            seconds = time.perf_counter() - start
            grid = mech.grid(c)
            power = f"2^{round(math.log2(grid.granularity))}"
            print(f"{eps:>8g} {c:>5} {mech.sigma / textbook:>17.4f} {power:>7} "
                  f"{math.sqrt(grid.variance):>8.0f} {seconds:>8.2f}")


if __name__ == "__main__":
    main()
