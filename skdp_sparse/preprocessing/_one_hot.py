"""The public bounds of one-hot features, from their public categories alone.

A ``OneHotEncoder`` whose ``categories`` are given (not ``"auto"``, which reads them
from the training data) writes at most one 1 per categorical column in every row:
with ``k`` categorical columns a row has at most ``k`` non-zeros, each equal to 1, so
its l2 norm is at most ``sqrt(k)``. These are the bounds a private estimator needs
(``feature_bound``, ``norm_bound``, ``sparsity``); nothing is computed from data.
"""

from __future__ import annotations

import math
from collections import namedtuple

__all__ = ["OneHotBounds", "one_hot_bounds", "public_categories"]

OneHotBounds = namedtuple("OneHotBounds", ["feature_bound", "norm_bound", "sparsity"])
OneHotBounds.__doc__ = """Public bounds of one-hot rows (:func:`one_hot_bounds`).

Pass them to the parameters of the same names of the estimator that follows
(``DPSparseLogisticRegression(**one_hot_bounds(...)._asdict())``).
"""
OneHotBounds.feature_bound.__doc__ = "Bound on every entry: 1."
OneHotBounds.norm_bound.__doc__ = "Bound on the l2 norm of a row: ``sqrt(k)``."
OneHotBounds.sparsity.__doc__ = "Bound on the non-zeros of a row: ``k``."


def public_categories(encoder):
    """The categories of a ``OneHotEncoder`` whose fit learns nothing from the rows'
    values (given categories; no error, warning or count on them), else ``ValueError``
    saying which parameter reads the data."""
    name = type(encoder).__name__
    params = encoder.get_params(deep=False)
    if "categories" not in params:
        raise ValueError(
            f"one_hot_bounds takes a OneHotEncoder or the list of its categories, got "
            f"{name}; for a ColumnTransformer, take the bounds of its one-hot block and "
            "combine them with the other blocks' (see the Returns section)")
    categories = params["categories"]
    if isinstance(categories, str):
        raise ValueError(
            f"{name}(categories={categories!r}) reads the categories from the training "
            "data, which the privacy guarantee does not cover (one row with a new value "
            "adds a column). Give the public categories of each column: "
            "OneHotEncoder(categories=[[...], [...]]), then one_hot_bounds(encoder).")
    if params.get("handle_unknown", "error") in ("error", "warn"):
        # A row outside the categories would raise (quoting it) or warn: whether the
        # fit fails, and what it says, would depend on one private row.
        raise ValueError(
            f"{name}(handle_unknown={params.get('handle_unknown', 'error')!r}) raises or "
            "warns on a row whose value is not among the categories, quoting it: what a "
            "fit says would then depend on one private row. Use handle_unknown='ignore' "
            "(such a row's block stays empty)")
    if params.get("drop") is not None:
        # scikit-learn warns, naming the columns, when such a row meets a dropped
        # column (its block is all zeros, like the dropped category's).
        raise ValueError(
            f"{name}(drop={params['drop']!r}) warns on a row whose value is not among "
            "the categories, naming its column: what a fit says would then depend on "
            "one private row. Use drop=None (a model with an intercept needs no "
            "dropped column)")
    for key in ("min_frequency", "max_categories"):
        if params.get(key) is not None:
            raise ValueError(
                f"{name}({key}={params[key]!r}) groups categories by their counts in the "
                f"training data; set {key}=None for public bounds and columns")
    return categories


def one_hot_bounds(categories):
    """The public ``(feature_bound, norm_bound, sparsity)`` of one-hot rows.

    Parameters
    ----------
    categories : OneHotEncoder, or list of array-like
        A scikit-learn ``OneHotEncoder`` with public ``categories`` (a list with the
        categories of each column; ``"auto"`` raises ``ValueError``, as do
        ``min_frequency`` and ``max_categories``, which read the data, and
        ``handle_unknown="error"`` or ``"warn"``, or any ``drop``, whose message or
        warning on a value outside the categories would tell of one private row), or
        that list itself. Only the number of columns ``k`` matters: every row has at
        most one 1 per column (``handle_unknown="ignore"`` can only leave a column's
        block empty).

    Returns
    -------
    OneHotBounds
        ``(1.0, sqrt(k), k)``. For a ``ColumnTransformer`` that puts the one-hot block
        beside other blocks with row norms at most ``L_b`` and ``s_b`` non-zeros, the
        whole row has norm at most ``sqrt(sum_b L_b^2)`` and at most ``sum_b s_b``
        non-zeros.

    Examples
    --------
    >>> from sklearn.preprocessing import OneHotEncoder
    >>> from skdp_sparse.preprocessing import one_hot_bounds
    >>> enc = OneHotEncoder(categories=[["a", "b", "c"], ["x", "y"]],
    ...                     handle_unknown="ignore")
    >>> one_hot_bounds(enc)
    OneHotBounds(feature_bound=1.0, norm_bound=1.4142135623730951, sparsity=2)
    """
    if hasattr(categories, "get_params"):
        categories = public_categories(categories)
    if isinstance(categories, str) or not hasattr(categories, "__len__"):
        raise ValueError("categories must be a OneHotEncoder with public categories or a "
                         f"list with the categories of each column, got {categories!r}")
    k = len(categories)
    if k == 0 or any(len(c) == 0 for c in categories):
        raise ValueError("one_hot_bounds needs at least one column, each with at least "
                         "one category")
    return OneHotBounds(1.0, math.sqrt(k), k)
