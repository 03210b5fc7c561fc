"""Privacy loss distributions: tight composition of Gaussian mechanisms, subsampled or not.

A step of a gradient solver releases a sum of per-example terms (l2 norm at most ``C``)
plus ``N(0, sigma^2 I)``, on a Poisson batch, on a batch of fixed size drawn without
replacement, or on all rows; ``z = sigma / C`` is its noise multiplier. For replace-one
neighbours, each step is *dominated* by a pair ``(P, Q)`` of distributions on the line
(every hockey-stick divergence of the step's outputs on neighbouring datasets, in either
order and for every history, is at most that of ``(P, Q)``); ``r = 1 / z``:

* Poisson sampling at rate ``q``: ``P = (1-q) N(0,1) + q N(r,1)``,
  ``Q = (1-q) N(0,1) + q N(-r,1)``, what dp-accounting calls ``REPLACE_ONE``;
* a fixed-size batch, a fraction ``q`` of the rows: the pair of the symmetric privacy
  profile ``delta(eps) = H_{e^eps}((1-q) N(0,1) + q N(2r,1) || N(0,1))`` for ``eps >= 0``;
* all rows: ``N(r, 1)`` against ``N(-r, 1)``, the Gaussian mechanism of ratio ``2 r``.

The proof is in ``doc/proofs/pld.rst``. The composition of ``T`` steps is dominated by
the product of their pairs, whose privacy loss is the sum of independent losses. This
module discretises each pair's privacy loss distribution (PLD) on a grid of step ``h``
with the pessimistic *connect-the-dots* construction of Doroshenko et al. (2022), whose
privacy profile is above the true one at every ``eps``, composes by FFT (Koskela,
Jalko & Honkela 2020), and bounds every other approximation (tails cut off by the FFT
window, floating-point error of the FFT, mass left at ``+inf``) by an explicit term
added to ``delta``. :func:`pld_epsilon` is therefore an upper bound on the epsilon of
the composition; it exceeds the exact value by the discretisation only (second order
in ``h``).

Floating-point-safe releases (lattice sums with discrete Gaussian noise) are accounted
as the continuous mechanism at the multiplier ``z / ((1 + 2^-16)(1 + 2^-20))``: the
``2^-16`` pays for the rounding, as in the RDP accounting, and
:data:`DISCRETE_GAUSSIAN_SLACK` for the discrete noise (see the proof page).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr

from ._pld_fft import _PMF, _compose_tilted, _smallest_eps, _tilt, _tilted_moments

__all__ = [
    "GaussianPLD",
    "DISCRETE_GAUSSIAN_SLACK",
    "privacy_profile",
    "pld_epsilon",
]

#: Relative increase of the noise-normalised shift that makes the continuous
#: Gaussian's PLD bound a lattice release with discrete Gaussian noise of at least
#: ``2^12`` lattice units per coordinate (doc/proofs/pld.rst, "Discrete noise").
DISCRETE_GAUSSIAN_SLACK = 2.0**-20

# Lattice releases are within a factor exp(theta) of a post-processed continuous
# mechanism, theta < 2^-150 (proof page); paid as (epsilon + 2^-40, delta (1 - 2^-40)).
_LATTICE_EPS = 2.0**-40

_SAMPLINGS = ("poisson", "without_replacement", "none")


@dataclass(frozen=True)
class GaussianPLD:
    """One step of a Gaussian mechanism on a sum of per-example terms, replace-one
    (its dominating pair: the module docstring; proof: ``doc/proofs/pld.rst``).

    Attributes
    ----------
    sampling : {"poisson", "without_replacement", "none"}
        How the step's batch is drawn (``"none"``: all rows).
    sampling_rate : float
        ``q``, the Poisson rate or the batch's fraction of the rows (1 for ``"none"``).
    noise_multiplier : float
        ``z = sigma / C``, with ``C`` the l2 bound of one example's term; for a
        lattice release, the continuous multiplier that bounds it.
    lattice : bool
        Whether the step is a lattice release with discrete Gaussian noise (its
        composition then pays the ``2^-40`` of the proof page).
    """

    sampling: str
    sampling_rate: float
    noise_multiplier: float
    lattice: bool = False

    def __post_init__(self):
        if self.sampling not in _SAMPLINGS:
            raise ValueError(f"sampling must be one of {_SAMPLINGS}, got {self.sampling!r}")
        if not 0.0 <= self.sampling_rate <= 1.0:
            raise ValueError(f"the sampling rate must be in [0, 1], got {self.sampling_rate}")
        if not self.noise_multiplier >= 0:
            raise ValueError(f"the noise multiplier must be >= 0, got {self.noise_multiplier}")
        if self.sampling == "none" and self.sampling_rate != 1.0:
            raise ValueError("a step on all rows has sampling_rate 1")

    @property
    def ratio(self):
        """``r = 1 / z``: one example's term in noise units."""
        z = self.noise_multiplier
        return math.inf if z == 0 else 1.0 / z

    @property
    def gaussian_mu(self):
        """The GDP ratio ``2 r`` of a step on all rows (None when subsampled)."""
        if self.sampling == "none" or self.sampling_rate == 1.0:
            return 2.0 * self.ratio
        return None


