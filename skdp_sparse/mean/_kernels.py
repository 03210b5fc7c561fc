"""Numba kernels of ``DPSparseMeanEstimator``: the clipped mean of CSR rows, and the
projection of the values a sampled release drew (its noise comes from
``privacy.gaussian_ladder`` and ``privacy.discrete``)."""


import numba
import numpy as np

from ..privacy.clipping import clip_factor

# --------------------------------------------------------------------------
# Clipped mean
# --------------------------------------------------------------------------
# Rows per block of ``clipped_mean_csr``: the block's values stay in L2 between its
# two passes.
ROW_BLOCK = 1024


@numba.njit(cache=True)
def clipped_mean_csr(out, w, data, indices, indptr, max_l2, max_l1, n):
    """Write into ``out`` the mean of the CSR rows, each first scaled into the public balls.

    Row i is multiplied by ``s_i = min(1, max_l2 / ||x_i||_2)``, lowered to
    ``max_l1 / ||x_i||_1`` if that is smaller, 0 below ``TINY_FACTOR`` (``clip_rows``'
    rule), and added with weight ``s_i / n``. Returns a status: 0 done; 1 a row whose
    sum of squares is not finite was met, a NaN, an infinity or squares that overflow
    (``out`` is incomplete: the caller computes such rows' factors, see
    ``_release.clipped_mean``, so this kernel does not compile the rare rescaling with
    every first fit); 2 ``indices`` or ``indptr`` point outside their arrays (nothing is
    read or written out of bounds).

    Rows go by blocks: the norms of a block first, then its scatter, while its values
    are still in L2. A single pass, each row's scatter right after its norms,
    measured 1.7 times slower: the serial sums of a row then sit between the
    scatters, and far fewer cache-missing updates of ``out`` are in flight.

    ``indices`` and ``indptr`` are unsigned views of scipy's index arrays. Signed
    indices make Numba emit negative-index wraparound code in the inner loop,
    which measured 2.5 times slower on rows of about 20 values. Bounds are checked
    without a branch in the scatter loop (one there cost a third of the kernel):
    each row's range within ``data``, then the largest column of each block (a
    negative signed index is a huge unsigned one), before the block is scattered.

    ``out`` (any values) is zeroed here: the caller allocates it with ``np.empty``,
    which NumPy backs with huge pages at this size, where ``np.zeros`` (calloc)
    measured thousands of first-touch page faults per fit. ``w`` (any values, at least
    ``ROW_BLOCK`` long) holds a block's weights; from the caller too, so the kernel
    compiles no NumPy constructor on a new install's first fit.
    """
    out[:] = 0.0
    nnz = np.uint64(data.size)
    ud = np.uint64(out.size)
    one = np.uint64(1)
    n_rows = indptr.size - 1
    for first in range(0, n_rows, ROW_BLOCK):
        # comparisons, not min and max: each builtin specialisation compiles on its own
        last = first + ROW_BLOCK if first + ROW_BLOCK < n_rows else n_rows
        for i in range(first, last):
            start = np.uint64(indptr[i])
            stop = np.uint64(indptr[i + 1])
            if stop > nnz or start > stop:
                return 2
            l1 = 0.0
            l2sq = 0.0
            k = start
            while k < stop:
                v = data[k]
                l1 += abs(v)
                l2sq += v * v
                k += one
            # a NaN or infinity in the row makes l2sq NaN or infinite; so does overflow
            if not l2sq <= 1.7976931348623157e308:
                return 1
            w[i - first] = clip_factor(l1, l2sq, max_l2, max_l1) / n
        # indptr is nondecreasing over the block, so its entries are one slice: its
        # largest column, checked once, bounds every write of the scatter below
        top = indices.dtype.type(0)
        for k in range(np.uint64(indptr[first]), np.uint64(indptr[last])):
            if indices[k] > top:
                top = indices[k]
        if np.uint64(top) >= ud:
            return 2
        for i in range(first, last):
            wi = w[i - first]
            k = np.uint64(indptr[i])
            stop = np.uint64(indptr[i + 1])
            while k < stop:
                out[np.uint64(indices[k])] += data[k] * wi
                k += one
    return 0


@numba.njit(cache=True)
def threshold_above(z, t, radius, work):
    """Root tau >= t of ``g(tau) = sum_q (|z_q| - tau)_+ = radius``, or -1.0 if there is none.

    There is one exactly when ``g(t) >= radius`` (g is continuous, decreasing, and 0
    for tau large). Michelot's (1986) iteration from the values above t: with S the
    values kept, ``tau <- (sum(S) - radius) / |S|`` never exceeds the root while S
    contains every value above the root, and S keeps only the values above tau,
    until it no longer changes; then tau is the root. ``work`` (at least ``z.size``
    long) holds S, so nothing is allocated.
    """
    # the compactions are branch-free: which values pass is unpredictable
    c = 0
    total = 0.0
    for q in range(z.size):
        v = abs(z[q])
        work[c] = v
        keep = v > t
        c += keep
        total += v if keep else 0.0
    if c == 0 or not total - c * t >= radius:
        return -1.0
    tau = max((total - radius) / c, t)
    while True:
        kept = 0
        total = 0.0
        for q in range(c):
            v = work[q]
            work[kept] = v
            keep = v > tau
            kept += keep
            total += v if keep else 0.0
        if kept == c or kept == 0:  # (0 only by rounding, at the root)
            return tau
        c = kept
        tau = max((total - radius) / c, tau)


@numba.njit(cache=True)
def shrink_into(out, idx, z, tau, zero_first):
    """``out`` = the projection ``sign(z) (|z| - tau)_+`` on ``idx``, 0 elsewhere."""
    if zero_first:
        out[:] = 0.0
    for q in range(idx.size):
        v = abs(z[q]) - tau
        if v > 0.0:
            out[idx[q]] = v if z[q] > 0.0 else -v
