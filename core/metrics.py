"""Evaluation metrics of the paper's Table 2: RMSE, AUC, and mean ± standard error."""
from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def rmse(y_true, y_pred) -> float:
    """Root mean squared error."""
    y_true = np.asarray(y_true, dtype=float)
    y_pred = np.asarray(y_pred, dtype=float)
    if y_true.shape != y_pred.shape or y_true.size == 0:
        raise ValueError(f"rmse needs two non-empty arrays of one shape, got {y_true.shape} and {y_pred.shape}")
    return float(np.sqrt(np.mean((y_true - y_pred) ** 2)))


def auc(y_true, score) -> float:
    """Area under the ROC curve by the rank (Mann-Whitney) formula; ties count 1/2.

    ``y_true`` holds labels where ``1`` is positive and anything else (0 or -1) negative.
    ``AUC = (sum of the positives' ranks - n_pos (n_pos + 1) / 2) / (n_pos n_neg)`` with
    average ranks for ties, which equals the fraction of (positive, negative) pairs ranked
    correctly, ties counting 1/2. Returns ``nan`` when one class is absent.
    """
    y_true = np.asarray(y_true, dtype=float)
    score = np.asarray(score, dtype=float)
    if y_true.shape != score.shape:
        raise ValueError(f"auc needs two arrays of one shape, got {y_true.shape} and {score.shape}")
    pos = y_true == 1.0
    n_pos = int(pos.sum())
    n_neg = int(pos.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(score)  # average ranks for ties
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error ``std(ddof=1) / sqrt(n)``; the standard error is ``nan`` for n < 2."""
    v = np.asarray(values, dtype=float).ravel()
    if v.size == 0:
        raise ValueError("mean_se needs at least one value")
    if v.size < 2:
        return float(v[0]), float("nan")
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size))
