"""Exact exceedance processes: which positions have Z > u (or |Z| > u), and Z there.

Counts are checked against Binomial(m, q), gaps against Geometric(q), values against the
exact conditional pmf, ``q`` itself against direct sums; every continuation by making
table ties frequent; the kernel protocol by a caller kernel that stops and resumes.
"""

import math
from fractions import Fraction

import numba
import numpy as np
import pytest
from scipy import special, stats

from skdp_sparse.privacy import discrete
from skdp_sparse.privacy.discrete import (
    HANDOFF_SLOTS,
    ExceedancePlan,
    _process,
    _tails,
    kernel_source,
    next_exceedance,
    plan_exceedance,
)

MIN_P = 1e-3

# (law, scale in units, threshold, two-sided): q from about 0.9 down to 3e-3; scales
# with a bucket of one unit and of 2^30 units; Gaussian proposals tangent at the
# threshold (u > s) and centred at s (u < s).
_CASES = [
    ("laplace", 3, 4, False),
    ("laplace", 2.5, 0, True),
    ("laplace", 40, 150, False),
    ("gaussian", 3, 4, False),
    ("gaussian", 3, 2, True),
    ("gaussian", 0.7, 1, False),
    ("gaussian", 5, 0, True),
    ("gaussian", 100, 250, True),
]


def _pmf(law, scale, support):
    z = support.astype(float)
    if law == "laplace":
        t = float(discrete.discrete_laplace_scale(scale))
        w = np.exp(-np.abs(z) / t)
    else:
        w = np.exp(-(z**2) / (2 * float(discrete.discrete_gaussian_sigma2(scale))))
    return w / w.sum()


def _support(scale):
    return np.arange(-int(60 * scale) - 40, int(60 * scale) + 41)


def _event(z, u, two_sided):
    return np.abs(z) > u if two_sided else z > u


def _chi2(values, support, pmf, min_expected=5.0):
    """p-value of the counts of ``values`` on the consecutive integers ``support``."""
    expected = pmf * values.size
    inside = (values >= support[0]) & (values <= support[-1])
    counts = np.bincount(values[inside] - support[0], minlength=support.size)[:support.size]
    keep = expected >= min_expected
    obs = np.append(counts[keep], values.size - counts[keep].sum())
    exp = np.append(expected[keep], values.size - expected[keep].sum())
    if exp[-1] < 1e-9 * values.size:
        if obs[-1] > 0:
            return 0.0  # values where the law puts no mass
        obs, exp = obs[:-1], exp[:-1] * obs[:-1].sum() / exp[:-1].sum()
    return stats.chisquare(obs, exp).pvalue


@pytest.mark.parametrize("law,scale,u,two", _CASES)
def test_probability_is_bracketed(law, scale, u, two):
    plan = plan_exceedance(law, scale, u, two)
    support = _support(scale)
    q = _pmf(law, scale, support)[_event(support, u, two)].sum()
    lo, hi = plan.probability_bracket(90)
    assert 0 < hi - lo <= 16
    assert lo / 2**90 == pytest.approx(q, rel=1e-12)
    assert plan.candidate_rate >= q and plan.candidate_rate < q * (1 + 1e-5)


def test_gaussian_tail_methods_agree():
    # Term-by-term sums and Euler-Maclaurin with its proven remainder overlap, and the
    # tail is within 1/s of the continuous one at 2^30 units.
    for s2 in (Fraction(5000), Fraction(4097)):
        for a in (1, 40, 200):
            d = _tails._gauss_tail_direct(a, s2, 90)
            e = _tails._gauss_tail_em(a, s2, 90)
            assert d[0] <= e[1] and e[0] <= d[1]
            assert (e[1] - e[0]) / e[0] < 2**-80
    s = 2**30 + 12345
    for k in (1, 3, 6):
        lo, hi = _tails.gauss_tail(k * s, Fraction(s * s), 90)
        cont = s * math.sqrt(math.pi / 2) * special.erfc(k / math.sqrt(2))
        assert float(lo) == pytest.approx(cont, rel=4 / s)
        assert (hi - lo) / lo < 2**-80
    for x2 in (Fraction(1, 7), Fraction(9), Fraction(300)):
        lo, hi = _tails._erfc(x2, 80)
        assert float(lo) == pytest.approx(special.erfc(math.sqrt(x2)), rel=1e-13)
        assert (hi - lo) / lo < 2**-79


