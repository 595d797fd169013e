"""Windows of the binomial distribution for the exact compositions of two-atom pairs.

The k-fold composition of an (eps, delta) dominating pair (Kairouz-Oh-Viswanath 2015, Thm 3.3)
is a binomial law over the number J of releases that took their less likely value. For large k
only a window of J around its mean carries mass above ~1e-30; the optimal-composition and PLD
accountants keep that window and charge the mass outside it pessimistically.
"""

from __future__ import annotations

from scipy import special, stats

__all__ = ["MAX_EXACT_COUNT", "binomial_window"]

#: Largest composition count handled exactly: its window of J (about 24 standard deviations)
#: then holds at most ~1.2e7 atoms, and k, j and k - 2j stay exact in floating point.
MAX_EXACT_COUNT = 10**12


def binomial_window(count: int, epsilon: float, tail: float) -> tuple[int, int, float, float]:
    """Window [lo, hi] of J ~ Bin(count, 1/(1 + e^eps)) and the masses left out below and above.

    Both ends come from lower quantiles, since scipy's ``isf`` cannot resolve probabilities near
    1e-31: the upper tail of J is the lower tail of count - J ~ Bin(count, 1/(1 + e^-eps)).

    Args:
        count: Number of releases k (an integer in [1, MAX_EXACT_COUNT]).
        epsilon: Loss of one release (>= 0).
        tail: Largest mass to leave out on each side (> 0).

    Returns:
        (lo, hi, mass below lo, mass above hi); the masses are inflated by 1e-6 relative for
        the accuracy of scipy's incomplete beta function. The whole range (0, count, 0, 0) if
        the quantiles are inconsistent.
    """
    law = stats.binom(count, float(special.expit(-epsilon)))
    mirror = stats.binom(count, float(special.expit(epsilon)))
    lo = max(0, int(law.ppf(tail)))
    hi = min(count, count - int(mirror.ppf(tail)))
    below = float(law.cdf(lo - 1)) if lo > 0 else 0.0
    above = float(mirror.cdf(count - hi - 1)) if hi < count else 0.0
    if lo > hi or below > 2 * tail or above > 2 * tail:
        return 0, count, 0.0, 0.0
    return lo, hi, below * (1.0 + 1e-6), above * (1.0 + 1e-6)
