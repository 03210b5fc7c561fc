"""Private per-feature mean and variance within public ranges: statistics, plan, release.

For feature ``j`` with public range ``[l_j, u_j]``, midpoint ``m_j = (l_j + u_j) / 2``
and half-width ``h_j = (u_j - l_j) / 2``, every entry is clipped to the range and
put on the unit scale of its feature, ``z_ij = (min(max(x_ij, l_j), u_j) - m_j) / h_j``
(clipped again to ``[-1, 1]``, so that no rounding takes it outside), and two
vectors of sums are released:

* ``T1_j = sum_i z_ij``. Replacing one row moves each ``z_ij`` within ``[-1, 1]``,
  so ``T1_j`` by at most 2: l1 sensitivity ``2 p``, l2 sensitivity ``2 sqrt(p)``
  over the ``p`` features.
* ``T2_j = sum_i z_ij^2``. Each term lies in ``[0, 1]``, so replacing one row moves
  ``T2_j`` by at most 1: l1 sensitivity ``p``, l2 sensitivity ``sqrt(p)``.

In the original units these are the sum of the clipped values, ``m_j n + h_j T1_j``,
whose replace-one sensitivity is ``u_j - l_j``, and the sum of squared deviations
from the midpoint, ``h_j^2 T2_j``, whose sensitivity is ``h_j^2``: the noise of
feature ``j`` is proportional to its own sensitivity, and the privacy loss over the
features is the l1 norm (Laplace) or l2 norm (Gaussian) of the vector of ratios
sensitivity / noise. (One noise scale for all features, set by the l1 or l2 norm of
the vector of sensitivities, would drown the features of small range in the noise
of the large ones; on the unit scale every feature has the same relative accuracy,
whatever its units.) Replace-one neighbours: the number of rows n is public.

Each vector receives Laplace noise (``delta = 0``) or Gaussian noise (``delta > 0``);
the floating-point-safe path rounds it to a lattice and adds exact discrete noise
(:mod:`skdp_sparse.privacy.mechanisms`). The l2 sensitivities are rounded up.

Budget split: the two releases get equal shares in the measure the accountant
composes them in, epsilon / 2 each for Laplace noise (basic composition), rho / 2
each for discrete Gaussian noise (zCDP, converted to (epsilon, delta) by Canonne,
Kamath & Steinke 2020), mu / sqrt(2) each for Gaussian noise in doubles (exact GDP
composition). ``T1`` gets the whole budget when only the mean is needed
(``with_std=False``); nothing is released when neither the mean nor the scale is.
One noise multiplier ``s`` sets both scales (``b_k`` or ``sigma_k = s Delta_k``),
found by :func:`~skdp_sparse.privacy.accounting.calibrate_scale` so that the
composition of the recorded events meets ``(epsilon, delta)``.

Post-processing: ``t_j = clip(T1_j / n, -1, 1)``, ``mean_j = m_j + h_j t_j`` (in
``[l_j, u_j]``) and ``var_j = h_j^2 clip(T2_j / n - t_j^2, SCALE_FLOOR^2, 1)`` (the
variance of values in ``[l_j, u_j]`` is at most ``h_j^2``); ``scale_j = sqrt(var_j)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..privacy.accounting import calibrate_scale
from ..privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from ..utils._entry_blocks import entry_blocks

__all__ = ["SCALE_FLOOR", "MomentsPlan", "sensitivities", "make_plan", "unit_sums",
           "release_moments"]

#: Smallest standard deviation a feature is given, relative to its half-width
#: ``(u_j - l_j) / 2``: the noisy variance can be tiny or negative for an almost
#: constant feature, and dividing by its root would blow the feature up.
SCALE_FLOOR = 1e-3


@dataclass(frozen=True)
class MomentsPlan:
    """The releases of a fit, fixed from public values before the data are read."""

    epsilon: float
    delta: float
    sum_mechanism: object | None  # releases T1, or None
    square_mechanism: object | None  # releases T2, or None
    events: tuple = ()


def _events(sum_mechanism, square_mechanism):
    out = []
    for name, m in (("column sums", sum_mechanism), ("column sums of squares",
                                                     square_mechanism)):
        if m is not None:
            e = m.event()
            out.append(dataclasses.replace(e, name=f"{name} ({e.name})"))
    return tuple(out)


def sensitivities(n_features):
    """``(l1 of T1, l2 of T1, l1 of T2, l2 of T2)``; the square roots rounded up."""
    root = float(np.nextafter(math.sqrt(n_features), np.inf))
    return 2.0 * n_features, 2.0 * root, float(n_features), root


def _mechanisms(multiplier, sens, gaussian, safe, delta):
    if gaussian:
        if multiplier == 0:
            return tuple(GaussianMechanism(d, epsilon=math.inf, delta=delta,
                                           floating_point_safe=safe) for d in sens)
        return tuple(GaussianMechanism(d, sigma=multiplier * d, floating_point_safe=safe)
                     for d in sens)
    if multiplier == 0:
        return tuple(LaplaceMechanism(d, epsilon=math.inf, floating_point_safe=safe)
                     for d in sens)
    return tuple(LaplaceMechanism(d, scale=multiplier * d, floating_point_safe=safe)
                 for d in sens)


@functools.lru_cache(maxsize=128)
def _calibrated(sens, gaussian, safe, epsilon, delta):
    """The mechanisms of the releases of sensitivities ``sens`` (a tuple), their noise
    scales ``s * Delta_k`` with the smallest ``s`` whose events compose to at most
    ``(epsilon, delta)``. Cached: a function of public values only."""
    if math.isinf(epsilon):
        return _mechanisms(0, sens, gaussian, safe, delta)

    def events(s):
        return [m.event() for m in _mechanisms(s, sens, gaussian, safe, delta)]

    return _mechanisms(calibrate_scale(events, epsilon, delta), sens, gaussian, safe, delta)


@functools.lru_cache(maxsize=128)
def make_plan(n_features, epsilon, delta, *, with_mean, with_std, floating_point_safe):
    """The releases of a fit: which sums, with which mechanism and noise (see the module).

    Laplace noise with ``delta = 0``, Gaussian noise otherwise; ``floating_point_safe``
    chooses discrete noise on a lattice (True) or noise in doubles (False). Cached: the
    plan is immutable and depends on these public values only.
    """
    epsilon, delta = float(epsilon), float(delta)
    need_sums, need_squares = with_mean or with_std, with_std
    if not need_sums:
        return MomentsPlan(0.0, 0.0, None, None)
    l1_sum, l2_sum, l1_sq, l2_sq = sensitivities(int(n_features))
    gaussian = delta > 0
    sens = (l2_sum, l2_sq) if gaussian else (l1_sum, l1_sq)
    if not need_squares:
        sens = sens[:1]
    mechanisms = _calibrated(sens, gaussian, bool(floating_point_safe), epsilon, delta)
    square = mechanisms[1] if need_squares else None
    return MomentsPlan(epsilon, delta if gaussian else 0.0, mechanisms[0], square,
                       _events(mechanisms[0], square))


def unit_sums(X, lower, upper):
    """``(T1, T2)`` of the module, exactly (not private). Sparse ``X`` (CSR or CSC,
    canonical, every range containing 0) is read through its stored entries only."""
    mid, half = (lower + upper) / 2, (upper - lower) / 2
    if sp.issparse(X):
        n, p = X.shape
        t1, t2 = np.zeros(p), np.zeros(p)
        stored = np.zeros(p, dtype=np.int64)
        for entries, _, cols in entry_blocks(X):
            x = np.clip(X.data[entries].astype(np.float64), lower[cols], upper[cols])
            z = np.clip((x - mid[cols]) / half[cols], -1.0, 1.0)
            np.add.at(t1, cols, z)
            np.add.at(t2, cols, z * z)
            np.add.at(stored, cols, 1)
        # The entries not stored are zeros, inside every range: z_0 = -m_j / h_j.
        z0 = np.clip(-mid / half, -1.0, 1.0)
        absent = n - stored
        return t1 + absent * z0, t2 + absent * z0**2
    Z = np.clip(X, lower, upper)
    Z -= mid
    Z /= half
    np.clip(Z, -1.0, 1.0, out=Z)
    t1 = Z.sum(axis=0)
    np.square(Z, out=Z)
    return t1, Z.sum(axis=0)


def release_moments(X, lower, upper, plan, rng):
    """``(mean, var)``: the private estimates of the module (``None`` where not
    released), from the noisy sums of the plan."""
    if plan.sum_mechanism is None:
        return None, None
    n = X.shape[0]
    t1, t2 = unit_sums(X, lower, upper)
    mid, half = (lower + upper) / 2, (upper - lower) / 2
    t = np.clip(plan.sum_mechanism.randomise(t1, rng) / n, -1.0, 1.0)
    mean = np.clip(mid + half * t, lower, upper)
    if plan.square_mechanism is None:
        return mean, None
    second = plan.square_mechanism.randomise(t2, rng) / n
    var = half**2 * np.clip(second - t**2, SCALE_FLOOR**2, 1.0)
    return mean, var
