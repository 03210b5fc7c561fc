"""Floating-point-safe noise: exact discrete Laplace and Gaussian noise on a lattice.

Why
---
Adding ``rng.laplace(...)`` or ``rng.normal(...)`` to a double ``f(S)`` is not the
Laplace or Gaussian mechanism: the doubles that ``fl(f(S) + noise)`` can take, and
their probabilities, depend on the low-order bits of ``f(S)``, so one release can
reveal ``f(S)`` exactly (Mironov 2012). The releases below are computed with
integers, and the only rounding left is applied to a value that is already private.

The safe release of ``f(S)`` in ``R^d``
--------------------------------------
1. **Granularity.** ``gamma = 2^k`` is the largest power of two with
   ``gamma <= 2^-30 * scale`` (the lattice is at least 2^30 times finer than the
   noise) and ``d * gamma <= eta * Delta_1`` (Laplace) or ``sqrt(d) * gamma <= eta *
   Delta_2`` (Gaussian), ``eta = 2^-16`` (:data:`SENSITIVITY_SLACK`). It depends on
   public quantities only: the noise scale, the sensitivity and ``d``.
2. **Rounding.** ``a = rint(f(S) / gamma)``. Both operations are exact in binary
   floating point (scaling by a power of two, rounding to an integer), so ``a`` is
   the integer nearest ``f(S) / gamma``, coordinate by coordinate.
3. **Noise.** ``Z`` has independent integer coordinates, drawn exactly from the
   discrete Laplace law ``P(z) ∝ exp(-|z| / t)`` or the discrete Gaussian law
   ``P(z) ∝ exp(-z^2 / (2 s^2))`` (Canonne, Kamath & Steinke 2020, "CKS" below).
4. **Release** ``gamma * fl(a + Z)``, where ``fl`` rounds the *exact integer*
   ``a + Z`` to the nearest double (ties to even). It is a function of ``a + Z``
   alone, so it is post-processing; it is exact whenever ``|a + Z| < 2^53``.
   Every output is an integer multiple of ``gamma``, whatever ``f(S)`` is.

Privacy (replace-one neighbours ``S, S'``)
------------------------------------------
Per coordinate ``|rint(x) - rint(y)| <= |x - y| + 1``, and ``a - a'`` is an integer
vector, so

* ``||a - a'||_1 <= floor(Delta_1 / gamma) + d =: D_1`` and the discrete Laplace
  release is ``(D_1 / t)``-DP: its pmf ratio at integer shifts is at most
  ``exp(||a - a'||_1 / t)`` (Dwork et al. 2006's argument on Z^d);
* ``||a - a'||_2 <= Delta_2 / gamma + sqrt(d) =: D_2`` and the discrete Gaussian
  release is ``D_2^2 / (2 s^2)``-zCDP (CKS 2020, Section 2: the discrete Gaussian
  on Z^d with independent coordinates satisfies the same Renyi bound
  ``alpha ||a - a'||_2^2 / (2 s^2)`` as the continuous one, for every order
  ``alpha``). It is *not* claimed to be exactly mu-GDP: its (epsilon, delta) curve
  is close to, but not identical with, the continuous Gaussian's.

``t`` (resp. ``s^2``) is the noise scale in lattice units rounded up, and step 1
makes ``D_1 / t <= (1 + eta) Delta_1 / b`` (resp. ``D_2^2 / (2 s^2) <= ((1 + eta)
Delta_2 / sigma)^2 / 2``). The mechanisms report exactly these bounds
(:func:`laplace_epsilon`, :func:`gaussian_rho`), which depend on ``b`` or ``sigma``
only, and every release re-checks with exact rational arithmetic that the lattice it
uses meets them. Calibration to a target (:func:`laplace_scale_for`) therefore adds
a relative ``2^-16`` to the noise scale, and the rounding error is at most
``gamma / 2 <= 2^-31`` noise scales per coordinate.

Samplers: exactness and speed
-----------------------------
The samplers follow CKS's Algorithms 1-3 in 63-bit integer arithmetic, compiled
with Numba; every decision is an exact comparison of uniform random bits with a
rational or with a proven bound on an irrational number.

* ``Bernoulli(num/den)``: a block of ``c`` uniform bits ``w`` decides whether the
  uniform ``W`` lies below ``num/den`` unless ``num 2^c / den`` falls in
  ``[w, w + 1)``; then the binary expansion of the remainder is compared bit by bit.
* ``Bernoulli(exp(-x))`` for rational ``x in [0, 1]``: CKS Algorithm 1 (``K``
  counts successes of ``Bernoulli(x / K)``; ``P(K odd) = exp(-x)``), with
  ``Bernoulli(x / K)`` drawn as ``Bernoulli(x) and Bernoulli(1/K)`` so no product
  of denominators is formed.
* Discrete Laplace of scale ``p / 2^shift``: ``Y = floor(X / 2^shift)`` with a
  random sign, rejecting the negative zero, for ``X`` geometric with ratio
  ``exp(-1/p)`` (CKS Algorithm 2). The bits of a geometric variable are
  independent, so ``X = G 2^L + Lo`` with ``G`` geometric of ratio
  ``exp(-2^L/p)``, ``2^L/p in (2^-6, 2^-5]``, and ``Lo`` on ``[0, 2^L)`` with
  ``P(Lo = l) ∝ exp(-l/p)``. ``G`` is drawn by inversion of one uniform word
  against a table of ``floor(2^63 exp(-g 2^L/p))`` computed once per scale with
  interval arithmetic: the thresholds are irrational, so the word decides every
  comparison except when it equals a table entry (probability about 2^-63 per
  draw). ``Lo`` is uniform, accepted with probability ``exp(-Lo/p) >= exp(-1/32)``
  by Algorithm 1. CKS's own ``U + p V`` decomposition needs about five times
  more branching.
* Discrete Gaussian: CKS Algorithm 3 with a discrete Laplace proposal of scale
  ``T = 2^j`` (``j = round(log2 s)``; acceptance rate at least 0.65) accepted with
  probability ``exp(-(|Y| - s^2/T)^2 / (2 s^2))``. With ``s^2 = T P / 2^f``, the
  exponent is ``x = A^2 / (P 2^(f+j+1))``, ``A = | |Y| 2^f - P |``, drawn as
  ``m1 m2`` independent ``Bernoulli(exp(-x / (m1 m2)))`` whose parameter is the
  product of ``A / (P m1) <= 1`` and ``A / (2^(f+j+1) m2) <= 1``
  (``exp(-x) = exp(-x/m)^m``): no square is formed and everything fits in 62 bits.

Random words come from the generator's own ``next_uint64`` (its public ``ctypes``
interface), so the ``Generator`` advances in place and no state is copied; a bit
buffer lives within one kernel call only. The samplers are exact in distribution,
relative to the bit generator's output being uniform: whenever a kernel cannot
decide something within 63 bits (a word equal to a table entry, a Gaussian
proposal beyond ``2^(61-f)``, an output sum beyond ``2^62``), it hands its exact
state to a continuation in Python integers that finishes the same algorithm (or,
after a rejection, restarts it), drawing more bits from the same generator.
Nothing is truncated.

Cost at d = 10^6 (``benchmarks/bench_fp_safe.py``): the safe Laplace release about
1.3-1.5x ``value + rng.laplace(...)``; the safe Gaussian release about 5x
``value + rng.normal(...)``. The first release at a new Laplace scale builds its
table (a few milliseconds, then cached).
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numba
import numpy as np

from ..utils.random import check_generator
from .accounting import PrivacyEvent

__all__ = [
    "SENSITIVITY_SLACK",
    "LATTICE_RESOLUTION_BITS",
    "sample_discrete_laplace",
    "sample_discrete_gaussian",
    "discrete_laplace_scale",
    "discrete_gaussian_sigma2",
    "laplace_epsilon",
    "laplace_scale_for",
    "gaussian_rho",
    "discrete_gaussian_event",
    "LaplaceLattice",
    "GaussianLattice",
    "plan_laplace",
    "plan_gaussian",
    "release_laplace",
    "release_gaussian",
]

#: Relative growth of the sensitivity that rounding to the lattice may cost (eta).
SENSITIVITY_SLACK = 2.0**-16
#: The lattice step is at most 2^-LATTICE_RESOLUTION_BITS noise scales.
LATTICE_RESOLUTION_BITS = 30

_ETA = Fraction(SENSITIVITY_SLACK)
_WORD_BITS = 63  # bits of one uniform word; tests lower it to exercise the exact fallback
_INT64_MAX = (1 << 63) - 1
_MAX_UNITS = 1 << 56  # largest Laplace scale / Gaussian s in lattice units
_TWO53 = 1 << 53
_TWO62_F = 4611686018427387904.0

# Status of a kernel draw.
_OK = 0
_FB_GEOMETRIC = 1  # a uniform word equals a table entry: W vs exp(-g lam) undecided
_FB_GAUSS_Y = 2  # a Gaussian proposal too large for the 62-bit acceptance test
_FB_NOISE = 3  # noise known; only rounding a + noise needs big integers


# --------------------------------------------------------------------------
# Numba kernels. The bit buffer (buf, nb) travels by value so it stays in
# registers; random words come from the bit generator's own next_uint64.
# --------------------------------------------------------------------------
@numba.njit(cache=True)
def _bits(next64, state, buf, nb, k):
    """``k`` (0 <= k <= 63) fair bits as an int64, and the new buffer."""
    out = np.int64(0)
    while k > 0:
        if nb == 0:
            # 63 of the 64 bits keep every quantity a non-negative int64.
            buf = np.int64(next64(state) >> np.uint64(1))
            nb = 63
        take = min(k, nb)
        out = (out << take) | (buf & ((np.int64(1) << take) - 1))
        buf >>= take
        nb -= take
        k -= take
    return out, buf, nb


@numba.njit(cache=True)
def _bit_length(x):
    n = np.int64(0)
    while x > 0:
        x >>= 1
        n += 1
    return n


@numba.njit(cache=True)
def _bernoulli(next64, state, buf, nb, num, den, c):
    """True with probability num/den exactly (0 < den, den 2^c < 2^62).

    A uniform W is compared with p = num/den: first through a block of c bits
    ``w`` (W in [w, w+1) 2^-c), which decides unless ``p 2^c`` lies in that
    interval, then bit by bit along the binary expansion of the remainder.
    """
    if num <= 0:
        return False, buf, nb
    if num >= den:
        return True, buf, nb
    r = num
    if c >= 1:
        w, buf, nb = _bits(next64, state, buf, nb, c)
        lhs = w * den
        rhs = num << c
        if lhs + den <= rhs:
            return True, buf, nb
        if lhs >= rhs:
            return False, buf, nb
        r = rhs - lhs
    while True:
        r <<= 1
        pbit = 0
        if r >= den:
            pbit = 1
            r -= den
        w, buf, nb = _bits(next64, state, buf, nb, 1)
        if w != pbit:
            return pbit == 1, buf, nb
        if r == 0:
            # p's expansion ended: the uniform's remaining bits make it larger a.s.
            return False, buf, nb


@numba.njit(cache=True)
def _bernoulli_exp(next64, state, buf, nb, n1, d1, c1, n2, d2, c2):
    """True with probability exp(-x), x = (n1/d1)(n2/d2) in [0, 1] (CKS Algorithm 1).

    ``K`` counts successes of Bernoulli(x / K); P(K odd) = exp(-x). Bernoulli(x / K)
    is the conjunction of Bernoulli(1/K), Bernoulli(n1/d1) and Bernoulli(n2/d2), so
    no product of denominators is formed. ``c1``, ``c2``: block sizes of d1, d2.
    """
    k = np.int64(1)
    while True:
        ok = True
        if k > 1:
            ok, buf, nb = _bernoulli(next64, state, buf, nb, 1, k, 32 if k < 1 << 28 else 0)
        if ok:
            ok, buf, nb = _bernoulli(next64, state, buf, nb, n1, d1, c1)
        if ok:
            ok, buf, nb = _bernoulli(next64, state, buf, nb, n2, d2, c2)
        if not ok:
            break
        k += 1
    return (k & 1) == 1, buf, nb


@numba.njit(cache=True)
def _fresh(next64, state, k):
    """``k`` bits of a new word, and its other ``63 - k`` bits as the new buffer.

    Discarding what was left in the old buffer is harmless: unused bits are
    independent of everything drawn.
    """
    r = np.int64(next64(state) >> np.uint64(1))
    if k >= 63:
        return r, np.int64(0), np.int64(0)
    return r & ((np.int64(1) << k) - 1), r >> k, np.int64(63 - k)


@numba.njit(cache=True)
def _add_rounded(ai, z):
    """fl(ai + z) for an integer-valued double ai and an int64 z, if 64 bits suffice."""
    if -_TWO53 <= z <= _TWO53:
        # Both operands are exact doubles; IEEE addition rounds their exact sum once.
        return True, ai + np.float64(z)
    if abs(ai) < _TWO62_F:
        # |z| < 2^62 too, so the integer sum is exact; int -> double rounds it once.
        return True, np.float64(np.int64(ai) + z)
    return False, 0.0


# The draw loops are written out in each kernel: Numba compiles per-draw helper
# functions with early returns into code several times slower.
@numba.njit(cache=True)
def _laplace_kernel(a, out, out_int, start, p, shift, table, guide, wbits, gshift, low_bits,
                    pblock, next64, state, fb):
    """Discrete Laplace noise of scale ``p / 2^shift`` (CKS Algorithm 2, restructured).

    ``X ~ Geometric(exp(-1/p))`` is drawn as ``X = G 2^L + Lo`` from independent
    parts (the bits of a geometric variable are independent): ``G`` with
    ``P(G >= g) = exp(-g 2^L / p)`` by inversion of a uniform word against the exact
    ``table`` (``table[g] = floor(2^wbits exp(-g 2^L/p))``: ``w < table[g]`` proves
    ``W < exp(-g 2^L/p)``, ``w > table[g]`` disproves it, the threshold being
    irrational; ``w == table[g]`` is handed to the exact continuation; ``guide``
    gives a proven lower bound on ``G`` from the top bits of ``w``), and ``Lo``
    uniform on ``[0, 2^L)`` accepted with probability ``exp(-Lo/p) >= exp(-1/32)``
    (CKS Algorithm 1). ``Y = floor(X / 2^shift)`` with a random sign, rejecting
    the negative zero.

    Fills ``out`` with ``fl(a + noise)`` or, when ``a`` is empty, ``out_int`` with
    the noise, from index ``start``. Returns the index of the first draw it hands
    back (its state in ``fb``), or the size when done.
    """
    n = out_int.size if a.size == 0 else out.size
    d = max(a.size, 1)
    ia = start % d
    for i in range(start, n):
        while True:
            w, buf, nb = _fresh(next64, state, wbits)
            g = guide[w >> gshift]
            while w < table[g + 1]:
                g += 1
            if w == table[g + 1]:
                fb[0], fb[1], fb[2], fb[3] = _FB_GEOMETRIC, 0, g, w
                return i
            acc = False
            lo = np.int64(0)
            while not acc:
                lo, buf, nb = _fresh(next64, state, low_bits)
                acc, buf, nb = _bernoulli_exp(next64, state, buf, nb, lo, p, pblock, 1, 1, 32)
            s, buf, nb = _bits(next64, state, buf, nb, 1)
            x = ((g << low_bits) + lo) >> shift
            if s == 0 or x != 0:
                break
        z = x - 2 * s * x
        if a.size == 0:
            out_int[i] = z
        else:
            ok, v = _add_rounded(a[ia], z)
            if not ok:
                fb[0], fb[1] = _FB_NOISE, z
                return i
            out[i] = v
            ia += 1
            if ia == d:
                ia = 0
    return n


@numba.njit(cache=True)
def _gauss_kernel(a, out, out_int, start, j, pc, f, table, guide, wbits, gshift, low_bits,
                  pblock, next64, state, fb):
    """Discrete Gaussian noise, ``s^2 = 2^j pc / 2^f`` (CKS Algorithm 3).

    Proposals are discrete Laplace of scale ``T = 2^j`` (drawn as in
    :func:`_laplace_kernel`); ``Y`` is accepted with probability
    ``exp(-(|Y| - s^2/T)^2 / (2 s^2)) = exp(-x)``, ``x = A^2 / (pc 2^(f+j+1))``,
    ``A = | |Y| 2^f - pc |``, drawn as ``m1 m2`` independent Bernoulli(exp(-x/(m1 m2)))
    whose parameter is the product of ``A / (pc m1) <= 1`` and
    ``A / (2^(f+j+1) m2) <= 1`` (``exp(-x) = exp(-x/m)^m``): no square is formed.
    Same interface as :func:`_laplace_kernel`.
    """
    n = out_int.size if a.size == 0 else out.size
    d = max(a.size, 1)
    ia = start % d
    p = np.int64(1) << j
    ylim = np.int64(1) << (61 - f)
    d2 = np.int64(1) << (f + j + 1)
    pc_bits = _bit_length(pc)
    for i in range(start, n):
        while True:
            while True:
                w, buf, nb = _fresh(next64, state, wbits)
                g = guide[w >> gshift]
                while w < table[g + 1]:
                    g += 1
                if w == table[g + 1]:
                    fb[0], fb[1], fb[2], fb[3] = _FB_GEOMETRIC, 0, g, w
                    return i
                acc = False
                lo = np.int64(0)
                while not acc:
                    lo, buf, nb = _fresh(next64, state, low_bits)
                    acc, buf, nb = _bernoulli_exp(next64, state, buf, nb, lo, p, pblock, 1, 1,
                                                  32)
                s, buf, nb = _bits(next64, state, buf, nb, 1)
                x = (g << low_bits) + lo
                if s == 0 or x != 0:
                    break
            z = x - 2 * s * x
            if x >= ylim:
                fb[0], fb[1], fb[2], fb[3] = _FB_GAUSS_Y, z, g, w
                return i
            aa = abs((x << f) - pc)
            accept = True
            if aa > 0:
                m1 = (aa + pc - 1) // pc
                m2 = (aa + d2 - 1) // d2
                # Block sizes with den 2^c < 2^62 (bit lengths of products add at most).
                c1 = max(0, min(32, 62 - pc_bits - _bit_length(m1)))
                c2 = max(0, min(32, 60 - f - j - _bit_length(m2)))
                for _ in range(m1):
                    for _ in range(m2):
                        accept, buf, nb = _bernoulli_exp(next64, state, buf, nb, aa, pc * m1, c1,
                                                         aa, d2 * m2, c2)
                        if not accept:
                            break
                    if not accept:
                        break
            if accept:
                break
        if a.size == 0:
            out_int[i] = z
        else:
            ok, v = _add_rounded(a[ia], z)
            if not ok:
                fb[0], fb[1] = _FB_NOISE, z
                return i
            out[i] = v
            ia += 1
            if ia == d:
                ia = 0
    return n


# --------------------------------------------------------------------------
# Exact tables and the exact big-integer continuation
# --------------------------------------------------------------------------
def _exp_neg_interval(x, prec):
    """Integers ``lo <= exp(-x) 2^prec <= hi`` for a rational ``x >= 0``."""
    x = Fraction(x)
    if x == 0:
        return 1 << prec, 1 << prec
    n = max(1, _ceil_frac(x))
    y = x / n
    guard = prec + 2 * n.bit_length() + 16
    # exp(y) = sum y^k / k!; with y <= 1 the tail after a term is at most twice it.
    total, term, k = Fraction(0), Fraction(1), 0
    while True:
        total += term
        k += 1
        term = term * y / k
        if k > 2 and term * (1 << (guard + 2)) < 1:
            break
    lo1 = math.floor(Fraction(1 << guard) / (total + 2 * term))
    hi1 = _ceil_frac(Fraction(1 << guard) / total)
    lo, hi = 1 << guard, 1 << guard
    base_lo, base_hi, e = lo1, hi1, n
    while e:
        if e & 1:
            lo, hi = (lo * base_lo) >> guard, -((-hi * base_hi) >> guard)
        e >>= 1
        if e:
            base_lo, base_hi = (base_lo * base_lo) >> guard, -((-base_hi * base_hi) >> guard)
    s = guard - prec
    return lo >> s, -((-hi) >> s)


@functools.lru_cache(maxsize=128)
def _geometric_table(lam, wbits):
    """``floor(2^wbits exp(-g lam))`` for g = 0.. until it reaches 0, and its guide.

    Each entry is bracketed by interval arithmetic and kept only when the bracket
    fixes its floor; otherwise the whole table is recomputed with more precision.
    """
    prec = wbits + 96
    while True:
        lo1, hi1 = _exp_neg_interval(lam, prec)
        entries = [_INT64_MAX]
        lo, hi = 1 << prec, 1 << prec
        exact = True
        while True:
            lo, hi = (lo * lo1) >> prec, -((-hi * hi1) >> prec)
            flo, fhi = lo >> (prec - wbits), hi >> (prec - wbits)
            if flo != fhi:
                exact = False
                break
            entries.append(flo)
            if flo == 0:
                break
        if exact:
            entries.append(-1)
            table = np.array(entries, dtype=np.int64)
            break
        prec += 64
    gbits = min(12, wbits)
    gshift = wbits - gbits
    # guide[i]: the last g >= 1 with table[g] >= (i + 1) 2^gshift, else 0 (P(G >= 0) = 1).
    neg = [-int(x) for x in table[1:-1]]
    guide = [bisect.bisect_right(neg, -((i + 1) << gshift)) for i in range(1 << gbits)]
    return table, np.asarray(guide, dtype=np.int64), gshift


@dataclass(frozen=True)
class _GeometricSpec:
    """Discrete Laplace of scale ``p / 2^shift`` as the kernels draw it."""

    p: int
    shift: int
    low_bits: int
    wbits: int

    @property
    def lam(self):
        return Fraction(1 << self.low_bits, self.p)

    @property
    def table(self):
        return _geometric_table(self.lam, self.wbits)

    def kernel_args(self):
        """``table, guide, wbits, gshift, low_bits, pblock`` for the kernels."""
        table, guide, gshift = _geometric_table(self.lam, self.wbits)
        return (table, guide, np.int64(self.wbits), np.int64(gshift), np.int64(self.low_bits),
                np.int64(min(32, 62 - self.p.bit_length())))


def _geometric_spec(p, shift):
    # Blocks of 2^L with lam = 2^L / p in (2^-6, 2^-5]: a table of at most ~2800
    # entries, and Lo accepted with probability at least exp(-1/32).
    return _GeometricSpec(p, shift, max(0, p.bit_length() - 6), _WORD_BITS)


class _PyBits:
    """Fair bits from a Generator (``integers`` is exactly uniform)."""

    def __init__(self, rng):
        self.rng = rng
        self.buf = 0
        self.n = 0

    def bits(self, k):
        while self.n < k:
            self.buf |= int(self.rng.integers(0, 1 << 62)) << self.n
            self.n += 62
        out = self.buf & ((1 << k) - 1)
        self.buf >>= k
        self.n -= k
        return out


def _py_bernoulli(src, num, den):
    if num <= 0:
        return False
    if num >= den:
        return True
    r = num
    while True:
        r <<= 1
        pbit = 0
        if r >= den:
            pbit, r = 1, r - den
        w = src.bits(1)
        if w != pbit:
            return pbit == 1
        if r == 0:
            return False


def _py_bernoulli_exp(src, n1, d1, n2, d2):
    k = 1
    while (_py_bernoulli(src, 1, k) and _py_bernoulli(src, n1, d1)
           and _py_bernoulli(src, n2, d2)):
        k += 1
    return k % 2 == 1


@functools.lru_cache(maxsize=256)
def _exp_neg_cached(x, prec):
    return _exp_neg_interval(x, prec)


def _exp_neg_multiple_interval(lam, m, prec):
    """Integers ``lo <= exp(-m lam) 2^prec <= hi`` from a cached bracket of exp(-lam)."""
    guard = prec + 2 * m.bit_length() + 8
    base_lo, base_hi = _exp_neg_cached(lam, guard)
    lo = hi = 1 << guard
    while m:
        if m & 1:
            lo, hi = (lo * base_lo) >> guard, -((-hi * base_hi) >> guard)
        m >>= 1
        if m:
            base_lo, base_hi = (base_lo * base_lo) >> guard, -((-base_hi * base_hi) >> guard)
    s = guard - prec
    return lo >> s, -((-hi) >> s)


def _py_uniform_below_exp(src, prefix, lam, m):
    """Whether ``W < exp(-m lam)``, W uniform with known leading bits ``prefix = [w, k]``.

    More bits of W are drawn (and appended to ``prefix``) until the comparison is
    decided; exp(-m lam) is irrational for rational m lam > 0, so this ends a.s.
    """
    while True:
        w, k = prefix
        prec = k + 64
        lo, hi = _exp_neg_multiple_interval(lam, m, prec)
        if (w + 1) << (prec - k) <= lo:
            return True
        if w << (prec - k) >= hi:
            return False
        prefix[0] = (w << 32) | src.bits(32)
        prefix[1] = k + 32


def _py_dlap(src, p, shift):
    """Discrete Laplace of scale p / 2^shift by CKS Algorithm 2 (big integers)."""
    nbits = (p - 1).bit_length()
    while True:
        u = src.bits(nbits)
        if u >= p or not _py_bernoulli_exp(src, u, p, 1, 1):
            continue
        v = 0
        while _py_bernoulli_exp(src, 1, 1, 1, 1):
            v += 1
        b = src.bits(1)
        y = (u + p * v) >> shift
        if b == 1 and y == 0:
            continue
        return -y if b else y


def _py_finish_dlap(src, spec, g, w):
    """Finish a kernel draw whose geometric block stopped undecided after ``g``."""
    prefix = [int(w), spec.wbits]
    while _py_uniform_below_exp(src, prefix, spec.lam, g + 1):
        g += 1
    while True:
        lo = src.bits(spec.low_bits)
        if _py_bernoulli_exp(src, lo, spec.p, 1, 1):
            break
    b = src.bits(1)
    y = ((g << spec.low_bits) + lo) >> spec.shift
    if b == 1 and y == 0:
        # The rejected negative zero restarts the algorithm; any exact sampler will do.
        return _py_dlap(src, spec.p, spec.shift)
    return -y if b else y


def _py_gauss_accept(src, y, j, pc, f):
    a = abs((abs(y) << f) - pc)
    if a == 0:
        return True
    d2 = 1 << (f + j + 1)
    m1 = -(-a // pc)
    m2 = -(-a // d2)
    for _ in range(m1 * m2):
        if not _py_bernoulli_exp(src, a, pc * m1, a, d2 * m2):
            return False
    return True


def _py_dgauss(src, j, pc, f):
    while True:
        y = _py_dlap(src, 1 << j, 0)
        if _py_gauss_accept(src, y, j, pc, f):
            return y


def _finish_noise(fb, spec, gauss, src):
    """The noise of a draw a kernel handed back, exactly, with big integers."""
    kind, z, g, w = (int(x) for x in fb)
    if kind == _FB_NOISE:
        return z
    if kind == _FB_GEOMETRIC:
        y = _py_finish_dlap(src, spec, g, w)
        if gauss is None:
            return y
    else:  # _FB_GAUSS_Y
        y = z
    j, pc, f = gauss
    if _py_gauss_accept(src, y, j, pc, f):
        return y
    # A rejected proposal restarts CKS Algorithm 3 from scratch.
    return _py_dgauss(src, j, pc, f)


def _draw(spec, gauss, rng, n, a=None):
    """``n`` draws of a kernel: the noise (int64), or ``fl(a + noise)`` when ``a`` is given.

    Draws the kernel hands back are finished exactly in Python, from the same
    generator, before the kernel resumes.
    """
    if a is None:
        a, out, out_int = np.empty(0), np.empty(0), np.empty(n, dtype=np.int64)
    else:
        out, out_int = np.empty(n), np.empty(0, dtype=np.int64)
    if gauss is None:
        kernel, head = _laplace_kernel, (np.int64(spec.p), np.int64(spec.shift))
    else:
        kernel, head = _gauss_kernel, tuple(np.int64(x) for x in gauss)
    args = head + spec.kernel_args()
    bitgen = rng.bit_generator
    iface = bitgen.ctypes
    src = _PyBits(rng)
    fb = np.zeros(4, dtype=np.int64)
    i = 0
    while i < n:
        # The kernel advances the generator's own state through its C interface; the
        # lock keeps other threads from drawing from it meanwhile.
        with bitgen.lock:
            i = kernel(a, out, out_int, i, *args, iface.next_uint64, iface.state_address, fb)
        if i < n:
            z = _finish_noise(fb, spec, gauss, src)
            if a.size == 0:
                out_int[i] = _to_int64(z)
            else:
                # Python's int -> float conversion rounds to nearest, ties to even.
                out[i] = float(int(a[i % a.size]) + z)
            i += 1
    return out_int if a.size == 0 else out


def _to_int64(z):
    if not -(1 << 63) <= z < 1 << 63:
        raise OverflowError("a noise value exceeded the int64 range")
    return z


# --------------------------------------------------------------------------
# Exact parameters of the samplers
# --------------------------------------------------------------------------
def _fraction(x, name):
    try:
        fx = Fraction(x)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{name} must be a positive finite number, got {x!r}") from exc
    if not fx > 0:
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return fx


def _floor_log2(x):
    """floor(log2(x)) for a positive Fraction, exactly."""
    k = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** k > x:
        k -= 1
    return k


def _ceil_frac(x):
    return -((-x.numerator) // x.denominator)


def _dyadic_up(x, max_exp):
    """(m, e) with m / 2^e >= x, exact when x has a denominator 2^e with e <= max_exp."""
    den = x.denominator
    if den & (den - 1) == 0 and den.bit_length() - 1 <= max_exp:
        e = den.bit_length() - 1
        return x.numerator, e
    e = max_exp
    return _ceil_frac(x * (1 << e)), e


def _laplace_params(scale):
    """(p, g) with the sampled scale p / 2^g: ``scale`` if exact in 40 bits, else just above."""
    s = _fraction(scale, "scale_in_units")
    p, g = _dyadic_up(s, max(0, 40 - _floor_log2(s)))
    if p >= _MAX_UNITS:
        raise ValueError(f"scale_in_units must be below 2^56, got {scale!r}")
    return p, g


def _gaussian_params(sigma2):
    """(j, pc, f) with ``s^2 = 2^j pc / 2^f >= sigma2`` and every kernel quantity in 62 bits."""
    s2 = Fraction(sigma2)
    # j = round(log2 s), so the proposal scale 2^j is within sqrt(2) of s.
    j = max(0, _floor_log2(2 * s2) // 2)
    c = s2 / (1 << j)
    pc, f = _dyadic_up(c, max(0, 40 - _floor_log2(c)))
    if pc >= 1 << 61 or f + j + 1 > 61 or j > 56:
        raise ValueError(
            "the discrete Gaussian sampler supports 2^-10 <= sigma <= 2^56 lattice units"
        )
    return j, pc, f


def discrete_laplace_scale(scale_in_units):
    """The scale, as a Fraction, that :func:`sample_discrete_laplace` samples with.

    It is ``scale_in_units`` itself when that is an integer or a dyadic rational with at
    most 40 significant bits (every float in ``[1, 2^40]`` with a short mantissa,
    every integer below 2^56); otherwise it is rounded up by a relative amount below
    ``2^-40``.
    """
    p, g = _laplace_params(scale_in_units)
    return Fraction(p, 1 << g)


def discrete_gaussian_sigma2(sigma_in_units):
    """The variance parameter ``s^2`` (a Fraction) :func:`sample_discrete_gaussian` uses.

    ``s^2 >= sigma_in_units^2``, equal to it when it is a dyadic rational that fits
    in 40 significant bits, else larger by a relative amount below ``2^-40``.
    """
    s = _fraction(sigma_in_units, "sigma_in_units")
    j, pc, f = _gaussian_params(s * s)
    return Fraction(pc << j, 1 << f)


def _laplace_draw_setup(p, shift):
    return _geometric_spec(p, shift), None


def _gauss_draw_setup(j, pc, f):
    return _geometric_spec(1 << j, 0), (j, pc, f)


def sample_discrete_laplace(scale_in_units, size, rng):
    """Independent integers with ``P(z) ∝ exp(-|z| / scale_in_units)``, exactly.

    CKS 2020, Algorithm 2, restructured for speed and computed in 63-bit integer
    arithmetic (see the module docstring).

    Parameters
    ----------
    scale_in_units : int, float or Fraction
        Scale ``t > 0`` of the law, below 2^56; see :func:`discrete_laplace_scale`
        for the exact value used (``t`` itself for integers and short dyadic rationals).
    size : int or tuple of int
    rng : numpy.random.Generator, int or None
        Source of the bits; a Generator advances in place.

    Returns
    -------
    ndarray of int64
    """
    spec, gauss = _laplace_draw_setup(*_laplace_params(scale_in_units))
    n = int(np.prod(size, dtype=np.int64))
    return _draw(spec, gauss, check_generator(rng), n).reshape(size)


def sample_discrete_gaussian(sigma_in_units, size, rng):
    """Independent integers with ``P(z) ∝ exp(-z^2 / (2 s^2))``, exactly.

    CKS 2020, Algorithm 3, with a discrete Laplace proposal of power-of-two scale,
    computed in 63-bit integer arithmetic (see the module docstring). The variance
    parameter is ``s^2 = sigma_in_units^2`` up to :func:`discrete_gaussian_sigma2`'s
    rounding (upwards, relative below 2^-40; none for integers and short dyadic
    rationals); the variance of the law is slightly below ``s^2`` for small ``s``.

    Parameters
    ----------
    sigma_in_units : int, float or Fraction
        ``2^-10 <= sigma <= 2^56``.
    size : int or tuple of int
    rng : numpy.random.Generator, int or None

    Returns
    -------
    ndarray of int64
    """
    s = _fraction(sigma_in_units, "sigma_in_units")
    if s < Fraction(1, 1024):
        raise ValueError("the discrete Gaussian sampler supports sigma >= 2^-10")
    spec, gauss = _gauss_draw_setup(*_gaussian_params(s * s))
    n = int(np.prod(size, dtype=np.int64))
    return _draw(spec, gauss, check_generator(rng), n).reshape(size)


# --------------------------------------------------------------------------
# Guarantees and lattices of the safe mechanisms
# --------------------------------------------------------------------------
def _float_up(x):
    """The smallest double >= the rational x."""
    y = float(x)
    if Fraction(y) < x:
        y = math.nextafter(y, math.inf)
    return y


def laplace_epsilon(sensitivity, scale):
    """Epsilon the safe Laplace mechanism guarantees: ``(1 + eta) Delta_1 / b``, rounded up."""
    return _float_up((1 + _ETA) * Fraction(sensitivity) / Fraction(scale))


def laplace_scale_for(sensitivity, epsilon):
    """Smallest scale b (a double) with ``laplace_epsilon(sensitivity, b) <= epsilon``."""
    b = _float_up((1 + _ETA) * Fraction(sensitivity) / Fraction(epsilon))
    while laplace_epsilon(sensitivity, b) > epsilon:
        b = math.nextafter(b, math.inf)
    return b


def gaussian_rho(sensitivity, sigma):
    """zCDP rho the safe Gaussian mechanism guarantees: ``((1+eta) Delta_2 / sigma)^2 / 2``."""
    return _float_up(((1 + _ETA) * Fraction(sensitivity) / Fraction(sigma)) ** 2 / 2)


def discrete_gaussian_event(sensitivity, sigma, count=1):
    """The accounted event of ``count`` safe Gaussian releases: zCDP only (no GDP claim)."""
    return PrivacyEvent("discrete_gaussian", math.nan, 0.0, gaussian_rho(sensitivity, sigma),
                        None, int(count))


@dataclass(frozen=True)
class LaplaceLattice:
    """How a safe Laplace release of ``dim`` coordinates is computed.

    ``gamma = 2^k``; noise of scale ``t`` lattice units; ``delta_units`` bounds the l1
    distance of neighbouring rounded vectors; ``epsilon = delta_units / t`` exactly.
    """

    k: int
    t: int
    delta_units: int

    @property
    def gamma(self):
        return math.ldexp(1.0, self.k)

    @property
    def epsilon(self):
        return Fraction(self.delta_units, self.t)


@dataclass(frozen=True)
class GaussianLattice:
    """How a safe Gaussian release of ``dim`` coordinates is computed.

    ``gamma = 2^k``; discrete Gaussian with ``s^2 = 2^j pc / 2^f`` lattice units;
    ``delta_units`` bounds the l2 distance of neighbouring rounded vectors;
    ``rho = delta_units^2 / (2 s^2)`` exactly.
    """

    k: int
    j: int
    pc: int
    f: int
    delta_units: Fraction

    @property
    def gamma(self):
        return math.ldexp(1.0, self.k)

    @property
    def sigma2_units(self):
        return Fraction(self.pc << self.j, 1 << self.f)

    @property
    def rho(self):
        return self.delta_units**2 / (2 * self.sigma2_units)


def _check_dim(dim):
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    return dim


@functools.lru_cache(maxsize=256)
def plan_laplace(sensitivity, scale, dim):
    """The lattice of a safe Laplace release; its epsilon is at most ``laplace_epsilon``."""
    dim = _check_dim(dim)
    delta, b = Fraction(sensitivity), Fraction(scale)
    claim = Fraction(laplace_epsilon(sensitivity, scale))
    k = _floor_log2(min(b / (1 << LATTICE_RESOLUTION_BITS), _ETA * delta / dim))
    while True:
        gamma = Fraction(2) ** k
        t = _ceil_frac(b / gamma)
        delta_units = math.floor(delta / gamma) + dim
        if Fraction(delta_units, t) <= claim:
            break
        k -= 1
    if t >= _MAX_UNITS or k < -1074:
        raise ValueError(
            f"the floating-point-safe Laplace mechanism needs dim / epsilon below about 2^39 "
            f"(dim={dim}, epsilon={float(claim):.3g}); use floating_point_safe=False"
        )
    return LaplaceLattice(k, t, delta_units)


@functools.lru_cache(maxsize=256)
def plan_gaussian(sensitivity, sigma, dim):
    """The lattice of a safe Gaussian release; its rho is at most ``gaussian_rho``."""
    dim = _check_dim(dim)
    delta, sig = Fraction(sensitivity), Fraction(sigma)
    claim = Fraction(gaussian_rho(sensitivity, sigma))
    # A rational upper bound on sqrt(dim), within 2^-30.
    root = Fraction(math.isqrt(dim << 60) + 1, 1 << 30)
    k = _floor_log2(min(sig / (1 << LATTICE_RESOLUTION_BITS), _ETA * delta / root))
    while True:
        gamma = Fraction(2) ** k
        s = sig / gamma
        try:
            j, pc, f = _gaussian_params(s * s)
        except ValueError:
            raise ValueError(
                f"the floating-point-safe Gaussian mechanism needs sqrt(dim) * sigma / "
                f"sensitivity below about 2^39 (dim={dim}); use floating_point_safe=False"
            ) from None
        lattice = GaussianLattice(k, j, pc, f, delta / gamma + root)
        if lattice.rho <= claim:
            break
        k -= 1
    if k < -1074:
        raise ValueError("sigma is too small for a floating-point-safe release")
    return lattice


def _to_lattice(value, k):
    scaled = np.ldexp(value, -k)
    if not np.all(np.isfinite(scaled)):
        raise ValueError(
            "a floating-point-safe release needs a finite value whose ratio to the noise "
            "scale is below 2^990"
        )
    return np.rint(scaled).ravel()


def _release(value, n_draws, k, setup, rng):
    value = np.asarray(value, dtype=np.float64)
    shape = value.shape if n_draws is None else (int(n_draws), *value.shape)
    a = _to_lattice(value, k)
    n = int(np.prod(shape, dtype=np.int64))
    out = np.empty(0)
    if n:
        out = _draw(*setup, check_generator(rng), n, a)
        np.ldexp(out, k, out=out)
    out = out.reshape(shape)
    return out[()] if out.ndim == 0 else out


def release_laplace(value, sensitivity, scale, rng, n_draws=None):
    """Floating-point-safe ``value + Laplace(scale)`` (one release, or ``n_draws`` stacked).

    Every coordinate is rounded to the lattice of :func:`plan_laplace` (``dim`` is the
    number of coordinates of ``value``) and receives exact discrete Laplace noise; the
    release is ``laplace_epsilon(sensitivity, scale)``-DP for l1 sensitivity
    ``sensitivity``.
    """
    value = np.asarray(value, dtype=np.float64)
    lattice = plan_laplace(float(sensitivity), float(scale), max(value.size, 1))
    return _release(value, n_draws, lattice.k, _laplace_draw_setup(lattice.t, 0), rng)


def release_gaussian(value, sensitivity, sigma, rng, n_draws=None):
    """Floating-point-safe ``value + N(0, sigma^2)`` (one release, or ``n_draws`` stacked).

    Every coordinate is rounded to the lattice of :func:`plan_gaussian` and receives
    exact discrete Gaussian noise; the release is ``gaussian_rho(sensitivity,
    sigma)``-zCDP for l2 sensitivity ``sensitivity``.
    """
    value = np.asarray(value, dtype=np.float64)
    lattice = plan_gaussian(float(sensitivity), float(sigma), max(value.size, 1))
    setup = _gauss_draw_setup(lattice.j, lattice.pc, lattice.f)
    return _release(value, n_draws, lattice.k, setup, rng)
