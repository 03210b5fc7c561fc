"""Public per-feature ranges: their checks, and clipping to them without densifying.

A range ``[lower_j, upper_j]`` is a hyperparameter: a fact known about feature ``j``
before the data are seen (a unit's physical range, a documented census cap), never
a statistic of the training data. Every check here reads the parameters and the
shape of ``X`` only, so it runs before any private computation.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..utils._entry_blocks import entry_blocks
from ..utils.validation import MAX_BOUND, MIN_BOUND, canonical_sparse

__all__ = ["OutputBounds", "check_bounds", "bounds_for", "ranges_for", "output_width",
           "required_output_width", "check_zero_inside", "clip_and_scale_sparse", "unscale_sparse"]

OutputBounds = namedtuple("OutputBounds", ["feature_bound", "norm_bound"])
OutputBounds.__doc__ = """Public bounds of a transformer's output (``output_bounds()``).

Pass ``feature_bound`` (on every ``|x_ij|``: a number, or one per feature) and
``norm_bound`` (on the l2 norm of every row) to the parameters of the same names of
the estimator that follows.
"""
OutputBounds.feature_bound.__doc__ = "Bound on every ``|x_ij|`` (a number, or one per feature)."
OutputBounds.norm_bound.__doc__ = "Bound on the l2 norm of every row."


def _side(value, name, owner):
    if isinstance(value, bool | np.bool_) or isinstance(value, str | bytes):
        raise ValueError(f"{owner}: {name} must be a number or a 1-d array of numbers, "
                         f"got {value!r}")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: {name} must be a number or a 1-d array of numbers, "
                         f"got {value!r}") from None
    if arr.ndim > 1 or arr.size == 0:
        raise ValueError(f"{owner}: {name} must be a number or a non-empty 1-d array, "
                         f"got shape {arr.shape}")
    bad = np.flatnonzero(~np.isfinite(np.atleast_1d(arr)))
    if bad.size:
        where = "" if arr.ndim == 0 else f" (features {bad[:10].tolist()})"
        raise ValueError(f"{owner}: {name} must be finite{where}; public ranges of "
                         "unbounded features cannot be clipped to")
    return np.atleast_1d(arr)


def check_bounds(bounds, owner):
    """``(lower, upper)``: the checked ranges as float arrays of the same length (1 for
    scalars, which apply to every feature).

    Raises ``ValueError`` unless ``bounds`` is a pair ``(lower, upper)`` of finite
    numbers or 1-d arrays with ``lower_j < upper_j`` for every feature.
    """
    if not isinstance(bounds, tuple | list) or len(bounds) != 2:
        raise ValueError(f"{owner}: bounds must be a pair (lower, upper) of numbers or of "
                         f"arrays with one value per feature, got {bounds!r}")
    lower = _side(bounds[0], "the lower bound", owner)
    upper = _side(bounds[1], "the upper bound", owner)
    if lower.size != upper.size and min(lower.size, upper.size) > 1:
        raise ValueError(f"{owner}: the lower and upper bounds have {lower.size} and "
                         f"{upper.size} values; give one per feature on both sides, or a "
                         "number")
    lower, upper = (np.array(a) for a in np.broadcast_arrays(lower, upper))
    bad = np.flatnonzero(~(lower < upper))
    if bad.size:
        j = int(bad[0])
        raise ValueError(f"{owner}: every lower bound must be below its upper bound; "
                         f"{bad.size} feature(s) are not, e.g. feature {j}: "
                         f"[{lower[j]:g}, {upper[j]:g}]")
    # The estimators' range of a bound: the widths, their squares and the maps to a
    # fixed interval and back stay finite and non-zero in doubles.
    bad = np.flatnonzero((np.maximum(np.abs(lower), np.abs(upper)) > MAX_BOUND)
                         | (upper / 2 - lower / 2 < MIN_BOUND / 2))
    if bad.size:
        j = int(bad[0])
        raise ValueError(f"{owner}: every range must lie within [-{MAX_BOUND:g}, "
                         f"{MAX_BOUND:g}] and be at least {MIN_BOUND:g} wide; "
                         f"{bad.size} feature(s) are not, e.g. feature {j}: "
                         f"[{lower[j]:g}, {upper[j]:g}]")
    return lower, upper


def output_width(estimator, lower, n_features=None):
    """The number of features whose output bounds are asked for: ``n_features`` if
    given, else the fitted width, else the length of the ranges when they are arrays
    (a list of one range is one feature); None when only numbers were given."""
    if n_features is None:
        n_features = getattr(estimator, "n_features_in_", None)
    if n_features is None and max(np.ndim(side) for side in estimator.bounds) > 0:
        n_features = lower.size
    return n_features


def required_output_width(estimator, lower, n_features, noun):
    """:func:`output_width`, which must be known: a ``ValueError`` asks for
    ``n_features`` when only numbers were given to an unfitted ``noun``."""
    n_features = output_width(estimator, lower, n_features)
    if n_features is None:
        raise ValueError(f"{type(estimator).__name__}.output_bounds: pass n_features (the "
                         f"bounds are numbers, and the {noun} is not fitted)")
    return int(n_features)


def bounds_for(lower, upper, n_features, owner):
    """The ranges of :func:`check_bounds` with one value per feature of ``X``."""
    if lower.size == 1:
        return np.full(n_features, lower[0]), np.full(n_features, upper[0])
    if lower.size != n_features:
        raise ValueError(f"{owner}: bounds give {lower.size} ranges but X has "
                         f"{n_features} features")
    return lower, upper


def ranges_for(estimator, n_features):
    """The checked ``bounds`` of ``estimator`` with one range per feature."""
    owner = type(estimator).__name__
    return bounds_for(*check_bounds(estimator.bounds, owner), n_features, owner)


def check_zero_inside(lower, upper, owner):
    """Sparse input keeps its zeros: every range must contain 0."""
    bad = np.flatnonzero((lower > 0) | (upper < 0))
    if bad.size:
        j = int(bad[0])
        raise ValueError(
            f"{owner} keeps the zeros of sparse input (it scales without shifting), so "
            f"every range must contain 0; {bad.size} feature(s) do not, e.g. feature {j}: "
            f"[{lower[j]:g}, {upper[j]:g}]. Pass such data dense (X.toarray()) to clip "
            "and shift it, or widen the ranges to 0")


def clip_and_scale_sparse(X, lower, upper, scale, out_bound=None):
    """A float64 copy of ``X`` (CSR or CSC, in its format) with its stored entries
    clipped to their column's ``[lower_j, upper_j]``, divided by its ``scale_j`` and,
    given ``out_bound``, clipped to ``[-out_bound, out_bound]``; explicit zeros (an
    entry clipped to a bound 0) are dropped, so no more entries than ``X`` stores."""
    out = canonical_sparse(X).astype(np.float64, copy=True)
    for entries, _, cols in entry_blocks(out):
        values = out.data[entries]
        np.clip(values, lower[cols], upper[cols], out=values)
        values /= scale[cols]
        if out_bound is not None:
            np.clip(values, -out_bound, out_bound, out=values)
    out.eliminate_zeros()
    return out


def unscale_sparse(X, scale):
    """A float64 copy of ``X`` with its stored entries multiplied by their column's
    ``scale_j``: the inverse of :func:`clip_and_scale_sparse` on unclipped entries."""
    X = canonical_sparse(X).astype(np.float64, copy=True)
    for entries, _, cols in entry_blocks(X):
        X.data[entries] *= scale[cols]
    return X
