"""Tests of DPSparseMeanEstimator (paper 003, Section 3).

Statistical tests run the release many times through ``_perturb``, with all draws
vectorised. ``fit`` calls ``_release`` (``test_fit_is_release_of_clipped_mean`` pins
that down), which is ``_perturb`` except for the continuous Gaussian projection:
there it draws only the noise that can survive the projection, and the tests of
that section check that its output has ``_perturb``'s law and audit it directly.
"""

import copy
import dataclasses
import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import ndtr
from scipy.stats import ks_2samp, kstest

import skdp_sparse.mean._release as mean_module
from skdp_sparse import DPSparseMeanEstimator
from skdp_sparse.exceptions import PrivacyLeakWarning
from skdp_sparse.mean._kernels import threshold_above as _threshold_above
from skdp_sparse.mean._plan import MEASUREMENT_CLIP as _MEASUREMENT_CLIP
from skdp_sparse.mean._plan import choose_method as _choose_method
from skdp_sparse.mean._plan import n_measurements as _n_measurements
from skdp_sparse.mean._plan import table1_rates as _table1_rates
from skdp_sparse.mean._release import SAMPLED_RELEASE_MIN_FEATURES as _SAMPLED_RELEASE_MIN_FEATURES
from skdp_sparse.mean._release import clipped_mean as _clipped_mean
from skdp_sparse.mean._release import clipped_measurement_mean as _clipped_measurement_mean
from skdp_sparse.mean._release import perturb as _perturb
from skdp_sparse.mean._release import release as _release
from skdp_sparse.mean._sampled_projection import LEVEL_RATIO as _LEVEL_RATIO
from skdp_sparse.mean._sampled_projection import SMALL_MEAN as _SMALL_MEAN
from skdp_sparse.mean._sampled_projection import l1_threshold as _l1_threshold
from skdp_sparse.mean._sampled_projection import (
    sampled_discrete_projection as _sampled_discrete_projection,
)
from skdp_sparse.mean._sampled_projection import (
    sampled_gaussian_projection as _sampled_gaussian_projection,
)
from skdp_sparse.mean._sampled_projection import sampling_levels as _sampling_levels
from skdp_sparse.mean._sampled_projection import sampling_threshold as _sampling_threshold
from skdp_sparse.optim.l1_recovery import GaussianSensingMatrix, basis_pursuit
from skdp_sparse.optim.projections import project_l1_ball
from skdp_sparse.privacy import discrete
from skdp_sparse.privacy.auditing import epsilon_lower_bound
from skdp_sparse.privacy.clipping import clip_rows
from skdp_sparse.privacy.gaussian_ladder import fill_truncated as _fill_truncated
from skdp_sparse.privacy.gaussian_ladder import sample_band as _sample_band
from skdp_sparse.privacy.gaussian_ladder import sample_exceedances as _sample_exceedances
from skdp_sparse.privacy.mechanisms import GaussianMechanism, LaplaceMechanism


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------
def zipf_rows(n, d, s, seed=0, norm=1.0):
    """CSR rows with s nonzeros each, features drawn with weight 1/(j+5), l2 norm ``norm``."""
    rng = np.random.default_rng(seed)
    p = 1.0 / (np.arange(d) + 5.0)
    p /= p.sum()
    cols = np.concatenate([rng.choice(d, s, replace=False, p=p) for _ in range(n)])
    vals = rng.random(n * s) + 0.5
    X = sp.csr_matrix((vals, (np.repeat(np.arange(n), s), cols)), shape=(n, d))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(norm / norms) @ X)


def hard_rows(n, d, s, pool):
    """Rows cycling through a pool of ``pool`` features, s at a time, value 1/sqrt(s).

    The clipped mean has about ``pool`` equal coordinates and l1 norm sqrt(s):
    with ``pool`` ~ sqrt(s) / noise level it is the instance behind the
    high-dimensional rates (the signal sits at the projection's threshold).
    """
    pool = int(min(max(pool, s), d))
    cols = np.arange(n * s) % pool
    X = sp.csr_matrix(
        (np.full(n * s, 1 / math.sqrt(s)), (np.repeat(np.arange(n), s), cols)), shape=(n, d)
    )
    X.sum_duplicates()
    return X


def _plan_of(est, n, d):
    """The plan a fit of ``est`` on an n x d matrix runs (its parameters checked)."""
    est._check_dp_rules()
    return est._plan({"n_samples": n, "n_features": d})


def errors(X, est, n_draws, seed=0):
    """l2 errors of ``n_draws`` independent releases of ``est`` on X, vectorised."""
    n, d = X.shape
    plan = _plan_of(est, n, d)
    mean = _clipped_mean(X, plan)
    released, _ = _perturb(mean, plan, np.random.default_rng(seed), n_draws=n_draws)
    return np.linalg.norm(released - mean, axis=1)


def loglog_slope(x, y):
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


# --------------------------------------------------------------------------
# Fitted attributes, the fit's internal path, Lemma 3.1
# --------------------------------------------------------------------------
@pytest.mark.parametrize("delta, d", [(0.0, 3000), (1e-5, 3000),
                                      (1e-5, _SAMPLED_RELEASE_MIN_FEATURES)])
def test_fit_is_release_of_clipped_mean(delta, d):
    X = zipf_rows(200, d, 5, seed=1, norm=2.0)  # norms above the bound: clipped
    est = DPSparseMeanEstimator(epsilon=0.7, delta=delta, sparsity=5, random_state=3).fit(X)
    plan = _plan_of(est, *X.shape)
    mean = _clipped_mean(X, plan)
    expected = _release(mean, plan, np.random.default_rng(3))
    np.testing.assert_array_equal(est.mean_, expected)
    mech = plan.mechanism
    if delta > 0:
        assert mech.floating_point_safe
        assert _sampling_threshold(mech.sigma, d, plan.radius) is not None
    if delta == 0 or d < _SAMPLED_RELEASE_MIN_FEATURES:
        # Laplace, or a Gaussian too small to pay for the sampled release: _perturb's
        np.testing.assert_array_equal(expected, _perturb(mean, plan,
                                                         np.random.default_rng(3))[0])
    else:  # the sampled (floating-point-safe) Gaussian projection
        sampled = _sampled_discrete_projection(mean, mech.sensitivity, mech.sigma, plan.radius,
                                               None, np.random.default_rng(3))
        np.testing.assert_array_equal(expected, sampled[0])
    assert est.method_ == "projection"
    assert est.n_features_in_ == d
    assert est.mean_.shape == (d,)
    assert np.abs(est.mean_).sum() <= math.sqrt(5) * (1 + 1e-12)
    assert est.n_measurements_ == 0
    assert len(est.privacy_events_) == 1


