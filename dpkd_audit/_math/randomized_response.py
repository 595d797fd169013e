"""k-ary randomized response's event parameter, exact where a float can carry it.

Shared by the mechanism (:mod:`dpkd_audit.mechanisms.randomized_response`) and the budget
planner (:mod:`dpkd_audit.accountants.budget`), so both charge the same event. Bottom layer:
imports nothing of the package.
"""

from __future__ import annotations

import math

__all__ = ["RR_ABSOLUTE_SLACK", "RR_EXACTNESS", "rr_noise_parameter"]


def _rr_event_guarantee(p: float, k: int) -> float:
    """Epsilon of dp_accounting's RR event with noise parameter p over k buckets.

    Keep w.p. 1 - p + p/k, any other bucket w.p. p/k: eps = ln(1 + k(1-p)/p)
    (Warner 1965; Kairouz-Oh-Viswanath 2016). Same formula as ``accountants.pure``.
    """
    return math.log1p(k * (1.0 - p) / p)


#: Largest relative excess of the event's epsilon over the claim that
#: :func:`rr_noise_parameter` accepts before refusing: near ``p = 1`` the float grid gives
#: ``1 - p`` only to about ``2^-53 k / (e^eps - 1)`` relative, up to 1/8 inside the sampler's
#: own domain (epsilon >= 2^-50 k); beyond this the event would claim a multiple of the release
#: (k = 10^30 at epsilon 1: 32), so the parameters are refused (about k > 4 x 10^15 there).
RR_EXACTNESS = 0.25
#: ... or by this much in absolute terms (at tiny epsilon the float grid of ``p`` is coarser
#: than the claim; an over-statement this small is conservative and invisible in any table).
RR_ABSOLUTE_SLACK = 1e-12


def rr_noise_parameter(epsilon: float, k: int) -> float:
    """dp_accounting's noise parameter ``p = k / (e^eps + k - 1)`` of k-ary randomized response.

    Rounded down by at most a few ulps so that the event's epsilon ``ln(1 + k (1 - p) / p)``
    (:func:`_rr_event_guarantee`) is never below the claim; refused where no float ``p`` gives
    an event within :data:`RR_EXACTNESS` (relative) or :data:`RR_ABSOLUTE_SLACK` of the claim:
    for huge ``k`` the plain formula rounds ``p`` to 1, an event claiming epsilon 0 for a
    release at ``epsilon``, and the nearest float below 1 claims far more than the release.

    Raises:
        ValueError: Naming ``num_classes``, if the arithmetic cannot represent the claim.
    """
    p = k / (k + math.expm1(epsilon))
    for _ in range(64):  # a float p is within 1 ulp; each step moves it by 1 ulp
        if _rr_event_guarantee(p, k) >= epsilon:
            break
        p = math.nextafter(p, 0.0)
    got = _rr_event_guarantee(p, k) if p < 1.0 else 0.0
    if not (epsilon <= got <= epsilon + max(epsilon * RR_EXACTNESS, RR_ABSOLUTE_SLACK)):
        raise ValueError(
            f"num_classes={k} is too large for randomized response at epsilon={epsilon:g}: the "
            f"float noise parameter cannot carry the claim (the nearest one gives an event at "
            f"{got:.9g}); use num_classes <= about "
            f"{max(2.0, RR_EXACTNESS * math.expm1(epsilon) * 2.0**53):.3g}")
    return p
