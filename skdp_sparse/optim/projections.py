"""Euclidean projections onto norm balls.

The l1-ball projection is the post-processing step of the projection
mechanism. A one-pass histogram first screens out coordinates that cannot
survive (a threshold ``t0`` with ``sum (|x_j| - t0)_+ >= radius`` is a lower
bound of the projection's threshold, checked exactly), then Condat's (2016)
algorithm finds the threshold of the few candidates left; no full sort of the
d coordinates is needed.
"""

import numba
import numpy as np

from ..utils._first_use import FirstUseBudget

__all__ = ["project_l1_ball", "project_l2_ball"]


@numba.njit(cache=True)
def simplex_threshold(y, radius, work):
    """Threshold tau with sum(max(y - tau, 0)) = radius, for y >= 0 and sum(y) > radius.

    Condat, "Fast projection onto the simplex and the l1 ball", Math. Prog. 2016,
    Algorithm 1 (online pass, deferred candidates, then a cleaning loop). ``work``
    (any values, at least ``2 y.size`` long) holds both lists: the callers allocate it,
    so the kernel compiles no NumPy constructor on a new install's first fit. Also
    runs interpreted, on lists (:func:`threshold_of`).
    """
    n = len(y)
    active = work[:n]
    deferred = work[n:2 * n]
    n_active = 1
    n_deferred = 0
    active[0] = y[0]
    rho = y[0] - radius
    for i in range(1, n):
        yi = y[i]
        if yi > rho:
            rho += (yi - rho) / (n_active + 1)
            if rho > yi - radius:
                active[n_active] = yi
                n_active += 1
            else:
                for k in range(n_active):
                    deferred[n_deferred + k] = active[k]
                n_deferred += n_active
                active[0] = yi
                n_active = 1
                rho = yi - radius
    for k in range(n_deferred):
        yk = deferred[k]
        if yk > rho:
            active[n_active] = yk
            n_active += 1
            rho += (yk - rho) / n_active
    changed = True
    while changed:
        changed = False
        k = 0
        while k < n_active:
            yk = active[k]
            if yk <= rho:
                n_active -= 1
                if n_active == 0:
                    # radius below the rounding of the values (1 against 1e20): every
                    # value is at most rho, so the projection is 0, inside the ball
                    return rho
                active[k] = active[n_active]
                rho += (rho - yk) / n_active
                changed = True
            else:
                k += 1
    return rho


# Values a process first thresholds interpreted (about 40 ms of Python): the kernel's
# compilation costs about 0.4 s on a new install, and a first fit's few thresholds of
# some 10^4 candidates (a mean of 10^5 coordinates) take milliseconds in Python.
_INTERPRETED = FirstUseBudget(simplex_threshold, 2**17)


def threshold_of(y, radius):
    """:func:`simplex_threshold` of a 1-d array ``y``: its Python function on lists
    within the process's budget (same bits), the kernel past it."""
    if _INTERPRETED.take(y.size):
        return float(simplex_threshold.py_func(y.tolist(), radius, [0.0] * (2 * y.size)))
    return float(simplex_threshold(y, radius, np.empty(2 * y.size)))


@numba.njit(cache=True)
def project_l1_inplace(x, radius):
    l1 = 0.0
    for i in range(x.size):
        l1 += abs(x[i])
    if l1 <= radius:
        return
    tau = simplex_threshold(np.abs(x), radius, np.empty(2 * x.size))
    for i in range(x.size):
        a = abs(x[i]) - tau
        x[i] = np.sign(x[i]) * a if a > 0 else 0.0


def screening_threshold(y, radius, n_buckets):
    """Largest bucket edge t with ``sum (y - t)_+ >= radius`` (up to rounding), for y >= 0.

    In NumPy rather than a kernel (a first fit then compiles less): ``bincount`` adds
    each bucket's values in the order of ``y`` and ``cumsum`` in order, so every sum
    is the one of the sequential loop over ``y`` then down the buckets.
    """
    ymax = float(y.max()) if y.size else 0.0
    if ymax == 0.0:
        return 0.0
    scale = n_buckets / ymax
    bucket = np.minimum((y * scale).astype(np.int64), n_buckets)
    # from the top bucket down: the count and sum of the values at or above each edge
    count = np.cumsum(np.bincount(bucket, minlength=n_buckets + 1)[::-1])
    total = np.cumsum(np.bincount(bucket, weights=y, minlength=n_buckets + 1)[::-1])
    edge = np.arange(n_buckets, -1, -1) / scale
    hit = np.flatnonzero(total - count * edge >= radius)
    return float(edge[hit[0]]) if hit.size else 0.0


def _project_l1_screened(x, radius):
    y = np.abs(x)
    t0 = screening_threshold(y, radius, 4096)
    keep = np.flatnonzero(y > t0)
    cand = y[keep]
    if not float(cand.sum()) - cand.size * t0 >= radius:  # rounding at a bucket edge
        keep = np.arange(y.size)
        cand = y
    tau = threshold_of(cand, radius)
    out = np.zeros_like(x)
    out[keep] = np.sign(x[keep]) * np.maximum(cand - tau, 0.0)
    return out


def project_l1_ball(x, radius):
    """Euclidean projection of ``x`` onto ``{z : ||z||_1 <= radius}``.

    Parameters
    ----------
    x : ndarray of shape (d,)
    radius : float, > 0

    Returns
    -------
    ndarray of shape (d,), a new array.
    """
    if not radius > 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    out = np.array(x, dtype=np.float64, copy=True).ravel()
    if not np.all(np.isfinite(out)):
        raise ValueError("x must be finite")
    if np.isfinite(radius) and float(np.abs(out).sum()) > radius:
        out = _project_l1_screened(out, float(radius))
    return out.reshape(np.shape(x))


def project_l2_ball(x, radius):
    """Euclidean projection of ``x`` onto ``{z : ||z||_2 <= radius}``."""
    x = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(x)
    return x * (radius / norm) if norm > radius else x.copy()