def test_clipped_mean_matches_clip_rows():
    X = zipf_rows(300, 500, 8, seed=2, norm=3.0)
    X.data *= np.random.default_rng(0).choice([-1, 1], X.nnz)
    est = DPSparseMeanEstimator(norm_bound=0.5, sparsity=2)
    plan = _plan_of(est, *X.shape)
    expected = np.asarray(clip_rows(X, 0.5, 0.5 * math.sqrt(2)).mean(axis=0)).ravel()
    np.testing.assert_allclose(_clipped_mean(X, plan), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(_clipped_mean(X.toarray(), plan), expected, rtol=1e-12,
                               atol=1e-15)
    np.testing.assert_allclose(_clipped_mean(X.tocsc(), plan), expected, rtol=1e-12,
                               atol=1e-15)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize("n, d, s", [(50, 2000, 3), (2000, 200, 10), (500, 20000, 1)])
def test_lemma_3_1_holds_for_every_draw(delta, n, d, s):
    X = zipf_rows(n, d, s, seed=n)
    L = 1.3
    est = DPSparseMeanEstimator(epsilon=0.5, delta=delta, norm_bound=L, sparsity=s,
                                method="projection")
    plan = _plan_of(est, n, d)
    mean = _clipped_mean(X, plan)
    released, noise = _perturb(mean, plan, np.random.default_rng(0), n_draws=50)
    err = np.linalg.norm(released - mean, axis=1)
    bound = np.minimum(
        np.linalg.norm(noise, axis=1),
        np.sqrt(2 * L * math.sqrt(s) * np.abs(noise).max(axis=1)),
    )
    assert np.all(err <= bound * (1 + 1e-9) + 1e-12)
    # the second term must be the active one somewhere in the high-dim cases
    if d > 10 * n:
        assert np.any(bound < np.linalg.norm(noise, axis=1))


def test_projection_never_increases_error():
    X = zipf_rows(400, 100, 4, seed=5)
    est = DPSparseMeanEstimator(epsilon=0.2, delta=1e-5, sparsity=4, method="projection")
    plan = _plan_of(est, *X.shape)
    mean = _clipped_mean(X, plan)
    released, noise = _perturb(mean, plan, np.random.default_rng(1), n_draws=200)
    assert np.all(np.linalg.norm(released - mean, axis=1)
                  <= np.linalg.norm(noise, axis=1) * (1 + 1e-12))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_clipped_mean_kernel_matches_clip_rows(index_dtype):
    # empty rows, rows inside both balls, rows clipped by l2 or by l1, negative values
    X = zipf_rows(300, 500, 8, seed=3, norm=2.0).tolil()
    X[5, :] = 0
    X[6, :3] = 0.1
    X = X.tocsr()
    X.eliminate_zeros()
    X.data *= np.random.default_rng(1).choice([-1, 1], X.nnz)
    X.indices, X.indptr = X.indices.astype(index_dtype), X.indptr.astype(index_dtype)
    plan = _plan_of(DPSparseMeanEstimator(norm_bound=0.9, sparsity=3), *X.shape)
    expected = np.asarray(clip_rows(X, 0.9, 0.9 * math.sqrt(3)).mean(axis=0)).ravel()
    np.testing.assert_allclose(_clipped_mean(X, plan), expected, rtol=1e-12, atol=1e-16)


def test_clipped_mean_sums_duplicates_before_clipping():
    # a row stored as duplicates of one entry has the norm of their sum: split
    # entry by entry it would escape its bound (and the sensitivity with it)
    n, d = 4, 6
    cols = np.array([2, 2, 2, 0, 5, 5])
    vals = np.array([0.6, 0.6, 0.6, 0.5, 0.2, 0.2])
    dup = sp.csr_matrix((vals, cols, np.array([0, 3, 4, 5, 6])), shape=(n, d))
    assert not dup.has_canonical_format
    plan = _plan_of(DPSparseMeanEstimator(norm_bound=1.0, sparsity=2), n, d)
    canonical = dup.copy()
    canonical.sum_duplicates()
    got = _clipped_mean(dup, plan)
    np.testing.assert_allclose(got, _clipped_mean(canonical, plan), rtol=1e-15)
    assert got[2] == pytest.approx(1.0 / n)  # 1.8 clipped to the bound 1
    assert np.array_equal(dup.data, vals)  # the input is not modified


def test_clipped_mean_of_huge_rows_is_clipped_not_zeroed():
    # squares of 1e200 overflow; the row must still be scaled onto the ball, not to 0
    X = sp.csr_matrix(np.array([[3e200, 4e200, 0.0], [0.0, 0.3, 0.4]]))
    plan = _plan_of(DPSparseMeanEstimator(norm_bound=1.0, sparsity=3), *X.shape)
    np.testing.assert_allclose(_clipped_mean(X, plan), [0.3, 0.55, 0.2], rtol=1e-12)


def test_clipped_mean_in_numpy_adds_as_the_kernel_does(monkeypatch, counted_kernel):
    # A process's first means, and rows whose squares overflow (the kernel hands them
    # back rather than compile their rescaling with every first fit), are added in
    # NumPy: same products in the same order, so the kernel's bits.
    from skdp_sparse.mean import _release
    from skdp_sparse.mean._kernels import ROW_BLOCK, clipped_mean_csr
    from skdp_sparse.utils._first_use import FirstUseBudget

    X = zipf_rows(3000, 500, 9)
    X.data *= np.random.default_rng(1).exponential(size=X.nnz)
    kernel, numpy = np.empty(500), np.full(500, np.nan)
    for max_l2, max_l1 in [(1.0, 2.0), (0.3, np.inf), (np.inf, 0.7)]:
        assert clipped_mean_csr(kernel, np.empty(ROW_BLOCK), X.data,
                                _release._unsigned(X.indices), _release._unsigned(X.indptr),
                                max_l2, max_l1, 2999.0) == 0
        assert _release._clipped_mean_numpy(numpy, X, max_l2, max_l1, 2999.0) == 0
        np.testing.assert_array_equal(numpy, kernel)
    # within the budget clipped_mean adds in NumPy, past it in the kernel
    plan = _plan_of(DPSparseMeanEstimator(norm_bound=1.0, sparsity=9), *X.shape)
    budget = FirstUseBudget(counted_kernel(clipped_mean_csr), X.nnz)
    monkeypatch.setattr(_release, "_NUMPY_MEAN", budget)
    first = _clipped_mean(X, plan)
    assert budget.kernel.calls == 0 and budget.left == 0
    monkeypatch.setattr(_release, "clipped_mean_csr", budget.kernel)
    np.testing.assert_array_equal(_clipped_mean(X, plan), first)
    assert budget.kernel.calls == 1


@pytest.mark.parametrize("bad_index", [-1, 40])
def test_clipped_mean_refuses_an_index_outside_the_matrix(bad_index):
    X = sp.csr_matrix((np.ones(3), np.array([0, 2, 5]), np.array([0, 2, 3])), shape=(2, 40))
    X.indices[1] = bad_index  # bypasses scipy's checks, as a corrupted matrix would
    plan = _plan_of(DPSparseMeanEstimator(sparsity=1), *X.shape)
    with pytest.raises(ValueError, match="not a valid CSR matrix"):
        _clipped_mean(X, plan)
    X.data[0] = 1e300  # and on the path of rows whose squares overflow
    with pytest.raises(ValueError, match="not a valid CSR matrix"):
        _clipped_mean(X, plan)


# --------------------------------------------------------------------------
# Calibration and accounting
# --------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["projection", "laplace"])
def test_laplace_scale_and_spend(method):
    n, d, s, L, eps = 300, 40_000, 7, 2.5, 0.8
    X = zipf_rows(n, d, s)
    est = DPSparseMeanEstimator(epsilon=eps, norm_bound=L, sparsity=s, method=method,
                                random_state=0).fit(X)
    b = 2 * L * math.sqrt(s) / (n * eps)
    # the formula's scale, up to the relative slack (at most 2^-16) a
    # floating-point-safe Laplace mechanism adds for its lattice rounding
    assert b <= est.noise_scale_ <= b * (1 + 2**-15)
    assert est.noise_scale_ == LaplaceMechanism(2 * L * math.sqrt(s) / n, epsilon=eps).scale
    assert est.epsilon_spent_ == eps
    assert est.delta_spent_ == 0.0
    # the noise really has that scale: E|Lap(b)| = b, sd of the mean of |.| is b / sqrt(d)
    plan = _plan_of(est, n, d)
    _, noise = _perturb(np.zeros(d), plan, np.random.default_rng(1))
    assert np.mean(np.abs(noise)) == pytest.approx(b, rel=5 / math.sqrt(d))


def test_laplace_without_sparsity_uses_sqrt_d():
    n, d = 100, 400
    X = zipf_rows(n, d, 3)
    est = DPSparseMeanEstimator(epsilon=1.0, method="auto").fit(X)
    assert est.method_ == "laplace"
    b = 2 * math.sqrt(d) / n
    assert b <= est.noise_scale_ <= b * (1 + 2**-15)


@pytest.mark.parametrize("method", ["projection", "gaussian"])
@pytest.mark.parametrize("eps, delta", [(1.0, 1e-5), (0.3, 1e-8), (4.0, 1e-3)])
def test_gaussian_sigma_is_analytic_calibration(method, eps, delta):
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import pld, rdp

    n, d, s, L = 500, 5000, 4, 1.7
    X = zipf_rows(n, d, s)
    # the float path (the safe one is accounted in zCDP: test_mean_safe.py)
    est = DPSparseMeanEstimator(epsilon=eps, delta=delta, norm_bound=L, sparsity=s,
                                method=method, floating_point_safe=False,
                                random_state=0)
    with pytest.warns(PrivacyLeakWarning):
        est.fit(X)
    sensitivity = 2 * L / n
    multiplier = est.noise_scale_ / sensitivity
    # Balle & Wang's calibration as implemented independently by dp_accounting:
    # ours is the same up to the bisection tolerance, and never below it.
    reference = dp_accounting.get_sigma_gaussian(eps, delta)
    assert multiplier >= reference * (1 - 1e-9)
    assert multiplier == pytest.approx(reference, rel=1e-6)
    # The privacy curve of a Gaussian mechanism depends only on Delta/sigma, so the
    # accountants' unit-sensitivity event with this multiplier is our mechanism.
    acc = pld.PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(multiplier))
    assert acc.get_epsilon(delta) == pytest.approx(eps, rel=2e-3)
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(multiplier))
    assert eps * (1 - 1e-6) <= acc.get_epsilon(delta) <= 1.5 * eps
    assert est.epsilon_spent_ <= eps * (1 + 1e-9)
    assert est.epsilon_spent_ == pytest.approx(eps, rel=1e-6)
    assert est.delta_spent_ == delta
    plan = _plan_of(est, n, d)
    _, noise = _perturb(np.zeros(d), plan, np.random.default_rng(2))
    assert np.std(noise) == pytest.approx(est.noise_scale_, rel=5 / math.sqrt(2 * d))


