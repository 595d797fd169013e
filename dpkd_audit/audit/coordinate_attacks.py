"""Attacks on the coordinates of vector outputs: the ones that differ, pairs, values given an index.

For vector outputs whose inputs differ in a few coordinates (a noisy count matrix in which one
record moves, a latent code with a few changed dimensions, released bits of which two are
correlated), the events worth counting look at a few coordinates only. Every event is chosen on
the selection samples (proposed on one half, scored on the other), so it stays a fixed event of
the output space (see :mod:`dpkd_audit.audit.attacks`, whose dispatch calls these).
"""

from __future__ import annotations

import warnings

import numpy as np

from dpkd_audit.audit.attacks import (
    Attack,
    Candidate,
    Halves,
    Selection,
    _keyed_candidate,
    threshold_candidate,
)
from dpkd_audit.audit.features import flat_columns
from dpkd_audit.audit.outputs import Outputs

__all__ = ["coordinate_candidate", "top_columns"]


#: Coordinates (of the most different on the proposal part) tried by the coordinate attack.
COORDINATES_TRIED = 8
#: Most coordinates combined into one sign pattern by the coordinate attack.
PATTERN_COORDINATES = 4


def _midpoints(pa: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """Per column, the midpoint of the two sides' proposal medians (NaN ignored; 0 if none)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        mid = 0.5 * (np.nanmedian(pa, axis=0) + np.nanmedian(pb, axis=0))
    return np.where(np.isfinite(mid), mid, 0.0)


def top_columns(halves: Halves) -> np.ndarray:
    """The :data:`COORDINATES_TRIED` columns whose proposal samples differ most between inputs.

    Two-sample z-score of the means, NaN read as 0; a column constant on each side but
    different between them is the most telling of all (e.g. an exact count leaked beside noisy
    ones): infinite z, never 0.
    """
    pa, pb = flat_columns(halves.propose_a), flat_columns(halves.propose_b)
    with np.errstate(invalid="ignore", divide="ignore"):
        ca, cb = np.where(np.isfinite(pa), pa, 0.0), np.where(np.isfinite(pb), pb, 0.0)
        spread = np.sqrt(ca.var(axis=0) / len(ca) + cb.var(axis=0) / len(cb))
        gap = np.abs(ca.mean(axis=0) - cb.mean(axis=0))
        z_mean = np.where(spread > 0, gap / np.where(spread > 0, spread, 1.0),
                          np.where(gap > 0, np.inf, 0.0))
    return np.argsort(-z_mean, kind="stable")[:COORDINATES_TRIED]


def coordinate_candidate(halves: Halves, sel: Selection, order: np.ndarray) -> Candidate:
    """Thresholds on the coordinates that differ most between the two inputs.

    For vector outputs whose inputs differ in a few coordinates (a noisy count matrix in which
    one record moves, a latent code with a few changed dimensions), the likelihood-ratio test
    looks at those coordinates only: for Laplace noise the privacy loss is largest when *every*
    changed coordinate lies beyond its shift. The coordinates whose proposal samples differ most
    (two-sample z-score of the means, NaN read as 0) are found on the proposal part; then two
    families compete on the held-out part: a threshold on each single coordinate, and the
    histogram attack on the sign pattern of the top ``PATTERN_COORDINATES`` coordinates, each
    compared with the midpoint of the two sides' proposal medians (e.g. the event "cell 1 >= 1
    and cell 2 <= 0" of a count release in which one vote moves).
    """
    pa, pb = flat_columns(halves.propose_a), flat_columns(halves.propose_b)
    sa, sb = flat_columns(halves.score_a), flat_columns(halves.score_b)
    found = []
    for j in order:
        def column(outputs: Outputs, j: int = int(j)) -> np.ndarray:
            return flat_columns(outputs)[:, j]

        found.append(threshold_candidate((pa[:, j], pb[:, j]), (sa[:, j], sb[:, j]), sel,
                                         attack=Attack.COORDINATE,
                                         label=f"coordinate {int(j)}", transform=column))
    top = np.sort(order[:PATTERN_COORDINATES])
    if top.size > 1:
        cuts = _midpoints(pa[:, top], pb[:, top])
        weights = (1 << np.arange(top.size)).astype(np.int64)

        def pattern(outputs: Outputs) -> np.ndarray:
            cols = flat_columns(outputs)[:, top]
            with np.errstate(invalid="ignore"):
                return (cols > cuts).astype(np.int64) @ weights

        def describe(event: np.ndarray) -> list[str]:
            return [" & ".join(f"c{int(c)}{'>' if (int(k) >> i) & 1 else '<='}{t:.3g}"
                               for i, (c, t) in enumerate(zip(top, cuts, strict=True)))
                    for k in event[:5]]

        found.append(_keyed_candidate(halves, pattern, sel, Attack.COORDINATE, describe,
                                      "coordinate pattern"))
    found.extend(pair_candidates(halves, sel, pa, pb))
    found.extend(conditional_candidates(halves, sel, order, pa, pb, sa, sb))
    return max(found, key=lambda c: c.criterion)


#: Pairs of coordinates whose joint events the coordinate attack tries.
PAIRS_TRIED = 4
#: Widest output (coordinates) whose pairs are inspected.
MAX_PAIR_COLUMNS = 64
#: A coordinate with at most this many distinct finite values on the proposal half is discrete.
PAIR_LEVELS = 16
#: Discrete coordinates, their levels and continuous coordinates of the conditional events.
CONDITION_COLUMNS = 2
CONDITION_LEVELS = 4


def _levels(column: np.ndarray) -> np.ndarray | None:
    """The distinct finite values of a proposal column if it is discrete (else ``None``)."""
    values = np.unique(column[np.isfinite(column)])
    return values if 1 < values.size <= PAIR_LEVELS else None


def _code(values: np.ndarray, levels: np.ndarray | None, cut: float) -> np.ndarray:
    """Code of each value: its level (discrete coordinate) or its side of ``cut``.

    Discrete: the level's index, ``len(levels)`` for another value, one more for NaN;
    continuous: 1 above ``cut``, 0 at or below, 2 for NaN.
    """
    if levels is None:
        with np.errstate(invalid="ignore"):
            code = (values > cut).astype(np.int64)
        code[np.isnan(values)] = 2
        return code
    pos = np.clip(np.searchsorted(levels, values), 0, levels.size - 1)
    code = np.where(levels[pos] == values, pos, levels.size).astype(np.int64)
    code[np.isnan(values)] = levels.size + 1
    return code


def top_pairs(pa: np.ndarray, pb: np.ndarray) -> list[tuple[int, int]]:
    """The :data:`PAIRS_TRIED` pairs of coordinates whose dependence differs most.

    Two-sample z-score of each pair's covariance (the mean of the product of the columns,
    centred at the pooled proposal means; NaN read as 0): a dependence between coordinates
    whose marginals agree under both inputs (two released bits correlated under one input)
    leaves every mean, hence :func:`top_columns`, blind; a shift of the means alone moves no
    covariance.
    """
    width = pa.shape[1]
    if width < 2 or width > MAX_PAIR_COLUMNS:
        return []
    ca, cb = (np.where(np.isfinite(p), p, 0.0) for p in (pa, pb))
    mu = 0.5 * (ca.mean(axis=0) + cb.mean(axis=0))
    stats = []
    for c in (ca - mu, cb - mu):
        cov = c.T @ c / len(c)
        sq = c * c
        var = np.maximum(sq.T @ sq / len(c) - cov * cov, 0.0)
        stats.append((cov, var / len(c)))
    (cov_a, v_a), (cov_b, v_b) = stats
    gap = np.abs(cov_a - cov_b)
    spread = np.sqrt(v_a + v_b)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(spread > 0, gap / np.where(spread > 0, spread, 1.0),
                     np.where(gap > 0, np.inf, 0.0))
    i, j = np.triu_indices(width, k=1)
    best = np.argsort(-z[i, j], kind="stable")[:PAIRS_TRIED]
    return [(int(i[b]), int(j[b])) for b in best if z[i[b], j[b]] > 0]


def pair_candidates(halves: Halves, sel: Selection, pa: np.ndarray,
                    pb: np.ndarray) -> list[Candidate]:
    """Joint events on the pairs of coordinates whose dependence differs (:func:`top_pairs`).

    For each pair, the histogram attack on its joint pattern (each coordinate read as its level
    when discrete, else above or below the pooled proposal median), and, for two continuous
    coordinates, thresholds on the sum and the difference of their standardised values. An
    output ``(b_1, ..., b_16)`` of fair bits in which ``b_11`` copies ``b_3`` under one input
    only is told apart by ``b_3 != b_11`` alone (Ding et al., CCS 2018, search joint events of a
    few coordinates for the same reason). Every map is fixed on the proposal half.
    """
    found = []
    pooled = np.concatenate([pa, pb])
    for i, j in top_pairs(pa, pb):
        levels = (_levels(pooled[:, i]), _levels(pooled[:, j]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            cuts = (float(np.nanmedian(pooled[:, i])), float(np.nanmedian(pooled[:, j])))
        width = (levels[1].size + 2) if levels[1] is not None else 3

        def joint(outputs: Outputs, i: int = i, j: int = j, levels=levels, cuts=cuts,
                  width: int = width) -> np.ndarray:
            cols = flat_columns(outputs)
            return (_code(cols[:, i], levels[0], cuts[0]) * width
                    + _code(cols[:, j], levels[1], cuts[1]))

        def describe(event: np.ndarray, i: int = i, j: int = j,
                     width: int = width) -> list[str]:
            return [f"c{i}#{int(k) // width}&c{j}#{int(k) % width}" for k in event[:5]]

        found.append(_keyed_candidate(halves, joint, sel, Attack.COORDINATE, describe,
                                      f"joint pattern of coordinates {i}, {j}"))
        if levels[0] is None and levels[1] is None:
            with np.errstate(invalid="ignore"):
                centre = np.nanmean(pooled[:, [i, j]], axis=0)
                scale = np.nanstd(pooled[:, [i, j]], axis=0)
            scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
            centre = np.where(np.isfinite(centre), centre, 0.0)
            for sign, name in ((1.0, "+"), (-1.0, "-")):
                def combined(outputs: Outputs, i: int = i, j: int = j, sign: float = sign,
                             centre: np.ndarray = centre,
                             scale: np.ndarray = scale) -> np.ndarray:
                    z = (flat_columns(outputs)[:, [i, j]] - centre) / scale
                    return z[:, 0] + sign * z[:, 1]

                found.append(threshold_candidate(
                    (combined(halves.propose_a), combined(halves.propose_b)),
                    (combined(halves.score_a), combined(halves.score_b)), sel,
                    attack=Attack.COORDINATE, label=f"z{i} {name} z{j}", transform=combined))
    return found


def conditional_candidates(halves: Halves, sel: Selection, order: np.ndarray,
                           pa: np.ndarray, pb: np.ndarray, sa: np.ndarray,
                           sb: np.ndarray) -> list[Candidate]:
    """Thresholds on a continuous coordinate *given* a level of a discrete one.

    Among the most different coordinates (``order``), up to :data:`CONDITION_COLUMNS` discrete
    and continuous ones; for each discrete one, its :data:`CONDITION_LEVELS` most frequent
    proposal levels ``l``: the threshold attack on ``value if index == l`` (no event
    otherwise). Report-noisy-max released as ``(index, value)`` leaks through the value of one
    index (``index = 0 and value > t``), which neither coordinate shows alone.
    """
    pooled = np.concatenate([pa, pb])
    discrete, continuous = [], []
    for j in order:
        levels = _levels(pooled[:, j])
        if levels is not None and len(discrete) < CONDITION_COLUMNS:
            discrete.append((int(j), levels))
        elif levels is None and len(continuous) < CONDITION_COLUMNS \
                and np.unique(pooled[:, j]).size > 1:
            continuous.append(int(j))
    found = []
    for d, levels in discrete:
        freq = np.array([np.count_nonzero(pooled[:, d] == v) for v in levels])
        for level in levels[np.argsort(-freq, kind="stable")[:CONDITION_LEVELS]]:
            for c in continuous:
                def given(outputs: Outputs, d: int = d, c: int = c,
                          level: float = float(level)) -> np.ndarray:
                    cols = flat_columns(outputs)
                    return np.where(cols[:, d] == level, cols[:, c], np.nan)

                def masked(cols: np.ndarray, d: int = d, c: int = c,
                           level: float = float(level)) -> np.ndarray:
                    return np.where(cols[:, d] == level, cols[:, c], np.nan)

                found.append(threshold_candidate(
                    (masked(pa), masked(pb)), (masked(sa), masked(sb)), sel,
                    attack=Attack.COORDINATE, label=f"coordinate {c} (coordinate {d} = "
                    f"{float(level):g})", transform=given))
    return found
