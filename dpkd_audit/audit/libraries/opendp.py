"""OpenDP measurements: the claim from their privacy map, the neighbours from their domain.

A ``Measurement`` carries everything an audit needs:

- the claim: ``measurement.map(d_in)`` at the sensitivity ``d_in`` (default 1 in the input
  metric's distance type), read by output measure: ``MaxDivergence`` gives epsilon;
  ``Approximate(MaxDivergence)`` gives (epsilon, delta); ``SmoothedMaxDivergence`` gives a
  privacy profile read at ``delta``; ``ZeroConcentratedDivergence`` gives rho, converted to
  (epsilon, delta) by OpenDP's own ``make_zCDP_to_approxDP`` at ``delta`` (default
  :data:`~dpkd_audit.audit.libraries.base.DEFAULT_DELTA`);
- the inputs: from ``input_domain`` and ``input_metric``. A scalar atom domain with an absolute
  distance gives pairs ``d_in`` apart (at both edges and the middle of a bounded domain); a
  ``bool`` domain with the discrete distance gives ``(False, True)``; a sized vector domain with
  an L1 or L2 distance gives the zero vector against one with its first coordinate moved by
  ``d_in``; a vector domain of records with the symmetric or insert-delete distance gives
  datasets one record apart, the record at the bounds of the element domain. Anything else
  needs ``neighbours=``.

OpenDP draws from its own cryptographically secure generator, which cannot be seeded: the
audit's ``rng`` drives the attack, not the releases (recorded as the record's randomness).
"""

from __future__ import annotations

from typing import Any

from dpkd_audit import _validate
from dpkd_audit.audit.libraries.base import (
    DEFAULT_DELTA,
    LibraryMechanism,
    UnsupportedLibraryObjectError,
    check_pairs,
    dataset_pairs,
    library_version,
    scalar_pairs,
    zcdp_gaussian_event,
)

__all__ = ["from_opendp", "is_opendp"]

_FLOATS = {"f64", "f32"}
_INTS = {"i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize"}


def is_opendp(obj: Any) -> bool:
    """Whether ``obj`` is an OpenDP ``Measurement`` (by its type; opendp not imported)."""
    kind = type(obj)
    return kind.__module__.startswith("opendp") and kind.__name__ == "Measurement"




def _default_d_in(metric: Any) -> Any:
    kind = str(getattr(metric, "distance_type", "u32"))
    return 1.0 if kind in _FLOATS else 1


def _claim(measurement: Any, d_in: Any,
           delta: float | None) -> tuple[float, float, str, float | None]:
    measure = str(measurement.output_measure.type)
    if measure == "MaxDivergence":
        if delta not in (None, 0.0):
            raise UnsupportedLibraryObjectError(
                f"delta={delta!r}: this measurement's measure is pure DP (MaxDivergence); "
                "leave delta out")
        epsilon = float(measurement.map(d_in))
        return epsilon, 0.0, f"its privacy map at d_in={d_in!r} (MaxDivergence)", None
    if measure.startswith("Approximate") and "MaxDivergence" in measure:
        epsilon, own_delta = measurement.map(d_in)
        return (float(epsilon), float(own_delta),
                f"its privacy map at d_in={d_in!r} ({measure})", None)
    at = DEFAULT_DELTA if delta is None else _validate.check_delta(delta)
    if measure == "SmoothedMaxDivergence":
        profile = measurement.map(d_in)
        return (float(profile.epsilon(at)), at,
                f"its privacy profile at d_in={d_in!r}, read at delta={at:g}", None)
    if measure == "ZeroConcentratedDivergence":
        import opendp.prelude as dp

        rho = float(measurement.map(d_in))
        profile = dp.c.make_zCDP_to_approxDP(measurement).map(d_in)
        return (float(profile.epsilon(at)), at,
                f"its privacy map at d_in={d_in!r}: rho={rho:.6g} zCDP, as (epsilon, "
                f"{at:g})-DP by OpenDP's make_zCDP_to_approxDP", rho)
    raise UnsupportedLibraryObjectError(
        f"OpenDP output measure {measure} is not read by the adapter (MaxDivergence, "
        "Approximate(MaxDivergence), SmoothedMaxDivergence, ZeroConcentratedDivergence are)")