def test_epsilon_inf_means_no_noise():
    X = zipf_rows(100, 1000, 5, seed=3, norm=1.5)
    for method, delta in [("projection", 0.0), ("projection", 1e-5), ("gaussian", 1e-5),
                          ("laplace", 0.0), ("l1_recovery", 1e-5)]:
        est = DPSparseMeanEstimator(epsilon=np.inf, delta=delta, sparsity=5,
                                    method=method).fit(X)
        exact = _clipped_mean(X, _plan_of(est, *X.shape))
        np.testing.assert_allclose(est.mean_, exact, rtol=1e-12, atol=1e-15)
        assert est.epsilon_spent_ == np.inf
        assert est.noise_scale_ == 0.0


def test_random_state():
    X = zipf_rows(100, 500, 3)
    a = DPSparseMeanEstimator(sparsity=3, random_state=7).fit(X).mean_
    b = DPSparseMeanEstimator(sparsity=3, random_state=7).fit(X).mean_
    c = DPSparseMeanEstimator(sparsity=3, random_state=None).fit(X).mean_
    d = DPSparseMeanEstimator(sparsity=3, random_state=None).fit(X).mean_
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(c, d)
    assert not np.array_equal(a, c)


def test_fitted_attributes_are_public_only():
    X = zipf_rows(100, 500, 3, norm=4.0)
    est = DPSparseMeanEstimator(delta=1e-5, sparsity=3, random_state=0).fit(X)
    fitted = {k for k in vars(est) if k.endswith("_") and not k.startswith("_")}
    assert fitted == {"mean_", "method_", "noise_scale_", "n_measurements_",
                      "floating_point_safe_", "n_features_in_", "epsilon_spent_",
                      "delta_spent_", "privacy_events_"}
    # the same fit on rescaled data (different norms, different clipping) reports
    # the same noise scale: nothing data-dependent besides mean_
    est2 = DPSparseMeanEstimator(delta=1e-5, sparsity=3, random_state=0).fit(X * 0.1)
    assert est2.noise_scale_ == est.noise_scale_
    assert est2.privacy_events_ == est.privacy_events_


def test_floating_point_safe_auto_is_safe_for_every_method():
    X = zipf_rows(200, 3000, 4, seed=2)
    for method, delta, name in [("projection", 0.0, "discrete_laplace"),
                                ("laplace", 0.0, "discrete_laplace"),
                                ("projection", 1e-6, "discrete_gaussian"),
                                ("gaussian", 1e-6, "discrete_gaussian"),
                                ("l1_recovery", 1e-6, "discrete_gaussian")]:
        est = DPSparseMeanEstimator(delta=delta, sparsity=4, method=method,
                                    random_state=0).fit(X)
        assert est.floating_point_safe_ is True
        assert est.privacy_events_[0].name == name


@pytest.mark.parametrize("safe", [True, False])
def test_the_sampled_projection_draws_the_planned_noise(monkeypatch, safe):
    """At large d the projection mechanism's release goes through the sampled
    projection: the noise it is asked for is the fit's calibrated one (sensitivity
    2 / n, the analytic Gaussian's sigma for (epsilon, delta) on the float path, the
    lattice's slightly larger one on the safe path), not a scale of its own."""
    asked = []
    names = ("sampled_discrete_projection", "sampled_gaussian_projection")
    for name in names:
        real = getattr(mean_module, name)

        def spy(mean, *args, _real=real, _name=name, **kwargs):
            asked.append((_name, args))
            return _real(mean, *args, **kwargs)

        monkeypatch.setattr(mean_module, name, spy)
    n, d, s, eps, delta = 400, _SAMPLED_RELEASE_MIN_FEATURES, 5, 1.0, 1e-6
    X = zipf_rows(n, d, s, seed=6)
    est = DPSparseMeanEstimator(epsilon=eps, delta=delta, sparsity=s, method="projection",
                                floating_point_safe=safe, random_state=3).fit(X)
    assert [name for name, _ in asked] == [names[0] if safe else names[1]]
    args = asked[0][1]
    analytic = GaussianMechanism(2 / n, epsilon=eps, delta=delta).sigma
    if safe:
        sensitivity, sigma = args[0], args[1]
        assert sensitivity == pytest.approx(2 / n, rel=1e-12)
        assert 1.0 * analytic < sigma < 1.10 * analytic
    else:
        sigma = args[0]
        assert sigma == pytest.approx(analytic, rel=1e-9)
    assert sigma == pytest.approx(est.noise_scale_, rel=1e-12)


@pytest.mark.parametrize("method", ["projection", "gaussian"])
def test_floating_point_safe_gaussian_is_lattice_noise_with_its_spend(method):
    # the projection (which takes the sampled path at this size) and the plain baseline
    n, d, s, eps, delta = 400, _SAMPLED_RELEASE_MIN_FEATURES, 5, 1.0, 1e-6
    X = zipf_rows(n, d, s, seed=6)
    est = DPSparseMeanEstimator(epsilon=eps, delta=delta, sparsity=s, method=method,
                                floating_point_safe=True, random_state=3).fit(X)
    assert est.floating_point_safe_
    assert est.privacy_events_[0].name == "discrete_gaussian"
    # the spend is the budget asked for, accounted by zCDP with the rounding included
    assert est.epsilon_spent_ <= eps
    assert est.epsilon_spent_ == pytest.approx(eps, rel=1e-3)
    assert est.delta_spent_ == delta
    analytic = GaussianMechanism(2 / n, epsilon=eps, delta=delta).sigma
    assert 1.03 * analytic < est.noise_scale_ < 1.10 * analytic
    # the noisy mean is a lattice vector; the release is its projection (or itself)
    plan = _plan_of(est, n, d)
    mean = _clipped_mean(X, plan)
    noisy = plan.mechanism.randomise(mean, np.random.default_rng(3))
    gamma = discrete.plan_gaussian(2 / n, est.noise_scale_, d).gamma
    assert np.all(np.mod(noisy, gamma) == 0)
    if method == "gaussian":
        np.testing.assert_array_equal(est.mean_, noisy)
    else:
        sampled = _sampled_discrete_projection(mean, 2 / n, est.noise_scale_, math.sqrt(s),
                                               None, np.random.default_rng(3))
        np.testing.assert_array_equal(est.mean_, sampled[0])
        assert np.abs(est.mean_).sum() == pytest.approx(math.sqrt(s), rel=1e-12)


def test_floating_point_safe_l1_recovery_and_opt_outs():
    n, d, s, delta = 60, 8000, 3, 1e-5
    X = zipf_rows(n, d, s, seed=2)
    est = DPSparseMeanEstimator(epsilon=2.0, delta=delta, sparsity=s, method="l1_recovery",
                                floating_point_safe=True, random_state=0).fit(X)
    assert est.n_measurements_ > 0 and est.floating_point_safe_
    assert est.privacy_events_[0].name == "discrete_gaussian"
    assert est.epsilon_spent_ <= 2.0 and est.epsilon_spent_ == pytest.approx(2.0, rel=1e-3)
    # False: the textbook Laplace mechanism, exactly calibrated
    lap = DPSparseMeanEstimator(epsilon=0.5, sparsity=s, floating_point_safe=False,
                                random_state=0).fit(X)
    assert not lap.floating_point_safe_
    assert lap.privacy_events_[0].name == "laplace"
    assert lap.noise_scale_ == 2 * math.sqrt(s) / n / 0.5
    assert lap.epsilon_spent_ == pytest.approx(0.5, rel=1e-12)


