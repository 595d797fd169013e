"""Exact lattice compositions in the PLD accountant: k-ary randomized response, discrete Laplace.

The n-fold composition of a PLD whose losses lie on a lattice L Z is computed exactly (a power
of the generating polynomial, direct convolutions, no FFT) and discretised once by
connect-the-dots. References are independent of that code: the n-fold privacy-loss law by exact
multinomial enumeration (k-ary RR) or polynomial powers (discrete Laplace, from its pmf summed
over the integers) in mpmath at 50 digits, its hockey-stick divergence summed in mpmath, epsilon
by bisection on that curve; for n = 10^4 a float64 log-space trinomial sum near the tail.

Tolerances (value_discretization_interval h = 1e-4): epsilon never below the exact one by more
than 1e-9 (floating-point noise) and at most one grid step h above it, at deltas from 1e-3 down
to 1e-14 (measured: within 1e-3 h of exact at every point); delta(eps) between the exact
delta(eps) (less 1e-13 relative: float noise) and the exact delta(eps - h) (plus 1e-11).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from dp_accounting.pld import privacy_loss_distribution as dp_pld_dist
from scipy import special
from work_bounds import MB, peak_bytes

from dpkd_audit.accountants.pld import PLDAccountant
from dpkd_audit.accountants.pld import evaluation as pld_eval
from dpkd_audit.accountants.pld import exact as pld_exact
from dpkd_audit.accountants.pld import specs as pld_specs
from dpkd_audit.events import ApproxDpEvent, PureDpEvent

H = 1e-4
DELTAS = (1e-3, 1e-6, 1e-9, 1e-12, 1e-14)


def eps_of(acc, delta: float) -> float:
    return float(acc.get_epsilon(delta))


# ============================================================================ references


def mp_rr_law(p: float, k: int, n: int) -> tuple[mpmath.mpf, dict[int, mpmath.mpf]]:
    """n-fold k-ary RR: P[m] for m = #(report = x) - #(report = x'), exact enumeration.

    One release: report x w.p. keep = 1 - p + p/k (loss +L), x' w.p. p/k (loss -L), another
    bucket w.p. (k - 2) p/k (loss 0); L = ln(keep / (p/k)). The float keep and p/k of the
    implementation are used, normalised to sum to 1 exactly.
    """
    keep_f, other_f = 1.0 - p + p / k, p / k
    with mpmath.workdps(50):
        keep, other = mpmath.mpf(keep_f), mpmath.mpf(other_f)
        rest = (k - 2) * other
        total = keep + other + rest
        keep, other, rest = keep / total, other / total, rest / total
        fact = [mpmath.factorial(i) for i in range(n + 1)]
        law: dict[int, mpmath.mpf] = {}
        for a in range(n + 1):
            for b in range(n + 1 - a):
                c = n - a - b
                if c and k == 2:
                    continue
                weight = fact[n] / (fact[a] * fact[b] * fact[c]) * keep**a * other**b
                law[a - b] = law.get(a - b, 0) + (weight * rest**c if c else weight)
        return mpmath.log(keep / other), law


def mp_discrete_laplace_law(a: float, sens: int,
                            n: int) -> tuple[mpmath.mpf, dict[int, mpmath.mpf]]:
    """n-fold DLap(a) at 0 vs at sens: loss a(|x - sens| - |x|) = a m, from the pmf over x."""
    with mpmath.workdps(50):
        a_mp = mpmath.mpf(a)
        norm = mpmath.tanh(a_mp / 2)  # 1 / sum_x e^(-a|x|)
        one: dict[int, mpmath.mpf] = {}
        # x <= 0 and x >= sens in closed form (geometric tails), 0 < x < sens term by term
        one[sens] = norm / (1 - mpmath.exp(-a_mp))
        one[-sens] = norm * mpmath.exp(-a_mp * sens) / (1 - mpmath.exp(-a_mp))
        for x in range(1, sens):
            one[sens - 2 * x] = one.get(sens - 2 * x, 0) + norm * mpmath.exp(-a_mp * x)
        law = {0: mpmath.mpf(1)}
        for _ in range(n):
            nxt: dict[int, mpmath.mpf] = {}
            for m, w in law.items():
                for j, v in one.items():
                    nxt[m + j] = nxt.get(m + j, 0) + w * v
            law = nxt
        return a_mp, law


def mp_delta(step, law, eps) -> mpmath.mpf:
    with mpmath.workdps(50):
        eps = mpmath.mpf(eps)
        return mpmath.fsum(w * -mpmath.expm1(eps - m * step) for m, w in law.items()
                           if m * step > eps)


def mp_epsilon(step, law, delta: float) -> float:
    """Smallest eps >= 0 with delta(eps) <= delta: bisection on the exact curve (70 steps)."""
    with mpmath.workdps(50):
        if mp_delta(step, law, 0) <= delta:
            return 0.0
        lo, hi = mpmath.mpf(0), max(law) * step
        for _ in range(70):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if mp_delta(step, law, mid) <= delta else (mid, hi)
        return float(hi)


def check_against_exact(acc, step, law) -> None:
    for delta in DELTAS:
        exact = mp_epsilon(step, law, delta)
        got = eps_of(acc, delta)
        assert exact - 1e-9 <= got <= exact + H + 1e-9, (delta, got, exact)
    top = float(max(law) * step)
    for frac in (0.0, 0.3, 0.6, 0.9):
        eps = frac * top
        exact = float(mp_delta(step, law, eps))
        one_step_lower = float(mp_delta(step, law, max(0.0, eps - H)))
        got = acc.get_delta(eps)
        # float noise: ~1e-14 absolute near delta = 1; the float RR weights sum to 1 + ~1e-16
        assert exact * (1 - 1e-13) - 1e-15 <= got <= one_step_lower + 1e-11, (frac, got, exact)


# ============================================================================ against exact


@pytest.mark.parametrize(("p", "k", "n"), [
    (0.5, 10, 100), (0.3, 3, 150), (0.9, 10, 60), (0.05, 4, 120), (0.999, 20, 150),
    (0.6, 2, 80),
])
def test_randomized_response_matches_exact_enumeration(p, k, n):
    # large and tiny losses (p = 0.05: L = 4.4; p = 0.999: L = 2e-5 < h), and k = 2 (binary)
    step, law = mp_rr_law(p, k, n)
    acc = PLDAccountant().compose(_dp.RandomizedResponseDpEvent(p, k), count=n)
    check_against_exact(acc, step, law)
    assert eps_of(acc, 0.0) == pytest.approx(n * float(step), rel=1e-12)  # exact pure epsilon


@pytest.mark.parametrize(("a", "sens", "n"), [(0.7, 1, 100), (0.2, 3, 40), (1.5, 2, 30)])
def test_discrete_laplace_matches_exact_enumeration(a, sens, n):
    step, law = mp_discrete_laplace_law(a, sens, n)
    acc = PLDAccountant().compose(_dp.DiscreteLaplaceDpEvent(a, sens), count=n)
    check_against_exact(acc, step, law)


def test_randomized_response_at_ten_thousand_against_a_tail_sum():
    # P[m] = sum_b n!/((m+b)! b! (n-m-2b)!) keep^(m+b) other^b rest^(n-m-2b), in log space with
    # float64 gammaln (relative error ~1e-11 at n = 10^4), for the m above the mean that matter.
    # m from 5200 (+3.4 sd) to 6500 (+25 sd; the rest weighs < 1e-100)
    p, k, n = 0.5, 10, 10_000
    keep, other = 1 - p + p / k, p / k
    rest, step = (k - 2) * other, math.log(keep / other)
    m = np.arange(5200, 6501)[:, None]
    b = np.arange((n - 5200) // 2 + 1)[None, :]
    c = n - m - 2 * b
    valid = c >= 0
    log_w = np.where(valid, special.gammaln(n + 1) - special.gammaln(m + b + 1)
                     - special.gammaln(b + 1) - special.gammaln(np.maximum(c, 0) + 1)
                     + (m + b) * math.log(keep) + b * math.log(other)
                     + np.maximum(c, 0) * math.log(rest), -np.inf)
    probs = np.exp(special.logsumexp(log_w, axis=1))
    losses = m[:, 0] * step

    def delta_at(eps: float) -> float:
        above = losses > eps
        return math.fsum(probs[above] * -np.expm1(eps - losses[above]))

    acc = PLDAccountant().compose(_dp.RandomizedResponseDpEvent(p, k), count=n)
    for delta in (1e-6, 1e-10, 1e-14):
        lo, hi = 5200 * step, 6500 * step
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if delta_at(mid) <= delta else (mid, hi)
        assert hi - 1e-7 <= eps_of(acc, delta) <= hi + H + 1e-7, delta


# ============================================================================ identities


@pytest.mark.parametrize("event", [_dp.RandomizedResponseDpEvent(0.4, 6),
                                   _dp.DiscreteLaplaceDpEvent(0.3, 2)])
def test_one_by_one_fold_and_count_agree(event):
    k = 40
    one = PLDAccountant()
    for _ in range(k):
        one.compose(event)
    folded = PLDAccountant().compose(_dp.SelfComposedDpEvent(event, k))
    counted = PLDAccountant().compose(event, count=k)
    for delta in DELTAS:
        values = [eps_of(acc, delta) for acc in (one, folded, counted)]
        assert values[0] == values[1] == values[2]


@pytest.mark.parametrize("spec", [("randomized-response", 0.4, 6), ("discrete-laplace", 0.3, 3),
                                  ("binary-rr", 0.5)])
def test_lattice_power_equals_sequential_convolutions(spec):
    # Repeated squaring (with trimming) against k - 1 plain convolutions of the one-release law.
    atoms = pld_specs._lattice_atoms(spec)
    k = 37
    single = np.asarray(atoms.probs)
    sequential = single
    for _ in range(k - 1):
        sequential = np.convolve(sequential, single)
    offset, probs, infinity = pld_exact.lattice_power(atoms, k)
    start = offset - k * atoms.offset
    window = sequential[start:start + probs.size]
    big = window > 1e-15
    np.testing.assert_allclose(probs[big], window[big], rtol=1e-12)
    # trimmed atoms (< 1e-30 each) moved to +inf or onto the lowest kept atom: tiny changes
    assert np.abs(probs - window)[~big].sum() < 1e-27
    assert math.fsum(probs) + infinity == pytest.approx(1.0, abs=1e-13)
    assert 0.0 <= infinity <= 1e-25  # only trimmed atoms (< 1e-30 each) go to +inf


def test_infinity_mass_of_approx_dp_lattice():
    atoms = pld_specs._lattice_atoms(("approx-dp", 0.3, 1e-4))
    _, probs, infinity = pld_exact.lattice_power(atoms, 500)
    assert infinity == pytest.approx(-math.expm1(500 * math.log1p(-1e-4)), rel=1e-12)
    assert math.fsum(probs) + infinity == pytest.approx(1.0, abs=1e-13)


@pytest.mark.parametrize(("eps", "delta", "n"), [(0.3, 0.0, 200), (1.2, 1e-5, 50)])
def test_lattice_path_equals_binomial_path_for_two_atom_pairs(eps, delta, n):
    # Two exact compositions (binomial closed form and lattice power) discretised the same way.
    spec = ("approx-dp", eps, delta) if delta else ("binary-rr", eps)
    lattice = pld_exact.lattice_pld(pld_specs._lattice_atoms(spec), n, H)
    binomial = pld_exact.binomial_pld(eps, delta, n, H)
    for target in (1e-3, 1e-6, 1e-9, 1e-12):
        if target <= 1 - (1 - delta) ** n:
            continue
        assert pld_eval._pld_epsilon(lattice, target) == pytest.approx(
            pld_eval._pld_epsilon(binomial, target), abs=1e-9)


def test_mixed_histories_stay_below_basic_composition():
    # (distinct PLDs are still convolved by dp_accounting's FFT over the whole loss range)
    acc = (PLDAccountant().compose(_dp.RandomizedResponseDpEvent(0.5, 10), count=30)
           .compose(_dp.DiscreteLaplaceDpEvent(0.4, 1), count=200)
           .compose(PureDpEvent(0.1), count=50).compose(ApproxDpEvent(0.2, 1e-9), count=10))
    pure = 30 * math.log(11.0) + 200 * 0.4 + 50 * 0.1 + 10 * 0.2
    assert eps_of(acc, 1e-6) < pure
    assert eps_of(acc, 0.0) == math.inf  # the (0.2, 1e-9) releases have a +inf atom


# ============================================================================ speed and backend


def test_large_compositions_are_fast_and_match_the_backend_sandwich():
    # dp_accounting's optimistic PLD (losses rounded down, FFT power) lower-bounds the truth
    # and its pessimistic one (rounded up) upper-bounds it; a coarse grid keeps its FFT small.
    p, k, n, h = 0.5, 10, 1000, 1e-2
    ours, peak = peak_bytes(lambda: eps_of(PLDAccountant(value_discretization_interval=h).compose(
        _dp.RandomizedResponseDpEvent(p, k), count=n), 1e-5))
    assert peak < 16 * MB  # exact lattice (measured 0.2 MB), no FFT grid
    optimistic = dp_pld_dist.from_randomized_response(
        p, k, pessimistic_estimate=False, value_discretization_interval=h
    ).self_compose(n).get_epsilon_for_delta(1e-5)
    pessimistic = dp_pld_dist.from_randomized_response(
        p, k, value_discretization_interval=h).self_compose(n).get_epsilon_for_delta(1e-5)
    # (both of dp_accounting's drift by up to h per release: 1381.18 and 1386.6 here, ours
    # 1385.90; the exact value is checked at n = 10^4 above)
    assert optimistic - 1e-9 <= ours <= pessimistic + 1e-9
    for count in (10**4, 10**6):
        eps, peak = peak_bytes(lambda count=count: eps_of(
            PLDAccountant().compose(_dp.RandomizedResponseDpEvent(p, k), count), 1e-5))
        assert peak < 64 * MB  # a binomial window, not 10^6 x the grid (measured 6.4 MB)
        assert 0 < eps < count * math.log(11.0)


def test_fft_is_used_where_the_lattice_power_would_be_slower():
    # 300-fold discrete Laplace with a = 1e-3 and sensitivity 2000 (4001 lattice points a
    # release): ~165 s of direct convolutions against ~4 s of FFT squaring; both agree.
    atoms = pld_specs._lattice_atoms(("discrete-laplace", 1e-3, 2000))
    assert not pld_specs._lattice_is_cheaper(atoms, 300, H)
    assert pld_specs._lattice_is_cheaper(atoms, 3, H)
    rr = pld_specs._lattice_atoms(("randomized-response", 0.5, 10))
    assert pld_specs._lattice_is_cheaper(rr, 10**8, H)  # FFT would need a 4.8e12-point grid
