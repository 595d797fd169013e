"""Shuffle-model mechanisms: a shuffled local randomizer and a multi-message shuffled histogram.

In the shuffle model (Bittau et al. 2017; Cheu et al. 2019; Erlingsson et al. 2019) every user
runs a local randomizer on its own record and sends the resulting message(s) to a shuffler, which
forwards the multiset of all messages to the analyzer in uniformly random order. What the
analyzer sees -- and what every guarantee below is about -- is that multiset, equivalently its
histogram (the count of every distinct message).

- :class:`ShuffledRandomizer`: single-message shuffling of any pure epsilon0-DP local randomizer;
  amplified central guarantee by Feldman-McMillan-Talwar 2021, Theorem 3.1 (closed form).
- :class:`ShuffledHistogram`: the multi-message histogram protocol with negative-binomial noise
  shares and "flooding" message pairs of Ghazi, Kumar, Manurangsi, Pagh 2020 / Ghazi, Kumar,
  Manurangsi, Pagh, Sinha 2021, with an (epsilon, delta) computed *exactly* for the full message
  view by :func:`shuffled_histogram_delta` (derivation in its docstring).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp
from scipy import signal, stats

from dpkd_audit import _validate
from dpkd_audit._math.shuffle import numerical_epsilon
from dpkd_audit.events import ShuffledHistogramDpEvent, ShuffledLocalDpEvent
from dpkd_audit.mechanisms.base import AuditView, Mechanism, Norm, Sensitivity

__all__ = [
    "ShuffledHistogram",
    "ShuffledRandomizer",
    "calibrate_shuffled_histogram",
    "shuffled_histogram_delta",
]

#: Random arrays are drawn in blocks of at most this many entries (bounds peak memory).
_BLOCK_ENTRIES = 1 << 22


# =========================================================================== single message


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShuffledRandomizer(Mechanism):
    """``num_users`` reports of one pure local randomizer, released as a shuffled multiset.

    Every user applies ``local`` (a pure ``epsilon0``-DP mechanism of this package, e.g.
    :class:`~dpkd_audit.mechanisms.randomized_response.RandomizedResponse`) to its own input;
    the reports are output in uniformly random order (a fresh permutation per output), which is
    the analyzer's view in the single-message shuffle model.

    Claimed guarantee (replace-one neighbours: one user's input changes):

    - ``delta == 0`` (default): pure ``epsilon0``-DP. The shuffled multiset is a post-processing
      of the vector of local reports, which is ``epsilon0``-DP because one user's input only
      affects its own report (Dwork-Roth 2014, Prop. 2.1 and parallel composition).
    - ``delta`` in (0, 1): (epsilon, delta)-DP with epsilon from Feldman-McMillan-Talwar 2021's
      numerical bound (Thm 3.2 / App. E, :func:`dpkd_audit._math.shuffle.numerical_epsilon`:
      exact for their dominating pair, no validity condition, several times tighter than the
      Theorem 3.1 closed form), when it is below epsilon0. Otherwise the claim falls back to
      pure ``epsilon0``-DP and ``delta`` is set to 0 (``amplified`` tells which).

    The event is ``ShuffledLocalDpEvent(epsilon0, num_users)``: it declares the un-amplified
    ``epsilon0`` (what basic composition may charge); amplification is the shuffle
    accountant's business.

    Sampling: users holding equal inputs have i.i.d. reports, so users are grouped by distinct
    input and ``local``'s vectorised sampler is called once per distinct input (for ``n *``
    group-size draws): a Python loop over *distinct inputs*, never over outputs or users
    (unless every user holds a different input, e.g. vector-valued inputs, where it degrades
    to one call per user, still vectorised over the ``n`` outputs).

    Limits: one output holds ``num_users`` reports, so ``num_users <= 10^8`` (and ``n *
    num_users`` times the size of one report stays <= 10^8 per call; the reports are
    materialised and permuted).

    Attributes:
        local: The local randomizer (a ``Mechanism`` with pure epsilon, ``delta == 0``).
        num_users: Number of users n (an integer in [1, 10^8]); an input is a sequence of n
            inputs.
        delta: Target delta of the amplified claim: 0 (pure epsilon0-DP) or in
            [1e-300, 1 / num_users).
        epsilon: Claimed epsilon (derived, not an argument).
        amplified: Whether the FMT21 amplified bound is claimed (derived).
    """

    reference = ("Feldman-McMillan-Talwar FOCS 2021, Thm 3.2 / App. E numerical bound "
                 "(amplification by shuffling); "
                 "Erlingsson et al. SODA 2019; Cheu et al. EUROCRYPT 2019")

    local: Mechanism
    num_users: int
    delta: float = 0.0
    epsilon: float = dataclasses.field(init=False)
    amplified: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.local, Mechanism):
            raise ValueError("local must be a dpkd_audit Mechanism (a local randomizer such as "
                             f"RandomizedResponse); got {type(self.local).__name__}")
        local_delta = float(getattr(self.local, "delta", 0.0))
        if local_delta != 0.0:
            raise ValueError("local must be a pure epsilon-DP randomizer (local.delta == 0) for "
                             f"the shuffling bound; got local.delta={local_delta!r}")
        eps0 = _validate.check_epsilon_range(self.local.epsilon, name="local.epsilon")
        num_users = _validate.check_size("num_users", self.num_users)
        delta = _validate.check_delta(self.delta)
        if delta != 0.0:
            delta = _validate.check_mechanism_delta(delta)
        if delta >= 1.0 / num_users:
            # (0, 1/n)-DP already allows publishing one random user's input in the clear
            # (Dwork-Roth 2014, Sec. 2.3): no amplification claim at such a delta means anything
            raise ValueError(f"delta must be below 1/num_users = {1.0 / num_users:g} (a delta "
                             f"of 1/n lets a mechanism publish one user's input outright); "
                             f"got delta={delta!r} with num_users={num_users}")
        epsilon, amplified = eps0, False
        if delta > 0.0:
            shuffled = numerical_epsilon(eps0, num_users, delta)
            if shuffled < eps0:
                epsilon, amplified = shuffled, True
        object.__setattr__(self, "num_users", num_users)
        object.__setattr__(self, "delta", delta if amplified else 0.0)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "amplified", amplified)

    @property
    def local_epsilon(self) -> float:
        """The pure epsilon0 of the local randomizer."""
        return float(self.local.epsilon)

    @property
    def sensitivity(self) -> Sensitivity:
        """One user's input changes (replace-one neighbours over users)."""
        return Sensitivity(value=1, norm=Norm.RECORDS)

    @property
    def event(self) -> _dp.DpEvent:
        return ShuffledLocalDpEvent(self.local_epsilon, self.num_users)

    @property
    def num_categories(self) -> int | None:
        """Number of report categories of the local randomizer (its ``num_classes``), if any."""
        k = getattr(self.local, "num_classes", None)
        return int(k) if isinstance(k, (int, np.integer)) else None

    # ------------------------------------------------------------------ inputs
    def _check_value(self, value: Any) -> tuple[list[Any], np.ndarray]:
        """Validate one input per user; return (distinct checked inputs, user -> group index)."""
        try:
            length = None if isinstance(value, (str, bytes, dict)) else len(value)
        except TypeError:  # no length (e.g. a scalar or a 0-d array)
            length = None
        if length is None:
            raise ValueError(f"value must be a sequence of num_users={self.num_users} user "
                             f"inputs; got {type(value).__name__}")
        if length != self.num_users:
            raise ValueError(f"value must hold exactly num_users={self.num_users} user inputs "
                             f"(one per user); got {length}")
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError):  # ragged inputs: validate user by user
            arr = None
        if arr is not None and arr.dtype.kind in "biuf" and arr.ndim >= 1:
            distinct, firsts, inverse = np.unique(arr, axis=0, return_index=True,
                                                  return_inverse=True)
            inverse = np.asarray(inverse).reshape(-1)
            groups = [self._check_user(distinct[g], int(firsts[g]))
                      for g in range(len(distinct))]
            return groups, inverse.astype(np.int64)
        groups = [self._check_user(v, i) for i, v in enumerate(value)]
        shapes = [np.shape(g) for g in groups]
        odd = next((i for i, shape in enumerate(shapes) if shape != shapes[0]), None)
        if odd is not None:
            raise ValueError(f"value must give every user an input of one shape (the shuffler "
                             f"stacks their reports); user 0's has shape {shapes[0]}, user "
                             f"{odd}'s {shapes[odd]}")
        return groups, np.arange(self.num_users, dtype=np.int64)

    def _values_per_output(self, value: tuple[list[Any], np.ndarray]) -> int:
        groups, _ = value
        per_report = max((self.local._values_per_output(g) for g in groups), default=1)
        return self.num_users * per_report

    def _check_user(self, item: Any, index: int) -> Any:
        try:
            return self.local._check_value(item)
        except ValueError as exc:
            raise ValueError(f"value[{index}] (the input of user {index}) is invalid for the "
                             f"local randomizer: {exc}") from exc

    # ------------------------------------------------------------------ sampling
    def _sample(self, value: tuple[list[Any], np.ndarray], n: int,
                rng: np.random.Generator) -> np.ndarray:
        groups, inverse = value
        order = np.argsort(inverse, kind="stable")  # users grouped by distinct input
        bounds = np.searchsorted(inverse[order], np.arange(len(groups) + 1))
        blocks = []
        for g, checked in enumerate(groups):
            size = int(bounds[g + 1] - bounds[g])
            reports = np.asarray(self.local._sample(checked, n * size, rng))
            blocks.append(reports.reshape(n, size, *reports.shape[1:]))
        grouped = np.concatenate(blocks, axis=1)  # users in the order ``order``
        out = np.empty_like(grouped)
        out[:, order] = grouped
        # A fresh uniform permutation of the users' reports for every output (row).
        perm = np.argsort(rng.random((n, self.num_users)), axis=1)
        index = perm.reshape(perm.shape + (1,) * (out.ndim - 2))
        return np.take_along_axis(out, index, axis=1)

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """All users hold the local ``x0``; in the neighbour user 0 holds ``x1`` instead.

        ``(x0, x1) = local.neighbours()``.
        """
        x0, x1 = self.local.neighbours()
        first = np.asarray([x0] * self.num_users)
        second = first.copy()
        second[0] = np.asarray(x1)
        return first, second

    def audit_view(self, x: Any, x_prime: Any) -> AuditView | None:
        """How many reports take each value: the shuffled multiset, without its order.

        The multiset is all an analyzer learns (Balle-Bell-Gascon-Nissim, CRYPTO 2019, Sec. 2),
        and its counts are a sufficient statistic of it. Integer reports (randomized response)
        are counted per category; reports with a view of their own (Collision) are reduced by
        the local view of the differing user's two inputs, and the rows are summed.
        """
        x0, x1 = self.local.neighbours()
        local_view = self.local.audit_view(x0, x1)
        users = self.num_users
        categories = getattr(self.local, "num_classes", None)
        if local_view is None and categories is None:
            return None

        def apply(outputs: Any) -> np.ndarray:
            outputs = np.asarray(outputs)
            if local_view is not None:
                flat = outputs.reshape(outputs.shape[0] * users, *outputs.shape[2:])
                bits = np.asarray(local_view.apply(flat))
                return bits.reshape(outputs.shape[0], users, -1).sum(axis=1)
            return np.stack([(outputs == c).sum(axis=1) for c in range(int(categories))],
                            axis=1)

        what = (f"counts of ({local_view.description}) over the users" if local_view
                else "counts of each category over the users")
        return AuditView(description=what, apply=apply)

    # ------------------------------------------------------------------ server side
    def histogram(self, reports: Any, num_categories: int | None = None) -> np.ndarray:
        """Counts of every category in shuffled categorical reports.

        The shuffled multiset carries exactly the information of its histogram, so this is the
        natural server-side summary (e.g. for randomized response, whose
        ``estimate_counts`` debiases it).

        Args:
            reports: Integer reports of shape ``(..., num_users)`` (one output of
                :meth:`release`, or a batch from :meth:`sample`).
            num_categories: Number of categories K; defaults to ``local.num_classes``.

        Returns:
            int64 counts of shape ``(..., K)``.
        """
        k = self.num_categories if num_categories is None else num_categories
        if k is None:
            raise ValueError("num_categories must be given: the local randomizer has no "
                             "num_classes attribute")
        k = _validate.check_int("num_categories", k, minimum=1)
        try:
            arr = np.asarray(reports)
        except (TypeError, ValueError) as exc:
            raise ValueError("reports must be an integer array of shape (..., num_users)") from exc
        if arr.dtype.kind not in "iu":
            raise ValueError(f"reports must be integer categories in [0, {k}); got dtype "
                             f"{arr.dtype}")
        if arr.ndim < 1 or arr.shape[-1] != self.num_users:
            raise ValueError(f"reports must have shape (..., num_users={self.num_users}); got "
                             f"shape {arr.shape}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= k):
            raise ValueError(f"reports must be categories in [0, {k}); got entries in "
                             f"[{arr.min()}, {arr.max()}]")
        rows = arr.reshape(-1, self.num_users).astype(np.int64)
        flat = rows + (np.arange(rows.shape[0], dtype=np.int64) * k)[:, None]
        counts = np.bincount(flat.ravel(), minlength=rows.shape[0] * k)
        return counts.reshape(*arr.shape[:-1], k)


# =========================================================================== multi message


def _check_histogram_noise(noise_parameter: float, flood_shape: float,
                           flood_probability: float) -> tuple[float, float, float]:
    return (_validate.check_positive("noise_parameter", noise_parameter),
            _validate.check_positive("flood_shape", flood_shape),
            _validate.check_probability("flood_probability", flood_probability,
                                        open_low=True, open_high=True))


#: Most atoms of the per-bin sufficient statistic the exact accounting sums over (memory and
#: time: a few arrays of this many float64s, sorted).
MAX_HISTOGRAM_ATOMS = 1 << 21


class _TooManyAtomsError(ValueError):
    """The exact accounting would need more than MAX_HISTOGRAM_ATOMS atoms."""


def _per_bin_atoms(noise_parameter: float, flood_shape: float, flood_probability: float,
                   tail_bound: float) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Masses of the sufficient statistic T of one bin under Q1 and Q0, and the two tail lumps.

    See :func:`shuffled_histogram_delta`. Returns ``(q1, q0, tail1, tail0)`` with
    ``q1[k] = Q1(T = k)``, ``q0[k] = Q0(T = k)`` for k = 0..K, and upper bounds ``tail1``,
    ``tail0`` on ``Q1(K < T < inf)`` and ``Q0(K < T < inf)``.
    """
    a = math.exp(-noise_parameter)
    r, b = flood_shape, flood_probability
    # P(X >= kx) = a^kx <= tail_bound, and P(F > kf) <= tail_bound.
    kx_real = math.log(tail_bound) / -noise_parameter  # inf for a subnormal noise_parameter
    if not kx_real <= MAX_HISTOGRAM_ATOMS:
        raise _TooManyAtomsError(
            f"noise_parameter={noise_parameter!r} needs {kx_real:.3g} atoms of the per-bin "
            f"statistic (log(1/tail)/noise_parameter), more than {MAX_HISTOGRAM_ATOMS}")
    kx = max(1, math.ceil(kx_real))
    kf = stats.nbinom.isf(tail_bound, r, 1.0 - b)
    if not math.isfinite(kf) or kf > MAX_HISTOGRAM_ATOMS:
        raise _TooManyAtomsError(
            f"flood_shape={r!r} with flood_probability={b!r} needs more than "
            f"{MAX_HISTOGRAM_ATOMS} atoms of the per-bin statistic")
    kf = int(kf)
    while stats.nbinom.sf(kf, r, 1.0 - b) > tail_bound:
        kf += 1
    big_k = kx + kf + 1
    if big_k > MAX_HISTOGRAM_ATOMS:
        raise _TooManyAtomsError(
            f"noise_parameter={noise_parameter!r}, flood_shape={r!r} and "
            f"flood_probability={b!r} need {big_k} atoms of the per-bin statistic, more than "
            f"{MAX_HISTOGRAM_ATOMS}")
    ks = np.arange(big_k + 1)
    flood = stats.nbinom.pmf(ks, r, 1.0 - b)
    # H(k) = sum_{f <= k} F(f) a^(2(k - f)), i.e. H(k) = a^2 H(k-1) + F(k): stable recursion.
    h = signal.lfilter([1.0], [1.0, -a * a], flood)
    h_prev = np.concatenate([[0.0], h[:-1]])
    q0 = (1.0 - a) * h
    q1 = (1.0 - a) * a * h_prev
    # T > K implies X + F > K under Q0 (X + 1 + F > K under Q1): union bound on X and F.
    geo = a ** kx
    tail0 = geo + float(stats.nbinom.sf(big_k - kx, r, 1.0 - b))
    tail1 = geo + float(stats.nbinom.sf(big_k - 1 - kx, r, 1.0 - b))
    return q1, q0, tail1, tail0


def _hockey_stick_product(upper_a: np.ndarray, lower_a: np.ndarray, upper_b: np.ndarray,
                          lower_b: np.ndarray, epsilon: float) -> float:
    """sum_{i,j} (U_a[i] U_b[j] - e^eps L_a[i] L_b[j])_+ for two independent atom lists."""
    keep = upper_a > 0
    upper_a, lower_a = upper_a[keep], lower_a[keep]
    keep = upper_b > 0
    upper_b, lower_b = upper_b[keep], lower_b[keep]
    with np.errstate(divide="ignore"):
        loss_a = np.log(upper_a) - np.log(lower_a)
        loss_b = np.log(upper_b) - np.log(lower_b)
    order = np.argsort(-loss_b, kind="stable")
    sorted_b = loss_b[order]
    cum_upper = np.concatenate([[0.0], np.cumsum(upper_b[order])])
    cum_lower = np.concatenate([[0.0], np.cumsum(lower_b[order])])
    # For atom i of side a: the atoms j of side b with loss_b[j] > epsilon - loss_a[i].
    count = np.searchsorted(-sorted_b, loss_a - epsilon, side="left")
    with np.errstate(divide="ignore", over="ignore"):  # e^eps may overflow: the term is then 0
        scaled_lower = np.exp(epsilon + np.log(lower_a * cum_lower[count]))
    terms = upper_a * cum_upper[count] - scaled_lower
    return float(math.fsum(np.maximum(terms, 0.0)))


def shuffled_histogram_delta(epsilon: float, *, noise_parameter: float, flood_shape: float,
                             flood_probability: float, tail_bound: float = 1e-15) -> float:
    """Exact delta(epsilon) of the full message view of :class:`ShuffledHistogram`.

    The view of one bin is V = (P, M): the numbers of "+1" and "-1" messages of that bin,
    P = c + X + F and M = Y + F, with c the true count, X, Y ~ Geometric(a) (pmf
    (1-a) a^k, a = e^-noise_parameter; the sums over users of the NB(1/n, 1-a) shares) and
    F ~ NB(r, 1-b) (pmf C(k+r-1, k) (1-b)^r b^k; the sum of the flooding pairs), all
    independent, and independent across bins. Write Q0 for the law of (X + F, Y + F) and Q1 for
    that of (X + 1 + F, Y + F). Summing over F,

        Q0(p, m) = (1-a)^2 a^(p+m) G(min(p, m)),   G(k) = sum_{f<=k} F(f) a^(-2f),

    and Q1(p, m) = Q0(p-1, m), so the likelihood ratio Q1/Q0 is 1/a when p > m and
    G(p-1) / (a G(p)) when p <= m: it depends on V only through T = p if p <= m, T = "top"
    otherwise -- a sufficient statistic. With H(k) = a^(2k) G(k) = a^2 H(k-1) + F(k):

        Q0(T = k) = (1-a) H(k),  Q1(T = k) = (1-a) a H(k-1),
        Q0(top) = P(X > Y) = a/(1+a),  Q1(top) = P(X >= Y) = 1/(1+a).

    Replacing one user's bin u by v changes only those two bins: the pair of view laws is
    (Q1 x Q0, Q0 x Q1) in either direction (symmetric), so

        delta(eps) = sum_{s,t} (Q1(s) Q0(t) - e^eps Q0(s) Q1(t))_+

    over pairs of atoms of T. This is computed exactly over T <= K; the atoms T > K (which
    have probability <= ``tail_bound``-sized union bounds on the tails of X and F) are lumped
    into one atom of zero lower mass, which can only over-estimate delta. The result is
    therefore an upper bound within about 4 * ``tail_bound`` of the true delta.

    Args:
        epsilon: The epsilon at which to evaluate delta (>= 0).
        noise_parameter: The discrete-Laplace parameter eps_c of every bin (> 0).
        flood_shape: The total flooding shape r (> 0).
        flood_probability: The flooding parameter b, in (0, 1).
        tail_bound: Tail mass neglected on each side (in (0, 1e-3]).

    Returns:
        delta(epsilon), in [0, 1].
    """
    if not (isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool)
            and math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite real number >= 0; got {epsilon!r}")
    noise_parameter, flood_shape, flood_probability = _check_histogram_noise(
        noise_parameter, flood_shape, flood_probability)
    tail_bound = _validate.check_positive("tail_bound", tail_bound)
    if tail_bound > 1e-3:
        raise ValueError(f"tail_bound must be a real number in (0, 1e-3]; got {tail_bound!r}")
    a = math.exp(-noise_parameter)
    q1, q0, tail1, tail0 = _per_bin_atoms(noise_parameter, flood_shape, flood_probability,
                                          tail_bound)
    top1, top0 = 1.0 / (1.0 + a), a / (1.0 + a)
    # Side of the bin that gains the user: upper Q1, lower Q0; the other bin: upper Q0, lower Q1.
    upper_a = np.concatenate([q1, [top1, tail1]])
    lower_a = np.concatenate([q0, [top0, 0.0]])
    upper_b = np.concatenate([q0, [top0, tail0]])
    lower_b = np.concatenate([q1, [top1, 0.0]])
    return min(1.0, _hockey_stick_product(upper_a, lower_a, upper_b, lower_b, float(epsilon)))


#: Range of epsilon for which :func:`calibrate_shuffled_histogram` runs (cost grows as 1/eps).
MIN_HISTOGRAM_EPSILON, MAX_HISTOGRAM_EPSILON = 0.01, 100.0
#: Range of delta accepted by the calibration.
MIN_HISTOGRAM_DELTA = 1e-14
#: Flooding parameters b = 1 - c (1 - a) tried by the calibration (c values).
_FLOOD_GRID = (0.04, 0.07, 0.1, 0.14, 0.2, 0.28, 0.4, 0.56, 0.8)
_MAX_FLOOD_SHAPE = 1e8


def _smallest_flood_shape(delta_of: Any, target: float, ratio: float) -> float | None:
    """Smallest r (to the factor ``ratio``) with delta_of(r) <= target; the result satisfies it."""
    try:
        hi = 1.0
        while delta_of(hi) > target:
            hi *= 2.0
            if hi > _MAX_FLOOD_SHAPE:
                return None
        lo = hi / 2.0 if hi > 1.0 else 1e-6
        if delta_of(lo) <= target:
            return lo
        while hi / lo > ratio:
            mid = math.sqrt(lo * hi)
            if delta_of(mid) <= target:
                hi = mid
            else:
                lo = mid
    except _TooManyAtomsError:  # this flooding parameter needs more atoms than allowed
        return None
    return hi


def calibrate_shuffled_histogram(epsilon: float, delta: float, central_fraction: float = 0.9,
                                 ) -> tuple[float, float, float]:
    """Noise parameters making :class:`ShuffledHistogram` (epsilon, delta)-DP on its full view.

    The per-bin discrete-Laplace parameter is eps_c = central_fraction * epsilon / 2 (the bin
    counts have L1 sensitivity 2, so with unbounded flooding the view tends to
    (2 eps_c)-DP); the flooding NB(r, b) takes up the rest: for each b on a small grid, the
    smallest r with :func:`shuffled_histogram_delta` (epsilon) <= delta is found by bisection,
    and the (r, b) with the fewest expected flooding pairs r b / (1 - b) is kept. The returned
    parameters are always ones at which the exact delta was evaluated and found <= delta.

    Args:
        epsilon: Target epsilon, in [0.01, 100].
        delta: Target delta, in [1e-14, 1).
        central_fraction: Share of epsilon spent on the central noise, in (0, 1).

    Returns:
        ``(noise_parameter, flood_shape, flood_probability)``.

    Raises:
        ValueError: On parameters out of range, or if no flooding up to r = 1e8 suffices.
    """
    epsilon = _validate.check_epsilon(epsilon)
    if not MIN_HISTOGRAM_EPSILON <= epsilon <= MAX_HISTOGRAM_EPSILON:
        raise ValueError(f"epsilon must be a real number in [{MIN_HISTOGRAM_EPSILON}, "
                         f"{MAX_HISTOGRAM_EPSILON}] for the shuffled histogram; got {epsilon!r}")
    delta = _validate.check_delta(delta, allow_zero=False)
    if delta < MIN_HISTOGRAM_DELTA:
        raise ValueError(f"delta must be a real number in [{MIN_HISTOGRAM_DELTA:g}, 1) for the "
                         f"shuffled histogram; got {delta!r}")
    central_fraction = _validate.check_probability("central_fraction", central_fraction,
                                                   open_low=True, open_high=True)
    return _calibrate(epsilon, delta, central_fraction)


@functools.lru_cache(maxsize=256)
def _calibrate(epsilon: float, delta: float, central_fraction: float,
               ) -> tuple[float, float, float]:
    """The search of :func:`calibrate_shuffled_histogram` on validated floats (cached)."""
    eps_c = central_fraction * epsilon / 2.0
    one_minus_a = -math.expm1(-eps_c)
    tail = delta * 1e-4

    def make(b: float) -> Any:
        return lambda r: shuffled_histogram_delta(epsilon, noise_parameter=eps_c, flood_shape=r,
                                                  flood_probability=b, tail_bound=tail)

    best: tuple[float, float, float] | None = None
    for c in _FLOOD_GRID:
        b = 1.0 - c * one_minus_a
        if not 0.01 <= b < 1.0:
            continue
        r = _smallest_flood_shape(make(b), delta, 1.02)
        if r is not None and (best is None or r * b / (1.0 - b) < best[0]):
            best = (r * b / (1.0 - b), b, r)
    if best is None:
        raise ValueError(f"cannot calibrate the shuffled histogram to ({epsilon}, {delta})-DP "
                         f"with central_fraction={central_fraction}: no flooding up to shape "
                         f"{_MAX_FLOOD_SHAPE:g} suffices within {MAX_HISTOGRAM_ATOMS} atoms of "
                         f"the exact accounting; change central_fraction (or epsilon)")
    _, b, _ = best
    r = _smallest_flood_shape(make(b), delta, 1.0 + 1e-4)
    if r is None:  # pragma: no cover - a coarser r already satisfied the target
        r = best[2]
    return eps_c, r, b


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShuffledHistogram(Mechanism):
    """Multi-message shuffled histogram with distributed discrete-Laplace noise and flooding.

    Construction (Ghazi, Kumar, Manurangsi, Pagh, ICML 2020, "Private counting from anonymous
    messages", and its real-summation version Ghazi, Kumar, Manurangsi, Pagh, Sinha, ICML 2021):
    user i, holding bin x_i in [0, num_bins), sends to the shuffler

    - one message (x_i, +1);
    - for every bin j: X_ij messages (j, +1) and Y_ij messages (j, -1), with X_ij, Y_ij ~
      NB(1/n, 1 - a), a = e^-eps_c (``noise_parameter`` = eps_c);
    - for every bin j: F_ij *pairs* of messages (j, +1), (j, -1), with F_ij ~ NB(r/n, 1 - b)
      ("flooding", ``flood_shape`` = r, ``flood_probability`` = b).

    NB(s, p) is numpy's negative binomial (shape s, success probability p: pmf
    C(k+s-1, k) p^s (1-p)^k; a non-integer shape is allowed). Negative binomials with a common
    success probability add their shapes, so per bin the
    shares sum to X_j, Y_j ~ NB(1, 1 - a) = Geometric and F_j ~ NB(r, 1 - b), and
    X_j - Y_j ~ DLap(eps_c): P[k] = (1-a)/(1+a) a^|k| (a difference of two i.i.d. geometrics
    is discrete Laplace; negative-binomial ("Polya") shares of it are the distributed noise of
    Balle-Bell-Gascon-Nissim, CCS 2020, and of Ghazi et al. 2020). The analyzer's estimate of
    bin j is (#(j, +1)) - (#(j, -1)) = count_j + DLap(eps_c): unbiased, variance 2a/(1-a)^2.

    Soundness (what the guarantee covers): the analyzer sees the shuffled multiset of
    messages, i.e. for every bin the two counts P_j = #(j, +1) and M_j = #(j, -1) -- *not*
    only their difference. One-sided noise alone would not be private in that view (P_j
    reveals the true count plus non-negative noise); the flooding pairs are what hides it, and
    they cost a delta. The claimed (epsilon, delta), for replace-one neighbours (one user's
    bin changes), is computed **exactly for this full view**
    by :func:`shuffled_histogram_delta` (derivation there) and calibrated by
    :func:`calibrate_shuffled_histogram`; it holds for any number of users n (the aggregate
    noise does not depend on n), provided all n users follow the protocol. The constants of the
    papers' own theorems are not used (they could not be checked here); the construction is
    theirs, the accounting is exact.

    :meth:`sample` returns that view (drawing the aggregate noise, which has exactly the law of
    the per-user protocol run by :meth:`protocol_sample`): an int64 array of shape
    ``(n, num_bins, 2)`` with
    ``[..., j, 0] = P_j`` and ``[..., j, 1] = M_j``; :meth:`shuffled_messages` expands one
    view into the shuffled message list; :meth:`estimate` is the analyzer.

    Limits: the exact accounting sums over at most 2^21 atoms of the per-bin statistic (about
    log(1/delta)/eps_c for the geometric noise plus the flooding quantile), so a tiny
    ``central_fraction * epsilon`` (which asked for petabytes before) is refused by name; one
    output draws 3 num_bins values and a call at most 10^8; the real protocol
    (:meth:`protocol_sample`) draws 3 num_users num_bins values per output, also capped at
    10^8 per call; :meth:`shuffled_messages` refuses views of more than 10^8 messages.

    Attributes:
        epsilon: Claimed epsilon, in [0.01, 100].
        delta: Claimed delta, in [1e-14, 1).
        num_users: Number of users n (an integer in [1, 10^8]).
        num_bins: Number of bins (an integer in [2, 10^8 / 3]).
        central_fraction: Share of epsilon spent on the central noise: eps_c =
            central_fraction * epsilon / 2 (default 0.9).
        noise_parameter: eps_c (derived).
        flood_shape: r (derived).
        flood_probability: b (derived).
    """

    reference = ("Ghazi-Kumar-Manurangsi-Pagh ICML 2020 (construction); exact privacy of the "
                 "full message view computed by shuffled_histogram_delta")

    epsilon: float
    delta: float
    num_users: int
    num_bins: int
    central_fraction: float = 0.9
    noise_parameter: float = dataclasses.field(init=False)
    flood_shape: float = dataclasses.field(init=False)
    flood_probability: float = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        epsilon = _validate.check_epsilon(self.epsilon)
        delta = _validate.check_delta(self.delta, allow_zero=False)
        num_users = _validate.check_size("num_users", self.num_users)
        num_bins = _validate.check_size("num_bins", self.num_bins, minimum=2,
                                        maximum=_validate.MAX_SAMPLE_VALUES // 3)
        fraction = _validate.check_probability("central_fraction", self.central_fraction,
                                               open_low=True, open_high=True)
        eps_c, r, b = calibrate_shuffled_histogram(epsilon, delta, fraction)
        for name, val in (("epsilon", epsilon), ("delta", delta), ("num_users", num_users),
                          ("num_bins", num_bins), ("central_fraction", fraction),
                          ("noise_parameter", eps_c), ("flood_shape", r),
                          ("flood_probability", b)):
            object.__setattr__(self, name, val)

    @property
    def sensitivity(self) -> Sensitivity:
        """One user changing bins moves the count vector by L1 distance 2."""
        return Sensitivity(value=2, norm=Norm.L1)

    @property
    def event(self) -> _dp.DpEvent:
        return ShuffledHistogramDpEvent(self.epsilon, self.delta, self.num_users, self.num_bins)

    @property
    def _a(self) -> float:
        return math.exp(-self.noise_parameter)

    def delta_at(self, epsilon: float) -> float:
        """Exact delta(epsilon) of the full message view (:func:`shuffled_histogram_delta`)."""
        return shuffled_histogram_delta(epsilon, noise_parameter=self.noise_parameter,
                                        flood_shape=self.flood_shape,
                                        flood_probability=self.flood_probability,
                                        tail_bound=self.delta * 1e-4)

    @property
    def expected_messages_per_user(self) -> float:
        """1 + num_bins * (2 E[X] + 2 E[F]) / n, with E[X] = a/(1-a), E[F] = r b/(1-b)."""
        a, b = self._a, self.flood_probability
        per_bin = 2.0 * a / (1.0 - a) + 2.0 * self.flood_shape * b / (1.0 - b)
        return 1.0 + self.num_bins * per_bin / self.num_users

    @property
    def noise_variance(self) -> float:
        """Variance 2a/(1-a)^2 of the error of every estimated count (discrete Laplace)."""
        a = self._a
        return 2.0 * a / (1.0 - a) ** 2

    # ------------------------------------------------------------------ inputs
    def _check_value(self, value: Any) -> np.ndarray:
        arr = _validate.as_integer_array(
            value, "value", minimum=0, maximum=self.num_bins - 1,
            what=f"an integer array of num_users={self.num_users} bin indices",
            range_text=f"[0, {self.num_bins})")
        if arr.shape != (self.num_users,):
            raise ValueError(f"value must have shape (num_users,) = ({self.num_users},), one bin "
                             f"per user; got shape {arr.shape}")
        return arr

    def _values_per_output(self, value: Any) -> int:
        return 3 * self.num_bins  # three noise draws per bin for every output (the view: 2)

    # ------------------------------------------------------------------ the protocol
    def user_messages(self, bin_index: int, *, rng: np.random.Generator) -> np.ndarray:
        """The messages one user sends (its local randomizer): rows ``(bin, sign)``, sign +-1."""
        rng = _validate.check_generator(rng)
        bin_index = _validate.check_int("bin_index", bin_index, minimum=0,
                                        maximum=self.num_bins - 1)
        n, k = self.num_users, self.num_bins
        x = rng.negative_binomial(1.0 / n, 1.0 - self._a, size=k)
        y = rng.negative_binomial(1.0 / n, 1.0 - self._a, size=k)
        f = rng.negative_binomial(self.flood_shape / n, 1.0 - self.flood_probability, size=k)
        bins = np.arange(k)
        plus = np.concatenate([[bin_index], np.repeat(bins, x + f)])
        minus = np.repeat(bins, y + f)
        return np.concatenate([np.stack([plus, np.ones_like(plus)], axis=1),
                               np.stack([minus, -np.ones_like(minus)], axis=1)]).astype(np.int64)

    def _user_share_sums(self, shape: float, success: float, rows: int,
                         rng: np.random.Generator) -> np.ndarray:
        """Per bin, the sum over all users of their own NB(shape, success) shares."""
        n, k = self.num_users, self.num_bins
        total = np.zeros((rows, k), dtype=np.int64)
        chunk = max(1, _BLOCK_ENTRIES // (rows * k))
        for start in range(0, n, chunk):  # user chunks bound memory; one pass when it fits
            users = min(chunk, n - start)
            total += rng.negative_binomial(shape, success, size=(rows, users, k)).sum(axis=1)
        return total

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """The analyzer's view, drawing each bin's *aggregate* noise directly.

        Sums of independent NB(s_i, p) are NB(sum s_i, p), so per bin the users' shares add up
        to X, Y ~ NB(1, 1-a) and F ~ NB(r, 1-b): the view has exactly the law of the real
        protocol (:meth:`protocol_sample`, checked against it by the tests) at
        O(n * num_bins) draws instead of O(n * num_bins * num_users).
        """
        counts = np.bincount(value, minlength=self.num_bins)
        size = (n, self.num_bins)
        x = rng.negative_binomial(1.0, 1.0 - self._a, size=size)
        y = rng.negative_binomial(1.0, 1.0 - self._a, size=size)
        f = rng.negative_binomial(self.flood_shape, 1.0 - self.flood_probability, size=size)
        return np.stack([counts + x + f, y + f], axis=-1).astype(np.int64)

    def protocol_sample(self, value: Any, n: int, *, rng: np.random.Generator) -> np.ndarray:
        """``n`` views produced by running the real protocol: every user draws its own shares.

        Each user sends its (bin, +1) message and, for every bin, its own NB(1/n, 1-a) +1 and
        -1 shares and NB(r/n, 1-b) flooding pairs (:meth:`user_messages`); the server counts
        the shuffled messages. Same law as :meth:`sample`, num_users times slower.
        """
        n = _validate.check_sample_count(n)
        rng = _validate.check_generator(rng)
        counts = np.bincount(self._check_value(value), minlength=self.num_bins)
        users = self.num_users
        _validate.check_output_size(n, 3 * users * self.num_bins,
                                    what="shares drawn per output (3 num_users num_bins)")
        out = np.empty((n, self.num_bins, 2), dtype=np.int64)
        rows = max(1, _BLOCK_ENTRIES // (users * self.num_bins))
        for start in range(0, n, rows):  # blocks of outputs, never one output at a time
            m = min(rows, n - start)
            x = self._user_share_sums(1.0 / users, 1.0 - self._a, m, rng)
            y = self._user_share_sums(1.0 / users, 1.0 - self._a, m, rng)
            f = self._user_share_sums(self.flood_shape / users, 1.0 - self.flood_probability,
                                      m, rng)
            out[start:start + m, :, 0] = counts + x + f
            out[start:start + m, :, 1] = y + f
        return out

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """All users in bin 0, versus user 0 moved to bin 1.

        The privacy loss of the view does not depend on the other users' bins (the noise is
        data-independent and only the two affected bins differ), so every such pair is worst
        case.
        """
        first = np.zeros(self.num_users, dtype=np.int64)
        second = first.copy()
        second[0] = 1
        return first, second

    # ------------------------------------------------------------------ server side
    def _check_view(self, view: Any) -> np.ndarray:
        try:
            arr = np.asarray(view)
        except (TypeError, ValueError) as exc:
            raise ValueError("view must be an integer array of shape (..., num_bins, 2)") from exc
        if arr.dtype.kind not in "iu":
            raise ValueError(f"view must hold integer message counts; got dtype {arr.dtype}")
        if arr.ndim < 2 or arr.shape[-2:] != (self.num_bins, 2):
            raise ValueError(f"view must have shape (..., num_bins={self.num_bins}, 2); got "
                             f"shape {arr.shape}")
        if arr.size and int(arr.min()) < 0:
            raise ValueError("view must hold non-negative message counts")
        return arr.astype(np.int64)

    def estimate(self, view: Any) -> np.ndarray:
        """The analyzer: estimated histogram #(j, +1) - #(j, -1) per bin (unbiased).

        Args:
            view: One view (``(num_bins, 2)``) or a batch (``(..., num_bins, 2)``).

        Returns:
            int64 estimates of shape ``(..., num_bins)``: true count + DLap(eps_c) noise.
        """
        arr = self._check_view(view)
        return arr[..., 0] - arr[..., 1]

    def shuffled_messages(self, view: Any, *, rng: np.random.Generator) -> np.ndarray:
        """The message multiset of one view, in uniformly random order: rows ``(bin, sign)``."""
        rng = _validate.check_generator(rng)
        arr = self._check_view(view)
        if arr.ndim != 2:
            raise ValueError(f"view must be one view of shape (num_bins, 2); got {arr.shape}")
        total = int(arr.sum(dtype=object))
        if total > _validate.MAX_SAMPLE_VALUES:
            raise ValueError(f"view must hold at most {_validate.MAX_SAMPLE_VALUES:.0e} messages "
                             f"to be expanded into a message list; got {total}")
        bins = np.arange(self.num_bins)
        plus = np.repeat(bins, arr[:, 0])
        minus = np.repeat(bins, arr[:, 1])
        messages = np.concatenate([np.stack([plus, np.ones_like(plus)], axis=1),
                                   np.stack([minus, -np.ones_like(minus)], axis=1)])
        return messages[rng.permutation(messages.shape[0])].astype(np.int64)