# --------------------------------------------------------------------------
# Error rates (Table 1)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("method, delta", [("gaussian", 1e-5), ("laplace", 0.0)])
def test_plain_noise_error_is_one_over_n_in_low_dimension(method, delta):
    ns = [500, 2000, 8000]
    med = [np.median(errors(zipf_rows(n, 20, 2, seed=0),
                            DPSparseMeanEstimator(delta=delta, sparsity=2, method=method),
                            400)) for n in ns]
    assert loglog_slope(ns, med) == pytest.approx(-1.0, abs=0.06)


def test_plain_noise_error_in_d():
    ds = [10, 100, 1000]
    gauss = [np.median(errors(zipf_rows(200, d, 1, seed=0),
                              DPSparseMeanEstimator(delta=1e-5, method="gaussian"), 200))
             for d in ds]
    # without sparsity the l1 sensitivity is 2 L sqrt(d) / n: error ~ b sqrt(d) ~ d
    lap = [np.median(errors(zipf_rows(200, d, 1, seed=0),
                            DPSparseMeanEstimator(method="laplace"), 200)) for d in ds]
    assert loglog_slope(ds, gauss) == pytest.approx(0.5, abs=0.05)
    assert loglog_slope(ds, lap) == pytest.approx(1.0, abs=0.05)


def test_projection_error_is_one_over_n_in_low_dimension():
    # mean strictly inside the l1 ball, d small: the projection is eventually inactive
    ns = [2000, 8000, 32000]
    med = [np.median(errors(zipf_rows(n, 20, 1, seed=0),
                            DPSparseMeanEstimator(delta=1e-5, sparsity=4,
                                                  method="projection"), 200))
           for n in ns]
    assert loglog_slope(ns, med) == pytest.approx(-1.0, abs=0.1)


def _worst_error(n, d, s, delta, n_draws=6):
    """Median error on the hardest of a few ``hard_rows`` instances."""
    est = DPSparseMeanEstimator(epsilon=1.0, delta=delta, sparsity=s, method="projection")
    scale = _plan_of(est, n, d).noise_scale
    return max(np.median(errors(hard_rows(n, d, s, math.sqrt(s) / (c * scale)), est, n_draws))
               for c in (0.5, 1.0, 2.0, 4.0))


@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_projection_high_dimensional_rates(delta):
    """Worst-case error over the hard family follows Table 1 in the high-dim regime:
    ~ n^-1/2; ~ s^1/2 (pure) or s^1/4 (approximate); only logarithmic in d."""
    d, s, n = 100_000, 8, 500
    ns = [250, 1000, 4000]
    by_n = [_worst_error(m, d, s, delta) for m in ns]
    assert loglog_slope(ns, by_n) == pytest.approx(-0.5, abs=0.12)
    ss = [2, 8, 32]
    by_s = [_worst_error(n, d, t, delta) for t in ss]
    assert loglog_slope(ss, by_s) == pytest.approx(0.5 if delta == 0 else 0.25, abs=0.1)
    ds = [10_000, 100_000, 300_000]
    by_d = [_worst_error(n, e, s, delta) for e in ds]
    assert abs(loglog_slope(ds, by_d)) < 0.1
    # and the level matches the rate, not only its shape
    for (m, e, t), err in zip(
        [(m, d, s) for m in ns] + [(n, d, t) for t in ss] + [(n, e, s) for e in ds],
        by_n + by_s + by_d,
        strict=True,
    ):
        rate = _table1_rates(m, e, t, 1.0, delta)["projection"]
        assert 0.2 * rate < err < 3 * rate


def test_projection_beats_plain_gaussian_in_high_dimension():
    n, d, s = 1000, 50_000, 5  # d >> n eps
    X = zipf_rows(n, d, s, seed=4)
    proj = errors(X, DPSparseMeanEstimator(delta=1e-5, sparsity=s, method="projection"), 10)
    gauss = errors(X, DPSparseMeanEstimator(delta=1e-5, sparsity=s, method="gaussian"), 10)
    assert np.median(proj) < 0.15 * np.median(gauss)


# --------------------------------------------------------------------------
# Privacy audits
# --------------------------------------------------------------------------
def _neighbours(n, d, s):
    """Worst-case replace-one pair: row 0 is an s-sparse vector of norm 3 (clipped to 1)
    in S and its opposite in S'; the other rows are zero."""
    z = np.zeros(d)
    z[:s] = 3 / math.sqrt(s)
    X = np.zeros((n, d))
    X[0] = z
    Xp = X.copy()
    Xp[0] = -z
    return X, Xp


def _audit(plan, a, b, statistic, n_draws, delta):
    rng = np.random.default_rng(12345)
    out_s, _ = _perturb(a, plan, rng, n_draws=n_draws)
    out_sp, _ = _perturb(b, plan, rng, n_draws=n_draws)
    return epsilon_lower_bound(statistic(out_s), statistic(out_sp), delta=delta, rng=0)


def _halve_noise(plan):
    """The same plan with a mechanism that draws half the noise but claims the same."""
    weaker = copy.copy(plan.mechanism)
    if isinstance(weaker, LaplaceMechanism):
        weaker.scale /= 2
    else:
        weaker.sigma /= 2
    return dataclasses.replace(plan, mechanism=weaker)


def test_audit_laplace_projection():
    n, d, s, eps = 50, 6, 2, 1.0
    X, Xp = _neighbours(n, d, s)
    plan = _plan_of(DPSparseMeanEstimator(epsilon=eps, sparsity=s, method="projection"), n, d)
    a, b = _clipped_mean(X, plan), _clipped_mean(Xp, plan)
    assert np.abs(a - b).sum() == pytest.approx(2 * math.sqrt(s) / n)  # the l1 sensitivity

    def llr(Y):  # Laplace log-likelihood ratio (times b): the most powerful statistic
        return (np.abs(Y - b) - np.abs(Y - a)).sum(axis=1)

    honest = _audit(plan, a, b, llr, 100_000, 0.0)
    assert honest.epsilon_lb <= eps
    assert honest.epsilon_lb > 0.8 * eps  # the audit is tight enough to mean something
    broken = _audit(_halve_noise(plan), a, b, llr, 100_000, 0.0)
    assert broken.epsilon_lb > eps


def test_audit_gaussian_projection():
    # n large enough that the projection rarely clips the noise (it would only help)
    n, d, s, eps, delta = 500, 6, 2, 1.0, 1e-5
    X, Xp = _neighbours(n, d, s)
    plan = _plan_of(DPSparseMeanEstimator(epsilon=eps, delta=delta, sparsity=s,
                                 method="projection"), n, d)
    a, b = _clipped_mean(X, plan), _clipped_mean(Xp, plan)
    assert np.linalg.norm(a - b) == pytest.approx(2 / n)  # the l2 sensitivity

    def proj(Y):
        return Y @ (a - b)

    honest = _audit(plan, a, b, proj, 1_000_000, delta)
    assert honest.epsilon_lb <= eps
    broken = _audit(_halve_noise(plan), a, b, proj, 1_000_000, delta)
    assert broken.epsilon_lb > eps


@pytest.mark.slow
def test_audit_whole_fit_laplace():
    n, d, s, eps = 20, 4, 2, 1.0
    X, Xp = _neighbours(n, d, s)
    runs = 20_000
    est = DPSparseMeanEstimator(epsilon=eps, sparsity=s, method="projection")
    plan = _plan_of(est, n, d)
    a, b = _clipped_mean(X, plan), _clipped_mean(Xp, plan)

    def llr(Y):
        return (np.abs(Y - b) - np.abs(Y - a)).sum(axis=1)

    out = [np.array([est.set_params(random_state=2 * i + k).fit(data).mean_
                     for i in range(runs)]) for k, data in enumerate((X, Xp))]
    assert epsilon_lower_bound(llr(out[0]), llr(out[1]), rng=0).epsilon_lb <= eps


