"""Privacy amplification by shuffling: the closed-form bound of Feldman, McMillan and Talwar.

Feldman, McMillan, Talwar, "Hiding Among the Clones: A Simple and Nearly Optimal Analysis of
Privacy Amplification by Shuffling", FOCS 2021 (arXiv:2012.12803), Theorem 3.1: if each of ``n``
users applies an ``epsilon0``-DP local randomizer to its own record and the ``n`` reports are
uniformly shuffled, then for every delta in (0, 1) with

    epsilon0 <= log(n / (16 log(2 / delta)))                                       (validity)

the shuffled output is (epsilon, delta)-DP (replace-one neighbours) with

    epsilon = log(1 + (e^eps0 - 1)/(e^eps0 + 1) * (8 sqrt(e^eps0 log(4/delta)) / sqrt(n)
                                                    + 8 e^eps0 / n)).

The same statement (condition and formula) is quoted by the reverse k-NN paper
(papers/rknn-fine-grained-private-kd.txt, "Single-message Shuffling"). FMT21 also give a
numerical bound that is several times tighter; it is not implemented in this module yet.
"""

from __future__ import annotations

import math

from dpkd_audit import _validate

__all__ = ["closed_form_epsilon", "closed_form_max_local_epsilon"]


def closed_form_max_local_epsilon(n: int, delta: float) -> float:
    """The largest epsilon0 for which FMT21 Theorem 3.1 applies: log(n / (16 log(2/delta))).

    Args:
        n: Number of users (an integer >= 1).
        delta: Target delta, in (0, 1).

    Returns:
        The bound (negative, or zero, when no epsilon0 > 0 qualifies).
    """
    n = _validate.check_int("n", n, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    # log(n) - log(16) - log(log(2/delta)), evaluated in log space (log(2/delta) > log 2 > 0).
    return math.log(n) - math.log(16.0) - math.log(math.log(2.0) - math.log(delta))


def closed_form_epsilon(epsilon0: float, n: int, delta: float) -> float:
    """Central epsilon of ``n`` shuffled ``epsilon0``-LDP reports (FMT21, Theorem 3.1).

    epsilon = log(1 + tanh(eps0/2) * (8 sqrt(e^eps0 log(4/delta) / n) + 8 e^eps0 / n)), using
    (e^eps0 - 1)/(e^eps0 + 1) = tanh(eps0 / 2) (no cancellation for small eps0) and ``log1p``.

    Args:
        epsilon0: Pure epsilon of the local randomizer (finite, > 0).
        n: Number of users, each contributing one report (an integer >= 1).
        delta: Target delta of the shuffled output, in (0, 1).

    Returns:
        The epsilon of Theorem 3.1 at ``delta``.

    Raises:
        ValueError: If a parameter is out of range, or if the theorem's validity condition
            epsilon0 <= log(n / (16 log(2/delta))) fails (the message gives the values and
            points to the numerical bound).
    """
    epsilon0 = _validate.check_epsilon(epsilon0, "epsilon0")
    n = _validate.check_int("n", n, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    limit = closed_form_max_local_epsilon(n, delta)
    if epsilon0 > limit:
        raise ValueError(
            "the Feldman-McMillan-Talwar 2021 closed form (Theorem 3.1) needs "
            f"epsilon0 <= log(n / (16 log(2/delta))) = {limit:.6g}; got epsilon0={epsilon0!r}, "
            f"n={n}, delta={delta!r}. Use more users, a smaller epsilon0, or FMT21's numerical "
            "amplification bound instead")
    e0 = math.exp(epsilon0)  # <= n / (16 log(2/delta)) here, so no overflow
    log4 = math.log(4.0) - math.log(delta)
    bracket = 8.0 * math.sqrt(e0 * log4 / n) + 8.0 * e0 / n
    return math.log1p(math.tanh(0.5 * epsilon0) * bracket)
