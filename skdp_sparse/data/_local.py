"""The rows of a fit held in this process."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..privacy.clipping import clip_entries, clip_entries_and_rows, clip_rows
from ..privacy.statistics import column_second_moment_sums
from ..utils.validation import canonical_sparse

__all__ = ["LocalData"]


class LocalData:
    """A fit's private rows and targets, and the clipped forms solvers ask for.

    Parameters
    ----------
    X : CSR or CSC matrix, or ndarray of shape (n_samples, n_features)
        Validated data (:func:`~skdp_sparse.utils.validation.validate_fit_data`):
        float64, and for sparse input a canonical matrix object of the library's own
        (sorted indices, no duplicates, no stored zeros), whose arrays may be the
        caller's. Nothing here writes into them.
    Y : ndarray of shape (n_samples, n_targets), optional
        Targets, one column per problem (one-vs-rest labels in {-1, +1}, or values).

    Every derived form is computed once and cached; each is a new object, so a
    solver may hand it to kernels that expect their own index types.
    """

    def __init__(self, X, Y=None):
        self.X = X
        self.Y = None if Y is None else np.asarray(Y, dtype=np.float64)
        self.n_samples, self.n_features = X.shape
        self._cache = {}

    @property
    def is_sparse(self):
        return sp.issparse(self.X)

    @property
    def n_targets(self):
        return 0 if self.Y is None else self.Y.shape[1]

    def target(self, k):
        """Targets of problem ``k`` (a contiguous float64 vector)."""
        return np.ascontiguousarray(self.Y[:, k])

    def _cached(self, key, compute):
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def rows_clipped(self, norm_bound, l1_bound=math.inf):
        """Rows rescaled into the l2 ball of radius ``norm_bound`` and the l1 ball of
        radius ``l1_bound``: a CSR matrix with sorted int64 indices, or a C-ordered
        array."""

        def compute():
            X = self.X.tocsr() if self.is_sparse else self.X
            if math.isfinite(norm_bound) or math.isfinite(l1_bound):
                X = clip_rows(X, norm_bound, l1_bound)
            if not sp.issparse(X):
                return np.ascontiguousarray(X)
            X = sp.csr_matrix(X, copy=X is self.X)
            X.sort_indices()
            X.indices = X.indices.astype(np.int64, copy=False)
            X.indptr = X.indptr.astype(np.int64, copy=False)
            return X

        return self._cached(("rows", float(norm_bound), float(l1_bound)), compute)

    def entries_clipped(self, feature_bound):
        """Every entry ``x_ij`` clipped to ``[-b_j, b_j]``: CSC (sparse) or an array."""
        b = np.asarray(feature_bound, dtype=float)
        key = ("entries", b.tobytes(), b.shape)
        return self._cached(key, lambda: clip_entries(self.X, b))

    def entries_and_rows_clipped(self, feature_bound, norm_bound):
        """:meth:`entries_clipped`, then every row rescaled into the l2 ball of radius
        ``norm_bound`` (the rows the curvature statistic sums): CSC or an array."""
        b = np.asarray(feature_bound, dtype=float)
        key = ("entries+rows", b.tobytes(), b.shape, float(norm_bound))
        return self._cached(key, lambda: clip_entries_and_rows(self.X, b, norm_bound))

    def weighted_column_sums(self, norm_bound, weights):
        """``sum_i weights[i, k] xt_i`` for every column, with ``xt_i`` the rows of
        :meth:`rows_clipped` (l2 norm at most ``norm_bound``): an array of shape
        (n_features, K) for ``weights`` of shape (n_samples, K)."""
        weights = np.asarray(weights, dtype=np.float64)
        rows = self.rows_clipped(norm_bound)
        return np.asarray(rows.T @ weights, dtype=np.float64).reshape(self.n_features, -1)

    def positive_counts(self):
        """Number of targets above 0 in each column of ``Y`` (the rows of each class of
        a one-vs-rest problem): an int array of shape (n_targets,)."""
        return np.count_nonzero(self.Y > 0, axis=0)

    def restricted(self, columns):
        """The same rows and targets on the given columns only (a new view)."""
        columns = np.asarray(columns, dtype=np.int64)
        if self.is_sparse:
            X = canonical_sparse(self.X[:, columns].asformat(self.X.format))
        else:
            X = np.ascontiguousarray(self.X[:, columns])
        return LocalData(X, self.Y)

    def column_second_moment_sums(self, feature_bound, norm_bound, square_norm=None):
        """``(sums, n_clipped)`` of the rows of :meth:`entries_clipped` clipped to
        ``norm_bound`` in l2 (the statistic a curvature estimate perturbs), each row's
        vector of squares rescaled to l2 norm ``square_norm`` if given
        (:func:`~skdp_sparse.privacy.statistics.column_second_moment_sums`)."""
        if not self.is_sparse:  # the clipped array coordinate descent reads as well
            return column_second_moment_sums(self.entries_clipped(feature_bound),
                                             norm_bound, square_norm)
        return column_second_moment_sums(self.X, norm_bound, square_norm,
                                         feature_bound=np.asarray(feature_bound, dtype=float))

    def row_sum(self, func, *args, norm_bound=None, l1_bound=math.inf):
        """``func(rows, Y, 0, *args)``: a sum over the rows that ``func`` computes, on
        the rows as validated (``norm_bound=None``) or on :meth:`rows_clipped`.

        ``func(rows, Y, start, *args)`` sums over a block of rows whose first row is
        row ``start`` of the fit; here the block is all rows. A view over distributed
        row blocks calls it on each block and adds the results, so a solver written
        against this method runs unchanged on both.
        """
        rows = self.X if norm_bound is None else self.rows_clipped(norm_bound, l1_bound)
        return func(rows, self.Y, 0, *args)

    def max_row_norm(self):
        """Largest l2 norm of a row. Not private: for runs without noise only."""
        X = self.X
        sq = X.multiply(X).sum(axis=1) if self.is_sparse else (X * X).sum(axis=1)
        return math.sqrt(float(np.max(sq))) if self.n_samples else 0.0
