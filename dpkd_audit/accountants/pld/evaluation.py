"""Epsilon and delta of a dp_accounting PLD, evaluated in log space (for :mod:`.pld`).

dp_accounting's own evaluation walks the grid by repeated float addition, sums the FFT's
negative round-off and underflows e^-L above L ~ 745; these functions evaluate the pessimistic
pmf from suffix sums in log space instead (see the module docstring of :mod:`.pld`, point 4).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as _pld

from dpkd_audit._math.privacy import analytic_gaussian_epsilon


@functools.lru_cache(maxsize=4)  # keyed by pmf identity: the composed history's pmfs
def _suffix_sums(pmf: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Losses L_i, suffix masses U_i = sum_{j>=i} p_j, log W_i = log sum_{j>=i} p_j e^-L_j."""
    if isinstance(pmf, pld_pmf.SparsePLDPmf):
        keys = np.array(sorted(pmf._loss_probs), dtype=np.int64)
        probs = np.array([pmf._loss_probs[k] for k in keys.tolist()], dtype=np.float64)
        index = keys
    else:
        probs = np.asarray(pmf._probs, dtype=np.float64)
        index = pmf._lower_loss + np.arange(probs.size)
    probs = np.maximum(probs, 0.0)
    losses = index * pmf._discretization
    upper = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
    with np.errstate(divide="ignore"):
        log_terms = np.log(probs) - losses
    log_lower = np.concatenate([np.logaddexp.accumulate(log_terms[::-1])[::-1], [-np.inf]])
    return losses, upper, log_lower, float(pmf._infinity_mass)


def _pmf_delta(pmf: Any, epsilon: float) -> float:
    """delta(eps) = inf_mass + sum_{L > eps} p (1 - e^(eps - L)) of one PLD pmf.

    Evaluated in log space from suffix sums, with loss values computed as integer * interval
    and negative FFT round-off entries counted as 0 (more mass: pessimistic). dp_accounting's own
    evaluation walks the grid by repeated float addition (drift ~1e-8 over 10^6 steps), sums
    the negative round-off (which pulled epsilon *below* the exact value at small deltas, e.g.
    by 0.1 at delta = 1e-12 for 3000 compositions) and underflows e^-L for losses above ~745.
    """
    losses, upper, log_lower, infinity = _suffix_sums(pmf)
    i = int(np.searchsorted(losses, epsilon, side="right"))
    return infinity + max(0.0, float(upper[i] - np.exp(epsilon + log_lower[i])))


def _pmf_epsilon(pmf: Any, delta: float) -> float:
    """Smallest eps >= 0 with delta(eps) <= ``delta`` for one PLD pmf (inf if none).

    On (L_{i-1}, L_i] the curve is inf_mass + U_i - e^eps W_i, so with i the first index whose
    delta(L_i) fits, eps = log(inf_mass + U_i - delta) - log W_i (clipped to the interval).
    """
    losses, upper, log_lower, infinity = _suffix_sums(pmf)
    if infinity > delta:
        return math.inf
    at_losses = infinity + upper[1:] - np.exp(losses + log_lower[1:])  # delta(L_i)
    fits = np.flatnonzero(at_losses <= delta)
    i = int(fits[0])  # delta(L_last) = inf_mass <= delta, so fits is never empty
    if upper[i] + infinity - delta <= 0.0:
        return max(0.0, float(losses[i - 1])) if i > 0 else 0.0
    eps = math.log(upper[i] + infinity - delta) - float(log_lower[i])
    low = float(losses[i - 1]) if i > 0 else -math.inf
    return max(0.0, min(float(losses[i]), max(low, eps)))


def _pld_pmfs(pld: _pld.PrivacyLossDistribution) -> list[Any]:
    return [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]


def _pld_epsilon(pld: _pld.PrivacyLossDistribution, delta: float) -> float:
    """Epsilon at ``delta`` of a PLD: the larger over its add/remove directions."""
    return max(_pmf_epsilon(pmf, delta) for pmf in _pld_pmfs(pld))


def _pld_delta(pld: _pld.PrivacyLossDistribution, epsilon: float) -> float:
    """Delta at ``epsilon`` of a PLD: the larger over its add/remove directions."""
    return max(_pmf_delta(pmf, epsilon) for pmf in _pld_pmfs(pld))


def _gaussian_epsilon(sigma: float, delta: float) -> float:
    """Exact epsilon of N(0, sigma^2) vs N(1, sigma^2) at ``delta`` (Balle-Wang 2018, Thm 8)."""
    return analytic_gaussian_epsilon(sigma, delta)
