"""Exact rationals, interval brackets of exponentials, and the big-integer continuation.

A kernel that cannot decide a comparison within 63 bits hands its exact state here;
these functions finish the same algorithm with Python integers, drawing further bits
from the same generator.
"""

from __future__ import annotations

import bisect
import functools
import math
import sys
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ._kernels import _FB_GEOMETRIC, _FB_NOISE

_INT64_MAX = (1 << 63) - 1


def _package():
    """The package module; tests override its ``_WORD_BITS`` and ``_finish_noise``."""
    return sys.modules[__package__]


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
    guide, gshift = _inversion_guide(table, wbits)
    return table, guide, gshift


def _inversion_guide(table, wbits, gbits=12):
    """The guide of an inversion table ``table[g] = floor(2^wbits P(G >= g))`` (non-increasing,
    ``table[0]`` above every word, a final -1): ``(guide, gshift)`` with ``guide[i]`` the last
    ``g >= 1`` with ``table[g] >= (i + 1) 2^gshift``, else 0, so a word ``w`` has
    ``w < table[guide[w >> gshift]]``: the search for G starts there. ``2^gbits`` entries:
    any size gives the same G, a smaller guide (fewer cache lines) a longer search."""
    gbits = min(gbits, wbits)
    gshift = wbits - gbits
    neg = [-int(x) for x in table[1:-1]]
    guide = [bisect.bisect_right(neg, -((i + 1) << gshift)) for i in range(1 << gbits)]
    return np.asarray(guide, dtype=np.int64), gshift


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
    return _GeometricSpec(p, shift, max(0, p.bit_length() - 6), _package()._WORD_BITS)


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


def _py_uniform_below(src, prefix, bracket):
    """Whether ``W < c``, W uniform with known leading bits ``prefix = [w, k]``.

    ``bracket(prec)`` returns integers ``lo <= c 2^prec <= hi``, tighter as ``prec``
    grows. More bits of W are drawn (and appended to ``prefix``) until the comparison
    is decided; for an irrational ``c`` (or an exact bracket) this ends a.s.
    """
    while True:
        w, k = prefix
        prec = k + 64
        lo, hi = bracket(prec)
        if (w + 1) << (prec - k) <= lo:
            return True
        if w << (prec - k) >= hi:
            return False
        prefix[0] = (w << 32) | src.bits(32)
        prefix[1] = k + 32


def _py_uniform_below_exp(src, prefix, lam, m):
    """Whether ``W < exp(-m lam)`` (:func:`_py_uniform_below`); irrational for m lam > 0."""
    return _py_uniform_below(src, prefix, lambda prec: _exp_neg_multiple_interval(lam, m, prec))


def _threshold(bracket, wbits):
    """``floor(2^wbits c)`` for an irrational ``c`` in [0, 1) given by ``bracket``."""
    prec = wbits + 64
    while True:
        lo, hi = bracket(prec)
        t_lo, t_hi = lo >> (prec - wbits), hi >> (prec - wbits)
        if t_lo == t_hi:
            return t_lo
        if prec > wbits + 4096:
            raise ArithmeticError("a threshold could not be separated from a dyadic rational")
        prec += 64


def _py_bernoulli_exp_rational(src, num, den):
    """Bernoulli(exp(-num/den)) for integers num >= 0, den >= 1 (big integers)."""
    whole, rest = divmod(num, den)
    for _ in range(whole):
        if not _py_bernoulli_exp(src, 1, 1, 1, 1):
            return False
    return rest == 0 or _py_bernoulli_exp(src, rest, den, 1, 1)


def _py_bernoulli_exp_product(src, a1, r1, a2, r2):
    """Bernoulli(exp(-(a1 a2) / (r1 r2))), as :func:`_kernels._bernoulli_exp_product`."""
    if a1 == 0 or a2 == 0:
        return True
    m1 = -(-a1 // r1)
    m2 = -(-a2 // r2)
    for _ in range(m1 * m2):
        if not _py_bernoulli_exp(src, a1, r1 * m1, a2, r2 * m2):
            return False
    return True


def _py_geometric(src, p, shift):
    """``floor(X / 2^shift)``, X geometric with ``P(X >= x) = exp(-x/p)`` (CKS Algorithm 2,
    big integers): ``X = U + p V``, U uniform on [0, p) accepted with probability
    exp(-U/p), V geometric with ratio exp(-1)."""
    nbits = (p - 1).bit_length()
    while True:
        u = src.bits(nbits)
        if u < p and _py_bernoulli_exp(src, u, p, 1, 1):
            break
    v = 0
    while _py_bernoulli_exp(src, 1, 1, 1, 1):
        v += 1
    return (u + p * v) >> shift


def _py_dlap(src, p, shift):
    """Discrete Laplace of scale p / 2^shift by CKS Algorithm 2 (big integers)."""
    while True:
        y = _py_geometric(src, p, shift)
        b = src.bits(1)
        if b == 1 and y == 0:
            continue
        return -y if b else y


def _py_finish_geometric(src, spec, g, w):
    """Finish :func:`_kernels._geometric` stopped undecided after ``g`` with word ``w``:
    ``floor(X / 2^shift)`` for the spec's geometric X."""
    prefix = [int(w), spec.wbits]
    while _py_uniform_below_exp(src, prefix, spec.lam, g + 1):
        g += 1
    while True:
        lo = src.bits(spec.low_bits)
        if _py_bernoulli_exp(src, lo, spec.p, 1, 1):
            break
    return ((g << spec.low_bits) + lo) >> spec.shift


def _py_finish_dlap(src, spec, g, w):
    """Finish a kernel draw whose geometric block stopped undecided after ``g``."""
    y = _py_finish_geometric(src, spec, g, w)
    b = src.bits(1)
    if b == 1 and y == 0:
        # The rejected negative zero restarts the algorithm; any exact sampler will do.
        return _py_dlap(src, spec.p, spec.shift)
    return -y if b else y


def _py_gauss_accept(src, y, j, pc, f):
    a = abs((abs(y) << f) - pc)
    return _py_bernoulli_exp_product(src, a, pc, a, 1 << (f + j + 1))


def _py_dgauss(src, j, pc, f):
    while True:
        y = _py_dlap(src, 1 << j, 0)
        if _py_gauss_accept(src, y, j, pc, f):
            return y


def _finish_noise(fb, spec, gauss, src):
    """The noise of a draw a kernel handed back, exactly, with big integers."""
    kind, z, g, w = (int(x) for x in fb[:4])
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
