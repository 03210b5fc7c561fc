"""A diagnostic of bounds against data, outside any private fit.

A fit never reports how its training rows compare with its bounds: whether most rows
are clipped is a fact about the data, and a warning that appears (or not) depending
on it would be a release the privacy guarantee does not cover. Bounds left at their
defaults (1) on data in other units clip most rows and leave the model near its
intercept; :func:`diagnose_bounds` is how a user checks for that, knowingly, on data
they may look at (their own copy, a public sample of the same source).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["BoundsDiagnosis", "diagnose_bounds"]

#: What to do when the bounds clip most rows.
HOW_TO_BOUND = (
    "Give a public bound that holds for every row, from what the features mean and "
    "never from their values: skdp_sparse.preprocessing.BoundedScaler(bounds=(lower, "
    "upper)) maps public ranges and its output_bounds() are the feature_bound and "
    "norm_bound to pass; one_hot_bounds(categories) gives those of one-hot columns; "
    "sklearn.preprocessing.Normalizer makes every row norm 1 (norm_bound=1).")


@dataclass(frozen=True)
class BoundsDiagnosis:
    """Shares of the rows an estimator with these bounds would clip.

    Attributes
    ----------
    rows_above_feature_bound, rows_above_norm_bound : float
        Share of the rows with an entry above ``feature_bound`` (coordinate solvers
        clip entries to it) and with an l2 norm above ``norm_bound`` (gradient
        solvers, output perturbation and the sufficient statistics clip rows to it).
    advice : str
        Empty when each share is at most one half; otherwise which bound to supply
        and how to obtain a public value.
    targets_outside_bounds : float or None
        Share of the targets outside ``target_bounds`` (regressors clip their targets
        to it); None when no ``y`` was given.
    """

    rows_above_feature_bound: float
    rows_above_norm_bound: float
    advice: str
    targets_outside_bounds: float | None = None


def _rows_above(X, feature_bound, norm_bound):
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        entries = np.abs(X.data) > np.broadcast_to(feature_bound, (X.shape[1],))[X.indices]
        above_entry = np.unique(rows[entries]).size
        norms = np.sqrt(np.bincount(rows, weights=X.data**2, minlength=X.shape[0]))
    else:
        X = np.asarray(X, dtype=float)
        above_entry = int(np.count_nonzero((np.abs(X) > feature_bound).any(axis=1)))
        norms = np.linalg.norm(X, axis=1)
    return above_entry, int(np.count_nonzero(norms > norm_bound))


def diagnose_bounds(X, y=None, *, feature_bound=1.0, norm_bound=1.0, target_bounds=(-1.0, 1.0)):
    """How much of ``X`` the bounds ``feature_bound`` and ``norm_bound`` would clip, and
    of ``y`` (a regression's targets) the range ``target_bounds``.

    **Not private**: it reads ``X`` and reports about it. Run it on data you may
    inspect, not inside a private pipeline; the estimators never run it.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
    y : array-like of shape (n_samples,), optional
        Real targets.
    feature_bound : float or array-like of shape (n_features,), default=1.0
    norm_bound : float, default=1.0
    target_bounds : pair of float, default=(-1.0, 1.0)
        The regressor's ``target_bounds`` (``(-b, b)`` for its ``target_bound=b``; the
        default is the regressors' default, ``target_bound=1``).

    Returns
    -------
    BoundsDiagnosis
    """
    n = X.shape[0]
    fb = np.asarray(feature_bound, dtype=float)
    above_entry, above_norm = _rows_above(X, fb, float(norm_bound))
    named = []
    if 2 * above_entry > n:
        shown = f"{float(fb):g}" if fb.ndim == 0 else "its per-feature values"
        named.append(f"feature_bound ({shown}, a bound on every |x_ij|)")
    if 2 * above_norm > n:
        named.append(f"norm_bound ({float(norm_bound):g}, a bound on the l2 norm of a row)")
    advice = "" if not named else (
        f"More than half of the rows exceed {' and '.join(named)} and would be clipped "
        f"to it, which can leave the model no better than its intercept. {HOW_TO_BOUND}")
    outside = None
    if y is not None:
        y = np.asarray(y, dtype=float).ravel()
        low, high = (float(v) for v in target_bounds)
        outside = float(np.count_nonzero((y < low) | (y > high))) / max(y.size, 1)
        if 2 * outside > 1:
            advice = " ".join(part for part in (advice, (
                f"More than half of the targets lie outside [{low:g}, {high:g}] and would "
                "be clipped to it: pass the regressor target_bounds=(low, high), a public "
                "range of the target (its units, a documented range), never one read "
                "from the targets.")) if part)
    return BoundsDiagnosis(above_entry / max(n, 1), above_norm / max(n, 1), advice, outside)
