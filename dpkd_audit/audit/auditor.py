"""Black-box auditing: a statistically valid lower bound on the epsilon of a sampler.

Procedure (Ding et al., CCS 2018, Section 4; Bichsel et al., DP-Sniper, IEEE S&P 2021,
Section 5; the bound of Jagielski-Ullman-Oprea, NeurIPS 2020):

1. *Selection.* Draw ``m`` outputs on each input and let an :class:`~dpkd_audit.audit.attacks.
   Attack` choose an event ``S`` and a direction (``x`` vs ``x'`` or ``x'`` vs ``x``) maximising a
   criterion computed on these outputs only.
2. *Bound.* Draw ``N = n - m`` *fresh* outputs on each input, count the hits ``k_1`` and ``k_0``
   of ``S`` on the two sides (numerator side first) and report
   ``max(0, ln((LCB_1 - delta) / UCB_0))`` with exact Clopper-Pearson bounds, each one-sided at
   level ``1 - (1 - confidence) / 2`` (union bound).
3. *Confirmation* (only when the bound exceeds the claim). Count ``S`` again on ``N`` fresh
   outputs per input and bound it at ``CONFIRMATION_CONFIDENCE``; a violation is reported only
   if this bound exceeds the claim too. A user auditing 30 correct mechanisms at 95% would
   otherwise see one or two false "violations"; confirmed, each audit errs with probability at
   most 0.5% (the confirmation alone is a valid bound of a fixed event), and a suite splits its
   5% over its audits (Bonferroni).

Validity: the event and the direction are functions of the selection outputs, which are
independent of the bounding outputs; conditionally on them the two counts are independent
binomials of a *fixed* event, so the bound holds with probability at least ``confidence`` over
the bounding outputs, hence also unconditionally. Nothing chosen in step 1 needs a correction
for the number of events tried, and both directions are covered without splitting the
confidence (the direction is part of the chosen event). If the mechanism is (epsilon,
delta)-DP, ``epsilon_lower > epsilon`` therefore happens with probability at most
``1 - confidence``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from dpkd_audit import _validate
from dpkd_audit.audit.attacks import Attack, Candidate, Selection
from dpkd_audit.audit.bounds import epsilon_lower_bound
from dpkd_audit.audit.event_selection import select_event
from dpkd_audit.audit.outputs import (
    KeyCoder,
    OutputKind,
    Outputs,
    as_object,
    conform,
    prepare_outputs,
)
from dpkd_audit.executor import ExecutorConfig

if TYPE_CHECKING:
    from dpkd_audit.mechanisms.base import AuditView

__all__ = ["CONFIRMATION_CONFIDENCE", "DEFAULT_SAMPLES", "MIN_SAMPLES", "POWER_FRACTION",
           "AuditResult", "Confirmation", "Verdict",
           "audit_mechanism", "audit_sampler", "mechanism_sampler", "resolve_attack",
           "verdict_of"]

#: Default number of outputs per input (selection and bounding parts together).
DEFAULT_SAMPLES = 100_000
#: Fewest outputs per input accepted (each part needs at least ``MIN_PART``).
MIN_SAMPLES = 40
#: Fewest outputs in each of the selection and bounding parts.
MIN_PART = 20
#: Memory (bytes) of one batch of bounding outputs; larger ``N`` is sampled in chunks.
CHUNK_BYTES = 1 << 27
#: Confidence of the confirmation audit that a violation must pass (fresh samples, the same
#: event): a mechanism that meets its claim is reported violated with probability at most
#: ``1 - CONFIRMATION_CONFIDENCE`` = 0.5% per audit (the confirmation alone is a valid bound on
#: a fixed event), against ``1 - confidence`` = 5% for the first bound alone.
CONFIRMATION_CONFIDENCE = 0.995

Sampler = Callable[[Any, int, np.random.Generator], Any]

FORWARD = "x vs x'"
BACKWARD = "x' vs x"


#: An audit whose bound reaches this fraction of the claimed epsilon had the power to see the
#: claimed privacy loss; below, "no violation" would say nothing and the verdict is
#: inconclusive.
POWER_FRACTION = 0.5


class Verdict(enum.Enum):
    """What an audit says about the claim."""

    #: ``epsilon_lower > epsilon_claimed``: the claim is refuted at the audit's confidence.
    VIOLATION = "violation"
    #: No violation, and the bound reached ``POWER_FRACTION`` of the claim: the attack sees the
    #: claimed loss, so a mechanism far above its claim would have been caught.
    CONSISTENT = "consistent"
    #: No violation, but the bound is below ``POWER_FRACTION`` of the claim (0 included): the
    #: audit lacked power (too few samples, a weak event, or a pair that is not the worst
    #: case); it says nothing either way.
    INCONCLUSIVE = "inconclusive"
    #: The first bound exceeded the claim but the confirmation on fresh samples did not: no
    #: violation is reported. A correct mechanism claimed at its true epsilon lands here at a
    #: rate up to ``1 - confidence``; a real violation is confirmed (see
    #: :data:`CONFIRMATION_CONFIDENCE`).
    UNCONFIRMED = "unconfirmed"


def verdict_of(lower: float, claimed: float, confirmed: float | None = None) -> Verdict:
    """The verdict of a lower bound against a claim (the rule of :class:`Verdict`).

    ``confirmed``: the confirmation bound on fresh samples (``None``: none was run); a bound
    above the claim is a violation only when the confirmation is above it too.
    """
    if lower > claimed:
        if confirmed is not None and confirmed <= claimed:
            return Verdict.UNCONFIRMED
        return Verdict.VIOLATION
    if lower >= POWER_FRACTION * claimed and lower > 0.0:
        return Verdict.CONSISTENT
    return Verdict.INCONCLUSIVE


def resolve_attack(attack: Attack | None, mechanism: Any = None) -> tuple[Attack, str]:
    """The attack policy of an audit, and why: one rule for the API and the command line.

    - An attack given by the caller is used as is.
    - Otherwise every output is audited with AUTO: every applicable attack competes, float
      bits included (cheap, and the only one that sees Mironov's (2012) artefacts of a
      textbook floating-point sampler such as ``x + rng.laplace(0, b)``). A plain sampler
      gives no hint of how it computes its floats, so nothing is looked away from.
    - The one exception is a mechanism that declares ``floating_point_output = True``: a
      positive control of :mod:`~dpkd_audit.audit.controls` whose flaw is not the
      floating-point one (it is audited as the real-valued design it gets wrong). It is
      audited with AUTO_REAL, float bits excluded, and the policy says so; pass
      ``Attack.AUTO`` to audit its bits. No mechanism of the package declares it: the
      float-safe ``Laplace`` and ``Gaussian`` are audited with every attack, and the textbook
      samplers (``TextbookLaplace``, ``TextbookGaussian``) are flagged by it.

    Raises:
        ValueError: If ``attack`` is neither ``None`` nor an :class:`Attack`.
    """
    if attack is not None:
        if not isinstance(attack, Attack):
            raise ValueError(f"attack must be an Attack ({', '.join(a.name for a in Attack)}) "
                             f"or None; got {attack!r}")
        return attack, f"{attack.value}: chosen by the caller"
    if mechanism is not None and getattr(type(mechanism), "floating_point_output", False):
        return Attack.AUTO_REAL, ("auto_real: every applicable attack on the real-valued "
                                  "outputs of a control that samples in floating point and "
                                  "whose flaw is elsewhere; its floating-point artefacts "
                                  "(Mironov 2012) are not audited - include them with "
                                  "--attack auto or --attack float-bits (the API: "
                                  "attack=Attack.AUTO)")
    return Attack.AUTO, "auto: every applicable attack, float bits included"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Confirmation:
    """The second stage of an audit whose first bound exceeded the claim.

    The event chosen on the selection samples is counted again on ``samples`` fresh outputs
    per input, and bounded at ``confidence``; a violation is reported only when this bound too
    exceeds the claim. Valid on its own (the event is fixed before these samples are drawn).

    Attributes:
        epsilon_lower: The confirmation's lower bound.
        confidence: Its confidence.
        counts: Hits under ``x`` and under ``x'``.
        samples: Fresh outputs per input.
        confirmed: ``epsilon_lower > epsilon_claimed``.
    """

    epsilon_lower: float
    confidence: float
    counts: tuple[int, int]
    samples: int
    confirmed: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly record."""
        return {"epsilon_lower": self.epsilon_lower, "confidence": self.confidence,
                "counts": list(self.counts), "samples": self.samples,
                "confirmed": self.confirmed}


