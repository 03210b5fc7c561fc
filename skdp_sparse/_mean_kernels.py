"""Numba kernels of ``DPSparseMeanEstimator``: the exceedance sampler of the
Gaussian projection (see ``mean._sampled_gaussian_projection`` for the argument
that the sampled release has the law of the full one)."""

import math

import numba
import numpy as np


@numba.njit(cache=True)
def _geometric_gap(rng, log_keep):
    """Gap to the next success of a Bernoulli(p) process, ``log_keep = log(1 - p)``.

    ``P(gap > k) = (1 - p)^k`` (inverse CDF with U in (0, 1]); capped at 2^62,
    beyond any index.
    """
    if log_keep == -math.inf:
        return 1
    g = math.floor(math.log(1.0 - rng.random()) / log_keep)
    return 1 + int(min(g, 4.0e18))


@numba.njit(cache=True)
def _normal_tail(rng, a, lam):
    """A standard normal value conditioned on being > a (a >= 0).

    Robert (1995): proposal ``a + Exp(1) / lam`` with ``lam = (a + sqrt(a^2 + 4)) / 2``,
    accepted with probability ``exp(-(x - lam)^2 / 2)``; exact for every a >= 0.
    """
    while True:
        x = a + rng.standard_exponential() / lam
        if rng.random() <= math.exp(-0.5 * (x - lam) * (x - lam)):
            return x


@numba.njit(cache=True)
def _sample_exceedances(mean, sigma, t, b, rng):
    """Positions ``U`` and values of ``z = mean + N(0, sigma^2 I)`` that must be drawn.

    Returns ``(idx, z)``: first every j with ``|mean_j| > b`` (drawn directly), then,
    increasing, every other j with ``|z_j| > t``; off ``U``, ``|z_j| <= t``
    (needs ``0 <= b <= t``).

    For ``|mean_j| <= b`` the sub-density of ``z_j`` on ``|y| > t``,
    ``phi((y - m)/sigma) / sigma``, is at most the envelope ``phi((|y| - b)/sigma) / sigma``
    (``|y - m| >= |y| - b >= 0`` there), whose mass is ``q = 2 Phi(-(t - b)/sigma)``.
    Each such j is a candidate with probability q (a Bernoulli process with geometric
    gaps over all positions, the big ones skipped: the marks of distinct positions
    are independent); a candidate proposes ``y = +-(b + sigma T)`` from the normalised
    envelope (T a standard normal beyond ``(t - b)/sigma``, random sign) and keeps it
    with probability ``phi((y - m)/sigma) / phi((|y| - b)/sigma)
    = exp(-w (w + 2 sigma T) / (2 sigma^2))``, ``w = b - sign(y) m`` in [0, 2b].
    So ``P(j kept, z_j in A) = q * int_A (target / envelope) (envelope / q)
    = P(z_j in A, |z_j| > t)``: j is kept exactly when ``|z_j| > t``, with the
    conditional law of ``z_j`` given that, independently over j.
    """
    d = mean.size
    n_big = 0
    for j in range(d):
        n_big += abs(mean[j]) > b
    # room for all d: np.empty only reserves the pages, the ones written are touched
    idx = np.empty(d, np.int64)
    val = np.empty(d)
    k = 0
    for j in range(d):
        if abs(mean[j]) > b:
            idx[k] = j
            k += 1
    for q in range(k):
        val[q] = mean[idx[q]] + sigma * rng.standard_normal()

    a = (t - b) / sigma
    lam = 0.5 * (a + math.sqrt(a * a + 4.0))
    q = math.erfc(a / math.sqrt(2.0))
    if not q > 0.0:
        return idx[:k], val[:k]
    log_keep = math.log1p(-q) if q < 1.0 else -math.inf
    inv_2s2 = 0.5 / (sigma * sigma)
    j = _geometric_gap(rng, log_keep) - 1
    while j < d:
        m = mean[j]
        if abs(m) <= b:  # the mark of a big position is not used
            x = _normal_tail(rng, a, lam)
            positive = rng.random() < 0.5
            w = b - m if positive else b + m
            if not (w > 0.0 and rng.random() > math.exp(-w * (w + 2.0 * sigma * x) * inv_2s2)):
                y = b + sigma * x
                idx[k] = j
                val[k] = y if positive else -y
                k += 1
        j += _geometric_gap(rng, log_keep)
    return idx[:k], val[:k]


@numba.njit(cache=True)
def _shrink_into(out, idx, z, tau, zero_first):
    """``out`` = the projection ``sign(z) (|z| - tau)_+`` on ``idx``, 0 elsewhere."""
    if zero_first:
        out[:] = 0.0
    for q in range(idx.size):
        v = abs(z[q]) - tau
        if v > 0.0:
            out[idx[q]] = v if z[q] > 0.0 else -v


@numba.njit(cache=True)
def _fill_truncated(full, mean, drawn, sigma, t, rng):
    """Where not ``drawn[j]``: ``full[j] ~ N(mean_j, sigma^2)`` given ``|full[j]| <= t``."""
    for j in range(mean.size):
        if drawn[j]:
            continue
        while True:
            v = mean[j] + sigma * rng.standard_normal()
            if abs(v) <= t:
                full[j] = v
                break
