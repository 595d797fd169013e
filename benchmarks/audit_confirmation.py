"""False "violations" of correct mechanisms, per audit and per suite, with and without confirmation.

A mechanism claimed exactly at its true epsilon is the hardest correct case: its 95% bound exceeds
the claim in up to 5% of audits. The auditor reports a violation only when a confirmation on
fresh samples (the same event, bounded at 99.5%) exceeds the claim too, and a suite of K audits
confirms at ``1 - 0.05 / K``. This script measures both rates by simulation:

- *per audit*: ``--runs`` audits of each correct mechanism below (seeds 0, 1, ...), default
  policy, ``--samples`` per side: the share whose first bound exceeds the claim, and the share
  reported violated (confirmed);
- *per suite*: ``--suites`` suites of ``--suite-size`` audits cycling through the same
  mechanisms, each confirmed at the suite's confidence: the share of suites with any reported
  violation (the family-wise rate the suite promises to keep at or below 5%).

The mechanisms, each claimed at its exact epsilon: binary randomized response keeping 3/4
(ln 3), 10-ary randomized response at epsilon 1, a discrete Laplace of scale 1 (epsilon 1), a
Laplace of scale 1 rounded to 2^-10 (epsilon 1: post-processing, and no float bits leak).

Usage: ``python benchmarks/audit_confirmation.py [--runs 500] [--samples 2000] [--suites 100]
[--suite-size 30] [--confidence 0.95]``.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from dpkd_audit.audit import audit_sampler
from dpkd_audit.audit.suite import suite_confirmation_confidence
from dpkd_audit.mechanisms.samplers import discrete_laplace


def binary_rr(x, n, rng):
    return np.where(rng.random(n) < 0.75, x, 1 - x).astype(np.int64)


def k_ary_rr(x, n, rng, k=10, eps=1.0):
    keep = math.exp(eps) / (math.exp(eps) + k - 1)
    other = (x + rng.integers(1, k, n)) % k
    return np.where(rng.random(n) < keep, x, other).astype(np.int64)


def dlaplace(x, n, rng):
    return x + discrete_laplace(1, 1, n, rng=rng)


def snapped_laplace(x, n, rng):
    return np.round((x + rng.laplace(0.0, 1.0, n)) * 1024.0) / 1024.0


CASES = [("binary RR, ln 3", binary_rr, 0, 1, math.log(3)),
         ("10-ary RR, eps 1", k_ary_rr, 0, 1, 1.0),
         ("discrete Laplace, eps 1", dlaplace, 0, 1, 1.0),
         ("Laplace on 2^-10, eps 1", snapped_laplace, 0.0, 1.0, 1.0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--samples", type=int, default=2_000)
    parser.add_argument("--suites", type=int, default=100)
    parser.add_argument("--suite-size", type=int, default=30)
    parser.add_argument("--confidence", type=float, default=0.95)
    args = parser.parse_args()
    print(f"# per audit: {args.runs} audits per case, {args.samples:,} samples per side, "
          f"confidence {args.confidence}, confirmation at 0.995")
    print(f"{'case':28} {'first stage > claim':>20} {'reported violations':>20} {'s':>6}")
    total_first = total_confirmed = 0
    for name, sampler, x, xp, eps in CASES:
        start = time.perf_counter()
        first = confirmed = 0
        for seed in range(args.runs):
            r = audit_sampler(sampler, x, xp, epsilon=eps, n=args.samples,
                              confidence=args.confidence, rng=np.random.default_rng(seed))
            first += r.epsilon_lower > eps
            confirmed += r.violation
        total_first += first
        total_confirmed += confirmed
        print(f"{name:28} {first:>9} ({first / args.runs:6.2%}) {confirmed:>9} "
              f"({confirmed / args.runs:6.2%}) {time.perf_counter() - start:6.1f}")
    audits = args.runs * len(CASES)
    print(f"{'all':28} {total_first:>9} ({total_first / audits:6.2%}) {total_confirmed:>9} "
          f"({total_confirmed / audits:6.2%})")

    confirming = suite_confirmation_confidence(args.suite_size)
    print(f"\n# per suite: {args.suites} suites of {args.suite_size} audits, confirmation at "
          f"{confirming:.5f}")
    start = time.perf_counter()
    flagged_first = flagged = 0
    seed = 10**6
    for _ in range(args.suites):
        any_first = any_confirmed = False
        for i in range(args.suite_size):
            name, sampler, x, xp, eps = CASES[i % len(CASES)]
            r = audit_sampler(sampler, x, xp, epsilon=eps, n=args.samples,
                              confidence=args.confidence, rng=np.random.default_rng(seed),
                              confirmation_confidence=confirming)
            seed += 1
            any_first |= r.epsilon_lower > eps
            any_confirmed |= r.violation
        flagged_first += any_first
        flagged += any_confirmed
    print(f"suites with a first-stage bound above a claim: {flagged_first} of {args.suites} "
          f"({flagged_first / args.suites:.1%}); with a reported violation: {flagged} "
          f"({flagged / args.suites:.1%}); {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
