"""Projections in the l_inf norm onto the domains of output perturbation.

Output perturbation (Ghazi et al., "Differentially Private Optimization with Sparse
Gradients", Algorithm 3) returns ``argmin_{z in X} ||z - x||_inf``
of the noisy minimiser ``x``. Minimising the l_inf rather than the l2 distance is
what makes its accuracy depend on ``||noise||_inf`` (about ``sqrt(log d)`` times the
per-coordinate scale) instead of ``||noise||_2`` (about ``sqrt(d)`` times it).

The minimiser is not unique in general; every function here returns the same
canonical one. For a ball ``X = {z : ||z||_p <= R}`` (p = 1, 2) the points within
l_inf distance ``t`` of ``x`` that have the smallest p-norm are the soft-thresholded
``z(t) = sign(x) (|x| - t)_+``, so the optimal distance is the smallest ``t`` with
``||z(t)||_p <= R`` and ``z(t)`` attains it:

* l1 ball: ``sum_j (|x_j| - t)_+ = R``, the threshold of the Euclidean l1 projection;
* l2 ball: ``sum_j (|x_j| - t)_+^2 = R^2`` (not the Euclidean projection ``x R/||x||``);
* box ``[-R, R]^d``: coordinate-wise clipping (distance ``max_j (|x_j| - R)_+``).

Both thresholds are found exactly by one sort (O(d log d)): on the segment where
the k largest ``|x_j|`` are active the equation is linear (l1) or quadratic (l2) in
``t``; the l2 root is then polished by Newton steps, which converge monotonically
for this convex decreasing function, and the result is rescaled if rounding left it
outside the ball by an ulp.
"""

import math

import numpy as np

__all__ = [
    "DOMAINS",
    "linf_project",
    "linf_project_box",
    "linf_project_l1_ball",
    "linf_project_l2_ball",
]

DOMAINS = ("none", "box", "l2", "l1")


def _check(x, radius):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-d array, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("x must be finite")
    radius = float(radius)
    if not (radius > 0) or math.isnan(radius):
        raise ValueError(f"radius must be > 0, got {radius!r}")
    return x, radius


def _soft_threshold(x, t):
    return np.sign(x) * np.maximum(np.abs(x) - t, 0.0)


def linf_project_box(x, radius):
    """``argmin_{||z||_inf <= R} ||z - x||_inf``: clip every coordinate to [-R, R]."""
    x, radius = _check(x, radius)
    return np.clip(x, -radius, radius)


def _l1_threshold(a_sorted, radius):
    """t >= 0 with ``sum (a - t)_+ = R`` for ``a`` sorted decreasingly, ``sum a > R``."""
    cums = np.cumsum(a_sorted)
    k = np.arange(1, a_sorted.size + 1)
    # k* is the largest k whose k-th value stays active at the threshold of the top k.
    cand = (cums - radius) / k
    kstar = int(np.nonzero(a_sorted > cand)[0][-1])
    return max(cand[kstar], 0.0)


def linf_project_l1_ball(x, radius):
    """``argmin_{||z||_1 <= R} ||z - x||_inf``: soft threshold t with ``sum (|x_j|-t)_+ = R``.

    It coincides with the Euclidean projection onto the l1 ball.
    """
    x, radius = _check(x, radius)
    a = np.abs(x)
    if a.sum() <= radius:
        return x.copy()
    t = _l1_threshold(np.sort(a)[::-1], radius)
    z = _soft_threshold(x, t)
    norm = np.abs(z).sum()
    if norm > radius:  # an ulp of rounding; the correction is of the same order
        z *= radius / norm
    return z


def _l2_threshold(a_sorted, radius):
    """t >= 0 with ``sum (a - t)_+^2 = R^2`` for ``a`` sorted decreasingly, ``||a|| > R``."""
    r2 = radius * radius
    s1 = np.cumsum(a_sorted)
    s2 = np.cumsum(a_sorted * a_sorted)
    k = np.arange(1, a_sorted.size + 1)
    # phi(t) = sum (a_j - t)_+^2 is convex and decreasing; at the breakpoint t = a_{k+1}
    # it equals s2_k - 2 a_{k+1} s1_k + k a_{k+1}^2. The root lies in the first segment
    # whose right breakpoint already brings phi down to R^2 or below.
    nxt = np.append(a_sorted[1:], 0.0)
    phi_next = s2 - 2.0 * nxt * s1 + k * nxt * nxt
    idx = np.nonzero(phi_next >= r2)[0]
    kk = int(idx[0]) if idx.size else a_sorted.size - 1
    kk = min(kk, a_sorted.size - 1)
    m, S1, S2 = kk + 1, s1[kk], s2[kk]
    # Smaller root of m t^2 - 2 S1 t + (S2 - R^2) = 0, written without cancellation.
    disc = max(S1 * S1 - m * (S2 - r2), 0.0)
    t = (S2 - r2) / (S1 + math.sqrt(disc)) if S2 > r2 else 0.0
    t = min(max(t, 0.0), a_sorted[0])
    # Newton polish on the exact phi: convex decreasing, so the iterates approach the
    # root from the left and never overshoot (after at most one step from the right).
    for _ in range(4):
        act = a_sorted[a_sorted > t] - t
        phi = float(act @ act) - r2
        dphi = -2.0 * float(act.sum())
        if dphi == 0.0 or phi == 0.0:
            break
        t_new = t - phi / dphi
        if not (t_new > 0.0):
            break
        if abs(t_new - t) <= 4 * np.finfo(float).eps * max(t, 1e-300):
            t = t_new
            break
        t = t_new
    return t


def linf_project_l2_ball(x, radius):
    """``argmin_{||z||_2 <= R} ||z - x||_inf``: soft threshold t, ``sum (|x_j|-t)_+^2 = R^2``."""
    x, radius = _check(x, radius)
    if np.linalg.norm(x) <= radius:
        return x.copy()
    t = _l2_threshold(np.sort(np.abs(x))[::-1], radius)
    z = _soft_threshold(x, t)
    norm = np.linalg.norm(z)
    if norm > radius:  # an ulp of rounding; the correction is of the same order
        z *= radius / norm
    return z


def linf_project(x, domain, radius=None):
    """l_inf projection of ``x`` onto ``domain`` (``"none"``, ``"box"``, ``"l2"``, ``"l1"``).

    ``"box"`` is ``[-radius, radius]^d``, ``"l2"`` and ``"l1"`` the balls of that
    radius centred at 0; ``"none"`` (the whole space) returns a copy of ``x``.
    """
    if domain == "none":
        x = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(x)):
            raise ValueError("x must be finite")
        return x.copy()
    if domain == "box":
        return linf_project_box(x, radius)
    if domain == "l2":
        return linf_project_l2_ball(x, radius)
    if domain == "l1":
        return linf_project_l1_ball(x, radius)
    raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
