"""DP-FEST (Ghazi et al., "Sparsity-Preserving Differentially Private Training of Large
Embedding Models"): DP-SGD on a fixed set of frequent features, given as a public list
of columns or chosen once by a noisy top-k of the feature counts (the option
``frequent_features`` of :mod:`.sparse_sgd`; proof in ``doc/proofs/sparse_sgd.rst``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..utils._ranking import top_k
from ._base import Plan
from ._screening import release

__all__ = ["FREQUENT_FEATURES_SHARE", "FixedFeaturesPlan", "frequency_counts",
           "release_frequent_features"]

#: Share of the budget (of ``mu^2``) that DP-FEST's one
#: release of the feature counts takes when it chooses the top-k privately: the share
#: of :data:`~skdp_sparse.solvers.sgd.SGD_SCREENING_SHARE`, sgd's own screening release
#: before the same steps.
FREQUENT_FEATURES_SHARE = 0.25


def frequency_counts(X, contribution_bound):
    """Column sums of the rows' indicators of their non-zero entries, each indicator
    scaled to l2 norm at most ``C_c = contribution_bound`` (the counts the per-step
    selection thresholds, over all rows).

    Replace-one sensitivity ``sqrt(2) C_c``: both rows' scaled indicators are
    non-negative with norm at most ``C_c``, so their difference has squared norm at most
    ``2 C_c^2``.
    """
    present = (sp.csr_matrix(X) != 0).astype(np.float64)
    nnz = np.diff(present.indptr)
    scale = np.minimum(1.0, float(contribution_bound) / np.sqrt(np.maximum(nnz, 1)))
    return np.asarray(present.T @ scale, dtype=np.float64).ravel()


def release_frequent_features(X, k, contribution_bound, unit, floating_point_safe, rng):
    """DP-FEST's private choice: the ``k`` features of largest noisy count
    (:func:`frequency_counts` plus Gaussian noise ``sqrt(2) C_c unit``, the release of
    :func:`~skdp_sparse.solvers._screening.release`), sorted, and the noisy counts."""
    noisy, _ = release(frequency_counts(X, contribution_bound),
                       math.sqrt(2.0) * float(contribution_bound), unit, floating_point_safe,
                       rng)
    return top_k(noisy, int(k)).astype(np.int64), noisy


def _frequent_columns(value, d):
    """``(columns, k)`` of a ``frequent_features`` setting: a public list (sorted,
    unique, checked against ``d``) or ``(None, k)`` for a private top-k."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return None, int(min(value, d))
    columns = np.unique(np.asarray(value).ravel())
    if columns.size == 0 or not np.issubdtype(columns.dtype, np.integer) \
            or columns[0] < 0 or columns[-1] >= d:
        raise ValueError("frequent_features must be an integer k >= 1 or a non-empty list "
                         f"of column indices in [0, {d})")
    return columns.astype(np.int64), int(columns.size)


@dataclass(frozen=True, kw_only=True, eq=False)
class FixedFeaturesPlan(Plan):
    """DP-FEST: DP-SGD on a fixed set of features (``columns``, or the ``k`` of largest
    noisy count, released once with noise ``count_unit`` per unit of sensitivity);
    ``inner`` is the plan of the steps, a :class:`~skdp_sparse.solvers.sgd.NoisySGD`
    plan on those ``k`` coordinates."""

    inner: Plan
    columns: np.ndarray | None
    k: int
    count_unit: float
    contribution_bound: float
    floating_point_safe: bool
