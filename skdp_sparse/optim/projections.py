"""Euclidean projections onto norm balls.

The l1-ball projection is the post-processing step of the projection
mechanism; it uses Condat's (2016) algorithm, which runs in expected linear
time and needs no full sort of the d coordinates.
"""

import numba
import numpy as np

__all__ = ["project_l1_ball", "project_l2_ball"]


@numba.njit(cache=True)
def _simplex_threshold(y, radius):
    """Threshold tau with sum(max(y - tau, 0)) = radius, for y >= 0 and sum(y) > radius.

    Condat, "Fast projection onto the simplex and the l1 ball", Math. Prog. 2016,
    Algorithm 1 (online pass, deferred candidates, then a cleaning loop).
    """
    n = y.size
    active = np.empty(n)
    deferred = np.empty(n)
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
                active[k] = active[n_active]
                rho += (rho - yk) / n_active
                changed = True
            else:
                k += 1
    return rho


@numba.njit(cache=True)
def _project_l1_inplace(x, radius):
    l1 = 0.0
    for i in range(x.size):
        l1 += abs(x[i])
    if l1 <= radius:
        return
    tau = _simplex_threshold(np.abs(x), radius)
    for i in range(x.size):
        a = abs(x[i]) - tau
        x[i] = np.sign(x[i]) * a if a > 0 else 0.0


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
    if np.isfinite(radius):
        _project_l1_inplace(out, float(radius))
    return out.reshape(np.shape(x))


def project_l2_ball(x, radius):
    """Euclidean projection of ``x`` onto ``{z : ||z||_2 <= radius}``."""
    x = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(x)
    return x * (radius / norm) if norm > radius else x.copy()
