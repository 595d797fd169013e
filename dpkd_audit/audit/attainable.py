"""The best bound an audit of a declared mechanism could attain: its privacy-loss tails.

An audit counts one event S on ``n`` samples per side and reports the Clopper-Pearson bound
``ln((LCB(P_x(S)) - delta) / UCB(P_x'(S)))``. For a mechanism whose privacy loss
``L = ln(p_x(y) / p_x'(y))`` has a known distribution (its :class:`~dp_accounting.dp_event.
DpEvent`'s privacy-loss distribution, PLD), the most powerful events are the loss tails
``S_l = {y : L(y) >= l}`` (Neyman-Pearson), with

    P_x(S_l) = P_{L ~ x}(L >= l),      P_x'(S_l) = E_{L ~ x}[exp(-L) 1{L >= l}]

(the second by the change of measure ``p_x' = exp(-L) p_x``). :func:`attainable_epsilon`
evaluates :func:`~dpkd_audit.audit.bounds.optimal_attainable_bound` at those pairs, for every
``l`` on the PLD's grid and both directions (the PLD's "remove" and "add" pmfs): the bound an
auditor that knew the optimal event and drew exactly the expected counts would report. For an
(epsilon, delta) mechanism at small delta this is well below epsilon at any practical ``n``
(the tail events that reach epsilon have probability near delta): what a user should compare
an audit with, rather than the claim alone.

The PLD is the package's pessimistic one (:meth:`~dpkd_audit.accountants.PLDAccountant.
event_pld`: losses rounded up to a grid of step ``1e-4``), so the figure is at most that much
above the exact one. It is the attainable bound of the event's *dominating pair*; an audit on
another pair of the mechanism's inputs can attain less.

Never imports torch.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting import dp_event as _dp
from scipy.special import expit

from dpkd_audit import _validate
from dpkd_audit.accountants.pld import PLDAccountant
from dpkd_audit.audit.bounds import ProbabilityKind, optimal_attainable_bound

__all__ = ["attainable_epsilon", "claim_attainable_epsilon", "loss_tail_events",
           "samples_needed"]


def loss_tail_events(event: _dp.DpEvent) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(P_x(S_l), P_x'(S_l))`` over the loss grid, one pair of arrays per direction.

    Args:
        event: A DP event the package's :class:`~dpkd_audit.accountants.PLDAccountant`
            accounts (its neighbouring relation: replace-one, the package's).

    Raises:
        UnsupportedEventError: If the PLD accountant refuses the event.
        ValueError: If the event has no finite PLD.
    """
    pld = PLDAccountant().event_pld(event)
    pairs = []
    # dp_accounting 0.6.0 exposes the two directions' pmfs and a dense pmf's grid only as
    # attributes (its own modules read them the same way)
    for pmf in (pld._pmf_remove, pld._pmf_add):
        dense = pmf.to_dense_pmf()
        probs = np.asarray(dense._probs, dtype=np.float64)
        losses = (dense._lower_loss + np.arange(probs.size)) * dense._discretization
        infinity = float(dense._infinity_mass)
        order = np.argsort(-losses, kind="stable")
        tail_x = np.cumsum(probs[order]) + infinity
        tail_xp = np.cumsum(probs[order] * np.exp(-losses[order]))
        pairs.append((np.clip(tail_x, 0.0, 1.0), np.clip(tail_xp, 0.0, 1.0)))
    return pairs


def attainable_epsilon(event: _dp.DpEvent, *, n: int, delta: float = 0.0,
                       confidence: float = 0.95) -> float:
    """The best epsilon lower bound an audit with ``n`` bounding samples per side can attain.

    Args:
        event: The mechanism's DP event (e.g. ``Gaussian(...).event``).
        n: Samples per side counted by the bound (an integer >= 1): an audit of ``N``
            samples counts ``N`` minus its selection part.
        delta: The claimed delta, in [0, 1).
        confidence: Confidence of the bound, in (0, 1).

    Returns:
        The attainable bound (>= 0).

    Raises:
        ValueError: If an argument is out of range (the message names it) or the event has no
            finite PLD.
        UnsupportedEventError: If the PLD accountant refuses the event.
    """
    n = _validate.check_int("n", n, minimum=1)
    delta = _validate.check_delta(delta)
    best = 0.0
    for tail_x, tail_xp in loss_tail_events(event):
        best = max(best, optimal_attainable_bound(tail_x, tail_xp, n=n, delta=delta,
                                                  confidence=confidence))
    return best


