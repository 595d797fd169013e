"""The private step of reverse k-NN: releasing the s x |Y| vote counts under each model.

Every mode goes through the mechanism layer and is charged to the ledger before anything is
released (reverse k-NN paper, "Private Mechanisms"; NOTES.md):

- ``central``: :class:`~dpkd_audit.mechanisms.ReverseKnnCountRelease`, Laplace noise with L1
  sensitivity 2kr on every count (Prop. 1), exact discrete Laplace by default.
- ``local-rr``: every client flips each bit of its one-hot answer matrix with probability
  1/(e^(eps/2kr) + 1) (:class:`~dpkd_audit.mechanisms.BitRandomizedResponse`, Thm 1); the
  server debiases the sum.
- ``local-collision``: every client sends one Collision report of its k*r answer indices
  (:class:`~dpkd_audit.mechanisms.Collision`, Def. 5, Thm 2); the server uses the unbiased
  estimator of Appendix A.
- ``shuffle``: the same Collision randomizer at a larger local eps0, its reports shuffled
  (:class:`~dpkd_audit.mechanisms.ShuffledRandomizer`); eps0 is the largest local epsilon whose
  Feldman-McMillan-Talwar 2021 numerical amplification bound meets the target central
  (epsilon, delta) (paper, "Single-message Shuffling").
- ``shuffle-multi``: the multi-message shuffled histogram
  (:class:`~dpkd_audit.mechanisms.ShuffledHistogram`, Ghazi et al. 2020). The histogram takes
  one bin per user, so a record's k votes are released as k histograms (one per neighbour rank,
  bin = query * |Y| + label), each at (epsilon/k, delta/k): basic composition (Dwork-Roth
  2014, Thm 3.16) gives the target (epsilon, delta).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit._math.privacy import smallest_satisfying
from dpkd_audit._math.shuffle import numerical_epsilon
from dpkd_audit.accountants import PureAccountant, ShuffleAccountant
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms.base import Mechanism
from dpkd_audit.mechanisms.rknn import (
    BitRandomizedResponse,
    Collision,
    ReverseKnnCountRelease,
    reverse_knn_counts,
)
from dpkd_audit.mechanisms.shuffle import ShuffledHistogram, ShuffledRandomizer
from dpkd_audit.pipelines.common.progress import progress_bar
from dpkd_audit.pipelines.rknn.config import CentralNoise, ReleaseMode, RknnConfig

__all__ = [
    "CountRelease",
    "build_mechanisms",
    "ledger_for",
    "planned_events",
    "release_counts",
    "shuffle_local_epsilon",
]

#: Clients randomized per chunk in the local modes (bounds memory to ~chunk * s * |Y| bytes).
_CLIENT_CHUNK = 4096


def shuffle_local_epsilon(epsilon: float, num_users: int, delta: float) -> float:
    """Largest local eps0 whose FMT21 numerical bound is <= ``epsilon`` at ``delta``.

    Feldman-McMillan-Talwar 2021, Thm 3.2 / App. E (:func:`dpkd_audit._math.shuffle.
    numerical_epsilon`, increasing in eps0). Bisection on eps0 in [epsilon, 60]; the result
    always satisfies the target (never above it). Equal to ``epsilon`` when shuffling does not
    amplify at this n and delta.
    """
    epsilon = _validate.check_epsilon(epsilon)
    num_users = _validate.check_int("num_users", num_users, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    hi = 60.0
    if numerical_epsilon(hi, num_users, delta) <= epsilon:
        return hi
    if numerical_epsilon(epsilon, num_users, delta) > epsilon:  # cannot happen: bound <= eps0
        return epsilon
    # smallest_satisfying finds the smallest x with f(x) <= target for decreasing f; use
    # x = hi - eps0 so that f(x) = numerical_epsilon(hi - x) decreases in x.
    x = smallest_satisfying(lambda x: numerical_epsilon(hi - x, num_users, delta), epsilon,
                            0.0, hi - epsilon, rel_tol=1e-9)
    return max(epsilon, hi - x)


def build_mechanisms(config: RknnConfig, *, num_private: int,
                     num_classes: int) -> list[Mechanism]:
    """The mechanism(s) one run releases through, in charging order."""
    s, k, eps = config.clusters, config.k, config.epsilon
    mode = config.mode
    if mode is ReleaseMode.CENTRAL:
        return [ReverseKnnCountRelease(epsilon=eps, k=k, num_queries=s, num_classes=num_classes,
                                       discrete=config.central_noise is CentralNoise.DISCRETE)]
    if mode is ReleaseMode.LOCAL_RR:
        return [BitRandomizedResponse(epsilon=eps, k=k, num_queries=s, num_classes=num_classes)]
    if mode is ReleaseMode.LOCAL_COLLISION:
        return [Collision.for_reverse_knn(epsilon=eps, k=k, num_queries=s,
                                          num_classes=num_classes)]
    if mode is ReleaseMode.SHUFFLE:
        eps0 = shuffle_local_epsilon(eps, num_private, config.delta)
        local = Collision.for_reverse_knn(epsilon=eps0, k=k, num_queries=s,
                                          num_classes=num_classes)
        return [ShuffledRandomizer(local=local, num_users=num_private, delta=config.delta)]
    return [ShuffledHistogram(epsilon=eps / k, delta=config.delta / k, num_users=num_private,
                              num_bins=s * num_classes) for _ in range(k)]


def ledger_for(config: RknnConfig, *, path: str | None = None) -> Ledger:
    """A ledger whose budget is the run's target and whose accountant fits its mode.

    Central and local modes: basic composition, budget (epsilon, 0). ``shuffle``: the shuffle
    accountant (FMT21 numerical bound, ``delta`` per release). ``shuffle-multi``: basic
    composition of the histograms' (epsilon/k, delta/k), budget (epsilon, delta).
    """
    accountant = (ShuffleAccountant(config.delta) if config.mode is ReleaseMode.SHUFFLE
                  else PureAccountant())
    return Ledger(epsilon=config.epsilon, delta=config.delta, accountant=accountant, path=path)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class CountRelease:
    """What the private step released.

    Attributes:
        estimated: ``(s, |Y|)`` float64 released (or unbiasedly estimated) vote counts.
        true_counts: ``(s, |Y|)`` int64 exact counts (kept for *measuring* the noise only).
        mechanisms: Human-readable description of each mechanism used.
        events: The events charged to the ledger, in order.
        local_epsilon: The clients' local epsilon (local and shuffle modes), else None.
    """

    estimated: np.ndarray
    true_counts: np.ndarray
    mechanisms: tuple[str, ...]
    events: tuple[_dp.DpEvent, ...]
    local_epsilon: float | None


def _index_sets(neighbours: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Answer index sets ``query * |Y| + label`` of every record: int64 ``(n, k)``."""
    return neighbours * num_classes + labels[:, None]


