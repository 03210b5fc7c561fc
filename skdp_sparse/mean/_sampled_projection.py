"""The Gaussian projection without drawing the d noise values.

Only the noise that can survive the l1-ball projection is drawn, from thresholds
fixed by public values; the release has exactly the law of drawing all d values
(the argument is in :func:`sampled_gaussian_projection` for continuous noise, and in
:func:`sampled_discrete_projection` for the floating-point-safe release).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from scipy.special import ndtri

from ..optim.projections import project_l1_ball, screening_threshold, threshold_of
from ..privacy import discrete
from ..privacy.gaussian_ladder import fill_truncated, sample_exceedances
from ..privacy.mechanisms import GaussianMechanism
from ..utils.sparse_vector import SparseVector
from ._kernels import shrink_into, threshold_above

# --------------------------------------------------------------------------
# Gaussian projection without drawing the d noise values
# --------------------------------------------------------------------------
# (the argument that the sampled release is exact: ``sampled_gaussian_projection``)

# Margin, in standard deviations of the pure-noise sum, of the public threshold t.
_SAMPLING_MARGIN = 6.0
_P_HALF = float(-ndtri(0.25))  # t / sigma with 2 Phi(-t / sigma) = 1/2
# Coordinates with |mean_j| > SMALL_MEAN * sigma are drawn directly; below it the
# envelope's candidate rate is within about 10% of the pure-noise rate and its
# acceptance for mean_j = 0 about 0.91 at t = 1.5 sigma.
SMALL_MEAN = 0.05
# The safe release reveals the noise of keys up to MIDDLE_MEAN noise scales by a band of
# their own envelope (|Z| > u_{L-1} - MIDDLE_MEAN s), drawing it for a fraction of them
# (about a fifth) instead of all; the keys beyond are drawn directly.
MIDDLE_MEAN = 0.3
# Levels of the sampled projection: from t up, each level's pure-noise exceedance
# probability is LEVEL_RATIO times the one below. A fit draws the values above the
# level where it stops, so the ladder lets it stop near the projection's threshold,
# which the signal raises above t (by 15% at n = 1e5, d = 1e6, s = 20; the release
# then took about 0.85 times as long as with t alone, 0.45 times with a stronger signal),
# at the price of about 6% when it has to go down to t (no signal).
_N_LEVELS = 8
LEVEL_RATIO = 0.85


def _threshold_slack(x, d, r, margin):
    """``E sum_{j<=d} (|N(0,1)| - x)_+`` minus ``margin`` standard deviations minus r."""
    tail = 0.5 * math.erfc(x / math.sqrt(2.0))
    dens = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    m1 = 2.0 * (dens - x * tail)
    m2 = 2.0 * ((1.0 + x * x) * tail - x * dens)
    return d * m1 - margin * math.sqrt(d * max(m2 - m1 * m1, 0.0)) - r


@functools.lru_cache(maxsize=64)
def sampling_threshold(sigma, d, radius):
    """Public threshold t of the sampled projection, or None where it would not pay.

    A function of sigma, d and R only, never of the data. Each
    ``(|mean_j + xi_j| - t)_+`` is stochastically larger than ``(|xi_j| - t)_+``
    (Anderson's inequality: ``|a + xi|`` dominates ``|xi|`` for xi symmetric and
    unimodal), so ``P(tau < t) <= P(sum_{j<=d} (|xi_j| - t)_+ < R)`` whatever the
    data. t is (to a few digits) the largest value with the mean of that pure-noise
    sum ``_SAMPLING_MARGIN`` standard deviations above R, so stage 2 is rare; None
    when no such t leaves fewer than half the coordinates to draw. Any t > 0 gives
    the same law, only the cost changes, so no precision is needed.
    """
    if not (sigma > 0 and math.isfinite(radius) and d > 0):
        return None
    r = radius / sigma
    lo = _P_HALF
    if not _threshold_slack(lo, d, r, _SAMPLING_MARGIN) > 0:
        return None
    hi = 2.0 * lo
    while _threshold_slack(hi, d, r, _SAMPLING_MARGIN) > 0:
        lo, hi = hi, 2.0 * hi
    for _ in range(12):
        mid = 0.5 * (lo + hi)
        if _threshold_slack(mid, d, r, _SAMPLING_MARGIN) > 0:
            lo = mid
        else:
            hi = mid
    return sigma * lo


def sampling_levels(sigma, t, n_levels=_N_LEVELS):
    """Decreasing thresholds ``levels[0] > ... > levels[-1] = t`` of the sampled projection.

    Functions of sigma and t only (so of public quantities): ``2 Phi(-levels[i]/sigma)
    = 2 Phi(-t/sigma) LEVEL_RATIO^(n - 1 - i)``. Only t if some band would be too
    wide for its envelope (possible for t below about sigma / 2, never for the
    public t). Any decreasing levels give the same law; they only set the cost.
    """
    return np.array(_levels(float(sigma), float(t), int(n_levels), LEVEL_RATIO))


@functools.lru_cache(maxsize=64)
def _levels(sigma, t, n_levels, ratio):
    t = float(t)
    p = math.erfc(t / (sigma * math.sqrt(2.0)))
    levels = [t]
    for i in range(1, n_levels):
        level = -sigma * float(ndtri(0.5 * p * ratio**i))
        if level > levels[-1]:
            levels.append(level)
    levels.reverse()
    b = min(SMALL_MEAN * sigma, t)
    upper = math.inf
    for lower in levels:
        inside = 1.0 if upper == math.inf else (
            1.0 - 0.5 * math.erfc((upper - b) / (sigma * math.sqrt(2.0)))
            - 0.5 * math.erfc((upper + b) / (sigma * math.sqrt(2.0))))
        q = (math.erfc((lower - b) / (sigma * math.sqrt(2.0)))
             - (0.0 if upper == math.inf else
                math.erfc((upper - b) / (sigma * math.sqrt(2.0))))) / inside
        if not q <= 0.99:
            return (t,)
        upper = lower
    return tuple(levels)


def l1_threshold(a, radius):
    """Root tau of ``sum (a - tau)_+ = radius`` for a >= 0 with ``sum(a) > radius``."""
    t0 = screening_threshold(a, radius, 4096)
    cand = a[a > t0]
    if not float(cand.sum()) - cand.size * t0 >= radius:  # rounding at a bucket edge
        cand = a
    return threshold_of(cand, radius)


def sampled_gaussian_projection(mean, sigma, radius, t, rng, overwrite=False,
                                 n_levels=_N_LEVELS, support=None):
    """``P_K(mean + xi)`` drawing xi only where it can survive, with the exact law.

    **What is released, and why it is private.** The reference release (Algorithm 1
    with Gaussian noise, ``perturb``) is ``P_K(z)``, ``z = mean + xi``,
    ``xi ~ N(0, sigma^2 I_d)``, K the l1 ball of radius R: the Gaussian mechanism
    (sigma calibrated to the l2 sensitivity of the clipped mean) followed by the
    projection, which is post-processing. This function returns a vector whose law is
    exactly that of ``P_K(z)``, for every ``mean``; differential privacy is a property
    of the output law alone, so the reference guarantee holds unchanged.

    **The projection.** If ``||z||_1 <= R``, ``P_K(z) = z``. Otherwise
    ``P_K(z)_j = sign(z_j) (|z_j| - tau)_+`` with ``tau > 0`` the unique root of
    ``g(tau) = sum_j (|z_j| - tau)_+ = R`` (g is continuous, and strictly decreasing
    where positive).

    **Construction.** Fix ``b >= 0`` and levels ``t_0 > t_1 > ... > t_{L-1} = t >= b``
    (``t_{-1} = inf``).

    Stage 1 (``sample_exceedances``) reveals ``z_j`` itself where ``|mean_j| > b``
    ("big" positions), then goes down the levels: at level i, for every other j not
    yet revealed, the indicator of ``B_ij = {t_i < |z_j| <= t_{i-1}}`` and, on it,
    ``z_j``, drawn from their exact joint law given what was revealed before (that
    is, given ``|z_j| <= t_{i-1}``), independently over j (a Bernoulli process of
    candidates, then an envelope-and-thinning step: ``sample_band``'s docstring has
    the computation ``P(j kept, z_j in A | |z_j| <= t_{i-1}) = P(z_j in A, B_ij |
    |z_j| <= t_{i-1})``). U is the set of positions revealed with a value. After
    level i, with ``g_U(x) = sum_{j in U} (|z_j| - x)_+``, stage 1 stops if
    ``g_U(t_i) >= R``, else it goes on to level i + 1, until the levels run out.
    Let ``t*`` be the level where it stopped; off U every ``|z_j| <= t*``.

    Stage 2 decides from stage 1 only:

    * if ``g_U(t*) >= R``, then ``tau_U``, the root of ``g_U = R``, is ``>= t*``. Every
      ``j`` off U has ``|z_j| <= t* <= tau_U``, so ``g(tau_U) = g_U(tau_U) = R``: the
      projection's threshold is ``tau_U``, and ``P_K(z)`` is
      ``sign(z_j) (|z_j| - tau_U)_+`` on U and 0 off U, whatever the values off U.
      That vector is returned, the values off U never drawn;
    * otherwise (this includes ``||z||_1 <= R``; then ``t* = t``) the values off U are
      drawn from their conditional law given stage 1: independent,
      ``N(mean_j, sigma^2)`` conditioned on ``|z_j| <= t*`` (``fill_truncated``, exact
      rejection), and ``P_K`` of the completed vector is returned
      (``project_l1_ball``, the reference's code).

    **Equality in law.** Let Y be the vector that stage 1 and the completion would
    produce together (the completion is only a thought experiment on the first
    branch). Big positions have ``Y_j ~ N(mean_j, sigma^2)`` directly. For a small
    position, level by level: given ``|Y_j| <= t_{i-1}``, the band ``B_ij`` holds with
    its conditional probability and ``Y_j`` then has its conditional law on it;
    otherwise ``|Y_j| <= t_i``, the conditioning of the next level (or of the
    completion, after the last level reached). Chaining these conditional laws
    gives ``Y_j ~ N(mean_j, sigma^2)``, independently over j, and stage 1's output
    is the function of Y that reveals, down to the level reached, which band each
    ``Y_j`` is in and its value there. The stopping level and the branch are
    functions of that output; on each branch the output equals ``P_K(Y)`` (the
    first branch by the computation above, which holds for every value of the
    undrawn coordinates). Hence the output is ``P_K(Y)`` with
    ``Y ~ N(mean, sigma^2 I)`` on every sample path: exactly the reference law.
    Nothing is retried or discarded; the data-dependent stopping rule only chooses
    how much of one draw to materialise, so no conditioning on a data-dependent
    event enters the law.

    **Public choices.** t, b and the levels set only the cost, never the law, and
    are functions of public quantities: t of sigma, d and R
    (``sampling_threshold``), b a fixed fraction of sigma, the levels of sigma and
    t (``sampling_levels``). (The law is exact for any such choice; that they are
    public additionally keeps the cost model free of the data.)

    **Not covered.** The number of values drawn, and so the running time, depends on
    the data (how many big positions, where stage 1 stops, whether stage 2 runs);
    like every running time here, it is outside the guarantee (see the security
    page). Floating point: ``tau_U`` (Michelot's iteration) and the full
    projection's threshold (Condat's algorithm) are equal in exact arithmetic and
    differ by rounding only.

    ``t=None`` takes the public ``sampling_threshold``; ``n_levels`` (default
    ``_N_LEVELS``) the number of levels of ``sampling_levels``. With ``overwrite``
    the release is written into ``mean`` (its values are read before). ``support``: the
    increasing positions outside which ``mean`` is 0, if known; stage 1 then reads
    ``mean`` there only and the release is returned as a
    :class:`~skdp_sparse.utils.sparse_vector.SparseVector`, so that a release of a
    sparse mean costs what it touches, not d (the law is the same).

    Returns ``(released, tau, full, (idx, z), stop)``: ``full`` tells whether stage 2
    ran; ``z`` holds the values of ``mean + xi`` drawn, at the positions ``idx``: a
    superset of the coordinates where the release or the mean exceeds
    ``SMALL_MEAN * sigma`` unless ``full``, all of them if ``full``; ``stop`` is the
    level ``t*`` where stage 1 stopped.
    """
    d = mean.size
    sigma = float(sigma)
    radius = float(radius)
    if t is None:
        t = sampling_threshold(sigma, d, radius)
    levels = sampling_levels(sigma, t, n_levels)
    t = float(levels[-1])
    b = min(SMALL_MEAN * sigma, t)
    # d-long buffers from np.empty: only the part written is touched, and NumPy
    # backs them with huge pages (see clipped_mean_csr); positions in 32 bits
    # where they fit, to keep the working set small
    index = np.int32 if d < 2**31 else np.int64
    idx, z, cand = np.empty(d, index), np.empty(d), np.empty(d)
    if support is not None:
        support = np.ascontiguousarray(support, dtype=np.int64)
    count, level, found = sample_exceedances(
        mean, sigma, levels, b, radius, rng, idx, z, np.empty(-(-d // 64), np.uint64),
        np.empty(d, index), cand, support)
    idx, z = idx[:count], z[:count]
    reached = float(levels[level])
    tau = threshold_above(z, reached, radius, cand) if found else -1.0
    if tau >= 0.0:  # g_U(t*) >= R: tau = tau_U >= t*
        return _shrunk(mean, idx, z, tau, overwrite, support), tau, False, (idx, z), reached
    # stage 2: complete the same draw (off U, |z_j| <= t*, whichever level stage 1
    # stopped at: the sums that stopped it and the root finder may disagree by rounding)
    full = np.empty(d)
    drawn = np.zeros(d, dtype=np.bool_)
    drawn[idx] = True
    full[idx] = z
    fill_truncated(full, mean, drawn, sigma, reached, rng)
    a = np.abs(full)
    tau = l1_threshold(a, radius) if float(a.sum()) > radius else 0.0
    return (_in_form(project_l1_ball(full, radius), support), tau, True, (np.arange(d), full),
            reached)


def revealed_root(idx, z, reached, radius):
    """``threshold_above(z, reached, radius)`` on the revealed values above ``reached`` in
    increasing position: every position above the level reached is revealed, so these
    values are a function of the noisy keys alone, while the revealed order follows the
    private keys (the direct positions first) and would set the rounding of the root."""
    above = np.flatnonzero(np.abs(z) > reached)
    above = above[np.argsort(idx[above])]
    values = z[above]
    return threshold_above(values, reached, radius, np.empty(values.size))


def _shrunk(mean, idx, z, tau, overwrite, support):
    """``sign(z) (|z| - tau)_+`` on ``idx``, 0 elsewhere: a dense vector (in ``mean``'s
    memory with ``overwrite``), or its non-zero entries when a ``support`` was given."""
    if support is None:
        out = mean if overwrite else np.empty(mean.size)
        shrink_into(out, idx, z, tau, True)
        return out
    excess = np.abs(z) - tau
    keep = excess > 0.0
    return SparseVector(idx[keep].astype(np.int64), np.copysign(excess[keep], z[keep]),
                        mean.size)


def _in_form(released, support):
    """A dense release as the caller asked for it: as it is, or its non-zero entries."""
    return released if support is None else SparseVector.from_dense(released)


@functools.lru_cache(maxsize=64)
def _discrete_ladder(sensitivity, sigma, d, t, n_levels):
    """The public parameters of a sampled discrete projection: ``(lattice, levels, scale,
    bound, middle)``, the levels and the bounds in lattice units (functions of sigma, d,
    t and the lattice only)."""
    lattice = discrete.plan_gaussian(sensitivity, sigma, max(d, 1))
    k = lattice.k
    levels = tuple(math.floor(math.ldexp(v, -k)) for v in sampling_levels(sigma, t, n_levels))
    scale = Fraction(sigma) / Fraction(2) ** k
    bound = min(math.floor(SMALL_MEAN * scale), levels[-1])
    middle = max(bound, min(math.floor(MIDDLE_MEAN * scale), levels[-1]))
    return lattice, levels, scale, bound, middle


def sampled_discrete_projection(mean, sensitivity, sigma, radius, t, rng, overwrite=False,
                                n_levels=_N_LEVELS, support=None):
    """``P_K`` of the floating-point-safe Gaussian release of ``mean``, with its exact law,
    drawing the noise only where it can survive.

    **Reference.** ``GaussianMechanism(sensitivity, sigma=sigma, floating_point_safe=True)``
    then the projection (``perturb``): the keys ``a = rint(mean / gamma)`` on the lattice
    of ``discrete.plan_gaussian(sensitivity, sigma, d)``, i.i.d. discrete Gaussian noise
    ``Z`` of its ``s^2`` (lattice units), the vector ``x = gamma (a + Z)`` and ``P_K(x)``,
    K the l1 ball of radius R. The release is private because ``a + Z`` is (zCDP, with
    the rounding accounted), and ``P_K`` is post-processing; this function returns a
    vector with exactly the law of ``P_K(x)``, so the guarantee is the same.

    **Construction** (``discrete.ladder_exceedances``): the public threshold t and levels
    of the continuous version (``sampling_threshold``, ``sampling_levels``), in lattice
    units ``u_0 > ... > u_{L-1}`` (floors), and two envelope bounds ``B = floor(SMALL_MEAN
    s) <= M = floor(MIDDLE_MEAN s)``, both capped at ``u_{L-1}``. Stage 1 reveals ``Z_j``
    where ``|a_j| > M``; where ``B < |a_j| <= M``, the positions with ``|Z_j| > u_{L-1} -
    M`` (at once), with ``Z_j``; then, level by level, among the positions with ``|a_j| <=
    B``, those with ``u_i - B < |Z_j| <= u_{i-1} - B``, with ``Z_j``. Off the revealed set
    U, ``|a_j + Z_j| <= u_i`` after level i. It stops after level i when ``g_U(u_i) =
    sum_U (|a_j + Z_j| - u_i)_+ >= R / gamma`` (summed exactly). Stage 2 is the continuous
    one: if the root ``tau_U`` of ``g_U`` (on the doubles ``gamma (a_j + Z_j)``, which are
    exact, taken in increasing position: ``revealed_root``) is ``>=
    gamma u*`` at the level ``u*`` reached, the projection's threshold is ``tau_U`` and
    every coordinate off U projects to 0; otherwise the noise off U is drawn from its law
    given stage 1 (``|Z_j| <= u* - B`` or ``|Z_j| <= u_{L-1} - M``, independently) and the
    completed vector is projected with the reference's code. The equality in law is the
    continuous argument with ``|Z_j|`` in place of ``|z_j|`` for the bands
    (``doc/proofs/mean.rst``).

    Keys from ``2^52`` on (a mean of ``2^22`` noise scales or more), or no public t, take
    the unsampled release. ``support`` as in :func:`sampled_gaussian_projection`.
    Returns what :func:`sampled_gaussian_projection` returns, with ``z`` the values
    ``gamma (a + Z)`` drawn and ``stop = gamma u*``.
    """
    d = mean.size
    sigma, radius = float(sigma), float(radius)
    if t is None:
        t = sampling_threshold(sigma, d, radius)
    draw = None
    if t is not None:
        lattice, levels, scale, bound, middle = _discrete_ladder(
            float(sensitivity), sigma, d, float(t), int(n_levels))
        k = lattice.k
        draw = discrete.ladder_exceedances(mean, lattice, scale, levels, bound,
                                           math.ldexp(radius, -k), rng, middle, support)
    if draw is None:
        mech = GaussianMechanism(sensitivity, sigma=sigma, floating_point_safe=True)
        x = mech.randomise(mean, rng)
        return _in_form(project_l1_ball(x, radius), support), None, True, (np.arange(d), x), 0.0
    idx = draw.idx
    z = np.ldexp(draw.y, k)  # a + Z is an integer below 2^53: exact
    reached = math.ldexp(levels[draw.level], k)
    tau = revealed_root(idx, z, reached, radius) if draw.found else -1.0
    if tau >= 0.0:
        return _shrunk(mean, idx, z, tau, overwrite, support), tau, False, (idx, z), reached
    rest, noise = draw.complete()
    full = np.empty(d)
    full[idx] = z
    full[rest] = np.ldexp(discrete._to_lattice(mean[rest], k) + noise, k)
    a = np.abs(full)
    tau = l1_threshold(a, radius) if float(a.sum()) > radius else 0.0
    return (_in_form(project_l1_ball(full, radius), support), tau, True, (np.arange(d), full),
            reached)