def _claim_pair(epsilon: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """The dominating pair of every (epsilon, delta)-DP pair: four outcomes.

    Kairouz, Oh, Viswanath, "The composition theorem for differential privacy", ICML 2015,
    Theorem 2.1 (the pair ``P = (delta, (1 - delta) e^eps / (1 + e^eps), (1 - delta) /
    (1 + e^eps), 0)`` and ``Q`` its mirror image): every (epsilon, delta)-DP mechanism's output
    pair is a post-processing of it, so no event of any such mechanism is more telling.
    """
    high = (1.0 - delta) * float(expit(epsilon))
    low = (1.0 - delta) * float(expit(-epsilon))
    return (np.array([delta, high, low, 0.0]), np.array([0.0, low, high, delta]))


def claim_attainable_epsilon(epsilon: float, delta: float = 0.0, *, n: int,
                             confidence: float = 0.95) -> float:
    """The most an audit with ``n`` bounding samples per side can show of a claim that holds.

    :func:`~dpkd_audit.audit.bounds.optimal_attainable_bound` on the claim's dominating pair
    (:func:`_claim_pair`, Kairouz-Oh-Viswanath 2015, Thm 2.1): whatever the mechanism, if it
    meets (epsilon, delta) no audit's bound at these sample sizes is expected above this. It
    needs nothing but the claim; a mechanism's own event (:func:`attainable_epsilon`) gives a
    figure at most this large (a Gaussian's is well below it).

    Raises:
        ValueError: If an argument is out of range (the message names it).
    """
    epsilon = _validate.check_epsilon(epsilon)
    delta = _validate.check_delta(delta)
    n = _validate.check_int("n", n, minimum=1)
    p, q = _claim_pair(epsilon, delta)
    return optimal_attainable_bound(p, q, n=n, delta=delta, confidence=confidence,
                                    kind=ProbabilityKind.PMF)


#: Loss-tail events kept by :func:`samples_needed` (log-spaced in their probability).
THINNED_EVENTS = 4096


def _thinned(tail_x: np.ndarray, tail_xp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most :data:`THINNED_EVENTS` of the tail events, log-spaced in ``P_x``.

    A subset of the candidate events: the best bound over it is at most the best over all, so a
    sample size found with it is at least the exact one (never an optimistic answer).
    """
    if tail_x.size <= THINNED_EVENTS:
        return tail_x, tail_xp
    low = max(float(tail_x[tail_x > 0].min(initial=1.0)), 1e-300)
    marks = np.geomspace(low, 1.0, THINNED_EVENTS)
    idx = np.unique(np.clip(np.searchsorted(tail_x, marks), 0, tail_x.size - 1))
    return tail_x[idx], tail_xp[idx]


def samples_needed(epsilon: float, delta: float = 0.0, *, fraction: float = 0.5,
                   confidence: float = 0.95, event: _dp.DpEvent | None = None,
                   limit: int = 10**12) -> int | None:
    """Fewest bounding samples per side at which the attainable bound reaches ``fraction``.

    ``fraction`` of the claim is the power a conclusive audit needs (see
    :data:`~dpkd_audit.audit.auditor.POWER_FRACTION`).
    With ``event``: the mechanism's own attainable bound (:func:`attainable_epsilon`); without:
    the claim's (:func:`claim_attainable_epsilon`), a lower limit for any mechanism. Found by
    bisection on a log grid (the attainable bound grows with ``n``), to 2% in ``n``.

    Returns:
        The sample size, or ``None`` if not reached by ``limit`` samples per side.
    """
    fraction = _validate.check_probability("fraction", fraction, open_low=True)
    target = fraction * _validate.check_epsilon(epsilon)
    delta = _validate.check_delta(delta)
    # the tails are computed once (a PLD takes about a second); each n is then a few quantiles
    tails = ([_thinned(tx, txp) for tx, txp in loss_tail_events(event)] if event is not None
             else [_claim_pair(epsilon, delta)])
    kind = ProbabilityKind.EVENTS if event is not None else ProbabilityKind.PMF

    def reach(n: int) -> float:
        return max(optimal_attainable_bound(p, q, n=n, delta=delta, confidence=confidence,
                                            kind=kind) for p, q in tails)

    if reach(limit) < target:
        return None
    low, high = 1, limit
    while high > 1.02 * low + 1:
        mid = int(math.sqrt(low * high))
        if reach(mid) >= target:
            high = mid
        else:
            low = mid
    return high