def _local_rr(mech: BitRandomizedResponse, neighbours: np.ndarray, labels: np.ndarray,
              *, simulate: bool, rng: np.random.Generator, progress: bool) -> np.ndarray:
    s, c = mech.num_queries, mech.num_classes
    n = labels.shape[0]
    if simulate:
        # Exact law of the aggregate: ones per cell = Bin(count, keep) + Bin(n - count, flip).
        counts = reverse_knn_counts(neighbours, labels, num_queries=s, num_classes=c)
        ones = (rng.binomial(counts, mech.keep_probability)
                + rng.binomial(n - counts, mech.flip_probability))
        p, q = mech.keep_probability, mech.flip_probability
        return (ones - n * q) / (p - q)
    total = np.zeros((s, c), dtype=np.float64)
    starts = range(0, n, _CLIENT_CHUNK)
    for start in progress_bar(starts, enabled=progress, desc="local RR clients",
                              total=len(starts), unit="chunk"):
        stop = min(n, start + _CLIENT_CHUNK)
        answers = np.zeros((stop - start, s, c), dtype=np.uint8)
        rows = np.repeat(np.arange(stop - start), neighbours.shape[1])
        answers[rows, neighbours[start:stop].ravel(),
                np.repeat(labels[start:stop], neighbours.shape[1])] = 1
        reports = mech.randomize_clients(answers, rng)
        total += mech.estimate_counts(reports)  # linear in the clients: chunks add up
    return total


