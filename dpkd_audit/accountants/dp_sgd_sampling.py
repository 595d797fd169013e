"""DP-SGD under the batch samplers people run: Poisson, shuffled, sequential, balls-in-bins.

Opacus's accountant (and :mod:`~dpkd_audit.accountants.dp_sgd`) assumes Poisson subsampling:
every record joins every step's batch independently with probability q. Training loops often
run something else - a ``DataLoader(shuffle=True)`` cut into fixed-size batches, the same order
every epoch, or each record sent to one random step of each epoch - and report the Poisson
figure anyway. This module gives, for each sampler, an upper bound on what actually runs, says
how tight it is, and (for shuffling) the published kind of lower bound under it.

One epoch is ``t = ceil(N / B)`` steps (``len(data_loader)``); ``E`` epochs; noise multiplier
sigma; every record's clipped gradient has norm at most C (units of C throughout).

- :attr:`DpSgdSampling.POISSON`: the Poisson-subsampled Gaussian at q = 1 / t, ``E t`` steps,
  by PLD (Zhu-Dong-Wang 2022; :mod:`~dpkd_audit.accountants.pld`), add/remove-one. Tight.
- :attr:`DpSgdSampling.SEQUENTIAL` (the same batches every epoch) and
  :attr:`DpSgdSampling.SHUFFLE` (a fresh permutation each epoch, cut into batches of B): each
  record is in exactly one batch per epoch (at most one with ``drop_last``). Fixed-size batches
  make the number of steps and every batch's membership depend on N, so add/remove-one does not
  apply; the neighbouring relations are *zero-out* (one record's gradient replaced by zero, its
  slot kept: Kairouz et al. 2021, Chua et al. 2024) with sensitivity C, and *replace-one* with
  sensitivity 2C. Given the batches, the run is the Gaussian mechanism on the differing
  record's batch once per epoch, so E epochs compose to the Gaussian mechanism with sensitivity
  ``Delta sqrt(E)`` (Dong-Roth-Su 2022, Corollary 2.3: mu-GDP composes as sqrt(sum mu^2)); a
  shuffle is a mixture over permutations of such runs, and a mixture of (epsilon, delta)-DP
  mechanisms with data-independent weights is (epsilon, delta)-DP (joint convexity of the
  hockey-stick divergence). Exact for sequential batches (the worst-case pair attains it); for
  shuffling it is the only upper bound known (Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha,
  Zhang, "How private are DP-SGD implementations?", ICML 2024: shuffling "has not been
  amenable to easy privacy analysis, either analytically or even numerically"), so it is
  reported as loose, with a lower bound beside it (:func:`shuffle_lower_bound`).
- :attr:`DpSgdSampling.BALLS_IN_BINS`: each record joins one uniformly random step of each
  epoch, independently of the others (random 1-out-of-t allocation; Feldman and Shenfeld,
  "Privacy amplification by random allocation", 2025; "balls-and-bins" in Chua et al.,
  AISTATS 2025), under add/remove-one. The smaller of two upper bounds:
  (a) the RDP of both directions (Feldman-Shenfeld 2025, Corollary 6.2; derived in
  :func:`random_allocation_rdp`): exact for the remove direction, through Jensen's inequality
  for the add direction (loose: it grows by ``E (t - 1) / (2 t sigma^2)``);
  (b) the no-amplification bound above (sensitivity C, E epochs).

Every epsilon here is an upper bound valid at the stated delta (or, for
:func:`shuffle_lower_bound`, a lower bound: no (epsilon', delta)-DP claim with a smaller
epsilon' holds for the sampler).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math

import numpy as np
from scipy import signal, special

from dpkd_audit import _validate
from dpkd_audit._math.powers import combine_power
from dpkd_audit._math.privacy import analytic_gaussian_epsilon
from dpkd_audit.accountants.dp_sgd import DpSgdSchedule, poisson_epsilon
from dpkd_audit.accountants.rdp.conversion import epsilon_from_rdp

__all__ = [
    "RANDOM_ALLOCATION_MAX_ORDER",
    "RELATIONS",
    "BatchRelation",
    "DpSgdSampling",
    "SamplingBound",
    "gaussian_composition_epsilon",
    "random_allocation_epsilon",
    "random_allocation_rdp",
    "sampling_epsilon",
    "shuffle_lower_bound",
    "with_replacement_epsilon",
]

#: Largest integer RDP order of the random-allocation remove direction (its moments are
#: computed exactly up to this order, O(order^2 log t) work).
RANDOM_ALLOCATION_MAX_ORDER = 256


class DpSgdSampling(enum.Enum):
    """How the records of each step's batch are chosen."""

    #: Each record independently with probability q at every step (Opacus's ``DPDataLoader``).
    POISSON = "poisson"
    #: A fresh random permutation each epoch, cut into batches of B (``shuffle=True``).
    SHUFFLE = "shuffle"
    #: The same order every epoch, cut into batches of B (``shuffle=False``).
    SEQUENTIAL = "sequential"
    #: Each record to one uniformly random step of each epoch, independently (random
    #: allocation, "balls and bins").
    BALLS_IN_BINS = "balls-in-bins"

    @classmethod
    def parse(cls, text: str) -> DpSgdSampling:
        """The member named ``text``.

        Raises:
            ValueError: Naming ``sampling`` and the allowed values.
        """
        return _validate.parse_enum(cls, text, "sampling")


