"""Exact exceedance processes: which of ``m`` i.i.d. noise draws pass a threshold.

For ``Z`` discrete Laplace or discrete Gaussian (scale in lattice units) and an integer
``u >= 0``, positions ``0 .. m-1`` are selected independently with probability ``q =
P(Z > u)`` (one-sided) or ``P(|Z| > u)`` (two-sided), together with the value of ``Z``
given the event when asked; with a level ``upper > u``, the band ``u < Z <= upper``
among positions known to have ``Z <= upper`` (a ladder of levels, one band at a time).
The cost is proportional to the number selected, not to ``m``:

* candidates at rate ``r = 1 - exp(-lam) >= q`` by geometric gaps (``lam`` rational,
  exact table inversion as in the Laplace sampler);
* each candidate kept with probability ``q / r``, an irrational number decided against
  the exact threshold ``floor(2^63 q / r)`` (:mod:`._tails` brackets it);
* the value: Laplace ``u + 1 + Geometric(exp(-1/t))`` (memoryless); Gaussian by
  rejection from ``u + 1 + Geometric(exp(-2^-j'))`` with an exact acceptance
  ``exp(-(h(z) - h(z_min)))``; a random sign when two-sided; proposals above ``upper``
  rejected.

Kernels call :func:`next_exceedance`; a tie hands the step to Python
(:meth:`ExceedancePlan.finish`), which returns the same ``(index, value)`` the
kernel would have. Proof: ``doc/proofs/discrete.rst`` ("Exceedance processes").
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numba
import numpy as np

from ...utils.random import check_generator
from ._exact import (
    _exp_neg_cached,
    _exp_neg_interval,
    _fraction,
    _geometric_spec,
    _package,
    _py_bernoulli_exp_product,
    _py_finish_geometric,
    _py_geometric,
    _py_uniform_below,
    _threshold,
)
from ._kernels import (
    HANDOFF_SLOTS,
    _bernoulli_exp_product,
    _bits,
    _geometric,
    _uniform_below,
)
from ._samplers import (
    _MAX_UNITS,
    _exact_bits,
    _gaussian_params,
    _KernelSource,
    _laplace_params,
    fill_with_handoffs,
)
from ._tails import exceedance_probability

_FB_GAP = 20  # gap table tie: [kind, pos, g, word]
_FB_THIN = 21  # thinning threshold tie: [kind, candidate, word]
_FB_VALUE_GEO = 22  # value proposal table tie: [kind, candidate, g, word]
_FB_VALUE_BIG = 23  # Gaussian proposal beyond 62-bit acceptance: [kind, candidate, z]

# Layout of the params array.
(_WB, _G_GSHIFT, _G_LOW, _G_P, _G_SHIFT, _G_BLOCK, _THIN, _GAUSS, _TWO, _U, _UP, _V_GSHIFT,
 _V_LOW, _V_P, _V_SHIFT, _V_BLOCK, _JJ, _PCC, _F, _ZMIN, _PCC_BITS, _ZLIM) = range(22)


@numba.njit(cache=True, inline="always")
def _tail_value(proc, c, next64, state, fb):
    """``Z`` given the event, for candidate ``c``: ``(True, z)`` or ``(False, 0)`` after a
    handoff."""
    params, _, _, vtab, vguide = proc
    u = params[_U]
    while True:
        tie, g, lo, w, buf, nb = _geometric(next64, state, vtab, vguide, params[_WB],
                                            params[_V_GSHIFT], params[_V_LOW], params[_V_P],
                                            params[_V_BLOCK])
        if tie:
            fb[0], fb[1], fb[2], fb[3] = _FB_VALUE_GEO, c, g, w
            return False, np.int64(0)
        z = u + 1 + (((g << params[_V_LOW]) + lo) >> params[_V_SHIFT])
        if 0 <= params[_UP] < z:
            continue  # beyond the band: the proposal is rejected
        if params[_GAUSS]:
            if z >= params[_ZLIM]:
                fb[0], fb[1], fb[2] = _FB_VALUE_BIG, c, z
                return False, np.int64(0)
            zmin = params[_ZMIN]
            jj = params[_JJ]
            acc, buf, nb = _bernoulli_exp_product(
                next64, state, buf, nb, abs(z - zmin), np.int64(1) << (jj + 1), jj + 2,
                abs(((z + zmin) << params[_F]) - 2 * params[_PCC]), params[_PCC],
                params[_PCC_BITS])
            if not acc:
                continue
        if params[_TWO]:
            s, buf, nb = _bits(next64, state, buf, nb, 1)
            if s:
                z = -z
        return True, z


@numba.njit(cache=True)
def next_exceedance(proc, pos, m, with_value, next64, state, fb):
    """The first selected position ``j >= pos`` and its value: ``(j, z)``.

    ``(m, 0)`` when none is below ``m``; ``z = 0`` unless ``with_value``; ``(-1, 0)``
    after a handoff (state in ``fb``): the caller returns to Python, which calls
    :meth:`ExceedancePlan.finish` for the ``(j, z)`` this call would have returned.
    Successive calls from ``j + 1`` give the whole process.
    """
    params, gtab, gguide, _, _ = proc
    while True:
        tie, g, lo, w, _, _ = _geometric(next64, state, gtab, gguide, params[_WB],
                                         params[_G_GSHIFT], params[_G_LOW], params[_G_P],
                                         params[_G_BLOCK])
        if tie:
            fb[0], fb[1], fb[2], fb[3] = _FB_GAP, pos, g, w
            return np.int64(-1), np.int64(0)
        c = pos + (((g << params[_G_LOW]) + lo) >> params[_G_SHIFT])
        if c >= m:
            return m, np.int64(0)
        verdict, w = _uniform_below(next64, state, params[_THIN], params[_WB])
        if verdict < 0:
            fb[0], fb[1], fb[2] = _FB_THIN, c, w
            return np.int64(-1), np.int64(0)
        if verdict == 1:
            if not with_value:
                return c, np.int64(0)
            ok, z = _tail_value(proc, c, next64, state, fb)
            if not ok:
                return np.int64(-1), np.int64(0)
            return c, z
        pos = c + 1


@numba.njit(cache=True)
def _fill(proc, pos, m, with_value, idx, val, count, next64, state, fb):
    """Append the process from ``pos`` to ``idx``/``val`` from ``count``; returns
    ``(next position, count, stopped on a handoff)``, stopping early when full."""
    while count < idx.size:
        j, z = next_exceedance(proc, pos, m, with_value, next64, state, fb)
        if j < 0:
            return pos, count, True
        if j >= m:
            return m, count, False
        idx[count] = j
        val[count] = z
        count += 1
        pos = j + 1
    return pos, count, False


@numba.njit(cache=True)
def _values(proc, out, start, next64, state, fb):
    for i in range(start, out.size):
        ok, z = _tail_value(proc, np.int64(i), next64, state, fb)
        if not ok:
            return i
        out[i] = z
    return out.size


def _gap_rate(q_hi):
    """``(p, shift)`` with ``lam = 2^shift / p`` a little above ``-log(1 - q_hi)``."""
    lam = -math.log1p(-float(q_hi)) * (1 + 2.0**-20) if q_hi < 1 else 64.0
    if lam <= 2.0**-24:
        return min(max(1, math.floor(1 / lam)), _MAX_UNITS - 1), 0
    shift = max(0, math.floor(math.log2(lam)) + 26)
    return math.floor(2**shift / lam), shift


class ExceedancePlan:
    """Everything an exceedance process needs, fixed by public values.

    Build with :func:`plan_exceedance`. :attr:`arrays` go to kernels
    (:func:`next_exceedance`); :meth:`sample` and :meth:`sample_values` run it from
    Python.
    """

    def __init__(self, law, scale_in_units, threshold, two_sided, upper=None):
        u = int(threshold)
        if u != threshold or u < 0:
            raise ValueError(f"threshold must be an integer >= 0, got {threshold!r}")
        if upper is not None and (int(upper) != upper or upper <= u):
            raise ValueError(f"upper must be an integer above the threshold, got {upper!r}")
        self.law, self.u, self.two_sided = law, u, bool(two_sided)
        self.upper = None if upper is None else int(upper)
        self.wbits = wbits = _package()._WORD_BITS
        if law == "laplace":
            p, shift = _laplace_params(scale_in_units)
            self._law_params = (p, shift)
            self._value_spec = _geometric_spec(p, shift)
            gauss = [0] * 6
        elif law == "gaussian":
            s = _fraction(scale_in_units, "scale_in_units")
            if s < Fraction(1, 1024):
                raise ValueError("the discrete Gaussian sampler supports sigma >= 2^-10")
            j, pc, f = _gaussian_params(s * s)
            self._law_params = Fraction(pc << j, 1 << f)
            gauss = self._gauss_value_params(j, pc, f, u)
            self._value_spec = _geometric_spec(1 << gauss[0], 0)
        else:
            raise ValueError(f"law must be 'laplace' or 'gaussian', got {law!r}")
        q_lo, q_hi = self.probability_bracket(80)
        self.probability = float(Fraction(q_lo + q_hi, 1 << 81))
        g_p, g_shift = _gap_rate(Fraction(q_hi, 1 << 80))
        while True:
            self._lam = Fraction(1 << g_shift, g_p)
            r_lo = (1 << 80) - _exp_neg_interval(self._lam, 80)[1]
            if r_lo > q_hi:
                break
            if g_p == 1 and g_shift >= 62:
                raise ValueError("the exceedance probability is too close to 1")
            if g_p == 1:
                g_shift += 1
            g_p = max(1, g_p * 63 // 64)
        self._gap_spec = _geometric_spec(g_p, g_shift)
        self.thin_threshold = _threshold(self._thin_bracket, wbits)
        gtab, gguide, _, g_gshift, g_low, g_block = self._gap_spec.kernel_args()
        vtab, vguide, _, v_gshift, v_low, v_block = self._value_spec.kernel_args()
        vs = self._value_spec
        params = [wbits, g_gshift, g_low, g_p, g_shift, g_block, self.thin_threshold,
                  int(law == "gaussian"), int(self.two_sided), u,
                  -1 if self.upper is None else self.upper, v_gshift, v_low, vs.p,
                  vs.shift, v_block, *gauss]
        self.arrays = (np.array(params, dtype=np.int64), gtab, gguide, vtab, vguide)

    @staticmethod
    def _gauss_value_params(j, pc, f, u):
        """Proposal rate ``2^-jj`` near the tangent of the tail at ``u + 1`` (``jj <= j``),
        ``s^2 = 2^jj pcc / 2^f``, ``z* = pcc / 2^f`` and ``z_min``, the integer ``>= u+1``
        nearest ``z*``."""
        s2 = Fraction(pc << j, 1 << f)
        ratio = s2 / max(u + 1, math.isqrt(math.ceil(s2)) + 1)
        jj = min(j, max(0, round(math.log2(ratio))))
        pcc = pc << (j - jj)
        zmin = max(u + 1, (pcc + (1 << f >> 1)) >> f)
        zlim = (1 << (61 - f)) - zmin
        if zlim <= u + 1 or pcc >= 1 << 60:
            raise ValueError("the threshold is too large for this Gaussian scale")
        return [jj, pcc, f, zmin, pcc.bit_length(), zlim]

    def probability_bracket(self, prec):
        """Integers bracketing ``2^prec q``."""
        return exceedance_probability(self.law, self._law_params, self.u, self.two_sided,
                                      prec, self.upper)

    def _thin_bracket(self, prec):
        q_lo, q_hi = self.probability_bracket(prec + 8)
        e_lo, e_hi = _exp_neg_cached(self._lam, prec + 8)
        one = 1 << (prec + 8)
        return (q_lo << prec) // (one - e_lo), -((-(q_hi << prec)) // (one - e_hi))

    @property
    def candidate_rate(self):
        """``r = 1 - exp(-lam) >= q``, the rate of candidates (a float, for reports)."""
        return -math.expm1(-float(self._lam))

    # ---------------------------------------------------------------- Python side
    def _py_value(self, bits, x=None):
        """The value given the event, finishing a proposal ``u + 1 + x`` if given."""
        params = self.arrays[0]
        while True:
            if x is None:
                x = _py_geometric(bits, self._value_spec.p, self._value_spec.shift)
            z, x = self.u + 1 + x, None
            if self.upper is not None and z > self.upper:
                continue
            if params[_GAUSS]:
                jj, pcc, f, zmin = (int(params[i]) for i in (_JJ, _PCC, _F, _ZMIN))
                if not _py_bernoulli_exp_product(bits, abs(z - zmin), 1 << (jj + 1),
                                                  abs(((z + zmin) << f) - 2 * pcc), pcc):
                    continue
            if self.two_sided and bits.bits(1):
                z = -z
            return z

    def finish(self, fb, rng, m, with_value=True):
        """``(j, z)`` for a kernel that handed back a step of the process, exactly.

        ``rng``: the generator the kernel drew from (or its ``kernel_source``); ``m`` and
        ``with_value`` as given to :func:`next_exceedance`.
        """
        bits = _exact_bits(rng)
        kind = int(fb[0])
        c = int(fb[1])
        value_x = None
        if kind == _FB_GAP:
            c += _py_finish_geometric(bits, self._gap_spec, int(fb[2]), int(fb[3]))
            stage = "thin"
        elif kind == _FB_THIN:
            stage = "thin_word"
        elif kind in (_FB_VALUE_GEO, _FB_VALUE_BIG):
            stage = "value"
            if kind == _FB_VALUE_GEO:
                value_x = _py_finish_geometric(bits, self._value_spec, int(fb[2]), int(fb[3]))
            else:
                value_x = int(fb[2]) - self.u - 1
        else:
            raise ValueError(f"not an exceedance handoff: {kind}")
        while True:
            if stage == "gap":
                c += _py_geometric(bits, self._gap_spec.p, self._gap_spec.shift)
                stage = "thin"
            if stage in ("thin", "thin_word"):
                if c >= m:
                    return m, 0
                word = int(fb[2]) if stage == "thin_word" else bits.bits(self.wbits)
                if not _py_uniform_below(bits, [word, self.wbits], self._thin_bracket):
                    c += 1
                    stage = "gap"
                    continue
                if not with_value:
                    return c, 0
                stage = "value"
            return c, self._py_value(bits, value_x)

    def sample(self, m, rng, values=True):
        """The selected positions of ``0 .. m-1`` (increasing) and, if ``values``, the
        values of ``Z`` there (zeros otherwise)."""
        rng = check_generator(rng)
        src = _KernelSource(rng)
        fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)
        size = max(16, int(4 * self.probability * m) + 16)
        idx = np.empty(size, dtype=np.int64)
        val = np.empty(size, dtype=np.int64)
        pos, count = 0, 0
        while pos < m:
            with src.lock:
                pos, count, handoff = _fill(self.arrays, pos, m, values, idx, val, count,
                                            src.next64, src.state, fb)
            if handoff:
                j, z = self.finish(fb, src, m, values)
                if j >= m:
                    break
                idx[count], val[count] = j, z
                count += 1
                pos = j + 1
            if count == idx.size:
                idx, val = np.resize(idx, 2 * size), np.resize(val, 2 * size)
                size *= 2
        return idx[:count].copy(), val[:count].copy()

    def sample_values(self, size, rng):
        """``size`` independent draws of ``Z`` given the event."""
        rng = check_generator(rng)
        src = _KernelSource(rng)
        fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)
        out = np.empty(int(size), dtype=np.int64)
        return fill_with_handoffs(
            out, 0, out.size, src,
            lambda i: _values(self.arrays, out, i, src.next64, src.state, fb),
            lambda i: self.finish(fb, src, i + 1)[1])


@functools.lru_cache(maxsize=128)
def _cached_plan(law, scale, threshold, two_sided, upper, wbits):
    return ExceedancePlan(law, scale, threshold, two_sided, upper)


def plan_exceedance(law, scale_in_units, threshold, two_sided=False, upper=None):
    """The exceedance process of ``Z > threshold`` (or ``|Z| > threshold``).

    With ``upper``, the band ``threshold < Z <= upper`` (or ``|Z|``) among positions known
    to have ``Z <= upper``: each is selected with probability ``P(band | Z <= upper)``
    and its value has the law of ``Z`` given the band, which reveals a ladder of levels
    one band at a time.

    Parameters
    ----------
    law : {"laplace", "gaussian"}
    scale_in_units : int, float or Fraction
        As for :func:`sample_discrete_laplace` / :func:`sample_discrete_gaussian`.
    threshold : int
        ``u >= 0``, in lattice units.
    two_sided : bool
    upper : int or None
        ``> threshold``, in lattice units.
    """
    u = int(threshold)
    if u != threshold or u < 0:
        raise ValueError(f"threshold must be an integer >= 0, got {threshold!r}")
    return _cached_plan(law, scale_in_units, u, bool(two_sided), upper,
                        _package()._WORD_BITS)