def _local_collision(mech: Collision, sets: np.ndarray, *, rng: np.random.Generator,
                     progress: bool) -> np.ndarray:
    n = sets.shape[0]
    total = np.zeros(mech.domain_size, dtype=np.float64)
    starts = range(0, n, _CLIENT_CHUNK)
    for start in progress_bar(starts, enabled=progress, desc="Collision clients",
                              total=len(starts), unit="chunk"):
        reports = mech.randomize_clients(sets[start:start + _CLIENT_CHUNK], rng)
        total += mech.estimate_counts(reports)
    return total


def release_counts(neighbours: np.ndarray, labels: np.ndarray, *, config: RknnConfig,
                   num_classes: int, ledger: Ledger, rng: np.random.Generator,
                   progress: bool = False) -> CountRelease:
    """Release the vote counts of ``labels`` voting into ``neighbours`` under ``config.mode``.

    Every charge happens before the corresponding output exists; if the ledger refuses, the
    exception propagates and nothing is released.

    Args:
        neighbours: ``(n, k)`` int64 nearest queries of every private record.
        labels: ``(n,)`` int64 private labels.
        config: The run configuration (mode, epsilon, delta, s, k).
        num_classes: |Y|.
        ledger: The budget filter charged for the release.
        rng: Generator of all release randomness.
        progress: Progress bars for the per-client modes.
    """
    rng = _validate.check_generator(rng)
    n = labels.shape[0]
    s = config.clusters
    true_counts = reverse_knn_counts(neighbours, labels, num_queries=s, num_classes=num_classes)
    mechs = build_mechanisms(config, num_private=n, num_classes=num_classes)
    what = f"reverse k-NN counts ({config.dataset.value}, s={s}, k={config.k}"
    mode = config.mode
    local_epsilon: float | None = None
    if mode is ReleaseMode.CENTRAL:
        (mech,) = mechs
        estimated = np.asarray(mech.release(true_counts, rng=rng, ledger=ledger,
                                            label=f"{what}, central)"), dtype=np.float64)
    elif mode is ReleaseMode.LOCAL_RR:
        (mech,) = mechs
        local_epsilon = mech.epsilon
        ledger.charge(mech.event, label=f"{what}, local bit RR, {n} clients)")
        estimated = _local_rr(mech, neighbours, labels, simulate=config.simulate_local,
                              rng=rng, progress=progress)
    elif mode is ReleaseMode.LOCAL_COLLISION:
        (mech,) = mechs
        local_epsilon = mech.epsilon
        ledger.charge(mech.event, label=f"{what}, local Collision, {n} clients)")
        estimated = _local_collision(mech, _index_sets(neighbours, labels, num_classes),
                                     rng=rng, progress=progress).reshape(s, num_classes)
    elif mode is ReleaseMode.SHUFFLE:
        (mech,) = mechs
        local_epsilon = mech.local_epsilon
        reports = mech.release(_index_sets(neighbours, labels, num_classes), rng=rng,
                               ledger=ledger,
                               label=f"{what}, shuffled Collision eps0={local_epsilon:.4g})")
        estimated = mech.local.estimate_counts(reports).reshape(s, num_classes)
    else:
        estimated = np.zeros((s, num_classes), dtype=np.float64)
        for rank, mech in enumerate(mechs):
            bins = neighbours[:, rank] * num_classes + labels
            view = mech.release(bins, rng=rng, ledger=ledger,
                                label=f"{what}, shuffled histogram of neighbour rank {rank + 1})")
            estimated += mech.estimate(view).reshape(s, num_classes)
    if not np.all(np.isfinite(estimated)):
        raise RuntimeError("the released counts are not finite; please report this bug")
    return CountRelease(estimated=estimated, true_counts=true_counts,
                        mechanisms=tuple(f"{m.label}, sensitivity {m.sensitivity}" for m in mechs),
                        events=tuple(m.event for m in mechs), local_epsilon=local_epsilon)


def planned_events(config: RknnConfig, *, num_private: int,
                   num_classes: int) -> list[_dp.DpEvent]:
    """The events :func:`release_counts` will charge (for checking the budget up front)."""
    return [m.event for m in build_mechanisms(config, num_private=num_private,
                                              num_classes=num_classes)]
