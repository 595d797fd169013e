"""What every library adapter builds: a mechanism with the package's audit contract.

A :class:`LibraryMechanism` wraps one object of another DP library (an OpenDP ``Measurement``,
a diffprivlib mechanism, a python-dp mechanism or aggregation, a Tumult Core measurement) as
the auditor needs it: ``sample(x, n, *, rng)`` (``n`` releases of the library's own object on
input ``x``), the claim read from the library (``epsilon``, ``delta`` and where they come
from), and neighbouring inputs at the declared sensitivity (``pairs``: several when the domain
has bounds, since truncated and bounded mechanisms leak most at its edges).

Never imports torch, nor any library it adapts (each adapter reads the object it is given).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["DEFAULT_DELTA", "LibraryMechanism", "UnsupportedLibraryObjectError",
           "gaussian_event", "library_version", "scalar_pairs", "zcdp_gaussian_event"]

#: The delta at which a claim given as a curve (zCDP, a privacy profile) is read, unless the
#: caller names one.
DEFAULT_DELTA = 1e-5


class UnsupportedLibraryObjectError(ValueError):
    """The object is not one an adapter can read (the message says what to do instead)."""


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class LibraryMechanism:
    """One mechanism of another library, with the package's audit contract.

    Attributes:
        name: What it is, e.g. ``"diffprivlib Laplace"``.
        library: The library and its version, e.g. ``"opendp 0.16.0"``.
        epsilon: The claimed epsilon, read from the library.
        delta: The claimed delta.
        claim: Where the claim comes from (the attribute or privacy map, a conversion).
        pairs: Neighbouring inputs at the declared sensitivity; the first is
            ``neighbours()``, and an audit searches them all (pilot, then confirmation).
        release: One release of the library's object on an input.
        seeded: Builds ``release`` on a generator seeded with the given integer (for a library
            that takes one); ``None``: the library draws from its own randomness.
        randomness: Where the library's randomness comes from (recorded).
        event: A DP event (``dp_accounting``) whose privacy-loss distribution is the
            mechanism's, where the adapter can name it (a Gaussian of the library's own noise
            scale, or of the claimed zCDP's rho): the audit then reports the bound an audit of
            its size could attain (``epsilon_attainable``). ``None`` where unknown.
        event_note: What ``event`` is (recorded beside the attainable bound).
    """

    name: str
    library: str
    epsilon: float
    delta: float
    claim: str
    pairs: tuple[tuple[Any, Any], ...]
    release: Callable[[Any], Any]
    seeded: Callable[[int], Callable[[Any], Any]] | None = None
    randomness: str = "the library's own (not seeded: audits are not reproducible)"
    event: Any = None
    event_note: str | None = None

    def neighbours(self) -> tuple[Any, Any]:
        """The first pair of neighbouring inputs."""
        return self.pairs[0]

    def sample(self, value: Any, n: int, *, rng: np.random.Generator) -> list[Any]:
        """``n`` independent releases on ``value`` (``rng`` seeds the library when it can)."""
        release = self.release
        if self.seeded is not None:
            release = self.seeded(int(rng.integers(0, 2**32 - 1)))
        return [release(value) for _ in range(n)]

    def sample_fn(self) -> Callable[[Any, int, np.random.Generator], list[Any]]:
        """``sampler(x, n, rng)``: the mechanism as ``audit_sampler`` calls it."""
        def sampler(value: Any, k: int, gen: np.random.Generator) -> list[Any]:
            return self.sample(value, k, rng=gen)

        return sampler

    def describe(self) -> str:
        """One line: the mechanism, its claim and where it comes from."""
        claim = (f"{self.epsilon:.6g}" if self.delta == 0
                 else f"({self.epsilon:.6g}, {self.delta:g})")
        return f"{self.name} ({self.library}): claimed {claim} from {self.claim}"


def library_version(distribution: str) -> str:
    """``"opendp 0.16.0"``: a library and its installed version (read from its metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{distribution} {version(distribution)}"
    except PackageNotFoundError:
        return f"{distribution} (version unknown)"


def gaussian_event(sigma: float, sensitivity: float) -> Any:
    """dp_accounting's Gaussian event of noise ``sigma`` at this sensitivity (or ``None``)."""
    from dp_accounting import dp_event

    try:
        ratio = float(sigma) / float(sensitivity)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    if not (math.isfinite(ratio) and ratio > 0):
        return None
    return dp_event.GaussianDpEvent(ratio)


def zcdp_gaussian_event(rho: float) -> Any:
    """The Gaussian event whose zCDP is ``rho`` (noise multiplier ``1 / sqrt(2 rho)``)."""
    return gaussian_event(1.0 / math.sqrt(2.0 * rho), 1.0) if rho > 0 else None


def _clean(value: float, integer: bool) -> Any:
    return round(value) if integer else float(value)


def scalar_pairs(sensitivity: float, *, lower: float | None = None, upper: float | None = None,
                 integer: bool = False) -> tuple[tuple[Any, Any], ...]:
    """Neighbouring scalar inputs ``sensitivity`` apart, inside ``[lower, upper]`` if given.

    Unbounded: ``(0, s)``. Bounded: the pairs at the lower edge, at the upper edge and in the
    middle (a truncated or bounded-domain mechanism's worst case sits at an edge, where its
    clamp cuts one side's noise and not the other's). Pairs wider than the domain become the
    domain's two ends.

    Raises:
        UnsupportedLibraryObjectError: If ``sensitivity`` is not a positive finite number or
            the bounds are not ``lower <= upper``.
    """
    s = float(sensitivity)
    if not (math.isfinite(s) and s > 0):
        raise UnsupportedLibraryObjectError(
            f"sensitivity must be a positive finite number to choose neighbouring inputs; got "
            f"{sensitivity!r}")
    if lower is None or upper is None:
        return ((_clean(0.0, integer), _clean(s, integer)),)
    lo, hi = float(lower), float(upper)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise UnsupportedLibraryObjectError(
            f"bounds must be finite with lower <= upper; got [{lower!r}, {upper!r}]")
    if hi - lo <= s:
        return ((_clean(lo, integer), _clean(hi, integer)),)
    mid = lo + math.floor((hi - lo - s) / 2) if integer else lo + (hi - lo - s) / 2
    out: list[tuple[Any, Any]] = []
    for a in (lo, hi - s, mid):
        pair = (_clean(a, integer), _clean(a + s, integer))
        if pair not in out:
            out.append(pair)
    return tuple(out)


def dataset_pairs(lower: Any, upper: Any) -> tuple[tuple[list[Any], list[Any]], ...]:
    """Datasets one record apart (add/remove one), the record at a bound of its domain.

    ``([lower], [lower, upper])``, ``([upper], [upper, lower])``, ``([], [upper])``,
    ``([], [lower])``: a bounded sum moves most when the record sits at the bound of largest
    magnitude; a mean, a count or an extreme on a one-record base.
    """
    pairs: list[tuple[list[Any], list[Any]]] = [
        ([lower], [lower, upper]), ([upper], [upper, lower]), ([], [upper]), ([], [lower])]
    unique: list[tuple[list[Any], list[Any]]] = []
    for pair in pairs:
        if pair not in unique:
            unique.append(pair)
    return tuple(unique)


def check_pairs(pairs: Sequence[Any], name: str) -> tuple[tuple[Any, Any], ...]:
    """Pairs given by the caller (``neighbours=(x, x')`` or a sequence of pairs), checked."""
    items = list(pairs)
    if len(items) == 2 and not all(isinstance(p, tuple) and len(p) == 2 for p in items):
        items = [tuple(items)]
    out = []
    for pair in items:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise UnsupportedLibraryObjectError(
                f"{name} must be a pair (x, x') or a sequence of pairs; got {pair!r}")
        out.append((pair[0], pair[1]))
    if not out:
        raise UnsupportedLibraryObjectError(f"{name} must hold at least one pair; got none")
    return tuple(out)