@pytest.mark.parametrize("law,scale,u,two", _CASES)
def test_counts_gaps_and_values(law, scale, u, two):
    plan = plan_exceedance(law, scale, u, two)
    support = _support(scale)
    pmf = _pmf(law, scale, support)
    ev = _event(support, u, two)
    q = pmf[ev].sum()
    m = 400_000
    idx, val = plan.sample(m, np.random.default_rng(1))
    assert np.all(np.diff(idx) > 0) and (idx.size == 0 or (idx[0] >= 0 and idx[-1] < m))
    assert abs(idx.size - m * q) < 4.5 * math.sqrt(m * q * (1 - q))
    # Gaps (from position -1) are Geometric(q) on 1, 2, ...
    gaps = np.diff(np.concatenate([[-1], idx]))
    kmax = max(2, int(np.ceil(np.log(1e-4) / np.log1p(-q))))
    k = np.arange(1, kmax + 1)
    gpmf = q * (1 - q) ** (k - 1)
    gpmf = np.append(gpmf, 1 - gpmf.sum())
    gaps_capped = np.minimum(gaps, kmax + 1)
    assert _chi2(gaps_capped, np.arange(1, kmax + 2), gpmf) > MIN_P
    # Values: the exact law of Z given the event.
    assert np.all(_event(val, u, two))
    cond = np.where(ev, pmf, 0.0) / q
    assert _chi2(val[:100_000], support, cond) > MIN_P


@pytest.mark.parametrize("law,scale,u,two,upper", [("laplace", 3, 2, True, 6),
                                                   ("gaussian", 3, 3, True, 7),
                                                   ("gaussian", 100, 150, False, 260)])
def test_band_given_the_level_above(law, scale, u, two, upper):
    # Positions known to have |Z| <= upper reveal the band u < |Z| <= upper: selected
    # with probability P(band) / P(|Z| <= upper), values from Z given the band.
    plan = plan_exceedance(law, scale, u, two, upper=upper)
    support = _support(scale)
    pmf = _pmf(law, scale, support)
    band = _event(support, u, two) & ~_event(support, upper, two)
    below = ~_event(support, upper, two)
    q = pmf[band].sum() / pmf[below].sum()
    lo, hi = plan.probability_bracket(90)
    assert lo / 2**90 == pytest.approx(q, rel=1e-12) and hi - lo <= 64
    m = 300_000
    idx, val = plan.sample(m, np.random.default_rng(18))
    assert abs(idx.size - m * q) < 4.5 * math.sqrt(m * q * (1 - q))
    cond = np.where(band, pmf, 0.0) / pmf[band].sum()
    assert np.all(_event(val, u, two) & ~_event(val, upper, two))
    assert _chi2(val, support, cond) > MIN_P


def test_values_at_mechanism_scale():
    s = 2**30 + 12345
    u = 3 * 2**30
    plan = plan_exceedance("gaussian", s, u, True)
    vals = plan.sample_values(50_000, np.random.default_rng(2)).astype(float)
    assert np.all(np.abs(vals) > u)
    a = (u + 1) / s
    x = np.abs(vals) / s
    # The conditional law is the truncated normal up to 1/s.
    assert stats.kstest(x, stats.truncnorm(a, np.inf).cdf).pvalue > MIN_P
    assert np.mean(vals > 0) == pytest.approx(0.5, abs=0.01)


def test_positions_only():
    plan = plan_exceedance("gaussian", 3, 4)
    idx, val = plan.sample(300_000, np.random.default_rng(3), values=False)
    assert np.all(val == 0)
    q = plan.probability
    assert abs(idx.size - 3e5 * q) < 4.5 * math.sqrt(3e5 * q * (1 - q))


@pytest.fixture
def short_words(monkeypatch):
    """6-bit words: ties with the gap table, the thinning threshold and the value table
    become frequent, so the exact continuation runs often."""
    monkeypatch.setattr(discrete, "_WORD_BITS", 6)
    kinds = []
    finish = ExceedancePlan.finish

    def counting(self, fb, bits, m, with_value=True):
        kinds.append(int(fb[0]))
        return finish(self, fb, bits, m, with_value)

    monkeypatch.setattr(ExceedancePlan, "finish", counting)
    return kinds


@pytest.mark.parametrize("law,scale,u,two", [_CASES[0], _CASES[3], _CASES[4], _CASES[7]])
def test_continuation(short_words, law, scale, u, two):
    plan = plan_exceedance(law, scale, u, two)
    assert plan.wbits == 6
    support = _support(scale)
    pmf = _pmf(law, scale, support)
    ev = _event(support, u, two)
    q = pmf[ev].sum()
    m = 200_000
    idx, val = plan.sample(m, np.random.default_rng(4))
    assert {_process._FB_GAP, _process._FB_THIN, _process._FB_VALUE_GEO} <= set(short_words)
    assert len(short_words) > 100
    assert abs(idx.size - m * q) < 4.5 * math.sqrt(m * q * (1 - q))
    assert _chi2(val, support, np.where(ev, pmf, 0.0) / q) > MIN_P
    gaps = np.diff(np.concatenate([[-1], idx]))
    assert np.mean(gaps) == pytest.approx(1 / q, rel=8 / math.sqrt(idx.size))


