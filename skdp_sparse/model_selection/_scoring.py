"""Scores of the private search: built-in per-example scores, their public range,
and the clipped mean of a validation part that never raises."""

from __future__ import annotations

import math

import numpy as np
from sklearn.base import is_classifier
from sklearn.utils import get_tags

from ._public import n_rows, take_rows

__all__ = ["BUILTIN_SCORES", "resolve_scoring", "per_example_scores", "mean_score"]

#: Built-in per-example scores and their default public ranges ``(low, high)``.
BUILTIN_SCORES = {
    "accuracy": (0.0, 1.0),
    "neg_squared_error": (-1.0, 0.0),
    "neg_absolute_error": (-1.0, 0.0),
}


def resolve_scoring(scoring, score_bounds, estimator):
    """``(scorer, (low, high))`` from the search's ``scoring`` and ``score_bounds``."""
    if scoring is None:
        if is_classifier(estimator):
            scoring = "accuracy"
        elif get_tags(estimator).estimator_type == "regressor":
            scoring = "neg_squared_error"
        else:
            raise ValueError("give scoring (a callable) for an estimator that is "
                             "neither a classifier nor a regressor")
    if callable(scoring):
        if score_bounds is None:
            raise ValueError("a callable scoring needs public score_bounds=(low, high)")
    elif scoring not in BUILTIN_SCORES:
        raise ValueError(f"scoring must be one of {sorted(BUILTIN_SCORES)} or a "
                         f"callable, got {scoring!r}")
    bounds = score_bounds if score_bounds is not None else BUILTIN_SCORES[scoring]
    low, high = (float(b) for b in bounds)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"score_bounds must be finite with low < high, got {bounds!r}")
    return scoring, (low, high)


def per_example_scores(scorer, estimator, X, y):
    """One score per row of ``X`` (multi-output errors averaged row by row)."""
    if scorer == "accuracy":
        s = (np.asarray(estimator.predict(X)) == np.asarray(y)).astype(float)
    elif scorer == "neg_squared_error":
        s = -((np.asarray(y, dtype=float) - np.asarray(estimator.predict(X))) ** 2)
    elif scorer == "neg_absolute_error":
        s = -np.abs(np.asarray(y, dtype=float) - np.asarray(estimator.predict(X)))
    else:
        s = np.asarray(scorer(estimator, X, y), dtype=float)
    n = n_rows(X)
    if s.ndim > 1:
        s = s.reshape(n, -1).mean(axis=1)
    if s.shape != (n,):
        raise ValueError(f"scoring must give one score per row ({n}), got shape {s.shape}")
    return s


def mean_score(scorer, estimator, X_val, y_val, low, high):
    """Mean of the clipped per-example scores; never raises. If scoring the whole
    part fails, rows are scored one by one and a row that fails scores ``low``, so
    one row still moves the mean by ``(high - low) / n_val`` at most."""
    try:
        scores = per_example_scores(scorer, estimator, X_val, y_val)
    except Exception:
        scores = np.empty(n_rows(X_val))
        for i in range(scores.size):
            try:
                row_y = None if y_val is None else take_rows(y_val, [i])
                (scores[i],) = per_example_scores(
                    scorer, estimator, take_rows(X_val, [i]), row_y)
            except Exception:
                scores[i] = low
    return float(np.mean(np.clip(np.nan_to_num(scores, nan=low), low, high)))
