"""Numba kernels of the exact discrete samplers, in 63-bit integer arithmetic.

The bit buffer ``(buf, nb)`` travels by value so it stays in registers; random words
come from the bit generator's own ``next_uint64``. Why every decision is exact:
``doc/proofs/discrete.rst``.
"""

import numba
import numpy as np

_TWO53 = 1 << 53
_TWO62_F = 4611686018427387904.0

# Status of a kernel draw, in slot 0 of its handoff record ``fb`` (int64, at least
# HANDOFF_SLOTS long); the other slots hold the exact state the continuation needs.
_OK = 0
_FB_GEOMETRIC = 1  # a uniform word equals a table entry: W vs exp(-g lam) undecided
_FB_GAUSS_Y = 2  # a Gaussian proposal too large for the 62-bit acceptance test
_FB_NOISE = 3  # noise known; only rounding a + noise needs big integers
HANDOFF_SLOTS = 8
# Constant arguments of the kernels' calls to one another, as int64 scalars: a Python int
# argument is typed as a literal and compiles one more specialisation of the callee (and
# of what it calls) on first use.
_ZERO, _ONE, _TWO, _BLOCK = np.int64(0), np.int64(1), np.int64(2), np.int64(32)

# Kernels only other kernels call: without the C-callback entry point Numba otherwise
# compiles for every function, a new install's first draw compiles less. (Dropping
# their CPython entry point too would save about 0.17 s CPU more, but a call from
# Python would then crash the interpreter instead of running.)
_inner = numba.njit(cache=True, no_cfunc_wrapper=True)


@_inner
def _bits(next64, state, buf, nb, k):
    """``k`` (0 <= k <= 63) fair bits as an int64, and the new buffer."""
    out = np.int64(0)
    while k > 0:
        if nb == 0:
            # 63 of the 64 bits keep every quantity a non-negative int64.
            buf = np.int64(next64(state) >> np.uint64(1))
            nb = 63
        take = nb if nb < k else k
        out = (out << take) | (buf & ((np.int64(1) << take) - 1))
        buf >>= take
        nb -= take
        k -= take
    return out, buf, nb


@_inner
def _bit_length(x):
    n = np.int64(0)
    while x > 0:
        x >>= 1
        n += 1
    return n


@_inner
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
        w, buf, nb = _bits(next64, state, buf, nb, _ONE)
        if w != pbit:
            return pbit == 1, buf, nb
        if r == 0:
            # p's expansion ended: the uniform's remaining bits make it larger a.s.
            return False, buf, nb


@_inner
def _bernoulli_exp(next64, state, buf, nb, n1, d1, c1, n2, d2, c2, k):
    """True with probability exp(-x), x = (n1/d1)(n2/d2) in [0, 1] (CKS Algorithm 1),
    from its trial ``K = k``: 1 for a full draw, 2 for one whose first trial,
    Bernoulli(x), the caller decided and saw succeed.

    ``K`` counts successes of Bernoulli(x / K); P(K odd) = exp(-x). Bernoulli(x / K)
    is the conjunction of Bernoulli(1/K), Bernoulli(n1/d1) and Bernoulli(n2/d2), so
    no product of denominators is formed. ``c1``, ``c2``: block sizes of d1, d2.
    """
    while True:
        ok = True
        if k > 1:
            ok, buf, nb = _bernoulli(next64, state, buf, nb, _ONE, k,
                                     32 if k < 1 << 28 else 0)
        if ok:
            ok, buf, nb = _bernoulli(next64, state, buf, nb, n1, d1, c1)
        if ok:
            ok, buf, nb = _bernoulli(next64, state, buf, nb, n2, d2, c2)
        if not ok:
            break
        k += 1
    return (k & 1) == 1, buf, nb


@_inner
def _fresh(next64, state, k):
    """``k`` bits of a new word, and its other ``63 - k`` bits as the new buffer.

    Discarding what was left in the old buffer is harmless: unused bits are
    independent of everything drawn.
    """
    r = np.int64(next64(state) >> np.uint64(1))
    if k >= 63:
        return r, np.int64(0), np.int64(0)
    return r & ((np.int64(1) << k) - 1), r >> k, np.int64(63 - k)


@_inner
def _add_rounded(ai, z):
    """fl(ai + z) for an integer-valued double ai and an int64 z, if 64 bits suffice."""
    if -_TWO53 <= z <= _TWO53:
        # Both operands are exact doubles; IEEE addition rounds their exact sum once.
        return True, ai + np.float64(z)
    if abs(ai) < _TWO62_F:
        # |z| < 2^62 too, so the integer sum is exact; int -> double rounds it once.
        return True, np.float64(np.int64(ai) + z)
    return False, 0.0


