"""Noise drawn ahead for kernels, and one lattice for coordinates of different
sensitivities: the law of the buffered draws, their order across refills, the
guarantee of each per-coordinate release and the bound on neighbouring keys."""

import math
from fractions import Fraction

import numba
import numpy as np
import pytest
from scipy import stats

from skdp_sparse.privacy.discrete import (
    SENSITIVITY_SLACK,
    NoiseBuffer,
    gaussian_rho,
    kernel_source,
    laplace_epsilon,
    lattice_key,
    lattice_release,
    noise_take,
    plan_unit_gaussian,
    plan_unit_laplace,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)

MIN_P = 1e-3


@numba.njit
def _consume(values, pos, n, out, start):
    for i in range(start, n):
        ok, z = noise_take(values, pos)
        if not ok:
            return i
        out[i] = z
    return n


def _kernel_draws(buf, n):
    out = np.empty(n, dtype=np.int64)
    i = 0
    while i < n:
        i = _consume(buf.values, buf.pos, n, out, i)
        if i < n:
            buf.refill()
    return out


@pytest.mark.parametrize("law,scale", [("laplace", 3), ("gaussian", 2.5)])
def test_buffered_draws_have_the_law(law, scale):
    buf = NoiseBuffer(law, scale, np.random.default_rng(1), size=1000)
    z = _kernel_draws(buf, 100_000)
    support = np.arange(-60, 61)
    if law == "laplace":
        w = np.exp(-np.abs(support) / scale)
    else:
        w = np.exp(-support.astype(float) ** 2 / (2 * scale**2))
    pmf = w / w.sum()
    counts = np.bincount(z - support[0], minlength=support.size)
    keep = pmf * z.size >= 5
    obs = np.append(counts[keep], z.size - counts[keep].sum())
    exp = np.append(pmf[keep] * z.size, z.size - pmf[keep].sum() * z.size)
    assert stats.chisquare(obs, exp).pvalue > MIN_P
    # Refills come from the same exact sampler as a direct draw.
    sampler = sample_discrete_laplace if law == "laplace" else sample_discrete_gaussian
    buf2 = NoiseBuffer(law, scale, np.random.default_rng(2), size=500)
    buf2.refill()
    np.testing.assert_array_equal(buf2.values, sampler(scale, 500, np.random.default_rng(2)))


def test_refill_keeps_unused_draws_in_order():
    buf = NoiseBuffer("laplace", 5, np.random.default_rng(3), size=8)
    assert buf.available == 0
    first = buf.take(5)
    rest = buf.values[5:].copy()
    buf.refill()
    np.testing.assert_array_equal(buf.values[:3], rest)
    assert buf.available == 8
    more = buf.take(20)  # grows the chunk
    assert more.size == 20 and buf.values.size >= 20
    np.testing.assert_array_equal(more[:3], rest)
    assert not np.array_equal(first, more[:5])


@pytest.mark.parametrize("law", ["laplace", "gaussian"])
# The last: keys above 2^52, where the normalising division may add a whole unit.
@pytest.mark.parametrize("scale,bound", [(1.0, 16000.0), (0.05, 3.0), (40.0, 1e6),
                                         (1.0, 6e6)])
def test_unit_lattice_guarantee(law, scale, bound):
    plan = (plan_unit_laplace if law == "laplace" else plan_unit_gaussian)(scale, bound)
    gamma = Fraction(2) ** plan.k
    assert gamma <= Fraction(scale) / 2**30
    div = Fraction(bound) / 2**52
    assert plan.delta_units == math.floor((1 + div) / gamma) + 1
    assert bound / float(gamma) < 2**53
    if law == "laplace":
        assert plan.scale_units == math.ceil(Fraction(scale) / gamma)
        claim = laplace_epsilon(1.0, scale)
        assert claim == pytest.approx((1 + SENSITIVITY_SLACK) / scale, rel=1e-15)
        assert plan.epsilon <= Fraction(claim)
    else:
        assert plan.scale_units == Fraction(scale) / gamma
        assert plan.sigma2_units >= plan.scale_units**2
        claim = gaussian_rho(1.0, scale)
        assert plan.rho <= Fraction(claim)


def test_per_coordinate_keys_and_releases():
    # Coordinates of different sensitivities share one lattice: neighbouring statistics
    # (a full sensitivity apart, at the worst places for rounding) give keys at most D
    # apart, and the release is sensitivity * gamma * (key + noise).
    plan = plan_unit_gaussian(2.0, 5e4)
    rng = np.random.default_rng(4)
    sens = rng.uniform(1e-5, 3.0, size=20_000)
    base = (rng.integers(-10**9, 10**9, size=sens.size) + 0.5) * plan.gamma
    g = np.nextafter(base, rng.choice([-np.inf, np.inf], size=sens.size)) * sens
    g2 = g + sens * rng.choice([-1.0, 1.0], size=sens.size)
    k1 = np.array([lattice_key(a, s, plan.value_bound, plan.inv_gamma)
                   for a, s in zip(g, sens, strict=True)])
    k2 = np.array([lattice_key(a, s, plan.value_bound, plan.inv_gamma)
                   for a, s in zip(g2, sens, strict=True)])
    assert np.max(np.abs(k1 - k2)) <= plan.delta_units
    assert np.max(np.abs(k1 - np.rint(g / sens / plan.gamma))) <= 1
    z = plan.buffer(np.random.default_rng(5), 4096).take(sens.size)
    rel = [lattice_release(a, b, s * plan.gamma) for a, b, s in zip(k1, z, sens, strict=True)]
    assert all(ok for ok, _ in rel)
    out = np.array([v for _, v in rel])
    np.testing.assert_allclose(out, sens * plan.gamma * (k1 + z).astype(float), rtol=1e-15)
    # The noise of coordinate j has standard deviation sensitivity_j * sigma.
    noise = out - sens * plan.gamma * k1
    assert np.std(noise / sens) == pytest.approx(2.0, rel=0.03)
    # Noise beyond 2^53: the exact integer sum is rounded once.
    ok, v = lattice_release(3, 2**60 + 1, 0.5)
    assert ok and v == float(2**60 + 4) * 0.5


@numba.njit
def _interleaved(rng, next64, state, n, out):
    for i in range(n):
        out[2 * i] = rng.integers(0, 2**62)
        out[2 * i + 1] = np.int64(next64(state) >> np.uint64(2))


def test_kernel_words_and_numba_generator_share_one_stream():
    # A caller kernel may draw from its numba Generator and pass the same generator's
    # next_uint64 to the samplers: both advance one state, so no word is used twice.
    rng = np.random.default_rng(6)
    src = kernel_source(rng)
    out = np.empty(20, dtype=np.int64)
    _interleaved(rng, src.next64, src.state, 10, out)
    raw = np.random.default_rng(6).bit_generator.random_raw(20)
    # The kernel's own words are the odd words of the stream ...
    np.testing.assert_array_equal(out[1::2], (raw[1::2] >> np.uint64(2)).astype(np.int64))
    # ... and the Generator, one word per draw here, took the even ones.
    ref = np.random.default_rng(6).bit_generator
    ref.advance(20)
    assert rng.bit_generator.state["state"] == ref.state["state"]


def test_validation():
    with pytest.raises(ValueError):
        NoiseBuffer("cauchy", 1.0, 0)
    with pytest.raises(ValueError):
        plan_unit_gaussian(1.0, 2.0**40)
    with pytest.raises(ValueError):
        plan_unit_laplace(-1.0, 3.0)
