"""Exact selections on lattice-rounded scores: exponential mechanism, report-noisy-max.

Scores ``u_j`` of common sensitivity ``Delta`` are normalised and rounded to integer
keys ``k_j = rint(clip(u_j / Delta, -Y, Y) / gamma)`` (:func:`plan_selection`,
:func:`~._selection_kernels.lattice_key`), so the keys of neighbouring data sets
differ by at most ``D = floor((1 + 2^-52 Y) / gamma) + 1`` per coordinate. Then

* the exponential mechanism draws ``j`` with probability ``exp(k_j / t) / sum_i
  exp(k_i / t)`` exactly (:class:`ExponentialSelector`): ``epsilon = 2 D / t``-DP, and
  ``epsilon``-bounded-range, hence ``epsilon^2 / 8``-zCDP (Cesar & Rogers 2021);
* report-noisy-max returns ``argmax_j k_j + Z_j`` (ties to the lowest index) with
  ``Z_j`` discrete Laplace of scale ``t`` (:func:`report_noisy_max`):
  ``epsilon = 2 D / t``-DP for scores that need not be monotone.

Both guarantees are ``selection_epsilon(Delta, beta) = (1 + eta) 2 Delta / beta`` for
the nominal scale ``beta`` (``exp(u / beta)``, or Laplace noise of scale ``beta``).
Proofs: ``doc/proofs/discrete.rst``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numba
import numpy as np

from ...utils.random import check_generator
from ._exact import (
    _INT64_MAX,
    _ceil_frac,
    _exp_neg_multiple_interval,
    _floor_log2,
    _package,
    _py_bernoulli_exp_rational,
    _py_uniform_below,
    _threshold,
)
from ._kernels import HANDOFF_SLOTS
from ._lattice import _ETA, _float_up, _PowerOfTwoStep
from ._samplers import _MAX_UNITS, _exact_bits, _KernelSource
from ._selection_kernels import _FB_SELECT, em_select, em_set, rnm_select

# One correctly rounded division errs by at most 2^-53 relative; the normalised
# scores of two neighbours each carry one, hence 2^-52 Y in the sensitivity.
_DIVISION_SLACK = Fraction(1, 1 << 52)
_MAX_KEY = 1 << 53
# p from which ExponentialSelector keeps the dynamic tree rather than scanning.
DYNAMIC_MIN_SIZE = 4096
# Headroom of the tree's reference bucket above the top key, and how far the total may
# fall below the top weight before a rebuild, in bits of weight.
_HEADROOM_BITS = 8
_DROP_BITS = 12


def _weight_bits(p):
    """Bits ``S`` of the top proposal weight: ``p 2^S < 2^62`` keeps every sum in int64."""
    return 62 - int(p).bit_length()


def selection_epsilon(sensitivity, scale):
    """Epsilon of the exact exponential mechanism and of report-noisy-max.

    For scores of sensitivity ``Delta`` (each coordinate may change by ``Delta`` between
    neighbours) and the nominal scale ``beta`` (weights ``exp(u / beta)``, or Laplace
    noise of scale ``beta``): ``(1 + eta) 2 Delta / beta``, rounded up. The lattice of
    :func:`plan_selection` meets it exactly.
    """
    return _float_up((1 + _ETA) * 2 * Fraction(sensitivity) / Fraction(scale))


def selection_scale_for(sensitivity, epsilon):
    """Smallest scale ``beta`` with ``selection_epsilon(sensitivity, beta) <= epsilon``."""
    b = _float_up((1 + _ETA) * 2 * Fraction(sensitivity) / Fraction(epsilon))
    while selection_epsilon(sensitivity, b) > epsilon:
        b = math.nextafter(b, math.inf)
    return b


@dataclass(frozen=True)
class SelectionLattice(_PowerOfTwoStep):
    """Keys ``rint(clip(u / Delta, -Y, Y) / gamma)``, ``gamma = 2^k``, and temperature ``t``.

    ``delta_units = D`` bounds how much one key moves between neighbours, so both
    selections are ``epsilon = 2 D / t``-DP exactly.
    """

    k: int
    t: int
    delta_units: int
    value_bound: float

    @property
    def epsilon(self):
        return Fraction(2 * self.delta_units, self.t)

    def keys(self, scores, sensitivity):
        """The integer keys of ``scores`` (the kernels use ``lattice_key``)."""
        v = np.asarray(scores, dtype=np.float64) / float(sensitivity)
        v = np.where(v <= self.value_bound, v, self.value_bound)
        v = np.maximum(v, -self.value_bound)
        return np.rint(v * self.inv_gamma).astype(np.int64)


@functools.lru_cache(maxsize=256)
def plan_selection(sensitivity, scale, value_bound):
    """The lattice of an exact selection with nominal scale ``beta = scale``.

    ``value_bound = Y`` is a public bound on ``|u_j| / Delta`` that the keys are clipped
    to (scores of a mean of ``n`` terms bounded by ``C`` with ``Delta = 2C/n``: ``n/2``);
    ``2^-52 Y`` must stay below ``eta / 2``. The epsilon is at most
    :func:`selection_epsilon`.
    """
    delta, beta, y = Fraction(sensitivity), Fraction(scale), Fraction(value_bound)
    if not (delta > 0 and beta > 0 and y > 0):
        raise ValueError("sensitivity, scale and value_bound must be positive")
    div = y * _DIVISION_SLACK
    if div >= _ETA / 2:
        raise ValueError(f"value_bound must be below 2^35, got {value_bound!r}")
    claim = Fraction(selection_epsilon(sensitivity, scale))
    k = _floor_log2(_ETA - div)
    while True:
        gamma = Fraction(2) ** k
        t = _ceil_frac(beta / (delta * gamma))
        d_units = math.floor((1 + div) / gamma) + 1
        if Fraction(2 * d_units, t) <= claim:
            break
        k -= 1
    if t >= _MAX_UNITS or y / gamma >= _MAX_KEY:
        raise ValueError("the selection's temperature or keys exceed 2^53 lattice units")
    return SelectionLattice(k, t, d_units, float(value_bound))


# --------------------------------------------------------------------------
# The exponential mechanism
# --------------------------------------------------------------------------
def _ratio_bracket(lam, m, weight, s_bits, prec):
    """Integers bracketing ``2^prec c_m``, ``c_m = 2^S exp(-m lam) / E_m``."""
    work = prec + s_bits + 16
    lo, hi = _exp_neg_multiple_interval(lam, m, work)
    den = weight << work
    return (lo << (s_bits + prec)) // den, -((-(hi << (s_bits + prec))) // den)


@functools.lru_cache(maxsize=64)
def _selection_tables(t, s_bits, wbits):
    """``params``, weights ``E`` and thresholds ``T`` for temperature ``t`` (int64 arrays).

    Buckets of ``w = 2^wshift <= max(1, t/16)`` keys; ``lam = w / t``. For offsets
    ``m < M`` below the reference bucket, ``E_m = ceil(2^S exp(-m lam))`` (irrational
    for ``m >= 1``, so ``E_m > 2^S exp(-m lam)``); ``M`` is the first offset with
    ``2^S exp(-M lam) < 1`` and ``E_M = 1`` serves every offset from ``M`` on. ``T_m =
    floor(2^wbits c_m)`` with ``c_m = 2^S exp(-m lam) / E_m < 1`` (``c_0 = 1``).
    """
    wshift = max(0, _floor_log2(Fraction(t, 16)))
    lam = Fraction(1 << wshift, t)
    weights, thresholds = [1 << s_bits], [_INT64_MAX]
    m = 0
    while weights[-1] > 1:
        m += 1
        prec = s_bits + 64
        while True:
            lo, hi = _exp_neg_multiple_interval(lam, m, prec)
            f_lo, f_hi = (lo << s_bits) >> prec, (hi << s_bits) >> prec
            if f_lo == f_hi:
                break
            prec += 64
        weight = f_lo + 1 if f_lo else 1
        weights.append(weight)
        thresholds.append(_threshold(
            functools.partial(_ratio_bracket, lam, m, weight, s_bits), wbits))
    params = [t, wshift, s_bits, m, wbits,
              math.ceil(_HEADROOM_BITS * math.log(2) / float(lam)),
              1 << max(0, s_bits - _HEADROOM_BITS - _DROP_BITS),
              max(0, min(32, 62 - t.bit_length()))]
    as_array = functools.partial(np.array, dtype=np.int64)
    return as_array(params), as_array(weights), as_array(thresholds)


@numba.njit(cache=True)
def _select_many(sel, out, start, next64, state, fb):
    """Independent selections into ``out`` from ``start``; returns where a handoff
    stopped it (state in ``fb``), or the size."""
    for i in range(start, out.size):
        j = em_select(sel, next64, state, fb)
        if j < 0:
            return i
        out[i] = j
    return out.size


@numba.njit(cache=True)
def _set_many(sel, indices, keys):
    for r in range(indices.size):
        em_set(sel, indices[r], keys[r])


class ExponentialSelector:
    """Exact exponential mechanism on integer keys: ``P(j) ∝ exp(k_j / t)``.

    Two samplers behind one interface, chosen by ``dynamic`` (default: ``p >=``
    ``DYNAMIC_MIN_SIZE``):

    * one pass over the keys per selection (O(p), no state): dyadic proposal weights by
      bucket of ``t/16`` keys below the top, exact acceptance;
    * an integer sum tree over the same proposal weights, updated in O(log p) per
      changed key (:meth:`set`, ``em_set`` in kernels) and sampled in O(log p); it is
      rebuilt (O(p)) when a key rises above its reference bucket or the total falls
      far below it.

    Kernels receive :attr:`arrays` and call ``em_select(arrays, next64, state, fb)`` and
    ``em_set(arrays, j, key)`` (module ``_selection_kernels``); on -1 they return to
    Python, which calls :meth:`finish` and resumes them with its answer.

    Parameters
    ----------
    keys : array-like of int
        ``|k_j| < 2^61``; copied.
    t : int
        Temperature in key units, ``1 <= t < 2^56``.
    dynamic : bool or None
    """

    def __init__(self, keys, t, dynamic=None):
        keys = np.array(keys, dtype=np.int64).ravel()
        t = int(t)
        if keys.size == 0:
            raise ValueError("a selection needs at least one key")
        if not 1 <= t < _MAX_UNITS:
            raise ValueError(f"t must be an integer in [1, 2^56), got {t}")
        if np.any(np.abs(keys) >= 1 << 61):
            raise ValueError("keys must be below 2^61 in absolute value")
        p = keys.size
        if dynamic is None:
            dynamic = p >= DYNAMIC_MIN_SIZE
        self.t = t
        self._s_bits = _weight_bits(p)
        self._wbits = _package()._WORD_BITS
        params, weights, thresholds = _selection_tables(t, self._s_bits, self._wbits)
        tree = np.zeros(2 * p if dynamic else 0, dtype=np.int64)
        meta = np.array([0, 1], dtype=np.int64)  # rebuild before the first selection
        self.arrays = (keys, tree, meta, params, weights, thresholds)

    @property
    def keys(self):
        """The current keys (a view: change them through :meth:`set`)."""
        return self.arrays[0]

    @property
    def dynamic(self):
        return self.arrays[1].size > 0

    def set(self, indices, keys):
        """Set ``k[indices] = keys``."""
        indices = np.asarray(indices, dtype=np.int64).ravel()
        keys = np.broadcast_to(np.asarray(keys, dtype=np.int64), indices.shape)
        if indices.size and (indices.min() < 0 or indices.max() >= self.keys.size):
            raise IndexError("key index out of range")
        if np.any(np.abs(keys) >= 1 << 61):
            raise ValueError("keys must be below 2^61 in absolute value")
        _set_many(self.arrays, indices, np.ascontiguousarray(keys))

    def select(self, rng, size=None):
        """One index (``size=None``) or ``size`` independent indices; the Generator
        advances in place."""
        rng = check_generator(rng)
        n = 1 if size is None else int(size)
        out = np.empty(n, dtype=np.int64)
        src = _KernelSource(rng)
        fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)
        i = 0
        while i < n:
            with src.lock:
                i = _select_many(self.arrays, out, i, src.next64, src.state, fb)
            if i < n:
                j = self.finish(fb, src)
                if j >= 0:
                    out[i] = j
                    i += 1
        return int(out[0]) if size is None else out

    def finish(self, fb, rng):
        """Decide a proposal a kernel handed back: its index if accepted, else -1.

        ``rng``: the generator the kernel drew from (or its ``kernel_source``). The
        proposal ``j`` was
        to be accepted with probability ``c_m exp(-x / t)``; the uniform word tied with
        ``T_m``, so its comparison with ``c_m`` continues with more bits.
        """
        bits = _exact_bits(rng)
        kind, j, m, w, x = (int(v) for v in fb[:5])
        if kind != _FB_SELECT:
            raise ValueError(f"not a selection handoff: {kind}")
        params, weights = self.arrays[3], self.arrays[4]
        lam = Fraction(1 << int(params[1]), self.t)
        bracket = functools.partial(_ratio_bracket, lam, m, int(weights[m]), self._s_bits)
        if not _py_uniform_below(bits, [w, self._wbits], bracket):
            return -1
        return j if _py_bernoulli_exp_rational(bits, x, self.t) else -1


def sample_exponential_mechanism(keys, t, rng, size=None):
    """Index ``j`` with probability ``exp(k_j / t) / sum_i exp(k_i / t)``, exactly."""
    return ExponentialSelector(keys, t).select(rng, size)


# --------------------------------------------------------------------------
# Report-noisy-max
# --------------------------------------------------------------------------
def finish_report_noisy_max(keys, noise, pos):
    """Report-noisy-max in Python integers (``rnm_select`` returned -2)."""
    i = int(pos[0])
    p = len(keys)
    sums = [int(k) + int(z) for k, z in zip(keys, noise[i:i + p], strict=True)]
    pos[0] = i + p
    return max(range(p), key=lambda j: (sums[j], -j))


def report_noisy_max(keys, t, rng, size=None):
    """``argmax_j k_j + Z_j`` (ties to the lowest index), ``Z_j`` i.i.d. discrete Laplace
    of scale ``t``, exactly; ``size`` independent repetitions."""
    from ._buffer import NoiseBuffer

    keys = np.ascontiguousarray(keys, dtype=np.int64).ravel()
    n = 1 if size is None else int(size)
    buf = NoiseBuffer("laplace", t, rng, size=max(4096, keys.size))
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        j = rnm_select(keys, buf.values, buf.pos)
        if j == -1:
            buf.refill(keys.size)
            j = rnm_select(keys, buf.values, buf.pos)
        if j == -2:
            j = finish_report_noisy_max(keys, buf.values, buf.pos)
        out[i] = j
    return int(out[0]) if size is None else out
