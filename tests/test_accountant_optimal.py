"""Optimal composition of mixed epsilons against exact enumeration, down to delta = 1e-14.

The reference enumerates every atom of the composed privacy-loss distribution (all output
counts of every group of binary randomized responses, with scipy's binomial log-pmf, an
independent code path from the accountant's), sorts nothing and sums the hockey-stick terms
p (1 - e^(eps - L)) of the atoms with L > eps in log space (positive terms only). No test here
is statistical.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats
from work_bounds import MB, peak_bytes

from dpkd_audit.accountants import OptimalCompositionAccountant
from dpkd_audit.accountants.optimal import METHOD_OPTIMAL, METHOD_OPTIMAL_GRID
from dpkd_audit.events import ApproxDpEvent, PureDpEvent

DELTAS = (1e-3, 1e-6, 1e-9, 1e-12, 1e-14)


def group_atoms(eps, k):
    j = np.arange(k + 1)
    return (k - 2.0 * j) * eps, stats.binom.logpmf(j, k, special.expit(-eps))


def enumerated_delta(groups, epsilon, chunk=2_000_000):
    """Hockey-stick divergence of the composed binary randomized responses, by enumeration."""
    (l1, p1), *rest = [group_atoms(e, k) for e, k in groups]
    losses, log_probs = l1, p1
    for g_losses, g_log_probs in rest[:-1]:
        losses = (losses[:, None] + g_losses[None, :]).ravel()
        log_probs = (log_probs[:, None] + g_log_probs[None, :]).ravel()
    last_losses, last_log_probs = rest[-1] if rest else (np.zeros(1), np.zeros(1))
    logs = [-np.inf]
    step = max(1, chunk // last_losses.size)
    for start in range(0, losses.size, step):
        total = losses[start:start + step, None] + last_losses[None, :]
        mask = total > epsilon
        if not mask.any():
            continue
        lp = (log_probs[start:start + step, None] + last_log_probs[None, :])[mask]
        logs.append(special.logsumexp(lp + np.log(-np.expm1(epsilon - total[mask]))))
    return float(np.exp(special.logsumexp(logs)))


def accountant(groups, **kwargs):
    acc = OptimalCompositionAccountant(**kwargs)
    for eps, k in groups:
        acc.compose(PureDpEvent(eps), count=k)
    return acc


MIXED = [(0.02, 600), (0.0317, 120), (0.0211, 150)]


@pytest.mark.parametrize("target", DELTAS)
def test_mixed_epsilons_match_enumeration(target):
    acc = accountant(MIXED)
    assert acc.backend == METHOD_OPTIMAL
    eps = float(acc.get_epsilon(target))
    # an upper bound: the exact curve at our epsilon fits the target ...
    assert enumerated_delta(MIXED, eps) <= target
    # ... and a tight one: 1e-7 less epsilon does not
    assert enumerated_delta(MIXED, eps - 1e-7 * eps) > target
    # get_delta is the exact curve to 1e-9, never below it
    for e in (0.5 * eps, eps, 1.1 * eps):
        reference = enumerated_delta(MIXED, e)
        got = acc.get_delta(e)
        assert reference <= got <= reference * (1 + 1e-9) + 1e-29


@pytest.mark.parametrize("target", DELTAS)
def test_grid_fallback_is_an_upper_bound_within_its_cells(target):
    # max_atoms = 500: the outer groups (121 x 151 atoms, inner = the 600-group) go to a grid
    exact = accountant(MIXED)
    gridded = accountant(MIXED, max_atoms=500)
    assert gridded.backend == METHOD_OPTIMAL_GRID
    eps = float(gridded.get_epsilon(target))
    assert enumerated_delta(MIXED, eps) <= target
    cell = (2 * 120 * 0.0317 + 2 * 150 * 0.0211) / 500
    assert float(exact.get_epsilon(target)) <= eps <= float(exact.get_epsilon(target)) + 3 * cell
    for e in (0.5 * eps, eps):
        assert gridded.get_delta(e) >= enumerated_delta(MIXED, e)


def test_issue_example_is_exact_at_small_deltas():
    # Pure events 0.01 x 5000, 0.0317 x 200, 0.0211 x 300: 3 x 10^8 atoms. The exact epsilon at
    # delta = 1e-12 is 6.5493049 (an independent exact enumeration); dp_accounting's
    # get_epsilon_for_delta path, the earlier fallback, gave 6.546577 (below it).
    groups = [(0.01, 5000), (0.0317, 200), (0.0211, 300)]
    acc = accountant(groups)
    eps, peak = peak_bytes(lambda: float(acc.get_epsilon(1e-12)))
    assert peak < 64 * MB  # windowed (measured 5.2 MB), not the 3 x 10^8 atoms
    assert eps == pytest.approx(6.5493049, abs=2e-7)
    assert acc.get_delta(eps) <= 1e-12
    # The delta that the old fallback reported as 0.0 (truth 1.06e-14) is resolved
    eps14 = float(acc.get_epsilon(1e-14))
    assert acc.get_delta(eps14 - 1e-6) > 1e-14
    assert acc.get_delta(eps14) <= 1e-14


@pytest.mark.slow
def test_issue_example_against_full_enumeration():
    groups = [(0.01, 5000), (0.0317, 200), (0.0211, 300)]
    acc = accountant(groups)
    eps = float(acc.get_epsilon(1e-12))
    assert enumerated_delta(groups, eps, chunk=4_000_000) <= 1e-12
    assert enumerated_delta(groups, eps - 1e-6, chunk=4_000_000) > 1e-12


def test_mixed_with_declared_deltas_against_enumeration():
    groups = [(0.05, 300), (0.2, 40)]
    acc = OptimalCompositionAccountant().compose(PureDpEvent(0.05), 300).compose(
        ApproxDpEvent(0.2, 1e-9), 40)
    keep = (1 - 1e-9) ** 40
    for e in (1.0, 2.5, 4.0):
        reference = 1 - keep * (1 - enumerated_delta(groups, e))
        assert acc.get_delta(e) == pytest.approx(reference, rel=1e-9)
        assert acc.get_delta(e) >= reference * (1 - 1e-15)


@pytest.mark.parametrize(("eps", "k"), [(1e20, 10), (1e300, 10), (700.0, 3), (50.0, 10**7)])
def test_huge_epsilons_do_not_overflow(eps, k):
    acc = OptimalCompositionAccountant().compose(PureDpEvent(eps), count=k)
    # Any delta below P[every release at its likely value] ~ 1 needs k eps + ln(1 - delta).
    assert float(acc.get_epsilon(1e-5)) == pytest.approx(k * eps + math.log1p(-1e-5),
                                                         rel=1e-12)
    assert acc.get_delta(0.5 * k * eps) == 1.0
    assert acc.get_delta(k * eps) == 0.0


def test_tiny_epsilons_and_huge_counts_are_windowed_and_cheap():
    for eps, k in ((1e-12, 10**9), (0.3, 10**9), (0.01, 10**10)):
        acc = OptimalCompositionAccountant().compose(PureDpEvent(eps), count=k)
        value, peak = peak_bytes(lambda acc=acc: float(acc.get_epsilon(1e-5)))
        # windowed: a few O(sqrt(k))-wide arrays (measured peak 106 MB over the three), never
        # the k + 1 binomial atoms (8 GB at k = 10^9)
        assert peak < 400 * MB
        # never above basic composition, never below the optimal lower envelope
        assert value <= k * eps
        assert acc.get_delta(value) <= 1e-5
    # tiny eps: the loss std is 2 eps sqrt(k/4) ~ 3e-8, so delta(0) < 1e-5 and epsilon is 0
    assert float(OptimalCompositionAccountant().compose(PureDpEvent(1e-12), count=10**9)
                 .get_epsilon(1e-5)) == 0.0


def test_large_count_matches_the_normal_approximation():
    # k = 10^9 at eps = 1e-3: L ~ N(k eps tanh(eps/2), 4 k eps^2 p (1 - p)) to high accuracy, and
    # the hockey-stick of a Gaussian shift mu is Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).
    eps, k = 1e-3, 10**9
    acc = OptimalCompositionAccountant().compose(PureDpEvent(eps), count=k)
    mu = math.sqrt(k) * eps  # the GDP parameter of the limit (Dong-Roth-Su 2022, Thm 3.5)
    for target_eps in (40.0, 60.0):
        gdp = (stats.norm.cdf(-target_eps / mu + mu / 2)
               - math.exp(target_eps) * stats.norm.cdf(-target_eps / mu - mu / 2))
        assert acc.get_delta(target_eps) == pytest.approx(gdp, rel=0.05)


def test_counts_beyond_the_exact_range_are_refused_by_name_and_state_kept():
    from dpkd_audit.accountants import PLDAccountant, UnsupportedEventError
    from dpkd_audit.accountants.binomial import MAX_EXACT_COUNT

    # epsilon 1e-8 per release: the refusal depends on the count alone, and the PLD of 10^12
    # releases builds in about 3 s at 1e-8 against 11 s at 1e-4
    for make in (OptimalCompositionAccountant, PLDAccountant):
        acc = make().compose(PureDpEvent(1e-8), count=MAX_EXACT_COUNT)
        before = float(acc.get_epsilon(1e-5))
        assert 0 < before < math.inf
        with pytest.raises(UnsupportedEventError, match="PureDpEvent"):
            acc.compose(PureDpEvent(1e-8))
        assert float(acc.get_epsilon(1e-5)) == before


def test_huge_counts_agree_between_optimal_and_pld():
    # 10^9 releases: both window the binomial; optimal carries its rounding margin (~7e-5
    # relative in delta at this k), the PLD its grid (exact at grid points, 1e-4 apart).
    from dpkd_audit.accountants import PLDAccountant

    opt = float(OptimalCompositionAccountant().compose(PureDpEvent(1e-4), 10**9).get_epsilon(1e-5))
    pld = float(PLDAccountant().compose(PureDpEvent(1e-4), 10**9).get_epsilon(1e-5))
    assert pld == pytest.approx(opt, rel=1e-5)
