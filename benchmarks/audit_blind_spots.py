"""The auditor on outputs it used to handle badly (issue 11): figures and times.

Samplers written here, outside the package's mechanism classes, the way a user would write them:

- ``noisy-max (index, value) tuples``: report noisy max over k = 5 queries releasing the pair
  (index, noisy value) as a list of Python tuples; claim epsilon = 1, true epsilon k eps / 2 = 2.5
  (Ding et al. CCS 2018, ``noisy_max_v1b``; see ``NoisyMaxReturningValue``).
- ``sparse vector, NaN = no answer``: Lyu-Su-Li 2017 Alg. 3 (noisy value of the top released),
  m = 10 queries, cutoff 1, released as a float vector holding NaN where nothing was answered;
  claim 1, not DP (log-ratio >= 1.49 on this pair, see ``SparseVectorNoisyValues``).
- ``Laplace rounded to 0.01``: a correct Laplace (b = 1, pair 0 / 1) rounded to two decimals;
  claim 1, true epsilon <= 1 (post-processing), attainable about 1.
- ``Laplace clipped, half noise``: Laplace with b = 0.5 instead of 1 clipped to [-1, 2]; claim 1,
  true epsilon 2.
- ``Laplace``: the textbook control, claim 1 (target >= 0.98 at 10^6 per side in < 5 s with
  ``--attack auto_real``; the default, AUTO since issue 31, flags its float bits).
- ``ragged answers, length leaks`` (issue 31): a list of 1-3 integer answers, one more for
  input 1 with probability 0.1 (a length input 0 never gives: not DP).
- ``(label, value), exact label`` (issue 31): a ``(str, float)`` tuple whose label compares the
  exact input with a cut (plus a little noise): the label alone has epsilon
  ln(Phi(5/3) / Phi(-5/3)) = 2.99, the pair 2.99 + 1 = 3.99 (independent given the input); claim 1.

Usage: ``python benchmarks/audit_blind_spots.py [--samples N] [--seed S]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpkd_audit.audit import Attack, audit_sampler
from dpkd_audit.audit.controls import SparseVectorNoisyValues
from dpkd_audit.audit.outputs import prepare_outputs


def noisy_max_tuples(x, n, rng):
    noisy = np.asarray(x, dtype=float) + rng.laplace(0.0, 2.0, size=(n, 5))
    index = np.argmax(noisy, axis=1)
    top = noisy[np.arange(n), index]
    return list(zip(index.tolist(), top.tolist(), strict=True))


_SVT = SparseVectorNoisyValues(epsilon=1.0)


def sparse_vector_nan(x, n, rng):
    out = _SVT.sample(x, n, rng=rng)
    m = out.shape[1] // 2
    codes, values = out[:, :m], out[:, m:]
    return np.where(codes == 1.0, values, np.nan)


def laplace_rounded(x, n, rng):
    return np.round(x + rng.laplace(0.0, 1.0, size=n), 2)


def laplace_clipped_half_noise(x, n, rng):
    return np.clip(x + rng.laplace(0.0, 0.5, size=n), -1.0, 2.0)


def laplace(x, n, rng):
    return x + rng.laplace(0.0, 1.0, size=n)


def ragged_answers(x, n, rng):
    lengths = 1 + rng.integers(0, 3, n) + x * (rng.random(n) < 0.1)
    return [(rng.geometric(0.5, int(k)) - rng.geometric(0.5, int(k))).tolist() for k in lengths]


def labelled_values(x, n, rng):
    values = x + rng.laplace(0.0, 1.0, n)
    labels = np.where(x + rng.normal(0.0, 0.3, n) > 0.5, "high", "low")
    return [(str(s), float(v)) for s, v in zip(labels, values, strict=True)]


CASES = [
    ("noisy-max (index, value) tuples", noisy_max_tuples, np.zeros(5), np.ones(5), 1.0, 2.5),
    ("sparse vector, NaN = no answer", sparse_vector_nan, *_SVT.neighbours(), 1.0, float("inf")),
    ("Laplace rounded to 0.01", laplace_rounded, 0.0, 1.0, 1.0, 1.0),
    ("Laplace clipped, half noise", laplace_clipped_half_noise, 0.0, 1.0, 1.0, 2.0),
    ("Laplace", laplace, 0.0, 1.0, 1.0, 1.0),
    ("ragged answers, length leaks", ragged_answers, 0, 1, 1.0, float("inf")),
    ("(label, value), exact label", labelled_values, 0.0, 1.0, 1.0, 3.99),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--attack", default="default",
                        help="default (the auditor's policy), or an Attack value")
    args = parser.parse_args()
    attack = None if args.attack == "default" else Attack(args.attack)
    print(f"{'case':34} {'claim':>5} {'true':>5} {'bound':>7} {'verdict':>12} "
          f"{'attack':>10} {'s':>6}")
    for name, sampler, x, xp, claim, true in CASES:
        start = time.perf_counter()
        res = audit_sampler(sampler, x, xp, epsilon=claim, n=args.samples,
                            rng=np.random.default_rng(args.seed), attack=attack)
        verdict = getattr(res, "verdict", None)
        verdict = verdict.value if verdict is not None else str(res.violation)
        print(f"{name:34} {claim:5g} {true:5g} {res.epsilon_lower:7.4f} {verdict:>12} "
              f"{res.attack.value:>10} {time.perf_counter() - start:6.1f}")
    rng = np.random.default_rng(args.seed)
    rows = [tuple(r) for r in rng.random((1_000_000, 10)).tolist()]
    start = time.perf_counter()
    prepared = prepare_outputs(rows, len(rows))
    print(f"prepare_outputs: 10^6 ten-element tuples -> {prepared.kind.value} "
          f"{prepared.data.shape} in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
