"""python-dp (Google's DP library, ``pydp``): numerical mechanisms and aggregations.

- ``LaplaceMechanism`` / ``GaussianMechanism`` (``pydp.algorithms.numerical_mechanisms``):
  the claim from ``epsilon`` (and ``delta``), the pair ``sensitivity`` (``l2_sensitivity``)
  apart. The inputs are floats: ``add_noise`` dispatches on the Python type and audits its
  integer path on ints.
- The aggregations (``BoundedSum``, ``BoundedMean``, ``Count``, ``Max``, ``Min``, ``Median``,
  ``Percentile``, ``BoundedStandardDeviation``, ``BoundedVariance``): the claim from
  ``epsilon`` / ``delta``, the input a dataset, the neighbours one record apart (add/remove
  one, python-dp's unit with one contribution per user), the record at a bound. python-dp does
  not expose the bounds an aggregation was built with: give ``lower=`` and ``upper=``
  (``Count`` needs none).

python-dp draws from its own C++ generator, which cannot be seeded from Python.
"""

from __future__ import annotations

from typing import Any

from dpkd_audit.audit.libraries.base import (
    LibraryMechanism,
    UnsupportedLibraryObjectError,
    check_pairs,
    dataset_pairs,
    gaussian_event,
    library_version,
    scalar_pairs,
)

__all__ = ["from_pydp", "is_pydp"]

_MECHANISMS = {"LaplaceMechanism", "GaussianMechanism"}
_AGGREGATIONS = {"BoundedSum", "BoundedMean", "Count", "Max", "Min", "Median", "Percentile",
                 "BoundedStandardDeviation", "BoundedVariance"}


def is_pydp(obj: Any) -> bool:
    """Whether ``obj`` is a python-dp mechanism or aggregation (pydp not imported)."""
    module = type(obj).__module__
    return module.startswith(("pydp", "_pydp")) and type(obj).__name__ in (
        _MECHANISMS | _AGGREGATIONS)




def from_pydp(obj: Any, *, lower: float | None = None, upper: float | None = None,
              neighbours: Any = None) -> LibraryMechanism:
    """Adapt a python-dp mechanism or aggregation.

    One line: ``from_pydp(BoundedSum(...), lower=0, upper=10)``.

    Args:
        obj: The python-dp object.
        lower: An aggregation's lower bound (the one it was built with).
        upper: An aggregation's upper bound.
        neighbours: The pair ``(x, x')`` (or a sequence of pairs) to audit instead.

    Returns:
        The :class:`~dpkd_audit.audit.libraries.base.LibraryMechanism`.

    Raises:
        UnsupportedLibraryObjectError: If the object is not one the adapter reads, or an
            aggregation that needs bounds was given none.
    """
    if not is_pydp(obj):
        raise UnsupportedLibraryObjectError(
            f"expected a python-dp LaplaceMechanism, GaussianMechanism or aggregation "
            f"({', '.join(sorted(_AGGREGATIONS))}); got {type(obj).__module__}."
            f"{type(obj).__name__}")
    kind = type(obj).__name__
    event = note = None
    epsilon, delta = float(obj.epsilon), float(getattr(obj, "delta", 0.0) or 0.0)
    claim = f"its epsilon={obj.epsilon!r}, delta={getattr(obj, 'delta', 0.0)!r} attributes"
    if kind in _MECHANISMS:
        sensitivity = obj.sensitivity if kind == "LaplaceMechanism" else obj.l2_sensitivity
        pairs = (check_pairs(neighbours, "neighbours") if neighbours is not None
                 else scalar_pairs(sensitivity))
        claim += f" at sensitivity {sensitivity!r}"

        def release(value: Any) -> Any:
            return obj.add_noise(value)

        if kind == "GaussianMechanism":
            event = gaussian_event(obj.std, sensitivity)
            note = f"a Gaussian of its own std {obj.std!r}"
    else:
        dtype = str(getattr(obj, "dtype", "float"))
        cast = float if dtype == "float" else int
        if neighbours is not None:
            pairs = check_pairs(neighbours, "neighbours")
        elif kind == "Count":
            pairs = (([], [cast(1)]), ([cast(1)], [cast(1), cast(1)]))
        elif lower is None or upper is None:
            raise UnsupportedLibraryObjectError(
                f"python-dp {kind} does not expose the bounds it was built with: give "
                "lower= and upper= (the lower_bound and upper_bound you built it with; dpkd "
                "audit: --bounds LOWER UPPER), or neighbours=")
        else:
            pairs = dataset_pairs(cast(lower), cast(upper))
        claim += "; neighbours: datasets one record apart (add/remove one)"

        def release(value: Any) -> Any:
            return obj.quick_result(list(value))
    return LibraryMechanism(
        name=f"python-dp {kind}", library=library_version("python-dp"), epsilon=epsilon,
        delta=delta,
        claim=claim, pairs=pairs, release=release,
        randomness="python-dp's own generator (not seedable: audits are not reproducible)",
        event=event, event_note=note if event is not None else None)
