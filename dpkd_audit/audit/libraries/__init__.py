"""Audit the mechanisms of other DP libraries with one line: the adapters and their audit.

>>> from dpkd_audit.audit.libraries import audit_library   # doctest: +SKIP
>>> audit_library(diffprivlib.mechanisms.Laplace(epsilon=1, sensitivity=1),
...               rng=np.random.default_rng(0))            # doctest: +SKIP

:func:`adapt` reads what it can from the library's own object (the claim from its privacy map
or attributes, the neighbouring inputs from its domain, sensitivity and bounds) and returns a
:class:`LibraryMechanism`, which has the audit contract of the package's mechanisms
(``sample``, ``neighbours``, ``epsilon``, ``delta``). :func:`audit_library` audits it: on its
one pair, or, when the domain gives several candidate pairs (the edges of a bounded domain),
by :func:`~dpkd_audit.audit.pair_search.search_neighbouring_pair`: a pilot on every pair, the
most telling one audited on fresh samples.

Supported (each an optional extra, never a dependency; none is imported until an object of
it is given): OpenDP ``Measurement`` (:mod:`.opendp`), diffprivlib mechanisms
(:mod:`.diffprivlib`), python-dp mechanisms and aggregations (:mod:`.pydp`), Tumult Core
measurements (:mod:`.tmlt`). Never imports torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dpkd_audit import _validate
from dpkd_audit.audit.attacks import Attack
from dpkd_audit.audit.auditor import (
    CONFIRMATION_CONFIDENCE,
    DEFAULT_SAMPLES,
    MIN_SAMPLES,
    AuditResult,
    audit_sampler,
    resolve_attack,
)
from dpkd_audit.audit.libraries.base import (
    DEFAULT_DELTA,
    LibraryMechanism,
    UnsupportedLibraryObjectError,
)
from dpkd_audit.audit.libraries.diffprivlib import from_diffprivlib, is_diffprivlib
from dpkd_audit.audit.libraries.opendp import from_opendp, is_opendp
from dpkd_audit.audit.libraries.pydp import from_pydp, is_pydp
from dpkd_audit.audit.libraries.tmlt import from_tmlt, is_tmlt

__all__ = ["DEFAULT_DELTA", "LibraryMechanism", "UnsupportedLibraryObjectError",
           "accepted_options", "adapt",
           "audit_library", "from_diffprivlib", "from_opendp", "from_pydp", "from_tmlt",
           "is_library_object"]

_ADAPTERS = ((is_opendp, from_opendp, ("d_in", "delta", "neighbours")),
             (is_diffprivlib, from_diffprivlib, ("neighbours",)),
             (is_pydp, from_pydp, ("lower", "upper", "neighbours")),
             (is_tmlt, from_tmlt, ("d_in", "delta", "neighbours")))


def is_library_object(obj: Any) -> bool:
    """Whether an adapter reads ``obj`` (an object of a supported library)."""
    return any(test(obj) for test, _, _ in _ADAPTERS)


def accepted_options(obj: Any) -> tuple[str, ...]:
    """The options :func:`adapt` takes for ``obj`` (empty if no adapter reads it)."""
    for test, _, accepted in _ADAPTERS:
        if test(obj):
            return accepted
    return ()


def adapt(obj: Any, **options: Any) -> LibraryMechanism:
    """The :class:`LibraryMechanism` of a supported library's object.

    Args:
        obj: An OpenDP ``Measurement``, a diffprivlib mechanism, a python-dp mechanism or
            aggregation, or a Tumult Core measurement.
        **options: Passed to the library's adapter; each accepts ``neighbours=`` (a pair or a
            sequence of pairs); OpenDP and Tumult ``d_in=`` and ``delta=``; python-dp
            ``lower=`` / ``upper=`` (an aggregation's bounds).

    Raises:
        UnsupportedLibraryObjectError: If no adapter reads ``obj``, or an option does not
            apply to its library (the message names the ones that do).
    """
    if isinstance(obj, LibraryMechanism):
        if options:
            raise UnsupportedLibraryObjectError(
                f"{obj.name} is adapted already; options {sorted(options)} apply to the "
                "library's own object")
        return obj
    for test, make, accepted in _ADAPTERS:
        if test(obj):
            unknown = sorted(set(options) - set(accepted))
            if unknown:
                raise UnsupportedLibraryObjectError(
                    f"{', '.join(unknown)}: not an option for {type(obj).__name__} (it takes "
                    f"{', '.join(accepted)})")
            return make(obj, **{k: v for k, v in options.items() if v is not None})
    raise UnsupportedLibraryObjectError(
        f"no adapter reads {type(obj).__module__}.{type(obj).__name__}: supported are OpenDP "
        "Measurements, diffprivlib mechanisms, python-dp mechanisms and aggregations and "
        "Tumult Core measurements; audit anything else with audit_sampler(sampler, x, x', "
        "epsilon=...)")


def audit_library(obj: Any, *, rng: np.random.Generator, n: int = DEFAULT_SAMPLES,
                  confidence: float = 0.95, attack: Attack | None = None,
                  pilot_n: int | None = None,
                  confirmation_confidence: float | None = CONFIRMATION_CONFIDENCE,
                  attainable: bool = True, **options: Any) -> AuditResult:
    """Audit another library's mechanism against its own claim, in one call.

    Args:
        obj: The library's object (see :func:`adapt`), or a :class:`LibraryMechanism`.
        rng: The audit's randomness (and the library's, where it can be seeded).
        n: Outputs per input of the reported audit.
        confidence: Confidence of the bound.
        attack: How the event is chosen (default: every applicable attack, float bits
            included; the real-valued design is bounded beside when float bits win).
        pilot_n: With several candidate pairs, outputs per input of each pilot (default
            ``n / 10``, at least the auditor's minimum); the reported audit runs on fresh
            samples of the most telling pair.
        confirmation_confidence: The confirmation a violation must pass (see
            :func:`~dpkd_audit.audit.auditor.audit_sampler`).
        attainable: Where the adapter names the mechanism's DP event
            (:attr:`LibraryMechanism.event`), report the bound an audit of this size could
            attain on it (``epsilon_attainable``; its ``policy`` says what the event is).
        **options: The adapter's options (see :func:`adapt`).

    Returns:
        The :class:`~dpkd_audit.audit.auditor.AuditResult` (``mechanism`` names the library
        object; ``inputs`` the pair audited; ``policy`` the claim's source and the library's
        randomness).

    Raises:
        UnsupportedLibraryObjectError: If the object cannot be adapted (before any sampling).
        ValueError: If an argument is out of range.
    """
    mechanism = adapt(obj, **options)
    rng = _validate.check_generator(rng)
    n = _validate.check_int("n", n, minimum=MIN_SAMPLES)
    chosen, policy = resolve_attack(attack)
    policy = (f"{policy}; claim: {mechanism.claim}; randomness: {mechanism.randomness}")
    name = f"{mechanism.name} ({mechanism.library})"
    pair = mechanism.pairs[0]
    if len(mechanism.pairs) > 1:
        from dpkd_audit.audit.pair_search import search_neighbouring_pair

        pilot = max(MIN_SAMPLES, n // 10) if pilot_n is None else pilot_n
        candidates = [value for p in mechanism.pairs for value in p]
        pairs = [(2 * i, 2 * i + 1) for i in range(len(mechanism.pairs))]
        _, result = search_neighbouring_pair(
            mechanism.sample_fn(), candidates, epsilon=mechanism.epsilon,
            delta=mechanism.delta, pilot_n=pilot, n=n, confidence=confidence, rng=rng,
            pairs=pairs, attack=chosen, mechanism=name,
            policy=f"{policy}; pair chosen by a pilot of {pilot:,} per side on each of "
                   f"{len(pairs)} candidate pairs",
            confirmation_confidence=confirmation_confidence)
    else:
        result = audit_sampler(mechanism.sample_fn(), *pair, epsilon=mechanism.epsilon,
                               delta=mechanism.delta, n=n, confidence=confidence, rng=rng,
                               attack=chosen, mechanism=name, policy=policy,
                               confirmation_confidence=confirmation_confidence)
    if attainable and mechanism.event is not None:
        from dpkd_audit.accountants.base import UnsupportedEventError
        from dpkd_audit.audit.attainable import attainable_epsilon

        try:
            best = attainable_epsilon(mechanism.event, n=result.bound_samples,
                                      delta=mechanism.delta, confidence=result.confidence)
        except (UnsupportedEventError, ValueError):
            best = None
        if best is not None:
            result = dataclasses.replace(
                result, epsilon_attainable=best,
                policy=f"{result.policy}; attainable bound of {mechanism.event_note}")
    return result