# --------------------------------------------------------------------------
# Privacy profiles of the dominating pairs
# --------------------------------------------------------------------------
def _hockey(log_a, log_b):
    """``exp(log_a) - exp(log_b)``, clipped at 0, without cancellation (0 where both
    vanish)."""
    with np.errstate(invalid="ignore"):
        gap = np.minimum(log_b - log_a, 0.0)
    return np.where(np.isneginf(log_a), 0.0, np.exp(log_a) * -np.expm1(gap))


def _gaussian_pos(mu, eps):
    return _hockey(log_ndtr(mu / 2 - eps / mu), eps + log_ndtr(-mu / 2 - eps / mu))


def _poisson_pos(q, r, eps):
    """``H_{e^eps}(P || Q)`` for eps >= 0, P, Q the Poisson replace-one pair."""
    lq, l1q = math.log(q), math.log1p(-q)
    with np.errstate(divide="ignore", over="ignore"):
        lb = l1q + np.log(np.expm1(eps))
    # The threshold x where the loss equals eps: u = e^(r x) solves
    # q c u^2 - (1-q)(e^eps - 1) u - q c e^eps = 0, c = exp(-r^2/2).
    lt = math.log(2.0) + lq - r * r / 2 + eps / 2
    root = 0.5 * np.logaddexp(2 * lb, 2 * lt)
    x = (np.logaddexp(lb, root) - math.log(2.0) - lq + r * r / 2) / r
    log_a = np.logaddexp(l1q + log_ndtr(-x), lq + log_ndtr(r - x))
    log_b = eps + np.logaddexp(l1q + log_ndtr(-x), lq + log_ndtr(-x - r))
    return _hockey(log_a, log_b)


def _wor_pos(q, r, eps):
    """``H_{e^eps}((1-q) N(0,1) + q N(2r,1) || N(0,1))`` for eps >= 0."""
    mu = 2.0 * r
    lq, l1q = math.log(q), math.log1p(-q)
    with np.errstate(over="ignore"):
        x = (np.log(np.expm1(eps) + q) - lq + mu * mu / 2) / mu
    log_a = np.logaddexp(l1q + log_ndtr(-x), lq + log_ndtr(mu - x))
    return _hockey(log_a, eps + log_ndtr(-x))


def _positive_profile(step):
    q, r = step.sampling_rate, step.ratio
    mu = step.gaussian_mu
    if mu is not None:
        return lambda e: _gaussian_pos(mu, e)
    if step.sampling == "poisson":
        return lambda e: _poisson_pos(q, r, e)
    return lambda e: _wor_pos(q, r, e)


def privacy_profile(step, epsilon):
    """``delta(epsilon)`` of one step's dominating pair (``doc/proofs/pld.rst``).

    Parameters
    ----------
    step : GaussianPLD
    epsilon : float or array of float (any sign)

    Returns
    -------
    ndarray: the hockey-stick divergence ``H_{e^eps}(P || Q)``; the pair is symmetric,
    so ``delta(-eps) = 1 - e^-eps + e^-eps delta(eps)``.
    """
    return _profile(step, epsilon)


def _profile(step, epsilon, inflate=1.0):
    """:func:`privacy_profile`, its values at ``|eps|`` times ``inflate`` (<= 1)."""
    eps = np.asarray(epsilon, dtype=float)
    if step.sampling_rate == 0 or math.isinf(step.noise_multiplier):
        return np.maximum(-np.expm1(eps), 0.0)
    if step.noise_multiplier == 0:
        return np.ones_like(eps)
    pos = _positive_profile(step)
    flat = eps.ravel()
    at = np.minimum(pos(np.abs(flat)) * inflate, 1.0)
    neg = flat < 0
    e = -flat[neg]
    at[neg] = -np.expm1(-e) + np.exp(-e) * at[neg]
    return np.clip(at, 0.0, 1.0).reshape(eps.shape)


