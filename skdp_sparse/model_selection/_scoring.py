"""Scores of the private search: built-in per-example scores, their public range,
and the clipped mean of a validation part that never raises."""

from __future__ import annotations

import math
import numbers

import numpy as np
from sklearn.base import clone, is_classifier
from sklearn.pipeline import Pipeline
from sklearn.utils import get_tags

from ..utils._warnings import warn
from ._public import n_rows, take_rows

__all__ = ["BUILTIN_SCORES", "ERROR_BOUNDS", "public_target_range", "resolve_scoring",
           "per_example_scores", "check_scorer", "mean_score"]

#: Built-in per-example scores and their default public ranges ``(low, high)``.
BUILTIN_SCORES = {
    "accuracy": (0.0, 1.0),
    "neg_squared_error": (-1.0, 0.0),
    "neg_absolute_error": (-1.0, 0.0),
}

#: The largest error of a prediction in a public target range of width ``w``, for the
#: error scores: their default range is ``(-bound(w), 0)`` when the range is known.
ERROR_BOUNDS = {
    "neg_squared_error": lambda width: width ** 2,
    "neg_absolute_error": lambda width: width,
}


def _stated_range(estimator):
    """``(low, high)`` of the targets as the model (a pipeline's final step) states it
    in its parameters (``target_bounds``, or ``(-T, T)`` for ``target_bound=T``: the
    range its predictions are clipped to), or None. Parameters only: the range must not
    come from the rows."""
    from ..linear_model._base import TargetRangeMixin

    while isinstance(estimator, Pipeline):
        estimator = estimator[-1]
    if not isinstance(estimator, TargetRangeMixin):
        return None
    try:
        target_range = estimator._prediction_range()
    except (TypeError, ValueError):
        # A range the estimator's own checks refuse, on its dummy fit.
        return None
    if target_range is None:
        return None
    low, high = (float(v) for v in target_range)
    return (low, high) if math.isfinite(high - low) and low < high else None


def public_target_range(estimator, candidates=({},)):
    """The hull of the target ranges every candidate states, or None if one states
    none: one score range serves all candidates, whose scores are compared."""
    ranges = [_stated_range(clone(estimator).set_params(**candidate))
              for candidate in candidates]
    if not ranges or any(r is None for r in ranges):
        return None
    return min(r[0] for r in ranges), max(r[1] for r in ranges)


def resolve_scoring(scoring, score_bounds, estimator, candidates=({},)):
    """``(scorer, (low, high))`` from the search's ``scoring`` and ``score_bounds``.

    An error score without ``score_bounds`` is bounded by the largest error within the
    candidates' public target range, if they all state one: the default ``(-1, 0)``
    would count every error above 1 alike (errors in euros, say), leaving the choice
    to the noise. Without a range it stays ``(-1, 0)``, with a warning.
    """
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
    bounds = score_bounds
    if bounds is None and scoring in ERROR_BOUNDS:
        target_range = public_target_range(estimator, candidates)
        if target_range is None:
            warn(f"scoring={scoring!r} clips each error to 1 (score_bounds=(-1, 0)) and "
                 f"{type(estimator).__name__} states no public target range, so every "
                 "error above 1 counts alike and the noise may choose the candidate: give "
                 "the model target_bounds=(low, high) of the targets, or score_bounds")
        else:
            bounds = (-ERROR_BOUNDS[scoring](target_range[1] - target_range[0]), 0.0)
    if bounds is None:
        bounds = BUILTIN_SCORES[scoring]
    # Any other form (a number, a string, three values) would fail in float() or the
    # unpacking with a message that names no parameter.
    pair = bounds.tolist() if isinstance(bounds, np.ndarray) and bounds.ndim == 1 else bounds
    if not (isinstance(pair, tuple | list) and len(pair) == 2 and all(
            isinstance(b, numbers.Real) and not isinstance(b, bool | np.bool_) for b in pair)):
        raise ValueError(f"score_bounds must be a pair (low, high) of numbers, got {bounds!r}")
    low, high = (float(b) for b in pair)
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


def check_scorer(public, scorer, fit_epsilon, n_val):
    """Score every candidate's public model (:class:`PublicData`) on dummy validation
    data, so that a scoring that cannot work fails there, in public."""
    Xd, yd = public.dummy(n_val)
    for index in range(len(public.candidates)):
        model = public.probe(index, fit_epsilon, public.n_train)[2]
        per_example_scores(scorer, model, Xd, yd)


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
