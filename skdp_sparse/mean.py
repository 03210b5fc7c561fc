"""Differentially private mean of sparse, high-dimensional vectors."""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp
from scipy.special import ndtri
from sklearn.base import BaseEstimator

from ._mean_kernels import (
    _clipped_mean_csr,
    _fill_truncated,
    _sample_exceedances,
    _shrink_into,
    _threshold_above,
)
from ._validation import (
    check_bound,
    check_floating_point_safe,
    check_privacy_params,
    validate_sparse_data,
)
from .base import DPEstimatorMixin
from .optim.l1_recovery import GaussianSensingMatrix, basis_pursuit
from .optim.projections import (
    _project_l1_inplace,
    _screening_threshold,
    _simplex_threshold,
    project_l1_ball,
)
from .privacy._random import check_generator
from .privacy.accounting import PrivacyAccountant
from .privacy.clipping import clip_rows, with_summed_duplicates
from .privacy.mechanisms import GaussianMechanism, LaplaceMechanism

__all__ = ["DPSparseMeanEstimator"]

_METHODS = ("auto", "projection", "l1_recovery", "gaussian", "laplace")

# Each row's measurement A z_i is clipped to this multiple of the l2 bound, so
# the l2 sensitivity of the averaged measurements is 2 * 1.5 * L / n = 3L/n for
# every draw of A (the value the paper obtains from a restricted-isometry event).
_MEASUREMENT_CLIP = 1.5

_BP_MAX_ITER = 500
_BP_TOL = 1e-4
_ROW_CHUNK_BYTES = 32 * 2**20


@dataclass(frozen=True)
class _Plan:
    """Everything a fit does, fixed from public quantities before the data are read."""

    method: str
    mechanism: LaplaceMechanism | GaussianMechanism
    max_l2: float
    max_l1: float
    radius: float  # l1-ball radius of the final projection; inf: no projection
    n_measurements: int = 0  # > 0: compressed-sensing branch of Algorithm 2

    @property
    def noise_scale(self):
        if isinstance(self.mechanism, LaplaceMechanism):
            return self.mechanism.scale
        return self.mechanism.sigma


# --------------------------------------------------------------------------
# Public-parameter rules
# --------------------------------------------------------------------------
def _n_measurements(n, d, s, epsilon, delta):
    """Number m of measurements of Algorithm 2, or 0 when it falls back to plain noise.

    ``m = ceil(n eps sqrt(s ln(d/s) / ln(1/delta)))`` (paper 003, Alg. 2; the
    nested root of Thm 3.4 is a typo). The compressed-sensing branch is taken
    when ``d >= m ln^2 m`` (and ``1 <= m < d``); with ``epsilon = inf`` there is
    no noise to compress away and the exact mean is returned.
    """
    if math.isinf(epsilon) or delta <= 0 or s >= d:
        return 0
    m = math.ceil(n * epsilon * math.sqrt(s * math.log(d / s) / math.log(1 / delta)))
    if m < 1 or m >= d or d < m * math.log(m) ** 2:
        return 0
    return int(m)


def _table1_rates(n, d, s, epsilon, delta):
    """Upper-bound rates of Table 1 (paper 003), L = 1, without the trivial ``1 ∧``.

    Returns ``{"projection": ..., "l1_recovery": ..., "gaussian"/"laplace": ...}``.
    """
    en = epsilon * n
    if delta == 0:
        return {
            "projection": min(math.sqrt(s * math.log(d) / en), math.sqrt(s * d) / en),
            "laplace": math.sqrt(s * d) / en,
        }
    lid = math.log(1 / delta)
    low = math.sqrt(d * lid) / en
    return {
        "projection": min((s * math.log(d) * lid) ** 0.25 / math.sqrt(en), low),
        # Thm 3.4's bound, with the sqrt(1.5) its 3L/n sensitivity costs over
        # the projection's 2L/n (the error scales as the square root of the noise).
        "l1_recovery": min(
            math.sqrt(1.5) * (s * math.log(d / s) * lid) ** 0.25
            / math.sqrt(en),
            low,
        ),
        "gaussian": low,
    }