# --------------------------------------------------------------------------
# Discretisation: connect the dots (Doroshenko et al. 2022, Alg. 1)
# --------------------------------------------------------------------------
def _connect_dots(deltas, k0, h):
    """The PMF on the grid whose profile interpolates ``deltas`` (at ``(k0 + j) h``),
    linearly in ``e^eps``, and is 1 at ``eps = -inf``: above the true profile (convex in
    ``e^eps``) everywhere."""
    # Upper envelope of rounding: make the values non-increasing from the right.
    d = np.maximum.accumulate(deltas[::-1])[::-1]
    g = math.expm1(h)
    diff = np.diff(d)                                  # <= 0
    p = np.empty_like(d)
    p[0] = (1.0 - d[0]) + diff[0] / g
    p[1:-1] = (diff[1:] - math.exp(h) * diff[:-1]) / g
    p[-1] = diff[-1] / math.expm1(-h)
    # Rounding leaves tiny negative masses where the true ones vanish (far left).
    # Raising a mass raises the profile, and the composed profile is increasing in
    # every mass: clipping at 0 keeps every bound an upper bound.
    p = np.maximum(p, 0.0)
    return _PMF(k0, p, float(d[-1]))


#: Largest loss a step's PMF resolves (a power of 2 times 0.25, below log(DBL_MAX)).
_LARGEST_TOP = 512.0


def _upper_eps(profile, tol):
    """An ``eps`` with ``profile(eps) <= tol``, within ``1e-9`` of the smallest (so that
    it varies continuously with the mechanism's parameters)."""
    hi = 0.25
    while profile(np.array([hi]))[0] > tol:
        hi *= 2
        if hi >= _LARGEST_TOP:
            # Profiles are not computed beyond it (e^eps overflows past 709); the mass
            # still above goes to +inf, an upper bound.
            return hi
    lo = hi / 2 if hi > 0.25 else 0.0
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        if profile(np.array([mid]))[0] > tol:
            lo = mid
        else:
            hi = mid
    return hi


def _step_top(step, tail):
    """An ``eps`` above which the step's profile is at most ``tail`` (its PMF's mass at
    ``+inf``)."""
    return _upper_eps(lambda e: privacy_profile(step, e), tail)


def _step_pmf(step, h, top_eps):
    """Connect-the-dots PMF of one step on ``[-min(top_eps, 12), top_eps]`` (mass
    below the grid sits on its first point: pessimistic, and at most
    ``e^-12 P(L > 12)`` for a symmetric pair)."""
    top = math.ceil(top_eps / h)
    bottom = -min(top, math.ceil(12.0 / h))
    ks = np.arange(bottom, top + 1)
    deltas = _profile(step, ks * h, inflate=1.0 + 2.0**-30)
    return _connect_dots(deltas, bottom, h)


def _rr_pmf(epsilon, delta, h):
    """The dominating pair of an (epsilon, delta)-DP mechanism (Kairouz et al. 2015),
    its loss rounded up to the grid."""
    k = math.ceil(epsilon / h)
    if k == 0:
        return _PMF(0, np.array([1.0 - delta]), delta)
    e = math.exp(-k * h)
    p = np.zeros(2 * k + 1)
    p[0], p[-1] = (1 - delta) * e / (1 + e), (1 - delta) / (1 + e)
    return _PMF(-k, p, delta)


def _parts_of(items, h, tops):
    parts, log_keep = [], 0.0
    for (item, count), top in zip(items, tops, strict=True):
        if isinstance(item, GaussianPLD):
            pmf = _step_pmf(item, h, top)
        else:
            pmf = _rr_pmf(item[0], item[1], h)
        if pmf.inf >= 1.0:
            return [], 1.0
        if pmf.inf > 0:
            log_keep += count * math.log1p(-pmf.inf)
        if pmf.p.sum() > 0:
            parts.append((pmf, count))
    return parts, -math.expm1(log_keep)


#: Largest number of grid points of one step's PMF (the grid is coarsened to fit).
_MAX_POINTS = 1 << 16


def _grid_step(kept, tops):
    """The grid step: 1/400 of the composition's standard deviation ``sd`` (from each
    step's PMF on a coarse grid), at most ``max(1e-3, sd / 4000)``, at least ``2
    max(top) / 2^16``; it varies continuously with the mechanisms' parameters, so
    calibrations see a continuous epsilon."""
    coarse = max(tops) / 2048
    var = 0.0
    for (s, n), top in zip(kept, tops, strict=True):
        pmf = _step_pmf(s, coarse, top) if isinstance(s, GaussianPLD) else \
            _rr_pmf(s[0], s[1], coarse)
        if not pmf.p.sum() > 0:
            # All of the step's mass is at +inf (almost no noise): no finite spread.
            continue
        L, p = pmf.losses(coarse), pmf.p / pmf.p.sum()
        m = float(np.sum(p * L))
        var += n * float(np.sum(p * (L - m) ** 2))
    sd = math.sqrt(var)
    return max(min(sd / 400, max(1e-3, sd / 4000)), 2 * max(tops) / _MAX_POINTS)


