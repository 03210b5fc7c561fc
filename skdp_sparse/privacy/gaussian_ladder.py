"""Continuous Gaussian noise revealed down a ladder of public thresholds.

The samplers of the sampled Gaussian projection (``mean.sampled_gaussian_projection``
has the argument that its release has the law of drawing all d values): the
coordinates of ``mean + N(0, sigma^2 I)`` drawn directly where the mean is large,
the others band by band (``sample_band``) from their exact conditional laws, and the
completion of the rest given the bands (``fill_truncated``).
"""

import math

import numba
import numpy as np

# Largest gap drawn at once: beyond any index, and exactly representable.
_MAX_GAP = 4.0e18


@numba.njit(cache=True)
def _geometric_gap(rng, inv_rate):
    """Gap to the next success of a Bernoulli(p) process, ``inv_rate = -1 / log(1 - p)``.

    ``1 + floor(E inv_rate)`` with E standard exponential:
    ``P(gap > k) = P(E >= k / inv_rate) = (1 - p)^k``. ``inv_rate = 0`` (p = 1)
    gives 1. Capped beyond any index.
    """
    return 1 + np.int64(min(math.floor(rng.standard_exponential() * inv_rate), _MAX_GAP))


@numba.njit(cache=True)
def _normal_tail(rng, a, lam, inv_lam):
    """A standard normal value conditioned on being > a (a >= 0).

    Robert (1995): proposal ``a + Exp(1) / lam`` with ``lam = (a + sqrt(a^2 + 4)) / 2``,
    accepted with probability ``exp(-(x - lam)^2 / 2)``, here as the event that
    another standard exponential exceeds ``(x - lam)^2 / 2``; exact for every a >= 0
    (acceptance about 0.91 at a = 1.5).
    """
    while True:
        x = a + rng.standard_exponential() * inv_lam
        u = x - lam
        if rng.standard_exponential() >= 0.5 * u * u:
            return x


@numba.njit(cache=True)
def _normal_band(rng, lo, hi, lam, inv_lam):
    """A standard normal value conditioned on lying in ``(lo, hi]`` (``0 <= lo < hi <= inf``).

    For a narrow band (``(hi^2 - lo^2) / 2 <= 1``) a uniform proposal on the band,
    kept with probability ``phi(x) / phi(lo) = exp(-(x^2 - lo^2) / 2)`` (acceptance
    above 1/e); otherwise Robert's tail sampler beyond lo, kept when ``x <= hi``.
    Both are exact; the rule only picks the faster.
    """
    if 0.5 * (hi * hi - lo * lo) <= 1.0:
        width = hi - lo
        half_lo2 = 0.5 * lo * lo
        while True:
            x = lo + width * rng.random()
            if rng.standard_exponential() >= 0.5 * x * x - half_lo2:
                return x
    while True:
        x = _normal_tail(rng, lo, lam, inv_lam)
        if x <= hi:
            return x


@numba.njit(cache=True)
def _tail_constants(a):
    lam = 0.5 * (a + math.sqrt(a * a + 4.0))
    return lam, 1.0 / lam


