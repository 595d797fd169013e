"""What an ideal attacker gets on the schedule of an Opacus audit record (issue 63).

For a record written by :class:`~dpkd_audit.training_audit.OpacusAudit` with Poisson sampling
(``reports/audits/opacus-mnist-example-*/audit.json``), this simulates the canaries' readings of
that schedule exactly (no training): each of the record's ``m`` canaries inserted with
probability 1/2, Poisson-sampled at the record's q at each of its steps, read as ``1{joined} +
N(0, sigma^2)``, scored by the same log-likelihood ratio
(:func:`~dpkd_audit.training_audit.participation.poisson_step_log_ratio`) and analysed with the
record's own guesses and delta. The training run cannot do better than this simulation (its
readings are exactly these, and the score is the Neyman-Pearson statistic), so the spread over
seeds says what one run of that design can show.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/opacus_ideal_attacker.py RECORD [--seeds 5]``
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np

from dpkd_audit.audit.training import canary_inclusion, many_run_bound, one_run_bound
from dpkd_audit.training_audit.participation import PoissonParticipation, poisson_step_log_ratio


def simulate(record: dict, seed: int) -> dict:
    q, sigma = float(record["sampling_probability"]), float(record["noise_multiplier"])
    steps, m = int(record["steps"]), int(record["canaries"])
    delta, claim = float(record["delta"]), float(record["epsilon_claimed"])
    included = canary_inclusion(m, seed=seed)
    participation = PoissonParticipation(included, sampling_probability=q, seed=seed, fast=True)
    rng = np.random.default_rng([seed, 77])
    scores = np.zeros(m)
    for _ in range(steps):
        picked, weights = participation.rows()
        y = rng.normal(0.0, sigma, m)
        y[picked] += weights
        scores += poisson_step_log_ratio(y, q, sigma)
    bound = one_run_bound(scores, included, epsilon=claim, delta=delta,
                          guesses_in=int(record["guesses_in"]),
                          guesses_out=int(record["guesses_out"]))
    independent = many_run_bound(scores[included], scores[~included], epsilon=claim,
                                 delta=delta, rng=np.random.default_rng([seed, 9]))
    return {"correct": bound.correct, "steinke": bound.epsilon_lower,
            "fdp": bound.epsilon_lower_fdp, "gaussian": bound.epsilon_lower_gaussian,
            "independent": independent.epsilon_lower}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("record")
    p.add_argument("--seeds", type=int, default=5)
    args = p.parse_args()
    record = json.loads(pathlib.Path(args.record).read_text())
    if record.get("participation") != "poisson":
        raise SystemExit("the record's canaries are not Poisson-sampled; this simulates those")
    rows = [simulate(record, seed) for seed in range(args.seeds)]
    keys = ("correct", "steinke", "fdp", "gaussian", "independent")
    print(f"{args.record}: q {record['sampling_probability']:.6g}, {record['steps']} steps, "
          f"sigma {record['noise_multiplier']:.4g}, {record['canaries']:,} canaries, claim "
          f"{record['epsilon_claimed']:.4g}")
    print("| | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    print("| the run | " + " | ".join(
        f"{record[k]}" if k == "correct" else f"{record[f'epsilon_lower_{k}']:.3f}"
        if k != "steinke" else f"{record['epsilon_lower']:.3f}" for k in keys) + " |")
    for name, pick in (("simulation, median", np.median), ("simulation, min", np.min),
                       ("simulation, max", np.max)):
        print(f"| {name} | " + " | ".join(
            f"{pick([r[k] for r in rows]):.3f}" if k != "correct"
            else f"{pick([r[k] for r in rows]):.0f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
