"""The default audit of a user's sampler sees float bits and the structure of object outputs.

Issue 31: a plain sampler gives no hint of how it computes its floats, so AUTO (float bits
included) is the default; ragged and mixed-type outputs are attacked through their structure
(lengths, types, discrete part) before their values. The mechanisms here are written for these
tests (not the ones of the issue). Every audit uses a fixed seed; the broken ones are flagged by
margins of several units of epsilon, the correct ones sit at or below their claim (each correct
audit's false-alarm probability is at most 5% by the bound's validity, and with the seeds fixed
the outcome is deterministic).
"""

from __future__ import annotations

import numpy as np
import pytest

from dpkd_audit.audit import Attack, Verdict, audit_sampler
from dpkd_audit.audit.outputs import OutputKind, prepare_outputs, structure_keys


def rng_(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def textbook_gaussian(sigma: float):
    """x + N(0, sigma^2) in doubles: private as a real-valued design, not as floats."""
    return lambda x, n, rng: x + rng.normal(0.0, sigma, n)


def test_default_flags_a_users_textbook_float_sampler():
    # sigma 5 for sensitivity 1 is (1, 1e-5)-DP as real numbers; its doubles are not
    result = audit_sampler(textbook_gaussian(5.0), 0.0, 1.0, epsilon=1.0, delta=1e-5,
                           n=100_000, rng=rng_(0))
    assert result.policy.startswith("auto:")
    assert result.attack is Attack.FLOAT_BITS and result.violation
    assert result.epsilon_lower > 3.0
    # the real-valued design is still consistent when asked for explicitly
    real = audit_sampler(textbook_gaussian(5.0), 0.0, 1.0, epsilon=1.0, delta=1e-5,
                         n=100_000, rng=rng_(0), attack=Attack.AUTO_REAL)
    assert not real.violation


def test_default_reads_the_bits_of_float_vectors():
    # a 3-coordinate release whose second coordinate is x + Laplace in doubles
    def release(x, n, rng):
        noise = rng.laplace(0.0, 4.0, (n, 3))
        noise[:, 1] += x
        return noise
    result = audit_sampler(release, 0.0, 1.0, epsilon=0.5, n=50_000, rng=rng_(1))
    assert result.attack is Attack.FLOAT_BITS and result.violation
    assert "coordinate 1" in result.event


def test_float_bits_refuse_integer_vectors_with_a_clear_error():
    def counts(x, n, rng):
        return x + rng.integers(0, 3, (n, 2))
    with pytest.raises(ValueError, match=r"float-bits \(Attack.FLOAT_BITS\) does not apply to "
                                         "array outputs of dtype"):
        audit_sampler(counts, 0, 1, epsilon=1.0, n=2_000, rng=rng_(0),
                      attack=Attack.FLOAT_BITS)
    # and AUTO leaves float bits out for them
    assert audit_sampler(counts, 0, 1, epsilon=1.0, n=2_000, rng=rng_(0)).attack \
        is not Attack.FLOAT_BITS


def answers_above_a_cut(leak: float):
    """A list of noisy answers (integers); with ``leak`` > 0 input 1 sometimes adds one more
    answer than input 0 ever gives (the length depends on the data: epsilon infinite)."""
    def sample(x, n, rng):
        lengths = 1 + rng.integers(0, 3, n) + x * (rng.random(n) < leak)
        return [(rng.geometric(0.5, int(k)) - rng.geometric(0.5, int(k))).tolist()
                for k in lengths]
    return sample


def test_ragged_outputs_are_attacked_by_their_length():
    result = audit_sampler(answers_above_a_cut(0.1), 0, 1, epsilon=1.0, n=100_000,
                           rng=rng_(2))
    assert result.violation and result.epsilon_lower > 5.0
    # the structure (lengths), or the leaf view's length column (its float bits: its binade)
    assert result.event.startswith(("structure", "numbers of the output"))


def test_a_ragged_output_with_data_independent_length_is_not_flagged():
    for seed in (0, 1):
        result = audit_sampler(answers_above_a_cut(0.0), 0, 1, epsilon=0.1, n=50_000,
                               rng=rng_(seed))
        assert not result.violation


def test_mixed_tuples_are_attacked_by_their_discrete_part():
    # ("high" / "low", noisy value): the label compares the exact input with a cut
    # (the value snapped to 2^-16: its float bits would otherwise win, see the leaf view)
    def labelled(x, n, rng):
        values = np.round((x + rng.laplace(0.0, 1.0, n)) * 2**16) / 2**16
        labels = np.where(x + rng.normal(0.0, 0.3, n) > 0.5, "high", "low")
        return [(str(s), float(v)) for s, v in zip(labels, values, strict=True)]
    result = audit_sampler(labelled, 0.0, 1.0, epsilon=1.0, n=50_000, rng=rng_(3))
    assert result.violation and result.epsilon_lower > 2.0
    assert result.event.startswith("structure and discrete values")


def test_structure_keys_are_fixed_functions_of_one_output():
    batch = [[1, 2.5], (1, 7.25), [np.arange(3), "a"], [np.zeros(2), "a"], [np.zeros(2), "b"]]
    outputs = prepare_outputs(batch, len(batch))
    assert outputs.kind is OutputKind.OBJECT
    codes: dict = {}
    full = structure_keys(outputs, discrete=True, codes=codes)
    again = structure_keys(outputs, discrete=True, codes=codes)
    np.testing.assert_array_equal(full, again)
    # the floats are dropped, the integers and strings kept; float arrays by shape only
    assert full[0] == full[1] and full[3] != full[4] and full[2] != full[3]
    shape_only = structure_keys(outputs, discrete=False, codes={})
    assert shape_only[0] == shape_only[1] and shape_only[3] == shape_only[4]
    assert shape_only[2] != shape_only[3]  # an int array of 3 against a float array of 2


def test_verdicts_name_the_policy():
    result = audit_sampler(answers_above_a_cut(0.0), 0, 1, epsilon=0.1, n=2_000, rng=rng_(0))
    assert result.verdict in (Verdict.CONSISTENT, Verdict.INCONCLUSIVE)
    assert result.policy.startswith("auto:")


def answers_with_values(shift: float, noise: float):
    """1-4 noisy answers, each ``shift * x + Laplace(noise)`` snapped to 2^-16, as a list of
    floats whose length is drawn independently of the data (so only the values can leak)."""
    def sample(x, n, rng):
        lengths = rng.integers(1, 5, n)
        values = np.round((shift * x + rng.laplace(0.0, noise, (n, 4))) * 2**16) / 2**16
        return [values[j, :k].tolist() for j, k in enumerate(lengths)]
    return sample


def test_values_inside_ragged_outputs_are_read():
    # up to four answers, each 1.5-DP: a list of four has privacy loss up to 6 against a
    # claim of 1; before the leaf view the histogram saw unique lists and the structure
    # (lengths only) nothing
    result = audit_sampler(answers_with_values(1.5, 1.0), 0.0, 1.0, epsilon=1.0, n=20_000,
                           rng=rng_(4))
    assert result.violation and result.epsilon_lower > 2.0
    assert result.event.startswith("numbers of the output")


def test_ragged_values_scaled_for_the_longest_list_are_not_flagged():
    # each answer Laplace(4): four answers together are 1-DP
    for seed in (0, 1):
        result = audit_sampler(answers_with_values(1.0, 4.0), 0.0, 1.0, epsilon=1.0,
                               n=20_000, rng=rng_(seed))
        assert not result.violation


def test_leaf_view_is_a_padded_fixed_function_of_one_output():
    from dpkd_audit.audit.outputs import leaf_view, leaf_width
    batch = [[(0, 2.5), (1, -1.0)], [(3, 0.25)], ("label", 7), [np.arange(3)], [10**400]]
    outputs = prepare_outputs(batch, len(batch))
    assert leaf_width(outputs) == 4
    view = leaf_view(outputs, 3)
    assert view.kind is OutputKind.ARRAY and view.data.shape == (5, 4)
    np.testing.assert_array_equal(view.data[0], [0.0, 2.5, 1.0, 4.0])  # cut at 3, count 4
    np.testing.assert_array_equal(view.data[1, [0, 1, 3]], [3.0, 0.25, 2.0])
    assert np.isnan(view.data[1, 2])
    assert np.isnan(view.data[2, 0]) and view.data[2, 1] == 7.0  # a string leaf is NaN
    np.testing.assert_array_equal(view.data[3], [0.0, 1.0, 2.0, 3.0])
    assert view.data[4, 0] == np.inf  # an integer beyond the doubles
    np.testing.assert_array_equal(leaf_view(outputs, 3).data, view.data)
    # outputs without a single number give no view
    words = prepare_outputs([("a",), ("b", "c")], 2)
    assert leaf_width(words) == 0