def _choose_method(n, d, s, epsilon, delta, max_work=1e9):
    """The ``method="auto"`` rule; it reads only public n, d, s, epsilon, delta.

    * No ``sparsity``: nothing to project on; plain ``"laplace"`` (delta = 0) or
      ``"gaussian"`` (delta > 0).
    * delta = 0: ``"projection"``. With the same noise, projecting onto the l1
      ball (which contains the clipped mean) never increases the l2 error, so it
      is never worse than plain Laplace, and Thm 3.2 gives both rates of Table 1.
    * delta > 0: ``"l1_recovery"`` only where all of these hold: Algorithm 2
      takes its compressed-sensing branch (``d >= m ln^2 m``); its Table-1 rate,
      inflated by ``sqrt(1.5)`` for its 3L/n sensitivity, is below both the
      projection's rate and the trivial rate 1; and one product with the
      ``m x d`` sensing matrix costs at most ``max_work`` multiply-adds.
      Otherwise ``"projection"`` (which, with the same Gaussian noise, dominates
      the plain baseline Alg. 2 falls back to).

    The gain of Alg. 2 is ln d -> ln(d/s) inside a fourth root, which beats the
    sqrt(1.5) only for s > d^0.56 or so; together with the first two conditions
    this needs d around 1e8 and then ``m * d > 4e13``, so in practice the rule
    picks ``"projection"``.
    """
    if s is None:
        return "laplace" if delta == 0 else "gaussian"
    if delta == 0 or math.isinf(epsilon):
        return "projection"
    m = _n_measurements(n, d, s, epsilon, delta)
    if m > 0 and m * d <= max_work:
        rates = _table1_rates(n, d, s, epsilon, delta)
        if rates["l1_recovery"] < min(rates["projection"], 1.0):
            return "l1_recovery"
    return "projection"


def _resolve_floating_point_safe(option, gaussian):
    """The noise path: ``"auto"`` is safe for Laplace noise and not for Gaussian noise.

    The safe Laplace release costs a relative 2^-16 of noise and about 1.3 times the
    time of the float path; the safe Gaussian costs 4 to 9% more noise (zCDP
    calibration) and about 5 times the time, on a release of d values that is the
    whole cost of a fit, so Gaussian safety is asked for explicitly.
    """
    if option == "auto":
        return not gaussian
    return bool(option)


@functools.lru_cache(maxsize=64)
def _make_plan(method, n, d, norm_bound, sparsity, epsilon, delta, floating_point_safe="auto"):
    """The plan of a fit; cached, as the Gaussian calibration alone takes about a
    millisecond and depends only on these public arguments (the plan is immutable)."""
    L = norm_bound
    if method == "auto":
        method = _choose_method(n, d, sparsity, epsilon, delta)
    max_l1 = L * math.sqrt(sparsity) if sparsity is not None else math.inf
    radius = math.inf
    m = 0
    if method == "laplace" or (method == "projection" and delta == 0):
        # l1 sensitivity of the mean: two rows of l1 norm <= L sqrt(s) (or
        # L sqrt(d), implied by the l2 bound alone) differ by at most twice that.
        l1_row = max_l1 if sparsity is not None else L * math.sqrt(d)
        safe = _resolve_floating_point_safe(floating_point_safe, gaussian=False)
        mechanism = LaplaceMechanism(2 * l1_row / n, epsilon=epsilon, floating_point_safe=safe)
    else:
        m = _n_measurements(n, d, sparsity, epsilon, delta) if method == "l1_recovery" else 0
        sensitivity = 2 * _MEASUREMENT_CLIP * L / n if m else 2 * L / n
        safe = _resolve_floating_point_safe(floating_point_safe, gaussian=True)
        mechanism = GaussianMechanism(sensitivity, epsilon=epsilon, delta=delta,
                                      floating_point_safe=safe)
    if method == "projection":
        radius = max_l1
    return _Plan(method, mechanism, L, max_l1, radius, m)


