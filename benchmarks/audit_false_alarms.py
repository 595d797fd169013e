"""False-alarm rates of the auditor on mechanisms claimed exactly at their true epsilon.

The rates the tests in ``tests/test_audit_auditor.py`` are pinned to (issue 11: "tighten each to
the measured rate"). Two per case (issue 64): how often the first bound exceeds the claim (the
rate of the bound alone), and how often a violation is reported, i.e. also confirmed on fresh
samples at 99.5%. For each case, ``--runs`` independent audits (seeds 5000, 5001, ...) of a
mechanism whose claim equals its true epsilon; a violation is a false alarm. Also the same
Laplace audit with the selection and the bound computed on the *same* samples (no split), to
show what the split guards against.

Cases (the tests' configurations): binary randomized response, keep 3/4, epsilon ln 3, AUTO,
400 samples per side; Laplace b = 1, epsilon 1, THRESHOLD, 1,000 per side; and (issue 31) a
Laplace b = 1 whose outputs are rounded to multiples of 2^-10 (post-processing: still 1-DP, and
its doubles lie on one grid whatever the input), audited with the default policy (AUTO: every
attack competes, float bits included), 1,000 per side; and (issue 31, the leaf view) a ragged
list of 1-4 answers, each x + Laplace(4) snapped to 2^-16, 1-DP for its longest list, AUTO,
1,000 per side; each at confidence 0.95 and 0.5.

Usage: ``python benchmarks/audit_false_alarms.py [--runs 1000] [--only SUBSTRING]``.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from dpkd_audit.audit import Attack, audit_sampler, epsilon_lower_bound
from dpkd_audit.audit.attacks import Selection, threshold_candidate


def binary_rr(keep):
    def sample(x, n, rng):
        flip = rng.random(n) >= keep
        return np.where(flip, 1 - x, x).astype(np.int64)
    return sample


def laplace(x, n, rng):
    return x + rng.laplace(0.0, 1.0, n)


def snapped_laplace(x, n, rng):
    return np.round((x + rng.laplace(0.0, 1.0, n)) * 1024.0) / 1024.0


def ragged_answers(x, n, rng):
    """1-4 answers (length independent of x), each x + Laplace(4) on 2^-16: 1-DP in all."""
    lengths = rng.integers(1, 5, n)
    values = np.round((x + rng.laplace(0.0, 4.0, (n, 4))) * 2**16) / 2**16
    return [values[j, :k].tolist() for j, k in enumerate(lengths)]


def unsplit_laplace_violation(seed: int, n: int, confidence: float) -> bool:
    """Choose the threshold on the very samples that are then counted (the invalid audit)."""
    rng = np.random.default_rng(seed)
    a, b = laplace(0.0, n, rng), laplace(1.0, n, rng)
    sel = Selection(0.0, (1 - confidence) / 2, rng)
    cand = threshold_candidate((a, b), (a, b), sel)
    from dpkd_audit.audit.outputs import OutputKind, Outputs
    hits_a = int(np.count_nonzero(cand.indicator(Outputs(OutputKind.SCALAR_FLOAT, a))))
    hits_b = int(np.count_nonzero(cand.indicator(Outputs(OutputKind.SCALAR_FLOAT, b))))
    k1, k0 = (hits_a, hits_b) if cand.forward else (hits_b, hits_a)
    return epsilon_lower_bound(k1, n, k0, n, confidence=confidence) > 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--only", help="run the cases whose name holds this text")
    args = parser.parse_args()
    cases = [("binary RR (AUTO, 400/side)", binary_rr(0.75), math.log(3), None, 400),
             ("Laplace (THRESHOLD, 1000/side)", laplace, 1.0, Attack.THRESHOLD, 1000),
             ("Laplace on 2^-10 (AUTO, 1000/side)", snapped_laplace, 1.0, None, 1000),
             ("ragged answers (AUTO, 1000/side)", ragged_answers, 1.0, None, 1000)]
    if args.only:
        cases = [c for c in cases if args.only in c[0]]
    for confidence in (0.95, 0.5):
        for name, sampler, eps, attack, n in cases:
            start = time.perf_counter()
            results = [audit_sampler(sampler, 0, 1, epsilon=eps, n=n, confidence=confidence,
                                     rng=np.random.default_rng(5000 + i), attack=attack)
                       for i in range(args.runs)]
            above = sum(r.epsilon_lower > eps for r in results)
            flagged = sum(r.violation for r in results)
            print(f"confidence {confidence}: {name:32} bound above the claim {above}/"
                  f"{args.runs} = {above / args.runs:.1%}, reported violations (confirmed) "
                  f"{flagged}/{args.runs} = {flagged / args.runs:.1%}  "
                  f"({time.perf_counter() - start:.1f} s)")
        if args.only:
            continue
        flagged = sum(unsplit_laplace_violation(9000 + i, 1000, confidence)
                      for i in range(args.runs))
        print(f"confidence {confidence}: {'Laplace, NO split (invalid)':32} false alarms "
              f"{flagged}/{args.runs} = {flagged / args.runs:.1%}")


if __name__ == "__main__":
    main()
