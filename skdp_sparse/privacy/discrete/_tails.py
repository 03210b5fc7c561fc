"""Rigorous brackets of tail probabilities of the discrete Laplace and Gaussian laws.

Every function returns integers ``lo <= value 2^prec <= hi``, proved by interval
arithmetic on rationals (Python integers and Fractions), so thresholds built from them
(``floor(2^63 q)``) are exact. The methods and their error bounds are in
``doc/proofs/discrete.rst`` ("Exceedance processes", "Brackets of q").
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

from ._exact import _exp_neg_interval

# Laplace / Gaussian scale in lattice units below which the discrete Gaussian tail is
# summed term by term; above it, Euler-Maclaurin with a proven remainder.
_DIRECT_SIGMA2 = 1 << 12


def _down(x, prec):
    """The largest multiple of 2^-prec that is <= x (a Fraction)."""
    return Fraction(math.floor(x * (1 << prec)), 1 << prec)


def _up(x, prec):
    return Fraction(-math.floor(-x * (1 << prec)), 1 << prec)


def _as_bracket(lo, hi, prec):
    """Integers bracketing [lo, hi] * 2^prec."""
    return math.floor(lo * (1 << prec)), -math.floor(-hi * (1 << prec))


def _exp_neg(x, prec):
    """Fractions ``lo <= exp(-x) <= hi`` for a rational ``x >= 0``."""
    lo, hi = _exp_neg_interval(Fraction(x), prec)
    return Fraction(lo, 1 << prec), Fraction(hi, 1 << prec)


def _sqrt(x, prec):
    """Fractions ``lo <= sqrt(x) <= hi`` for a rational ``x >= 0``."""
    r = math.isqrt(math.floor(Fraction(x) * (1 << (2 * prec))))
    return Fraction(r, 1 << prec), Fraction(r + 1, 1 << prec)


def _arctan_inv(k, prec):
    """Fractions bracketing arctan(1/k), integer k >= 2: an alternating series whose
    terms decrease, each rounded down to 2^-(prec+8) (one ulp of error per term)."""
    work = prec + 8
    one = 1 << work
    total, n, power = 0, 0, k
    while True:
        term = one // ((2 * n + 1) * power)
        if term == 0:
            break
        total += -term if n & 1 else term
        n += 1
        power *= k * k
    # Each rounded term errs by < 1 ulp; the neglected tail is < one more ulp.
    slack = n + 2
    return Fraction(total - slack, one), Fraction(total + slack, one)


@functools.lru_cache(maxsize=32)
def _pi(prec):
    """Fractions ``lo <= pi <= hi`` (Machin: pi = 16 arctan(1/5) - 4 arctan(1/239))."""
    a_lo, a_hi = _arctan_inv(5, prec + 6)
    b_lo, b_hi = _arctan_inv(239, prec + 6)
    return 16 * a_lo - 4 * b_hi, 16 * a_hi - 4 * b_lo


def _erfc(x2, prec):
    """Fractions bracketing ``erfc(sqrt(x2))`` for a rational ``x2 >= 0``, with a
    relative width below about ``2^-prec``.

    ``erf(x) = (2 / sqrt(pi)) x exp(-x^2) sum_n (2 x^2)^n / (2n+1)!!`` (positive terms;
    once their ratio ``2 x^2 / (2n+3)`` is below 1/2 the tail is at most twice the next
    term), evaluated with ``x^2``-dependent guard bits so that ``1 - erf`` keeps
    ``prec`` bits; the guard grows until it does.
    """
    x2 = Fraction(x2)
    guard = prec + 24 + math.ceil(1.45 * float(x2))
    while True:
        work = guard + 16
        one = 1 << work
        num, den = 2 * x2.numerator, x2.denominator
        t_lo = t_hi = one
        s_lo = s_hi = 0
        n = 0
        while True:
            s_lo += t_lo
            s_hi += t_hi
            t_lo = (t_lo * num) // (den * (2 * n + 3))
            t_hi = -((-t_hi * num) // (den * (2 * n + 3)))
            n += 1
            if 2 * num <= den * (2 * n + 3) and t_hi <= 1:
                break
        s_lo, s_hi = Fraction(s_lo, one), Fraction(s_hi + 2 * t_hi + 1, one)
        pi_lo, pi_hi = _pi(work)
        rp_lo, rp_hi = _sqrt(pi_lo, work)[0], _sqrt(pi_hi, work)[1]
        x_lo, x_hi = _sqrt(x2, work)
        e_lo, e_hi = _exp_neg(x2, work)
        erf_lo = 2 * x_lo * e_lo * s_lo / rp_hi
        erf_hi = 2 * x_hi * e_hi * s_hi / rp_lo
        lo, hi = 1 - erf_hi, 1 - erf_lo
        if lo > 0 and (hi - lo) * (1 << prec) <= lo:
            return _down(lo, work), _up(hi, work)
        guard += 32


@functools.lru_cache(maxsize=64)
def _bernoulli_numbers(count):
    """B_0 .. B_{count-1} as Fractions (Akiyama-Tanigawa)."""
    out, row = [], []
    for m in range(count):
        row.append(Fraction(1, m + 1))
        for j in range(m, 0, -1):
            row[j - 1] = j * (row[j - 1] - row[j])
        out.append(row[0])
    return out


def _hermite_odd_coefficients(k_max):
    """Polynomials Q_k (coefficient lists in y^2) with He_{2k-1}(y) = y Q_k(y^2)."""
    # He_0 = 1, He_1 = y, He_{n+1} = y He_n - n He_{n-1}; as coefficient lists in y.
    he = [[1], [0, 1]]
    for n in range(1, 2 * k_max):
        nxt = [0] + he[n]
        for i, c in enumerate(he[n - 1]):
            nxt[i] -= n * c
        he.append(nxt)
    return [he[2 * k - 1][1::2] for k in range(1, k_max + 1)]


def _gauss_tail_direct(a, s2, prec):
    """``sum_{z >= a} exp(-z^2 / (2 s2))`` summed term by term (s2 small)."""
    # Guard bits for the size of the first term, so that it is not rounded to zero.
    work = prec + 40 + math.ceil(1.45 * float(Fraction(a * a) / (2 * s2)))
    one = 1 << work
    f_lo, f_hi = _exp_neg_interval(Fraction(a * a) / (2 * s2), work)
    g_lo, g_hi = _exp_neg_interval(Fraction(2 * a + 1) / (2 * s2), work)
    h_lo, h_hi = _exp_neg_interval(1 / s2, work)
    t_lo = t_hi = 0
    while True:
        t_lo += f_lo
        t_hi += f_hi
        # f(z+1) = f(z) g(z), g(z+1) = g(z) exp(-1/s2): the ratios decrease.
        f_lo, f_hi = (f_lo * g_lo) >> work, -((-f_hi * g_hi) >> work)
        g_lo, g_hi = (g_lo * h_lo) >> work, -((-g_hi * h_hi) >> work)
        if f_hi * (1 << (prec + 16)) <= t_lo or f_hi == 0:
            break
    # The rest is at most f(Z) / (1 - g(Z)) (a geometric bound, ratios decreasing).
    tail = -((-f_hi * one) // max(1, one - g_hi)) if g_hi < one else one
    return Fraction(t_lo, one), Fraction(t_hi + tail, one)


def _gauss_tail_em(a, s2, prec):
    """``sum_{z >= a} exp(-z^2 / (2 s2))`` by Euler-Maclaurin with a proven remainder.

    ``sum_{z>=a} f(z) = int_a^inf f + f(a)/2 + f(a) sum_{k=1}^{K} B_2k rho_k / (2k)! + R``
    with ``rho_k = a Q_k(a^2/s2) / s2^k`` (``-f^{(2k-1)}(a) = rho_k f(a)``) and
    ``|R| <= (2 zeta(2K) / (2 pi)^(2K)) s^(1-2K) sqrt(2 pi (2K)!)`` (Cauchy-Schwarz on
    ``int |He_2K| exp(-y^2/2)``); ``int_a^inf f = s sqrt(pi/2) erfc(a / (s sqrt 2))``.
    """
    x2 = Fraction(a * a) / (2 * s2)
    work = prec + 40 + math.ceil(1.45 * float(x2))
    c_lo, c_hi = _erfc(x2, work)
    s_lo, s_hi = _sqrt(s2, work)
    pi_lo, pi_hi = _pi(work)
    h_lo, h_hi = _sqrt(pi_lo / 2, work)[0], _sqrt(pi_hi / 2, work)[1]
    int_lo, int_hi = s_lo * h_lo * c_lo, s_hi * h_hi * c_hi
    target = int_lo / (1 << (prec + 16))
    y2 = Fraction(a * a) / s2
    bern = _bernoulli_numbers(82)
    for k_max in range(1, 41):
        # 2 zeta(2K) <= 3.29, 2 pi >= 6.283, pi <= 3.1416.
        fact = math.factorial(2 * k_max)
        root = Fraction(math.isqrt(math.ceil(Fraction(62832, 10000) * fact)) + 1)
        bound = Fraction(329, 100) / Fraction(6283, 1000) ** (2 * k_max) * root \
            * s_hi / s2**k_max
        if bound <= target:
            break
    else:
        raise ArithmeticError("Euler-Maclaurin remainder too large for this tail")
    corr = Fraction(1, 2)
    for k, poly in enumerate(_hermite_odd_coefficients(k_max), start=1):
        q = sum(c * y2**i for i, c in enumerate(poly))
        corr += bern[2 * k] * a * q / s2**k / math.factorial(2 * k)
    f_lo, f_hi = _exp_neg(x2, work)
    if corr >= 0:
        mid_lo, mid_hi = f_lo * corr, f_hi * corr
    else:
        mid_lo, mid_hi = f_hi * corr, f_lo * corr
    return _down(int_lo + mid_lo - bound, work), _up(int_hi + mid_hi + bound, work)


@functools.lru_cache(maxsize=256)
def gauss_tail(a, s2, prec):
    """Fractions bracketing ``sum_{z >= a} exp(-z^2 / (2 s2))``, integer ``a >= 0``."""
    s2 = Fraction(s2)
    if s2 <= _DIRECT_SIGMA2:
        return _gauss_tail_direct(a, s2, prec)
    return _gauss_tail_em(a, s2, prec)


@functools.lru_cache(maxsize=256)
def exceedance_probability(law, params, u, two_sided, prec, upper=None):
    """Integers bracketing ``2^prec P(Z > u)`` (or ``P(|Z| > u)``), integer ``u >= 0``.

    With an integer ``upper > u``: the band given the level above it, ``P(u < Z <= upper
    | Z <= upper)`` (or with ``|Z|``).

    ``law`` is ``"laplace"`` with ``params = (p, shift)`` (scale ``t = p / 2^shift``:
    ``P(Z > a) = rho^(a+1) / (1 + rho)``, ``rho = exp(-1/t)``) or ``"gaussian"`` with
    ``params = s2`` (``P(Z > a) = T(a+1) / (1 + 2 T(1))``, ``T`` the tail sum of
    :func:`gauss_tail`).
    """
    work = prec + 16
    sides = 2 if two_sided else 1

    def tail(a):  # brackets of P(Z > a), as Fractions
        if law == "laplace":
            p, shift = params
            inv_t = Fraction(1 << shift, p)
            e_lo, e_hi = _exp_neg((a + 1) * inv_t, work)
            r_lo, r_hi = _exp_neg(inv_t, work)
            return e_lo / (1 + r_hi), e_hi / (1 + r_lo)
        t_lo, t_hi = gauss_tail(a + 1, params, work)
        n_lo, n_hi = gauss_tail(1, params, work)
        return t_lo / (1 + 2 * n_hi), t_hi / (1 + 2 * n_lo)

    lo, hi = tail(u)
    lo, hi = sides * lo, sides * hi
    if upper is not None:
        a_lo, a_hi = tail(upper)
        a_lo, a_hi = sides * a_lo, sides * a_hi
        lo, hi = (lo - a_hi) / (1 - a_lo), (hi - a_lo) / (1 - a_hi)
    return _as_bracket(lo, hi, prec)
