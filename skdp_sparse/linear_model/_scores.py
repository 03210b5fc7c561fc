"""Scores ``X @ coef.T`` of sparse rows without a copy of the coefficients."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["linear_scores"]


def linear_scores(X, coef):
    """``X @ coef.T`` for ``coef`` of shape (K, p) or (p,).

    scipy multiplies a sparse matrix by a C-ordered block only, so ``X @ coef.T``
    copies the K x p coefficients on every call (400 MB at K = 5, p = 10^7, for any
    number of rows). Where that copy is larger than ``X``, the K products
    ``X @ coef[k]`` run on the rows of ``coef`` as they are: the same sums in the same
    order, so the same bits.
    """
    if not sp.issparse(X) or coef.ndim == 1 or coef.shape[0] == 1 or coef.size <= X.nnz:
        return X @ coef.T
    scores = np.empty((X.shape[0], coef.shape[0]))
    for k, row in enumerate(coef):
        scores[:, k] = X @ row
    return scores