class BatchRelation(enum.Enum):
    """Neighbouring datasets of a DP-SGD bound (the relation it holds under)."""

    #: One record added or removed (Poisson sampling, balls-in-bins): sensitivity C.
    ADD_OR_REMOVE_ONE = "add/remove-one"
    #: One record's gradient replaced by zero, its slot in the batches kept (the counterpart of
    #: add/remove-one for fixed-size batches): sensitivity C.
    ZERO_OUT = "zero-out"
    #: One record replaced by another: sensitivity 2C.
    REPLACE_ONE = "replace-one"

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of one step's gradient sum, in units of the clipping norm C."""
        return 2.0 if self is BatchRelation.REPLACE_ONE else 1.0


#: The relations each sampler's bound is stated under (the first is the default).
RELATIONS = {
    DpSgdSampling.POISSON: (BatchRelation.ADD_OR_REMOVE_ONE,),
    DpSgdSampling.BALLS_IN_BINS: (BatchRelation.ADD_OR_REMOVE_ONE,),
    DpSgdSampling.SHUFFLE: (BatchRelation.ZERO_OUT, BatchRelation.REPLACE_ONE),
    DpSgdSampling.SEQUENTIAL: (BatchRelation.ZERO_OUT, BatchRelation.REPLACE_ONE),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingBound:
    """The epsilon of a DP-SGD run under the sampler that actually runs.

    Attributes:
        sampling: The sampler.
        relation: The neighbouring relation the bounds hold under.
        delta: The delta of every figure.
        epsilon: An upper bound on epsilon at ``delta`` for this sampler (valid).
        method: How ``epsilon`` was obtained.
        tight: Whether ``epsilon`` is known to be tight (attained by a worst-case pair) or
            close to it; ``False`` means only a loose bound is known and the truth may be far
            below it.
        note: What the bound assumes and how loose it may be, in words.
        epsilon_lower: For shuffling, a lower bound on the epsilon at ``delta``
            (:func:`shuffle_lower_bound`); ``None`` otherwise.
        lower_method: How ``epsilon_lower`` was obtained.
        epsilon_poisson: The Poisson accounting of the same schedule (what Opacus reports:
            q = 1 / t, E t steps; add/remove-one; the smaller of PLD and RDP), for comparison.
        steps_per_epoch: t.
        epochs: E.
        noise_multiplier: sigma.
    """

    sampling: DpSgdSampling
    relation: BatchRelation
    delta: float
    epsilon: float
    method: str
    tight: bool
    note: str
    epsilon_lower: float | None = None
    lower_method: str | None = None
    epsilon_poisson: float
    steps_per_epoch: int
    epochs: int
    noise_multiplier: float

    def to_dict(self) -> dict[str, object]:
        """A JSON-friendly record (enums as their values; an infinite epsilon as ``None``)."""
        out = dataclasses.asdict(self)
        out["sampling"] = self.sampling.value
        out["relation"] = self.relation.value
        for key in ("epsilon", "epsilon_lower", "epsilon_poisson"):
            value = out[key]
            out[key] = None if value is None or not math.isfinite(value) else float(value)
        return out


# --------------------------------------------------------------------------- no amplification

def gaussian_composition_epsilon(noise_multiplier: float, epochs: int, delta: float, *,
                                 sensitivity: float = 1.0) -> float:
    """Epsilon at ``delta`` of ``epochs`` Gaussian mechanisms of sensitivity ``sensitivity`` C.

    The E-fold composition of N(0, (sigma C)^2) with L2 sensitivity Delta C is the Gaussian
    mechanism with sensitivity ``Delta sqrt(E)`` (Dong, Roth, Su, "Gaussian differential
    privacy", JRSS-B 2022, Corollary 2.3), whose exact curve is Balle-Wang 2018, Theorem 8
    (:func:`~dpkd_audit._math.privacy.analytic_gaussian_epsilon`). The bound of a record that
    joins one batch per epoch, without any amplification.
    """
    sigma = _validate.check_positive("noise_multiplier", noise_multiplier)
    epochs = _validate.check_int("epochs", epochs, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    return analytic_gaussian_epsilon(sigma, delta, sensitivity * math.sqrt(epochs))


# --------------------------------------------------------------------------- random allocation

def _log_binomials(order: int) -> np.ndarray:
    """``log C(a, j)`` for 0 <= j <= a <= order, as an (order+1, order+1) array (-inf above)."""
    a = np.arange(order + 1, dtype=np.float64)
    table = (special.gammaln(a[:, None] + 1) - special.gammaln(a[None, :] + 1)
             - special.gammaln(np.maximum(a[:, None] - a[None, :], 0) + 1))
    return np.where(a[None, :] <= a[:, None], table, -np.inf)


def _moment_sum(log_a: np.ndarray, log_b: np.ndarray, log_binom: np.ndarray) -> np.ndarray:
    """Log E[(A + B)^a] for a = 0..order from log E[A^j], log E[B^j] (A, B independent)."""
    order = log_a.size - 1
    a = np.arange(order + 1)
    diff = a[:, None] - a[None, :]  # a - j
    terms = log_binom + log_a[None, :] + np.where(diff >= 0, log_b[np.maximum(diff, 0)], -np.inf)
    return special.logsumexp(terms, axis=1)


@functools.lru_cache(maxsize=64)
def _remove_log_moments(noise_multiplier: float, steps: int, order: int) -> np.ndarray:
    """Log E[S^a] (a = 0..order), S = sum of ``steps`` i.i.d. exp((Y - 1/2) / sigma^2).

    Y ~ N(0, sigma^2): E[exp(j (Y - 1/2) / sigma^2)] = exp(j (j - 1) / (2 sigma^2)) (the
    Gaussian moment generating function); the moments of a sum of independent terms follow
    from the binomial theorem, and the sum of ``steps`` copies by repeated doubling
    (O(order^2 log steps)).
    """
    j = np.arange(order + 1, dtype=np.float64)
    single = j * (j - 1.0) / (2.0 * noise_multiplier * noise_multiplier)
    log_binom = _log_binomials(order)
    return combine_power(single, steps, lambda a, b: _moment_sum(a, b, log_binom))


def random_allocation_rdp(noise_multiplier: float, steps_per_epoch: int, epochs: int,
                          orders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RDP of E epochs of random 1-out-of-t allocation of the Gaussian mechanism, both ways.

    Per epoch a record joins one uniformly random step of ``t`` and each step releases its
    batch's gradient sum plus N(0, sigma^2) noise (units of C). On its coordinate the output is
    ``P = (1/t) sum_i N(e_i, sigma^2 I_t)`` with the record and ``Q = N(0, sigma^2 I_t)``
    without (Feldman and Shenfeld 2025: the worst case of the Gaussian mechanism under random
    allocation), and P/Q(y) = (1/t) S with S = sum_i exp((y_i - 1/2) / sigma^2).

    - Remove direction, exact at integer orders (Feldman-Shenfeld 2025, Corollary 6.2, first
      part): D_a(P || Q) = (log E_Q[S^a] - a log t) / (a - 1), the moments of S being exact
      (:func:`_remove_log_moments`).
    - Add direction, an upper bound at every order (Corollary 6.2, second part): by Jensen's
      inequality 1 / mean_i exp(x_i) <= exp(-mean_i x_i), so E_Q[(Q/P)^(a-1)] <=
      E_Q[exp(-(a-1) mean_i (y_i - 1/2) / sigma^2)] = exp((a-1)/(2 sigma^2) + (a-1)^2/(2 t
      sigma^2)), i.e. D_a(Q || P) <= (a + t - 1) / (2 t sigma^2).

    Both compose additively over the E epochs (Mironov 2017, Proposition 1).

    Args:
        noise_multiplier: sigma.
        steps_per_epoch: t.
        epochs: E.
        orders: Integer orders >= 2 (at most :data:`RANDOM_ALLOCATION_MAX_ORDER`).

    Returns:
        ``(remove, add)``: the two RDP curves at ``orders``.
    """
    sigma = _validate.check_positive("noise_multiplier", noise_multiplier)
    t = _validate.check_int("steps_per_epoch", steps_per_epoch, minimum=1)
    epochs = _validate.check_int("epochs", epochs, minimum=1)
    a = np.asarray(orders)
    if (a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer) or a.min() < 2
            or a.max() > RANDOM_ALLOCATION_MAX_ORDER):
        raise ValueError(f"orders must be a 1-D array of integers in [2, "
                         f"{RANDOM_ALLOCATION_MAX_ORDER}]; got {orders!r}")
    log_m = _remove_log_moments(sigma, t, int(a.max()))
    af = a.astype(np.float64)
    remove = np.maximum(epochs * (log_m[a] - af * math.log(t)) / (af - 1.0), 0.0)
    add = epochs * (af + t - 1.0) / (2.0 * t * sigma * sigma)
    return remove, add


def random_allocation_epsilon(noise_multiplier: float, steps_per_epoch: int, epochs: int,
                              delta: float) -> tuple[float, str]:
    """Upper bound on epsilon at ``delta`` of E epochs of balls-in-bins DP-SGD (add/remove-one).

    The smaller of the RDP bound of :func:`random_allocation_rdp` (each direction converted at
    ``delta`` with the conversion of :func:`~dpkd_audit.accountants.rdp.conversion.
    epsilon_from_rdp`, the larger of the two kept) and the no-amplification bound
    (:func:`gaussian_composition_epsilon`, sensitivity C; a mixture over the allocation of
    Gaussian mechanisms is no worse than each of them).

    Returns:
        ``(epsilon, method)``.
    """
    delta = _validate.check_delta(delta, allow_zero=False)
    orders = np.arange(2, RANDOM_ALLOCATION_MAX_ORDER + 1)
    remove, add = random_allocation_rdp(noise_multiplier, steps_per_epoch, epochs, orders)
    eps_remove, _ = epsilon_from_rdp(orders, remove, delta)
    eps_add, _ = epsilon_from_rdp(orders, add, delta)
    rdp_eps = max(eps_remove, eps_add)
    flat = gaussian_composition_epsilon(noise_multiplier, epochs, delta)
    if rdp_eps <= flat:
        side = "add" if eps_add >= eps_remove else "remove"
        return rdp_eps, (f"random-allocation RDP (Feldman-Shenfeld 2025, Cor. 6.2; the {side} "
                         "direction decides)")
    return flat, "Gaussian composition, one participation per epoch (no amplification)"


# --------------------------------------------------------------------------- shuffle lower bound

def _max_statistic_cdf(c: np.ndarray, sigma: float, steps: int, shift: float) -> np.ndarray:
    """Log P[max_i y_i <= c], y = shift e_tau + N(0, sigma^2 I_t) (tau's value is shifted)."""
    rest = (steps - 1) * special.log_ndtr(c / sigma)
    return rest + special.log_ndtr((c - shift) / sigma)


def _binned(log_cdf: np.ndarray) -> np.ndarray:
    """Probabilities of the bins (-inf, c_0], (c_0, c_1], ..., (c_K, inf) from log CDF values."""
    cdf = np.exp(log_cdf)
    surv = -np.expm1(log_cdf)  # accurate where the CDF is near 1
    lower = np.concatenate(([0.0], cdf))
    upper = np.concatenate((cdf, [1.0]))
    s_lower = np.concatenate(([1.0], surv))
    s_upper = np.concatenate((surv, [0.0]))
    by_cdf = upper - lower
    by_surv = s_lower - s_upper
    return np.maximum(np.where(np.concatenate((cdf, [1.0])) > 0.5, by_surv, by_cdf), 0.0)


#: Largest per-epoch privacy loss kept (larger losses are rounded down to it).
_LOSS_CAP = 30.0
#: Losses below this (per epoch) are dropped: their mass under P is at most e^-30.
_LOSS_FLOOR = -30.0
#: Safety margin subtracted from the composed delta (float rounding of the convolutions).
_FFT_MARGIN = 1e-12


def _loss_step(epochs: int) -> float:
    """Grid step of the rounded-down per-epoch losses.

    E epochs lose at most ``E x step`` in epsilon: 0.01 up to 10 epochs; beyond, the step grows
    so that the composed grid stays under 2 million points (0.3 at 100 epochs).
    """
    return max(min(1e-3, 0.01 / epochs), epochs * (_LOSS_CAP - _LOSS_FLOOR) / 2e6)


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(signal.fftconvolve(a, b), 0.0)


def _composed_losses(sigma: float, steps: int, epochs: int,
                     shifts: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Rounded-down privacy losses of E epochs of the max-statistic pair and their P-mass.

    Bins of the max over the epoch's t steps (a post-processing, so their divergence is at most
    the mechanism's); each bin's privacy loss rounded *down* to a grid, capped at
    ``_LOSS_CAP`` and dropped below ``_LOSS_FLOOR`` (each can only lower E_P[(1 - e^(eps -
    L))_+]); the E-fold sum of losses under P by FFT convolution (exponentiation by squaring,
    negative rounding noise clipped at 0).

    Returns:
        ``(values, mass)``: the grid of summed losses and the P-probability of each.
    """
    s_p, s_q = shifts
    top = max(s_p, s_q) + sigma * (math.sqrt(2.0 * math.log(max(steps, 2))) + 9.0)
    grid = np.linspace(-9.0 * sigma, top, 4001)
    p = _binned(_max_statistic_cdf(grid, sigma, steps, s_p))
    q = _binned(_max_statistic_cdf(grid, sigma, steps, s_q))
    keep = p > 0
    safe_q = np.where(q[keep] > 0, q[keep], 1.0)
    loss = np.where(q[keep] > 0, np.log(p[keep]) - np.log(safe_q), _LOSS_CAP)
    loss = np.minimum(loss, _LOSS_CAP)
    mass = p[keep]
    low = loss >= _LOSS_FLOOR
    step = _loss_step(epochs)
    index = np.floor((loss[low] - _LOSS_FLOOR) / step).astype(np.int64)
    pmf = np.bincount(index, weights=mass[low])
    total = combine_power(pmf, epochs, _convolve)
    values = epochs * _LOSS_FLOOR + step * np.arange(total.size)
    return values, total


def _hockey_stick(values: np.ndarray, mass: np.ndarray, epsilon: float) -> float:
    """E_P[(1 - e^(eps - L))_+] minus the rounding margin: a lower bound on delta(eps)."""
    above = values > epsilon
    return float(np.sum(mass[above] * -np.expm1(epsilon - values[above]))) - _FFT_MARGIN


def shuffle_lower_bound(noise_multiplier: float, steps_per_epoch: int, epochs: int,
                        delta: float, *,
                        relation: BatchRelation = BatchRelation.ZERO_OUT) -> float:
    """A lower bound on epsilon at ``delta`` of E epochs of shuffled fixed-size-batch DP-SGD.

    The construction of Chua et al. 2024 (ICML, Section 4) on one coordinate: every other
    record's gradient is -C, so every batch of B records sums to -B C except the differing
    record's batch tau, uniformly placed by the shuffle. In units of C above that baseline,
    zero-out neighbours give tau's batch +2 (record +C) against +1 (record zeroed, its slot
    kept) - the slot itself shows; replace-one neighbours give +2 (record +C) against 0
    (record -C). (Zero-out is also evaluated with the other records' gradients 0, i.e. +1
    against 0, and the larger bound kept.) The test statistic is the largest of the epoch's
    t noisy sums (as in Chua et al.), whose distribution is explicit:
    P[max <= c] = Phi(c/sigma)^(t-1) Phi((c - s)/sigma). Its E-fold hockey-stick divergence,
    computed as in :func:`_composed_losses`, is at most the mechanism's; the returned
    epsilon is the largest at which it still exceeds ``delta`` (0 if none), so no
    (epsilon', delta)-DP claim with epsilon' below it holds for shuffled batches.

    Args:
        noise_multiplier: sigma.
        steps_per_epoch: t (batches per epoch).
        epochs: E (a fresh shuffle each epoch).
        delta: Target delta in (0, 1).
        relation: :attr:`BatchRelation.ZERO_OUT` or :attr:`BatchRelation.REPLACE_ONE`.

    Returns:
        The lower bound (0 when the construction refutes nothing at ``delta``).
    """
    sigma = _validate.check_positive("noise_multiplier", noise_multiplier)
    t = _validate.check_int("steps_per_epoch", steps_per_epoch, minimum=1)
    epochs = _validate.check_int("epochs", epochs, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    if relation not in RELATIONS[DpSgdSampling.SHUFFLE]:
        raise ValueError(f"relation must be zero-out or replace-one for shuffled batches; got "
                         f"{relation!r}")
    pairs = ([(2.0, 0.0)] if relation is BatchRelation.REPLACE_ONE
             else [(2.0, 1.0), (1.0, 0.0)])
    best = 0.0
    for shifts in pairs:
        values, mass = _composed_losses(sigma, t, epochs, shifts)
        if _hockey_stick(values, mass, 0.0) <= delta:
            continue
        lo, hi = 0.0, float(values[-1])  # delta(eps) = 0 beyond the largest loss
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            if _hockey_stick(values, mass, mid) > delta:
                lo = mid
            else:
                hi = mid
            if hi - lo <= 1e-9 * max(hi, 1.0):
                break
        best = max(best, lo)
    return best


# --------------------------------------------------------------------------- with replacement

def with_replacement_epsilon(noise_multiplier: float, batch_size: int, max_share: float,
                             steps: int, delta: float) -> float:
    """Upper bound at ``delta`` on ``steps`` batches drawn with replacement (weighted sampling).

    Each step draws B records independently with replacement, record i with probability
    ``p_i`` (``torch.utils.data.WeightedRandomSampler``): record i appears K ~ Binomial(B,
    p_i) times, adding K times its clipped gradient, so on its own the step is the mixture of
    Gaussian mechanisms of sensitivities k C with probabilities Binomial(k; B, p)
    (dp_accounting's ``MixtureOfGaussiansDpEvent``, by PLD) - under zero-out neighbours and
    weights that are public constants (weights computed from the private data, class
    frequencies say, are themselves a release this bound does not cover). The largest share
    ``p = max_i p_i`` is the worst record. The binomial is cut at the smallest k whose tail
    probability ``tau`` keeps ``steps x tau <= delta / 100``; the composed mechanism is then
    within ``steps x tau`` of the cut one in total variation (a union bound), so the cut one is
    evaluated at ``delta - steps x tau``.

    Args:
        noise_multiplier: sigma.
        batch_size: B, draws per step.
        max_share: p, the largest weight divided by the weights' sum, in (0, 1].
        steps: Steps.
        delta: Target delta in (0, 1).
    """
    from dp_accounting import dp_event as _dp
    from dp_accounting.pld import pld_privacy_accountant
    from scipy import stats

    sigma = _validate.check_positive("noise_multiplier", noise_multiplier)
    b = _validate.check_int("batch_size", batch_size, minimum=1)
    p = _validate.check_probability("max_share", max_share, open_low=True)
    steps = _validate.check_int("steps", steps, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    budget = delta / (100.0 * steps)
    k_max = b
    for k in range(b + 1):
        if float(stats.binom.sf(k, b, p)) <= budget:
            k_max = k
            break
    tau = float(stats.binom.sf(k_max, b, p)) if k_max < b else 0.0
    ks = list(range(k_max + 1))
    probs = stats.binom.pmf(ks, b, p)
    probs = (probs / probs.sum()).tolist()
    # a coarser grid than dp_accounting's default 1e-4 (ten times faster; its discretisation is
    # pessimistic, so still an upper bound)
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(_dp.MixtureOfGaussiansDpEvent(sigma, ks, probs), steps)
    return float(accountant.get_epsilon(delta - steps * tau))


# --------------------------------------------------------------------------- dispatch

def sampling_epsilon(schedule: DpSgdSchedule, *, sampling: DpSgdSampling,
                     noise_multiplier: float, epochs: int, delta: float,
                     relation: BatchRelation | None = None) -> SamplingBound:
    """Epsilon at ``delta`` of a DP-SGD schedule under the sampler that actually runs.

    Args:
        schedule: N and B (``t = ceil(N / B)`` steps per epoch, as ``len(data_loader)``).
        sampling: The sampler.
        noise_multiplier: sigma (> 0).
        epochs: E (>= 1).
        delta: Target delta in (0, 1).
        relation: The neighbouring relation (default: add/remove-one for Poisson and
            balls-in-bins, zero-out for shuffled and sequential batches; see
            :data:`RELATIONS`).

    Returns:
        The :class:`SamplingBound`, with the Poisson figure of the same schedule beside it.

    Raises:
        ValueError: For a parameter out of range or a relation the sampler's bound does not
            hold under (naming it).
    """
    if not isinstance(schedule, DpSgdSchedule):
        raise ValueError(f"schedule must be a DpSgdSchedule; got {type(schedule).__name__}")
    if not isinstance(sampling, DpSgdSampling):
        raise ValueError(f"sampling must be a DpSgdSampling; got {sampling!r}")
    sigma = _validate.check_positive("noise_multiplier", noise_multiplier)
    epochs = _validate.check_int("epochs", epochs, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    allowed = RELATIONS[sampling]
    relation = allowed[0] if relation is None else relation
    if relation not in allowed:
        raise ValueError(f"relation must be one of {', '.join(r.value for r in allowed)} for "
                         f"{sampling.value} sampling; got {relation!r}")
    t = schedule.steps_per_epoch
    poisson = float(poisson_epsilon(schedule.sampling_probability, sigma, schedule.steps(epochs),
                                    delta))
    common = {"sampling": sampling, "relation": relation, "delta": delta,
              "epsilon_poisson": poisson, "steps_per_epoch": t, "epochs": epochs,
              "noise_multiplier": sigma}
    if sampling is DpSgdSampling.POISSON:
        return SamplingBound(epsilon=poisson, method="Poisson-subsampled Gaussian (PLD, or RDP "
                             "where tighter)",
                             tight=True, note="the sampler the accountant assumes", **common)
    if sampling is DpSgdSampling.BALLS_IN_BINS:
        eps, method = random_allocation_epsilon(sigma, t, epochs, delta)
        return SamplingBound(
            epsilon=eps, method=method, tight=False,
            note=("an upper bound; its add direction (Jensen) grows by E(t-1)/(2 t sigma^2) "
                  "and may be far above the truth, which Feldman-Shenfeld 2025 put near "
                  "Poisson's"), **common)
    flat = gaussian_composition_epsilon(sigma, epochs, delta, sensitivity=relation.sensitivity)
    method = (f"Gaussian composition, one participation per epoch, sensitivity "
              f"{relation.sensitivity:g} C (no amplification)")
    if sampling is DpSgdSampling.SEQUENTIAL:
        return SamplingBound(epsilon=flat, method=method, tight=True,
                             note="exact: the same batches every epoch amplify nothing",
                             **common)
    lower = shuffle_lower_bound(sigma, t, epochs, delta, relation=relation)
    return SamplingBound(
        epsilon=flat, method=method, tight=False,
        note=("only a loose bound is known for shuffled batches (no amplification); the "
              "truth lies between epsilon_lower and epsilon"),
        epsilon_lower=lower,
        lower_method=("max-of-batch-sums test on the worst-case datasets of Chua et al. 2024 "
                      "(other records' gradients -C), E-fold, rounded down"), **common)
