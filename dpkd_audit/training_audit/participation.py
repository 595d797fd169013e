"""When each gradient canary joins a step, and the log-likelihood-ratio score of what it saw.

Pure numpy. A Dirac gradient canary ``j`` contributes ``C e_j`` (on its own coordinate) to the
clipped gradient sum of the steps it joins; DP-SGD then adds ``N(0, (sigma C)^2)`` noise and
the white-box auditor reads ``y_t = 1{joined} + noise / C`` back from every step (units of C;
:mod:`~dpkd_audit.training_audit.canaries`). A canary joins steps as the sampler that runs
would draw a record:

- :class:`PoissonParticipation`: every step independently with probability q (Opacus's
  ``DPDataLoader``). The score is the Neyman-Pearson statistic of the subsampled Gaussian:
  ``sum_t log(1 - q + q exp((y_t - 1/2) / sigma^2))`` (:func:`poisson_step_log_ratio`).
- :class:`AllocationParticipation`: one uniformly random step of each epoch of ``t`` steps (a
  shuffled ``DataLoader``, random allocation), or the same step every epoch (a sequential
  one). With fixed-size batches (``crowd=True``) the auditor also places the worst-case
  "crowd" of Chua et al. 2024: every other record of the canary's batches has gradient ``-C``
  on its coordinate, a known constant the score subtracts, except in the canary's own slot,
  where one crowd record is missing: relative to the constant, the slot shows ``+2`` with the
  canary and ``+1`` without it (zero-out neighbours: the canary's gradient replaced by zero,
  its slot kept). Per epoch the score is the log-likelihood ratio of the two mixtures over the
  unknown slot, ``log sum_s exp((2 y_s - 2)/sigma^2) - log sum_s exp((y_s - 1/2)/sigma^2)``
  with the crowd, ``log mean_s exp((y_s - 1/2)/sigma^2)`` without; it is accumulated as the
  steps go (two running log-sum-exps per canary), so memory stays O(m).

Any score gives a valid one-run bound (the bound's validity rests on the canaries' random
inclusion, not on the score); these are the most powerful ones for the mechanism each sampler
runs on a canary's coordinate, and they are exact for it: the dedicated coordinates see
nothing but the canaries' rows and DP-SGD's noise.
"""

from __future__ import annotations

import math

import numpy as np

from dpkd_audit import _validate

__all__ = ["AllocationParticipation", "PoissonParticipation", "poisson_step_log_ratio",
           "poisson_step_log_ratio_f32"]

#: The seed path of the canaries' participation draws (the pipelines' stream since issue 15).
_STREAM = (0xCA4A, 4)


