"""The Collision local randomizer for reverse k-NN answers, and its unbiased estimator.

Wang, Li, Qian, Du, Lin, Yang, "Hiding Numerical Vectors in Local Private and Shuffled
Messages", IJCAI 2021; the reverse k-NN paper (Wang et al., "Fine-grained Private Knowledge
Distillation"), Appendix A, Definition 5 and Theorem 2: the ``(d, c, epsilon, l)``-Collision
mechanism with ``d = s |Y|`` and ``c = kr``. Each client draws its own public hash seed and
reports one value ``z`` in ``[0, l)``, boosted on the hashes of its set. Re-exported by
:mod:`dpkd_audit.mechanisms.rknn`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.events import CollisionDpEvent
from dpkd_audit.mechanisms import samplers
from dpkd_audit.mechanisms.base import AuditView, Mechanism, Norm, Sensitivity
from dpkd_audit.mechanisms.rknn_answers import (
    _CHUNK_CELLS,
    _check_distinct_rows,
    _check_index_range,
    _check_rknn_shape,
    _check_shape,
)

__all__ = [
    "COLLISION_REPORT_DTYPE",
    "MAX_BLOOM_LENGTH",
    "MAX_COLLISION_EPSILON",
    "Collision",
    "collision_hash",
]

#: One Collision report: the client's public hash seed and its output z in [0, l).
COLLISION_REPORT_DTYPE = np.dtype([("seed", np.uint64), ("z", np.int64)])

#: Largest Bloom filter length accepted (hash values are reduced mod l in uint64 arithmetic).
MAX_BLOOM_LENGTH = 1 << 62

#: Largest epsilon of Collision (e^eps stays a finite double).
MAX_COLLISION_EPSILON = 700.0
#: Largest cardinality for which Collision checks its sampler exactly (one rational per h).
_EXACT_COLLISION_CHECK = 4096


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 (Steele, Lea, Flood, OOPSLA 2014): x + golden gamma, then the finaliser.

    Wrapping modulo 2^64 is intended (silenced for 0-d inputs, where numpy would warn).
    """
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        return x ^ (x >> np.uint64(31))