# --------------------------------------------------------------------------
# Sampled Gaussian projection: the law of _perturb's, with fewer draws
# --------------------------------------------------------------------------
def _sampled_runs(mean, sigma, radius, t, runs, seed, n_levels=None):
    rng = np.random.default_rng(seed)
    kw = {} if n_levels is None else {"n_levels": n_levels}
    out = [_sampled_gaussian_projection(mean, sigma, radius, t, rng, **kw) for _ in range(runs)]
    released = np.array([o[0] for o in out])
    return (released, np.array([o[1] for o in out]), np.array([o[2] for o in out]),
            np.array([o[4] for o in out]))


def _full_runs(mean, sigma, radius, runs, seed):
    plan = _plan_of(DPSparseMeanEstimator(sparsity=1), 10, 10)  # replaced below
    plan = dataclasses.replace(plan, mechanism=GaussianMechanism(1.0, sigma=sigma),
                               radius=radius)
    released, noise = _perturb(mean, plan, np.random.default_rng(seed), n_draws=runs)
    a = np.abs(mean + noise)
    tau = np.array([_l1_threshold(r, radius) if r.sum() > radius else 0.0 for r in a])
    return released, tau


def _signal(d, k, seed=0):
    """A mean with k nonzeros: a few large, most of them small (as a Zipf-like mean)."""
    rng = np.random.default_rng(seed)
    mean = np.zeros(d)
    support = rng.choice(d, k, replace=False)
    mean[support] = rng.choice([-1, 1], k) * 0.4 / (np.arange(k) + 1.0)
    return mean, support


# Regimes of the sampled release (d = 2000, R = 1, sigma = 0.02): where stage 1 stops
# (top level, middle ones, the lowest) and the fallback, with large and small means.
# (At this d the public t keeps a wide margin below the pure-noise threshold, about
# 1.85 sigma; t = 1.75 sigma makes pure noise stop at the lowest level often.)
_REGIMES = {
    # name: (signal scale, small means, t in sigmas or None for the public t, n_levels)
    "top_level": (1.0, False, None, None),
    "middle_level": (0.3, False, None, None),
    "lowest_level": (0.0, False, 1.75, None),
    "small_means": (0.3, True, None, None),
    "fallback": (1.0, False, 2.36, None),
    "fallback_single_level": (1.0, False, 2.36, 1),
    "single_level": (1.0, False, None, 1),
}


@pytest.mark.parametrize("regime", list(_REGIMES))
def test_sampled_projection_has_the_law_of_the_full_one(regime):
    d, k, radius, runs, sigma = 2000, 300, 1.0, 3000, 0.02
    scale, small, t_sigmas, n_levels = _REGIMES[regime]
    mean, support = _signal(d, k)
    mean *= scale
    if small:
        # the first support coordinate stays large; the others go below _SMALL_MEAN * sigma,
        # both signs, so they take the envelope-and-thinning path
        mean[support[1:]] = (np.random.default_rng(5).uniform(-1, 1, k - 1)
                             * _SMALL_MEAN * sigma)
    t_public = _sampling_threshold(sigma, d, radius)
    assert t_public is not None
    t = t_public if t_sigmas is None else t_sigmas * sigma
    levels = _sampling_levels(sigma, t, n_levels or 8)
    fast, tau_fast, full, stop = _sampled_runs(mean, sigma, radius, None if t_sigmas is None
                                               else t, runs, seed=1, n_levels=n_levels)
    ref, tau_ref = _full_runs(mean, sigma, radius, runs, seed=2)
    # the regime is the one named
    if regime == "top_level":
        assert np.all(stop == levels[0]) and not full.any()
    elif regime in ("middle_level", "small_means"):
        assert np.mean((stop > levels[-1]) & (stop < levels[0])) > 0.9 and not full.any()
    elif regime == "lowest_level":
        assert np.mean(stop == levels[-1]) > 0.15 and full.mean() < 0.05
    elif regime.startswith("fallback"):
        # at about the median threshold the full branch is taken half the time
        assert 0.3 < full.mean() < 0.7
        assert np.all(stop[full] == levels[-1])
    else:
        assert levels.size == 1 and not full.any()
    assert np.all(tau_fast[~full] >= stop[~full])
    off = np.setdiff1d(np.arange(d), support)[:2]
    stats = {
        "largest mean coordinate": lambda r: r[:, support[0]],
        "small mean coordinate": lambda r: r[:, support[-1]],
        "off-support coordinate": lambda r: r[:, off[0]],
        "another off-support coordinate": lambda r: r[:, off[1]],
        "error": lambda r: np.linalg.norm(r - mean, axis=1),
        "l1 norm": lambda r: np.round(np.abs(r).sum(axis=1), 9),
        "nonzeros": lambda r: np.count_nonzero(r, axis=1),
    }
    # (asymptotic p-values: some statistics have ties, where the exact ones are not computed)
    for name, f in stats.items():
        assert ks_2samp(f(fast), f(ref), method="asymp").pvalue > 1e-3, name
    assert ks_2samp(tau_fast, tau_ref, method="asymp").pvalue > 1e-3, "tau"
    # the off-support coordinates are exactly 0 as often in both
    for j in off:
        p0, p1 = np.mean(fast[:, j] == 0), np.mean(ref[:, j] == 0)
        assert abs(p0 - p1) < 5 * math.sqrt(p1 * (1 - p1) / runs) + 1e-3


def _band_cdf(x, m, sigma, lower, upper):
    """CDF of N(m, sigma^2) given lower < |z| <= upper."""
    x = np.asarray(x, dtype=float)

    def F(v):
        return ndtr((v - m) / sigma)

    neg = np.clip(F(np.minimum(x, -lower)) - F(-upper), 0.0, None)
    pos = np.clip(F(np.minimum(x, upper)) - F(lower), 0.0, None)
    return (neg + pos) / ((F(-lower) - F(-upper)) + (F(upper) - F(lower)))