@dataclasses.dataclass(frozen=True, kw_only=True)
class AuditResult:
    """What one audit found.

    Attributes:
        epsilon_lower: Lower bound on the true epsilon, valid with probability >= ``confidence``
            (0 when the counts show nothing).
        epsilon_claimed: The epsilon the mechanism claims.
        delta: The delta of the claim (used in the bound).
        confidence: Confidence of the bound.
        violation: ``verdict is Verdict.VIOLATION``: the claim is refuted (by the bound and,
            when one ran, by its confirmation on fresh samples).
        verdict: VIOLATION, UNCONFIRMED (the bound exceeded the claim, its confirmation did
            not), CONSISTENT (the bound reached ``POWER_FRACTION`` of the claim) or
            INCONCLUSIVE (a bound of 0, or below that fraction: the audit lacked power).
        attack: The attack that chose the event.
        policy: The attack policy that ran (AUTO, AUTO_REAL or a forced attack) and why.
        event: Human-readable event, e.g. ``"output > 0.73"``.
        direction: ``"x vs x'"`` (bound on ``ln((P_x(S) - delta) / P_x'(S))``) or ``"x' vs x"``.
        samples_per_side: Outputs drawn on each input (``selection + bound``; a confirmation
            draws ``bound_samples`` more).
        selection_samples: Outputs per input used to choose the event.
        bound_samples: Fresh outputs per input counted by the bound.
        counts: Hits of the event among the bounding outputs under ``x`` and under ``x'``.
        epsilon_estimate: Plug-in estimate ``ln((k_1/N - delta) / (k_0/N))`` of the chosen
            event's privacy loss (not a bound; ``inf`` when ``k_0 = 0``, 0 when nothing shows).
        seconds: Wall-clock time of the audit (sampling included).
        mechanism: Name of the audited mechanism, if known.
        epsilon_attainable: For a mechanism audited with ``attainable=True``: the best bound
            an audit of its claimed DP event could attain with ``bound_samples`` per side
            (:func:`~dpkd_audit.audit.attainable.attainable_epsilon`); ``None`` otherwise or
            when its event has no PLD. Compare ``epsilon_lower`` with it to see the audit's
            power: for (epsilon, delta) claims it is well below epsilon.
        claim_attainable: The most *any* audit with ``bound_samples`` per side can show of a
            mechanism that meets the claim (its dominating pair,
            :func:`~dpkd_audit.audit.attainable.claim_attainable_epsilon`): a bound below
            ``POWER_FRACTION`` of the claim is all this sample size allows when this is low.
        inputs: Short texts of the two inputs audited, with their types (``"0 (int)"``).
        confirmation: The confirmation stage, run when the bound exceeded the claim (``None``
            when it did not, or confirmation was turned off).
        design: When float bits chose the event under the AUTO policy: the audit of the
            real-valued design (every other attack, the same bounding samples), with its own
            verdict, so that a flaw of the design is not hidden by the floating-point leak.
    """

    epsilon_lower: float
    epsilon_claimed: float
    delta: float
    confidence: float
    violation: bool
    verdict: Verdict
    attack: Attack
    policy: str
    event: str
    direction: str
    samples_per_side: int
    selection_samples: int
    bound_samples: int
    counts: tuple[int, int]
    epsilon_estimate: float
    seconds: float
    mechanism: str | None = None
    epsilon_attainable: float | None = None
    claim_attainable: float | None = None
    inputs: tuple[str, str] | None = None
    confirmation: Confirmation | None = None
    design: AuditResult | None = None

    @property
    def unseen_on_other_side(self) -> bool:
        """Whether the event was hit on the numerator side but never on the other.

        Then the bound is limited by the sample size alone: if the event is impossible under
        the other input, no finite epsilon holds (pure DP fails outright).
        """
        k_1, k_0 = self.counts if self.direction == FORWARD else self.counts[::-1]
        return k_1 > 0 and k_0 == 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly record (enums by their values, nested stages as dicts)."""
        record = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        record["attack"] = self.attack.value
        record["verdict"] = self.verdict.value
        record["counts"] = list(self.counts)
        record["inputs"] = None if self.inputs is None else list(self.inputs)
        record["confirmation"] = (None if self.confirmation is None
                                  else self.confirmation.to_dict())
        record["design"] = None if self.design is None else self.design.to_dict()
        record["unseen_on_other_side"] = self.unseen_on_other_side
        return record

    def __str__(self) -> str:
        verdict = {Verdict.VIOLATION: "violation", Verdict.CONSISTENT: "consistent",
                   Verdict.INCONCLUSIVE: "inconclusive (no power)",
                   Verdict.UNCONFIRMED: "not a violation (unconfirmed on fresh samples)"
                   }[self.verdict]
        if self.confirmation is not None:
            verdict += (f"; confirmation epsilon >= {self.confirmation.epsilon_lower:.4f} at "
                        f"{self.confirmation.confidence:.1%}")
        claim = (f"{self.epsilon_claimed:g}" if self.delta == 0
                 else f"({self.epsilon_claimed:g}, {self.delta:g})")
        attainable = ("" if self.epsilon_attainable is None
                      else f" (attainable {self.epsilon_attainable:.4f})")
        inputs = "" if self.inputs is None else f" on x={self.inputs[0]}, x'={self.inputs[1]}"
        lines = [f"{self.mechanism or 'sampler'}: epsilon >= {self.epsilon_lower:.4f}"
                 f"{attainable} at {self.confidence:.0%} (claimed {claim}); {verdict}; attack "
                 f"{self.attack.value}, event {self.event} ({self.direction}), "
                 f"{self.samples_per_side} samples per side{inputs}, {self.seconds:.2f} s"]
        if self.unseen_on_other_side:
            lines.append("  the event never occurred under the other input in "
                         f"{self.bound_samples:,} draws: the bound is limited by the sample "
                         "size; if it is impossible there, no finite epsilon holds")
        if self.claim_attainable is not None and self.verdict is Verdict.INCONCLUSIVE:
            lines.append(f"  at most {self.claim_attainable:.4f} can be shown with "
                         f"{self.bound_samples:,} samples per side of a mechanism meeting "
                         "the claim")
        if self.design is not None:
            lines.append(f"  real-valued design (float bits excluded): epsilon >= "
                         f"{self.design.epsilon_lower:.4f}, {self.design.verdict.value}; "
                         f"event {self.design.event}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- helpers

#: Default share of the outputs used for selection, at every ``n``. The selection part is
#: itself split in half (proposal and held-out scoring, see
#: :func:`~dpkd_audit.audit.event_selection.select_event`), so it needs more than the 10% that
#: served a single selection set. Measured (mean of 4 seeds, default policy): at 10^6 per side, 20%
#: against 10% gives Laplace eps=1 0.992 (0.992), Gaussian (1, 1e-5) 0.712 (0.611), a Gaussian
#: with half the noise 1.571 (1.436), 10-ary RR 0.988 (0.987), discrete Gaussian 0.625 (0.616);
#: at 10^5 the two are within seed noise (Laplace 0.978 vs 0.977, RR 0.974 vs 0.963, Gaussian
#: 0.470 vs 0.480). 30% was no better.
DEFAULT_SELECTION_FRACTION = 0.2


def _split(n: int, selection_fraction: float | None) -> tuple[int, int]:
    frac = DEFAULT_SELECTION_FRACTION if selection_fraction is None else selection_fraction
    m = min(max(round(n * frac), MIN_PART), n - MIN_PART)
    return m, n - m


def _draw(sampler: Sampler, x: Any, k: int, rng: np.random.Generator) -> Outputs:
    return prepare_outputs(sampler(x, k, rng), k, name="sampler")


def _count(sampler: Sampler, x: Any, total: int, rng: np.random.Generator,
           candidates: list[Candidate], reference: Outputs) -> list[int]:
    """Hits of each candidate among the same ``total`` fresh outputs on ``x`` (in chunks)."""
    row_bytes = max(1, reference.data.nbytes // max(len(reference), 1))
    chunk = max(1, CHUNK_BYTES // row_bytes)
    hits = [0] * len(candidates)
    done = 0
    while done < total:
        k = min(chunk, total - done)
        batch, fits = conform(_draw(sampler, x, k, rng), reference)
        for i, candidate in enumerate(candidates):
            hit = candidate.indicator(batch)
            hits[i] += int(np.count_nonzero(hit if fits is None else hit & fits))
        done += k
    return hits


def _count_part(part: tuple[Any, int, int], shared: tuple[Any, ...]) -> list[int]:
    """One part of :func:`count_in_parts`: hits among ``k`` outputs on one input."""
    side, k, seed = part
    sampler, x, x_prime, candidates, reference = shared
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    return _count(sampler, x if side == 0 else x_prime, k, rng, candidates, reference)


def count_in_parts(sampler: Sampler, x: Any, x_prime: Any, total: int,
                   candidates: list[Candidate], reference: Outputs, *, workers: int,
                   rng: np.random.Generator, executor: ExecutorConfig | None = None
                   ) -> list[tuple[int, int]]:
    """Hits of each candidate among ``total`` fresh outputs on each input, in ``workers`` parts.

    Each input's ``total`` outputs are split into ``workers`` near-equal parts; part j of
    input s is drawn from the generator seeded by the (2j + s)-th child of a
    ``SeedSequence`` whose entropy is drawn from ``rng``: independent streams, the same for
    every executor, so a local run and a Ray run with the same ``rng`` state count the same
    outputs. Only the counts travel back.

    Returns:
        ``(hits on x, hits on x_prime)`` per candidate.
    """
    from dpkd_audit.executor import map_unordered, put

    config = executor if executor is not None else ExecutorConfig()
    entropy = int(rng.integers(0, 2**63 - 1))
    children = np.random.SeedSequence(entropy).spawn(2 * workers)
    sizes = [total // workers + (1 if j < total % workers else 0) for j in range(workers)]
    parts = [(side, sizes[j], int(children[2 * j + side].generate_state(1, np.uint64)[0]))
             for j in range(workers) for side in (0, 1) if sizes[j] > 0]
    shared = put((sampler, x, x_prime, candidates, reference), config)
    hits = [[0, 0] for _ in candidates]
    for i, counts in map_unordered(_count_part, parts, config=config, shared=shared,
                                   describe=lambda p: f"audit part (input {p[0]}, {p[1]} "
                                                      "outputs)"):
        for c, count in enumerate(counts):
            hits[c][parts[i][0]] += int(count)
    return [(h[0], h[1]) for h in hits]


def _count_both(sampler: Sampler, x: Any, x_prime: Any, total: int,
                candidates: list[Candidate], reference: Outputs, *, rng: np.random.Generator,
                workers: int | None, executor: ExecutorConfig | None
                ) -> list[tuple[int, int]]:
    """``(hits on x, hits on x')`` of each candidate on ``total`` fresh outputs per input."""
    if workers is None:
        on_x = _count(sampler, x, total, rng, candidates, reference)
        on_xp = _count(sampler, x_prime, total, rng, candidates, reference)
        return list(zip(on_x, on_xp, strict=True))
    return count_in_parts(sampler, x, x_prime, total, candidates, reference, workers=workers,
                          rng=rng, executor=executor)


def _plug_in(k_1: int, k_0: int, total: int, delta: float) -> float:
    num = k_1 / total - delta
    if num <= 0:
        return 0.0
    if k_0 == 0:
        return math.inf
    return max(0.0, math.log(num / (k_0 / total)))


# --------------------------------------------------------------------------- public API

def audit_sampler(sampler: Sampler, x: Any, x_prime: Any, *, epsilon: float,
                  delta: float = 0.0, n: int = DEFAULT_SAMPLES, confidence: float = 0.95,
                  rng: np.random.Generator, attack: Attack | None = None,
                  selection_fraction: float | None = None,
                  mechanism: str | None = None, policy: str | None = None,
                  workers: int | None = None, executor: ExecutorConfig | None = None,
                  confirmation_confidence: float | None = CONFIRMATION_CONFIDENCE,
                  ) -> AuditResult:
    """Audit ``sampler`` on the pair ``(x, x_prime)`` against the claim (epsilon, delta).

    The selection part (``selection_fraction`` of the ``n`` outputs per input) chooses the
    event and direction; the bounding part (fresh outputs) is counted. The reported
    ``epsilon_lower`` is a valid lower bound on the sampler's epsilon on this pair at level
    ``confidence`` (see the module docstring): the event is independent of the bounding
    samples.

    Args:
        sampler: ``sampler(x, n, rng)`` returning ``n`` independent outputs on input ``x``
            stacked on axis 0 (1-D array of scalars, ``(n, ...)`` array, structured array, or a
            sequence of hashable values).
        x: First input.
        x_prime: Neighbouring input.
        epsilon: Claimed epsilon (> 0).
        delta: Claimed delta, in [0, 1).
        n: Outputs per input (an integer >= ``MIN_SAMPLES``).
        confidence: Confidence of the bound, in (0, 1).
        rng: The randomness of the sampler and of the attack.
        attack: How to choose the event (default ``None``: AUTO, every applicable attack,
            float bits included; AUTO_REAL leaves the floating-point artefacts out; see
            :func:`resolve_attack`).
        selection_fraction: Share of the ``n`` outputs used for selection, in (0, 1); default
            :data:`DEFAULT_SELECTION_FRACTION`.
        mechanism: Name recorded in the result.
        policy: Why this attack policy (recorded; default from :func:`resolve_attack`).
        workers: ``None`` (default): the bounding outputs are drawn here from ``rng``. An
            integer >= 1: they are drawn in ``workers`` parts per input, each from its own
            seed spawned from ``rng`` (:func:`count_in_parts`), on ``executor``; the event is
            still chosen here, and only the parts' counts come back. The bound is a function
            of the counts alone, so it is the one this process would compute from them.
        executor: Where the parts run (default: this process); Ray spreads them over a
            cluster (:mod:`dpkd_audit.executor`).
        confirmation_confidence: When the bound exceeds the claim, the same event is counted
            on fresh samples (as many as the bound's) and bounded at this confidence; the
            verdict is a violation only if that bound exceeds the claim too (else
            ``Verdict.UNCONFIRMED``). A mechanism that meets its claim is then reported
            violated with probability at most ``1 - confirmation_confidence`` (default 0.5%).
            ``None``: no confirmation, the first bound decides (false violations at rate up to
            ``1 - confidence``). A suite of ``K`` audits keeps its family-wise rate at
            ``K (1 - confirmation_confidence)`` (Bonferroni; see
            :func:`~dpkd_audit.audit.suite.suite_confirmation_confidence`).

    Returns:
        The :class:`AuditResult`. Under the AUTO policy, when float bits chose the event, its
        ``design`` holds the audit of the real-valued design (every other attack) counted on
        the same samples.

    Raises:
        ValueError: If an argument is out of range, or the sampler returns the wrong number or
            kind of outputs (the message names the culprit).
    """
    start = time.perf_counter()
    if not callable(sampler):
        raise ValueError(f"sampler must be callable as sampler(x, n, rng); got "
                         f"{type(sampler).__name__}")
    epsilon = _validate.check_epsilon(epsilon)
    delta = _validate.check_delta(delta)
    n = _validate.check_int("n", n, minimum=MIN_SAMPLES)
    confidence = _validate.check_probability("confidence", confidence, open_low=True,
                                             open_high=True)
    rng = _validate.check_generator(rng)
    attack, reason = resolve_attack(attack)
    policy = reason if policy is None else policy
    if selection_fraction is not None:
        selection_fraction = _validate.check_probability(
            "selection_fraction", selection_fraction, open_low=True, open_high=True)
    m, total = _split(n, selection_fraction)
    if workers is not None:
        workers = _validate.check_int("workers", workers, minimum=1, maximum=total)
    elif executor is not None:
        raise ValueError("executor needs workers (the number of parts per input)")

    if confirmation_confidence is not None:
        confirmation_confidence = _validate.check_probability(
            "confirmation_confidence", confirmation_confidence, open_low=True, open_high=True)

    sel_x = _draw(sampler, x, m, rng)
    sel_xp = _draw(sampler, x_prime, m, rng)
    if OutputKind.OBJECT in (sel_x.kind, sel_xp.kind):  # numbers beside rare other values
        sel_x, sel_xp = as_object(sel_x), as_object(sel_xp)
    conform(sel_xp, sel_x)  # the same kind and shape on both inputs, or a clear error
    alpha = (1.0 - confidence) / 2.0
    coder = KeyCoder()
    selection = Selection(delta, alpha, rng, bound_samples=total)
    candidate = select_event(sel_x, sel_xp, attack, selection, coder)
    candidates = [candidate]
    if attack is Attack.AUTO and candidate.attack is Attack.FLOAT_BITS:
        # the float-bit leak would hide any flaw of the design: bound that too, on the same
        # samples (each bound is valid for its own event)
        candidates.append(select_event(sel_x, sel_xp, Attack.AUTO_REAL, selection, coder))
    counted = _count_both(sampler, x, x_prime, total, candidates, sel_x, rng=rng,
                          workers=workers, executor=executor)
    lowers = [_lower(c, hits, total, delta, confidence) for c, hits in zip(
        candidates, counted, strict=True)]
    confirmations: list[Confirmation | None] = [None] * len(candidates)
    if confirmation_confidence is not None:
        pending = [i for i, lower in enumerate(lowers) if lower > epsilon]
        if pending:
            again = _count_both(sampler, x, x_prime, total, [candidates[i] for i in pending],
                                sel_x, rng=rng, workers=workers, executor=executor)
            for i, hits in zip(pending, again, strict=True):
                lower = _lower(candidates[i], hits, total, delta, confirmation_confidence)
                confirmations[i] = Confirmation(
                    epsilon_lower=lower, confidence=confirmation_confidence, counts=hits,
                    samples=total, confirmed=lower > epsilon)
    from dpkd_audit.audit.attainable import claim_attainable_epsilon

    common = {"epsilon_claimed": epsilon, "delta": delta, "confidence": confidence,
              "samples_per_side": n, "selection_samples": m, "bound_samples": total,
              "mechanism": mechanism, "inputs": (describe_input(x), describe_input(x_prime)),
              "claim_attainable": claim_attainable_epsilon(epsilon, delta, n=total,
                                                           confidence=confidence)}
    results = []
    for c, hits, lower, confirmation in zip(candidates, counted, lowers, confirmations,
                                            strict=True):
        k_1, k_0 = hits if c.forward else hits[::-1]
        verdict = verdict_of(lower, epsilon, None if confirmation is None
                             else confirmation.epsilon_lower)
        results.append(AuditResult(
            epsilon_lower=lower, violation=verdict is Verdict.VIOLATION, verdict=verdict,
            attack=c.attack, policy=policy, event=c.description,
            direction=FORWARD if c.forward else BACKWARD, counts=hits,
            epsilon_estimate=_plug_in(k_1, k_0, total, delta), seconds=0.0,
            confirmation=confirmation, **common))
    design = None
    if len(results) > 1:
        design = dataclasses.replace(
            results[1], policy="auto_real: the real-valued design, float bits excluded")
    return dataclasses.replace(results[0], design=design,
                               seconds=time.perf_counter() - start)


def _lower(candidate: Candidate, hits: tuple[int, int], total: int, delta: float,
           confidence: float) -> float:
    k_1, k_0 = hits if candidate.forward else hits[::-1]
    return epsilon_lower_bound(k_1, total, k_0, total, delta=delta, confidence=confidence)


def describe_input(value: Any, limit: int = 40) -> str:
    """A short text of an audited input with its type: ``"0 (int)"``, ``"0.0 (float)"``.

    The type matters: a library that dispatches on it audits its integer mechanism on ``0``
    and its floating-point one on ``0.0``.
    """
    if isinstance(value, np.ndarray):
        text = np.array2string(value.ravel(), threshold=6, edgeitems=2, separator=",")
        kind = f"ndarray {value.dtype} {value.shape}"
    else:
        text = repr(value)
        kind = type(value).__name__
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{text} ({kind})"


def audit_mechanism(mechanism: Any, *, n: int = DEFAULT_SAMPLES, confidence: float = 0.95,
                    rng: np.random.Generator, attack: Attack | None = None,
                    selection_fraction: float | None = None, workers: int | None = None,
                    executor: ExecutorConfig | None = None,
                    attainable: bool = False,
                    confirmation_confidence: float | None = CONFIRMATION_CONFIDENCE
                    ) -> AuditResult:
    """Audit a mechanism of the package (or any object with its contract) on its neighbours.

    Uses ``mechanism.neighbours()`` for the pair, ``mechanism.sample(x, n, rng=rng)`` for the
    outputs (reduced by ``mechanism.audit_view(x, x')`` when it gives one: a fixed public
    post-processing, so the bound still holds for the mechanism; the policy says so) and
    ``mechanism.epsilon`` / ``mechanism.delta`` (0 if absent) for the claim. Both
    directions are audited: the direction is chosen with the event on the selection outputs, so
    the bound keeps its full ``confidence`` (no Bonferroni split is needed; see
    :mod:`dpkd_audit.audit.auditor`).

    Args:
        mechanism: An object with ``sample(value, n, *, rng)``, ``neighbours()`` and
            ``epsilon`` (and optionally ``delta``), e.g. a
            :class:`~dpkd_audit.mechanisms.base.Mechanism`.
        n: Outputs per input.
        confidence: Confidence of the bound, in (0, 1).
        rng: The randomness.
        attack: How to choose the event (default ``None``: the policy of
            :func:`resolve_attack`, the same as ``dpkd audit``'s).
        selection_fraction: Share of the outputs used for selection (default
            :data:`DEFAULT_SELECTION_FRACTION`).
        workers: Parts the bounding outputs are drawn in (see :func:`audit_sampler`).
        executor: Where the parts run (see :func:`audit_sampler`).
        attainable: Also compute ``epsilon_attainable``, the best bound an audit of the
            mechanism's claimed DP event (``mechanism.event``) could attain with the same
            bounding samples (about a second; ``None`` when the event has no PLD).
        confirmation_confidence: Confidence of the confirmation a violation must pass
            (see :func:`audit_sampler`).

    Returns:
        The :class:`AuditResult` (``mechanism`` set to the class name).

    Raises:
        ValueError: If the mechanism lacks the contract or an argument is out of range.
    """
    for attr in ("sample", "neighbours", "epsilon"):
        if not hasattr(mechanism, attr):
            raise ValueError(f"mechanism must have sample(value, n, *, rng), neighbours() and "
                             f"epsilon; {type(mechanism).__name__} has no {attr!r}")
    epsilon = _validate.check_epsilon(mechanism.epsilon, "mechanism.epsilon")
    delta = _validate.check_delta(getattr(mechanism, "delta", 0.0), "mechanism.delta")
    sampler, pair, view = mechanism_sampler(mechanism)
    attack, policy = resolve_attack(attack, mechanism)
    if view is not None:  # post-processing: a bound on the view is a bound on the mechanism
        policy += f"; outputs reduced by the mechanism's audit view: {view.description}"
    result = audit_sampler(sampler, *pair, epsilon=epsilon, delta=delta, n=n,
                           confidence=confidence, rng=rng, attack=attack,
                           selection_fraction=selection_fraction,
                           mechanism=type(mechanism).__name__, policy=policy, workers=workers,
                           executor=executor, confirmation_confidence=confirmation_confidence)
    if attainable and getattr(mechanism, "event", None) is not None:
        from dpkd_audit.accountants.base import UnsupportedEventError
        from dpkd_audit.audit.attainable import attainable_epsilon

        try:
            best = attainable_epsilon(mechanism.event, n=result.bound_samples, delta=delta,
                                      confidence=result.confidence)
        except (UnsupportedEventError, ValueError):
            best = None  # no PLD for this event (e.g. non-private, or beyond the PLD grid)
        result = dataclasses.replace(result, epsilon_attainable=best)
    return result


def mechanism_sampler(mechanism: Any) -> tuple[Sampler, tuple[Any, Any], AuditView | None]:
    """The sampler an audit of ``mechanism`` draws from, on its ``neighbours()`` pair.

    ``mechanism.sample`` followed by ``mechanism.audit_view(x, x')`` when the mechanism gives
    one (a fixed public post-processing: a bound on the view is a bound on the mechanism).

    Returns:
        ``(sampler, (x, x'), view)``; ``view`` is ``None`` when the raw outputs are audited.

    Raises:
        ValueError: If ``neighbours()`` does not return a pair.
    """
    pair = mechanism.neighbours()
    if not isinstance(pair, tuple | list) or len(pair) != 2:
        raise ValueError(f"mechanism.neighbours() must return a pair (x, x'); got "
                         f"{type(pair).__name__}")
    view_of = getattr(mechanism, "audit_view", None)
    view = view_of(pair[0], pair[1]) if callable(view_of) else None

    def sampler(value: Any, k: int, gen: np.random.Generator) -> Any:
        out = mechanism.sample(value, k, rng=gen)
        return out if view is None else view.apply(out)

    return sampler, (pair[0], pair[1]), view
