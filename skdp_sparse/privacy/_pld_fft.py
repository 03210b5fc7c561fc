"""Composition of discretised privacy loss distributions by FFT, exponentially tilted.

The engine of :func:`skdp_sparse.privacy.pld.pld_epsilon` (proofs in
``doc/proofs/pld.rst``). A composition of PMFs on a grid of step ``h`` is computed as
the cyclic convolution, by FFT, of the PMFs tilted by ``exp(lam L)`` (Koskela, Jalko
& Honkela 2020, with the tilt that puts the mass where delta is read), on a window
chosen by Chernoff bounds; every approximation (the mass outside the window, the
floating-point error of the transforms) is bounded and added to delta, or only
raises it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import fft as sfft

_U = np.finfo(float).eps / 2


@dataclass
class _PMF:
    """Losses ``(k0 + j) h`` with masses ``p[j]``, and mass ``inf`` at ``+inf``."""

    k0: int
    p: np.ndarray
    inf: float

    def losses(self, h):
        return (self.k0 + np.arange(self.p.size)) * h

    def support(self, h):
        """Losses and masses where the mass is positive (cached)."""
        if getattr(self, "_support", None) is None:
            keep = self.p > 0
            self._support = (self.losses(h)[keep], self.p[keep])
        return self._support


def _log_mgf(pmf, h, lam):
    """``log sum_j p_j exp(lam L_j)`` for each ``lam`` (finite part only)."""
    lam = np.atleast_1d(np.asarray(lam, dtype=float))
    L, p = pmf.support(h)
    a = lam[:, None] * L[None, :]
    top = a.max(axis=1, keepdims=True)
    with np.errstate(under="ignore"):
        return np.log(np.sum(p * np.exp(a - top), axis=1)) + top[:, 0]


def _cgf(parts, h, lam):
    return sum(n * _log_mgf(pmf, h, lam) for pmf, n in parts)


def _tilted_moments(parts, h, lam):
    """Mean and variance of the composition tilted by ``exp(lam L)``."""
    mean = var = 0.0
    for pmf, n in parts:
        L, p = pmf.support(h)
        x = lam * L
        wt = p * np.exp(x - x.max())
        wt /= wt.sum()
        m = float(np.sum(wt * L))
        mean += n * m
        var += n * float(np.sum(wt * (L - m) ** 2))
    return mean, var


def _tilt(parts, h, target):
    """``lam >= 0`` whose tilted composition has mean ``target`` (0 if the mean is
    above it), by Newton steps on the convex cumulant generating function safeguarded
    by bisection; capped where ``exp(lam L)`` would leave the floating-point range."""
    m0, _ = _tilted_moments(parts, h, 0.0)
    if m0 >= target:
        return 0.0
    span = max(float(np.ptp(pmf.support(h)[0])) for pmf, _ in parts) + h
    cap = 600.0 / span
    lo, hi, lam = 0.0, cap, min(1.0, cap)
    for _ in range(60):
        m, v = _tilted_moments(parts, h, lam)
        if abs(m - target) <= 0.02 * max(math.sqrt(v), h) + 1e-3 * abs(target):
            return lam
        if m < target:
            lo = lam
        else:
            hi = lam
        step = lam + (target - m) / v if v > 0 else hi
        if not lo < step < hi:
            step = (lo + hi) / 2
        if hi - lo <= 1e-6 * hi:
            break
        lam = step
    return lam


def _capped(parts, h, log_tol):
    """Per part, the largest loss ``c`` kept, such that the mass of all the steps' losses
    above their ``c`` is at most ``exp(log_tol)`` (union bound), as index counts."""
    share = math.exp(log_tol) / sum(n for _, n in parts)
    caps = []
    for pmf, _ in parts:
        L, p = pmf.support(h)
        tail = np.cumsum(p[::-1])[::-1]               # mass at L_j and above
        over = np.flatnonzero(tail <= share)
        caps.append(int(over[0]) if over.size else L.size)
    return caps


def _cgf_capped(parts, h, lam, caps):
    total = 0.0
    for (pmf, n), c in zip(parts, caps, strict=True):
        L, p = pmf.support(h)
        a = lam[:, None] * L[None, :c]
        top = a.max(axis=1, keepdims=True)
        with np.errstate(under="ignore"):
            total = total + n * (np.log(np.sum(p[:c] * np.exp(a - top), axis=1)) + top[:, 0])
    return total


def _chernoff_window(parts, h, lam, log_c, log_tol, mean, sd):
    """Window ``[a, b]`` (losses) of the tilted composition, by Chernoff bounds.

    Below ``a``: tilted mass at most ``2^-40``; it wraps to higher losses, where its
    untilted weight is smaller (pessimistic, negligible). Above ``b``: untilted mass at
    most ``exp(log_tol)``, which the caller adds to delta (that mass wraps to lower
    losses, possibly below the epsilon evaluated): half for the steps whose loss exceeds
    a cap (union bound), half by Chernoff on the capped losses. The wrapped copies only
    add to delta (their untilted weight grows); for the answer to stay tight, the window
    is wide enough that those landing above ``e = mean - 6 sd`` (``mean``, ``sd`` of the
    tilted composition) add at most ``exp(log_tol)`` to ``delta(e)``.
    """
    thetas = np.geomspace(0.1, 60.0, 12) / max(sd, h)
    log_t = -40 * math.log(2.0)
    down = _cgf(parts, h, lam - thetas) - log_c
    a = float(np.max((log_t - down) / thetas))
    up = _cgf(parts, h, lam + thetas)
    caps = _capped(parts, h, log_tol - math.log(2.0))
    grid = np.unique(np.concatenate([lam + thetas, thetas]))
    untilted = (_cgf_capped(parts, h, grid, caps) - log_tol + math.log(2.0)) / grid
    low = max(a, mean - 3 * sd)
    log_wrap = log_tol + lam * low - log_c
    wrap = float(np.min((up - log_c - log_wrap) / thetas)) + a - low
    return a, max(a + h, float(np.min(untilted)), wrap)


def _fft_gamma(N):
    """Componentwise error of a transform of length N: ``|fl(FFT x) - FFT x| <= gamma
    ||x||_1`` in every entry (each output is one path through at most ``log2 N``
    butterfly stages of radix <= 5, each with relative error below ``12 u``; Higham 2002,
    Sec. 24.1), with a factor 2 of margin."""
    return 2 * (math.ceil(math.log2(max(N, 2))) * 12 + 4) * _U


def _compose_tilted(parts, h, lam, log_tol):
    """The composition tilted by ``exp(lam L)`` on its FFT window.

    Returns ``lo`` (first loss index of the window), the tilted masses ``w``, ``log_c``
    (the log of the untilting constant), the bound ``e_inf`` on the error of each entry
    of ``w`` and ``rel``, a relative error of the inputs (tilting, folding).
    """
    log_c = float(_cgf(parts, h, lam)[0])
    mean, var = _tilted_moments(parts, h, lam)
    a, b = _chernoff_window(parts, h, lam, log_c, log_tol, mean, math.sqrt(var))
    lo, hi = math.floor(a / h), math.ceil(b / h)
    N = sfft.next_fast_len(hi - lo + 1, real=True)
    base = sum(n * pmf.k0 for pmf, n in parts)
    gam = _fft_gamma(N)
    spec = np.ones(N // 2 + 1, dtype=complex)
    # Per frequency: the bound on |spec - exact| (propagated) and on |spec| + error.
    bound = np.zeros(N // 2 + 1)
    upper = np.ones(N // 2 + 1)
    rel = 0.0
    n_total = 0
    for pmf, n in parts:
        L = pmf.losses(h)
        lm = float(_log_mgf(pmf, h, lam)[0])
        with np.errstate(under="ignore"):
            tilted = pmf.p * np.exp(lam * L - lm)
        folded = np.bincount(np.arange(tilted.size) % N, weights=tilted, minlength=N)
        mass = float(folded.sum()) * (1 + 1e-12)
        rel += n * (4 * (abs(lam) * float(np.abs(L).max()) + abs(lm) + 2)
                    + math.ceil(tilted.size / N) + 2) * _U
        f = sfft.rfft(folded)
        e = gam * mass
        absf = np.abs(f)
        with np.errstate(under="ignore", divide="ignore"):
            log_mag = np.log(absf + e)
            mag_n = np.exp(n * log_mag)                      # (|f| + e)^n
            # Error of f^n from that of f (mean value theorem), then of the power
            # itself, computed as exp(n log f): relative (n (|log|f|| + pi) + 4) u.
            logf = np.log(np.maximum(absf, 1e-300))
            power_err = n * e * mag_n / (absf + e)
            power_err += (n * (np.abs(logf) + math.pi) + 4) * _U * np.exp(n * logf)
            bound = bound * mag_n + upper * power_err
            spec *= np.exp(n * (logf + 1j * np.angle(f)))
        upper = upper * mag_n
        n_total += n
    w = sfft.irfft(spec, N)
    # Every entry of the inverse transform: the propagated spectrum error plus its own
    # rounding (both over the full spectrum, twice the half spectrum).
    e_inf = (2.0 / N) * float(np.sum(bound) + gam * np.sum(np.abs(spec)) + 4 * n_total
                               * _U * np.sum(np.abs(spec)))
    # Index J of the cyclic result is the loss (base + J mod N) h; bring lo to 0.
    w = np.roll(w, -((lo - base) % N))
    return lo, np.maximum(w, 0.0), log_c, e_inf, rel


def _smallest_eps(lo, w, log_c, lam, h, delta, extra, e_inf, rel):
    """Smallest eps whose bound ``delta_grid(eps) (1 + 2 rel') + extra + error(eps)`` is
    at most ``delta``; returns (eps, index of its grid cell) or (inf, None)."""
    L = (lo + np.arange(w.size)) * h
    # Untilted masses; far below the target region they may overflow, and then the
    # bound there is infinite (never chosen).
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        scale = np.exp(log_c - lam * L)
        m = w * scale
    # D_k = sum_{j > k} m_j (1 - e^{L_k - L_j}) = A_{k+1} - e^{-h} B_{k+1}, with
    # A_k = sum_{j >= k} m_j and B_k = m_k + e^{-h} B_{k+1}. Rounding: the untilting
    # (relative), the sums of nonnegative terms (relative N u) and the difference,
    # at least (1 - e^-h) A_{k+1} (relative error amplified by 1 / (1 - e^-h)).
    # scipy.signal costs a third of a second to import; only this conversion needs it.
    from scipy.signal import lfilter

    rev = m[::-1]
    A = np.cumsum(rev)[::-1]
    B = lfilter([1.0], [1.0, -math.exp(-h)], rev)[::-1]
    D = np.zeros_like(m)
    with np.errstate(invalid="ignore"):
        D[:-1] = A[1:] - math.exp(-h) * B[1:]
    rel += (4 * (abs(log_c) + abs(lam) * float(np.abs(L).max()) + 2)
            + 8 * w.size / -math.expm1(-h)) * _U
    D = np.maximum(D, 0.0) * (1 + 2 * rel)
    # Error: each tilted entry is off by at most e_inf, so the profile at L_k by
    # e_inf sum_{t >= 1} c e^{-lam (L_k + t h)} (1 - e^{-t h}).
    if lam > 0:
        s = (math.exp(-lam * h) / -math.expm1(-lam * h)
             - math.exp(-(lam + 1) * h) / -math.expm1(-(lam + 1) * h))
        with np.errstate(over="ignore", invalid="ignore"):
            E = e_inf * scale * s
    else:
        E = e_inf * np.exp(log_c) * np.arange(w.size, 0, -1, dtype=float)
    total = D + E + extra
    ok = np.flatnonzero(total <= delta)
    if ok.size == 0:
        return math.inf, None
    k = int(ok[0])
    if k == 0:
        return L[0], 0       # the answer may lie below the window
    # Between L[k-1] and L[k] the grid profile is A_k - e^eps sum_{j>=k} m_j e^{-L_j}:
    # solve it with the error bound of the left end (the larger) and a margin for the
    # rounding of the difference.
    budget = (delta - extra - E[k - 1]) / (1 + 2 * rel) - 1e-12 * A[k]
    c_k = B[k] * math.exp(-L[k])
    if c_k > 0 and A[k] - budget > 0:
        eps = math.log((A[k] - budget) / c_k)
        return float(min(max(eps, L[k - 1]), L[k])), k
    return L[k], k