def _band_buffers(d):
    return (np.empty(d, np.int64), np.empty(d), np.zeros(-(-d // 64), np.uint64),
            np.empty(d, np.int64), np.empty(d))


def _seen_bits(seen, d):
    """The bitmap ``seen`` as one bool a position."""
    return np.unpackbits(seen.view(np.uint8), bitorder="little")[:d].astype(bool)


@pytest.mark.parametrize("m_over_b", [0.0, 0.5, -1.0, 1.0, -0.3])
@pytest.mark.parametrize("lower, upper", [(0.8, np.inf), (1.5, np.inf), (3.0, np.inf),
                                          (1.5, 1.7), (1.0, 2.6), (0.8, 1.0)])
@pytest.mark.parametrize("b_over_sigma", [_SMALL_MEAN, 0.5])
def test_band_has_the_exact_conditional_law(m_over_b, lower, upper, b_over_sigma):
    # d iid coordinates of mean m (|m| <= b), given |z_j| <= upper: the kept ones are
    # exactly those with lower < |z_j|, with z_j's conditional law given that; checked
    # against the exact probability and CDF. Positions already seen are never kept.
    # (The fit's b is _SMALL_MEAN sigma; at b = sigma / 2 the envelope's corrections,
    # the thinning and the P_b / P_m factor, are large enough to be seen: the factor
    # moves the count by about 10 standard deviations in the band (0.8, 1] sigma.)
    d, sigma = 200_000, 0.7
    lower, upper, b = lower * sigma, upper * sigma, b_over_sigma * sigma
    m = m_over_b * b
    idx, val, seen, pos, cand = _band_buffers(d)
    marked = np.arange(d) % 3 == 0
    seen[:] = np.packbits(marked, bitorder="little").view(np.uint64)
    k = _sample_band(np.full(d, m), sigma, lower, upper, b, np.random.default_rng(7),
                     idx, val, 0, seen, pos, cand)
    idx, z = idx[:k], val[:k]
    assert np.all(np.diff(idx) > 0) and np.all(idx % 3 != 0)
    assert np.all((np.abs(z) > lower) & (np.abs(z) <= upper))
    now = _seen_bits(seen, d)
    assert np.all(now[idx]) and now.sum() == k + marked.sum()

    def mass(c):  # P(|z| <= c)
        return 1.0 if np.isinf(c) else ndtr((c - m) / sigma) - ndtr((-c - m) / sigma)

    q = (mass(upper) - mass(lower)) / mass(upper)
    n_eligible = d - (d + 2) // 3
    assert abs(k - n_eligible * q) < 5 * math.sqrt(n_eligible * q * (1 - q))
    assert kstest(z, lambda x: _band_cdf(x, m, sigma, lower, upper)).pvalue > 1e-3
    # the positions are a Bernoulli process on the eligible ones: none favoured
    assert kstest(idx // 3, "randint", args=(0, d // 3)).pvalue > 1e-3


def test_exceedances_draw_every_big_coordinate_and_stop_at_a_level():
    d, sigma, b = 5000, 1.0, 0.05
    mean = np.zeros(d)
    big = np.arange(0, d, 7)
    mean[big] = np.where(np.arange(big.size) % 2, 1, -1) * np.linspace(0.051, 3, big.size)
    levels = _sampling_levels(sigma, 2.0, 4)
    assert levels.size == 4 and levels[-1] == 2.0
    # radius infinite: never stops, every level is revealed
    idx, val = np.empty(d, np.int32), np.empty(d)
    scratch = (np.empty(-(-d // 64), np.uint64), np.empty(d, np.int32), np.empty(d))
    count, level, found = _sample_exceedances(mean, sigma, levels, b, np.inf,
                                              np.random.default_rng(0), idx, val, *scratch)
    assert (level, found) == (3, False)
    assert np.array_equal(idx[:big.size], big)
    rest, z = idx[big.size:count], val[big.size:count]
    assert np.all(np.abs(z) > 2.0) and not np.isin(rest, big).any()
    assert np.unique(idx[:count]).size == count
    # a tiny radius: stops at the first level, where big values alone already exceed it
    count, level, found = _sample_exceedances(mean, sigma, levels, b, 1e-9,
                                              np.random.default_rng(0), idx, val, *scratch)
    assert (level, found) == (0, True)
    assert np.all(np.abs(val[big.size:count]) > levels[0])


def test_sampling_levels_are_public_and_geometric():
    sigma, t = 0.3, 1.5 * 0.3
    levels = _sampling_levels(sigma, t)
    assert levels[-1] == t and np.all(np.diff(levels) < 0)
    p = 2 * ndtr(-levels / sigma)
    np.testing.assert_allclose(p[:-1] / p[1:], _LEVEL_RATIO, rtol=1e-9)
    # a function of sigma and t only, scaling with sigma
    np.testing.assert_allclose(_sampling_levels(2 * sigma, 2 * t), 2 * levels, rtol=1e-12)
    assert np.array_equal(_sampling_levels(sigma, t, 1), [t])
    # tiny t: the bands would be too wide for the envelope, a single level
    assert np.array_equal(_sampling_levels(sigma, 1e-300), [1e-300])


def test_threshold_above_is_the_projection_threshold():
    rng = np.random.default_rng(3)
    for _ in range(20):
        z = rng.normal(size=rng.integers(1, 3000)) * rng.choice([0.1, 1.0])
        radius = float(rng.uniform(0.1, 20))
        t = float(rng.uniform(0, 1.5))
        a = np.abs(z)
        tau = _threshold_above(z, t, radius, np.empty(z.size))
        if np.clip(a - t, 0, None).sum() >= radius:
            assert tau >= t
            assert tau == pytest.approx(_l1_threshold(a, radius), rel=1e-12, abs=1e-15)
            assert np.clip(a - tau, 0, None).sum() == pytest.approx(radius, rel=1e-10)
        else:
            assert tau == -1.0


@pytest.mark.parametrize("t_over_sigma", [0.3, 1.0, 2.0])
@pytest.mark.parametrize("m_over_t", [0.0, 0.4, -0.9])
def test_fill_truncated_has_the_truncated_law(t_over_sigma, m_over_t):
    # both samplers (normal proposal for t >= sigma, uniform below) give N(m, sigma^2)
    # conditioned on |z| <= t
    d, sigma = 50_000, 0.5
    t = t_over_sigma * sigma
    m = m_over_t * t
    full = np.full(d, np.nan)
    drawn = np.zeros(d, dtype=np.bool_)
    drawn[::10] = True
    _fill_truncated(full, np.full(d, m), drawn, sigma, t, np.random.default_rng(1))
    assert np.all(np.isnan(full[drawn]))
    z = full[~drawn]
    assert np.all(np.abs(z) <= t)
    lo, hi = ndtr((-t - m) / sigma), ndtr((t - m) / sigma)
    assert kstest(z, lambda x: (ndtr((np.clip(x, -t, t) - m) / sigma) - lo) / (hi - lo)
                  ).pvalue > 1e-3


@pytest.mark.parametrize("fmt", ["csr", "csc", "dense"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_fit_rejects_non_finite_values_before_any_noise(fmt, bad):
    X = zipf_rows(30, 400, 3, seed=0).tolil()
    X[4, 7] = bad
    X = X.toarray() if fmt == "dense" else X.asformat(fmt)
    rng = np.random.default_rng(0)
    est = DPSparseMeanEstimator(epsilon=1.0, delta=1e-6, sparsity=3, random_state=rng)
    state = copy.deepcopy(rng.bit_generator.state)
    with pytest.raises(ValueError, match="NaN or infinity"):
        est.fit(X)
    assert rng.bit_generator.state == state


def test_sampled_projection_falls_back_below_t():
    d, k, radius, sigma = 2000, 300, 1.0, 0.02
    mean, _ = _signal(d, k)
    rng = np.random.default_rng(0)
    for t in (2.36 * sigma, 5 * sigma):
        for n_levels in (1, 8):
            for _ in range(25):
                released, tau, full, (idx, z), stop = _sampled_gaussian_projection(
                    mean, sigma, radius, t, rng, n_levels=n_levels)
                assert full == (tau < t)
                assert stop >= t and (stop == t or not full)
                assert np.abs(released).sum() <= radius * (1 + 1e-12)
                if full:
                    assert idx.size == d
                else:  # nothing undrawn survives
                    assert tau >= stop
                    assert np.isin(np.flatnonzero(released), idx).all()
    # a noise too small to leave the ball: tau = 0 < t, the whole z is drawn and released
    small = mean * 0.5 / np.abs(mean).sum()
    released, tau, full, _, _ = _sampled_gaussian_projection(small, 1e-7, radius, 3e-7, rng)
    assert full and tau == 0.0
    assert np.count_nonzero(released) == d
    np.testing.assert_allclose(released, small, atol=1e-5)


def test_sampled_projection_threshold_is_exact():
    # with every value drawn (t = 0 samples all off-support coordinates), the release
    # is the projection of the drawn vector
    d, k, radius, sigma = 500, 50, 1.0, 0.05
    mean, support = _signal(d, k)
    rng = np.random.default_rng(4)
    for _ in range(20):
        released, tau, full, (idx, z_drawn), _ = _sampled_gaussian_projection(
            mean, sigma, radius, 1e-300, rng, n_levels=1)
        assert not full and np.array_equal(np.sort(idx), np.arange(d))
        assert np.abs(released).sum() == pytest.approx(radius, rel=1e-12)
        z = np.zeros(d)
        z[idx] = z_drawn
        np.testing.assert_allclose(released, project_l1_ball(z, radius), atol=1e-12)
        assert np.count_nonzero(released) > 0


@pytest.mark.parametrize("n, d, s", [(50, 2000, 3), (500, 20000, 1)])
def test_lemma_3_1_holds_for_every_sampled_draw(n, d, s):
    # Lemma 3.1's proof bounds ||P(z) - mean||^2 by <P(z) - mean, xi>, a sum over the
    # coordinates where P(z) or the mean is nonzero, all of which were drawn: the
    # bound holds with the norms of the drawn noise, which are at most the full ones.
    X = zipf_rows(n, d, s, seed=n)
    L = 1.3
    est = DPSparseMeanEstimator(epsilon=0.5, delta=1e-6, norm_bound=L, sparsity=s,
                                method="projection")
    plan = _plan_of(est, n, d)
    sigma = plan.mechanism.sigma
    t = _sampling_threshold(sigma, d, plan.radius)
    assert t is not None
    mean = _clipped_mean(X, plan)
    rng = np.random.default_rng(0)
    for i in range(50):
        released, _, _, (idx, z), _ = _sampled_gaussian_projection(
            mean, sigma, plan.radius, t if i % 2 else None, rng)
        xi = z - mean[idx]
        err = np.linalg.norm(released - mean)
        bound = min(np.linalg.norm(xi), math.sqrt(2 * L * math.sqrt(s) * np.abs(xi).max()))
        assert err <= bound * (1 + 1e-9) + 1e-12


def test_sampling_threshold_is_public_and_rarely_too_high():
    # depends on sigma, d and R only; with no signal the full branch is rare
    assert _sampling_threshold(0.01, 100, 1.0) is None  # too little noise to pay
    assert _sampling_threshold(0.0, 10**6, 1.0) is None
    d, radius, sigma = 5000, 1.0, 0.01
    t = _sampling_threshold(sigma, d, radius)
    rng = np.random.default_rng(0)
    fulls = [_sampled_gaussian_projection(np.zeros(d), sigma, radius, t, rng)[2]
             for _ in range(300)]
    assert not any(fulls)


def test_audit_sampled_gaussian_projection():
    # The fit's path for a high-dimensional Gaussian projection, run once per draw.
    # The rows other than row 0 put 0.35 on the audited coordinates, so they sit
    # above the projection's threshold and the audit sees the shift, not only zeros.
    # A large delta keeps the claim within reach of a CI-sized audit, so that half
    # the noise is caught surely (at delta = 1e-5 it is caught only narrowly).
    n, d, s, eps, delta = 50, 400, 2, 1.0, 1e-2
    X, Xp = _neighbours(n, d, s)
    X[1:n // 2, :s] = Xp[1:n // 2, :s] = 1 / math.sqrt(s)
    plan = _plan_of(DPSparseMeanEstimator(epsilon=eps, delta=delta, sparsity=s,
                                 method="projection"), n, d)
    a, b = _clipped_mean(X, plan), _clipped_mean(Xp, plan)
    assert np.linalg.norm(a - b) == pytest.approx(2 / n)
    sigma = plan.mechanism.sigma
    assert _sampling_threshold(sigma, d, plan.radius) is not None

    def runs(mean, sig, count, seed):
        rng = np.random.default_rng(seed)
        assert _sampling_threshold(sig, d, plan.radius) is not None
        return np.array([_sampled_gaussian_projection(mean, sig, plan.radius, None, rng)[0][:s]
                         for _ in range(count)]) @ (a - b)[:s]

    count = 40_000
    honest = epsilon_lower_bound(runs(a, sigma, count, 1), runs(b, sigma, count, 2),
                                 delta=delta, rng=0)
    assert honest.epsilon_lb <= eps
    broken = epsilon_lower_bound(runs(a, sigma / 2, count, 1), runs(b, sigma / 2, count, 2),
                                 delta=delta, rng=0)
    assert broken.epsilon_lb > eps


# --------------------------------------------------------------------------
# Gaussian l1-recovery (Algorithm 2)
# --------------------------------------------------------------------------
def test_n_measurements_rule():
    n, d, s, eps, delta = 100, 20_000, 5, 1.0, 1e-5
    m = math.ceil(n * eps * math.sqrt(s * math.log(d / s) / math.log(1 / delta)))
    assert d >= m * math.log(m) ** 2
    assert _n_measurements(n, d, s, eps, delta) == m
    # low-dimensional: d < m ln^2 m falls back to plain Gaussian noise
    assert _n_measurements(1000, 100_000, 10, 1.0, 1e-6) == 0
    assert _n_measurements(n, d, s, np.inf, delta) == 0
    assert _n_measurements(n, d, d, eps, delta) == 0


def test_l1_recovery_fallback_is_gaussian_on_the_mean():
    n, d, s = 1000, 20_000, 10
    X = zipf_rows(n, d, s)
    est = DPSparseMeanEstimator(delta=1e-6, sparsity=s, method="l1_recovery",
                                random_state=0).fit(X)
    assert est.method_ == "l1_recovery"
    assert est.n_measurements_ == 0
    ref = DPSparseMeanEstimator(delta=1e-6, sparsity=s, method="gaussian",
                                random_state=0).fit(X)
    np.testing.assert_array_equal(est.mean_, ref.mean_)


def test_l1_recovery_compressed_branch():
    n, d, s, delta = 60, 8000, 3, 1e-5
    X = zipf_rows(n, d, s, seed=2)
    est = DPSparseMeanEstimator(epsilon=2.0, delta=delta, sparsity=s, method="l1_recovery",
                                random_state=0).fit(X)
    m = _n_measurements(n, d, s, 2.0, delta)
    assert est.n_measurements_ == m > 0
    # sensitivity 3L/n for every A; sigma calibrated (zCDP on the safe path), full budget
    assert est.noise_scale_ == pytest.approx(
        GaussianMechanism(3 / n, epsilon=2.0, delta=delta, floating_point_safe=True).sigma,
        rel=1e-12)
    assert est.epsilon_spent_ <= 2.0
    assert est.epsilon_spent_ == pytest.approx(2.0, rel=1e-3)
    assert est.delta_spent_ == delta
    assert np.linalg.norm(est.mean_) <= 2.0
    again = DPSparseMeanEstimator(epsilon=2.0, delta=delta, sparsity=s,
                                  method="l1_recovery", random_state=0).fit(X.tocsc())
    np.testing.assert_allclose(again.mean_, est.mean_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("norm, kept", [(2.5 * 1.9, False), (1.5 * 1.9, True)])
def test_l1_recovery_returns_zero_beyond_2L(monkeypatch, norm, kept):

    d = 8000
    solution = np.zeros(d)
    solution[:4] = norm / 2
    monkeypatch.setattr(mean_module, "basis_pursuit", lambda A, b, **kw: solution.copy())
    X = zipf_rows(60, d, 3)
    est = DPSparseMeanEstimator(epsilon=2.0, delta=1e-5, norm_bound=1.9, sparsity=3,
                                method="l1_recovery", random_state=0).fit(X)
    assert est.n_measurements_ > 0
    np.testing.assert_array_equal(est.mean_, solution if kept else np.zeros(d))


def test_measurement_clipping_bounds_sensitivity_for_any_matrix():
    m, d, s, n = 2, 2000, 20, 10
    A = GaussianSensingMatrix(m, d, seed=5)
    At = A.toarray()
    # adversarial s-sparse unit row: the s columns most aligned with one direction
    u = np.linalg.svd(At)[0][:, 0]
    score = u @ At
    idx = np.argsort(-np.abs(score))[:s]
    z = np.zeros(d)
    z[idx] = np.sign(score[idx]) / math.sqrt(s)
    assert np.linalg.norm(At @ z) > 3  # far outside any restricted-isometry bound
    X = np.zeros((n, d))
    X[0] = z
    Xp = X.copy()
    Xp[0] = -z
    clipped = (np.linalg.norm(_clipped_measurement_mean(X, A, _MEASUREMENT_CLIP)
                              - _clipped_measurement_mean(Xp, A, _MEASUREMENT_CLIP)))
    assert clipped <= 2 * _MEASUREMENT_CLIP / n * (1 + 1e-12)
    unclipped = np.linalg.norm(_clipped_measurement_mean(X, A, np.inf)
                               - _clipped_measurement_mean(Xp, A, np.inf))
    assert unclipped > 2 * _MEASUREMENT_CLIP / n


def test_sensing_matrix_on_demand_equals_in_memory():
    m, d = 40, 70_000  # several generation blocks
    A = GaussianSensingMatrix(m, d, seed=11)
    B = GaussianSensingMatrix(m, d, seed=11, max_bytes=0)
    assert A.in_memory and not B.in_memory and B.n_blocks > 1
    rng = np.random.default_rng(0)
    x, r = rng.normal(size=d), rng.normal(size=m)
    np.testing.assert_allclose(B.matvec(x), A.matvec(x), rtol=1e-10)
    np.testing.assert_allclose(B.rmatvec(r), A.rmatvec(r), rtol=1e-12)
    np.testing.assert_allclose(B.gram(), A.gram(), rtol=1e-10)
    X = zipf_rows(30, d, 4)
    np.testing.assert_allclose(B.apply_rows(X), A.apply_rows(X), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(B.apply_rows(X.toarray()), A.apply_rows(X), rtol=1e-10,
                               atol=1e-14)
    dense = A.toarray()
    assert dense.std() == pytest.approx(1 / math.sqrt(m), rel=0.01)
    assert abs(dense.mean()) < 5 / math.sqrt(m * d * m)


def test_l1_recovery_on_demand_matrix_gives_same_fit(monkeypatch):

    n, d, s = 60, 8000, 3
    X = zipf_rows(n, d, s, seed=2)
    kwargs = dict(epsilon=2.0, delta=1e-5, sparsity=s, method="l1_recovery", random_state=1)
    monkeypatch.setattr(mean_module, "_BP_MAX_ITER", 15)
    in_memory = DPSparseMeanEstimator(**kwargs).fit(X).mean_
    assert np.any(in_memory != 0)

    class OnDemand(GaussianSensingMatrix):
        def __init__(self, *args, **kw):
            super().__init__(*args, max_bytes=0)

    monkeypatch.setattr(mean_module, "GaussianSensingMatrix", OnDemand)
    on_demand = DPSparseMeanEstimator(**kwargs).fit(X).mean_
    np.testing.assert_allclose(on_demand, in_memory, rtol=1e-6, atol=1e-9)


def test_basis_pursuit_close_to_linear_program():
    from scipy.optimize import linprog

    rng = np.random.default_rng(0)
    m, d = 40, 1000
    A = GaussianSensingMatrix(m, d, seed=3)
    dense = A.toarray()
    truth = np.zeros(d)
    truth[:100] = rng.random(100) / 20
    b = dense @ truth + 0.05 * rng.normal(size=m)
    lp = linprog(np.ones(2 * d), A_eq=np.hstack([dense, -dense]), b_eq=b, bounds=(0, None),
                 method="highs")
    z_lp = lp.x[:d] - lp.x[d:]
    z = basis_pursuit(A, b, max_iter=500)
    assert np.abs(z).sum() == pytest.approx(lp.fun, rel=2e-3)
    assert np.linalg.norm(dense @ z - b) < 0.01 * np.linalg.norm(b)
    # the solver's error is small next to the noise-driven error of the exact solution
    assert np.linalg.norm(z - z_lp) < 0.25 * np.linalg.norm(z_lp - truth)
    # noiseless sparse signal: exact recovery
    x = np.zeros(d)
    x[rng.choice(d, 5, replace=False)] = rng.normal(size=5)
    z = basis_pursuit(dense, dense @ x, max_iter=500)
    assert np.linalg.norm(z - x) < 1e-2 * np.linalg.norm(x)


# --------------------------------------------------------------------------
# method="auto"
# --------------------------------------------------------------------------
def test_auto_rule():
    assert _choose_method(100, 1000, None, 1.0, 0.0) == "laplace"
    assert _choose_method(100, 1000, None, 1.0, 1e-5) == "gaussian"
    assert _choose_method(100, 1000, 10, 1.0, 0.0) == "projection"
    for n, d, s in [(1000, 100_000, 10), (100, 20_000, 5), (100_000, 1_000_000, 20),
                    (50, 10_000, 3000)]:
        assert _choose_method(n, d, s, 1.0, 1e-6) == "projection"
    # Alg. 2 wins on rates only for s a large power of d, and then needs a matrix
    # far too large to use
    n, d, s, delta = 3162, 10**8, 31_622, 1e-6
    rates = _table1_rates(n, d, s, 1.0, delta)
    assert _n_measurements(n, d, s, 1.0, delta) > 0
    assert rates["l1_recovery"] < min(rates["projection"], 1.0)
    assert _choose_method(n, d, s, 1.0, delta) == "projection"
    assert _choose_method(n, d, s, 1.0, delta, max_work=np.inf) == "l1_recovery"
    est = DPSparseMeanEstimator(delta=1e-6, sparsity=5, random_state=0).fit(zipf_rows(50, 300, 5))
    assert est.method_ == "projection" and est.method == "auto"


# --------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------
_X_OK = np.abs(np.random.default_rng(0).normal(size=(20, 8)))


@pytest.mark.parametrize(
    "params, X, match",
    [
        ({}, np.where(np.eye(20, 8) > 0, np.nan, _X_OK), "NaN"),
        ({}, np.where(np.eye(20, 8) > 0, np.inf, _X_OK), "infinity"),
        ({}, sp.csr_matrix(np.where(np.eye(20, 8) > 0, np.nan, _X_OK)), "NaN"),
        ({}, np.zeros((0, 8)), "0 sample"),
        ({"epsilon": 0.0}, _X_OK, "epsilon"),
        ({"epsilon": -1.0}, _X_OK, "epsilon"),
        ({"epsilon": np.nan}, _X_OK, "epsilon"),
        ({"delta": -0.1}, _X_OK, "delta"),
        ({"delta": 1.0}, _X_OK, "delta"),
        ({"delta": np.nan}, _X_OK, "delta"),
        ({"norm_bound": 0.0}, _X_OK, "norm_bound"),
        ({"norm_bound": -2.0}, _X_OK, "norm_bound"),
        ({"norm_bound": np.inf}, _X_OK, "norm_bound"),
        ({"norm_bound": None}, _X_OK, "norm_bound"),
        ({"sparsity": 0}, _X_OK, "sparsity"),
        ({"sparsity": 0.5}, _X_OK, "sparsity"),
        ({"sparsity": "3"}, _X_OK, "sparsity"),
        ({"method": "median"}, _X_OK, "method must be one of"),
        ({"method": "gaussian"}, _X_OK, "delta > 0"),
        ({"method": "l1_recovery", "sparsity": 2}, _X_OK, "delta > 0"),
        ({"method": "projection"}, _X_OK, "sparsity"),
        ({"method": "l1_recovery", "delta": 1e-5}, _X_OK, "sparsity"),
        ({"floating_point_safe": "yes"}, _X_OK, "floating_point_safe"),
        ({"floating_point_safe": 1}, _X_OK, "floating_point_safe"),
        ({"floating_point_safe": None}, _X_OK, "floating_point_safe"),
    ],
)
def test_bad_input_raises(params, X, match):
    with pytest.raises(ValueError, match=match):
        DPSparseMeanEstimator(**params).fit(X)


def test_sparsity_above_n_features_is_n_features():
    # a loose public bound is still a bound: the fit is that of the tightest true one
    loose = DPSparseMeanEstimator(epsilon=1.0, delta=1e-6, sparsity=50,
                                  random_state=0).fit(_X_OK)
    tight = DPSparseMeanEstimator(epsilon=1.0, delta=1e-6, sparsity=_X_OK.shape[1],
                                  random_state=0).fit(_X_OK)
    np.testing.assert_array_equal(loose.mean_, tight.mean_)
    assert loose.privacy_events_ == tight.privacy_events_
    assert loose.get_params()["sparsity"] == 50


def test_params_checked_before_data():
    # a bad hyperparameter is reported even when the data are bad too
    with pytest.raises(ValueError, match="epsilon"):
        DPSparseMeanEstimator(epsilon=-1).fit(np.full((3, 3), np.nan))


@pytest.mark.parametrize("fmt", ["coo", "lil", "dok", "csc", "bsr"])
def test_sparse_formats_match_csr(fmt):
    X = zipf_rows(100, 300, 4, seed=9, norm=1.5)
    ref = DPSparseMeanEstimator(delta=1e-5, sparsity=4, random_state=0).fit(X).mean_
    got = DPSparseMeanEstimator(delta=1e-5, sparsity=4, random_state=0).fit(
        X.asformat(fmt)).mean_
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("method, delta", [("projection", 0.0), ("projection", 1e-5),
                                           ("gaussian", 1e-5), ("laplace", 0.0)])
def test_dense_matches_sparse(method, delta):
    X = zipf_rows(150, 400, 4, seed=10, norm=1.5)
    kw = dict(delta=delta, sparsity=4, method=method, random_state=0)
    sparse = DPSparseMeanEstimator(**kw).fit(X).mean_
    dense = DPSparseMeanEstimator(**kw).fit(X.toarray()).mean_
    np.testing.assert_allclose(dense, sparse, rtol=1e-10, atol=1e-14)


def test_fit_does_not_modify_params_or_data():
    X = zipf_rows(50, 100, 3, norm=5.0)
    X_copy = X.copy()
    est = DPSparseMeanEstimator(delta=1e-5, sparsity=3, random_state=0)
    params = est.get_params()
    est.fit(X)
    assert est.get_params() == params
    assert (X != X_copy).nnz == 0


