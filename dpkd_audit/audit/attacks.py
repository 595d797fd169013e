"""Attacks: ways to choose, on the selection samples, the event whose counts bound epsilon.

Each attack looks only at the *selection* part of the samples of both inputs and returns a
:class:`Candidate`: a fixed event of the output space (an indicator function), the direction of
the bound, and a selection criterion that predicts the bound the event will give. The auditor then
counts the event on fresh samples; since the candidate is a function of the selection samples
only, it is independent of the bounding samples and the Clopper-Pearson bound on them is valid
(Ding, Wang, Wang, Zhang, Kifer, "Detecting violations of differential privacy", CCS 2018,
Section 4: choose the event on one sample, test it on an independent one; Bichsel et al.,
"DP-Sniper", IEEE S&P 2021, Section 5).

The selection criterion of an event with selection counts ``(k_1, k_0)`` out of ``(m_1, m_0)`` is
the Clopper-Pearson epsilon bound computed on those counts (:func:`~dpkd_audit.audit.bounds.
epsilon_lower_bound`, at a per-side error smaller than the bound's; see :func:`criterion`): it
rewards a large likelihood ratio and penalises events with few hits, whose ratio on the selection
samples is mostly noise.
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from collections.abc import Callable

import numpy as np

from dpkd_audit.audit.bounds import _epsilon_bound_array
from dpkd_audit.audit.outputs import (
    KeyCoder,
    OutputKind,
    Outputs,
    count_levels,
    describe_float_key,
    describe_keys,
    float_bit_keys,
    numeric_features,
)

__all__ = ["Attack", "Candidate", "Selection", "select_event"]


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
    #: on them.
    FLOAT_BITS = "float_bits"
    #: By output type: scalar ints -> HISTOGRAM and THRESHOLD; scalar floats -> THRESHOLD and
    #: FLOAT_BITS (and HISTOGRAM when few distinct values); arrays and records -> HISTOGRAM when
    #: the outcomes repeat, else CLASSIFIER; other values -> HISTOGRAM. Where several apply, the
    #: best on the selection criterion wins (still chosen on the selection samples only). This
    #: audits the *implementation*: a textbook floating-point sampler is flagged for its
    #: floating-point artefacts even when its real-valued design is private.
    AUTO = "auto"
    #: AUTO without FLOAT_BITS: audits the real-valued (idealised) mechanism, ignoring how its
    #: outputs sit on the floating-point grid.
    AUTO_REAL = "auto_real"


@dataclasses.dataclass(frozen=True, eq=False)
class Candidate:
    """An event chosen on the selection samples, with the direction of its bound.

    Attributes:
        attack: The attack that produced it.
        description: Human-readable event, e.g. ``"output > 0.73"``.
        forward: ``True`` to bound ``ln((P_x(S) - delta) / P_x'(S))`` ("x vs x'"), ``False`` for
            the reverse ("x' vs x").
        criterion: The selection criterion (Clopper-Pearson epsilon on the selection counts).
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
        alpha: Per-side error of the Clopper-Pearson bounds of the criterion.
        rng: Generator for the classifier's train/held-out split.
    """

    delta: float
    alpha: float
    rng: np.random.Generator


#: The criterion's per-side error is the bound's divided by this factor: more conservative than
#: the bound itself, which damps the winner's curse of picking, among many events, one whose
#: selection counts were lucky (typically a far-tail threshold of a Laplace, whose ratio is
#: flat beyond the shift). Measured with threshold audits over 40 seeds (divisors 1 to 10^4
#: tried): at 10 a Laplace eps=1 audit at 10^6 per side fell to 0.865 once in 40 seeds (mean
#: 0.988); at 100 the worst of 40 was 0.986 (mean 0.993), at a cost of 3.5% on a Gaussian
#: (pure-epsilon bound 2.50 vs 2.59 at 10^5 per side), whose best events lie in the tails.
SELECTION_ALPHA_DIVISOR = 100.0


def criterion(k_1: np.ndarray, m_1: int, k_0: np.ndarray, m_0: int,
              sel: Selection) -> np.ndarray:
    """Selection criterion of events with selection counts ``k_1`` (numerator side) and ``k_0``.

    The Clopper-Pearson epsilon bound (:func:`~dpkd_audit.audit.bounds.epsilon_lower_bound`) of
    the selection counts themselves, at per-side error ``alpha / SELECTION_ALPHA_DIVISOR``.
    """
    return _epsilon_bound_array(k_1, m_1, k_0, m_0, sel.delta,
                                sel.alpha / SELECTION_ALPHA_DIVISOR)


def _criteria(k_x: np.ndarray, m_x: int, k_xp: np.ndarray, m_xp: int,
              sel: Selection) -> tuple[np.ndarray, np.ndarray]:
    """Criterion of every event in both directions: (x vs x', x' vs x)."""
    return criterion(k_x, m_x, k_xp, m_xp, sel), criterion(k_xp, m_xp, k_x, m_x, sel)


# --------------------------------------------------------------------------- threshold

#: Number of candidate thresholds spread uniformly over the pooled selection quantiles (more are
#: added geometrically towards both tails).
THRESHOLD_GRID = 1024


def _threshold_grid(pooled_sorted: np.ndarray) -> np.ndarray:
    size = pooled_sorted.size
    uniform = np.linspace(0, size - 1, min(THRESHOLD_GRID, size))
    tail = np.geomspace(1, max(size / 2, 1), 256) - 1
    idx = np.unique(np.concatenate([uniform, tail, size - 1 - tail]).round().astype(np.int64))
    return np.unique(pooled_sorted[np.clip(idx, 0, size - 1)])


def threshold_candidate(a: np.ndarray, b: np.ndarray, sel: Selection, *,
                        attack: Attack = Attack.THRESHOLD, label: str = "output",
                        transform: Callable[[Outputs], np.ndarray] | None = None) -> Candidate:
    """Best event ``value > t`` or ``value < t`` (both directions) on real selection values.

    Counting is sort-based: ``O(m log m)`` for ``m`` selection values and any number of
    thresholds. NaN values are in no event.

    Args:
        a: Selection values under ``x``.
        b: Selection values under ``x'``.
        sel: Shared selection parameters.
        attack: Attack recorded in the candidate.
        label: Name of the value in the description.
        transform: Maps a batch of outputs to the values compared with ``t`` (default: the
            scalar output itself).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a_sorted, b_sorted = np.sort(a), np.sort(b)
    pooled = np.sort(np.concatenate([a_sorted, b_sorted]))
    pooled = pooled[~np.isnan(pooled)]
    if pooled.size == 0:
        thresholds = np.array([0.0])
    else:
        thresholds = _threshold_grid(pooled)
    valid_a = int(np.count_nonzero(~np.isnan(a)))
    valid_b = int(np.count_nonzero(~np.isnan(b)))
    gt_a = valid_a - np.searchsorted(a_sorted[:valid_a], thresholds, side="right")
    gt_b = valid_b - np.searchsorted(b_sorted[:valid_b], thresholds, side="right")
    lt_a = np.searchsorted(a_sorted[:valid_a], thresholds, side="left")
    lt_b = np.searchsorted(b_sorted[:valid_b], thresholds, side="left")
    options = []
    for op, k_a, k_b in ((">", gt_a, gt_b), ("<", lt_a, lt_b)):
        fwd, bwd = _criteria(k_a, a.size, k_b, b.size, sel)
        options.append((op, True, fwd))
        options.append((op, False, bwd))
    op, forward, scores = max(options, key=lambda o: float(np.max(o[2])))
    i = int(np.argmax(scores))
    t = float(thresholds[i])
    values_of = transform if transform is not None else _scalar_values

    def indicator(outputs: Outputs) -> np.ndarray:
        values = values_of(outputs)
        with np.errstate(invalid="ignore"):
            return values > t if op == ">" else values < t

    return Candidate(attack, f"{label} {op} {t:.6g}", forward, float(scores[i]), indicator)


def _scalar_values(outputs: Outputs) -> np.ndarray:
    return outputs.data.astype(np.float64, copy=False)


# --------------------------------------------------------------------------- histogram

#: Largest number of prefixes of the sorted outcomes evaluated by the histogram attack.
MAX_PREFIXES = 4096


def _best_set(keys_a: np.ndarray, keys_b: np.ndarray, sel: Selection
              ) -> tuple[np.ndarray, bool, float]:
    """Best set of keys (and direction) by the criterion, among likelihood-ratio prefixes.

    Neyman-Pearson: the most telling sets of a given probability are likelihood-ratio prefixes.
    The ratios are only estimated, so two orders are tried and every prefix of each is scored by
    the criterion: the smoothed empirical ratio ``((k + 1/2) / m) / ((k' + 1/2) / m')``, and the
    criterion of each outcome alone (outcomes whose ratio is *established* come first, so
    outcomes that share one true ratio, as in randomized response or the tails of a discrete
    Laplace, enter by weight of evidence rather than by noise). Only outcomes seen more often on
    the numerator side are considered.
    """
    m_a, m_b = keys_a.size, keys_b.size
    uniq, inverse = np.unique(np.concatenate([keys_a, keys_b]), return_inverse=True)
    c_a = np.bincount(inverse[:m_a], minlength=uniq.size)
    c_b = np.bincount(inverse[m_a:], minlength=uniq.size)
    best: tuple[np.ndarray, bool, float] = (uniq[:1], True, 0.0)
    for forward, num, m_num, den, m_den in ((True, c_a, m_a, c_b, m_b),
                                             (False, c_b, m_b, c_a, m_a)):
        ratio = ((num + 0.5) / m_num) / ((den + 0.5) / m_den)
        telling = np.flatnonzero(ratio > 1.0)
        if telling.size == 0:
            continue
        alone = criterion(num[telling], m_num, den[telling], m_den, sel)
        for order_key in (ratio[telling], alone + 1e-9 * ratio[telling] / ratio.max()):
            order = telling[np.argsort(-order_key, kind="stable")]
            cum_num = np.cumsum(num[order])
            cum_den = np.cumsum(den[order])
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
    return best


def _set_text(members: list[str], total: int) -> str:
    shown = ", ".join(members[:5])
    more = f", ... ({total} outcomes)" if total > 5 else ""
    return "{" + shown + more + "}"


def histogram_candidate(a: Outputs, b: Outputs, sel: Selection, coder: KeyCoder) -> Candidate:
    """Best set of outcomes of a discrete output (unseen outcomes are not in the event)."""
    keys_a = coder.keys(a)
    keys_b = coder.keys(b)
    event, forward, score = _best_set(keys_a, keys_b, sel)
    both = Outputs(a.kind, np.concatenate([a.data, b.data]))
    text = _set_text(describe_keys(event[:5], np.concatenate([keys_a, keys_b]), both),
                     event.size)

    def indicator(outputs: Outputs) -> np.ndarray:
        return np.isin(coder.keys(outputs), event)

    return Candidate(Attack.HISTOGRAM, f"output in {text}", forward, score, indicator)


# --------------------------------------------------------------------------- float bits

def _float_bits_one(a: Outputs, b: Outputs, sel: Selection, *, low_bits: bool) -> Candidate:
    dtype = a.data.dtype if a.data.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    event, forward, score = _best_set(float_bit_keys(a.data, low_bits=low_bits),
                                      float_bit_keys(b.data, low_bits=low_bits), sel)
    text = _set_text([describe_float_key(int(k), low_bits=low_bits, dtype=dtype)
                      for k in event[:5]], event.size)

    def indicator(outputs: Outputs) -> np.ndarray:
        return np.isin(float_bit_keys(outputs.data, low_bits=low_bits), event)

    return Candidate(Attack.FLOAT_BITS, f"bit pattern in {text}", forward, score, indicator)


def float_bits_candidate(a: Outputs, b: Outputs, sel: Selection) -> Candidate:
    """Best set of (sign, binade, low-bit pattern) outcomes of floating-point scalar outputs.

    Mironov, CCS 2012, Section 3 (see :func:`~dpkd_audit.audit.outputs.float_bit_keys`): two
    patterns are tried (trailing zero bits of the significand; its lowest bits), each with the
    histogram attack, and the better on the criterion is kept.
    """
    return max((_float_bits_one(a, b, sel, low_bits=low) for low in (False, True)),
               key=lambda c: c.criterion)


# --------------------------------------------------------------------------- classifier

#: Fraction of the selection samples used to train the classifier (the rest picks the threshold).
CLASSIFIER_TRAIN_FRACTION = 0.5
#: Most training rows per side (the rest of the training part is left out to bound the cost).
CLASSIFIER_MAX_TRAIN = 100_000


def classifier_candidate(a: Outputs, b: Outputs, sel: Selection) -> Candidate:
    """Logistic-regression score on features, then the threshold attack on a held-out slice.

    DP-Sniper (Bichsel, Steffen, Bogunovic, Vechev, IEEE S&P 2021, Sections 4-5): train a
    classifier to tell the two inputs apart from an output, then threshold its score. The model
    is fitted on part of the selection samples and the threshold chosen on the rest (held out
    from the fit), so the final event is still a function of the selection samples only.
    """
    from sklearn.exceptions import ConvergenceWarning  # heavy import, only when used
    from sklearn.linear_model import LogisticRegression

    levels = count_levels(a)
    feats_a = numeric_features(a, levels)
    feats_b = numeric_features(b, levels)
    n_a, n_b = len(feats_a), len(feats_b)
    perm_a, perm_b = sel.rng.permutation(n_a), sel.rng.permutation(n_b)
    cut_a = max(1, min(int(n_a * CLASSIFIER_TRAIN_FRACTION), n_a - 1))
    cut_b = max(1, min(int(n_b * CLASSIFIER_TRAIN_FRACTION), n_b - 1))
    train_a = feats_a[perm_a[:cut_a][:CLASSIFIER_MAX_TRAIN]]
    train_b = feats_b[perm_b[:cut_b][:CLASSIFIER_MAX_TRAIN]]
    train = np.concatenate([train_a, train_b])
    mean = train.mean(axis=0)
    scale = train.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    labels = np.concatenate([np.zeros(len(train_a)), np.ones(len(train_b))])
    model = LogisticRegression(C=1.0, max_iter=500)
    with warnings.catch_warnings():  # a non-converged fit is still a fixed, valid score
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit((train - mean) / scale, labels)
    coef = model.coef_.ravel().copy()
    intercept = float(model.intercept_[0])

    def score(outputs: Outputs) -> np.ndarray:
        feats = numeric_features(outputs, levels)
        return ((feats - mean) / scale) @ coef + intercept

    held_a = feats_a[perm_a[cut_a:]]
    held_b = feats_b[perm_b[cut_b:]]
    return threshold_candidate(((held_a - mean) / scale) @ coef + intercept,
                               ((held_b - mean) / scale) @ coef + intercept, sel,
                               attack=Attack.CLASSIFIER, label="classifier score",
                               transform=score)


# --------------------------------------------------------------------------- dispatch

#: Arrays/records use the histogram attack when the selection part has at most this fraction of
#: distinct outcomes (the outcomes repeat), else the classifier.
REPEAT_FRACTION = 0.5

_APPLICABLE = {
    Attack.THRESHOLD: {OutputKind.SCALAR_FLOAT, OutputKind.SCALAR_INT},
    Attack.HISTOGRAM: set(OutputKind),
    Attack.CLASSIFIER: {OutputKind.SCALAR_FLOAT, OutputKind.SCALAR_INT, OutputKind.ARRAY,
                        OutputKind.STRUCTURED},
    Attack.FLOAT_BITS: {OutputKind.SCALAR_FLOAT},
}


def _distinct_fraction(a: Outputs, b: Outputs, coder: KeyCoder) -> float:
    keys = np.concatenate([coder.keys(a), coder.keys(b)])
    return np.unique(keys).size / keys.size


def auto_attacks(a: Outputs, b: Outputs, coder: KeyCoder, *,
                 float_bits: bool = True) -> list[Attack]:
    """The attacks AUTO (``float_bits=False``: AUTO_REAL) runs for this kind of output.

    Decided on the selection samples only.
    """
    kind = a.kind
    if kind is OutputKind.SCALAR_INT:
        return [Attack.HISTOGRAM, Attack.THRESHOLD]
    if kind is OutputKind.SCALAR_FLOAT:
        attacks = [Attack.THRESHOLD, Attack.FLOAT_BITS] if float_bits else [Attack.THRESHOLD]
        if _distinct_fraction(a, b, coder) <= REPEAT_FRACTION:
            attacks.append(Attack.HISTOGRAM)
        return attacks
    if kind is OutputKind.OBJECT:
        return [Attack.HISTOGRAM]
    if _distinct_fraction(a, b, coder) <= REPEAT_FRACTION:
        return [Attack.HISTOGRAM]
    return [Attack.CLASSIFIER]


def select_event(a: Outputs, b: Outputs, attack: Attack, sel: Selection,
                 coder: KeyCoder) -> Candidate:
    """Choose the event on the selection samples ``a`` (under ``x``) and ``b`` (under ``x'``).

    With several attacks (AUTO), each proposes its best event and the best on the criterion is
    kept; every step looks at the selection samples only.

    Raises:
        ValueError: If ``attack`` does not apply to this kind of output.
    """
    if not isinstance(attack, Attack):
        raise ValueError(f"attack must be an Attack ({', '.join(x.name for x in Attack)}); "
                         f"got {attack!r}")
    if attack in (Attack.AUTO, Attack.AUTO_REAL):
        attacks = auto_attacks(a, b, coder, float_bits=attack is Attack.AUTO)
    else:
        attacks = [attack]
    for chosen in attacks:
        if a.kind not in _APPLICABLE[chosen]:
            usable = ([x.name for x in _APPLICABLE if a.kind in _APPLICABLE[x]]
                      + ["AUTO", "AUTO_REAL"])
            raise ValueError(f"attack {chosen.name} does not apply to {a.kind.value} outputs; "
                             f"use one of {', '.join(usable)}")
    candidates = []
    for chosen in attacks:
        if chosen is Attack.THRESHOLD:
            candidates.append(threshold_candidate(a.data, b.data, sel))
        elif chosen is Attack.HISTOGRAM:
            candidates.append(histogram_candidate(a, b, sel, coder))
        elif chosen is Attack.FLOAT_BITS:
            candidates.append(float_bits_candidate(a, b, sel))
        else:
            candidates.append(classifier_candidate(a, b, sel))
    return max(candidates, key=lambda c: c.criterion)
