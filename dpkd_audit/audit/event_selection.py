"""Choosing the event of an audit: every applicable attack proposes, the held-out half decides.

:func:`select_event` splits the selection samples (:func:`~dpkd_audit.audit.attacks.
split_selection`), lets each attack that applies to the kind of output propose its best event
on one half (:mod:`~dpkd_audit.audit.attacks`, :mod:`~dpkd_audit.audit.coordinate_attacks`) and
keeps the best on the other half. It looks at the selection samples only, so the event it
returns is a fixed event for the bounding samples (Ding et al., CCS 2018, Section 4).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from dpkd_audit.audit.attacks import (
    Attack,
    Candidate,
    Halves,
    Selection,
    classifier_candidate,
    float_bits_array_candidate,
    float_bits_candidate,
    histogram_candidate,
    projection_candidate,
    split_selection,
    structure_candidates,
    threshold_candidate,
)
from dpkd_audit.audit.coordinate_attacks import coordinate_candidate, top_columns
from dpkd_audit.audit.features import FeatureSpec
from dpkd_audit.audit.outputs import KeyCoder, OutputKind, Outputs, leaf_view, leaf_width

__all__ = ["auto_attacks", "leaf_candidates", "select_event"]


_APPLICABLE = {
    Attack.THRESHOLD: {OutputKind.SCALAR_FLOAT, OutputKind.SCALAR_INT},
    Attack.HISTOGRAM: set(OutputKind),
    Attack.CLASSIFIER: {OutputKind.SCALAR_FLOAT, OutputKind.SCALAR_INT, OutputKind.ARRAY,
                        OutputKind.STRUCTURED},
    Attack.COORDINATE: {OutputKind.ARRAY, OutputKind.STRUCTURED},
    Attack.FLOAT_BITS: {OutputKind.SCALAR_FLOAT, OutputKind.ARRAY},
}


def _applies(attack: Attack, outputs: Outputs) -> bool:
    """Whether ``attack`` applies to this batch (float bits: floating-point values only)."""
    if outputs.kind not in _APPLICABLE[attack]:
        return False
    return attack is not Attack.FLOAT_BITS or outputs.data.dtype.kind == "f"


def auto_attacks(kind: OutputKind, *, float_bits: bool = True,
                 floating: bool = True) -> list[Attack]:
    """The attacks AUTO (``float_bits=False``: AUTO_REAL) runs for this kind of output.

    Every applicable attack competes; the held-out criterion picks the winner. ``floating``:
    whether the outputs are floating-point numbers (float bits apply to those only).
    """
    bits = [Attack.FLOAT_BITS] if float_bits and floating else []
    if kind is OutputKind.SCALAR_INT:
        return [Attack.HISTOGRAM, Attack.THRESHOLD]
    if kind is OutputKind.SCALAR_FLOAT:
        return [Attack.THRESHOLD, Attack.HISTOGRAM, *bits]
    if kind is OutputKind.OBJECT:
        return [Attack.HISTOGRAM]
    if kind is OutputKind.STRUCTURED:
        return [Attack.HISTOGRAM, Attack.COORDINATE, Attack.CLASSIFIER]
    return [Attack.HISTOGRAM, Attack.COORDINATE, Attack.CLASSIFIER, *bits]


def select_event(a: Outputs, b: Outputs, attack: Attack, sel: Selection,
                 coder: KeyCoder) -> Candidate:
    """Choose the event on the selection samples ``a`` (under ``x``) and ``b`` (under ``x'``).

    The selection samples are split (:func:`split_selection`): every attack proposes a family
    of events on the first part, and every member is scored by the criterion on the held-out
    second part; the best (over attacks too, with AUTO) is kept. Every step looks at the
    selection samples only.

    Raises:
        ValueError: If ``attack`` does not apply to this kind of output.
    """
    if not isinstance(attack, Attack):
        raise ValueError(f"attack must be an Attack ({', '.join(x.name for x in Attack)}); "
                         f"got {attack!r}")
    if attack in (Attack.AUTO, Attack.AUTO_REAL):
        attacks = auto_attacks(a.kind, float_bits=attack is Attack.AUTO,
                               floating=a.data.dtype.kind == "f")
    else:
        attacks = [attack]
    for chosen in attacks:
        if not _applies(chosen, a):
            # named as typed after ``dpkd audit --attack`` (the API's Attack member in brackets)
            usable = [f"{x.value.replace('_', '-')}" for x in _APPLICABLE if _applies(x, a)]
            usable += ["auto", "auto-real"]
            what = f"{a.kind.value} outputs of dtype {a.data.dtype}" \
                if a.kind is not OutputKind.OBJECT else f"{a.kind.value} outputs"
            raise ValueError(f"attack {chosen.value.replace('_', '-')} (Attack.{chosen.name}) "
                             f"does not apply to {what}; use one of {', '.join(usable)} "
                             "(--attack NAME)")
    halves = split_selection(a, b)
    candidates = _candidates(halves, attacks, sel, coder)
    if a.kind is OutputKind.OBJECT and attack in (Attack.AUTO, Attack.AUTO_REAL):
        candidates.extend(leaf_candidates(halves, sel, coder, float_bits=attack is Attack.AUTO))
    return max(candidates, key=lambda c: c.criterion)


def _candidates(halves: Halves, attacks: list[Attack], sel: Selection, coder: KeyCoder, *,
                whole_outputs: bool = True) -> list[Candidate]:
    """Each attack's best event on ``halves``.

    ``whole_outputs=False``: no histogram of whole outputs, only of their discrete part.
    """
    kind = halves.propose_a.kind
    vector = kind in (OutputKind.ARRAY, OutputKind.STRUCTURED)

    @functools.cache
    def features() -> FeatureSpec:
        """Fitted once, and only if an attack uses it (classifier; vectors' discrete part)."""
        return FeatureSpec.fit(halves.propose_a, halves.propose_b)

    @functools.cache
    def columns() -> np.ndarray:
        """The most different coordinates, found once for the attacks that read them."""
        return top_columns(halves)

    candidates = []
    for chosen in attacks:
        if chosen is Attack.THRESHOLD:
            candidates.append(threshold_candidate(
                (halves.propose_a.data, halves.propose_b.data),
                (halves.score_a.data, halves.score_b.data), sel))
        elif chosen is Attack.HISTOGRAM:
            if whole_outputs:
                candidates.append(histogram_candidate(halves, sel, coder))
            if vector and features().has_discrete_part:
                candidates.append(projection_candidate(halves, sel, features()))
            if kind is OutputKind.OBJECT:
                candidates.extend(structure_candidates(halves, sel))
        elif chosen is Attack.FLOAT_BITS:
            candidates.append(float_bits_array_candidate(halves, sel, columns()) if vector
                              else float_bits_candidate(halves, sel))
        elif chosen is Attack.COORDINATE:
            candidates.append(coordinate_candidate(halves, sel, columns()))
        else:
            candidates.append(classifier_candidate(halves, sel, features()))
    return candidates


def leaf_candidates(halves: Halves, sel: Selection, coder: KeyCoder, *,
                    float_bits: bool) -> list[Candidate]:
    """The vector attacks on the numbers inside object outputs.

    See :func:`~dpkd_audit.audit.outputs.leaf_view`. A ragged list of ``(index, value)``
    answers, or a tuple mixing labels and values, is one unique key per output for the
    histogram attack, and its structure drops the values; read as a NaN-padded vector (width
    fixed on the proposal part), its values, which answers exist and its length are all there
    for the coordinate, classifier, float-bits and discrete-projection attacks. Each event is
    ``S(leaf_view(output))`` with the view fixed on the selection samples: a fixed event of the
    output space.
    """
    width = leaf_width(halves.propose_a, halves.propose_b)
    if width == 0:
        return []

    def view(outputs: Outputs) -> Outputs:
        return leaf_view(outputs, width)

    viewed = Halves(view(halves.propose_a), view(halves.propose_b), view(halves.score_a),
                    view(halves.score_b))
    attacks = auto_attacks(OutputKind.ARRAY, float_bits=float_bits)
    found = _candidates(viewed, attacks, sel, coder, whole_outputs=False)
    return [dataclasses.replace(
        c, description=f"numbers of the output: {c.description}",
        indicator=lambda outputs, c=c: c.indicator(view(outputs))) for c in found]
