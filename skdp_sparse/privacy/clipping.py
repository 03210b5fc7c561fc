"""Clipping of rows to public norm bounds.

Clipping is what makes a sensitivity hold for every input: after it, each row
lies in the public ball the mechanism was calibrated for, whatever the data.
Sparse rows are rescaled in place of their stored values; no matrix is densified.
"""

import numbers

import numba
import numpy as np
import scipy.sparse as sp

from ..utils._entry_blocks import entry_blocks
from ..utils._first_use import FirstUseBudget
from ..utils.validation import MIN_BOUND, Interval, validate_params

__all__ = ["clip_rows", "clip_entries", "clip_entries_and_rows", "with_summed_duplicates"]


#: The largest finite double: a row's sum of squares above it has overflowed.
_MAX_DOUBLE = 1.7976931348623157e308
#: Factors below 2^-969 are set to 0. Below 2^-1022 a factor is subnormal and its
#: rounding no longer relative (a row of norm 3.4e222 against a bound of 1e-100 got
#: 5e-324 for 3e-323, so a clipped norm of 1.7e-100); a mean's weight ``s / n`` stays
#: normal for every n <= 2^53. Such a row's norm exceeds its bound 2^969 times: it
#: carries no usable direction, and 0 is inside every ball.
TINY_FACTOR = 2.0**-969


@numba.njit(cache=True)
def rescaled_clip_factor(data, start, stop, max_l2, max_l1):
    """``(s, finite)``: ``min(1, max_l2 / ||x||_2, max_l1 / ||x||_1)`` for the row
    ``x = data[start:stop]`` whose norms overflow a double, from the row over its largest
    entry (the norms of a finite row can exceed the largest double; its factor is 0
    only below ``TINY_FACTOR``). ``finite`` is False, and ``s`` meaningless, if a value
    is NaN or infinite."""
    top = 0.0
    for k in range(start, stop):
        v = abs(data[k])
        if not v <= _MAX_DOUBLE:
            return 0.0, False
        top = max(top, v)
    if top == 0.0:
        return 1.0, True
    l1 = 0.0
    l2sq = 0.0
    for k in range(start, stop):
        v = abs(data[k]) / top
        l1 += v
        l2sq += v * v
    s = min(1.0, (max_l2 / top) / np.sqrt(l2sq), (max_l1 / top) / l1)
    return (s if s >= TINY_FACTOR else 0.0), True


@numba.njit(cache=True, inline="always")
def clip_factor(l1, l2sq, max_l2, max_l1):
    """``clip_rows``' factor of a row from its l1 norm and finite sum of squares:
    ``min(1, max_l2 / ||x||_2)``, lowered to ``max_l1 / ||x||_1`` if that is smaller,
    and 0 below ``TINY_FACTOR``. Inlined into the kernels that clip (no compilation of
    its own)."""
    s = 1.0
    l2 = np.sqrt(l2sq)
    if l2 > max_l2:
        s = max_l2 / l2
    if l1 * s > max_l1:
        s = max_l1 / l1
    return s if s >= TINY_FACTOR else 0.0


@numba.njit(cache=True)
def _row_scales_csr(scales, data, indptr, max_l2, max_l1):
    # ``scales`` (any values, one per row) comes from the caller: an allocation here
    # would compile NumPy's constructor into the kernel on a new install's first fit.
    # A row whose norms overflow gets NaN, its factor then from row_scales_csr: a call
    # of rescaled_clip_factor here would compile it with every first fit, for rows
    # that almost never occur.
    for i in range(scales.size):
        l1 = 0.0
        l2sq = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            v = data[k]
            l1 += abs(v)
            l2sq += v * v
        if not l2sq <= _MAX_DOUBLE:
            scales[i] = np.nan
            continue
        scales[i] = clip_factor(l1, l2sq, max_l2, max_l1)


# Row positions times rows whose norms a process first sums in NumPy (tens of ms): the
# kernel's compilation costs about 0.2 s on a new install, more than a first fit of
# short rows (the quickstart's 15,000 rows of 15 values: a few ms) spends in NumPy.
_NUMPY_NORMS = FirstUseBudget(_row_scales_csr, 2**22)


def _row_scales_numpy(scales, data, indptr, max_l2, max_l1):
    """``_row_scales_csr`` in NumPy, one position of every row at a time: each row's
    sums take its values in storage order from 0.0, as the kernel's loop does."""
    counts = np.diff(indptr)
    starts = indptr[:-1].astype(np.int64)
    l1 = np.zeros(scales.size)
    l2sq = np.zeros(scales.size)
    rows = np.arange(scales.size)
    with np.errstate(all="ignore"):  # rows whose squares overflow are marked below
        for j in range(int(counts.max(initial=0))):
            rows = rows[counts[rows] > j]
            v = data[starts[rows] + j]
            l1[rows] += np.abs(v)
            l2sq[rows] += v * v
        l2 = np.sqrt(l2sq)
        scales[:] = 1.0
        big = l2 > max_l2
        scales[big] = max_l2 / l2[big]
        big = l1 * scales > max_l1
        scales[big] = max_l1 / l1[big]
    scales[scales < TINY_FACTOR] = 0.0
    scales[~(l2sq <= _MAX_DOUBLE)] = np.nan