def poisson_step_log_ratio(y: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """``log(1 - q + q exp((y - 1/2) / sigma^2))``: one step's log-likelihood ratio.

    The Poisson-subsampled Gaussian on one coordinate: ``N(1, sigma^2)`` with probability q
    and ``N(0, sigma^2)`` otherwise, against ``N(0, sigma^2)`` (units of C).
    """
    a = (np.asarray(y, dtype=np.float64) - 0.5) / (sigma * sigma)
    if q >= 1:
        return a
    # log1p(q expm1(a)) = log(1 - q + q e^a), three times faster than logaddexp; beyond
    # a = 50 (where expm1 would near its range) the logaddexp form
    out = np.log1p(q * np.expm1(np.minimum(a, 50.0)))
    big = a > 50.0
    if np.any(big):
        out[big] = np.logaddexp(math.log1p(-q), math.log(q) + a[big])
    return out


def poisson_step_log_ratio_f32(y: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """:func:`poisson_step_log_ratio` in float32, in place on a float32 copy of ``y``.

    Three times faster; each step's term carries a relative error of about 1e-7, which the
    float64 sum over the steps keeps at about 1e-5 of a score after 10^4 steps. Any score gives
    a valid bound, so this changes the audit's power by nothing measurable and its validity not
    at all. Values of ``(y - 1/2) / sigma^2`` above 50 (where ``expm1`` would near float32's
    range) take the float64 formula.
    """
    a = np.array(y, dtype=np.float32)
    a -= np.float32(0.5)
    a *= np.float32(1.0 / (sigma * sigma))
    if q >= 1:
        return a
    big = a > 50.0
    if np.any(big):
        exact = poisson_step_log_ratio(np.asarray(y, dtype=np.float64)[big], q, sigma)
    np.minimum(a, np.float32(50.0), out=a)
    np.expm1(a, out=a)
    a *= np.float32(q)
    np.log1p(a, out=a)
    if np.any(big):
        a = a.astype(np.float64)
        a[big] = exact
    return a


def _add_log(acc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``logaddexp(acc, x)``, through ``log1p(exp(-|d|))`` (the same value, twice as fast)."""
    high = np.maximum(acc, x)
    with np.errstate(invalid="ignore"):
        low = np.minimum(acc, x) - high
    return high + np.log1p(np.exp(np.where(np.isnan(low), -np.inf, low)))


class _LogSum:
    """Running ``log sum exp`` of the steps' arrays.

    A plain sum of exponentials while every value stays in [-600, 600] (exp neither overflows
    nor underflows there, even summed over 10^6 steps); the log-domain form from the first
    step that leaves that range.
    """

    def __init__(self, size: int) -> None:
        self._linear = np.zeros(size)
        self._log: np.ndarray | None = None

    def add(self, x: np.ndarray) -> None:
        if self._log is None and -600.0 < x.min() and x.max() < 600.0:
            self._linear += np.exp(x)
            return
        if self._log is None:
            with np.errstate(divide="ignore"):
                self._log = np.log(self._linear)
        self._log = _add_log(self._log, x)

    def value(self) -> np.ndarray:
        if self._log is not None:
            return self._log
        with np.errstate(divide="ignore"):
            return np.log(self._linear)

    def reset(self) -> None:
        self._linear.fill(0.0)
        self._log = None


class PoissonParticipation:
    """Each inserted canary joins each step independently with probability q.

    The draws come from ``numpy.random.default_rng([seed, 0xCA4A, 4])``, one uniform per canary
    per step (the stream the pipelines' audits have used since issue 15).

    With ``fast``, the same distribution is drawn in O(joining canaries) per step instead of
    one uniform per canary: the number that joins is Binomial(inserted, q), and which ones a
    uniform subset of that size (a different stream, so a run's draws differ from the
    pipelines' for one seed).

    Args:
        included: Boolean ``(m,)``: the inserted canaries.
        sampling_probability: q in (0, 1].
        seed: The canaries' seed.
        fast: Draw the count, then the subset (see above).
    """

    def __init__(self, included: np.ndarray, *, sampling_probability: float, seed: int,
                 fast: bool = False) -> None:
        self.included = np.asarray(included, dtype=bool)
        self.q = _validate.check_probability("sampling_probability", sampling_probability,
                                             open_low=True)
        self._rng = np.random.default_rng([seed, *_STREAM])
        self._fast = bool(fast)
        self._inserted = np.flatnonzero(self.included)

    def draw(self) -> np.ndarray:
        """The canaries (indices) that join the coming step."""
        if self._fast:
            k = int(self._rng.binomial(self._inserted.size, self.q))
            return self._inserted[self._rng.choice(self._inserted.size, size=k, replace=False)]
        return np.flatnonzero(self.included & (self._rng.random(self.included.size) < self.q))

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, weights)`` of the coming step's Dirac rows (weights in units of C)."""
        picked = self.draw()
        return picked, np.ones(picked.size)


class AllocationParticipation:
    """Each canary in one slot of each epoch of ``t`` steps; scores as the run goes.

    Args:
        included: Boolean ``(m,)``: the inserted canaries.
        steps_per_epoch: t (>= 1).
        seed: The canaries' seed.
        fixed: The same slot every epoch (sequential batches) instead of a fresh one.
        crowd: Fixed-size batches: the worst-case crowd of the module docstring (the canary's
            slot shows +1 even when it is left out, +2 when inserted).
        noise_multiplier: sigma, for the scores.
    """

    def __init__(self, included: np.ndarray, *, steps_per_epoch: int, seed: int,
                 fixed: bool, crowd: bool, noise_multiplier: float) -> None:
        self.included = np.asarray(included, dtype=bool)
        self.t = _validate.check_int("steps_per_epoch", steps_per_epoch, minimum=1)
        self.fixed = bool(fixed)
        self.crowd = bool(crowd)
        self.sigma = _validate.check_positive("noise_multiplier", noise_multiplier)
        self._rng = np.random.default_rng([seed, *_STREAM])
        m = self.included.size
        self._slots = np.empty(m, dtype=np.int64)
        self._order = np.empty(0, dtype=np.int64)
        self._starts = np.zeros(self.t + 1, dtype=np.int64)
        self.step = 0  # logical steps drawn so far
        self._scored = 0  # steps scored so far
        self._acc_in = _LogSum(m)
        self._acc_out = _LogSum(m)
        self._scores = np.zeros(m)

    def _new_epoch(self) -> None:
        if not self.fixed or self.step == 0:
            self._slots = self._rng.integers(self.t, size=self.included.size)
        self._order = np.argsort(self._slots, kind="stable")
        self._starts = np.searchsorted(self._slots[self._order], np.arange(self.t + 1))

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, weights)`` of the coming step's Dirac rows (weights in units of C)."""
        slot = self.step % self.t
        if slot == 0:
            self._new_epoch()
        self.step += 1
        here = self._order[self._starts[slot]:self._starts[slot + 1]]
        inserted = self.included[here]
        if not self.crowd:
            picked = here[inserted]
            return picked, np.ones(picked.size)
        return here, np.where(inserted, 2.0, 1.0)

    def score_step(self, y: np.ndarray) -> None:
        """Fold one step's readings ``y`` (units of C, every canary) into the scores."""
        y = np.asarray(y, dtype=np.float64)
        s2 = self.sigma * self.sigma
        self._acc_in.add(((2.0 * y - 2.0) if self.crowd else (y - 0.5)) / s2)
        if self.crowd:
            self._acc_out.add((y - 0.5) / s2)
        self._scored += 1
        if self._scored % self.t == 0:
            self._close_epoch(0)

    def _epoch_ratio(self, unseen: int) -> np.ndarray:
        """The epoch's log-likelihood ratio; ``unseen`` slots (a cut-short epoch) count as 1."""
        tail = math.log(unseen) if unseen else -math.inf
        acc_in = np.logaddexp(self._acc_in.value(), tail)
        acc_out = (np.logaddexp(self._acc_out.value(), tail) if self.crowd
                   else np.full(acc_in.shape, math.log(self.t)))
        return acc_in - acc_out

    def _close_epoch(self, unseen: int) -> None:
        self._scores += self._epoch_ratio(unseen)
        self._acc_in.reset()
        self._acc_out.reset()

    def scores(self) -> np.ndarray:
        """Every canary's log-likelihood-ratio score so far (a cut-short epoch included)."""
        seen = self._scored % self.t
        return self._scores + self._epoch_ratio(self.t - seen) if seen else self._scores.copy()
