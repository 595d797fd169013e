"""Estimators for audits of whole training pipelines: many runs, and one run with canaries.

Pure numpy (no torch): the pipelines produce the scores, these functions turn them into lower
bounds on epsilon with a stated confidence.

- :func:`many_run_bound`: R runs on each of two neighbouring datasets (a canary in one form or
  the other, or in and out); the event (a threshold on a scalar score, or any event of the
  mechanism auditor on vector outputs) is chosen on the first runs of each side and counted on
  the rest, then exact Clopper-Pearson bounds (Jagielski, Ullman, Oprea, NeurIPS 2020,
  Section 3). With R runs per side the bound tops out near ``ln(R / 3.7)`` (NOTES.md).
- :func:`one_run_bound`: Steinke, Nasr and Jagielski, "Privacy auditing with one (1) training
  run", NeurIPS 2023: m canaries, each included independently with probability 1/2
  (:func:`canary_inclusion`); after one run the auditor guesses "in" for the ``guesses_in``
  highest scores, "out" for the ``guesses_out`` lowest and abstains on the rest; the number of
  correct guesses is tested against the tail their Theorem 3.1 (pure DP) / Theorem 5.2
  (approximate DP) allows for an (epsilon, delta)-DP algorithm (:func:`one_run_p_value`); the
  same guesses are also analysed through the claim's Gaussian trade-off curve
  (:mod:`~dpkd_audit.audit.one_run_fdp`, Mahloujifar-Melis-Chaudhuri 2025), tighter when most
  guesses are right; and the scores themselves, without thresholding, through Gaussian fits of
  the inserted and left-out canaries' scores (:mod:`~dpkd_audit.audit.one_run_gaussian`,
  Agrawal et al. 2026): an estimate under the Gaussian model, not a distribution-free bound.

What a bound means: a lower bound above the claimed epsilon refutes the claim at the stated
confidence; a bound below the claim is *not* evidence of privacy (the attack may be weak).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
from typing import Any

import numpy as np
from scipy import optimize, special, stats

from dpkd_audit import _validate
from dpkd_audit.audit.attacks import Attack, Selection
from dpkd_audit.audit.auditor import (
    BACKWARD,
    FORWARD,
    MIN_PART,
    AuditResult,
    _plug_in,
    resolve_attack,
    verdict_of,
)
from dpkd_audit.audit.bounds import epsilon_lower_bound
from dpkd_audit.audit.event_selection import select_event
from dpkd_audit.audit.one_run_fdp import one_run_fdp_epsilon
from dpkd_audit.audit.one_run_gaussian import MIN_PER_SIDE, OneRunGaussian, one_run_gaussian
from dpkd_audit.audit.outputs import KeyCoder, OutputKind, Outputs, prepare_outputs

__all__ = [
    "HISTOGRAM_BINS",
    "MIN_CANARIES",
    "MIN_RUNS",
    "OneRunAnalysis",
    "OneRunBound",
    "canary_inclusion",
    "default_guesses",
    "many_run_bound",
    "one_run_analyses",
    "one_run_bound",
    "one_run_guesses",
    "one_run_p_value",
    "resolve_guesses",
    "score_histogram",
]

#: Fewest runs per side of a many-run audit (selection and bound parts of at least
#: ``MIN_PART`` each).
MIN_RUNS = 2 * MIN_PART
#: Fewest canaries of a one-run audit.
MIN_CANARIES = 2
#: Largest epsilon the one-run bound searches (a p-value still below the significance there is
#: reported as this value: the data refute every claim up to it).
ONE_RUN_MAX_EPSILON = 50.0


# --------------------------------------------------------------------------- canaries

def canary_inclusion(count: int, *, seed: int) -> np.ndarray:
    """Which of ``count`` canaries are inserted: each independently with probability 1/2.

    Deterministic from ``seed`` (its own Generator, nothing global is touched), and independent
    of everything else the run draws, as both estimators require.

    Args:
        count: Number of canaries (an integer >= :data:`MIN_CANARIES`).
        seed: Seed of the draw (an integer >= 0).

    Returns:
        Boolean ``(count,)`` array: ``True`` for an inserted canary.

    Raises:
        ValueError: If an argument is out of range.
    """
    count = _validate.check_int("count", count, minimum=MIN_CANARIES)
    seed = _validate.check_int("seed", seed, minimum=0)
    rng = np.random.default_rng([seed, 0xCA4A])
    return rng.random(count) < 0.5


# --------------------------------------------------------------------------- many runs

def _as_run_outputs(scores: Any, name: str) -> tuple[np.ndarray, Outputs]:
    try:
        arr = np.asarray(scores)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of per-run scores or outputs") from exc
    if arr.ndim == 0 or arr.shape[0] < MIN_RUNS:
        raise ValueError(f"{name} must hold at least {MIN_RUNS} runs (axis 0); got shape "
                         f"{arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric; got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (a NaN or inf score is a bug of the scorer)")
    return arr, prepare_outputs(arr, arr.shape[0], name=name)


def many_run_bound(scores_x: Any, scores_x_prime: Any, *, epsilon: float, delta: float = 0.0,
                   confidence: float = 0.95, selection_fraction: float = 0.5,
                   rng: np.random.Generator, attack: Attack | None = None,
                   name: str | None = None) -> AuditResult:
    """Lower bound on epsilon from the outputs of independent runs on two neighbouring inputs.

    ``scores_x[i]`` is what run ``i`` on dataset ``x`` released (or a score of it: the canary's
    loss, a logit, a released count); ``scores_x_prime`` the same on the neighbour ``x'``. The
    first ``selection_fraction`` of each side's runs choose the event and its direction (a
    threshold on scalar scores; the mechanism auditor's attacks on vector outputs); the other
    runs are counted and bounded with exact Clopper-Pearson bounds, each one-sided at
    ``1 - (1 - confidence) / 2``.

    Assumptions (the bound is valid at ``confidence`` under them): the runs are independent and
    each side's runs identically distributed (fresh randomness per run, nothing shared that
    depends on the other runs' outputs); the order of the runs does not depend on their
    outputs; the pair differs in the way the claim's neighbouring relation allows.

    Args:
        scores_x: ``(R,)`` scalar scores or ``(R, ...)`` outputs of the runs on ``x``.
        scores_x_prime: The same for ``x'`` (same kind and shape per run; R may differ).
        epsilon: The claimed epsilon (> 0), for the verdict.
        delta: The claimed delta, in [0, 1).
        confidence: Confidence of the bound, in (0, 1).
        selection_fraction: Share of each side's runs that choose the event, in (0, 1); each
            part keeps at least ``MIN_PART`` runs.
        rng: Randomness of the attack's internal splits.
        attack: How to choose the event (default: THRESHOLD for scalar scores, AUTO, float
            bits included, otherwise).
        name: What was audited (recorded in the result).

    Returns:
        An :class:`~dpkd_audit.audit.AuditResult` (``samples_per_side`` = runs on ``x``).

    Raises:
        ValueError: If an argument is out of range (the message names it).
    """
    epsilon = _validate.check_epsilon(epsilon)
    delta = _validate.check_delta(delta)
    confidence = _validate.check_probability("confidence", confidence, open_low=True,
                                             open_high=True)
    selection_fraction = _validate.check_probability(
        "selection_fraction", selection_fraction, open_low=True, open_high=True)
    rng = _validate.check_generator(rng)
    arr_x, out_x = _as_run_outputs(scores_x, "scores_x")
    arr_xp, out_xp = _as_run_outputs(scores_x_prime, "scores_x_prime")
    if out_x.signature() != out_xp.signature():
        raise ValueError(f"scores_x and scores_x_prime must be of one kind and shape per run; "
                         f"got {arr_x.dtype} {arr_x.shape[1:]} and {arr_xp.dtype} "
                         f"{arr_xp.shape[1:]}")
    if attack is None:
        scalar = out_x.kind in (OutputKind.SCALAR_FLOAT, OutputKind.SCALAR_INT)
        attack, policy = ((Attack.THRESHOLD, "threshold on the scalar run scores") if scalar
                          else resolve_attack(None))
    else:
        attack, policy = resolve_attack(attack)

    def split(arr: np.ndarray) -> tuple[int, int]:
        m = min(max(round(arr.shape[0] * selection_fraction), MIN_PART), arr.shape[0] - MIN_PART)
        return m, arr.shape[0] - m

    m_x, n_x = split(arr_x)
    m_xp, n_xp = split(arr_xp)
    sel_x = prepare_outputs(arr_x[:m_x], m_x, name="scores_x")
    sel_xp = prepare_outputs(arr_xp[:m_xp], m_xp, name="scores_x_prime")
    alpha = (1.0 - confidence) / 2.0
    candidate = select_event(sel_x, sel_xp, attack, Selection(delta, alpha, rng), KeyCoder())
    hits_x = int(np.count_nonzero(candidate.indicator(
        prepare_outputs(arr_x[m_x:], n_x, name="scores_x"))))
    hits_xp = int(np.count_nonzero(candidate.indicator(
        prepare_outputs(arr_xp[m_xp:], n_xp, name="scores_x_prime"))))
    if candidate.forward:
        k_1, n_1, k_0, n_0 = hits_x, n_x, hits_xp, n_xp
    else:
        k_1, n_1, k_0, n_0 = hits_xp, n_xp, hits_x, n_x
    lower = epsilon_lower_bound(k_1, n_1, k_0, n_0, delta=delta, confidence=confidence)
    estimate = (_plug_in(k_1, k_0, n_1, delta) if n_1 == n_0
                else _plug_in(round(k_1 * n_0 / n_1), k_0, n_0, delta))
    return AuditResult(
        epsilon_lower=lower, epsilon_claimed=epsilon, delta=delta, confidence=confidence,
        violation=lower > epsilon, verdict=verdict_of(lower, epsilon), attack=candidate.attack,
        policy=policy, event=candidate.description,
        direction=FORWARD if candidate.forward else BACKWARD,
        samples_per_side=int(arr_x.shape[0]), selection_samples=m_x, bound_samples=n_x,
        counts=(hits_x, hits_xp), epsilon_estimate=estimate, seconds=0.0, mechanism=name)


# --------------------------------------------------------------------------- one run

def one_run_p_value(canaries: int, guesses: int, correct: int, epsilon: float,
                    delta: float = 0.0) -> float:
    """Largest probability of ``>= correct`` right guesses that (epsilon, delta)-DP allows.

    Steinke, Nasr, Jagielski, NeurIPS 2023: for an (epsilon, delta)-DP algorithm, m canaries
    included independently with probability 1/2 and ``r`` guesses made from its output,

        P[W >= v] <= P[B >= v] + 2 m delta * max_{i = 1..v} P[v > B >= v - i] / i,

    where ``B ~ Binomial(r, e^eps / (1 + e^eps))`` (Theorem 3.1 for delta = 0; Theorem 5.2 and
    their Algorithm 2 for delta > 0). Capped at 1.

    Args:
        canaries: m, the number of canaries (an integer >= 1).
        guesses: r, guesses made (abstentions excluded), in [0, m].
        correct: v, correct guesses, in [0, r].
        epsilon: The epsilon of the null hypothesis (>= 0).
        delta: Its delta, in [0, 1].

    Returns:
        The p-value.

    Raises:
        ValueError: If an argument is out of range.
    """
    m = _validate.check_int("canaries", canaries, minimum=1)
    r = _validate.check_int("guesses", guesses, minimum=0, maximum=m)
    v = _validate.check_int("correct", correct, minimum=0, maximum=r)
    epsilon = _validate.check_nonnegative("epsilon", epsilon)
    delta = _validate.check_probability("delta", delta)
    if v == 0:
        return 1.0
    q = float(special.expit(epsilon))
    beta = float(stats.binom.sf(v - 1, r, q))
    if delta == 0.0:
        return min(1.0, beta)
    i = np.arange(1, v + 1)
    window = stats.binom.sf(v - i - 1, r, q) - beta  # P[v > B >= v - i]
    alpha = float(np.max(np.maximum(window, 0.0) / i))
    return min(1.0, beta + 2.0 * m * delta * alpha)


def one_run_guesses(scores: Any, *, guesses_in: int, guesses_out: int) -> np.ndarray:
    """Guesses of the one-run audit: +1 (in), -1 (out) or 0 (abstain) per canary.

    +1 for the ``guesses_in`` highest scores, -1 for the ``guesses_out`` lowest, 0 for the
    rest; ties broken by canary index.

    Raises:
        ValueError: If the scores are not a finite 1-D array or the guess counts do not fit.
    """
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 1 or arr.size < MIN_CANARIES or not np.all(np.isfinite(arr)):
        raise ValueError(f"scores must be a finite 1-D array of at least {MIN_CANARIES} canary "
                         f"scores; got shape {arr.shape}")
    guesses_in = _validate.check_int("guesses_in", guesses_in, minimum=0)
    guesses_out = _validate.check_int("guesses_out", guesses_out, minimum=0)
    if guesses_in + guesses_out > arr.size or guesses_in + guesses_out == 0:
        raise ValueError(f"guesses_in + guesses_out must be in [1, {arr.size}] (the canaries); "
                         f"got {guesses_in} + {guesses_out}")
    order = np.argsort(-arr, kind="stable")
    guesses = np.zeros(arr.size, dtype=np.int8)
    guesses[order[:guesses_in]] = 1
    if guesses_out:
        guesses[order[arr.size - guesses_out:]] = -1
    return guesses


def default_guesses(canaries: int) -> int:
    """Guesses on each side fixed before the run: 5% of the canaries (at least 1).

    Measured on digits (DP-DFD sound, eps 10, 1,000 canaries): 5% per side gave 1.32, 10%
    1.27 and 25% 1.01 (one seed); fewer, surer guesses win when the canaries' signal is weak.
    """
    return max(1, canaries // 20)


def resolve_guesses(canaries: int, guesses: int | None = None, guesses_out: int | None = None,
                    *, names: tuple[str, str] = ("guesses", "guesses_out")) -> tuple[int, int]:
    """The ("in", "out") guess counts of a one-run audit of ``canaries`` canaries, checked.

    ``guesses`` alone (or neither) is the count on each side, as before ``guesses_out``
    existed: in [1, canaries // 2] (default :func:`default_guesses`). With ``guesses_out``,
    ``guesses`` is the "in" count (default :func:`default_guesses`) and ``guesses_out`` the
    "out" count; each may be 0 but not both, and together they are at most the canaries (one
    guess per canary at most, as :func:`one_run_guesses` requires).

    Args:
        canaries: The number of canaries m (an integer >= 1).
        guesses: Per side, or the "in" count when ``guesses_out`` is given.
        guesses_out: The "out" count (``None``: equal to the "in" count).
        names: How the two counts are named in the errors (the command line passes its
            flags).

    Returns:
        ``(guesses_in, guesses_out)``.

    Raises:
        ValueError: Naming the count at fault and its allowed range.
    """
    m = _validate.check_int("canaries", canaries, minimum=1)
    in_name, out_name = names

    def count(name: str, value: Any, low: int, high: int, why: str) -> int:
        if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                or not low <= int(value) <= high):
            raise ValueError(f"{name} must be an integer in [{low}, {high}] ({why}); got "
                             f"{value!r}")
        return int(value)

    if guesses_out is None:
        if guesses is None:
            return default_guesses(m), default_guesses(m)
        g = count(in_name, guesses, 1, m // 2,
                  f"guesses on each side: at most half of the {m} canaries")
        return g, g
    g_in = (default_guesses(m) if guesses is None else
            count(in_name, guesses, 0, m, f"the 'in' guesses when {out_name} is given"))
    g_out = count(out_name, guesses_out, 0, m - g_in,
                  f"the 'out' guesses: {in_name} + {out_name} at most the {m} canaries, "
                  f"{in_name} being {g_in}")
    if g_in + g_out == 0:
        raise ValueError(f"{in_name} and {out_name} must not both be 0 (at least one guess: "
                         f"with {in_name} 0, {out_name} must be in [1, {m}])")
    return g_in, g_out


@dataclasses.dataclass(frozen=True, kw_only=True)
class OneRunBound:
    """What a one-run audit found.

    Attributes:
        epsilon_lower: Largest epsilon whose (epsilon, delta) claim the guesses refute at
            ``confidence`` (0 when none is refuted).
        epsilon_claimed: The claim audited.
        delta: The delta of the claim (in the bound).
        confidence: Confidence of the bound.
        canaries: m.
        included: How many canaries were inserted.
        guesses: r (guesses made): ``guesses_in + guesses_out``.
        correct: v (correct guesses).
        guesses_in: Guesses "in" made on the highest scores (``None`` only in a bound built by
            hand).
        guesses_out: Guesses "out" made on the lowest scores (0: "in" guesses only).
        p_value_at_claim: :func:`one_run_p_value` at the claimed (epsilon, delta): below
            ``1 - confidence`` means the claim is refuted.
        verdict: ``"violation"``, ``"consistent"`` or ``"inconclusive"`` (the rule of
            :class:`~dpkd_audit.audit.Verdict`).
        epsilon_lower_fdp: The same guesses analysed through the Gaussian trade-off curve of
            the claim (Mahloujifar-Melis-Chaudhuri 2025,
            :func:`~dpkd_audit.audit.one_run_fdp.one_run_fdp_epsilon`): it refutes "at least as
            private as the Gaussian mechanism meeting (epsilon, delta)", a stronger hypothesis
            than (epsilon, delta)-DP. ``None`` when delta = 0.
        gaussian: The scores (not the guesses) analysed by Gaussian fits of the inserted and
            the left-out canaries (Agrawal et al. 2026,
            :func:`~dpkd_audit.audit.one_run_gaussian.one_run_gaussian`): an *estimate* of
            epsilon at delta at ``confidence`` under the assumption that each side's scores
            are Gaussian, not a distribution-free bound. ``None`` when delta = 0 or a side
            has fewer than two canaries.
    """

    epsilon_lower: float
    epsilon_claimed: float
    delta: float
    confidence: float
    canaries: int
    included: int
    guesses: int
    correct: int
    guesses_in: int | None = None
    guesses_out: int | None = None
    p_value_at_claim: float
    verdict: str
    epsilon_lower_fdp: float | None = None
    gaussian: OneRunGaussian | None = None

    @property
    def epsilon_lower_gaussian(self) -> float | None:
        """The Gaussian estimate's epsilon at ``confidence`` (``None`` when not computed)."""
        return None if self.gaussian is None else self.gaussian.epsilon_lower

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly record."""
        out = dataclasses.asdict(self)
        out["gaussian"] = None if self.gaussian is None else self.gaussian.to_dict()
        return out


def _one_run_epsilon(m: int, r: int, v: int, delta: float, significance: float) -> float:
    def excess(eps: float) -> float:  # > 0 while the claim eps is refuted
        return significance - one_run_p_value(m, r, v, eps, delta)

    if excess(0.0) <= 0:
        return 0.0
    if excess(ONE_RUN_MAX_EPSILON) > 0:
        return ONE_RUN_MAX_EPSILON
    return float(optimize.brentq(excess, 0.0, ONE_RUN_MAX_EPSILON, xtol=1e-9, rtol=1e-12))


def one_run_bound(scores: Any, included: Any, *, epsilon: float, delta: float = 0.0,
                  guesses_in: int, guesses_out: int,
                  confidence: float = 0.95) -> OneRunBound:
    """Lower bound on epsilon from one run with canaries (Steinke-Nasr-Jagielski 2023).

    Assumptions (the bound is valid at ``confidence`` under them): each canary was inserted
    independently with probability 1/2 (:func:`canary_inclusion`), independently of the rest of
    the run; the scores are computed from the run's *released* output (and public knowledge)
    without looking at which canaries were inserted; ``guesses_in`` and ``guesses_out`` were
    fixed before the scores were seen (trying several and keeping the best needs a correction
    for the number tried); the algorithm's guarantee is (epsilon, delta)-DP under add/remove of
    one canary.

    Args:
        scores: ``(m,)`` canary scores, higher meaning "more likely inserted".
        included: ``(m,)`` booleans, which canaries were inserted (used only to count the
            correct guesses).
        epsilon: The claimed epsilon (> 0), for the verdict and the p-value.
        delta: The claimed delta, in [0, 1).
        guesses_in: How many of the highest scores are guessed "in".
        guesses_out: How many of the lowest scores are guessed "out".
        confidence: Confidence of the bound, in (0, 1).

    Returns:
        The :class:`OneRunBound`.

    Raises:
        ValueError: If an argument is out of range (the message names it).
    """
    epsilon = _validate.check_epsilon(epsilon)
    delta = _validate.check_delta(delta)
    confidence = _validate.check_probability("confidence", confidence, open_low=True,
                                             open_high=True)
    guesses = one_run_guesses(scores, guesses_in=guesses_in, guesses_out=guesses_out)
    inc = np.asarray(included)
    if inc.shape != guesses.shape or inc.dtype != np.bool_:
        raise ValueError(f"included must be a boolean array of the scores' shape "
                         f"{guesses.shape}; got dtype {inc.dtype}, shape {inc.shape}")
    m = int(guesses.size)
    r = int(np.count_nonzero(guesses))
    truth = np.where(inc, 1, -1)
    v = int(np.count_nonzero(guesses == truth))
    significance = 1.0 - confidence
    lower = _one_run_epsilon(m, r, v, delta, significance)
    p_claim = one_run_p_value(m, r, v, epsilon, delta)
    verdict = verdict_of(lower, epsilon).value
    if math.isclose(lower, 0.0):
        lower = 0.0
    fdp = None if delta == 0.0 else one_run_fdp_epsilon(m, r, v, delta=delta,
                                                         confidence=confidence)
    n_in = int(np.count_nonzero(inc))
    gaussian = (one_run_gaussian(scores, inc, delta=delta, confidence=confidence)
                if delta > 0.0 and min(n_in, m - n_in) >= MIN_PER_SIDE else None)
    return OneRunBound(epsilon_lower=lower, epsilon_claimed=epsilon, delta=delta,
                       confidence=confidence, canaries=m, included=n_in,
                       guesses=r, correct=v, guesses_in=int(np.count_nonzero(guesses > 0)),
                       guesses_out=int(np.count_nonzero(guesses < 0)),
                       p_value_at_claim=p_claim, verdict=verdict,
                       epsilon_lower_fdp=fdp, gaussian=gaussian)


# --------------------------------------------------------------------------- analyses

class OneRunAnalysis(enum.Enum):
    """Which analyses of a one-run audit to report (``dpkd audit-run ... --analysis``)."""

    #: Steinke-Nasr-Jagielski 2023: the guesses against (epsilon, delta)-DP itself, no further
    #: assumption (the distribution-free bound).
    STEINKE = "steinke"
    #: Mahloujifar-Melis-Chaudhuri 2025: the same guesses against the Gaussian trade-off curve
    #: that meets the claim (a stronger hypothesis than (epsilon, delta)-DP).
    FDP = "fdp"
    #: Agrawal et al. 2026: the scores, fitted as two Gaussians (an estimate under that model).
    GAUSSIAN = "gaussian"
    #: All three, side by side.
    ALL = "all"

    @classmethod
    def parse(cls, text: str) -> OneRunAnalysis:
        """The member named ``text``.

        Raises:
            ValueError: Naming ``analysis`` and the allowed values.
        """
        return _validate.parse_enum(cls, text, "analysis")

    def selected(self) -> tuple[OneRunAnalysis, ...]:
        """The single analyses this choice reports, in the order they are shown."""
        if self is OneRunAnalysis.ALL:
            return (OneRunAnalysis.STEINKE, OneRunAnalysis.FDP, OneRunAnalysis.GAUSSIAN)
        return (self,)

    def deciding(self) -> OneRunAnalysis:
        """The analysis whose verdict sets ``dpkd audit-run``'s exit status.

        The one selected; with ALL, Steinke's: the only one that refutes (epsilon, delta)-DP
        without a further assumption (f-DP tests a stronger hypothesis than the claim, the
        Gaussian figure is an estimate under a model of the scores).
        """
        return OneRunAnalysis.STEINKE if self is OneRunAnalysis.ALL else self


#: What each analysis tests, for records and the command line.
_ANALYSIS_NOTES = {
    OneRunAnalysis.STEINKE: ("lower bound: (epsilon, delta)-DP refuted at the confidence, no "
                             "further assumption (Steinke-Nasr-Jagielski 2023)"),
    OneRunAnalysis.FDP: ("lower bound: 'at least as private as the Gaussian mechanism meeting "
                         "(epsilon, delta)' refuted at the confidence (Mahloujifar-Melis-"
                         "Chaudhuri 2025); a stronger hypothesis than (epsilon, delta)-DP"),
    OneRunAnalysis.GAUSSIAN: ("estimate: epsilon at delta of Gaussian fits of the inserted and "
                              "left-out canaries' scores, at the confidence of the fits' "
                              "union-bounded parameter bounds (Agrawal et al. 2026); valid "
                              "only if the scores are Gaussian, not a distribution-free bound"),
}


def one_run_analyses(bound: OneRunBound,
                     analysis: OneRunAnalysis = OneRunAnalysis.ALL) -> dict[str, Any]:
    """The figures of the selected analyses of one one-run audit, side by side.

    Args:
        bound: The audit (:func:`one_run_bound`).
        analysis: Which analyses (a :class:`OneRunAnalysis`).

    Returns:
        ``{"analysis": ..., "deciding": ..., "analyses": {name: {"epsilon_lower",
        "verdict", "note", ...}}}``: per analysis its figure (``None`` where it does not apply:
        f-DP and the Gaussian fit need delta > 0, the fit two canaries on each side) and its
        verdict against the claim (:func:`~dpkd_audit.audit.auditor.verdict_of`; ``None`` with
        the figure); the Gaussian entry adds the plug-in value.

    Raises:
        ValueError: If ``analysis`` is not a :class:`OneRunAnalysis`.
    """
    if not isinstance(analysis, OneRunAnalysis):
        raise ValueError(f"analysis must be a OneRunAnalysis; got {analysis!r}")
    figures = {OneRunAnalysis.STEINKE: bound.epsilon_lower,
               OneRunAnalysis.FDP: bound.epsilon_lower_fdp,
               OneRunAnalysis.GAUSSIAN: bound.epsilon_lower_gaussian}
    out: dict[str, Any] = {}
    for one in analysis.selected():
        value = figures[one]
        entry: dict[str, Any] = {
            "epsilon_lower": value,
            "verdict": None if value is None else verdict_of(value, bound.epsilon_claimed).value,
            "note": _ANALYSIS_NOTES[one]}
        if one is OneRunAnalysis.GAUSSIAN and bound.gaussian is not None:
            entry["epsilon_estimate"] = bound.gaussian.epsilon_estimate  # the fit: bound.gaussian
        out[one.value] = entry
    return {"analysis": analysis.value, "deciding": analysis.deciding().value,
            "analyses": out}


# --------------------------------------------------------------------------- records

#: Bins of the score histograms kept in a record.
HISTOGRAM_BINS = 60


def score_histogram(scores_x: Any, scores_x_prime: Any,
                    bins: int = HISTOGRAM_BINS) -> dict[str, list[float]]:
    """Counts of the two sides' scores on shared bin edges (what the record keeps for plots)."""
    a = np.asarray(scores_x, dtype=np.float64)
    b = np.asarray(scores_x_prime, dtype=np.float64)
    pooled = np.concatenate([a, b])
    if pooled.size == 0 or not np.all(np.isfinite(pooled)):
        raise ValueError("scores must be non-empty and finite")
    lo, hi = float(np.min(pooled)), float(np.max(pooled))
    if np.all(pooled == np.round(pooled)) and hi - lo < 4 * bins:  # integer scores: one bin each
        edges = np.arange(lo - 0.5, hi + 1.0, 1.0)
    else:
        edges = np.linspace(lo, max(hi, lo + 1.0), bins + 1)
    return {"edges": edges.tolist(),
            "x": np.histogram(a, edges)[0].astype(int).tolist(),
            "x_prime": np.histogram(b, edges)[0].astype(int).tolist()}