def test_large_proposal_continuation():
    # A Gaussian proposal too large for the kernel is accepted in Python with
    # probability exp(-(h(z) - h(z_min))); a rejection draws a fresh value.
    plan = plan_exceedance("gaussian", 3, 4)
    params = plan.arrays[0]
    jj, pcc, f, zmin = (int(params[i]) for i in (_process._JJ, _process._PCC, _process._F,
                                                  _process._ZMIN))
    z0 = 9
    s2 = Fraction(pcc << jj, 1 << f)
    zstar = Fraction(pcc, 1 << f)
    acc = math.exp(-float(((z0 - zstar) ** 2 - (zmin - zstar) ** 2) / (2 * s2)))
    bits = discrete._PyBits(np.random.default_rng(5))
    fb = np.array([_process._FB_VALUE_BIG, 17, z0, 0, 0, 0, 0, 0])
    n = 20_000
    out = np.array([plan.finish(fb, bits, 100) for _ in range(n)])
    assert np.all(out[:, 0] == 17)
    vals = out[:, 1]
    support = _support(3)
    cond = np.where(support > 4, _pmf("gaussian", 3, support), 0.0)
    cond /= cond.sum()
    p0 = acc + (1 - acc) * cond[support == z0][0]
    assert abs(np.mean(vals == z0) - p0) < 4 * math.sqrt(p0 * (1 - p0) / n)
    others = np.where(support == z0, 0.0, cond)
    assert _chi2(vals[vals != z0], support, others / others.sum()) > MIN_P


# ------------------------------------------------------------------- kernels
@numba.njit
def _collect(proc, m, pos, next64, state, fb, out, count):
    """A caller kernel: gathers the process from ``pos``; returns ``(pos, count,
    handoff)``."""
    while True:
        j, z = next_exceedance(proc, pos, m, True, next64, state, fb)
        if j < 0:
            return pos, count, True
        if j >= m:
            return m, count, False
        out[count, 0] = j
        out[count, 1] = z
        count += 1
        pos = j + 1


def test_caller_kernel_protocol(monkeypatch):
    # A kernel that stops on each handoff and resumes with Python's answer draws the
    # same process, from the same seed, as plan.sample.
    monkeypatch.setattr(discrete, "_WORD_BITS", 6)
    plan = plan_exceedance("gaussian", 3, 2, True)
    m = 50_000
    rng = np.random.default_rng(6)
    src = kernel_source(rng)
    fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)
    out = np.empty((m, 2), dtype=np.int64)
    pos, count, handoffs = 0, 0, 0
    while pos < m:
        pos, count, stopped = _collect(plan.arrays, m, pos, src.next64, src.state, fb, out,
                                       count)
        if stopped:
            handoffs += 1
            j, z = plan.finish(fb, src, m)
            if j >= m:
                break
            out[count] = j, z
            count += 1
            pos = j + 1
    assert handoffs > 10
    idx, val = plan.sample(m, np.random.default_rng(6))
    np.testing.assert_array_equal(out[:count, 0], idx)
    np.testing.assert_array_equal(out[:count, 1], val)


def test_reproducible_and_advances_the_generator():
    plan = plan_exceedance("laplace", 3, 4)
    a = plan.sample(10_000, 7)
    b = plan.sample(10_000, 7)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    rng = np.random.default_rng(8)
    first, second = plan.sample(10_000, rng), plan.sample(10_000, rng)
    assert not np.array_equal(first[0], second[0])
    ref = np.random.default_rng(8).bit_generator
    target = rng.bit_generator.state["state"]
    for _ in range(50_000):
        if ref.state["state"] == target:
            break
        ref.advance(1)
    assert ref.state["state"] == target


def test_validation():
    with pytest.raises(ValueError):
        plan_exceedance("laplace", 3, -1)
    with pytest.raises(ValueError):
        plan_exceedance("laplace", 3, 2.5)
    with pytest.raises(ValueError):
        plan_exceedance("cauchy", 3, 2)
    with pytest.raises(ValueError):
        plan_exceedance("gaussian", 1e-4, 2)
    with pytest.raises(ValueError):
        plan_exceedance("gaussian", 3, 4, upper=4)
