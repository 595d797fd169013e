"""Neighbouring-pair search for black-box samplers: pilot every pair, confirm the best.

A black box's worst-case pair is unknown. Given candidate inputs and which of them are
neighbours (the pairs, or a neighbouring relation; every pair only when the caller says so),
audit every neighbouring pair on a small pilot sample, keep the pair with the largest pilot
lower bound, and audit it again on *fresh* samples. Only the confirmation is reported: the pair
is a function of the pilot samples, which are independent of the confirmation samples, so the
confirmation bound keeps its confidence whatever number of pairs was tried (the
selection/bound split of :mod:`dpkd_audit.audit.auditor`, applied one level up; Ding et al.,
CCS 2018, Section 4: search inputs, then test on fresh samples).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dpkd_audit import _validate
from dpkd_audit.audit.attacks import Attack
from dpkd_audit.audit.auditor import (
    CONFIRMATION_CONFIDENCE,
    MIN_SAMPLES,
    AuditResult,
    Sampler,
    audit_sampler,
)

__all__ = ["search_neighbouring_pair"]


def _check_pairs(pairs: Any, count: int) -> list[tuple[int, int]]:
    out = []
    try:
        items = list(pairs)
    except TypeError as exc:
        raise ValueError(f"pairs must be a sequence of (i, j) index pairs; got "
                         f"{type(pairs).__name__}") from exc
    if not items:
        raise ValueError("pairs must hold at least one (i, j) index pair; got none")
    for item in items:
        try:
            i, j = item
        except (TypeError, ValueError) as exc:
            raise ValueError(f"pairs must hold (i, j) index pairs; got {item!r}") from exc
        i = _validate.check_int("pairs index", i, minimum=0, maximum=count - 1)
        j = _validate.check_int("pairs index", j, minimum=0, maximum=count - 1)
        if i == j:
            raise ValueError(f"pairs must pair two different candidates; got ({i}, {j})")
        out.append((i, j))
    return out


def search_neighbouring_pair(sampler: Sampler, candidates: Sequence[Any], *, epsilon: float,
                             delta: float = 0.0, pilot_n: int = 10_000, n: int = 100_000,
                             confidence: float = 0.95, rng: np.random.Generator,
                             pairs: Sequence[tuple[int, int]] | None = None,
                             is_neighbour: Callable[[Any, Any], bool] | None = None,
                             all_pairs: bool = False, attack: Attack | None = None,
                             mechanism: str | None = None, policy: str | None = None,
                             confirmation_confidence: float | None = CONFIRMATION_CONFIDENCE
                             ) -> tuple[tuple[Any, Any], AuditResult]:
    """Find the pair of candidate inputs on which the sampler leaks most, and audit it.

    The pairs tried are the ones the caller declares neighbouring: the index pairs in ``pairs``,
    or the pairs ``i < j`` with ``is_neighbour(candidates[i], candidates[j])``; every pair only
    with ``all_pairs=True`` (the bound is then on the privacy loss between two arbitrary
    inputs, which is not a DP claim unless they are neighbours). Each is audited with
    ``pilot_n`` outputs per input (both directions are covered by each audit); the pair with the
    largest pilot ``epsilon_lower`` (ties: the larger pilot estimate, then the first) is audited
    again with ``n`` fresh outputs per input. The returned result is the confirmation alone and
    is valid at level ``confidence`` (see the module docstring), for this one audit.

    Args:
        sampler: ``sampler(x, n, rng)`` returning ``n`` independent outputs.
        candidates: At least two candidate inputs.
        epsilon: Claimed epsilon (> 0).
        delta: Claimed delta, in [0, 1).
        pilot_n: Outputs per input in each pilot audit.
        n: Outputs per input in the confirmation audit.
        confidence: Confidence of the confirmation bound (and of the pilot bounds), in (0, 1).
        rng: The randomness.
        pairs: Index pairs of neighbouring candidates to try.
        is_neighbour: The neighbouring relation, ``is_neighbour(x, x_prime) -> bool`` (instead
            of ``pairs``).
        all_pairs: Try every pair of candidates (instead of ``pairs`` / ``is_neighbour``).
        attack: Attack of every audit (default: the policy of
            :func:`~dpkd_audit.audit.auditor.resolve_attack`).
        mechanism: Name recorded in the confirmation's result.
        policy: Attack policy recorded in the confirmation's result.
        confirmation_confidence: The confirmation a violation of the reported audit must pass
            (see :func:`~dpkd_audit.audit.auditor.audit_sampler`); the pilots need none.

    Returns:
        ``((x, x_prime), result)``: the chosen candidates (the objects given, in the order of the
        chosen direction's pair) and the confirmation's :class:`AuditResult`.

    Raises:
        ValueError: If an argument is out of range (the message names it).
    """
    try:
        items = list(candidates)
    except TypeError as exc:
        raise ValueError(f"candidates must be a sequence of inputs; got "
                         f"{type(candidates).__name__}") from exc
    if len(items) < 2:
        raise ValueError(f"candidates must hold at least 2 inputs; got {len(items)}")
    pilot_n = _validate.check_int("pilot_n", pilot_n, minimum=MIN_SAMPLES)
    n = _validate.check_int("n", n, minimum=MIN_SAMPLES)
    rng = _validate.check_generator(rng)
    declared = [name for name, given in (("pairs", pairs is not None),
                                         ("is_neighbour", is_neighbour is not None),
                                         ("all_pairs", all_pairs is True)) if given]
    if len(declared) != 1:
        raise ValueError(
            "declare which candidates are neighbours with exactly one of pairs=[(i, j), ...], "
            "is_neighbour=callable or all_pairs=True (every pair, non-neighbours included); "
            f"got {', '.join(declared) if declared else 'none of them'}")
    if not isinstance(all_pairs, bool):
        raise ValueError(f"all_pairs must be a bool; got {all_pairs!r}")
    if pairs is not None:
        tried = _check_pairs(pairs, len(items))
    elif is_neighbour is not None:
        if not callable(is_neighbour):
            raise ValueError(f"is_neighbour must be callable as is_neighbour(x, x_prime); got "
                             f"{type(is_neighbour).__name__}")
        tried = [(i, j) for i, j in itertools.combinations(range(len(items)), 2)
                 if bool(is_neighbour(items[i], items[j]))]
        if not tried:
            raise ValueError("is_neighbour declares no pair of candidates neighbouring; give "
                             "candidates that include neighbours")
    else:
        tried = list(itertools.combinations(range(len(items)), 2))
    best_key: tuple[float, float] | None = None
    best_pair = tried[0]
    for i, j in tried:
        pilot = audit_sampler(sampler, items[i], items[j], epsilon=epsilon, delta=delta,
                              n=pilot_n, confidence=confidence, rng=rng, attack=attack,
                              confirmation_confidence=None)
        key = (pilot.epsilon_lower, pilot.epsilon_estimate)
        if best_key is None or key > best_key:
            best_key, best_pair = key, (i, j)
    i, j = best_pair
    result = audit_sampler(sampler, items[i], items[j], epsilon=epsilon, delta=delta, n=n,
                           confidence=confidence, rng=rng, attack=attack, mechanism=mechanism,
                           policy=policy, confirmation_confidence=confirmation_confidence)
    return (items[i], items[j]), result
