"""Power of ``dpkd audit`` on the package's own mechanisms (issue 11): bound / claim vs samples.

For every catalogued mechanism, its audit configuration (``CatalogueEntry.audited()``: the same
code at a size and claim where an audit has power) is audited at 10^4, 10^5 and 10^6 samples
per side with the default policy (``resolve_attack``; the mechanism's ``audit_view`` where it
has one), and the table gives the bound as a fraction of the claim and the smallest of these
sizes reaching 0.9 x the claim ("> 10^6" otherwise: the attainable bound at that size is below
0.9 x epsilon for approximate-DP claims whose best events lie in the tails, and for noisy max,
whose loss reaches epsilon only in the limit of a far-behind class). Beside them (issue 31):
the bound attainable at 10^6 (:func:`~dpkd_audit.audit.attainable_epsilon`: the privacy-loss
tails of the mechanism's DP event, at the audit's bounding sample count and claimed delta), as a
fraction of the claim, and the audit's bound as a fraction of it. The attainable bound is that
of the event's dominating pair: for a declared (epsilon, delta) event (the shuffled histogram)
or a pair that is not the worst one (Laplace noisy max, two classes), the audit cannot reach it.

Usage: ``python benchmarks/audit_power.py [--seed S]``.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from dpkd_audit.audit import attainable_epsilon, audit_mechanism
from dpkd_audit.mechanisms import CATALOGUE, example_text

SIZES = (10_000, 100_000, 1_000_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"# {platform.machine()} {platform.python_version()}, seed {args.seed}")
    print("| mechanism (audit configuration) | claim | 10^4 | 10^5 | 10^6 | n for 0.9 x eps | "
          "attainable at 10^6 | 10^6 / attainable | attack at 10^6 | s at 10^6 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for entry in CATALOGUE:
        mech = entry.audited()
        ratios, last = [], None
        for n in SIZES:
            start = time.perf_counter()
            result = audit_mechanism(mech, n=n, rng=np.random.default_rng(args.seed))
            ratios.append(result.epsilon_lower / result.epsilon_claimed)
            last = (result, time.perf_counter() - start)
        reached = next((f"{n:.0e}" for n, r in zip(SIZES, ratios, strict=True) if r >= 0.9),
                       "> 1e6")
        claim = (f"{mech.epsilon:.4g}" if not mech.delta
                 else f"({mech.epsilon:.4g}, {mech.delta:g})")
        attainable = attainable_epsilon(mech.event, n=last[0].bound_samples, delta=mech.delta,
                                        confidence=last[0].confidence)
        print(f"| {type(mech).__name__} ({example_text(mech)}) | {claim} | "
              + " | ".join(f"{r:.3f}" for r in ratios)
              + f" | {reached} | {attainable / mech.epsilon:.3f} | "
              f"{last[0].epsilon_lower / attainable:.3f} | {last[0].attack.value} | "
              f"{last[1]:.1f} |")


if __name__ == "__main__":
    main()
