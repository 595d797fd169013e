"""Exact binomial confidence bounds and the epsilon lower bound they give.

An auditor fixes an event ``S`` of the output space, runs the mechanism ``N`` times on each of two
neighbouring inputs and counts the hits ``k_1`` (under the input whose probability is in the
numerator) and ``k_0`` (under the other). If the mechanism is (epsilon, delta)-DP then
``P_1(S) <= e^epsilon P_0(S) + delta`` (Dwork-Roth 2014, Definition 2.4), so

    epsilon >= ln((P_1(S) - delta) / P_0(S)).

Replacing ``P_1(S)`` by an exact lower confidence bound and ``P_0(S)`` by an exact upper one
(Clopper-Pearson 1934), each one-sided at level ``1 - (1 - c) / 2`` so that both hold together with
probability at least ``c`` (union bound), gives a lower bound on epsilon valid with confidence
``c`` (Jagielski, Ullman, Oprea, NeurIPS 2020, Section 3; Bichsel et al., "DP-Sniper", IEEE S&P
2021, Section 5). The event must not depend on the samples that are counted.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import numpy as np
from scipy import stats

from dpkd_audit import _validate

__all__ = [
    "ProbabilityKind",
    "clopper_pearson",
    "epsilon_lower_bound",
    "optimal_attainable_bound",
]


# --------------------------------------------------------------------------- Clopper-Pearson

def _cp_lower(k: np.ndarray, n: np.ndarray, alpha: float) -> np.ndarray:
    """One-sided exact lower bound at level ``1 - alpha`` (vectorised, real ``k`` allowed).

    Clopper and Pearson, Biometrika 1934: the lower bound is the ``alpha`` quantile of
    Beta(k, n - k + 1), and 0 when ``k = 0``. For real ``k`` (expected counts) the same Beta
    quantile is the continuous interpolation of the exact bound.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = stats.beta.ppf(alpha, np.maximum(k, 1e-300), np.maximum(n - k + 1.0, 1e-300))
    return np.where(k <= 0, 0.0, low)


def _cp_upper(k: np.ndarray, n: np.ndarray, alpha: float) -> np.ndarray:
    """One-sided exact upper bound at level ``1 - alpha`` (vectorised, real ``k`` allowed).

    Clopper-Pearson 1934: the ``1 - alpha`` quantile of Beta(k + 1, n - k), and 1 when ``k = n``
    (computed with ``isf`` for accuracy in the upper tail).
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        up = stats.beta.isf(alpha, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, up)


def _check_counts(hits: Any, n: Any, hits_name: str, n_name: str) -> tuple[int, int]:
    n = _validate.check_int(n_name, n, minimum=1)
    hits = _validate.check_int(hits_name, hits, minimum=0, maximum=n)
    return hits, n


def _check_confidence(confidence: Any) -> float:
    return _validate.check_probability("confidence", confidence, open_low=True, open_high=True)


def clopper_pearson(hits: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided confidence interval for a binomial proportion.

    Clopper and Pearson, "The use of confidence or fiducial limits illustrated in the case of the
    binomial", Biometrika 26 (1934): ``lower = Beta(alpha; k, n - k + 1)`` and
    ``upper = Beta(1 - alpha; k + 1, n - k)`` quantiles with ``alpha = (1 - confidence) / 2``
    (``lower = 0`` if ``k = 0``, ``upper = 1`` if ``k = n``). Each end is a one-sided bound at level
    ``1 - alpha``; both hold together with probability at least ``confidence``.

    Args:
        hits: Number of successes k (an integer in [0, n]).
        n: Number of trials (an integer >= 1).
        confidence: Two-sided confidence level, in (0, 1).

    Returns:
        ``(lower, upper)``.

    Raises:
        ValueError: If an argument is out of range (the message names it).
    """
    hits, n = _check_counts(hits, n, "hits", "n")
    alpha = (1.0 - _check_confidence(confidence)) / 2.0
    return float(_cp_lower(hits, n, alpha)), float(_cp_upper(hits, n, alpha))


# --------------------------------------------------------------------------- epsilon bound