def row_scales_csr(data, indptr, max_l2, max_l1):
    """``(scales, finite)``: each CSR row's factor into the public balls (``clip_rows``'
    rule), and whether every value is finite (a row with a NaN or an infinity gets 0)."""
    scales = np.empty(indptr.size - 1)
    longest = int(np.diff(indptr).max(initial=0))
    if _NUMPY_NORMS.take(longest * scales.size):
        _row_scales_numpy(scales, data, indptr, max_l2, max_l1)
    else:
        _row_scales_csr(scales, data, indptr, max_l2, max_l1)
    finite = True
    for i in np.flatnonzero(np.isnan(scales)):
        # int64 bounds whatever the index type: one compiled signature for all callers
        scales[i], ok = rescaled_clip_factor(data, np.int64(indptr[i]),
                                             np.int64(indptr[i + 1]), max_l2, max_l1)
        finite = finite and ok
    return scales, finite


def _row_scales_dense(X, max_l2, max_l1):
    # A row whose norms overflow gets its factor below; numpy's overflow warning would
    # only say that such a row exists.
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        l2 = np.linalg.norm(X, axis=1)
        l1 = np.abs(X).sum(axis=1)
        s = np.minimum(1.0, np.minimum(max_l2 / l2, max_l1 / l1))
        s[s < TINY_FACTOR] = 0.0
    for i in np.flatnonzero(~(np.isfinite(l1) & np.isfinite(l2))):
        s[i] = rescaled_clip_factor(X[i], 0, X.shape[1], max_l2, max_l1)[0]
    return s


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


#: Below about 1e-146 a row small enough to fit the bound has squares that underflow
#: (values under 1.5e-154 square to 0), so its l2 norm would be understated and the row
#: left above its bound; rows near the estimators' floor keep their squares' precision.
_CLIP_BOUND = [Interval(numbers.Real, MIN_BOUND, None, inf=True)]


def clip_rows(X, max_l2=np.inf, max_l1=np.inf):
    """Rescale each row of ``X`` so its l2 norm is <= ``max_l2`` and l1 norm <= ``max_l1``.

    A row already inside both balls is left unchanged; otherwise it is
    multiplied by the largest factor in (0, 1) that puts it inside, so its
    direction is kept (a factor below ``TINY_FACTOR``, whose rounding would not be
    relative, is 0 instead). Returns a new matrix of the same type (CSR, CSC or dense).
    Each bound is at least ``MIN_BOUND`` (1e-100, the estimators' floor), or infinite.
    """
    validate_params({"max_l2": _CLIP_BOUND, "max_l1": _CLIP_BOUND},
                    {"max_l2": max_l2, "max_l1": max_l1}, "clip_rows")
    max_l2, max_l1 = float(max_l2), float(max_l1)
    if sp.issparse(X):
        fmt = X.format
        Xr = sp.csr_matrix(X, dtype=np.float64, copy=True)
        Xr.sum_duplicates()  # on the copy; see with_summed_duplicates
        _rescale_rows(Xr, max_l2, max_l1)
        return Xr.asformat(fmt)
    X = np.asarray(X, dtype=np.float64)
    return X * _row_scales_dense(X, max_l2, max_l1)[:, None]


def _rescale_rows(Xr, max_l2, max_l1):
    """``clip_rows`` in place on a canonical float64 CSR matrix of our own."""
    scales = row_scales_csr(Xr.data, Xr.indptr, max_l2, max_l1)[0]
    for entries, rows, _ in entry_blocks(Xr):
        Xr.data[entries] *= scales[rows]


def clip_entries_and_rows(X, feature_bound, max_l2):
    """``clip_rows(clip_entries(X, feature_bound), max_l2)`` (CSC for sparse input, as
    there) from one copy of ``X``, clipped in place: the composition held the entries'
    copy, a CSR copy of it and the result at once."""
    if not sp.issparse(X):
        return clip_rows(clip_entries(X, feature_bound), max_l2)
    validate_params({"max_l2": _CLIP_BOUND}, {"max_l2": max_l2}, "clip_rows")
    Xr = clip_entries(X, feature_bound, format="csr")
    _rescale_rows(Xr, float(max_l2), np.inf)
    return Xr.tocsc()


def clip_entries(X, feature_bound, *, format="csc"):
    """Clip every entry ``x_ij`` to ``[-b_j, b_j]``, ``b`` a number or one bound per
    feature; returns a new sparse matrix in ``format`` (CSC or CSR; sparse input) or
    array, with duplicate entries summed first so each ``x_ij`` is clipped as a whole."""
    b = np.asarray(feature_bound, dtype=float)
    if sp.issparse(X):
        X = (sp.csr_matrix if format == "csr" else sp.csc_matrix)(X, dtype=np.float64,
                                                                  copy=True)
        X.sum_duplicates()
        for entries, _, cols in entry_blocks(X):
            bound = b[cols] if b.ndim else b
            values = X.data[entries]
            np.clip(values, -bound, bound, out=values)
        return X
    return np.clip(np.asarray(X, dtype=np.float64), -b, b)
