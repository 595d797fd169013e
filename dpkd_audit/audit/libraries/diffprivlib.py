"""diffprivlib (IBM) mechanisms: the claim, sensitivity and bounds read from their attributes.

Every ``diffprivlib.mechanisms`` object holds ``epsilon``, ``delta`` and, where it has them,
``sensitivity``, ``lower`` / ``upper`` (the truncated, folded, bounded-domain and snapping
mechanisms) or ``value0`` / ``value1`` (``Binary``). The inputs are chosen at the declared
sensitivity (at both edges and the middle of a bounded domain), as floats for the continuous
mechanisms and as ints for the geometric and discrete Gaussian ones (diffprivlib checks the
type). The exponential mechanisms (``Exponential``, ``PermuteAndFlip``) take their input as the
utility vector they were built with: each audited pair is that vector against one moved by the
sensitivity, rebuilt with the object's own parameters.

Randomness: each batch of releases runs on a copy of the object whose generator is a
``numpy.random.RandomState`` seeded from the audit's ``rng`` (diffprivlib's documented
``random_state``), so an audit is reproducible; diffprivlib's own default is the system's
secure generator, which draws the same uniforms into the same formulas.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from dpkd_audit.audit.libraries.base import (
    LibraryMechanism,
    UnsupportedLibraryObjectError,
    check_pairs,
    gaussian_event,
    library_version,
    scalar_pairs,
)

__all__ = ["from_diffprivlib", "is_diffprivlib"]

#: Classes whose inputs are integers (diffprivlib refuses floats there).
_INTEGER = {"Geometric", "GeometricTruncated", "GeometricFolded", "GaussianDiscrete"}
#: Classes whose input is the utility vector they were built with.
_UTILITY = {"Exponential", "PermuteAndFlip"}
#: Classes the adapter does not read, and why.
_REFUSED = {
    "Uniform": "its claim is (0, delta): no epsilon to audit",
    "Vector": "its input is a function (an objective), not a value",
    "Bingham": "its input is a symmetric matrix: audit it with audit_sampler and your own pair",
    "ExponentialCategorical": "its input is a category of a utility list: give neighbours=",
    "ExponentialHierarchical": "its input is a category of a hierarchy: give neighbours=",
}


def is_diffprivlib(obj: Any) -> bool:
    """Whether ``obj`` is a diffprivlib mechanism (by its module; diffprivlib not imported)."""
    return type(obj).__module__.startswith("diffprivlib.") and callable(
        getattr(obj, "randomise", None))




def _utility_pairs(obj: Any, count: int = 3) -> tuple[tuple[Any, Any], ...]:
    """The built utility vector against it moved by the sensitivity.

    One candidate up by ``s``, every other down by ``s`` (the exponential mechanism's worst
    move).
    """
    utility = np.asarray(obj.utility, dtype=np.float64)
    s = float(obj.sensitivity)
    pairs = []
    for i in range(min(count, utility.size)):
        moved = utility - s
        moved[i] = utility[i] + s
        pairs.append((utility.tolist(), moved.tolist()))
    return tuple(pairs)


def _rebuilt(obj: Any, utility: Any, state: np.random.RandomState) -> Any:
    kwargs = {"epsilon": obj.epsilon, "sensitivity": obj.sensitivity, "utility": list(utility),
              "monotonic": obj.monotonic, "candidates": obj.candidates, "random_state": state}
    if type(obj).__name__ == "Exponential":
        kwargs["measure"] = obj.measure
    return type(obj)(**kwargs)


def from_diffprivlib(obj: Any, *, neighbours: Any = None) -> LibraryMechanism:
    """Adapt a diffprivlib mechanism (one line: ``from_diffprivlib(Laplace(...))``).

    Args:
        obj: A ``diffprivlib.mechanisms`` object.
        neighbours: The pair ``(x, x')`` (or a sequence of pairs) to audit instead of the
            ones chosen at its sensitivity.

    Returns:
        The :class:`~dpkd_audit.audit.libraries.base.LibraryMechanism`.

    Raises:
        UnsupportedLibraryObjectError: If the object is not a diffprivlib mechanism this
            adapter reads (the message says why and what to do).
    """
    if not is_diffprivlib(obj):
        raise UnsupportedLibraryObjectError(
            f"expected a diffprivlib mechanism; got {type(obj).__module__}."
            f"{type(obj).__name__}")
    kind = type(obj).__name__
    if kind in _REFUSED and neighbours is None:
        raise UnsupportedLibraryObjectError(f"diffprivlib {kind}: {_REFUSED[kind]}")
    epsilon, delta = float(obj.epsilon), float(getattr(obj, "delta", 0.0) or 0.0)
    claim = f"its epsilon={obj.epsilon!r}, delta={getattr(obj, 'delta', 0.0)!r} attributes"
    if neighbours is not None:
        pairs = check_pairs(neighbours, "neighbours")
    elif kind == "Binary":
        pairs = ((obj.value0, obj.value1),)
    elif kind in _UTILITY:
        pairs = _utility_pairs(obj)
    else:
        sensitivity = getattr(obj, "sensitivity", None)
        if sensitivity is None:
            raise UnsupportedLibraryObjectError(
                f"diffprivlib {kind} has no sensitivity attribute: give neighbours=(x, x')")
        pairs = scalar_pairs(sensitivity, lower=getattr(obj, "lower", None),
                             upper=getattr(obj, "upper", None), integer=kind in _INTEGER)
        claim += f" at sensitivity {sensitivity!r}"
    if kind in _UTILITY:
        def seeded(seed: int) -> Any:
            state = np.random.RandomState(seed)
            built: dict[tuple[float, ...], Any] = {}

            def release(utility: Any) -> Any:
                key = tuple(float(u) for u in utility)
                if key not in built:
                    built[key] = _rebuilt(obj, key, state)
                return built[key].randomise()

            return release

        def release(utility: Any) -> Any:
            return _rebuilt(obj, utility, None).randomise()
    else:
        def seeded(seed: int) -> Any:
            twin = copy.copy(obj)
            twin._rng = np.random.RandomState(seed)  # diffprivlib's documented random_state
            return twin.randomise

        release = obj.randomise
    event = note = None
    if kind in ("Gaussian", "GaussianAnalytic", "GaussianDiscrete"):
        event = gaussian_event(getattr(obj, "_scale", math.nan), obj.sensitivity)
        note = (f"a Gaussian of its own noise scale {getattr(obj, '_scale', None)!r}"
                + (" (continuous: the discrete one is no easier to audit)"
                   if kind == "GaussianDiscrete" else ""))
    return LibraryMechanism(
        name=f"diffprivlib {kind}", library=library_version("diffprivlib"), epsilon=epsilon,
        delta=delta,
        claim=claim, pairs=pairs, release=release, seeded=seeded,
        randomness="numpy RandomState seeded from the audit's rng (diffprivlib's "
                   "random_state)",
        event=event, event_note=note if event is not None else None)