@numba.njit(cache=True)
def _upper_tail(x):
    """``P(Z > x)`` for Z standard normal (0 at infinity)."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


@numba.njit(cache=True)
def _inside(m, sigma, c):
    """``P(|m + sigma Z| <= c)``, Z standard normal (1 for c infinite)."""
    if c == math.inf:
        return 1.0
    return 1.0 - _upper_tail((c - m) / sigma) - _upper_tail((c + m) / sigma)


@numba.njit(cache=True)
def is_seen(seen, j):
    return (seen[j >> 6] >> np.uint64(j & 63)) & np.uint64(1)


@numba.njit(cache=True)
def mark_seen(seen, j):
    seen[j >> 6] |= np.uint64(1) << np.uint64(j & 63)


@numba.njit(cache=True, inline="always")
def scan_size(values, support):
    """How many positions a scan visits: every one of ``values``, or those of ``support``
    (increasing positions outside which ``values`` is 0) when it is given."""
    return values.size if support is None else support.size


@numba.njit(cache=True, inline="always")
def scan_position(support, r):
    """The ``r``-th position a scan visits (see :func:`scan_size`)."""
    return r if support is None else support[r]


@numba.njit(cache=True)
def _sample_big(mean, sigma, b, rng, idx, val, support):
    """Every j with ``|mean_j| > b``, increasing, into ``idx``, and ``mean_j + sigma N`` into
    ``val``; returns their number. Only the positions of ``support`` are read if given
    (``mean`` is 0 elsewhere)."""
    k = 0
    for r in range(scan_size(mean, support)):
        j = scan_position(support, r)
        # branch-free: the test is unpredictable on a sparse mean
        idx[k] = j
        k += abs(mean[j]) > b
    for r in range(k):
        val[r] = mean[idx[r]] + sigma * rng.standard_normal()
    return k


@numba.njit(cache=True)
def sample_band(mean, sigma, lower, upper, b, rng, idx, val, k, seen, pos, cand):
    """Reveal the band ``lower < |z_j| <= upper`` among the positions with ``|mean_j| <= b``
    not yet revealed (not marked in ``seen``), given ``|z_j| <= upper`` there.

    Appends, increasing, from ``idx[k]``, every such j where the band holds, with its
    value, marks it in ``seen`` (a bitmap: bit ``j % 64`` of ``seen[j // 64]``), and
    returns the new count. Needs
    ``0 <= b <= lower < upper <= inf``; ``upper = inf`` is the unconditioned case.

    Given ``|z_j| <= upper``, ``z_j`` (``z_j ~ N(m, sigma^2)``, ``|m| <= b``) has on the
    band the sub-density ``phi((y - m)/sigma) / (sigma P_m)``, ``P_m = P(|z_j| <= upper)``.
    It is at most the envelope ``phi((|y| - b)/sigma) / (sigma P_b)``: on the band
    ``|y - m| >= |y| - b >= 0``, and ``P_m >= P_b``, ``P_b`` the value at ``|m| = b``
    (by Anderson's inequality ``P_m`` decreases in ``|m|``). The envelope's mass is
    ``q = 2 (Phi(-(lower - b)/sigma) - Phi(-(upper - b)/sigma)) / P_b`` (must be
    <= 1). Each position is a candidate with probability q (a Bernoulli process with
    geometric gaps over all positions, the others skipped: marks of distinct
    positions are independent). At a candidate with ``0 < |m| <= b`` the kernel
    proposes ``y = +-(b + sigma T)`` from the normalised envelope (T a standard normal
    in ``((lower - b)/sigma, (upper - b)/sigma]``, random sign) and keeps it with
    probability ``target / envelope = exp(-w (w + 2 sigma T) / (2 sigma^2)) P_b / P_m``,
    ``w = b - sign(y) m`` in ``[0, 2b]``. So ``P(j kept, z_j in A | |z_j| <= upper)
    = q * int_A (target / envelope) (envelope / q) = P(z_j in A, lower < |z_j| <= upper
    | |z_j| <= upper)``. At a candidate with ``m = 0`` (most of them) the target is
    known in closed form: j is kept with probability ``q0 / q``,
    ``q0 = P(lower < |z_j| <= upper) / P_0``, and then ``z_j = +-sigma T0``, T0 a
    standard normal in ``(lower/sigma, upper/sigma]``, random sign. Either way j is
    kept exactly when the band holds, with the conditional law of ``z_j`` given
    that, independently over j.

    The candidates' positions are listed first (``pos``), then their means gathered
    (``cand``; infinity marks a position already revealed), then drawn: in one loop,
    each scattered load of ``mean`` waited behind a candidate's random draws, which
    measured twice as slow for sparse bands. ``pos`` and ``cand``: scratch,
    ``mean.size`` long (``pos`` of the integer type of ``idx``).
    """
    d = mean.size
    p_b = _inside(b, sigma, upper)
    lo = (lower - b) / sigma
    hi = (upper - b) / sigma
    q = 2.0 * (_upper_tail(lo) - _upper_tail(hi)) / p_b
    if not q > 0.0:
        return k
    if q > 1.0:
        raise ValueError("band too wide for its envelope")
    lo0 = lower / sigma
    hi0 = upper / sigma
    # P(band | inside) for m = 0, as a fraction of the candidates' rate (<= 1)
    keep0 = 2.0 * (_upper_tail(lo0) - _upper_tail(hi0)) / _inside(0.0, sigma, upper) / q
    half0 = 0.5 * keep0
    inv_rate = -1.0 / math.log1p(-q) if q < 1.0 else 0.0
    lam, inv_lam = _tail_constants(lo)
    lam0, inv_lam0 = _tail_constants(lo0)
    inv_2s2 = 0.5 / (sigma * sigma)
    conditioned = upper < math.inf
    n_cand = 0
    j = _geometric_gap(rng, inv_rate) - 1
    while j < d:
        pos[n_cand] = j
        n_cand += 1
        j += _geometric_gap(rng, inv_rate)
    for r in range(n_cand):
        j = pos[r]
        cand[r] = math.inf if is_seen(seen, j) else mean[j]
    for r in range(n_cand):
        m = cand[r]
        if m == 0.0:
            u = rng.random()
            if u < keep0:
                y = sigma * _normal_band(rng, lo0, hi0, lam0, inv_lam0)
                j = pos[r]
                idx[k] = j
                val[k] = y if u < half0 else -y
                mark_seen(seen, j)
                k += 1
        elif abs(m) <= b:  # big or revealed positions: the mark is not used
            x = _normal_band(rng, lo, hi, lam, inv_lam)
            # one uniform gives the sign and, rescaled, the thinning uniform
            u = 2.0 * rng.random()
            positive = u < 1.0
            if not positive:
                u -= 1.0
            w = b - m if positive else b + m
            ratio = math.exp(-w * (w + 2.0 * sigma * x) * inv_2s2)
            if conditioned:
                ratio *= p_b / _inside(m, sigma, upper)
            if u < ratio:
                j = pos[r]
                y = b + sigma * x
                idx[k] = j
                val[k] = y if positive else -y
                mark_seen(seen, j)
                k += 1
    return k


@numba.njit(cache=True)
def sample_exceedances(mean, sigma, levels, b, radius, rng, idx, val, seen, pos, cand,
                       support=None):
    """Stage 1 of the sampled projection, level by level: ``(count, level, found)``.

    ``levels`` decreases, ``levels[-1] = t >= b``. First every j with ``|mean_j| > b``
    is drawn (``_sample_big``); then, for ``i = 0, 1, ...``, the band
    ``levels[i] < |z_j| <= levels[i - 1]`` (``levels[-1]`` read as infinity for i = 0)
    among the other positions (``sample_band``), until
    ``g_U(levels[i]) = sum_{j in U} (|z_j| - levels[i])_+ >= radius`` (``found``) or
    the levels run out (``found`` False, ``level = levels.size - 1``). ``idx[:count]``,
    ``val[:count]`` hold U: the big positions, increasing, then each band's,
    increasing. Off U every ``|z_j| <= levels[level]``. Scratch, any values:
    ``seen`` (uint64, ``ceil(d / 64)`` long: a bitmap, which stays in L2 where a
    byte per position did not), ``pos`` (as ``idx``) and ``cand`` (float64), ``d`` long.
    ``support``: the increasing positions outside which ``mean`` is 0, if known; the scan
    for the big positions then reads those only (the bands never scan: their candidates
    come by geometric gaps), so the cost follows the support and the noise drawn, not d.
    """
    n_levels = levels.size
    k = _sample_big(mean, sigma, b, rng, idx, val, support)
    # sums and counts of |z| by band, so each level's g costs O(levels)
    band_sum = np.zeros(n_levels)
    band_count = np.zeros(n_levels)
    lowest = levels[n_levels - 1]
    for r in range(k):
        a = abs(val[r])
        if a > lowest:  # most big values are below every level
            for i in range(n_levels):
                if a > levels[i]:
                    band_sum[i] += a
                    band_count[i] += 1.0
                    break
    seen[:] = 0
    upper = math.inf
    for i in range(n_levels):
        lower = levels[i]
        start = k
        k = sample_band(mean, sigma, lower, upper, b, rng, idx, val, k, seen, pos, cand)
        for r in range(start, k):
            band_sum[i] += abs(val[r])
            band_count[i] += 1.0
        excess = 0.0
        for h in range(i + 1):
            excess += band_sum[h] - lower * band_count[h]
        if excess >= radius:
            return k, i, True
        upper = lower
    return k, n_levels - 1, False


@numba.njit(cache=True)
def fill_truncated(full, mean, drawn, sigma, t, rng):
    """Where not ``drawn[j]``: ``full[j] ~ N(mean_j, sigma^2)`` given ``|full[j]| <= t``.

    Needs ``|mean_j| <= t`` there. By rejection, from ``N(mean_j, sigma^2)`` when
    ``t >= sigma`` (acceptance above 0.47), else from the uniform law on
    ``[-t, t]`` kept with probability ``exp(-(v - mean_j)^2 / (2 sigma^2))``
    (acceptance above 0.59): both exact, neither slow for any t.
    """
    inv_2s2 = 0.5 / (sigma * sigma)
    for j in range(mean.size):
        if drawn[j]:
            continue
        m = mean[j]
        if t >= sigma:
            while True:
                v = m + sigma * rng.standard_normal()
                if abs(v) <= t:
                    break
        else:
            while True:
                v = t * (2.0 * rng.random() - 1.0)
                if rng.standard_exponential() >= (v - m) * (v - m) * inv_2s2:
                    break
        full[j] = v
