"""Output handling of the auditor: kinds, discrete keys, bit-level keys, features (exact checks)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkd_audit.audit.features import FeatureSpec
from dpkd_audit.audit.outputs import (
    TRAILING_CAP,
    KeyCoder,
    OutputKind,
    describe_float_key,
    describe_keys,
    float_bit_keys,
    prepare_outputs,
)

FEW = settings(derandomize=True, max_examples=200, deadline=None)


@pytest.mark.parametrize(("raw", "kind"), [
    (np.arange(4.0), OutputKind.SCALAR_FLOAT),
    (np.arange(4), OutputKind.SCALAR_INT),
    (np.array([True, False, True, True]), OutputKind.SCALAR_INT),
    ([1, 2, 3, 4], OutputKind.SCALAR_INT),
    ([0.5, 1.5, 2.5, 3.5], OutputKind.SCALAR_FLOAT),
    (np.zeros((4, 2, 3)), OutputKind.ARRAY),
    ([(1, "a"), (2, "b"), (1, "a"), (3, "c")], OutputKind.OBJECT),
    (["a", "b", "c", "d"], OutputKind.OBJECT),
    (np.zeros(4, dtype=[("seed", "<u8"), ("z", "<i8")]), OutputKind.STRUCTURED),
])
def test_prepare_outputs_classifies_batches(raw, kind):
    out = prepare_outputs(raw, 4)
    assert out.kind is kind and len(out) == 4


@pytest.mark.parametrize("raw", [np.zeros(3), np.zeros((3, 4)), [1, 2, 3], 7, np.float64(1.0),
                                 "abcd", np.zeros(4) + 1j, [[1], {1, 2}, [2], [3]]])
def test_prepare_outputs_rejects_wrong_batches(raw):
    with pytest.raises(ValueError, match="sampler"):
        prepare_outputs(raw, 4)


def test_key_coder_is_consistent_across_batches_and_distinguishes_rows():
    coder = KeyCoder()
    batch = prepare_outputs([(1, "a"), (2, "b")], 2)
    first = coder.keys(batch)
    second = coder.keys(prepare_outputs([(2, "b"), (3, "c"), (1, "a")], 3))
    assert second[0] == first[1] and second[2] == first[0] and second[1] not in first
    assert describe_keys(first[::-1], first, batch) == ["(2, 'b')", "(1, 'a')"]
    rows = np.array([[0, 1, 2], [0, 1, 2], [0, 1, 3], [1, 1, 2]])
    keys = coder.keys(prepare_outputs(rows, 4))
    assert keys[0] == keys[1] and len(set(keys[1:].tolist())) == 3
    ints = coder.keys(prepare_outputs(np.array([5, -3, 5]), 3))
    assert ints.tolist() == [5, -3, 5]


def reference_key(value: float, low_bits: bool) -> tuple[int, int, int]:
    """(sign, biased exponent, pattern) computed from the IEEE 754 fields by integer arithmetic."""
    bits = int(np.array(value, dtype=np.float64).view(np.uint64))
    sign, exponent, mantissa = bits >> 63, (bits >> 52) & 0x7FF, bits & ((1 << 52) - 1)
    if low_bits:
        return sign, exponent, mantissa & 0b111
    trailing = TRAILING_CAP
    for k in range(TRAILING_CAP):
        if (mantissa >> k) & 1:
            trailing = k
            break
    return sign, exponent, trailing


@given(value=st.floats(allow_nan=False), low=st.booleans())
@FEW
def test_float_bit_keys_encode_sign_exponent_and_pattern(value, low):
    key = int(float_bit_keys(np.array([value]), low_bits=low)[0])
    sign, exponent, pattern = reference_key(value, low)
    assert (key >> 20, (key >> 5) & 0x7FF, key & 31) == (sign, exponent, pattern)


def test_float_bit_keys_examples_and_descriptions():
    values = np.array([1.0, 1.0 + 2**-52, 1.0 + 2**-51, -0.375])
    keys = float_bit_keys(values, low_bits=False)
    texts = [describe_float_key(int(k), low_bits=False, dtype=np.dtype(np.float64))
             for k in keys]
    assert texts == ["+[2^0, 2^1) >= 12 trailing zero bits", "+[2^0, 2^1) 0 trailing zero bits",
                     "+[2^0, 2^1) 1 trailing zero bits",
                     "-[2^-2, 2^-1) >= 12 trailing zero bits"]
    low = describe_float_key(int(float_bit_keys(np.array([1.0 + 5 * 2**-52]), low_bits=True)[0]),
                             low_bits=True, dtype=np.dtype(np.float64))
    assert low == "+[2^0, 2^1) low bits 101"
    f32 = float_bit_keys(np.array([1.0 + 2**-23], dtype=np.float32), low_bits=False)
    assert describe_float_key(int(f32[0]), low_bits=False, dtype=np.dtype(np.float32)) == \
        "+[2^0, 2^1) 0 trailing zero bits"
    special = float_bit_keys(np.array([math.inf, 5e-324]), low_bits=False)
    assert "inf/nan" in describe_float_key(int(special[0]), low_bits=False,
                                           dtype=np.dtype(np.float64))
    assert "subnormal" in describe_float_key(int(special[1]), low_bits=False,
                                             dtype=np.dtype(np.float64))


def test_features_raw_summaries_and_level_counts():
    data = np.array([[0, 1, 1, 2], [2, 2, 2, 2]])
    batch = prepare_outputs(data, 2)
    spec = FeatureSpec.fit(batch)
    feats = spec.transform(batch)
    # raw (4) + sum, mean, std, min, max (5) + counts of levels 0, 1, 2 (3); two rows are too
    # few for a column to count as discrete (values must repeat 4 times on average)
    assert feats.shape == (2, 4 + 5 + 3)
    np.testing.assert_array_equal(feats[:, :4], data)
    np.testing.assert_allclose(feats[0, 4:9], [4, 1, np.std([0, 1, 1, 2]), 0, 2])
    np.testing.assert_array_equal(feats[:, -3:], [[1, 2, 1], [0, 0, 4]])
    records = np.zeros(3, dtype=[("seed", "<u8"), ("z", "<i8")])
    records["z"] = [1, 2, 3]
    rec = prepare_outputs(records, 3)
    # raw (2) + summaries (5)
    assert FeatureSpec.fit(rec).transform(rec).shape == (3, 2 + 5)


def test_features_keep_the_discrete_part_of_mixed_outputs():
    """(index, value) tuples: one-hot index and index x value; NaN vectors: missing flags."""
    rng = np.random.default_rng(0)
    index, value = np.tile([0, 1, 2, 1], 5), rng.normal(size=20)
    pairs = prepare_outputs(list(zip(index.tolist(), value.tolist(), strict=True)), 20)
    assert pairs.kind is OutputKind.ARRAY and pairs.data.shape == (20, 2)
    spec = FeatureSpec.fit(pairs)
    assert [j for j, _ in spec.discrete] == [0] and spec.continuous.tolist() == [1]
    feats = spec.transform(pairs)
    # raw (2) + summaries (5) + one-hot index (3) + index x value (3)
    assert feats.shape == (20, 13)
    np.testing.assert_array_equal(feats[:, 7:10], np.eye(3)[index])
    np.testing.assert_array_equal(feats[:, 10:], np.eye(3)[index] * value[:, None])
    nan = prepare_outputs(np.array([[np.nan, 1.0], [2.0, np.nan], [np.nan, 3.5]]), 3)
    nan_spec = FeatureSpec.fit(nan)
    assert nan_spec.missing.tolist() == [0, 1] and nan_spec.has_discrete_part
    keys = nan_spec.discrete_keys(nan)
    assert keys[0] == keys[2] != keys[1]  # same missing pattern, different values
    assert nan_spec.transform(nan)[:, -2:].tolist() == [[1, 0], [0, 1], [1, 0]]