# --------------------------------------------------------------------------
# Computations
# --------------------------------------------------------------------------
def _clip(X, plan):
    """Rows clipped to the public l2 and l1 bounds (CSR or dense)."""
    if sp.issparse(X):
        X = X.tocsr()
    return clip_rows(X, plan.max_l2, plan.max_l1)


def _unsigned(a):
    """The same index array, viewed as unsigned (see ``_clipped_mean_csr``)."""
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint64)


def _clipped_mean(X, plan):
    """Mean of the rows of X after clipping them to the plan's public bounds.

    Sparse input is not copied (CSC is converted to CSR; a matrix with duplicate
    or unsorted entries is copied and summed): a Numba kernel computes the rows'
    norms and adds their scaled values, block by block (``_clipped_mean_csr``).
    Raises ``ValueError`` on NaN or infinite values, before anything is released.
    """
    n = X.shape[0]
    if not sp.issparse(X):
        X = np.asarray(X, dtype=np.float64)
        _check_finite(X)
        return clip_rows(X, plan.max_l2, plan.max_l1).mean(axis=0)
    X = with_summed_duplicates(X.tocsr())
    if X.data.dtype != np.float64:
        X = X.astype(np.float64)
    out = np.empty(X.shape[1])
    status = _clipped_mean_csr(out, X.data, _unsigned(X.indices), _unsigned(X.indptr),
                               float(plan.max_l2), float(plan.max_l1), float(n))
    if status == 1:
        raise ValueError("Input X contains NaN or infinity.")
    if status:
        raise ValueError("X is not a valid CSR matrix: an index points outside it")
    return out


def _check_finite(values):
    if not np.isfinite(values).all():
        raise ValueError("Input X contains NaN or infinity.")


@numba.njit(cache=True)
def _project_rows_inplace(Z, radius):
    for i in range(Z.shape[0]):
        _project_l1_inplace(Z[i], radius)


def _perturb(mean, plan, rng, n_draws=None):
    """Algorithm 1 (or a plain baseline) on a clipped mean: ``(released, noisy - mean)``.

    With ``n_draws`` the release is repeated independently, stacked on the first
    axis: the privacy audits run exactly this code.
    """
    mean = np.asarray(mean, dtype=np.float64)
    # The mechanism sees the mean itself: a floating-point-safe mechanism must
    # round the value to its lattice before adding noise, so the noise is
    # never added here in doubles. ``noise`` is only reported, for tests.
    noisy = plan.mechanism.randomise(mean, rng, n_draws=n_draws)
    noise = noisy - mean
    if math.isfinite(plan.radius):
        if noisy.ndim == 1:
            noisy = project_l1_ball(noisy, plan.radius)
        else:
            noisy = np.ascontiguousarray(noisy)
            _project_rows_inplace(noisy, float(plan.radius))
    return noisy, noise


# --------------------------------------------------------------------------
# Gaussian projection without drawing the d noise values
# --------------------------------------------------------------------------
# (the argument that the sampled release is exact: ``_sampled_gaussian_projection``)

# Margin, in standard deviations of the pure-noise sum, of the public threshold t.
_SAMPLING_MARGIN = 6.0
_P_HALF = float(-ndtri(0.25))  # t / sigma with 2 Phi(-t / sigma) = 1/2
# Coordinates with |mean_j| > _SMALL_MEAN * sigma are drawn directly; below it the
# envelope's candidate rate is within about 10% of the pure-noise rate and its
# acceptance for mean_j = 0 about 0.91 at t = 1.5 sigma.
_SMALL_MEAN = 0.05
# Levels of the sampled projection: from t up, each level's pure-noise exceedance
# probability is _LEVEL_RATIO times the one below. A fit draws the values above the
# level where it stops, so the ladder lets it stop near the projection's threshold,
# which the signal raises above t (by 15% at n = 1e5, d = 1e6, s = 20; the release
# then took about 0.85 times as long as with t alone, 0.45 times with a stronger signal),
# at the price of about 6% when it has to go down to t (no signal).
_N_LEVELS = 8
_LEVEL_RATIO = 0.85


