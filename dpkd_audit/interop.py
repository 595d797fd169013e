"""Hand any charge to dp_accounting: convert this package's events to dp_accounting's own.

:func:`to_dp_accounting` rewrites an event tree (``ComposedDpEvent``, ``SelfComposedDpEvent``,
the sampling wrappers) so that every leaf is one of dp_accounting's standard events, which its
``RdpAccountant`` and ``PLDAccountant`` understand. A conversion is either *exact* (the same
pair of output distributions, up to post-processing) or *dominating* (a pair that is at least
as distinguishable, so every accountant's epsilon for it is an upper bound for the original):

===================================  ==========================================================
ours                                 dp_accounting                                 kind
===================================  ==========================================================
CalibratedGaussianDpEvent(s)         GaussianDpEvent(s)                              exact
LaplaceNoisyMaxDpEvent(b)            SelfComposed(LaplaceDpEvent(b), 2): the noisy     exact
                                     histogram moves by one in two counts
GaussianNoisyMaxDpEvent(sigma)       GaussianDpEvent(sigma / sqrt(2)): L2 shift sqrt(2) exact
BitRandomizedResponseDpEvent         SelfComposed(binary RR(eps_bit), bits_changed)  exact
DiscreteGaussianDpEvent(s, D),       ZCDpEvent(D^2 / (2 s^2)) (Canonne-Kamath-Steinke  dominating
DiscreteGaussianVectorDpEvent(s, D)  2020, Thm 14)
PureDpEvent, CollisionDpEvent,       RandomizedResponseDpEvent(2 / (e^eps + 1), 2):    dominating
SelectiveRandomizedResponse...,      binary randomized response dominates every
ApproxDpEvent(eps, 0), any other     eps-DP pair (Kairouz-Oh-Viswanath 2015, Thm 2.2)
declared (eps, 0)
ShuffledLocalDpEvent(eps0, n)        binary RR at eps0: sound, but the shuffle         dominating
                                     amplification is lost (use ShuffleAccountant)
===================================  ==========================================================

Events with a declared delta > 0 (``ApproxDpEvent``, ``ShuffledHistogramDpEvent``) have no
dp_accounting equivalent and are refused with a :class:`NoEquivalentEventError` naming them;
so is any other event type of neither package. dp_accounting's own events pass through
unchanged.

Which neighbouring relation to give dp_accounting (0.6.0). This package's noise parameters are
per unit shift of the declared neighbours (a Gaussian's sigma, a Laplace's scale, for the L2 /
L1 distance one record moves the output). dp_accounting reads its relation differently per
accountant:

- ``RdpAccountant(neighboring_relation=REPLACE_ONE)`` gives this package's figures (it does not
  rescale the Gaussian; it refuses randomized response under its default add/remove-one).
  Measured: 10 x ``GaussianDpEvent(1)`` at delta 1e-5: 19.054 (ours by RDP: 19.047).
- Its ``PLDAccountant`` under ``REPLACE_ONE`` **doubles the Gaussian's sensitivity** (a
  replacement as a removal plus an addition) and refuses Laplace events: the same 10 x
  ``GaussianDpEvent(1)`` gives 46.21 where ours (PLD) gives 17.857. Under ``ADD_OR_REMOVE_ONE``
  it gives 17.857 for Gaussian and Laplace leaves, but refuses randomized response. So for a
  tree that mixes them there is no one relation under which its PLD gives our figure: use its
  ``RdpAccountant`` under ``REPLACE_ONE``, or its ``PLDAccountant`` under
  ``ADD_OR_REMOVE_ONE`` for trees of Gaussian and Laplace leaves only.
- Caution: its ``PLDAccountant`` counts a ``RandomizedResponseDpEvent`` once however many times
  it is composed (even inside ``SelfComposedDpEvent``); its ``RdpAccountant``, and this
  package's accountants, count it right.
"""

from __future__ import annotations

import math

from dp_accounting import dp_event as _dp

from dpkd_audit.accountants.base import UnsupportedEventError
from dpkd_audit.events import (
    BitRandomizedResponseDpEvent,
    CalibratedGaussianDpEvent,
    DeclaredGuarantee,
    DiscreteGaussianDpEvent,
    DiscreteGaussianVectorDpEvent,
    GaussianNoisyMaxDpEvent,
    LaplaceNoisyMaxDpEvent,
    ShuffledLocalDpEvent,
)

