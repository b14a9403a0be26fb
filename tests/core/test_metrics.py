import numpy as np
import pytest

from core.metrics import auc, mean_se, rmse


def _pairwise_auc(y, s):
    pos, neg = s[y == 1], s[y != 1]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(20))
def test_auc_equals_pairwise_count_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    y = rng.integers(0, 2, n).astype(float)
    y[0], y[1] = 0.0, 1.0
    s = rng.integers(0, 5, n).astype(float) if seed % 2 else rng.normal(size=n)  # many ties on odd seeds
    assert auc(y, s) == pytest.approx(_pairwise_auc(y, s), abs=1e-12)
    y_pm = np.where(y == 1, 1.0, -1.0)
    assert auc(y_pm, s) == pytest.approx(auc(y, s))


def test_auc_edge_cases():
    assert auc([0, 1], [0.1, 0.9]) == 1.0
    assert auc([1, 0], [0.1, 0.9]) == 0.0
    assert auc([0, 1, 0, 1], [1, 1, 1, 1]) == 0.5
    assert np.isnan(auc([1, 1], [0.2, 0.3]))
    with pytest.raises(ValueError):
        auc([0, 1], [0.5])


def test_rmse_and_mean_se():
    assert rmse([1, 2, 3], [1, 2, 5]) == pytest.approx(np.sqrt(4 / 3))
    with pytest.raises(ValueError):
        rmse([1, 2], [1])
    m, se = mean_se([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and se == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    m, se = mean_se([5.0])
    assert m == 5.0 and np.isnan(se)
