"""Attacks: ways to choose, on the selection samples, the event whose counts bound epsilon.

Each attack looks only at the *selection* part of the samples of both inputs and returns a
:class:`Candidate`: a fixed event of the output space (an indicator function), the direction of
the bound, and a selection criterion that predicts the bound the event will give. The auditor then
counts the event on fresh samples; since the candidate is a function of the selection samples
only, it is independent of the bounding samples and the Clopper-Pearson bound on them is valid
(Ding, Wang, Wang, Zhang, Kifer, "Detecting violations of differential privacy", CCS 2018,
Section 4: choose the event on one sample, test it on an independent one; Bichsel et al.,
"DP-Sniper", IEEE S&P 2021, Section 5).

Events are compared by the bound they predict on the *bounding* samples. Where an attack scans a
large family of events on the scoring half (thresholds, likelihood-ratio prefixes) the criterion
is the Clopper-Pearson epsilon bound of the scoring counts at a per-side error far below the
bound's (:func:`criterion`): a conservative prediction (the bound on fewer samples at a smaller
error lies below the bound the same frequencies give on ``N`` bounding samples) that damps the
winner's curse of picking, among many events, one whose counts were lucky. It gives nothing to
an outcome that one input never gives but that occurs ~10 times against 0 on the scoring half
(a debug record released once in a thousand runs at 10^5 samples per side), which counted on
the 8 x 10^4 bounding samples gives ~2.5: such *one-sided* outcomes, the top of a
likelihood-ratio order proposed on the other half, are predicted at the bounding size ``N``
(:func:`_one_sided_prediction`: mild estimates from both halves, and
the ratio their one-sidedness establishes among the outcomes that could show it by chance).
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from collections.abc import Callable

import numpy as np

from dpkd_audit.audit.bounds import _cp_lower, _cp_upper, _epsilon_bound_array
from dpkd_audit.audit.features import FeatureSpec
from dpkd_audit.audit.outputs import (
    KeyCoder,
    Outputs,
    describe_float_key,
    describe_keys,
    float_bit_keys,
    structure_keys,
)

__all__ = ["Attack", "Candidate", "Selection", "split_selection", "threshold_candidate"]


class Attack(enum.Enum):
    """How the auditor chooses its event."""

    #: ``output > t`` or ``output < t`` for real scalar outputs (t among the pooled selection
    #: quantiles, both tails).
    THRESHOLD = "threshold"
    #: The best set of outcomes of a discrete output (outcomes sorted by their empirical
    #: likelihood ratio, best prefix).
    HISTOGRAM = "histogram"
    #: A logistic-regression score of features of vector outputs, then a threshold on it
    #: (DP-Sniper, Bichsel et al., IEEE S&P 2021).
    CLASSIFIER = "classifier"
    #: Bit-level features of floating-point outputs (Mironov, CCS 2012), then a histogram attack
    #: on them (scalars, or the most different coordinates of float arrays).
    FLOAT_BITS = "float_bits"
    #: A threshold on the one coordinate of a vector output that differs most between the
    #: inputs (e.g. the changed cell of a noisy count matrix); the sign pattern of the top
    #: coordinates; the joint pattern of the pairs of coordinates whose dependence differs
    #: most (two released bits correlated under one input); and a threshold on a coordinate
    #: given a level of a discrete one (the value of one index of ``(index, value)``).
    COORDINATE = "coordinate"
    #: Every attack that applies to the output type competes: scalar ints -> HISTOGRAM,
    #: THRESHOLD; scalar floats -> THRESHOLD, HISTOGRAM, FLOAT_BITS; arrays and records ->
    #: HISTOGRAM (whole outputs, and their discrete part: missing-value pattern and discrete
    #: columns), COORDINATE, CLASSIFIER, and FLOAT_BITS on the most different coordinates of
    #: float arrays; other values -> HISTOGRAM (whole outputs and their structure). Each
    #: proposes events on one half of the selection samples and the best on the other half
    #: wins (still chosen on the selection samples only). This audits the *implementation*: a
    #: textbook floating-point sampler is flagged for its floating-point artefacts even when
    #: its real-valued design is private. The default policy (see
    #: :func:`~dpkd_audit.audit.auditor.resolve_attack`).
    AUTO = "auto"
    #: AUTO without FLOAT_BITS: audits the real-valued (idealised) mechanism, ignoring how its
    #: outputs sit on the floating-point grid (the default only for the controls that declare
    #: ``floating_point_output``: their flaw is elsewhere).
    AUTO_REAL = "auto_real"


@dataclasses.dataclass(frozen=True, eq=False)
class Candidate:
    """An event chosen on the selection samples, with the direction of its bound.

    Attributes:
        attack: The attack that produced it.
        description: Human-readable event, e.g. ``"output > 0.73"``.
        forward: ``True`` to bound ``ln((P_x(S) - delta) / P_x'(S))`` ("x vs x'"), ``False`` for
            the reverse ("x' vs x").
        criterion: The selection criterion: a prediction of the bound the event will give on
            the bounding samples (:func:`criterion`, a conservative one, for the events of a
            scan; :func:`_one_sided_prediction` for the one-sided events).
        indicator: Maps a batch of :class:`Outputs` to the boolean hit vector of the event.
    """

    attack: Attack
    description: str
    forward: bool
    criterion: float
    indicator: Callable[[Outputs], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Selection:
    """Parameters shared by the attacks of one audit.

    Attributes:
        delta: The claimed delta (used by the criterion).
        alpha: Per-side error of the Clopper-Pearson bounds of the audit's bound.
        rng: Generator for the classifier's train/held-out split.
        bound_samples: Fresh outputs per input the chosen event will be counted on (``N``), at
            which one-sided events predict their bound; ``None``: the auditor's default
            split, :data:`DEFAULT_BOUND_RATIO` times the selection samples.
    """

    delta: float
    alpha: float
    rng: np.random.Generator
    bound_samples: int | None = None


#: The criterion's per-side error is the bound's divided by this factor: more conservative than
#: the bound itself, which damps the winner's curse of picking, among many events, one whose
#: selection counts were lucky (typically a far-tail threshold of a Laplace, whose ratio is
#: flat beyond the shift). Measured with threshold audits over 40 seeds (divisors 1 to 10^4
#: tried): at 10 a Laplace eps=1 audit at 10^6 per side fell to 0.865 once in 40 seeds (mean
#: 0.988); at 100 the worst of 40 was 0.986 (mean 0.993), at a cost of 3.5% on a Gaussian
#: (pure-epsilon bound 2.50 vs 2.59 at 10^5 per side), whose best events lie in the tails.
SELECTION_ALPHA_DIVISOR = 100.0


#: Bounding samples per selection sample assumed when :class:`Selection` does not say (the
#: auditor's default split: 20% of the outputs select, 80% bound).
DEFAULT_BOUND_RATIO = 4.0
#: Error of the estimates of the one-sided short prefixes (:data:`SHORT_PREFIXES`,
#: :func:`_one_sided_prediction`).
ONE_SIDED_LEVEL = 0.25


def criterion(k_1: np.ndarray, m_1: int, k_0: np.ndarray, m_0: int,
              sel: Selection) -> np.ndarray:
    """Scan criterion of events with scoring counts ``k_1`` (numerator side) and ``k_0``.

    The Clopper-Pearson epsilon bound (:func:`~dpkd_audit.audit.bounds.epsilon_lower_bound`) of
    the scoring counts themselves, at per-side error ``alpha / SELECTION_ALPHA_DIVISOR``: what
    an attack maximises over a large family of events (thresholds, prefixes).
    """
    return _epsilon_bound_array(k_1, m_1, k_0, m_0, sel.delta,
                                sel.alpha / SELECTION_ALPHA_DIVISOR)


def bound_size(sel: Selection, selection_size: int) -> int:
    """Bounding samples per input ``N`` (given, or the default multiple of the selection).

    ``selection_size``: selection samples per input (the scoring halves of both inputs, or the
    proposal halves, add up to it).
    """
    if sel.bound_samples is not None:
        return int(sel.bound_samples)
    return max(1, round(DEFAULT_BOUND_RATIO * selection_size))


def _criteria(k_x: np.ndarray, m_x: int, k_xp: np.ndarray, m_xp: int,
              sel: Selection) -> tuple[np.ndarray, np.ndarray]:
    """Criterion of every event in both directions: (x vs x', x' vs x)."""
    return criterion(k_x, m_x, k_xp, m_xp, sel), criterion(k_xp, m_xp, k_x, m_x, sel)


# --------------------------------------------------------------------------- held-out split

#: Share of the selection samples on which the attacks *propose* their families of events; the
#: rest scores every member of every family (held out from the proposals).
PROPOSE_FRACTION = 0.5


@dataclasses.dataclass(frozen=True, eq=False)
class Halves:
    """Selection samples of both inputs, split into a proposing and a scoring half."""

    propose_a: Outputs
    propose_b: Outputs
    score_a: Outputs
    score_b: Outputs


def split_selection(a: Outputs, b: Outputs) -> Halves:
    """Split the (i.i.d.) selection samples: the first part proposes, the rest scores."""
    def cut(o: Outputs) -> tuple[Outputs, Outputs]:
        h = min(max(1, int(len(o) * PROPOSE_FRACTION)), len(o) - 1)
        return Outputs(o.kind, o.data[:h]), Outputs(o.kind, o.data[h:])

    (pa, sa), (pb, sb) = cut(a), cut(b)
    return Halves(pa, pb, sa, sb)


# --------------------------------------------------------------------------- threshold

#: Number of candidate thresholds spread uniformly over the pooled proposal quantiles (more are
#: added geometrically towards both tails).
THRESHOLD_GRID = 1024


def _threshold_grid(pooled_sorted: np.ndarray) -> np.ndarray:
    size = pooled_sorted.size
    uniform = np.linspace(0, size - 1, min(THRESHOLD_GRID, size))
    tail = np.geomspace(1, max(size / 2, 1), 256) - 1
    idx = np.unique(np.concatenate([uniform, tail, size - 1 - tail]).round().astype(np.int64))
    return np.unique(pooled_sorted[np.clip(idx, 0, size - 1)])


def _sorted_valid(values: np.ndarray) -> tuple[np.ndarray, int]:
    values = np.sort(np.asarray(values, dtype=np.float64))
    valid = int(np.count_nonzero(~np.isnan(values)))
    return values[:valid], values.size


def threshold_candidate(propose: tuple[np.ndarray, np.ndarray],
                        score: tuple[np.ndarray, np.ndarray], sel: Selection, *,
                        attack: Attack = Attack.THRESHOLD, label: str = "output",
                        transform: Callable[[Outputs], np.ndarray] | None = None) -> Candidate:
    """Best event ``value > t`` or ``value < t`` (both directions), ``t`` proposed, then scored.

    The thresholds are quantiles of the pooled *proposal* values; every threshold, operator and
    direction is scored by the criterion on the held-out *scoring* values (sort-based counting,
    ``O(m log m)`` for any number of thresholds). NaN values are in no event.

    Args:
        propose: Proposal values under ``x`` and ``x'``.
        score: Scoring values under ``x`` and ``x'``.
        sel: Shared selection parameters.
        attack: Attack recorded in the candidate.
        label: Name of the value in the description.
        transform: Maps a batch of outputs to the values compared with ``t`` (default: the
            scalar output itself).
    """
    pooled, _ = _sorted_valid(np.concatenate([np.ravel(propose[0]), np.ravel(propose[1])]))
    thresholds = _threshold_grid(pooled) if pooled.size else np.array([0.0])
    (a, m_a), (b, m_b) = _sorted_valid(score[0]), _sorted_valid(score[1])
    gt_a = a.size - np.searchsorted(a, thresholds, side="right")
    gt_b = b.size - np.searchsorted(b, thresholds, side="right")
    lt_a = np.searchsorted(a, thresholds, side="left")
    lt_b = np.searchsorted(b, thresholds, side="left")
    options = []
    for op, k_a, k_b in ((">", gt_a, gt_b), ("<", lt_a, lt_b)):
        fwd, bwd = _criteria(k_a, m_a, k_b, m_b, sel)
        options.append((op, True, fwd, (k_a, m_a, k_b, m_b)))
        options.append((op, False, bwd, (k_b, m_b, k_a, m_a)))
    op, forward, scores, (k_num, m_num, k_den, m_den) = max(
        options, key=lambda o: float(np.max(o[2])))
    i = int(np.argmax(scores))
    t = float(thresholds[i])
    predicted = float(scores[i])
    if k_den[i] == 0 and k_num[i] > 0:
        # one-sided on the scoring half (an exact value leaked beside noisy ones): predicted
        # like the one-sided prefixes of the histogram attack, on both halves' counts, among
        # the thresholds that could have shown as many one-sided hits by chance
        (pa, m_pa), (pb, m_pb) = _sorted_valid(propose[0]), _sorted_valid(propose[1])
        if op == ">":
            p_a = pa.size - np.searchsorted(pa, t, side="right")
            p_b = pb.size - np.searchsorted(pb, t, side="right")
        else:
            p_a, p_b = np.searchsorted(pa, t, side="left"), np.searchsorted(pb, t, side="left")
        (p_num, m_pnum, p_den, m_pden) = (p_a, m_pa, p_b, m_pb) if forward \
            else (p_b, m_pb, p_a, m_pa)
        if p_den == 0:
            one_sided = _one_sided_prediction(
                np.array([k_num[i] + p_num]), m_num + m_pnum, m_den + m_pden,
                np.where(k_den == 0, k_num, 0), sel, bound_size(sel, m_num + m_den))
            predicted = max(predicted, float(one_sided[0]))
    values_of = transform if transform is not None else _scalar_values

    def indicator(outputs: Outputs) -> np.ndarray:
        values = values_of(outputs)
        with np.errstate(invalid="ignore"):
            return values > t if op == ">" else values < t

    return Candidate(attack, f"{label} {op} {t:.6g}", forward, predicted, indicator)


def _scalar_values(outputs: Outputs) -> np.ndarray:
    return outputs.data.astype(np.float64, copy=False)


# --------------------------------------------------------------------------- histogram

#: Largest number of prefixes of the sorted outcomes evaluated by the histogram attack.
MAX_PREFIXES = 4096
#: Shortest prefixes of each likelihood-ratio order (proposed on the proposal half; single
#: outcomes, so that the chance patterns they are compared with are those of single outcomes,
#: see :func:`_one_sided_prediction`) that also compete when no output of the other input hit
#: them on either half (the signature of an
#: outcome that input never gives), predicted from both halves' counts pooled
#: (:func:`_one_sided_prediction`: mild estimates, and a ratio that 0 hits against ``k``
#: establishes among the outcomes that could have shown it by chance). A rare outcome one
#: input never gives (a debug
#: record released once in a thousand runs, the clamp edge of a snapping mechanism, a leak
#: w.p. 10^-3) tops the order with ~10 hits against 0 per half at 10^5 samples per side: the
#: scan's conservative estimates give it nothing (10 against 0 does not establish a ratio
#: beyond e at 1 - 2.5 x 10^-4), yet counted on the 8 x 10^4 bounding samples it gives ~2.5
#: (predicted 1.3 from 20 against 0). Measured before choosing, at 10^5 per side over 12
#: seeds: letting every short prefix compete on median estimates took a Laplace audit's whole
#: bound in 2 seeds; one-sided prefixes on mild estimates without the ratio's Bonferroni
#: share, a discrete Gaussian's in 2 and a reverse-kNN count release's in 1 (a cell pattern
#: hit 18 times against 0 whose true ratio is 2.8); three-outcome prefixes, whose hits no single
#: outcome's count reflects, a correct Laplace's at 2 x 10^4 per side.
SHORT_PREFIXES = 1


def _best_set(propose: tuple[np.ndarray, np.ndarray], score: tuple[np.ndarray, np.ndarray],
              sel: Selection) -> tuple[np.ndarray, bool, float]:
    """Best set of keys, direction and predicted bound: likelihood-ratio prefixes, scored.

    Neyman-Pearson: the most telling sets of a given probability are likelihood-ratio prefixes.
    The ratios are estimated on the *proposal* keys, in two orders: the smoothed empirical ratio
    ``((k + 1/2) / m) / ((k' + 1/2) / m')``, and the criterion of each outcome alone (outcomes
    whose ratio is *established* come first, so outcomes that share one true ratio, as in
    randomized response or the tails of a discrete Laplace, enter by weight of evidence rather
    than by noise). Each prefix is then scored on the held-out *scoring* keys, so an outcome
    seen once while proposing (a continuous value that never recurs) adds nothing to a prefix
    and the chosen set keeps only outcomes that recur. Only outcomes seen more often on the
    numerator side while proposing are considered. The prefix found by the scan (on
    :func:`criterion`) competes with the :data:`SHORT_PREFIXES` shortest of each order that no
    output of the other input hit (:func:`_one_sided_prediction`), on the bound each predicts.
    """
    (pa, pb), (sa, sb) = propose, score
    m_a, m_b = sa.size, sb.size
    uniq, inverse = np.unique(np.concatenate([pa, pb]), return_inverse=True)
    c_a = np.bincount(inverse[:pa.size], minlength=uniq.size)
    c_b = np.bincount(inverse[pa.size:], minlength=uniq.size)

    def score_counts(keys: np.ndarray) -> np.ndarray:
        pos = np.clip(np.searchsorted(uniq, keys), 0, uniq.size - 1)
        seen = uniq[pos] == keys
        return np.bincount(pos[seen], minlength=uniq.size)

    s_a, s_b = score_counts(sa), score_counts(sb)
    totals = c_a + c_b + s_a + s_b
    best: tuple[np.ndarray, bool, float] = (uniq[:1], True, 0.0)
    found: list[tuple[np.ndarray, bool, float]] = []
    for forward, num, m_num_p, den, m_den_p, s_num, m_num, s_den, m_den in (
            (True, c_a, pa.size, c_b, pb.size, s_a, m_a, s_b, m_b),
            (False, c_b, pb.size, c_a, pa.size, s_b, m_b, s_a, m_a)):
        ratio = ((num + 0.5) / m_num_p) / ((den + 0.5) / m_den_p)
        telling = np.flatnonzero(ratio > 1.0)
        if telling.size == 0:
            continue
        alone = criterion(num[telling], m_num_p, den[telling], m_den_p, sel)
        for order_key in (ratio[telling], alone + 1e-9 * ratio[telling] / ratio.max()):
            order = telling[np.argsort(-order_key, kind="stable")]
            cum_num = np.cumsum(s_num[order])
            cum_den = np.cumsum(s_den[order])
            if order.size > MAX_PREFIXES:
                pick = np.unique(np.concatenate([
                    np.arange(MAX_PREFIXES // 2),
                    np.geomspace(MAX_PREFIXES // 2, order.size, MAX_PREFIXES // 2)
                    .astype(np.int64) - 1]))
            else:
                pick = np.arange(order.size)
            scores = criterion(cum_num[pick], m_num, cum_den[pick], m_den, sel)
            j = int(np.argmax(scores))
            if scores[j] > best[2]:
                best = (np.sort(uniq[order[: pick[j] + 1]]), forward, float(scores[j]))
                found.append(best)
            short = min(SHORT_PREFIXES, order.size)
            pooled_num = cum_num[:short] + np.cumsum(num[order[:short]])
            pooled_den = cum_den[:short] + np.cumsum(den[order[:short]])
            one_sided = _one_sided_prediction(
                pooled_num, m_num + m_num_p, m_den + m_den_p, totals, sel,
                bound_size(sel, m_num + m_den))
            one_sided = np.where(pooled_den == 0, one_sided, 0.0)
            j = int(np.argmax(one_sided))
            if one_sided[j] > 0:
                found.append((np.sort(uniq[order[: j + 1]]), forward, float(one_sided[j])))
    return max(found, key=lambda f: f[2], default=best)


def _one_sided_prediction(hits: np.ndarray, m_num: int, m_den: int, totals: np.ndarray,
                          sel: Selection, size: int) -> np.ndarray:
    """Predicted bound of single outcomes hit ``hits`` times of ``m_num`` and never of ``m_den``.

    The numerator probability is estimated at per-side error :data:`ONE_SIDED_LEVEL`; the
    denominator's as the larger of its Clopper-Pearson upper estimate from 0 hits and the
    numerator's estimate divided by a lower bound on the ratio: given ``k`` hits in all, each
    on the numerator side with probability ``r m_num / (r m_num + m_den)`` for a ratio ``r``,
    all ``k`` land there with probability at most ``q^k``, so ``q >= (a / K)^(1/k)`` at error
    ``a = ONE_SIDED_LEVEL`` shared (Bonferroni) among the ``K`` outcomes hit at least ``k / 2``
    times in all (``totals``): those that could have shown such a pattern by chance. Many
    recurring outcomes of a moderate ratio (an integer vector's cells, a discrete Gaussian's
    tail) thus need many more one-sided hits than a lone debug record does.
    """
    hits = np.asarray(hits, dtype=np.float64)
    k_outcomes = np.maximum(1, np.count_nonzero(totals[None, :] >= hits[:, None] / 2, axis=1))
    with np.errstate(divide="ignore"):
        q = np.power(ONE_SIDED_LEVEL / k_outcomes, 1.0 / np.maximum(hits, 1.0))
        ratio = np.where(q < 1, q / (1 - q), np.inf) * (m_den / m_num)
    p_num = _cp_lower(hits, m_num, ONE_SIDED_LEVEL)
    p_den = np.maximum(_cp_upper(np.zeros_like(hits), m_den, ONE_SIDED_LEVEL), p_num / ratio)
    return _epsilon_bound_array(size * p_num, size, size * p_den, size, sel.delta, sel.alpha)


def _set_text(members: list[str], total: int) -> str:
    shown = ", ".join(members[:5])
    more = f", ... ({total} outcomes)" if total > 5 else ""
    return "{" + shown + more + "}"


def _keyed_candidate(halves: Halves, keys_of: Callable[[Outputs], np.ndarray], sel: Selection,
                     attack: Attack, describe: Callable[[np.ndarray], list[str]],
                     what: str) -> Candidate:
    event, forward, score = _best_set(
        (keys_of(halves.propose_a), keys_of(halves.propose_b)),
        (keys_of(halves.score_a), keys_of(halves.score_b)), sel)

    def indicator(outputs: Outputs) -> np.ndarray:
        return np.isin(keys_of(outputs), event)

    return Candidate(attack, f"{what} in {_set_text(describe(event), event.size)}", forward,
                     score, indicator)


def histogram_candidate(halves: Halves, sel: Selection, coder: KeyCoder) -> Candidate:
    """Best set of outcomes of a discrete output (unseen outcomes are not in the event)."""
    both = Outputs(halves.propose_a.kind,
                   np.concatenate([halves.propose_a.data, halves.propose_b.data]))
    both_keys = coder.keys(both)
    return _keyed_candidate(halves, coder.keys, sel, Attack.HISTOGRAM,
                            lambda event: describe_keys(event[:5], both_keys, both), "output")


def projection_candidate(halves: Halves, sel: Selection, spec: FeatureSpec) -> Candidate:
    """Histogram attack on the discrete projection (missing-value pattern, discrete columns)."""
    return _keyed_candidate(halves, spec.discrete_keys, sel, Attack.HISTOGRAM,
                            lambda event: [f"<pattern {int(k) & 0xffff:04x}>" for k in event[:5]],
                            "discrete part (missing values, discrete columns)")


def structure_candidates(halves: Halves, sel: Selection) -> list[Candidate]:
    """Histogram attacks on the structure of object outputs (lengths, types, discrete part).

    Two projections (:func:`~dpkd_audit.audit.outputs.structure_keys`): the discrete part
    (every value but the real numbers, with the lengths), and the shape alone (types and
    lengths). Each is a fixed function of one output, so its events are fixed events.
    """
    found = []
    for discrete, what in ((True, "structure and discrete values"), (False, "structure")):
        codes: dict = {}
        names: dict[int, str] = {}

        def keys_of(outputs: Outputs, discrete: bool = discrete,
                    codes: dict = codes) -> np.ndarray:
            return structure_keys(outputs, discrete=discrete, codes=codes)

        def describe(event: np.ndarray, codes: dict = codes,
                     names: dict[int, str] = names) -> list[str]:
            if not names:
                names.update({v: " ".join(repr(k).split())[:60] for k, v in codes.items()})
            return [names.get(int(k), f"<key {int(k)}>") for k in event[:5]]

        found.append(_keyed_candidate(halves, keys_of, sel, Attack.HISTOGRAM, describe, what))
    return found


# --------------------------------------------------------------------------- float bits

def _float_dtype(outputs: Outputs) -> np.dtype:
    dtype = outputs.data.dtype
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)


def float_bits_candidate(halves: Halves, sel: Selection, *,
                         column: int | None = None) -> Candidate:
    """Best set of (sign, binade, low-bit pattern) outcomes of floating-point outputs.

    Mironov, CCS 2012, Section 3 (see :func:`~dpkd_audit.audit.outputs.float_bit_keys`): two
    patterns are tried (trailing zero bits of the significand; its lowest bits), each with the
    histogram attack, and the better on the held-out criterion is kept.

    Args:
        halves: The selection samples.
        sel: Shared selection parameters.
        column: For float array outputs, the coordinate (of the flattened output) whose bits
            are read, in its own dtype; ``None`` for scalar outputs.
    """
    dtype = _float_dtype(halves.propose_a)

    def values_of(outputs: Outputs) -> np.ndarray:
        if column is None:
            return outputs.data
        return np.ascontiguousarray(outputs.data.reshape(len(outputs), -1)[:, column])

    what = "bit pattern" if column is None else f"bit pattern of coordinate {column}"
    found = []
    for low in (False, True):
        def keys_of(outputs: Outputs, low: bool = low) -> np.ndarray:
            return float_bit_keys(values_of(outputs), low_bits=low)

        def describe(event: np.ndarray, low: bool = low) -> list[str]:
            return [describe_float_key(int(k), low_bits=low, dtype=dtype) for k in event[:5]]

        found.append(_keyed_candidate(halves, keys_of, sel, Attack.FLOAT_BITS, describe, what))
    return max(found, key=lambda c: c.criterion)


def float_bits_array_candidate(halves: Halves, sel: Selection,
                               order: np.ndarray) -> Candidate:
    """:func:`float_bits_candidate` on each of the coordinates that differ most between inputs.

    A textbook floating-point sampler of a vector (``x + noise`` coordinate-wise) leaks through
    the bits of the coordinates in which the inputs differ: ``order``, from
    :func:`~dpkd_audit.audit.coordinate_attacks.top_columns`
    on the proposal part; the best coordinate on the held-out part wins.
    """
    return max((float_bits_candidate(halves, sel, column=int(j)) for j in order),
               key=lambda c: c.criterion)


# --------------------------------------------------------------------------- classifier

#: Most training rows per side (the rest of the proposal part is left out to bound the cost).
CLASSIFIER_MAX_TRAIN = 100_000


#: Iterations of the logistic fit (scikit-learn's ``max_iter``, and the L-BFGS fallback's).
LOGISTIC_MAX_ITER = 500


def fit_logistic(features: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression (C = 1): coefficients and intercept.

    scikit-learn's ``LogisticRegression(C=1.0)`` when it is installed (the ``pipelines``
    extra); otherwise the same objective, ``||w||^2 / 2 + sum_i log(1 + exp(-s_i (w x_i +
    b)))`` with the intercept unpenalised, minimised by scipy's L-BFGS-B with its exact
    gradient, so the core install audits vector outputs too. Any fixed score gives a valid
    event (only the power depends on the fit), and a non-converged fit is still a fixed score.
    """
    try:
        from sklearn.exceptions import ConvergenceWarning  # heavy import, only when used
        from sklearn.linear_model import LogisticRegression
    except ModuleNotFoundError:
        return _fit_logistic_scipy(features, labels)
    model = LogisticRegression(C=1.0, max_iter=LOGISTIC_MAX_ITER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(features, labels)
    return model.coef_.ravel().copy(), float(model.intercept_[0])


def _fit_logistic_scipy(features: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, float]:
    from scipy.optimize import minimize
    from scipy.special import expit, log1p

    signs = 2.0 * labels - 1.0

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:-1], theta[-1]
        margin = signs * (features @ w + b)
        value = 0.5 * float(w @ w) + float(np.sum(np.where(
            margin > 0, log1p(np.exp(-np.abs(margin))), -margin + log1p(np.exp(-np.abs(margin))))))
        weight = -signs * expit(-margin)
        grad = np.concatenate([w + features.T @ weight, [weight.sum()]])
        return value, grad

    start = np.zeros(features.shape[1] + 1)
    found = minimize(loss, start, jac=True, method="L-BFGS-B",
                     options={"maxiter": LOGISTIC_MAX_ITER})
    return found.x[:-1].copy(), float(found.x[-1])


def classifier_candidate(halves: Halves, sel: Selection, spec: FeatureSpec) -> Candidate:
    """Logistic-regression score on features, then the threshold attack on its score.

    DP-Sniper (Bichsel, Steffen, Bogunovic, Vechev, IEEE S&P 2021, Sections 4-5): train a
    classifier to tell the two inputs apart from an output, then threshold its score. The model
    is fitted on the proposal part and its threshold chosen by the held-out scoring part, so the
    final event is still a function of the selection samples only.
    """
    train_a = spec.transform(halves.propose_a)[:CLASSIFIER_MAX_TRAIN]
    train_b = spec.transform(halves.propose_b)[:CLASSIFIER_MAX_TRAIN]
    train = np.concatenate([train_a, train_b])
    mean = train.mean(axis=0)
    scale = train.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    labels = np.concatenate([np.zeros(len(train_a)), np.ones(len(train_b))])
    coef, intercept = fit_logistic((train - mean) / scale, labels)

    def score(outputs: Outputs) -> np.ndarray:
        return ((spec.transform(outputs) - mean) / scale) @ coef + intercept

    return threshold_candidate(
        (((train_a - mean) / scale) @ coef + intercept,
         ((train_b - mean) / scale) @ coef + intercept),
        (score(halves.score_a), score(halves.score_b)), sel,
        attack=Attack.CLASSIFIER, label="classifier score", transform=score)
