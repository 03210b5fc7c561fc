"""Privacy amplification by subsampling for Gaussian mechanisms: events and calibration.

Each event carries two bounds: the privacy loss distribution of its step
(:mod:`skdp_sparse.privacy.pld`, the tight one, ``doc/proofs/pld.rst``) and the Renyi DP
curves below; :func:`subsampled_noise_multiplier` calibrates on the first.

A sum of per-example terms, each of l2 norm at most ``C``, computed on a random
subsample and released with ``N(0, sigma^2 I)`` noise, is a *subsampled Gaussian
mechanism* with noise multiplier ``z = sigma / C``. This module gives valid
upper bounds on its RDP curve over :data:`~skdp_sparse.privacy.accounting.RDP_ORDERS`,
ready for :meth:`PrivacyEvent.from_rdp`:

* :func:`poisson_gaussian_rdp` -- Poisson subsampling (each example kept
  independently with probability ``q``).

  - ``relation="add_remove"``: the exact RDP of Mironov, Talwar & Zhang (2019,
    Sec. 3) at integer orders,
    ``(alpha-1) eps(alpha) = log sum_k C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2-k)/(2 z^2))``,
    which bounds both directions of the divergence (their Sec. 3.3).
  - ``relation="replace_one"`` (the library's convention): a replacement is a
    removal followed by an addition, and Renyi divergences obey the weak
    triangle inequality (Mironov 2017, Prop. 11, from Cauchy-Schwarz)
    ``D_a(P||R) <= (2a-1)/(2(a-1)) D_2a(P||Q) + D_(2a-1)(Q||R)``. The bound is
    capped by the unsubsampled replace-one Gaussian (sensitivity ``2C``),
    ``2 a / z^2``, which holds because Renyi divergence is jointly
    quasi-convex and both outputs are mixtures with the same weights. For
    ``q = 1`` the two coincide up to a factor ``(2a-1)^2/(4a(a-1))``.

* :func:`sampled_without_replacement_gaussian_rdp` -- a uniformly random subset
  of fixed size ``m = q n``, replace-one neighbours: the general bound of Wang,
  Balle & Kasiviswanathan (2019, Thm. 9) with the Gaussian's RDP
  ``eps(j) = j (2C)^2 / (2 sigma^2)`` and ``eps(inf) = inf``.

Non-integer orders: ``a -> (a-1) eps(a)`` is the cumulant generating function
of the privacy loss, a convex function of ``a`` that is 0 at ``a = 1``, so its
chord between the neighbouring integers bounds it from above (Wang et al. 2019,
Cor. 10). The curves are therefore exact at integer orders and valid upper
bounds elsewhere.

:func:`wor_amplified_epsilon_delta` is the (epsilon, delta) counterpart for
sampling without replacement under replace-one (Balle, Barthe & Gaboardi 2018,
Thm. 9): ``(log(1 + q (e^eps - 1)), q delta)``.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from scipy.special import gammaln, logsumexp

from . import discrete
from .accounting import RDP_ORDERS, PrivacyEvent, _pld_candidate, calibrate_scale, gaussian_mu
from .pld import DISCRETE_GAUSSIAN_SLACK, GaussianPLD

__all__ = [
    "subsampled_noise_multiplier",
    "poisson_gaussian_rdp",
    "sampled_without_replacement_gaussian_rdp",
    "subsampled_gaussian_event",
    "wor_amplified_epsilon_delta",
]


def _check_q_z(q, z):
    q = float(q)
    z = float(z)
    if not (0.0 <= q <= 1.0):
        raise ValueError(f"the sampling rate must be in [0, 1], got {q}")
    if math.isnan(z) or z < 0:
        raise ValueError(f"the noise multiplier must be >= 0, got {z}")
    return q, z


def _log_binom(a, k):
    return gammaln(a + 1) - gammaln(k + 1) - gammaln(a - k + 1)


def _interpolated(cgf_at_integers, orders):
    """RDP at ``orders`` from a CGF ``K(a) = (a-1) eps(a)`` known at integers.

    Exact at integers; the chord of the convex CGF elsewhere (an upper bound).
    ``cgf_at_integers`` maps an int array (all >= 2) to K there.
    """
    orders = np.asarray(orders, dtype=float)
    if np.any(orders <= 1):
        raise ValueError("RDP orders must be > 1")
    lo = np.floor(orders).astype(np.int64)
    hi = np.ceil(orders).astype(np.int64)
    needed = np.unique(np.concatenate([lo, hi]))
    needed = needed[needed >= 2]
    values = dict(zip(needed.tolist(), cgf_at_integers(needed).tolist(), strict=True))
    values[1] = 0.0
    k_lo = np.array([values[int(a)] for a in lo])
    k_hi = np.array([values[int(a)] for a in hi])
    t = orders - lo
    with np.errstate(invalid="ignore"):
        cgf = np.where(t == 0, k_lo, (1 - t) * k_lo + t * k_hi)
    return cgf / (orders - 1)


@numba.njit(cache=True)
def _log_a_integer(alphas, log_q, log_1mq, inv_2z2, log_fact):
    """``log sum_k C(a,k) (1-q)^(a-k) q^k exp((k^2-k)/(2 z^2))`` for each integer ``a``."""
    out = np.empty(alphas.size)
    for i in range(alphas.size):
        a = alphas[i]
        peak = -np.inf
        for k in range(a + 1):
            t = (log_fact[a] - log_fact[k] - log_fact[a - k] + k * log_q
                 + (a - k) * log_1mq + (k * k - k) * inv_2z2)
            if t > peak:
                peak = t
        s = 0.0
        for k in range(a + 1):
            t = (log_fact[a] - log_fact[k] - log_fact[a - k] + k * log_q
                 + (a - k) * log_1mq + (k * k - k) * inv_2z2)
            s += np.exp(t - peak)
        out[i] = peak + np.log(s)
    return out


def _log_factorials(n):
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=float)))])


def _poisson_cgf_add_remove(q, z, alphas):
    """``log A_alpha`` of Mironov, Talwar & Zhang (2019) at integer orders >= 2."""
    alphas = np.asarray(alphas, dtype=np.int64)
    if q == 1:
        return (alphas * alphas - alphas) / (2 * z * z)
    log_fact = _log_factorials(int(alphas.max()))
    out = _log_a_integer(alphas, math.log(q), math.log1p(-q), 1.0 / (2 * z * z), log_fact)
    return np.maximum(out, 0.0)


def _poisson_add_remove(q, z, orders):
    return _interpolated(lambda a: _poisson_cgf_add_remove(q, z, a), orders)


def poisson_gaussian_rdp(sampling_rate, noise_multiplier, orders=None, *,
                         relation="replace_one"):
    """RDP curve of the Poisson-subsampled Gaussian mechanism.

    Parameters
    ----------
    sampling_rate : float in [0, 1]
        Probability ``q`` that each example enters the batch.
    noise_multiplier : float
        ``z = sigma / C``: noise standard deviation over the l2 bound ``C`` of
        one example's term in the noisy sum. ``0`` means no noise (infinite RDP).
    orders : array of float > 1, optional
        Default :data:`~skdp_sparse.privacy.accounting.RDP_ORDERS`.
    relation : {"replace_one", "add_remove"}
        Neighbouring relation. ``"add_remove"`` is the exact curve of Mironov,
        Talwar & Zhang (2019) at integer orders (what dp_accounting's
        ``PoissonSampledDpEvent`` computes); ``"replace_one"`` composes it
        through the weak triangle inequality (see the module docstring).

    Returns
    -------
    ndarray of shape (len(orders),); upper bounds on the RDP, exact at integer
    orders for ``add_remove``; ``inf`` where nothing finite is known.
    """
    q, z = _check_q_z(sampling_rate, noise_multiplier)
    orders = np.asarray(RDP_ORDERS if orders is None else orders, dtype=float)
    if relation not in ("replace_one", "add_remove"):
        raise ValueError(f"relation must be 'replace_one' or 'add_remove', got {relation!r}")
    if q == 0 or math.isinf(z):
        return np.zeros(orders.size)
    if z == 0:
        return np.full(orders.size, math.inf)
    if relation == "add_remove":
        return _poisson_add_remove(q, z, orders)
    triangle = ((2 * orders - 1) / (2 * (orders - 1)) * _poisson_add_remove(q, z, 2 * orders)
                + _poisson_add_remove(q, z, 2 * orders - 1))
    # Without the subsampling, a replacement moves the sum by at most 2C.
    plain = 2.0 * orders / z**2
    return np.minimum(triangle, plain)


def _wor_cgf(q, z_rep, alphas):
    """Wang, Balle & Kasiviswanathan (2019), Thm. 9, for a Gaussian of ratio ``1/z_rep``.

    The base mechanism has ``eps(j) = j / (2 z_rep^2)`` and ``eps(inf) = inf``, so
    ``min{2, (e^eps(inf) - 1)^j} = 2``.
    """
    out = np.empty(alphas.size)
    log_q = math.log(q)
    eps2 = 1.0 / z_rep**2
    # min{4 (e^eps(2) - 1), 2 e^eps(2)} in log form.
    second = min(math.log(4.0) + eps2 + math.log(-math.expm1(-eps2)), math.log(2.0) + eps2)
    for i, a in enumerate(alphas):
        j = np.arange(3, a + 1, dtype=float)
        terms = [0.0, 2 * log_q + _log_binom(float(a), 2.0) + second]
        if j.size:
            tail = (j * log_q + _log_binom(float(a), j) + math.log(2.0)
                    + (j - 1) * j / (2 * z_rep**2))
            terms = np.concatenate([terms, tail])
        out[i] = logsumexp(terms)
    return out


def sampled_without_replacement_gaussian_rdp(sampling_rate, noise_multiplier, orders=None):
    """RDP curve of a Gaussian sum over a uniform subset of fixed size (replace-one).

    Parameters
    ----------
    sampling_rate : float in (0, 1]
        ``q = m / n`` for a subset of size ``m`` drawn without replacement.
    noise_multiplier : float
        ``z = sigma / C`` as in :func:`poisson_gaussian_rdp`; one replacement
        inside the subset moves the sum by at most ``2C``.

    Returns
    -------
    ndarray of shape (len(orders),): Wang, Balle & Kasiviswanathan (2019, Thm. 9)
    at integer orders, their Cor. 10 interpolation elsewhere, capped by the
    unsubsampled bound ``2 alpha / z^2``.
    """
    q, z = _check_q_z(sampling_rate, noise_multiplier)
    orders = np.asarray(RDP_ORDERS if orders is None else orders, dtype=float)
    if q == 0 or math.isinf(z):
        return np.zeros(orders.size)
    if z == 0:
        return np.full(orders.size, math.inf)
    plain = 2.0 * orders / z**2
    if q == 1:
        return plain
    z_rep = z / 2.0
    return np.minimum(_interpolated(lambda a: _wor_cgf(q, z_rep, a), orders), plain)


def subsampled_gaussian_event(noise_multiplier, sampling_rate, count=1, *,
                              sampling="poisson", name="subsampled gaussian",
                              floating_point_safe=False):
    """The :class:`PrivacyEvent` of ``count`` subsampled Gaussian sums (replace-one).

    ``noise_multiplier`` is ``sigma / C`` with ``C`` the l2 bound of one
    example's term. The event carries the privacy loss distribution of the step
    (:class:`~skdp_sparse.privacy.pld.GaussianPLD`; proof in ``doc/proofs/pld.rst``),
    which the accountant composes tightly, and a Renyi DP bound. With
    ``sampling_rate == 1`` the mechanism is a plain Gaussian with replace-one
    sensitivity ``2C`` and the event is exact (``mu = 2 / z``, composed in GDP);
    otherwise the RDP bound is the curve of :func:`poisson_gaussian_rdp` or
    :func:`sampled_without_replacement_gaussian_rdp`.

    ``floating_point_safe``: each sum is rounded to a lattice planned for the
    per-example bound ``C`` (:func:`~skdp_sparse.privacy.discrete.plan_gaussian`, so
    the rounding moves a neighbouring sum by at most ``(1 + 2^-16)`` times ``C``) and
    receives exact discrete Gaussian noise. For integer shifts the discrete Gaussian
    has the continuous Gaussian's RDP at every integer order (Canonne, Kamath &
    Steinke 2020); the mixtures of the subsampled mechanism differ by such shifts
    given the rest of the batch (joint convexity), and the curves here are exact at
    integer orders and chords elsewhere, so the continuous curves of the multiplier
    ``z / (1 + 2^-16)`` bound the safe mechanism. Without subsampling its RDP bound is
    the zCDP of the discrete Gaussian. Its privacy loss distribution is that of the
    continuous mechanism at ``z / ((1 + 2^-16)(1 + 2^-20))``, for lattices whose noise
    is at least ``2^12`` units in every coordinate
    (:data:`~skdp_sparse.privacy.pld.DISCRETE_GAUSSIAN_SLACK`).
    """
    q, z = _check_q_z(sampling_rate, noise_multiplier)
    if sampling not in ("poisson", "without_replacement"):
        raise ValueError(
            f"sampling must be 'poisson' or 'without_replacement', got {sampling!r}"
        )
    kind = "none" if q == 1 else sampling
    if floating_point_safe:
        step = GaussianPLD(kind, q, z / ((1.0 + discrete.SENSITIVITY_SLACK)
                                         * (1.0 + DISCRETE_GAUSSIAN_SLACK)), lattice=True)
        if q == 1:
            rho = discrete.discrete_gaussian_event(2.0, z).rho if z > 0 else math.inf
            return PrivacyEvent.from_pld(step, count, "discrete_gaussian", rho=rho)
        z = z / (1.0 + discrete.SENSITIVITY_SLACK)
    elif q == 1:
        return PrivacyEvent.gaussian(2.0 / z if z > 0 else math.inf, count=count, name=name)
    else:
        step = GaussianPLD(kind, q, z)
    return PrivacyEvent.from_pld(step, count, name, rdp=_subsampled_curve(q, z, sampling))


@functools.lru_cache(maxsize=256)
def _subsampled_curve(q, z, sampling):
    """The RDP curve of one subsampled Gaussian sum; cached, as every fit of a
    configuration records the same one and computing it costs more than a small fit."""
    if sampling == "poisson":
        return tuple(poisson_gaussian_rdp(q, z))
    return tuple(sampled_without_replacement_gaussian_rdp(q, z))


def wor_amplified_epsilon_delta(epsilon, delta, sampling_rate):
    """(epsilon, delta) of an (epsilon, delta)-DP mechanism run on a uniform subset.

    Subset of fixed size ``m = q n`` drawn without replacement, replace-one
    neighbours: ``(log(1 + q (e^epsilon - 1)), q delta)`` (Balle, Barthe &
    Gaboardi 2018, Thm. 9).
    """
    q = float(sampling_rate)
    if not (0 <= q <= 1):
        raise ValueError(f"the sampling rate must be in [0, 1], got {q}")
    return math.log1p(q * math.expm1(epsilon)), q * delta


@functools.lru_cache(maxsize=256)
def subsampled_noise_multiplier(sampling_rate, count, sampling, epsilon, delta,
                                floating_point_safe=False):
    """Smallest noise multiplier whose ``count`` subsampled Gaussian sums compose to
    ``(epsilon, delta)`` (on the floating-point-safe path if asked).

    Subsampled steps are calibrated on their privacy loss distribution
    (:func:`~skdp_sparse.privacy.pld.pld_epsilon`, ``doc/proofs/pld.rst``), full-batch
    steps in GDP; the events of the returned multiplier compose to at most
    ``epsilon``. ``count`` may cover several problems (the one-vs-rest fits of a
    multiclass problem compose in one accountant). Deterministic in its public
    arguments, hence cached: repeated fits with one configuration do not redo the
    search."""
    def events(z):
        return [subsampled_gaussian_event(z, sampling_rate, count, sampling=sampling,
                                          floating_point_safe=floating_point_safe)]

    q = float(sampling_rate)
    if not (epsilon > 0):
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if q in (0.0, 1.0) or not 0 < delta < 1:
        return calibrate_scale(events, epsilon, delta)
    z = _pld_multiplier(events, count, epsilon, delta)
    if z is None:
        return calibrate_scale(events, epsilon, delta)
    return z


def _pld_multiplier(events, count, epsilon, delta):
    """The smallest z (relative precision 1e-9) whose step's PLD epsilon is at most
    ``epsilon``; None if the search fails."""
    seen = {}

    def f(log_z):
        # log(epsilon(z) / epsilon), decreasing in z, nearly linear in log z.
        if log_z not in seen:
            # Through the accountant's cache: the fit's report of the calibrated
            # events reuses this very value.
            eps = _pld_candidate(((events(math.exp(log_z))[0].pld, count),), float(delta))
            seen[log_z] = math.log(eps / epsilon) if eps > 0 else -math.inf
        return seen[log_z]

    # A start from the central limit of the composition (Bu et al. 2020): about
    # mu-GDP with mu^2 = T times the variance of one step's privacy loss, for small q
    # 4 q^2 sinh(1/z^2) (Poisson, shifts +-1/z) or q^2 (e^(4/z^2) - 1) (fixed size).
    step = events(1.0)[0].pld
    q, mu = step.sampling_rate, gaussian_mu(epsilon, delta)
    ratio = mu * mu / (q * q * count)
    inv_z2 = math.asinh(ratio / 4) if step.sampling == "poisson" else math.log1p(ratio) / 4
    x0 = -0.5 * math.log(inv_z2)
    f0 = f(x0)
    # log epsilon falls about 1.3 times as fast as log z rises; a first step of at
    # most a factor e.
    x1 = x0 + max(-1.0, min(1.0, f0 / 1.3)) if abs(f0) > 1e-6 else x0 + 1e-6
    pts = [(x0, f0), (x1, f(x1))]
    widths = []
    for _ in range(80):
        lo = max((x for x, fx in pts if fx > 0), default=None)
        hi = min((x for x, fx in pts if fx <= 0), default=None)
        (xa, fa), (xb, fb) = pts[-2], pts[-1]
        if math.isfinite(fa) and math.isfinite(fb) and fa != fb:
            root = xb - fb * (xb - xa) / (fb - fa)
        else:
            root = math.nan
        if lo is not None and hi is not None:
            if hi - lo <= 1e-8 or (lo <= root <= hi and hi - root <= 1e-8):
                return math.exp(hi)
            widths.append(hi - lo)
            # Secant steps while they shrink the bracket well, else bisection (the
            # discretised epsilon is continuous, but not smooth at every scale).
            slow = len(widths) >= 3 and widths[-1] > 0.5 * widths[-3]
            if slow or not lo <= root <= hi:
                root = (lo + hi) / 2
        elif not math.isfinite(root) or abs(root - xb) > 2.0:
            root = xb + (2.0 if hi is None else -2.0)
        # Aim just past the root, on the side of more noise.
        x = root + 5e-10
        if lo is not None and hi is not None and not lo < x < hi:
            x = (lo + hi) / 2
        if abs(x) > 40:
            return None
        pts.append((x, f(x)))
    return None
