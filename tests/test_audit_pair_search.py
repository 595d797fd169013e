"""Neighbouring-pair search: pilot every pair, confirm the best on fresh samples.

Fixed seeds. The chosen pairs differ from the runners-up by 10% or more in true epsilon while
the pilot bounds have a standard deviation of about 0.01 at 50,000 samples per side, so picking
the wrong pair would take a > 5 sigma error (false-failure rate < 1e-6 per test).
"""

from __future__ import annotations

import numpy as np
import pytest

from dpkd_audit.audit import Attack, search_neighbouring_pair

#: Datasets of two records; the query is the sum of the records clipped to [0, 1].
CANDIDATES = [np.array([0.2, 0.5]), np.array([0.2, 0.9]), np.array([0.2, 5.0]),
              np.array([0.2, -3.0])]


def one_record_apart(a, b):
    """Replace-one neighbours: the datasets differ in exactly one record."""
    return int(np.count_nonzero(a != b)) == 1


def clipped_sum(eps: float, clip: bool = True):
    """Laplace(1/eps) on the (clipped) sum: eps-DP between datasets 1 apart in clipped sum."""
    def sample(x, n, rng):
        value = np.clip(x, 0.0, 1.0).sum() if clip else np.sum(x)
        return value + rng.laplace(0.0, 1.0 / eps, n)
    return sample


def test_finds_the_worst_pair_of_a_clipped_sum_and_does_not_flag_it():
    # Clipped sums 0.7, 1.1, 1.2, 0.2: the worst pair is (2, 3), 1.0 apart (true eps 1), the
    # runner-up (1, 3) 0.9 apart. THRESHOLD: the real-valued claim (floating-point artefacts
    # of x + Lap are another matter, see test_audit_auditor).
    pair, result = search_neighbouring_pair(clipped_sum(1.0), CANDIDATES, epsilon=1.0,
                                            pilot_n=50_000, n=200_000, rng=np.random.default_rng(0),
                                            attack=Attack.THRESHOLD, is_neighbour=one_record_apart)
    assert pair[0] is CANDIDATES[2] and pair[1] is CANDIDATES[3]
    assert not result.violation
    assert 0.95 < result.epsilon_lower <= 1.0
    assert result.samples_per_side == 200_000


def test_flags_a_sum_whose_clipping_is_missing():
    # Without clipping the pair (2, 3) is 8 apart: true epsilon 8 against a claim of 1.
    pair, result = search_neighbouring_pair(clipped_sum(1.0, clip=False), CANDIDATES,
                                            epsilon=1.0, pilot_n=2_000, n=20_000,
                                            rng=np.random.default_rng(1),
                                            attack=Attack.THRESHOLD, all_pairs=True)
    assert pair[0] is CANDIDATES[2] and pair[1] is CANDIDATES[3]
    assert result.violation and result.epsilon_lower > 4.0


def test_only_the_given_pairs_are_tried():
    pair, result = search_neighbouring_pair(clipped_sum(1.0), CANDIDATES, epsilon=1.0,
                                            pilot_n=2_000, n=10_000,
                                            rng=np.random.default_rng(2), pairs=[(0, 1)],
                                            attack=Attack.THRESHOLD)
    assert pair[0] is CANDIDATES[0] and pair[1] is CANDIDATES[1]
    assert result.epsilon_lower < 0.4  # true epsilon 0.4 on this pair


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"candidates": [np.zeros(2)]}, "candidates"),
    ({"candidates": 3}, "candidates"),
    ({"pilot_n": 5}, "pilot_n"),
    ({"n": 0}, "n"),
    ({"rng": 0}, "rng"),
    ({"epsilon": 0.0}, "epsilon"),
    ({"pairs": []}, "pairs"),
    ({"pairs": [(0, 0)]}, "pairs"),
    ({"pairs": [(0, 9)]}, "pairs"),
    ({"pairs": [(0,)]}, "pairs"),
    ({"pairs": 5}, "pairs"),
    ({}, "neighbours"),  # nothing declared: refused, never every pair by default
    ({"pairs": [(0, 1)], "all_pairs": True}, "exactly one"),
    ({"is_neighbour": 3}, "is_neighbour"),
    ({"is_neighbour": lambda a, b: False}, "no pair"),
])
def test_rejects_bad_arguments(kwargs, name):
    args = {"candidates": CANDIDATES, "epsilon": 1.0, "pilot_n": 100, "n": 100,
            "rng": np.random.default_rng(0), **kwargs}
    if not {"pairs", "is_neighbour", "all_pairs"} & set(kwargs) and name != "neighbours":
        args["all_pairs"] = True
    candidates = args.pop("candidates")
    with pytest.raises(ValueError, match=name):
        search_neighbouring_pair(clipped_sum(1.0), candidates, **args)


def test_is_neighbour_excludes_non_neighbours():
    # Candidates 2 and 3 (clipped sums 1.2 vs 0.2, the worst pair) differ in both records
    # here, so they are not neighbours and must not be chosen.
    candidates = [np.array([0.2, 0.5]), np.array([0.2, 0.9]), np.array([1.0, 5.0]),
                  np.array([0.2, -3.0])]
    pair, _ = search_neighbouring_pair(clipped_sum(1.0), candidates, epsilon=1.0,
                                       pilot_n=5_000, n=5_000, rng=np.random.default_rng(4),
                                       attack=Attack.THRESHOLD, is_neighbour=one_record_apart)
    assert not (pair[0] is candidates[2] and pair[1] is candidates[3])
    assert one_record_apart(*pair)
