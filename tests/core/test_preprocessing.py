"""The frozen scaling: the prediction path's ``Scaler.linear`` against the design matrix."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.preprocessing import Scaler


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.integers(1, 12), st.integers(0, 2**32 - 1), st.floats(-1e6, 1e6))
def test_linear_is_the_design_matrix_times_theta(n, d, seed, offset):
    rng = np.random.default_rng(seed)
    X = offset + rng.normal(size=(n, d)) * rng.uniform(0.01, 100, size=d)
    scaler = Scaler.fit(X, rng.normal(size=n), "regression", standardize=True)
    theta = rng.normal(size=d + 1)
    expected = scaler.design(X) @ theta  # bias column appended last, as the learners fit it
    got = scaler.linear(X, theta)
    assert got.shape == (n,)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(theta).sum())


def test_linear_uses_the_last_coefficient_as_the_bias():
    scaler = Scaler(np.array([1.0, 2.0]), np.array([2.0, 4.0]))
    # scaled row: ((3-1)/2, (6-2)/4) = (1, 1): 1*10 + 1*100 + 7
    assert scaler.linear(np.array([[3.0, 6.0]]), np.array([10.0, 100.0, 7.0])).tolist() == [117.0]


_cells = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70), st.booleans(),
                   st.sampled_from(["1.5", "x", ""]), st.none(), st.lists(st.floats(), max_size=2))


_rectangular = st.integers(0, 4).flatmap(
    lambda width: st.lists(st.lists(_cells, min_size=width, max_size=width), min_size=1, max_size=5))
_ragged = st.lists(st.one_of(st.lists(_cells, min_size=0, max_size=4), st.tuples(_cells, _cells), _cells),
                   min_size=0, max_size=4)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_rectangular, _ragged))
def test_float_array_is_asarray_with_float_dtype(rows):
    """The fast conversion of parsed JSON gives what np.asarray(X, dtype=float) gives, or
    fails where it fails."""
    from core.preprocessing import _float_array

    try:
        expected = np.asarray(rows, dtype=float)
    except (TypeError, ValueError, OverflowError) as exc:
        with pytest.raises(type(exc)):
            _float_array(rows)
        return
    got = _float_array(rows)
    assert got.dtype == np.float64 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_moments_re_expressed_in_another_scaling_equal_the_rows_scaled_by_it():
    from core.preprocessing import Scaler
    rng = np.random.default_rng(1)
    X = rng.normal(3.0, 5.0, size=(30, 4))
    y = rng.normal(-7.0, 2.0, size=30)
    old = Scaler.fit(X[:3], y[:3], "regression", True)
    new = Scaler.fit(X, y, "regression", True)
    Xo, to = old.design(X), old.target(y)
    gram, moment, yy = new.moments_from(old, 30, Xo.T @ Xo, Xo.T @ to, float(to @ to))
    Xn, tn = new.design(X), new.target(y)
    np.testing.assert_allclose(gram, Xn.T @ Xn, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(moment, Xn.T @ tn, rtol=1e-10, atol=1e-9)
    assert yy == pytest.approx(float(tn @ tn), rel=1e-10)
    # the raw rows' statistics from the scaled ones
    mean, std, ym, ys = old.raw_stats(30, Xo.T @ Xo, Xo.T @ to, float(to @ to))
    np.testing.assert_allclose(mean, X.mean(0), rtol=1e-10)
    np.testing.assert_allclose(std, X.std(0), rtol=1e-8)
    assert (ym, ys) == pytest.approx((y.mean(), y.std()), rel=1e-8)