@_inner
def _bernoulli_exp_rational(next64, state, buf, nb, num, den, c):
    """True with probability exp(-num/den) for integers num >= 0, den >= 1 (den 2^c < 2^62).

    ``exp(-x) = exp(-1)^floor(x) exp(-frac(x))``: independent Bernoulli(exp(-1)) draws,
    then one Bernoulli(exp(-frac)), all by CKS Algorithm 1; the first failure decides,
    so a large ``x`` costs about 1.6 draws.
    """
    whole = num // den
    rest = num - whole * den
    ok = True
    for _ in range(whole):
        ok, buf, nb = _bernoulli_exp(next64, state, buf, nb, _ONE, _ONE, _ZERO, _ONE, _ONE,
                                     _ZERO, _ONE)
        if not ok:
            break
    if ok and rest > 0:
        ok, buf, nb = _bernoulli_exp(next64, state, buf, nb, rest, den, c, _ONE, _ONE, _BLOCK,
                                     _ONE)
    return ok, buf, nb


@numba.njit(cache=True, inline="always")
def _bernoulli_exp_product(next64, state, buf, nb, a1, r1, r1_bits, a2, r2, r2_bits):
    """True with probability exp(-(a1 a2) / (r1 r2)) for integers a1, a2 >= 0, r1, r2 >= 1.

    With ``m_i = ceil(a_i / r_i)``, ``exp(-x) = exp(-x / (m1 m2))^(m1 m2)``: ``m1 m2``
    independent Bernoulli(exp(-x / (m1 m2))) whose parameter is the product of
    ``a1 / (r1 m1) <= 1`` and ``a2 / (r2 m2) <= 1``, so no product is ever formed
    (CKS Algorithm 1). ``r_i_bits``: the bit lengths of ``r_i``; ``a_i < 2^62``.
    """
    accept = True
    if a1 > 0 and a2 > 0:
        m1 = (a1 + r1 - 1) // r1
        m2 = (a2 + r2 - 1) // r2
        # Block sizes with den 2^c < 2^62 (bit lengths of products add at most), in
        # [0, 32]; by comparisons, as everywhere in these kernels: each specialisation
        # of the builtin min or max is one more compilation on a new install's first draw.
        c1 = 62 - r1_bits - _bit_length(m1)
        c1 = np.int64(0) if c1 < 0 else (c1 if c1 < 32 else np.int64(32))
        c2 = 62 - r2_bits - _bit_length(m2)
        c2 = np.int64(0) if c2 < 0 else (c2 if c2 < 32 else np.int64(32))
        for _ in range(m1):
            for _ in range(m2):
                accept, buf, nb = _bernoulli_exp(next64, state, buf, nb, a1, r1 * m1, c1,
                                                 a2, r2 * m2, c2, _ONE)
                if not accept:
                    break
            if not accept:
                break
    return accept, buf, nb


@numba.njit(cache=True, inline="always")
def _geometric(next64, state, table, guide, wbits, gshift, low_bits, p, pblock):
    """``X >= 0`` with ``P(X >= x) = exp(-x / p)``, as ``X = (g << low_bits) + lo``.

    The bits of a geometric variable are independent: ``g`` has ``P(g >= i) =
    exp(-i 2^L / p)`` (``L = low_bits``), drawn by inverting one uniform word ``w`` of
    ``wbits`` bits against ``table[i] = floor(2^wbits exp(-i 2^L / p))``: ``w <
    table[i]`` proves ``W < exp(-i 2^L / p)``, ``w > table[i]`` disproves it (the
    threshold is irrational), ``guide`` gives a proven lower bound on ``g`` from the
    top bits of ``w``. ``lo`` is uniform on ``[0, 2^L)``, accepted with probability
    ``exp(-lo / p) >= exp(-1/32)``. Returns ``(tie, g, lo, w, buf, nb)``: ``tie``
    means ``w == table[g + 1]``, undecided within ``wbits`` bits; the exact
    continuation then finishes from ``(g, w)``.
    """
    w, buf, nb = _fresh(next64, state, wbits)
    g = guide[w >> gshift]
    while w < table[g + 1]:
        g += 1
    tie = w == table[g + 1]
    lo = np.int64(0)
    if not tie:
        acc = False
        while not acc:
            lo, buf, nb = _fresh(next64, state, low_bits)
            acc, buf, nb = _bernoulli_exp(next64, state, buf, nb, lo, p, pblock, _ONE, _ONE,
                                          _BLOCK, _ONE)
    return tie, g, lo, w, buf, nb


