"""Throughput of every catalogued mechanism's vectorised ``sample`` (outputs per second).

Run: ``python benchmarks/samplers.py [--n 1000000]``. Prints one line per mechanism: outputs
per second on its ``neighbours()[0]`` input (best of 3), and for reference numpy's own
``Generator.laplace`` / ``Generator.normal`` and the textbook floating-point Laplace and Gaussian
in the same process.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from dpkd_audit.mechanisms import CATALOGUE
from dpkd_audit.mechanisms.continuous import TextbookGaussian, TextbookLaplace


def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"python {platform.python_version()}, numpy {np.__version__}, "
          f"{platform.machine()}, n={args.n:,} outputs per call (best of 3)")
    ref = best_of(lambda: rng.laplace(0.0, 1.0, size=args.n))
    print(f"{'numpy Generator.laplace (reference)':<34} {args.n / ref:>14,.0f} /s")
    ref = best_of(lambda: rng.normal(0.0, 1.0, size=args.n))
    print(f"{'numpy Generator.normal (reference)':<34} {args.n / ref:>14,.0f} /s")
    for textbook in (TextbookLaplace(epsilon=1.0), TextbookGaussian(epsilon=1.0, delta=1e-5)):
        ref = best_of(lambda textbook=textbook: textbook.sample(0.0, args.n, rng=rng))
        label = f"{type(textbook).__name__} (float, not DP)"
        print(f"{label:<34} {args.n / ref:>14,.0f} /s")
    for entry in CATALOGUE:
        mech = entry.example()
        x, _ = mech.neighbours()
        # vector-valued mechanisms produce one vector per output: scale n down to ~1e6 scalars
        probe = np.asarray(mech.sample(x, 1, rng=rng)[0], dtype=object)
        width = max(1, probe.size)
        n = max(1, args.n // width)
        seconds = best_of(lambda mech=mech, x=x, n=n: mech.sample(x, n, rng=rng))
        print(f"{type(mech).__name__:<34} {n / seconds:>14,.0f} /s"
              f"  ({width} values per output, {seconds:.3f} s for {n:,})")


if __name__ == "__main__":
    main()
