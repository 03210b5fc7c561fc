"""Numba kernels of the rows' side of coordinate descent: the margins ``z = X w + b``,
the loss derivatives ``d`` and the clipped coordinate gradients ``g`` (see
``_cd_kernels`` for the layout of ``data`` and the state), computed and updated
from the rows given: all rows of a fit in memory, or one block of them where it lives.
"""

import numba
import numpy as np

from ._prefetch import prefetch
from .losses import loss_derivative, loss_value

# A gradient term |l' x| is below its clip in exact arithmetic when the rounded test
# |l'| |x| <= UNCLIPPED clip holds: the margin exceeds the test's few roundings.
UNCLIPPED = 1.0 - 2.0**-20


@numba.njit(cache=True, inline="always")
def clip_scalar(v, c):
    if v > c:
        return c
    if v < -c:
        return -c
    return v


@numba.njit(cache=True)
def init_derivatives(y, z, d, loss_code, loss_param):
    for i in range(z.size):
        d[i] = loss_derivative(loss_code, y[i], z[i], loss_param)


@numba.njit(cache=True)
def column_gradient(dense, data, j, n_features, d, clip, n_total=-1):
    """``(1/n) sum_i clip(l'(y_i, z_i) x_ij, clip[j])`` from column j alone; the sum
    runs over the rows given, ``n`` is ``n_total`` when those are a block of the fit's
    rows (the blocks' terms then add up to the fit's gradient)."""
    Xf, cdata, cind, cptr = data[0], data[1], data[2], data[3]
    n = d.size
    c = clip[j]
    s = 0.0
    if j >= n_features:
        for i in range(n):
            s += clip_scalar(d[i], c)
    elif dense:
        for i in range(n):
            s += clip_scalar(d[i] * Xf[i, j], c)
    else:
        for kk in range(cptr[j], cptr[j + 1]):
            s += clip_scalar(d[cind[kk]] * cdata[kk], c)
    return s / (n if n_total < 0 else n_total)


@numba.njit(cache=True)
def row_clip_ratios(dense, data, clip, out):
    """``out[i] = max_k |x_ik| / clip[k]`` over the entries of row i (the stored ones of
    sparse X; 0 for an empty row): with ``|l'| out[i] < 1`` no term of row i reaches
    its clip."""
    out[:] = 0.0
    if dense:
        Xf = data[0]
        # Column by column: X is Fortran-ordered.
        for k in range(Xf.shape[1]):
            inv_c = 1.0 / clip[k]
            for i in range(out.size):
                v = abs(Xf[i, k]) * inv_c
                if v > out[i]:
                    out[i] = v
        return
    rdata, rind, rptr = data[4], data[5], data[6]
    for i in range(out.size):
        r = 0.0
        for q in range(rptr[i], rptr[i + 1]):
            v = abs(rdata[q]) / clip[rind[q]]
            if v > r:
                r = v
        out[i] = r


@numba.njit(cache=True)
def full_gradient(dense, data, n_features, d, clip, g, n_total=-1):
    """Every ``g_j`` as :func:`column_gradient` computes it, to the bit.

    With the CSR part at hand (greedy selection on sparse X) the sums run row by row:
    each column's terms are still added in increasing row order, as the CSC loop adds
    them (its indices are sorted), but X is read once in storage order, each ``d_i``
    once, and the sums of the columns of a row are independent of one another, where
    one column's sum is a chain of dependent additions."""
    if dense or data[6].size == 0:
        for j in range(g.size):
            g[j] = column_gradient(dense, data, j, n_features, d, clip, n_total)
        return
    rdata, rind, rptr = data[4], data[5], data[6]
    n = d.size
    with_intercept = g.size > n_features
    c0 = clip[n_features] if with_intercept else 0.0
    s0 = 0.0
    g[:] = 0.0
    for i in range(n):
        di = d[i]
        for q in range(np.uint64(rptr[i]), np.uint64(rptr[i + 1])):
            k = np.uint64(rind[q])
            g[k] += clip_scalar(di * rdata[q], clip[k])
        if with_intercept:
            s0 += clip_scalar(di, c0)
    denom = n if n_total < 0 else n_total
    for j in range(n_features):
        g[j] = g[j] / denom
    if with_intercept:
        g[n_features] = s0 / denom


@numba.njit(cache=True)
def loss_sum(y, z, loss_code, loss_param):
    """``sum_i l(y_i, z_i)`` over the rows given."""
    s = 0.0
    for i in range(z.size):
        s += loss_value(loss_code, y[i], z[i], loss_param)
    return s


@numba.njit(cache=True, inline="always")
def _mark(changed, k):
    # changed = (dirty, marked) of new_changes: dirty[0] counts the coordinates listed
    # from dirty[1], a negative count means "rebuild everything"; marked[k] keeps a
    # coordinate from being listed twice.
    dirty, marked = changed
    if dirty.size == 0 or dirty[0] < 0:
        return
    if marked[k] == 0:
        marked[k] = 1
        dirty[1 + dirty[0]] = k
        dirty[0] += 1


