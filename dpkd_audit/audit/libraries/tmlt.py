"""Tumult Core (``tmlt.core``) measurements: the claim from their privacy function.

A Tumult Core ``Measurement`` holds ``input_domain``, ``input_metric``, ``output_measure``
(``PureDP``, ``ApproxDP``, ``RhoZCDP``) and ``privacy_function(d_in)`` (an exact number, or an
(epsilon, delta) pair). The claim is read at ``d_in`` (default 1); ``RhoZCDP``'s rho is
converted to (epsilon, delta) at ``delta`` (default
:data:`~dpkd_audit.audit.libraries.base.DEFAULT_DELTA`) by ``epsilon = rho + 2 sqrt(rho
ln(1 / delta))`` (Bun and Steinke, TCC 2016, Proposition 1.3), an upper bound on the tightest
conversion. Neighbours: a numpy integer or float domain with the absolute difference gives
scalars ``d_in`` apart (as ``numpy.int64`` / ``numpy.float64``, the types the domain checks);
other domains (Spark and pandas data frames) need ``neighbours=``.

Tumult Core draws from its own generator, which cannot be seeded from here.
"""

from __future__ import annotations

import math
from typing import Any

from dpkd_audit import _validate
from dpkd_audit.audit.libraries.base import (
    DEFAULT_DELTA,
    LibraryMechanism,
    UnsupportedLibraryObjectError,
    check_pairs,
    library_version,
    scalar_pairs,
    zcdp_gaussian_event,
)

__all__ = ["from_tmlt", "is_tmlt"]


def is_tmlt(obj: Any) -> bool:
    """Whether ``obj`` is a Tumult Core measurement (tmlt not imported)."""
    return type(obj).__module__.startswith("tmlt.core.measurements") and callable(
        getattr(obj, "privacy_function", None))




def _number(value: Any) -> float:
    """A float of Tumult's exact number, rounded up (a claim is never made smaller)."""
    if hasattr(value, "to_float"):
        return float(value.to_float(round_up=True))
    return float(value)


def from_tmlt(measurement: Any, *, d_in: Any = 1, delta: float | None = None,
              neighbours: Any = None) -> LibraryMechanism:
    """Adapt a Tumult Core measurement (one line: ``from_tmlt(AddLaplaceNoise(...))``).

    Args:
        measurement: The measurement.
        d_in: The input distance of the neighbours (default 1).
        delta: For ``RhoZCDP``: the delta of the claim.
        neighbours: The pair ``(x, x')`` (or a sequence of pairs) to audit instead.

    Returns:
        The :class:`~dpkd_audit.audit.libraries.base.LibraryMechanism`.

    Raises:
        UnsupportedLibraryObjectError: If the measure or domain is not one the adapter reads.
    """
    if not is_tmlt(measurement):
        raise UnsupportedLibraryObjectError(
            f"expected a Tumult Core measurement; got {type(measurement).__module__}."
            f"{type(measurement).__name__}")
    measure = type(measurement.output_measure).__name__
    value = measurement.privacy_function(d_in)
    rho = None
    if measure == "PureDP":
        epsilon, claim_delta = _number(value), 0.0
        source = f"its privacy function at d_in={d_in!r} (PureDP)"
    elif measure == "ApproxDP":
        epsilon, claim_delta = _number(value[0]), _number(value[1])
        source = f"its privacy function at d_in={d_in!r} (ApproxDP)"
    elif measure == "RhoZCDP":
        at = DEFAULT_DELTA if delta is None else _validate.check_delta(delta)
        rho = _number(value)
        epsilon, claim_delta = rho + 2.0 * math.sqrt(rho * math.log(1.0 / at)), at
        source = (f"its privacy function at d_in={d_in!r}: rho={rho:.6g} zCDP, as (epsilon, "
                  f"{at:g})-DP by Bun-Steinke 2016 Prop. 1.3")
    else:
        raise UnsupportedLibraryObjectError(
            f"Tumult Core output measure {measure} is not read by the adapter (PureDP, "
            "ApproxDP, RhoZCDP are)")
    if neighbours is not None:
        pairs = check_pairs(neighbours, "neighbours")
    else:
        import numpy as np

        domain = type(measurement.input_domain).__name__
        metric = type(measurement.input_metric).__name__
        if metric != "AbsoluteDifference" or domain not in ("NumpyIntegerDomain",
                                                            "NumpyFloatDomain"):
            raise UnsupportedLibraryObjectError(
                f"cannot choose neighbouring inputs for a Tumult Core measurement on {domain} "
                f"with {metric}: give neighbours=(x, x') (or a sequence of pairs)")
        integer = domain == "NumpyIntegerDomain"
        cast = np.int64 if integer else np.float64
        pairs = tuple((cast(a), cast(b)) for a, b in scalar_pairs(float(d_in),
                                                                  integer=integer))
    return LibraryMechanism(
        name=f"tmlt.core {type(measurement).__name__}", library=library_version("tmlt.core"),
        epsilon=epsilon,
        delta=claim_delta, claim=source, pairs=pairs, release=measurement.__call__,
        randomness="Tumult Core's own generator (not seedable: audits are not reproducible)",
        event=None if rho is None else zcdp_gaussian_event(rho),
        event_note=None if rho is None else f"a Gaussian with the claimed rho={rho:.6g}")
