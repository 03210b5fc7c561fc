"""Numba kernels of the exact discrete samplers, in 63-bit integer arithmetic.

The bit buffer ``(buf, nb)`` travels by value so it stays in registers; random words
come from the bit generator's own ``next_uint64``. Why every decision is exact:
``doc/proofs/discrete.rst``.
"""

import numba
import numpy as np

_TWO53 = 1 << 53
_TWO62_F = 4611686018427387904.0

# Status of a kernel draw.
_OK = 0
_FB_GEOMETRIC = 1  # a uniform word equals a table entry: W vs exp(-g lam) undecided
_FB_GAUSS_Y = 2  # a Gaussian proposal too large for the 62-bit acceptance test
_FB_NOISE = 3  # noise known; only rounding a + noise needs big integers


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