@numba.njit(cache=True)
def mark_changed(changed, coords):
    """Record ``coords`` in ``changed`` (see :func:`_mark`)."""
    for r in range(coords.size):
        _mark(changed, coords[r])


@numba.njit(cache=True, inline="always")
def _shift_margin(i, shift, y, z, d, loss_code, loss_param):
    """``z_i += shift`` and the loss derivative ``d_i`` recomputed; returns the old and
    the new derivative."""
    z[i] += shift
    d_old = d[i]
    d[i] = loss_derivative(loss_code, y[i], z[i], loss_param)
    return d_old, d[i]


# How many rows of a column ahead of the one updated their state and their CSR row are
# asked into the caches.
_AHEAD_STATE = 16
_AHEAD_ROW = 8


@numba.njit(cache=True)
def _apply_delta_sparse(data, j, delta, n_features, y, loss_code, loss_param, z, d, g,
                        clip, row_ratio, maintain, work, changed, n_total):
    """:func:`apply_delta` on sparse X: rows of column j from the CSC part, their
    gradient terms from the CSR part.

    ``row_ratio[i] = max_k |x_ik| / clip[k]`` (0 for an empty row) tells which rows
    no clip can touch: when ``max(|l'_new|, |l'_old|) row_ratio[i] <= UNCLIPPED``, every
    term of row i has ``|l' x_ik| < clip[k]`` in exact arithmetic (the margin of
    ``UNCLIPPED`` covers the roundings of the test), so its change is ``(l'_new -
    l'_old) x_ik / n``, added as ``x_ik`` times one per-row factor: one multiply-add
    per non-zero, as in a matrix-vector product. The other rows test each term and
    clip where the bound may bite. The intercept's running sum and the work count
    stay in registers; marking is a separate loop, run only when it is tracked.

    Column j's rows are scattered over X, so each one's state and CSR entries are cache
    misses that, taken in turn, would wait on memory one after another: their loads
    start some rows ahead (a row's bounds first, its entries once the bounds are in),
    written out in the loop, as a helper taking the arrays would count references to
    each of them on every row."""
    cdata, cind, cptr = data[1], data[2], data[3]
    rdata, rind, rptr = data[4], data[5], data[6]
    n = z.size
    inv_n = 1.0 / (n if n_total < 0 else n_total)
    intercept = j >= n_features
    lo, hi = (0, n) if intercept else (cptr[j], cptr[j + 1])
    with_intercept = g.size > n_features
    dirty, marked = changed
    track = maintain and dirty.size > 0 and dirty[0] >= 0
    list_limit = dirty[dirty.size - 1] if track else 0
    c0 = clip[n_features] if with_intercept else 0.0
    g0 = g[n_features] if with_intercept else 0.0
    touched = 0
    for kk in range(lo, hi):
        ahead = kk + _AHEAD_STATE
        if not intercept and ahead < hi:
            r = cind[ahead]
            prefetch(z, r)
            prefetch(d, r)
            prefetch(y, r)
            if maintain:
                prefetch(row_ratio, r)
                prefetch(rptr, r)
        ahead = kk + _AHEAD_ROW
        if not intercept and maintain and ahead < hi:
            r = cind[ahead]
            q_first, q_last = rptr[r], rptr[r + 1] - 1
            if q_last >= q_first:
                prefetch(rind, q_first)
                prefetch(rdata, q_first)
                prefetch(rind, q_last)
                prefetch(rdata, q_last)
        i = kk if intercept else cind[kk]
        d_old, d_new = _shift_margin(i, delta if intercept else delta * cdata[kk], y, z, d,
                                     loss_code, loss_param)
        if d_new == d_old or not maintain:
            continue
        start, stop = rptr[i], rptr[i + 1]
        d_max = max(abs(d_new), abs(d_old))
        factor = (d_new - d_old) * inv_n
        # Unsigned positions and columns spare every access the test and the fix-up of
        # a negative index (these are never negative), a third of the loops' work.
        first, last = np.uint64(start), np.uint64(stop)
        if d_max * row_ratio[i] <= UNCLIPPED:
            for q in range(first, last):
                g[np.uint64(rind[q])] += rdata[q] * factor
        else:
            for q in range(first, last):
                k = np.uint64(rind[q])
                x = rdata[q]
                c = clip[k]
                if d_max * abs(x) <= UNCLIPPED * c:
                    g[k] += x * factor
                else:
                    g[k] += (clip_scalar(d_new * x, c) - clip_scalar(d_old * x, c)) * inv_n
        if track:
            # _mark written out: called per entry, it would count references to the
            # pair of arrays each time.
            for q in range(start, stop):
                k = rind[q]
                if marked[k] == 0:
                    marked[k] = 1
                    dirty[1 + dirty[0]] = k
                    dirty[0] += 1
            # Past the consumer's limit the list is worth no more than "all changed",
            # and the rest of the column's rows need no marking pass.
            if dirty[0] > list_limit:
                dirty[0] = -1
                track = False
        if with_intercept:
            g0 += (clip_scalar(d_new, c0) - clip_scalar(d_old, c0)) * inv_n
        touched += stop - start + 1
    if touched > 0:
        if with_intercept:
            g[n_features] = g0
            if track:
                _mark(changed, n_features)
        work[0] += touched


