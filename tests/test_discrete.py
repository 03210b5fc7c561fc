"""Exact discrete samplers and the floating-point-safe releases.

Distributions are checked against their pmf (chi-square) and moments; the
releases for the support they reach, their accounting and their accuracy; the
randomness for reproducibility and for never reusing a stream.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from joblib import Parallel, delayed
from scipy import stats
from sklearn.base import clone

from skdp_sparse.linear_model import DPOutputPerturbationRegressor
from skdp_sparse.privacy import discrete
from skdp_sparse.privacy.accounting import compose
from skdp_sparse.privacy.auditing import epsilon_lower_bound
from skdp_sparse.privacy.discrete import (
    SENSITIVITY_SLACK,
    discrete_gaussian_sigma2,
    discrete_laplace_scale,
    gaussian_rho,
    laplace_epsilon,
    plan_gaussian,
    plan_laplace,
    release_gaussian,
    release_laplace,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)
from skdp_sparse.privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from skdp_sparse.utils.random import check_generator

MIN_P = 1e-3  # chi-square tests: a correct sampler fails one with probability 1e-3


def _dlap_pmf(t, support):
    w = np.exp(-np.abs(support) / t)
    return w / w.sum()


def _dgauss_pmf(s2, support):
    w = np.exp(-(support.astype(float) ** 2) / (2 * s2))
    return w / w.sum()


def _chi2_pvalue(z, support, pmf, min_expected=10.0):
    """Chi-square of the counts of ``z`` against ``pmf`` on ``support``; thin tails pooled."""
    expected = pmf * z.size
    counts = np.array([np.count_nonzero(z == v) for v in support], dtype=float)
    keep = expected >= min_expected
    obs = np.append(counts[keep], z.size - counts[keep].sum())
    exp = np.append(expected[keep], z.size - expected[keep].sum())
    return stats.chisquare(obs, exp).pvalue


# ------------------------------------------------------------------ samplers
@pytest.mark.parametrize("scale", [1, 3, 2.5, Fraction(7, 3), 40])
def test_discrete_laplace_pmf(scale):
    z = sample_discrete_laplace(scale, 200_000, np.random.default_rng(1))
    t = float(discrete_laplace_scale(scale))
    assert z.dtype == np.int64
    support = np.arange(-40 * math.ceil(t), 40 * math.ceil(t) + 1)
    assert _chi2_pvalue(z, support, _dlap_pmf(t, support)) > MIN_P


def test_discrete_laplace_scale_is_exact_or_rounded_up():
    assert discrete_laplace_scale(3) == 3
    assert discrete_laplace_scale(2.5) == Fraction(5, 2)
    assert discrete_laplace_scale(2**55 + 1) == 2**55 + 1
    t = discrete_laplace_scale(0.1)
    assert Fraction(0.1) <= t < Fraction(0.1) * (1 + Fraction(1, 2**40))


@pytest.mark.parametrize("sigma", [0.6, 1, 3, 5.5])
def test_discrete_gaussian_pmf_and_variance(sigma):
    z = sample_discrete_gaussian(sigma, 200_000, np.random.default_rng(2))
    s2 = float(discrete_gaussian_sigma2(sigma))
    assert s2 == pytest.approx(sigma**2, rel=1e-12)
    support = np.arange(-int(20 * sigma) - 5, int(20 * sigma) + 6)
    pmf = _dgauss_pmf(s2, support)
    assert _chi2_pvalue(z, support, pmf) > MIN_P
    # Variance against the exact formula sum z^2 pmf(z) (slightly below s^2 for small s).
    var = float(np.sum(support.astype(float) ** 2 * pmf))
    fourth = float(np.sum(support.astype(float) ** 4 * pmf))
    se = math.sqrt((fourth - var**2) / z.size)
    assert abs(np.mean(z.astype(float) ** 2) - var) < 4 * se
    if sigma < 1:
        assert var < s2


def test_samplers_at_mechanism_scales():
    # The scales the mechanisms use (2^30 and more lattice units): moments and low bits.
    rng = np.random.default_rng(3)
    t = 2**36 + 12345
    z = sample_discrete_laplace(t, 200_000, rng).astype(float)
    q = math.exp(-1 / t)
    assert np.mean(np.abs(z)) == pytest.approx(2 * q / ((1 + q) * (1 - q)), rel=0.01)
    assert np.mean(z**2) == pytest.approx(2 * q / (1 - q) ** 2, rel=0.02)
    low = (np.abs(z).astype(np.int64) % 256)
    assert stats.chisquare(np.bincount(low, minlength=256)).pvalue > MIN_P
    s = 2**30 + 12345
    g = sample_discrete_gaussian(s, 200_000, rng).astype(float)
    assert np.mean(g**2) == pytest.approx(s**2, rel=0.01)
    assert stats.kurtosis(g) == pytest.approx(0.0, abs=0.05)
    low = (np.abs(g).astype(np.int64) % 256)
    assert stats.chisquare(np.bincount(low, minlength=256)).pvalue > MIN_P


def test_sampler_shapes_and_validation():
    rng = np.random.default_rng(0)
    assert sample_discrete_laplace(2, (3, 4), rng).shape == (3, 4)
    assert sample_discrete_gaussian(2, (2, 5), rng).shape == (2, 5)
    assert sample_discrete_laplace(2, 0, rng).shape == (0,)
    for bad in (0, -1.0, np.inf, np.nan, "a"):
        with pytest.raises(ValueError):
            sample_discrete_laplace(bad, 3, rng)
        with pytest.raises(ValueError):
            sample_discrete_gaussian(bad, 3, rng)
    with pytest.raises(ValueError):
        sample_discrete_laplace(2.0**57, 3, rng)
    with pytest.raises(ValueError):
        sample_discrete_gaussian(1e-4, 3, rng)


@pytest.fixture
def short_words(monkeypatch):
    """6-bit uniform words: ties with table entries become frequent, so the exact
    big-integer continuation runs on a few percent of the draws."""
    monkeypatch.setattr(discrete, "_WORD_BITS", 6)
    calls = []
    finish = discrete._finish_noise

    def counting(fb, *args):
        calls.append(int(fb[0]))
        return finish(fb, *args)

    monkeypatch.setattr(discrete, "_finish_noise", counting)
    return calls


@pytest.mark.parametrize("scale", [3, 2.5, 100])
def test_exact_continuation_laplace(short_words, scale):
    z = sample_discrete_laplace(scale, 30_000, np.random.default_rng(4))
    assert len(short_words) > 100
    support = np.arange(-40 * scale, 40 * scale + 1)
    assert _chi2_pvalue(z, support, _dlap_pmf(scale, support)) > MIN_P


@pytest.mark.parametrize("sigma", [3, 20])
def test_exact_continuation_gaussian(short_words, sigma):
    z = sample_discrete_gaussian(sigma, 30_000, np.random.default_rng(5))
    assert len(short_words) > 100
    support = np.arange(-20 * sigma, 20 * sigma + 1)
    assert _chi2_pvalue(z, support, _dgauss_pmf(sigma**2, support)) > MIN_P


def test_gaussian_proposal_continuation():
    # A proposal too large for the kernel's 62-bit test is accepted in Python with
    # probability exp(-(|y| - s^2/T)^2 / (2 s^2)); a rejection restarts the sampler.
    j, pc, f = discrete._gaussian_params(Fraction(9))
    spec, gauss = discrete._gauss_draw_setup(j, pc, f)
    src = discrete._PyBits(np.random.default_rng(6))
    T, n = 2**j, 20_000
    accept = math.exp(-((3 - 9 / T) ** 2) / 18)
    out = np.array([discrete._finish_noise(np.array([discrete._FB_GAUSS_Y, 3, 0, 0]), spec,
                                           gauss, src) for _ in range(n)])
    support = np.arange(-60, 61)
    pmf = _dgauss_pmf(9.0, support)
    p3 = accept + (1 - accept) * pmf[support == 3][0]
    assert abs(np.mean(out == 3) - p3) < 4 * math.sqrt(p3 * (1 - p3) / n)
    others = out[out != 3]
    keep = support != 3
    assert _chi2_pvalue(others, support[keep], pmf[keep] / pmf[keep].sum()) > MIN_P


@pytest.mark.parametrize("x", [Fraction(1, 3), Fraction(1, 64), Fraction(5), Fraction(12345, 97)])
def test_exp_brackets(x):
    lo, hi = discrete._exp_neg_interval(x, 120)
    assert 0 <= hi - lo <= 4
    assert lo / 2**120 == pytest.approx(math.exp(-float(x)), rel=1e-14)
    lo2, hi2 = discrete._exp_neg_multiple_interval(x / 7, 7, 120)
    assert lo2 <= hi and lo <= hi2


def test_geometric_table_is_floor_of_exponentials():
    lam = Fraction(2**25, 2**30 + 12345)
    table, guide, gshift = discrete._geometric_table(lam, 63)
    g = np.arange(1, table.size - 1)
    approx = 2.0**63 * np.exp(-g * float(lam))
    assert np.all(np.abs(table[1:-1] - approx) <= 1e-12 * approx + 1)
    assert table[-2] == 0 and table[-1] == -1 and np.all(np.diff(table[:-1]) <= 0)
    # guide[i] is a proven lower bound of G for every word whose top bits are i.
    i = np.arange(guide.size)
    assert np.all(table[guide] >= 0)
    assert np.all((guide == 0) | (table[guide].astype(object) >= (i + 1) * 2**gshift))


# --------------------------------------------------------- lattice accounting
@pytest.mark.parametrize("dim", [1, 1000, 10**6])
def test_laplace_lattice_accounts_for_rounding(dim):
    sens, scale = 0.3, 0.7
    plan = plan_laplace(sens, scale, dim)
    gamma = Fraction(2) ** plan.k
    # The largest power of two meeting both rules.
    assert gamma <= Fraction(scale) / 2**30 and dim * gamma <= Fraction(SENSITIVITY_SLACK) * \
        Fraction(sens)
    assert 2 * gamma > min(Fraction(scale) / 2**30, Fraction(SENSITIVITY_SLACK) * Fraction(sens)
                           / dim)
    # Inflated integer sensitivity, noise scale in units rounded up.
    assert plan.delta_units == math.floor(Fraction(sens) / gamma) + dim
    assert plan.t == math.ceil(Fraction(scale) / gamma)
    assert plan.delta_units > Fraction(sens) / gamma
    assert plan.epsilon <= Fraction(laplace_epsilon(sens, scale))
    assert float(plan.epsilon) > sens / scale  # the rounding costs something, and is counted


@pytest.mark.parametrize("dim", [1, 1000, 10**6])
def test_gaussian_lattice_accounts_for_rounding(dim):
    sens, sigma = 0.3, 0.7
    plan = plan_gaussian(sens, sigma, dim)
    gamma = Fraction(2) ** plan.k
    assert gamma <= Fraction(sigma) / 2**30
    assert dim * gamma**2 <= (Fraction(SENSITIVITY_SLACK) * Fraction(sens)) ** 2
    assert plan.delta_units >= Fraction(sens) / gamma + Fraction(math.isqrt(dim))
    assert plan.delta_units**2 >= (Fraction(sens) / gamma) ** 2 + dim
    assert plan.sigma2_units >= (Fraction(sigma) / gamma) ** 2
    assert plan.rho <= Fraction(gaussian_rho(sens, sigma))


@pytest.mark.parametrize("dim", [1, 10**5])
def test_calibrated_mechanisms_meet_their_target(dim):
    lap = LaplaceMechanism(0.3, epsilon=0.8)
    assert lap.scale == pytest.approx((1 + SENSITIVITY_SLACK) * 0.3 / 0.8, rel=1e-15)
    assert plan_laplace(lap.sensitivity, lap.scale, dim).epsilon <= Fraction(0.8)
    gauss = GaussianMechanism(0.3, epsilon=0.8, delta=1e-6, floating_point_safe=True)
    assert compose([gauss.event()], 1e-6)[0] <= 0.8
    assert plan_gaussian(gauss.sensitivity, gauss.sigma, dim).rho <= Fraction(gauss.event().rho)


def test_lattice_limits_are_refused():
    with pytest.raises(ValueError, match="floating_point_safe=False"):
        plan_laplace(1.0, 2.0**20, 10**9)
    with pytest.raises(ValueError, match="floating_point_safe=False"):
        plan_gaussian(1.0, 2.0**25, 10**12)


# ------------------------------------------------------------------- support
_VALUES = [0.1, math.nextafter(0.1, 1.0), 0.1 + 2.0**-40, 1 / 3, -2.7e-5, 123.456, 0.0]


@pytest.mark.parametrize("release,plan", [(release_laplace, plan_laplace),
                                          (release_gaussian, plan_gaussian)])
def test_outputs_are_lattice_points_for_any_input(release, plan):
    k = plan(1.0, 0.5, 1).k
    for v in _VALUES:
        out = release(v, 1.0, 0.5, np.random.default_rng(7), n_draws=5000)
        units = np.ldexp(out, -k)
        assert np.all(units == np.rint(units)), v


@pytest.mark.parametrize("release,plan", [(release_laplace, plan_laplace),
                                          (release_gaussian, plan_gaussian)])
def test_neighbouring_inputs_reach_the_same_outputs(release, plan):
    gamma = plan(1.0, 0.5, 1).gamma
    a = release(0.1, 1.0, 0.5, np.random.default_rng(8), n_draws=2000)
    b = release(math.nextafter(0.1, 1.0), 1.0, 0.5, np.random.default_rng(8), n_draws=2000)
    # Inputs in the same lattice cell give bit-identical releases from the same seed ...
    np.testing.assert_array_equal(a, b)
    # ... and inputs in other cells shift them by whole lattice steps only.
    c = release(0.1 + 3 * gamma, 1.0, 0.5, np.random.default_rng(8), n_draws=2000)
    np.testing.assert_array_equal(c - a, np.full_like(a, 3 * gamma))
    # The textbook path leaks the low bits: the same noise gives different doubles.
    noise = np.random.default_rng(8).laplace(0.0, 0.5, 2000)
    assert np.any((0.1 + noise) != (math.nextafter(0.1, 1.0) + noise))


def test_huge_value_beyond_64_bit_sums():
    # |a| >= 2^62 lattice units and noise beyond 2^53: the sum is rounded in Python.
    plan = plan_laplace(1.0, 2.0**38, 1)
    assert plan.t > 2**53
    value = 2.0**60
    out = release_laplace(value, 1.0, 2.0**38, np.random.default_rng(9), n_draws=2000)
    units = np.ldexp(out, -plan.k)
    assert np.all(np.isfinite(out)) and np.all(units == np.rint(units))
    assert np.mean(np.abs(out - value)) == pytest.approx(2.0**38, rel=0.1)


def test_nonfinite_values_are_refused():
    with pytest.raises(ValueError, match="finite"):
        release_laplace(np.array([1.0, np.nan]), 1.0, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="finite"):
        release_gaussian(np.inf, 1.0, 1.0, np.random.default_rng(0))


# ------------------------------------------------------------------ accuracy
@pytest.mark.parametrize("release,plan", [(release_laplace, plan_laplace),
                                          (release_gaussian, plan_gaussian)])
def test_rounding_error_is_at_most_half_a_step(release, plan):
    v = np.random.default_rng(10).normal(size=1000) * 3
    gamma = plan(1.0, 0.5, v.size).gamma
    # The same seed draws the same noise, whatever the value.
    base = release(np.zeros_like(v), 1.0, 0.5, np.random.default_rng(11))
    out = release(v, 1.0, 0.5, np.random.default_rng(11))
    np.testing.assert_array_equal(out - base, np.rint(v / gamma) * gamma)
    assert np.max(np.abs(out - base - v)) <= gamma / 2


def test_noise_matches_the_float_path():
    rng = np.random.default_rng(12)
    v = np.full(200_000, 0.37)
    lap = LaplaceMechanism(1.0, epsilon=2.0)
    err_safe = np.mean(np.abs(lap.randomise(v, rng) - v))
    err_float = np.mean(np.abs(LaplaceMechanism(1.0, epsilon=2.0, floating_point_safe=False)
                               .randomise(v, rng) - v))
    assert err_safe == pytest.approx(0.5, rel=0.01) and err_float == pytest.approx(0.5, rel=0.01)
    gauss = GaussianMechanism(1.0, sigma=0.8, floating_point_safe=True)
    assert np.std(gauss.randomise(v, rng) - v) == pytest.approx(0.8, rel=0.01)


# -------------------------------------------------------------------- audits
def test_audit_safe_releases_vector():
    # Neighbours differing by the full l1 (Laplace) or l2 (Gaussian) sensitivity in
    # the first of three off-lattice coordinates; the statistic is that coordinate.
    rng = np.random.default_rng(13)
    s, s_prime = np.array([0.1, -0.2, 0.3]), np.array([1.1, -0.2, 0.3])
    n = 200_000
    lap = LaplaceMechanism(1.0, epsilon=1.0)
    a, b = lap.randomise(s, rng, n)[:, 0], lap.randomise(s_prime, rng, n)[:, 0]
    assert epsilon_lower_bound(a, b).epsilon_lb <= lap.epsilon
    lap.scale /= 2
    a, b = lap.randomise(s, rng, n)[:, 0], lap.randomise(s_prime, rng, n)[:, 0]
    assert epsilon_lower_bound(a, b).epsilon_lb > 1.0
    delta = 1e-5
    gauss = GaussianMechanism(1.0, epsilon=1.0, delta=delta, floating_point_safe=True)
    a, b = gauss.randomise(s, rng, 2 * n)[:, 0], gauss.randomise(s_prime, rng, 2 * n)[:, 0]
    assert epsilon_lower_bound(a, b, delta=delta).epsilon_lb <= 1.0
    gauss.sigma /= 2
    a, b = gauss.randomise(s, rng, 2 * n)[:, 0], gauss.randomise(s_prime, rng, 2 * n)[:, 0]
    assert epsilon_lower_bound(a, b, delta=delta).epsilon_lb > 1.0


# ---------------------------------------------------------------- randomness
def test_seeded_runs_are_reproducible():
    for release in (release_laplace, release_gaussian):
        a = release(np.ones(50), 1.0, 1.0, 42)
        np.testing.assert_array_equal(a, release(np.ones(50), 1.0, 1.0, 42))
        assert not np.array_equal(a, release(np.ones(50), 1.0, 1.0, 43))
    np.testing.assert_array_equal(sample_discrete_laplace(5, 100, 1),
                                  sample_discrete_laplace(5, 100, 1))


def test_kernel_advances_the_generators_own_stream():
    rng = np.random.default_rng(14)
    first = sample_discrete_laplace(2**36 + 5, 1000, rng)
    second = sample_discrete_laplace(2**36 + 5, 1000, rng)
    assert not np.array_equal(first, second)
    # The kernel consumed words of the stream in place: the Generator's state is a
    # reference stream advanced by a whole number of 64-bit outputs.
    ref = np.random.default_rng(14).bit_generator
    target = rng.bit_generator.state["state"]
    for _ in range(20_000):
        if ref.state["state"] == target:
            break
        ref.advance(1)
    assert ref.state["state"] == target


def test_random_state_none_draws_fresh_entropy():
    a = release_laplace(np.zeros(20), 1.0, 1.0, check_generator(None))
    b = release_laplace(np.zeros(20), 1.0, 1.0, check_generator(None))
    assert not np.array_equal(a, b)


def test_loky_workers_draw_different_noise():
    parallel = Parallel(n_jobs=2, backend="loky")
    fresh = parallel(delayed(release_laplace)(np.zeros(16), 1.0, 1.0, None) for _ in range(4))
    assert all(not np.array_equal(fresh[i], fresh[j]) for i in range(4) for j in range(i))
    seeded = parallel(delayed(release_laplace)(np.zeros(16), 1.0, 1.0, 3) for _ in range(2))
    np.testing.assert_array_equal(seeded[0], seeded[1])
    # A Generator object sent to several processes is copied with its state, so its
    # copies draw the same noise: give each process its own seed (SeedSequence.spawn).
    rng = np.random.default_rng(5)
    copies = parallel(delayed(release_laplace)(np.zeros(16), 1.0, 1.0, rng) for _ in range(2))
    np.testing.assert_array_equal(copies[0], copies[1])
    # Fits with random_state=None in separate workers draw different noise.
    X = np.random.default_rng(0).normal(size=(40, 3)) / 3
    y = X @ np.array([0.5, -0.2, 0.1])
    # Its own noisy coefficients: a refit of 40 rows would shrink them to the mean.
    est = DPOutputPerturbationRegressor(epsilon=1.0, alpha=1.0, decision="fitted")
    fits = parallel(delayed(clone(est).fit)(X, y) for _ in range(2))
    assert not np.array_equal(fits[0].coef_, fits[1].coef_)