def _threshold_slack(x, d, r, margin):
    """``E sum_{j<=d} (|N(0,1)| - x)_+`` minus ``margin`` standard deviations minus r."""
    tail = 0.5 * math.erfc(x / math.sqrt(2.0))
    dens = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    m1 = 2.0 * (dens - x * tail)
    m2 = 2.0 * ((1.0 + x * x) * tail - x * dens)
    return d * m1 - margin * math.sqrt(d * max(m2 - m1 * m1, 0.0)) - r


@functools.lru_cache(maxsize=64)
def _sampling_threshold(sigma, d, radius):
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


def _sampling_levels(sigma, t, n_levels=_N_LEVELS):
    """Decreasing thresholds ``levels[0] > ... > levels[-1] = t`` of the sampled projection.

    Functions of sigma and t only (so of public quantities): ``2 Phi(-levels[i]/sigma)
    = 2 Phi(-t/sigma) _LEVEL_RATIO^(n - 1 - i)``. Only t if some band would be too
    wide for its envelope (possible for t below about sigma / 2, never for the
    public t). Any decreasing levels give the same law; they only set the cost.
    """
    return np.array(_levels(float(sigma), float(t), int(n_levels), _LEVEL_RATIO))


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
    b = min(_SMALL_MEAN * sigma, t)
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


def _l1_threshold(a, radius):
    """Root tau of ``sum (a - tau)_+ = radius`` for a >= 0 with ``sum(a) > radius``."""
    t0 = _screening_threshold(a, radius, 4096)
    cand = a[a > t0]
    if not float(cand.sum()) - cand.size * t0 >= radius:  # rounding at a bucket edge
        cand = a
    return float(_simplex_threshold(cand, radius))