__all__ = ["NoEquivalentEventError", "binary_randomized_response", "to_dp_accounting"]


class NoEquivalentEventError(UnsupportedEventError):
    """An event has no sound dp_accounting equivalent; the message names it."""


def binary_randomized_response(epsilon: float) -> _dp.RandomizedResponseDpEvent:
    """dp_accounting's binary randomized response with privacy loss exactly ``epsilon``.

    dp_accounting's ``RandomizedResponseDpEvent(p, 2)`` keeps the input with probability
    1 - p/2, so its epsilon is ln((1 - p/2) / (p/2)) and p = 2 / (e^epsilon + 1) (written with
    e^-epsilon so that large epsilons do not overflow).
    """
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite real number >= 0; got {epsilon!r}")
    return _dp.RandomizedResponseDpEvent(2.0 * math.exp(-epsilon) / (1.0 + math.exp(-epsilon)),
                                         2)


def to_dp_accounting(event: _dp.DpEvent) -> _dp.DpEvent:
    """The event with every leaf rewritten as a dp_accounting event (see the module table).

    Args:
        event: Any event of this package or of dp_accounting.

    Returns:
        An event tree made of dp_accounting's own event classes only, whose privacy loss under
        every accountant is equal to (exact conversions) or at least (dominating ones) the
        original's.

    Raises:
        NoEquivalentEventError: If some leaf has no sound equivalent (the message names it).
    """
    if isinstance(event, _dp.ComposedDpEvent):
        return _dp.ComposedDpEvent([to_dp_accounting(e) for e in event.events])
    if isinstance(event, _dp.SelfComposedDpEvent):
        return _dp.SelfComposedDpEvent(to_dp_accounting(event.event), event.count)
    if isinstance(event, _dp.PoissonSampledDpEvent):
        return _dp.PoissonSampledDpEvent(event.sampling_probability,
                                         to_dp_accounting(event.event))
    if isinstance(event, (_dp.SampledWithReplacementDpEvent,
                          _dp.SampledWithoutReplacementDpEvent)):
        return type(event)(event.source_dataset_size, event.sample_size,
                           to_dp_accounting(event.event))
    converted = _leaf(event)
    if converted is None:
        raise NoEquivalentEventError(
            f"{type(event).__name__} has no dp_accounting equivalent ({event!r})"
            + _why_not(event), event=event, reason=_why_not(event).lstrip(": "))
    return converted


def _leaf(event: _dp.DpEvent) -> _dp.DpEvent | None:
    if isinstance(event, CalibratedGaussianDpEvent):
        return _dp.GaussianDpEvent(float(event.noise_multiplier))
    if isinstance(event, LaplaceNoisyMaxDpEvent):
        return _dp.SelfComposedDpEvent(_dp.LaplaceDpEvent(float(event.noise_scale)), 2)
    if isinstance(event, GaussianNoisyMaxDpEvent):
        return _dp.GaussianDpEvent(float(event.sigma) / math.sqrt(2.0))
    if isinstance(event, BitRandomizedResponseDpEvent):
        return _dp.SelfComposedDpEvent(
            binary_randomized_response(float(event.epsilon_per_bit)), int(event.bits_changed))
    if isinstance(event, (DiscreteGaussianDpEvent, DiscreteGaussianVectorDpEvent)):
        return _dp.ZCDpEvent(event.sensitivity ** 2 / (2.0 * float(event.sigma) ** 2))
    if isinstance(event, ShuffledLocalDpEvent):
        return binary_randomized_response(float(event.local_epsilon))
    if isinstance(event, DeclaredGuarantee):
        eps, delta = event.guarantee()
        return binary_randomized_response(float(eps)) if delta == 0 else None
    if type(event).__module__ == _dp.__name__:
        return event  # dp_accounting's own leaf event
    return None


def _why_not(event: _dp.DpEvent) -> str:
    if isinstance(event, DeclaredGuarantee):
        return (": it declares (epsilon, delta) with delta > 0, and dp_accounting has no event "
                "for a bare (epsilon, delta) guarantee; account for it with this package's "
                "accountants")
    return ": it is neither a dp_accounting event nor one of this package's"