@numba.njit(cache=True, inline="always")
def _uniform_below(next64, state, threshold, wbits):
    """Compare a fresh uniform ``W`` in [0, 1) with an irrational ``c``, given
    ``threshold = floor(2^wbits c)``: 1 if ``W < c`` is proven, 0 if ``W > c`` is, -1
    if the word equals the threshold (undecided within ``wbits`` bits). Also returns
    the word, the leading bits of ``W`` the continuation extends.
    """
    w, _, _ = _fresh(next64, state, wbits)
    if w < threshold:
        return 1, w
    if w > threshold:
        return 0, w
    return -1, w


@_inner
def _uniform_int(next64, state, n):
    """A uniform integer on ``[0, n)``, ``1 <= n < 2^62``, by rejection of bit blocks."""
    if n <= 1:
        return np.int64(0)
    k = _bit_length(n - 1)
    while True:
        x, _, _ = _fresh(next64, state, k)
        if x < n:
            return x


@numba.njit(cache=True)
def lattice_key(value, sensitivity, bound, inv_gamma):
    """``rint(clip(value / sensitivity, -bound, bound) * inv_gamma)`` as int64.

    ``inv_gamma = 2^-k`` is a power of two, so only the division rounds (half an ulp,
    accounted for by the plans); ``bound * inv_gamma < 2^53``. A NaN counts as
    ``bound`` (the plans' sensitivity assumes finite statistics).
    """
    v = value / sensitivity
    if not v <= bound:
        v = bound
    elif v < -bound:
        v = -bound
    return np.int64(np.rint(v * inv_gamma))


@numba.njit(cache=True)
def lattice_release(key, z, unit):
    """``unit * fl(key + z)`` for int64 ``key``, ``z`` (``|key| < 2^53``), or
    ``(False, 0.0)`` when the sum needs big integers (:func:`_add_rounded`).

    A function of the integer ``key + z`` alone: post-processing of the noisy key.
    """
    ok, v = _add_rounded(np.float64(key), z)
    return ok, v * unit


@numba.njit(cache=True, no_cfunc_wrapper=True)
def _noise_kernel(a, out, out_int, start, p, shift, j, pc, f, table, guide, wbits, gshift,
                  low_bits, pblock, next64, state, fb):
    """Discrete Laplace noise of scale ``p / 2^shift`` (``pc = 0``) or discrete Gaussian
    noise of ``s^2 = 2^j pc / 2^f`` (``pc > 0``, ``p = 2^j``, ``shift = 0``).

    Laplace (CKS Algorithm 2, restructured): ``X ~ Geometric(exp(-1/p))``
    (:func:`_geometric`); ``Y = floor(X / 2^shift)`` with a random sign, rejecting the
    negative zero. Gaussian (CKS Algorithm 3): that Laplace ``Y`` of scale ``T = 2^j`` is
    a proposal, accepted with probability ``exp(-(|Y| - s^2/T)^2 / (2 s^2)) = exp(-x)``,
    ``x = A^2 / (pc 2^(f+j+1))``, ``A = | |Y| 2^f - pc |`` (:func:`_bernoulli_exp_product`:
    no square is formed).

    Fills ``out`` with ``fl(a + noise)`` or, when ``a`` is empty, ``out_int`` with
    the noise, from index ``start``. Returns the index of the first draw it hands
    back (its state in ``fb``), or the size when done.
    """
    n = out_int.size if a.size == 0 else out.size
    d = a.size if a.size > 1 else 1
    ia = start % d
    gauss = pc > 0
    ylim = np.int64(1) << (61 - f)
    d2 = np.int64(1) << (f + j + 1)
    pc_bits = _bit_length(pc)
    for i in range(start, n):
        while True:
            while True:
                tie, g, lo, w, buf, nb = _geometric(next64, state, table, guide, wbits, gshift,
                                                    low_bits, p, pblock)
                if tie:
                    fb[0], fb[1], fb[2], fb[3] = _FB_GEOMETRIC, 0, g, w
                    return i
                s, buf, nb = _bits(next64, state, buf, nb, _ONE)
                x = ((g << low_bits) + lo) >> shift
                if s == 0 or x != 0:
                    break
            z = x - 2 * s * x
            if not gauss:
                break
            if x >= ylim:
                fb[0], fb[1], fb[2], fb[3] = _FB_GAUSS_Y, z, g, w
                return i
            aa = abs((x << f) - pc)
            accept, buf, nb = _bernoulli_exp_product(next64, state, buf, nb, aa, pc, pc_bits,
                                                     aa, d2, f + j + 2)
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