def _sampled_gaussian_projection(mean, sigma, radius, t, rng, overwrite=False,
                                 n_levels=_N_LEVELS):
    """``P_K(mean + xi)`` drawing xi only where it can survive, with the exact law.

    **What is released, and why it is private.** The reference release (Algorithm 1
    with Gaussian noise, ``_perturb``) is ``P_K(z)``, ``z = mean + xi``,
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

    Stage 1 (``_sample_exceedances``) reveals ``z_j`` itself where ``|mean_j| > b``
    ("big" positions), then goes down the levels: at level i, for every other j not
    yet revealed, the indicator of ``B_ij = {t_i < |z_j| <= t_{i-1}}`` and, on it,
    ``z_j``, drawn from their exact joint law given what was revealed before (that
    is, given ``|z_j| <= t_{i-1}``), independently over j (a Bernoulli process of
    candidates, then an envelope-and-thinning step: ``_sample_band``'s docstring has
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
      ``N(mean_j, sigma^2)`` conditioned on ``|z_j| <= t*`` (``_fill_truncated``, exact
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
    (``_sampling_threshold``), b a fixed fraction of sigma, the levels of sigma and
    t (``_sampling_levels``). (The law is exact for any such choice; that they are
    public additionally keeps the cost model free of the data.)

    **Not covered.** The number of values drawn, and so the running time, depends on
    the data (how many big positions, where stage 1 stops, whether stage 2 runs);
    like every running time here, it is outside the guarantee (see the security
    page). Floating point: ``tau_U`` (Michelot's iteration) and the full
    projection's threshold (Condat's algorithm) are equal in exact arithmetic and
    differ by rounding only.

    ``t=None`` takes the public ``_sampling_threshold``; ``n_levels`` (default
    ``_N_LEVELS``) the number of levels of ``_sampling_levels``. With ``overwrite``
    the release is written into ``mean`` (its values are read before).

    Returns ``(released, tau, full, (idx, z), stop)``: ``full`` tells whether stage 2
    ran; ``z`` holds the values of ``mean + xi`` drawn, at the positions ``idx``: a
    superset of the coordinates where the release or the mean exceeds
    ``_SMALL_MEAN * sigma`` unless ``full``, all of them if ``full``; ``stop`` is the
    level ``t*`` where stage 1 stopped.
    """
    d = mean.size
    sigma = float(sigma)
    radius = float(radius)
    if t is None:
        t = _sampling_threshold(sigma, d, radius)
    levels = _sampling_levels(sigma, t, n_levels)
    t = float(levels[-1])
    b = min(_SMALL_MEAN * sigma, t)
    # d-long buffers from np.empty: only the part written is touched, and NumPy
    # backs them with huge pages (see _clipped_mean_csr); positions in 32 bits
    # where they fit, to keep the working set small
    index = np.int32 if d < 2**31 else np.int64
    idx, z, cand = np.empty(d, index), np.empty(d), np.empty(d)
    count, level, found = _sample_exceedances(
        mean, sigma, levels, b, radius, rng, idx, z, np.empty(-(-d // 64), np.uint64),
        np.empty(d, index), cand)
    idx, z = idx[:count], z[:count]
    reached = float(levels[level])
    tau = _threshold_above(z, reached, radius, cand) if found else -1.0
    if tau >= 0.0:  # g_U(t*) >= R: tau = tau_U >= t*
        out = mean if overwrite else np.empty(d)
        _shrink_into(out, idx, z, tau, True)
        return out, tau, False, (idx, z), reached
    # stage 2: complete the same draw (off U, |z_j| <= t*, whichever level stage 1
    # stopped at: the sums that stopped it and the root finder may disagree by rounding)
    full = np.empty(d)
    drawn = np.zeros(d, dtype=np.bool_)
    drawn[idx] = True
    full[idx] = z
    _fill_truncated(full, mean, drawn, sigma, reached, rng)
    a = np.abs(full)
    tau = _l1_threshold(a, radius) if float(a.sum()) > radius else 0.0
    return project_l1_ball(full, radius), tau, True, (np.arange(d), full), reached


def _release(mean, plan, rng, overwrite=False):
    """The fit's release of a clipped mean: ``_perturb``'s law, without its noise.

    The continuous Gaussian projection goes through ``_sampled_gaussian_projection``
    where its public threshold exists; everything else through ``_perturb``.
    ``overwrite`` lets the release reuse ``mean``'s memory.
    """
    mech = plan.mechanism
    if (isinstance(mech, GaussianMechanism) and not mech.floating_point_safe
            and mech.sigma > 0 and math.isfinite(plan.radius)):
        mean = np.asarray(mean, dtype=np.float64)
        if mean.ndim == 1:
            t = _sampling_threshold(mech.sigma, mean.size, plan.radius)
            if t is not None:
                return _sampled_gaussian_projection(
                    np.ascontiguousarray(mean), mech.sigma, plan.radius, t, rng,
                    overwrite=overwrite)[0]
    return _perturb(mean, plan, rng)[0]


def _clipped_measurement_mean(Xc, A, max_norm):
    """``(1/n) sum_i clip(A z_i, max_norm)``, measuring the rows chunk by chunk."""
    n = Xc.shape[0]
    chunk = max(1, _ROW_CHUNK_BYTES // (8 * A.m))
    total = np.zeros(A.m)
    for start in range(0, n, chunk):
        Y = A.apply_rows(Xc[start:start + chunk])
        norms = np.linalg.norm(Y, axis=1)
        scales = np.minimum(1.0, max_norm / np.maximum(norms, 1e-300))
        total += scales @ Y
    return total / n


def _l1_recovery(Xc, plan, rng):
    """Compressed-sensing branch of Algorithm 2 with clipped measurements."""
    d = Xc.shape[1]
    # A is drawn independently of the data; only its seed is kept.
    A = GaussianSensingMatrix(plan.n_measurements, d, int(rng.integers(2**63 - 1)))
    b = _clipped_measurement_mean(Xc, A, _MEASUREMENT_CLIP * plan.max_l2)
    b = plan.mechanism.randomise(b, rng)
    z = basis_pursuit(A, b, max_iter=_BP_MAX_ITER, tol=_BP_TOL)
    if not np.linalg.norm(z) <= 2 * plan.max_l2:
        return np.zeros(d)
    return z


# --------------------------------------------------------------------------
# Estimator
# --------------------------------------------------------------------------
class DPSparseMeanEstimator(DPEstimatorMixin, BaseEstimator):
    """Differentially private mean of sparse, high-dimensional rows.

    Each row ``z_i`` of ``X`` is first clipped to the public bounds (l2 norm
    ``norm_bound`` = L and, when ``sparsity`` = s is given, l1 norm ``L*sqrt(s)``,
    the convex relaxation of "s nonzeros, l2 norm <= L", Remark 2.1 of [1]).
    The clipped mean ``z_bar`` is then released by one of the mechanisms below.
    The bounds are public: nothing is computed from the data to set them.

    Privacy: the fit is (epsilon, delta)-differentially private with respect to
    **replace-one** neighbouring datasets (same number of rows n, which is public;
    one row changed), whatever the data, because clipping makes the stated
    sensitivities hold for every input. The spend is recorded in
    ``epsilon_spent_``, ``delta_spent_`` and ``privacy_events_``.

    Methods (``method``):

    ``"projection"``
        Algorithm 1 of [1]: ``z~ = z_bar + xi``, then the Euclidean projection of
        ``z~`` onto the l1 ball of radius ``L*sqrt(s)``. With ``delta = 0``,
        ``xi`` is Laplace with scale ``b = 2 L sqrt(s) / (n epsilon)`` (l1
        sensitivity ``2 L sqrt(s) / n``; epsilon-DP, Thm 3.2 of [1]). With
        ``delta > 0``, ``xi`` is Gaussian with the smallest sigma meeting
        (epsilon, delta) for l2 sensitivity ``2L/n`` by the analytic Gaussian
        mechanism (Balle & Wang 2018; Thm 3.3 of [1]). The projection is
        post-processing. (With continuous Gaussian noise in high dimension the fit
        draws only the noise values that can survive the projection, from
        thresholds fixed by public quantities; the release has exactly the law of
        drawing all d, so the guarantee is the same.) Error:
        ``min(||xi||_2, sqrt(2 L sqrt(s) ||xi||_inf))`` at most (Lemma 3.1), that is
        ``L min(sqrt(s ln d / (eps n)), sqrt(s d) / (eps n))`` for pure DP and
        ``L min((s ln d ln(1/delta))^(1/4) / sqrt(eps n), sqrt(d ln(1/delta)) / (eps n))``
        for approximate DP, up to constants (Table 1). Needs ``sparsity``.
    ``"l1_recovery"``
        Algorithm 2 of [1] (delta > 0 only). With
        ``m = ceil(n eps sqrt(s ln(d/s) / ln(1/delta)))``: if ``d < m ln^2 m``
        it releases the mean with Gaussian noise (l2 sensitivity ``2L/n``);
        otherwise it draws ``A`` with iid ``N(0, 1/m)`` entries (from a seed, by
        column blocks; it is never held in memory beyond 200 MB), clips every
        row's measurement ``A z_i`` to l2 norm ``1.5 L``, releases their mean plus
        Gaussian noise calibrated analytically to l2 sensitivity ``3L/n``
        (which holds for every ``A``, not only for a restricted isometry, so no
        failure probability is charged to delta), solves
        ``min ||z||_1 s.t. A z = b`` approximately (ADMM) and returns ``z`` if
        ``||z||_2 <= 2L``, else 0. Privacy follows from the Gaussian mechanism on
        ``b`` and post-processing (Thm 3.4 of [1], with this hardening).
        Needs ``sparsity``.
    ``"gaussian"``, ``"laplace"``
        Baselines: the clipped mean plus Gaussian noise (l2 sensitivity ``2L/n``,
        analytic calibration; delta > 0) or Laplace noise (l1 sensitivity
        ``2 L sqrt(s) / n``, or ``2 L sqrt(d) / n`` without ``sparsity``), with no
        projection.
    ``"auto"``
        Chosen from public n, d, s, epsilon, delta only: without ``sparsity``,
        ``"laplace"`` if delta = 0 else ``"gaussian"``; with it, ``"projection"``
        (which is never less accurate than the plain baseline with the same
        noise), except that for delta > 0 ``"l1_recovery"`` is used where
        Algorithm 2 takes its compressed-sensing branch, its Table-1 rate
        (inflated by ``sqrt(1.5)`` for its larger sensitivity) is below both the
        projection's and 1, and a product with its sensing matrix costs at most
        1e9 multiply-adds. The rate gain of Algorithm 2 (ln d -> ln(d/s) in a
        fourth root) needs s > d^0.56 or so, and together these conditions only
        hold for d of order 1e8 with ``m * d > 4e13``: in practice ``"auto"``
        picks ``"projection"`` whenever ``sparsity`` is given.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy parameter, > 0. ``np.inf`` adds no noise (the exact clipped mean,
        still projected) and reports an infinite spend.
    delta : float, default=0.0
        Privacy parameter in [0, 1). 0 asks for pure DP.
    norm_bound : float, default=1.0
        Public bound L on the l2 norm of a row; rows beyond it are rescaled.
    sparsity : int or None, default=None
        Public bound s on the number of nonzeros of a row, used through the l1
        bound ``L*sqrt(s)`` (rows beyond it are rescaled). Required by
        ``"projection"`` and ``"l1_recovery"``. ``1 <= sparsity <= n_features``.
    method : {"auto", "projection", "l1_recovery", "gaussian", "laplace"}, default="auto"
        See above.
    floating_point_safe : {"auto", True, False}, default="auto"
        True: the released statistic (the clipped mean, or the measurements of
        ``"l1_recovery"``) is rounded to a lattice ``gamma Z`` (``gamma`` a power of
        two fixed by public values) and receives exact discrete Laplace or discrete
        Gaussian noise, so the low-order bits of the noisy vector carry nothing about
        the data (:ref:`security`); the projection and the recovery are then
        post-processing of that vector. The rounding costs a relative ``2^-16`` of
        sensitivity, included in the reported spend; the discrete Gaussian is
        accounted in zCDP, which needs a sigma 4 to 9% larger than the analytic
        calibration for the same (epsilon, delta), and its sampler takes about 5
        times as long, on all d coordinates (the projection's sampled noise does not
        apply). False: continuous noise added in doubles, not private against an
        adversary who reads the low-order bits of the output. ``"auto"``: True for
        Laplace noise (pure DP), False for Gaussian noise.
    random_state : None, int or numpy.random.Generator, default=None
        Source of the noise. ``None`` draws fresh OS entropy (use it for a
        release); an int makes the fit reproducible.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,)
        The private estimate of the mean of the clipped rows.
    method_ : str
        The method used (``method``, or the one ``"auto"`` chose).
    noise_scale_ : float
        Laplace scale b or Gaussian standard deviation sigma of the noise (a
        function of public quantities only).
    n_measurements_ : int
        Number m of random measurements of ``"l1_recovery"``; 0 when no
        compressed sensing was used.
    floating_point_safe_ : bool
        Whether the noise was drawn on the floating-point-safe path.
    n_features_in_ : int
        Number of features seen during fit.
    epsilon_spent_, delta_spent_ : float
        The privacy guarantee of the fit.
    privacy_events_ : tuple of PrivacyEvent
        The mechanism call of the fit.

    See Also
    --------
    skdp_sparse.optim.projections.project_l1_ball : the projection of Algorithm 1.

    References
    ----------
    .. [1] B. Ghazi, C. Guzmán, P. Kamath, R. Kumar, P. Manurangsi,
       "Differentially Private Optimization with Sparse Gradients", Section 3.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from skdp_sparse.mean import DPSparseMeanEstimator
    >>> X = sp.random(1000, 10_000, density=5e-4, format="csr", random_state=0)
    >>> est = DPSparseMeanEstimator(epsilon=1.0, delta=1e-6, sparsity=10,
    ...                             random_state=0).fit(X)
    >>> est.method_
    'projection'
    >>> est.mean_.shape
    (10000,)
    >>> round(est.epsilon_spent_, 6)
    1.0
    """

    def __init__(self, epsilon=1.0, delta=0.0, norm_bound=1.0, sparsity=None,
                 method="auto", floating_point_safe="auto", random_state=None):
        self.epsilon = epsilon
        self.delta = delta
        self.norm_bound = norm_bound
        self.sparsity = sparsity
        self.method = method
        self.floating_point_safe = floating_point_safe
        self.random_state = random_state

    def _check_params(self):
        epsilon, delta = check_privacy_params(self.epsilon, self.delta)
        norm_bound = check_bound("norm_bound", self.norm_bound)
        if not isinstance(self.method, str) or self.method not in _METHODS:
            raise ValueError(f"method must be one of {_METHODS}, got {self.method!r}")
        safe = check_floating_point_safe(self.floating_point_safe)
        s = self.sparsity
        if s is not None:
            if (isinstance(s, bool) or not isinstance(s, numbers.Real)
                    or not math.isfinite(s) or s < 1):
                raise ValueError(
                    f"sparsity must be None or a number >= 1 (at most n_features), "
                    f"got {s!r}"
                )
            s = float(s)
        if self.method in ("projection", "l1_recovery") and s is None:
            raise ValueError(
                f"method={self.method!r} needs the public bound `sparsity` "
                "(number of nonzeros per row)"
            )
        if self.method in ("l1_recovery", "gaussian") and delta == 0:
            raise ValueError(
                f"method={self.method!r} gives approximate DP only: set delta > 0 "
                "(for example 1 / n_samples**2), or use method='projection' or "
                "'laplace' for pure DP"
            )
        return epsilon, delta, norm_bound, s, safe

    def _plan(self, n_samples, n_features):
        """The fit's plan for data of this shape (checks the hyperparameters)."""
        epsilon, delta, norm_bound, s, safe = self._check_params()
        if s is not None and s > n_features:
            raise ValueError(
                f"sparsity must be at most n_features={n_features}, got {self.sparsity!r}"
            )
        return _make_plan(self.method, int(n_samples), int(n_features), norm_bound, s,
                          epsilon, delta, safe)

    def fit(self, X, y=None):
        """Estimate the mean of the rows of ``X`` privately.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            CSR and CSC are used as they are; other sparse formats are converted.
        y : None
            Ignored.

        Returns
        -------
        self
        """
        self._check_params()
        # finiteness is checked once, by _clipped_mean (or just below), before any
        # noise is drawn, rather than by sklearn's slower check here
        X = validate_sparse_data(self, X, ensure_all_finite=False)
        n, d = X.shape
        plan = self._plan(n, d)
        rng = check_generator(self.random_state)

        if plan.n_measurements:
            _check_finite(X.data if sp.issparse(X) else X)
            mean = _l1_recovery(_clip(X, plan), plan, rng)
        else:
            # the clipped mean is a fresh array: the release may overwrite it
            mean = _release(_clipped_mean(X, plan), plan, rng, overwrite=True)

        self.mean_ = mean
        self.method_ = plan.method
        self.noise_scale_ = float(plan.noise_scale)
        self.n_measurements_ = int(plan.n_measurements)
        self.floating_point_safe_ = bool(plan.mechanism.floating_point_safe)
        accountant = PrivacyAccountant()
        accountant.record(plan.mechanism.event())
        return self._record_spend(accountant, float(self.delta))