def collision_hash(seeds: Any, values: Any, bloom_length: int) -> np.ndarray:
    """The public hash ``H_seed(v) = splitmix64(seed xor v) mod l`` (broadcast), int64.

    numpy uint64 arithmetic wraps modulo 2^64, so this is the exact 64-bit SplitMix64 output.
    The modulo bias is at most l / 2^64.
    """
    l_ = _validate.check_int("bloom_length", bloom_length, minimum=1, maximum=MAX_BLOOM_LENGTH)
    s = np.asarray(seeds, dtype=np.uint64)
    v = np.asarray(values, dtype=np.int64).astype(np.uint64)
    return (_splitmix64(s ^ v) % np.uint64(l_)).astype(np.int64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Collision(Mechanism):
    """The (d, c, epsilon, l)-Collision mechanism: epsilon-LDP for sets of c items out of d.

    Wang, Li, Qian, Du, Lin, Yang, "Hiding Numerical Vectors in Local Private and Shuffled
    Messages", IJCAI 2021; reverse k-NN paper, Appendix A, Definition 5 and Theorem 2.

    Per client: draw a fresh public seed (uint64, independent of the data) defining the hash
    ``H(v) = splitmix64(seed xor v) mod l``; with ``h = |H(V)|`` distinct hash values of the
    input set V (``h <= c``) and ``Omega = c e^eps + l - c``, output z in ``[0, l)`` with::

        P[z | V] = e^eps / Omega                               if z in H(V),
                   (Omega - e^eps h) / ((l - h) Omega)         otherwise.

    Report = (seed, z). **Privacy** (for every seed, so for every hash function, colliding or
    not): the "otherwise" probability equals ``((c - h) e^eps + (l - c)) / ((l - h) Omega)``,
    a weighted average of e^eps and 1 (weights c - h and l - c, sum l - h) divided by Omega,
    hence in ``[1/Omega, e^eps/Omega]`` -- as is the "in" probability. So every output
    probability lies in ``[1/Omega, e^eps/Omega]`` for *every* V, and for any two inputs
    ``P[z | V] / P[z | V'] <= e^eps``; the seed's distribution does not depend on V. This needs
    ``l > h``, guaranteed by ``l >= c + 1``. The pmfs sum to one:
    ``h e^eps/Omega + (Omega - h e^eps)/Omega = 1``.

    **Estimator** (paper, after Definition 5): ``(1[H(v) = z] - 1/l) / (e^eps/Omega - 1/l)``
    is unbiased for ``1[v in V]``: for v in V, ``H(v) in H(V)`` so ``P[H(v) = z] = e^eps/Omega``;
    for v not in V, ``H(v)`` is uniform and independent of ``(H(V), z)`` when the hash behaves
    as a random function, so ``P[H(v) = z] = 1/l``. Only unbiasedness relies on the hash;
    privacy holds for any hash.

    Default ``l = round(2c - 1 + c e^eps)`` (paper Theorem 2 with c = kr), at least c + 1.

    Floating point (verified): the "in H(V)" branch is taken when ``Generator.random() <
    h e^eps_d/Omega_d``, a probability computed to a few ulps and then rounded up to the 2^-53
    grid (:func:`~dpkd_audit.mechanisms.samplers.coin_probability`); the choice within each
    branch is an exact uniform integer draw. For c <= 4096 the constructor computes the
    sampler's *exact* epsilon from these rational probabilities (:meth:`sampler_epsilon`, over
    every possible number h of distinct hash values). Above, every per-output probability is
    within a relative rho = 2^-50 Omega / min(e^eps, l - c) of the design value (the branch
    probabilities are at least e^eps/Omega and (l - c)/Omega), so the sampler is
    (eps_d + ln((1 + rho)/(1 - rho)))-LDP. The sampler runs at the *design* epsilon
    (:attr:`design_epsilon`): the claim itself when the exact check passes, else
    eps_d = eps - 3 rho - 4 ulp(eps), which keeps the real epsilon below the claim. Parameters
    for which neither works (an "outside" branch too rare for the 2^-53 grid, e.g. a huge eps
    with a short ``bloom_length``, or a ``bloom_length`` near 2^62 with a small eps, where the
    old sampler's real epsilon was several times the claim) are refused. The pmf and estimator
    formulas below use the claimed eps; they differ from the sampler's law by at most the
    relative rho (< 1e-9 with the default ``bloom_length`` and c <= 10^6).

    Attributes:
        epsilon: Claimed local epsilon of one report, in (0, 700] (and above 3 rho).
        domain_size: d, the domain ``[0, d)`` of the items (1 <= d <= 10^8).
        cardinality: c, the exact size of every input set, ``1 <= c <= d``.
        bloom_length: l, the hash range, ``c + 1 <= l <= 2^62`` (default as above).
    """

    reference = ("Wang et al. IJCAI 2021 (Collision); Wang et al. 2022 (reverse k-NN), "
                 "Def. 5, Thm 2")

    epsilon: float
    domain_size: int
    cardinality: int
    bloom_length: int | None = None

    def __post_init__(self) -> None:
        eps = _validate.check_epsilon_range(self.epsilon, maximum=MAX_COLLISION_EPSILON)
        object.__setattr__(self, "epsilon", eps)
        d = _validate.check_size("domain_size", self.domain_size)
        c = _validate.check_int("cardinality", self.cardinality, minimum=1, maximum=d)
        object.__setattr__(self, "domain_size", d)
        object.__setattr__(self, "cardinality", c)
        if self.bloom_length is None:
            default = 2 * c - 1 + c * math.exp(eps) if eps < 700 else math.inf
            if not default <= MAX_BLOOM_LENGTH:
                raise ValueError(f"epsilon={eps} is too large for the default bloom_length "
                                 f"(2c - 1 + c e^eps > 2^62); pass bloom_length explicitly")
            length = max(round(default), c + 1)
        else:
            length = _validate.check_int("bloom_length", self.bloom_length, minimum=c + 1,
                                         maximum=MAX_BLOOM_LENGTH)
        object.__setattr__(self, "bloom_length", int(length))
        if self.design_epsilon is None:
            rho = self._rounding(eps)
            raise ValueError(
                f"epsilon={eps!r} with cardinality={c} and bloom_length={length} cannot be "
                f"realised by the floating-point sampler (2^-53 coin resolution: relative "
                f"error up to {rho:.3g} on the output probabilities); use a bloom_length nearer "
                f"the default 2c - 1 + c e^eps, or a larger epsilon")

    def _rounding(self, eps: float) -> float:
        """rho(eps) = 2^-50 Omega / min(e^eps, l - c): relative error of every output probability.

        2^-50 >= 2 x (4 ulps of float error + the 2^-53 coin grid); the branch probabilities are
        at least e^eps/Omega (inside) and (l - c)/Omega (outside).
        """
        e = math.exp(eps)
        c, length = self.cardinality, self.bloom_length
        omega = c * e + length - c
        return 2.0**-50 * omega / min(e, length - c)

    def _inside_threshold(self, h: Any, design: float) -> Any:
        """The sampler's threshold for the "z in H(V)" branch: h e^eps_d / Omega_d (floats).

        The one expression used by both the sampler and the exact check, so that they agree
        bit for bit.
        """
        e_d = math.exp(design)
        return h * (e_d / (self.cardinality * e_d + self.bloom_length - self.cardinality))

    def sampler_epsilon(self, design: float) -> float:
        """Exact epsilon (rounded up) of the sampler run at ``design``, for c <= 4096.

        For every possible number h of distinct hash values, the branch probability is exactly
        P_in(h) = :func:`~dpkd_audit.mechanisms.samplers.coin_probability` of the threshold, so
        the output probabilities are exactly P_in(h)/h (inside) and (1 - P_in(h))/(l - h)
        (outside); the result is ln(largest / smallest) over all h (any two inputs).

        Raises:
            ValueError: For c > 4096 (use the bound of the class docstring).
        """
        c, length = self.cardinality, self.bloom_length
        if c > _EXACT_COLLISION_CHECK:
            raise ValueError(f"cardinality must be <= {_EXACT_COLLISION_CHECK} for the exact "
                             f"sampler check; got {c}")
        largest = smallest = None
        for h in range(1, c + 1):
            t = float(self._inside_threshold(h, design))
            if not 0.0 < t < 1.0:
                return math.inf
            inside = samplers.coin_probability(t)
            probs = (inside / h, (1 - inside) / (length - h))
            if min(probs) == 0:
                return math.inf
            largest = max(probs) if largest is None else max(largest, *probs)
            smallest = min(probs) if smallest is None else min(smallest, *probs)
        return samplers.log_ratio_upper(largest, smallest)

    @functools.cached_property
    def design_epsilon(self) -> float | None:
        """The epsilon the sampler runs at (see the class docstring); None if none works.

        The claimed epsilon itself when the exact check (c <= 4096) shows the rounded sampler
        within the claim; otherwise eps - 3 rho - 4 ulp(eps) when that is > 0 and rho <= 1e-3
        (checked exactly again for c <= 4096, by the bound above it).
        """
        eps = self.epsilon
        exact = self.cardinality <= _EXACT_COLLISION_CHECK
        if exact and self.sampler_epsilon(eps) <= eps:
            return eps
        rho = self._rounding(eps)
        design = eps - 3.0 * rho - 4.0 * math.ulp(eps)
        if rho > 1e-3 or design <= 0.0:
            return None
        if exact:
            return design if self.sampler_epsilon(design) <= eps else None
        rho_d = self._rounding(design)
        return design if design + math.log1p(rho_d) - math.log1p(-rho_d) <= eps else None

    @classmethod
    def for_reverse_knn(cls, *, epsilon: float, k: int, num_queries: int, num_classes: int,
                        r: int = 1, bloom_length: int | None = None) -> Collision:
        """The ``(s |Y|, kr, epsilon, l)``-Collision mechanism of the paper's Appendix A."""
        k, s, y, r = _check_rknn_shape(k, num_queries, num_classes, r)
        return cls(epsilon=epsilon, domain_size=s * y, cardinality=k * r,
                   bloom_length=bloom_length)

    # ------------------------------------------------------------ probabilities
    @property
    def omega(self) -> float:
        """Normalisation Omega = c e^eps + l - c (Definition 5)."""
        return self.cardinality * math.exp(self.epsilon) + self.bloom_length - self.cardinality

    @property
    def hit_probability(self) -> float:
        """P[z = H(v)] for v in V: e^eps / Omega."""
        return math.exp(self.epsilon) / self.omega

    def estimator_variance_per_client(self, member: bool) -> float:
        """Variance of one client's estimate of 1[v in V] (random-hash model).

        ``P(1 - P) / (e^eps/Omega - 1/l)^2`` with ``P = e^eps/Omega`` (member) or ``1/l``.
        """
        pt, pf = self.hit_probability, 1.0 / self.bloom_length
        prob = pt if member else pf
        return prob * (1.0 - prob) / (pt - pf) ** 2

    @property
    def sensitivity(self) -> Sensitivity:
        """Entries of the d-dim 0/1 vector one record changes (2c; guarantee holds for all V)."""
        return Sensitivity(value=min(2 * self.cardinality, self.domain_size), norm=Norm.RECORDS)

    @property
    def event(self) -> _dp.DpEvent:
        return CollisionDpEvent(epsilon=self.epsilon, domain_size=self.domain_size,
                                cardinality=self.cardinality, bloom_length=self.bloom_length)

    # ------------------------------------------------------------ validation
    def _check_sets(self, value: Any, name: str, *, batched: bool) -> np.ndarray:
        arr = _validate.as_integer_array(
            value, name, minimum=0, maximum=self.domain_size - 1,
            what="item indices (integers, distinct within a set)",
            range_text=f"[0, {self.domain_size})")
        c = self.cardinality
        if batched:
            if arr.ndim != 2 or arr.shape[1] != c or arr.shape[0] < 1:
                raise ValueError(f"{name} must have shape (n_clients, {c}) with n_clients >= 1; "
                                 f"got {arr.shape}")
        else:
            _check_shape(arr, (c,), name)
        _check_index_range(arr, self.domain_size, name)
        _check_distinct_rows(arr, name)
        return arr

    def _check_value(self, value: Any) -> np.ndarray:
        return self._check_sets(value, "value", batched=False)

    def _values_per_output(self, value: Any) -> int:
        return 2 * self.cardinality  # hashes and ranks of the c items for every output

    # ------------------------------------------------------------ randomizer
    def output_pmf(self, index_set: Any, seed: int) -> np.ndarray:
        """Exact pmf of z over ``[0, l)`` for input set V and hash seed (Definition 5).

        Allocates an array of length l; meant for tests and exact audits with small l.
        """
        v = self._check_sets(index_set, "index_set", batched=False)
        seed_arr = _check_seeds(seed, shape=())
        if self.bloom_length > _validate.MAX_SAMPLE_VALUES:
            raise ValueError(f"output_pmf needs bloom_length <= {_validate.MAX_SAMPLE_VALUES:.0e} "
                             f"(it returns one probability per output); got {self.bloom_length}")
        hv = np.unique(collision_hash(seed_arr, v, self.bloom_length))
        h = hv.size
        e = math.exp(self.epsilon)
        pmf = np.full(self.bloom_length,
                      (self.omega - e * h) / ((self.bloom_length - h) * self.omega))
        pmf[hv] = e / self.omega
        return pmf

    def _randomize(self, sets: np.ndarray, seeds: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
        """Reports for validated ``(n, c)`` sets and given seeds, vectorised over clients."""
        n, c = sets.shape
        length = self.bloom_length
        hv = np.sort(collision_hash(seeds[:, None], sets, length), axis=1)
        distinct = np.ones_like(hv, dtype=bool)
        distinct[:, 1:] = hv[:, 1:] != hv[:, :-1]
        h = distinct.sum(axis=1)
        # Distinct hash values first (ascending), duplicates pushed to the end as sentinel l.
        compact = np.sort(np.where(distinct, hv, length), axis=1)
        # Branch "z in H(V)": total probability h e^eps_d / Omega_d, uniform over the h values.
        inside = rng.random(n) < self._inside_threshold(h, self.design_epsilon)
        pick = rng.integers(0, h)
        z_in = np.take_along_axis(compact, pick[:, None], axis=1)[:, 0]
        # Branch "otherwise": uniform over the l - h values outside H(V). The u-th of them is
        # u + #{j < h : s_j - j <= u} for the sorted distinct members s_0 < s_1 < ...
        # (s_j - j, the number of non-members below s_j, is non-decreasing), vectorised.
        u = rng.integers(0, length - h)
        ranks = np.arange(c)
        below = ((compact - ranks) <= u[:, None]) & (ranks < h[:, None])
        z_out = u + below.sum(axis=1)
        out = np.empty(n, dtype=COLLISION_REPORT_DTYPE)
        out["seed"] = seeds
        out["z"] = np.where(inside, z_in, z_out)
        return out

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        sets = np.broadcast_to(value, (n, value.shape[0]))
        return self._randomize(sets, _draw_seeds(n, rng), rng)

    def randomize_clients(self, index_sets: Any, rng: np.random.Generator) -> np.ndarray:
        """Each client's report (fresh seed, z), vectorised over clients; not charged.

        Args:
            index_sets: ``(n_clients, c)`` integer array, distinct entries in ``[0, d)`` per row
                (see :func:`answer_to_index_set`).
            rng: Injected Generator.

        Returns:
            Structured array of shape ``(n_clients,)`` and dtype :data:`COLLISION_REPORT_DTYPE`.

        Not charged to any ledger: each record is in one client, so the whole population's
        reports are epsilon-DP by parallel composition; charge :attr:`event` once per release.
        """
        rng = _validate.check_generator(rng)
        sets = self._check_sets(index_sets, "index_sets", batched=True)
        return self._randomize(sets, _draw_seeds(sets.shape[0], rng), rng)

    # ------------------------------------------------------------ estimator
    def estimate_counts(self, reports: Any, *, chunk_size: int | None = None) -> np.ndarray:
        """Unbiased estimate of ``sum_i 1[v in V_i]`` for every v in ``[0, d)`` (float64, (d,)).

        ``sum_i (1[H_i(v) = z_i] - 1/l) / (e^eps/Omega - 1/l)`` (paper, after Definition 5),
        vectorised over clients in chunks of ``chunk_size`` clients (default: about 2^21
        hash evaluations per chunk). Reshape to ``(s, |Y|)`` for a reverse k-NN count matrix.

        Args:
            reports: Structured array of :data:`COLLISION_REPORT_DTYPE` (from
                :meth:`randomize_clients` / :meth:`sample`) or a sequence of ``(seed, z)``
                pairs (from :meth:`release`).
            chunk_size: Clients per chunk (>= 1), optional.
        """
        rep = _as_reports(reports, self.bloom_length)
        d = self.domain_size
        if chunk_size is None:
            chunk_size = max(1, _CHUNK_CELLS // d)
        chunk_size = _validate.check_int("chunk_size", chunk_size, minimum=1)
        values = np.arange(d, dtype=np.uint64)
        hits = np.zeros(d, dtype=np.int64)
        length = np.uint64(self.bloom_length)
        for start in range(0, rep.shape[0], chunk_size):
            part = rep[start:start + chunk_size]
            hashed = _splitmix64(part["seed"][:, None] ^ values) % length
            hits += np.count_nonzero(hashed == part["z"].astype(np.uint64)[:, None], axis=0)
        pf = 1.0 / self.bloom_length
        return (hits - rep.shape[0] * pf) / (self.hit_probability - pf)

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """Two index sets of size c, disjoint when ``2c <= d`` (first c vs last c items)."""
        c, d = self.cardinality, self.domain_size
        return np.arange(c, dtype=np.int64), np.arange(d - c, d, dtype=np.int64)

    def audit_view(self, x: Any, x_prime: Any) -> AuditView:
        """Whether each report's ``z`` lies in ``H_seed(x)`` and in ``H_seed(x')``.

        The report's meaning depends on its public seed: a black-box attack sees (seed, z)
        pairs that never repeat. The two membership bits are what the likelihood ratio of the
        pair depends on (Wang et al. IJCAI 2021: the report is ``z`` in ``H(V)`` with boosted
        probability).
        """
        sets = [self._check_value(x), self._check_value(x_prime)]
        length = self.bloom_length

        def apply(reports: Any) -> np.ndarray:
            seeds, z = reports["seed"], reports["z"]
            bits = [np.any(collision_hash(seeds[:, None], v[None, :], length) == z[:, None],
                           axis=1) for v in sets]
            return np.stack(bits, axis=1).astype(np.int64)

        return AuditView(description="z in H_seed(x), z in H_seed(x')", apply=apply)


def _draw_seeds(n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw n uniform 64-bit public seeds."""
    return rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)


def _check_seeds(seed: Any, *, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(seed)
    if arr.dtype.kind not in "iu" or arr.shape != shape:
        raise ValueError(f"seed must be an integer in [0, 2^64) of shape {shape}; got {seed!r}")
    if arr.dtype.kind == "i" and np.any(arr < 0):
        raise ValueError(f"seed must be an integer in [0, 2^64); got {seed!r}")
    return arr.astype(np.uint64)


def _as_reports(reports: Any, bloom_length: int) -> np.ndarray:
    if isinstance(reports, np.ndarray) and reports.dtype.names is not None:
        if set(reports.dtype.names) != {"seed", "z"}:
            raise ValueError(f"reports must have fields ('seed', 'z'); got {reports.dtype.names}")
        for field in ("seed", "z"):
            if reports.dtype[field].kind not in "iu":
                raise ValueError(f"reports field {field!r} must be integer; "
                                 f"got {reports.dtype[field]}")
        if reports.dtype["seed"].kind == "i" and np.any(reports["seed"] < 0):
            raise ValueError("reports seeds must be in [0, 2^64)")
        flat = reports.reshape(-1)
        rep = np.empty(flat.shape[0], dtype=COLLISION_REPORT_DTYPE)
        rep["seed"] = flat["seed"]  # assigned by name (astype would assign by position)
        rep["z"] = flat["z"]
    else:
        try:
            pairs = [(int(s), int(z)) for s, z in reports]
            rep = np.array(pairs, dtype=COLLISION_REPORT_DTYPE)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError("reports must be a structured array of COLLISION_REPORT_DTYPE or a "
                             "sequence of (seed, z) pairs with seed in [0, 2^64)") from exc
    if rep.shape[0] < 1:
        raise ValueError("reports must hold at least one report")
    if np.any(rep["z"] < 0) or np.any(rep["z"] >= bloom_length):
        raise ValueError(f"reports z must be in [0, bloom_length={bloom_length})")
    return rep