@numba.njit(cache=True)
def apply_delta(
    dense, data, j, delta, n_features, y, loss_code, loss_param,
    z, d, g, clip, row_ratio, maintain, work, d_old_buf, rows_buf, changed, n_total=-1,
):
    """Move coordinate j by ``delta``: update z and d from column j only and,
    if ``maintain``, every g_k whose rows saw their loss derivative change
    (recorded in ``changed`` when it is not empty). ``row_ratio``: see
    :func:`row_clip_ratios` (sparse X with ``maintain`` only). ``n_total``: see
    :func:`column_gradient`."""
    Xf = data[0]
    n = z.size
    inv_n = 1.0 / (n if n_total < 0 else n_total)
    intercept = j >= n_features
    if not dense:
        _apply_delta_sparse(data, j, delta, n_features, y, loss_code, loss_param, z, d, g,
                            clip, row_ratio, maintain, work, changed, n_total)
        return
    # Dense: collect the changed rows first, then sweep X column by column so that
    # the gradient update reads the Fortran-ordered X contiguously. As on sparse X
    # (``_apply_delta_sparse``), a row that no clip can touch adds ``x_ik`` times one
    # factor, ``(l'_new - l'_old) / n``: those rows are listed from the front of
    # ``rows_buf`` with their factor in ``d_old_buf``; the others from the back, with
    # their old derivative, and test each term against its clip.
    with_intercept = g.size > n_features
    c0 = clip[n_features] if with_intercept else 0.0
    g0 = 0.0
    fast = 0
    slow = n
    for i in range(n):
        x = 1.0 if intercept else Xf[i, j]
        if x == 0.0:
            continue
        d_old, d_new = _shift_margin(i, delta * x, y, z, d, loss_code, loss_param)
        if d_new == d_old or not maintain:
            continue
        if with_intercept:
            g0 += (clip_scalar(d_new, c0) - clip_scalar(d_old, c0)) * inv_n
        if max(abs(d_new), abs(d_old)) * row_ratio[i] <= UNCLIPPED:
            rows_buf[fast] = i
            d_old_buf[fast] = (d_new - d_old) * inv_n
            fast += 1
        else:
            slow -= 1
            rows_buf[slow] = i
            d_old_buf[slow] = d_old
    m = fast + n - slow
    if not maintain or m == 0:
        return
    for k in range(n_features):
        c = clip[k]
        acc = 0.0
        if fast == n:
            for i in range(n):
                acc += Xf[i, k] * d_old_buf[i]
        else:
            for r in range(fast):
                acc += Xf[rows_buf[r], k] * d_old_buf[r]
        for r in range(slow, n):
            i = rows_buf[r]
            x = Xf[i, k]
            d_new = d[i]
            d_old = d_old_buf[r]
            if max(abs(d_new), abs(d_old)) * abs(x) <= UNCLIPPED * c:
                acc += x * (d_new - d_old) * inv_n
            else:
                acc += (clip_scalar(d_new * x, c) - clip_scalar(d_old * x, c)) * inv_n
        g[k] += acc
    if with_intercept:
        g[n_features] += g0
    work[0] += m * g.size
    if changed[0].size:
        changed[0][0] = -1


@numba.njit(cache=True)
def move_coordinate(
    dense, data, j, delta, n_features, y, loss_code, loss_param, z, d, g, clip, row_ratio,
    greedy, work, refresh_work, d_old_buf, rows_buf, changed, n_total,
):
    """The rows' side of an update: :func:`apply_delta`, and for greedy selection the
    exact recomputation of ``g`` once the incremental work since the last one exceeds
    ``refresh_work`` (then ``changed`` says that every coordinate changed)."""
    apply_delta(
        dense, data, j, delta, n_features, y, loss_code, loss_param,
        z, d, g, clip, row_ratio, greedy, work, d_old_buf, rows_buf, changed, n_total,
    )
    # Incremental sums drift by rounding; an exact recomputation once the incremental
    # work exceeds a few full passes bounds the drift at a small constant-factor cost.
    if greedy and work[0] > refresh_work:
        full_gradient(dense, data, n_features, d, clip, g, n_total)
        work[1] += work[0]
        work[2] += 1
        work[0] = 0
        if changed[0].size > 0:
            changed[0][0] = -1


