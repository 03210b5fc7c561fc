"""Clipping of rows to public norm bounds.

Clipping is what makes a sensitivity hold for every input: after it, each row
lies in the public ball the mechanism was calibrated for, whatever the data.
Sparse rows are rescaled in place of their stored values; no matrix is densified.
"""

import numba
import numpy as np
import scipy.sparse as sp

__all__ = ["clip_rows", "clip_entries", "with_summed_duplicates"]


@numba.njit(cache=True)
def _row_scales_csr(data, indptr, max_l2, max_l1):
    n = indptr.size - 1
    scales = np.ones(n)
    for i in range(n):
        # The norms are taken of the row divided by its largest entry, so that no
        # sum overflows: a finite row's norms can exceed the largest double.
        top = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            top = max(top, abs(data[k]))
        if top == 0.0:
            continue
        l1 = 0.0
        l2sq = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            v = data[k] / top
            l1 += abs(v)
            l2sq += v * v
        scales[i] = min(1.0, (max_l2 / top) / np.sqrt(l2sq), (max_l1 / top) / l1)
    return scales


def _row_scales_dense(X, max_l2, max_l1):
    # As for CSR rows: the norms of each row over its largest entry.
    top = np.abs(X).max(axis=1) if X.shape[1] else np.zeros(X.shape[0])
    top = np.where(top > 0, top, 1.0)
    unit = X / top[:, None]
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, np.minimum((max_l2 / top) / np.linalg.norm(unit, axis=1),
                                          (max_l1 / top) / np.abs(unit).sum(axis=1)))


def with_summed_duplicates(X):
    """``X`` itself if it stores every entry once, else a copy with duplicates summed.

    scipy sums duplicate entries in every product, so a clip must see ``x_ij`` (and
    a row's norm) with its duplicates summed, or a split entry escapes its bound.
    The caller's matrix is never modified.
    """
    if X.has_canonical_format:
        return X
    X = X.copy()
    X.sum_duplicates()
    return X


def clip_rows(X, max_l2=np.inf, max_l1=np.inf):
    """Rescale each row of ``X`` so its l2 norm is <= ``max_l2`` and l1 norm <= ``max_l1``.

    A row already inside both balls is left unchanged; otherwise it is
    multiplied by the largest factor in (0, 1) that puts it inside, so its
    direction is kept. Returns a new matrix of the same type (CSR, CSC or dense).
    """
    max_l2 = float(max_l2)
    max_l1 = float(max_l1)
    if sp.issparse(X):
        fmt = X.format
        Xr = sp.csr_matrix(X, dtype=np.float64, copy=True)
        Xr.sum_duplicates()  # on the copy; see with_summed_duplicates
        scales = _row_scales_csr(Xr.data, Xr.indptr, max_l2, max_l1)
        Xr.data *= np.repeat(scales, np.diff(Xr.indptr))
        return Xr.asformat(fmt)
    X = np.asarray(X, dtype=np.float64)
    return X * _row_scales_dense(X, max_l2, max_l1)[:, None]


def clip_entries(X, feature_bound):
    """Clip every entry ``x_ij`` to ``[-b_j, b_j]``, ``b`` a number or one bound per
    feature; returns a new CSC matrix (sparse input) or array, with duplicate entries
    summed first so each ``x_ij`` is clipped as a whole."""
    b = np.asarray(feature_bound, dtype=float)
    if sp.issparse(X):
        X = sp.csc_matrix(X, dtype=np.float64, copy=True)
        X.sum_duplicates()
        # In CSC the stored entries of column j are data[indptr[j]:indptr[j+1]].
        bound = np.repeat(b, np.diff(X.indptr)) if b.ndim else b
        np.clip(X.data, -bound, bound, out=X.data)
        return X
    return np.clip(np.asarray(X, dtype=np.float64), -b, b)
