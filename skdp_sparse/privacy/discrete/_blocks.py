"""Exact discrete Gaussian draws restricted to an interval of ``|Z|``, by block tables.

For the discrete Gaussian ``P(Z = z) ∝ f(z) = exp(-z^2 / (2 s^2))`` (``s^2 = 2^j pc / 2^f``,
the lattice units of a release) and integers ``0 <= c <= e <= inf``, :class:`GaussianBlocks`
draws ``V`` with ``P(V = v) ∝ f(v)`` on ``[c, e]`` and, when signed, returns ``+-V`` with a
fair sign (the negative zero rejected), that is ``Z`` given ``c <= |Z| <= e``. The
interval is cut into blocks ``[a_k, a_k + W)``, ``a_k = c + k W``, ``W = 2^w`` about
``s / 64``:

* the block ``I`` is drawn with ``P(I = k) ∝ f(a_k)`` by inverting one uniform word against
  the table ``floor(2^wbits P(I >= k))``, proved by interval arithmetic (a tie with an entry
  hands the draw to Python, which compares more bits with tighter brackets);
* the offset ``o`` is uniform on ``[0, W)``; ``a_I + o > e`` is rejected;
* the proposal is kept with probability ``f(a_I + o) / f(a_I) = exp(-o (2 a_I + o) / (2 s^2))``
  (at most 1: f decreases on ``[0, inf)``), by CKS Algorithm 1 on the product of ``o / W``
  and ``(2 a_I + o) W / (2 s^2)`` (below 0.2 over the table, so about 97% are kept).

The proposal has mass ``f(a_k) / (S W)`` at every point of block k (``S = sum_k f(a_k)``),
so a kept draw has mass proportional to ``f(a_k) (f(v) / f(a_k)) = f(v)``: exactly the law
of ``|Z|`` on ``[c, e]``. Cost: about two 64-bit words a draw, whatever ``s``.

Kernels call :func:`block_value` with :attr:`GaussianBlocks.arrays` (or, drawing many
values, :func:`block_attempt` on the :func:`block_scalars` of the table, unpacked once);
when it returns ``(False, 0)`` they return to Python, which calls
:meth:`GaussianBlocks.finish` for the value the kernel would have drawn. About 12 ns a
draw at the scale of a release. Proof: ``doc/proofs/discrete.rst`` ("Block tables").
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numba
import numpy as np

from ...utils.random import check_generator
from ._exact import (
    _INT64_MAX,
    _exp_neg_interval,
    _floor_log2,
    _inversion_guide,
    _package,
    _py_bernoulli_exp_product,
    _py_uniform_below,
)
from ._kernels import (
    _ONE,
    _TWO,
    HANDOFF_SLOTS,
    _bernoulli,
    _bernoulli_exp,
    _bits,
    _fresh,
)
from ._samplers import _exact_bits, _KernelSource, fill_with_handoffs

_FB_BLOCK = 30  # a word equals a table entry: [kind, block, word]
_FB_ACCEPT = 31  # the acceptance test needs more than 62 bits: [kind, value, offset]

# Layout of the params array.
_WB, _GSHIFT, _C, _E, _W, _SH, _D, _DBITS, _SIGNED, _MMAX, _C2 = range(11)

# A table's guide has 2^GUIDE_BITS entries (2 KB): a draw's search then takes a fraction
# of a step more on average than with the 4096 of the other samplers, and a kernel that
# draws a few thousand values from a table it has not used lately misses the cache far
# less often (about 100 us less per band of a ladder).
GUIDE_BITS = 8

# Blocks are 2^-BLOCK_BITS_BELOW_SCALE of the scale s or so (one point below s = 64).
BLOCK_BITS_BELOW_SCALE = 6


@numba.njit(cache=True, inline="always")
def block_scalars(blocks):
    """What :func:`block_attempt` reads of a table, unpacked once by a kernel that draws
    many values (reading the params array at every draw measured twice as slow)."""
    params, table, guide = blocks
    return (table, guide, params[_WB], params[_GSHIFT], params[_C], params[_E], params[_W],
            params[_SH], params[_D], params[_MMAX], params[_C2], params[_SIGNED] != 0)


@numba.njit(cache=True, inline="always")
def block_attempt(scalars, next64, state, fb):
    """One proposal of the table (:func:`block_scalars`): ``(1, z)`` kept, ``(0, 0)``
    rejected (the caller proposes again), ``(2, 0)`` handed off (state in ``fb``).

    The acceptance ``exp(-x)``, ``x = (o / W) (n2 / den)``, is CKS Algorithm 1, whose
    first trial is Bernoulli(x): the conjunction of Bernoulli(n2 / den), tried first (the
    one less likely to pass: ``n2 / den`` is about ``|v| / (64 s)``), and Bernoulli(o / W),
    which is ``o' < o`` for ``w`` fresh bits ``o'``. It fails with probability ``1 - x``,
    and then the proposal is kept at once; otherwise the algorithm goes on from ``K = 2``.
    """
    table, guide, wbits, gshift, c, e, w, sh, den, mmax, c2, signed = scalars
    word, buf, nb = _fresh(next64, state, wbits)
    g = guide[word >> gshift]
    while word < table[g + 1]:
        g += 1
    if word == table[g + 1]:
        fb[0], fb[1], fb[2] = _FB_BLOCK, g, word
        return 2, np.int64(0)
    o, buf, nb = _bits(next64, state, buf, nb, w)
    a = c + (g << w)
    v = a + o
    if 0 <= e < v:
        return 0, np.int64(0)
    if o > 0:
        m = 2 * a + o
        if m > mmax:  # (m << sh) > den, or beyond 61 bits
            fb[0], fb[1], fb[2] = _FB_ACCEPT, v, o
            return 2, np.int64(0)
        n2 = m << sh
        first, buf, nb = _bernoulli(next64, state, buf, nb, n2, den, c2)
        if first:
            o2, buf, nb = _bits(next64, state, buf, nb, w)
            if o2 < o:
                # the first trial, Bernoulli(o 2^-w n2 / den), succeeded just above
                keep, buf, nb = _bernoulli_exp(
                    next64, state, buf, nb, o, np.int64(1) << w, min(32, 61 - w - 1), n2,
                    den, c2, _TWO)
                if not keep:
                    return 0, np.int64(0)
    if signed:
        # branch-free: the sign is a fair coin
        neg, buf, nb = _bits(next64, state, buf, nb, _ONE)
        if neg & (v == 0):  # the negative zero
            return 0, np.int64(0)
        v -= 2 * neg * v
    return 1, v


@numba.njit(cache=True)
def block_value(blocks, next64, state, fb):
    """One draw: ``(True, z)``, or ``(False, 0)`` after a handoff (state in ``fb``)."""
    scalars = block_scalars(blocks)
    while True:
        status, z = block_attempt(scalars, next64, state, fb)
        if status:
            return status == 1, z


@numba.njit(cache=True)
def block_fill(blocks, out, start, stop, next64, state, fb):
    """``out[start:stop]`` from the table: ``stop``, or the index of a draw handed off."""
    scalars = block_scalars(blocks)
    i = start
    while i < stop:
        status, z = block_attempt(scalars, next64, state, fb)
        if status == 1:
            out[i] = z
            i += 1
        elif status == 2:
            return i
    return stop


class GaussianBlocks:
    """The block table of the discrete Gaussian ``s^2 = 2^j pc / 2^f`` on ``c <= |Z| <= e``.

    Build with :func:`plan_blocks`. ``signed``: the value carries a fair sign (``Z`` given
    the interval); otherwise it is ``|Z|``.
    """

    def __init__(self, j, pc, f, c, e, signed, wbits):
        c, e = int(c), (None if e is None else int(e))
        if c < 0 or (e is not None and e < c):
            raise ValueError(f"need 0 <= c <= e, got c={c}, e={e}")
        self.s2 = Fraction(pc << j, 1 << f)
        self.c, self.e, self.signed, self.wbits = c, e, bool(signed), int(wbits)
        self.w = w = max(0, _floor_log2(self.s2) // 2 - BLOCK_BITS_BELOW_SCALE)
        self.n_blocks = None if e is None else (e - c) // (1 << w) + 1
        # (2 a + o) W / (2 s^2) = ((2 a + o) << sh) / (pc << sd), both shifts >= 0
        sh, sd = max(0, w + f - j - 1), max(0, j + 1 - w - f)
        self._num_shift, self._den = sh, pc << sd
        if self._den >= 1 << 61:
            raise ValueError("the discrete Gaussian scale is too large for the block tables")
        self._brackets = {}
        table = self._table()
        guide, gshift = _inversion_guide(table, self.wbits, GUIDE_BITS)
        params = [self.wbits, gshift, c, -1 if e is None else e, w, sh, self._den,
                  self._den.bit_length(), int(self.signed), self._den >> sh,
                  max(0, min(32, 61 - self._den.bit_length()))]
        self.arrays = (np.array(params, dtype=np.int64), table, guide)

    # ------------------------------------------------------------ brackets
    def _terms(self, prec):
        """``(lo, hi, rest)``: integers bracketing ``2^prec f(a_k) / f(c)`` for the first
        blocks, and an upper bound (same scale) on the total of the blocks after them: 0
        when every block is listed, at most 2 otherwise."""
        one = 1 << prec
        W = 1 << self.w
        g_lo, g_hi = _exp_neg_interval(Fraction(2 * self.c * W + W * W) / (2 * self.s2), prec)
        r_lo, r_hi = _exp_neg_interval(Fraction(W * W) / self.s2, prec)
        lo, hi = [one], [one]
        f_lo = f_hi = one
        while self.n_blocks is None or len(lo) < self.n_blocks:
            # f(a_{k+1}) = f(a_k) g_k and g_{k+1} = g_k r: the ratios decrease, so the
            # blocks after k weigh at most f(a_k) g_k / (1 - g_k) together
            f_lo, f_hi = (f_lo * g_lo) >> prec, -((-f_hi * g_hi) >> prec)
            rest = -((-f_hi * one) // max(1, one - g_hi))
            if rest <= 2:  # (upper brackets never fall below one unit)
                return lo, hi, rest
            lo.append(f_lo)
            hi.append(f_hi)
            g_lo, g_hi = (g_lo * r_lo) >> prec, -((-g_hi * r_hi) >> prec)
        return lo, hi, 0

    def _tails(self, prec):
        """Brackets, at scale ``2^prec``, of ``P(I >= k)`` for k = 0 .. len(lo), and
        the bound that holds beyond (0 when every block is listed)."""
        lo, hi, rest = self._terms(prec)
        total_lo, total_hi = sum(lo), sum(hi) + rest
        out = []
        t_lo, t_hi = total_lo, total_hi
        for k in range(len(lo) + 1):
            out.append((t_lo, t_hi))
            if k < len(lo):
                t_lo, t_hi = t_lo - lo[k], t_hi - hi[k]
        return out, rest, total_lo, total_hi

    def tail_bracket(self, k, prec):
        """Integers bracketing ``2^prec P(I >= k)``, I the block of a proposal."""
        # one set of tails serves every k at a working precision (a multiple of 32 bits
        # with room for k rounding errors)
        work = -(-(prec + 40 + max(k, 1).bit_length()) // 32) * 32
        if work not in self._brackets:
            self._brackets[work] = self._tails(work)
        tails, rest, total_lo, total_hi = self._brackets[work]
        t_lo, t_hi = tails[k] if k < len(tails) else (0, rest)
        return (t_lo << prec) // total_hi, -((-t_hi << prec) // total_lo)

    def _table(self):
        """``floor(2^wbits P(I >= k))`` for k = 0.. until it is 0, then -1 (-1 at once when
        the blocks run out: no tie is possible there), recomputed with more precision until
        every bracket fixes its floor."""
        wb = self.wbits
        prec = wb + 64
        while True:
            tails, rest, total_lo, total_hi = self._tails(prec)
            entries = [(1 << wb) if wb < 63 else _INT64_MAX]
            for k in range(1, len(tails)):
                t_lo, t_hi = tails[k]
                if t_hi == 0:
                    entries.append(-1)
                    break
                e_lo, e_hi = (t_lo << wb) // total_hi, (t_hi << wb) // total_lo
                if e_lo != e_hi:
                    break
                entries.append(e_lo)
                if e_lo == 0:
                    break
            if entries[-1] <= 0:
                entries.append(-1)
                return np.array(entries, dtype=np.int64)
            prec += 64

    # ------------------------------------------------------------ Python side
    def _accept(self, bits, v, o):
        """Bernoulli(f(v) / f(v - o)), with big integers."""
        if o == 0:
            return True
        return _py_bernoulli_exp_product(bits, o, 1 << self.w, (2 * v - o) << self._num_shift,
                                         self._den)

    def _py_block(self, bits, block=None, word=None):
        """The block of a proposal: from a fresh word, or going on from a tie of ``word``
        with ``table[block + 1]`` by comparing more bits with ``P(I >= block + 1)``."""
        table, guide = self.arrays[1], self.arrays[2]
        if block is None:
            word = bits.bits(self.wbits)
            block = int(guide[word >> int(self.arrays[0][_GSHIFT])])
            while word < table[block + 1]:
                block += 1
            if word != table[block + 1]:
                return block
        prefix = [int(word), self.wbits]
        while self.n_blocks is None or block + 1 < self.n_blocks:
            k = block + 1
            if not _py_uniform_below(bits, prefix, lambda p, k=k: self.tail_bracket(k, p)):
                break
            block = k
        return block

    def _py_value(self, bits, block=None, word=None, value=None, offset=None):
        """A draw finished in Python, from the point where the kernel stopped."""
        while True:
            if value is None:
                block = self._py_block(bits, block, word)
                offset = bits.bits(self.w)
                value = self.c + (block << self.w) + offset
                block = word = None
                if self.e is not None and value > self.e:
                    value = None
                    continue
            v, o = value, offset
            value = None
            if not self._accept(bits, v, o):
                continue
            if self.signed and bits.bits(1):
                if v == 0:
                    continue
                v = -v
            return v

    def finish(self, fb, rng):
        """The value a kernel that handed back a draw would have returned, exactly."""
        bits = _exact_bits(rng)
        kind = int(fb[0])
        if kind == _FB_BLOCK:
            return self._py_value(bits, block=int(fb[1]), word=int(fb[2]))
        if kind == _FB_ACCEPT:
            return self._py_value(bits, value=int(fb[1]), offset=int(fb[2]))
        raise ValueError(f"not a block-table handoff: {kind}")

    def fill(self, out, start, stop, src, fb):
        """``out[start:stop]``: independent draws from the kernel source ``src``, with the
        handoff record ``fb``."""
        return fill_with_handoffs(
            out, start, stop, src,
            lambda i: block_fill(self.arrays, out, i, stop, src.next64, src.state, fb),
            lambda i: self.finish(fb, src))

    def sample(self, size, rng):
        """``size`` independent draws (int64)."""
        rng = check_generator(rng)
        out = np.empty(int(size), dtype=np.int64)
        return self.fill(out, 0, out.size, _KernelSource(rng),
                         np.zeros(HANDOFF_SLOTS, dtype=np.int64))


@functools.lru_cache(maxsize=64)
def _cached(j, pc, f, c, e, signed, wbits):
    return GaussianBlocks(j, pc, f, c, e, signed, wbits)


def plan_blocks(j, pc, f, c=0, e=None, signed=True):
    """The block table of ``Z`` (``s^2 = 2^j pc / 2^f``, the parameters of a
    :class:`GaussianLattice`) given ``c <= |Z| <= e`` (``e=None``: no upper end)."""
    return _cached(int(j), int(pc), int(f), int(c), None if e is None else int(e),
                   bool(signed), _package()._WORD_BITS)