def _atom(domain: Any) -> tuple[str, Any]:
    carrier = str(domain.carrier_type)
    if carrier not in _FLOATS | _INTS:
        return carrier, None  # OpenDP raises for the bounds of a bool or string domain
    return carrier, getattr(domain, "bounds", None)


def _pairs(measurement: Any, d_in: Any) -> tuple[tuple[Any, Any], ...]:
    domain, metric = measurement.input_domain, measurement.input_metric
    metric_name = str(metric.type)
    domain_name = type(domain).__name__
    if domain_name == "AtomDomain":
        carrier, bounds = _atom(domain)
        if carrier == "bool":
            return ((False, True),)
        if metric_name.startswith("AbsoluteDistance") and carrier in _FLOATS | _INTS:
            lower, upper = bounds if bounds else (None, None)
            return scalar_pairs(float(d_in), lower=lower, upper=upper,
                                integer=carrier in _INTS)
    if domain_name == "VectorDomain":
        carrier, bounds = _atom(domain.element_domain)
        size = domain.size
        if metric_name.startswith(("L1Distance", "L2Distance")) and carrier in _FLOATS | _INTS:
            width = size or 1
            zero = 0.0 if carrier in _FLOATS else 0
            moved = [zero] * width
            moved[0] = float(d_in) if carrier in _FLOATS else int(d_in)
            return (([zero] * width, moved),)
        if (metric_name in ("SymmetricDistance", "InsertDeleteDistance") and size is None
                and int(d_in) == 1):
            if carrier == "bool":
                return (([False], [False, True]), ([True], [True, False]), ([], [True]))
            if bounds:
                return dataset_pairs(*bounds)
            if carrier in _FLOATS | _INTS:
                one = 1.0 if carrier in _FLOATS else 1
                return dataset_pairs(0 * one, one)
    raise UnsupportedLibraryObjectError(
        f"cannot choose neighbouring inputs for an OpenDP measurement on {domain} with "
        f"{metric} at d_in={d_in!r}: give neighbours=(x, x') (or a sequence of pairs)")


def from_opendp(measurement: Any, *, d_in: Any = None, delta: float | None = None,
                neighbours: Any = None) -> LibraryMechanism:
    """Adapt an OpenDP ``Measurement`` (one line: ``from_opendp(meas)``).

    Args:
        measurement: The measurement.
        d_in: The input distance of the neighbours (default 1 in the metric's distance type:
            one record, or a unit change of a scalar).
        delta: For measures given as a curve (zCDP, smoothed max divergence): the delta of the
            claim (default :data:`~dpkd_audit.audit.libraries.base.DEFAULT_DELTA`).
        neighbours: The pair ``(x, x')`` (or a sequence of pairs), instead of the ones chosen
            from the domain; they must be ``d_in`` apart in the input metric.

    Returns:
        The :class:`~dpkd_audit.audit.libraries.base.LibraryMechanism`.

    Raises:
        UnsupportedLibraryObjectError: If the measurement's measure or domain is not one the
            adapter reads (the message says what to give).
    """
    if not is_opendp(measurement):
        raise UnsupportedLibraryObjectError(
            f"expected an OpenDP Measurement; got {type(measurement).__module__}."
            f"{type(measurement).__name__}")
    d_in = _default_d_in(measurement.input_metric) if d_in is None else d_in
    epsilon, claim_delta, source, rho = _claim(measurement, d_in, delta)
    pairs = (check_pairs(neighbours, "neighbours") if neighbours is not None
             else _pairs(measurement, d_in))
    return LibraryMechanism(
        name=f"opendp measurement {measurement.input_domain} -> {measurement.output_measure}",
        library=library_version("opendp"), epsilon=epsilon, delta=claim_delta, claim=source,
        pairs=pairs,
        release=measurement.__call__,
        randomness="OpenDP's own secure generator (not seedable: audits are not "
                   "reproducible)",
        event=None if rho is None else zcdp_gaussian_event(rho),
        event_note=None if rho is None else f"a Gaussian with the claimed rho={rho:.6g}")