def _epsilon_bound_array(hits_1: Any, n_1: Any, hits_0: Any, n_0: Any, delta: float,
                         alpha: float) -> np.ndarray:
    """Vectorised ``max(0, ln((LCB_1 - delta) / UCB_0)))`` with one-sided CP bounds at ``alpha``.

    Dwork-Roth 2014 Definition 2.4 with Clopper-Pearson 1934 bounds (see the module docstring);
    ``alpha`` is the error of *each* one-sided bound.
    """
    lcb = _cp_lower(hits_1, n_1, alpha) - delta
    ucb = _cp_upper(hits_0, n_0, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.log(lcb / ucb)
    return np.where(lcb > 0, np.maximum(eps, 0.0), 0.0)


def epsilon_lower_bound(hits_1: int, n_1: int, hits_0: int, n_0: int, *, delta: float = 0.0,
                        confidence: float = 0.95) -> float:
    """Lower bound on epsilon from the hit counts of one fixed event under two inputs.

    ``max(0, ln((LCB_1 - delta) / UCB_0))`` where ``LCB_1`` is the exact Clopper-Pearson lower
    bound of ``P_1(S)`` and ``UCB_0`` the exact upper bound of ``P_0(S)``, each one-sided at level
    ``1 - (1 - confidence) / 2`` (union bound: both hold with probability >= ``confidence``).
    Sound because (epsilon, delta)-DP implies ``P_1(S) <= e^epsilon P_0(S) + delta``
    (Dwork-Roth 2014, Definition 2.4); the auditing bound of Jagielski-Ullman-Oprea, NeurIPS
    2020, Section 3. The event must have been chosen without looking at these counts.

    Args:
        hits_1: Hits among the ``n_1`` outputs on the input in the numerator.
        n_1: Number of outputs on that input.
        hits_0: Hits among the ``n_0`` outputs on the other input.
        n_0: Number of outputs on the other input.
        delta: The delta of the claim, in [0, 1).
        confidence: Confidence of the bound, in (0, 1).

    Returns:
        The lower bound (a float >= 0; 0 when the counts show nothing).

    Raises:
        ValueError: If an argument is out of range (the message names it).
    """
    hits_1, n_1 = _check_counts(hits_1, n_1, "hits_1", "n_1")
    hits_0, n_0 = _check_counts(hits_0, n_0, "hits_0", "n_0")
    delta = _validate.check_delta(delta)
    alpha = (1.0 - _check_confidence(confidence)) / 2.0
    return float(_epsilon_bound_array(hits_1, n_1, hits_0, n_0, delta, alpha))


# --------------------------------------------------------------------------- benchmark

class ProbabilityKind(enum.Enum):
    """How :func:`optimal_attainable_bound` reads its two probability arrays."""

    #: Entry ``i`` of each array is the exact probability of candidate event ``i`` under each
    #: input (a scalar is one event).
    EVENTS = "events"
    #: The arrays are the two exact probability mass functions over the same outcomes; every
    #: likelihood-ratio prefix set (Neyman-Pearson) in either direction is a candidate event.
    PMF = "pmf"


def _as_probabilities(p: Any, name: str) -> np.ndarray:
    try:
        arr = np.atleast_1d(np.asarray(p, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a probability or an array of probabilities; "
                         f"got {type(p).__name__}") from exc
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a scalar or a non-empty 1-D array; got shape "
                         f"{np.shape(p)}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ValueError(f"{name} must hold probabilities in [0, 1]")
    return arr


def optimal_attainable_bound(p_x: Any, p_x_prime: Any, *, n: int, delta: float = 0.0,
                             confidence: float = 0.95,
                             kind: ProbabilityKind = ProbabilityKind.EVENTS) -> float:
    """The tightest epsilon lower bound attainable with ``n`` samples per side (a benchmark).

    The Clopper-Pearson bound of :func:`epsilon_lower_bound` evaluated at the *expected* counts
    ``n P_x(S)`` and ``n P_x'(S)`` (real-valued counts: the Beta quantiles interpolate the exact
    bound), maximised over the candidate events and both directions (``x`` vs ``x'`` and ``x'``
    vs ``x``). An auditor that knew the optimal event in advance and drew exactly the expected
    counts would report this number; comparing an audit with it measures what event selection
    and the split of the samples cost.

    With ``kind=ProbabilityKind.PMF`` the candidates are the likelihood-ratio prefix sets of the
    two pmfs (Neyman-Pearson lemma: each is the most powerful set at its size), which contain the
    optimal event up to the granularity of the outcomes.

    Args:
        p_x: Exact probabilities under ``x`` (see ``kind``).
        p_x_prime: Exact probabilities under ``x'``, same shape.
        n: Samples per side counted by the bound (an integer >= 1).
        delta: The delta of the claim, in [0, 1).
        confidence: Confidence of the bound, in (0, 1).
        kind: How to read the probability arrays.

    Returns:
        The attainable lower bound (a float >= 0).

    Raises:
        ValueError: If an argument is out of range (the message names it).
    """
    if not isinstance(kind, ProbabilityKind):
        raise ValueError(f"kind must be a ProbabilityKind "
                         f"({', '.join(k.name for k in ProbabilityKind)}); got {kind!r}")
    px = _as_probabilities(p_x, "p_x")
    pq = _as_probabilities(p_x_prime, "p_x_prime")
    if px.shape != pq.shape:
        raise ValueError(f"p_x and p_x_prime must have the same shape; got {px.shape} and "
                         f"{pq.shape}")
    n = _validate.check_int("n", n, minimum=1)
    delta = _validate.check_delta(delta)
    alpha = (1.0 - _check_confidence(confidence)) / 2.0
    best = 0.0
    for num, den in ((px, pq), (pq, px)):
        if kind is ProbabilityKind.PMF:
            for name, arr in (("p_x", px), ("p_x_prime", pq)):
                if not math.isclose(float(arr.sum()), 1.0, rel_tol=0, abs_tol=1e-9):
                    raise ValueError(f"{name} must sum to 1 for kind=PMF; got {arr.sum()!r}")
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(den > 0, num / den, np.inf)
            order = np.argsort(-ratio, kind="stable")
            e_num = np.clip(np.cumsum(num[order]), 0.0, 1.0)
            e_den = np.clip(np.cumsum(den[order]), 0.0, 1.0)
        else:
            e_num, e_den = num, den
        bounds = _epsilon_bound_array(n * e_num, n, n * e_den, n, delta, alpha)
        best = max(best, float(np.max(bounds)))
    return best