def pld_epsilon(items, delta, *, discretisation=None):
    """Epsilon of a composition, from its privacy loss distribution (an upper bound).

    Parameters
    ----------
    items : iterable of (step, count)
        ``step`` is a :class:`GaussianPLD` or an ``(epsilon, delta)`` pair (an
        (epsilon, delta)-DP mechanism, dominated by the pair of Kairouz et al. 2015);
        ``count`` identical, adaptively composed calls.
    delta : float in (0, 1)
    discretisation : float, optional
        Grid step ``h`` of the losses; default 1/400 of the standard deviation ``sd``
        of the composed loss, at most ``max(1e-3, sd / 4000)``, at least
        ``2 eps_max / 2^16`` (``eps_max``: the largest loss on a step's grid).

    Returns
    -------
    float: an epsilon (the smallest on the grid, rounded up) such that the
    composition is (epsilon, delta)-DP by the pessimistic PLD, ``inf`` if none.
    See ``doc/proofs/pld.rst``.
    """
    items = [(s, int(n)) for s, n in items if int(n) > 0]
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    lattice = any(isinstance(s, GaussianPLD) and s.lattice for s, _ in items)
    if lattice:
        delta = delta * (1 - _LATTICE_EPS)
    pay = _LATTICE_EPS if lattice else 0.0
    # Trivial steps drop out; a step without noise has no finite epsilon.
    kept = []
    for s, n in items:
        if isinstance(s, GaussianPLD):
            if s.sampling_rate == 0 or math.isinf(s.noise_multiplier):
                continue
            if s.noise_multiplier == 0:
                return math.inf
        elif s[1] >= 1 or math.isinf(s[0]):
            # No guarantee (a fit without noise): nothing composed with it has one.
            return math.inf
        kept.append((s, n))
    if not kept:
        return 0.0
    # All steps plain Gaussian: one Gaussian mechanism, exactly.
    mus = [(s.gaussian_mu, n) for s, n in kept if isinstance(s, GaussianPLD)]
    if len(mus) == len(kept) and all(m is not None for m, _ in mus):
        from .accounting import gaussian_epsilon  # noqa: PLC0415 (import cycle)
        mu = math.sqrt(sum(n * m * m for m, n in mus))
        return gaussian_epsilon(mu, delta) + pay
    n_total = sum(n for _, n in kept)
    budget = 1e-6 * delta                      # mass at +inf, lost tail
    tops = [_step_top(s, budget / (4 * n_total)) if isinstance(s, GaussianPLD) else
            max(s[0], 1e-3) for s, _ in kept]
    h = discretisation or _grid_step(kept, tops)
    parts, inf_mass = _parts_of(kept, h, tops)
    if inf_mass > delta:
        # The mass at an infinite loss alone exceeds delta: no finite epsilon.
        return math.inf
    if not parts:
        return 0.0
    mean, var = _tilted_moments(parts, h, 0.0)
    best, target = math.inf, mean + 4 * math.sqrt(var)
    lam = _tilt(parts, h, target)
    for _ in range(10):
        lo, w, log_c, e_inf, rel = _compose_tilted(parts, h, lam, math.log(budget / 4))
        eps, k = _smallest_eps(lo, w, log_c, lam, h, delta, inf_mass + budget / 2, e_inf,
                               rel)
        if k is None:
            # Nothing in the window meets delta: the answer is above it.
            target = max(2 * target, (lo + w.size - 1) * h)
        elif k == 0:
            # The whole window meets delta: the answer is at or below its bottom.
            best = min(best, eps)
            if eps <= 0 or lam == 0:
                break
            target = min(target, eps) - 4 * math.sqrt(var)
        else:
            best = min(best, eps)          # every answer found is an upper bound
            target = eps
        new = _tilt(parts, h, target)
        if k not in (None, 0) and abs(new - lam) <= 0.02 * max(lam, 1e-3):
            break
        lam = new
    if not math.isfinite(best):
        return math.inf
    # The grid's rounding of the answer goes up, and the lattice pays its 2^-40.
    return max(best * (1 + 1e-12) + 1e-15, 0.0) + pay
