"""Solver ``"sufficient_statistics"`` (AdaSSP, Wang 2018): calibration of its three
releases against their formulas, exactness without noise, the adaptive ridge, the
rules on public values, and bad input. Its statistical audit through ``fit`` is
``AUDITS["sufficient_statistics"]`` (tests/test_audits.py)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.stats import norm
from sklearn.linear_model import LinearRegression, Ridge

import skdp_sparse.solvers.sufficient_statistics as ssp
from skdp_sparse import DPGreedyCDRegressor, privacy_ledger
from skdp_sparse.optim.losses import HuberLoss, SquaredLoss
from skdp_sparse.privacy.accounting import compose, gaussian_epsilon, gaussian_mu
from skdp_sparse.solvers import (
    SOLVERS,
    SUFFICIENT_STATISTICS_MAX_FEATURES,
    SUFFICIENT_STATISTICS_MIN_RATIO,
    Problem,
    resolve_solver,
)
from skdp_sparse.testing import AUDITS


def _data(n=600, p=4, seed=0, scale=0.5):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-scale, scale, size=(n, p))
    y = X @ np.linspace(1.0, -0.5, p) + 0.1 + 0.05 * rng.normal(size=n)
    return X, y


def _plan(epsilon, delta, *, p=3, n=1000, safe=True, fit_intercept=True,
          feature_bound=1.0, norm_bound=10.0, target_bound=2.0):
    problem = Problem(loss=SquaredLoss(), fit_intercept=fit_intercept,
                      feature_bound=feature_bound, norm_bound=norm_bound,
                      target_bound=target_bound)
    solver = SOLVERS["sufficient_statistics"]
    return solver.plan(problem, (n, p, 1), epsilon, delta, {"floating_point_safe": safe})


# --------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------
def test_sensitivities_follow_the_row_and_target_bounds():
    # p = 3 features of bound 1 (norm_bound 10 does not bind): B^2 = 3, plus the
    # intercept's constant 1: B^2 = 4; target bound 2.
    plan = _plan(1.0, 1e-6)
    assert plan.row_bound == pytest.approx(2.0)
    assert plan.sensitivities == pytest.approx(
        {"eigenvalue": 4.0, "gram": math.sqrt(2) * 4.0, "moment": 2 * 2.0 * 2.0})
    # norm_bound binds below ||feature_bound||; no intercept.
    plan = _plan(1.0, 1e-6, fit_intercept=False, norm_bound=0.5, target_bound=1.0)
    assert plan.sensitivities["moment"] == pytest.approx(1.0)
    assert plan.sensitivities["gram"] == pytest.approx(math.sqrt(2) * 0.25)


@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (0.3, 1e-9), (4.0, 1e-5)])
def test_safe_path_units_are_the_gaussian_shares(epsilon, delta):
    """sigma_k / Delta_k = slack / (sqrt(share_k) mu) with mu the analytic Gaussian's
    ratio for (epsilon, delta): the lattice releases are bounded by the continuous
    Gaussian at a ratio larger by slack = (1 + 2^-16)(1 + 2^-20) (doc/proofs/pld.rst)."""
    plan = _plan(epsilon, delta)
    mu = gaussian_mu(epsilon, delta)
    slack = (1 + 2.0**-16) * (1 + 2.0**-20)
    for key, share in ssp.SHARES.items():
        assert plan.units[key] == pytest.approx(slack / (math.sqrt(share) * mu), rel=1e-9)
    assert sum(ssp.SHARES.values()) == pytest.approx(1.0)
    eps, dlt = compose(plan.events, delta)
    assert eps == pytest.approx(epsilon, rel=1e-6) and eps <= epsilon * (1 + 1e-9)
    assert dlt <= delta


@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (2.0, 1e-8)])
def test_float_path_units_compose_to_the_budget_exactly(epsilon, delta):
    """Three Gaussians with ratios Delta_k / sigma_k compose to one of ratio
    sqrt(sum mu_k^2) (GDP), which is the budget's mu (analytic Gaussian)."""
    plan = _plan(epsilon, delta, safe=False)
    mus = [1.0 / plan.units[k] for k in ssp.SHARES]
    mu = math.sqrt(sum(m * m for m in mus))
    assert mu == pytest.approx(gaussian_mu(epsilon, delta), rel=1e-6)
    assert gaussian_epsilon(mu, delta) == pytest.approx(epsilon, rel=1e-5)
    for key, m in zip(ssp.SHARES, mus, strict=True):
        assert m**2 / mu**2 == pytest.approx(ssp.SHARES[key], rel=1e-6)


def test_gaussian_calibration_matches_dp_accounting():
    """The float path's three releases, composed by an independent accountant."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import pld

    epsilon, delta = 1.0, 1e-6
    plan = _plan(epsilon, delta, safe=False)
    acc = pld.PLDAccountant()
    for key in ssp.SHARES:
        acc.compose(dp_accounting.GaussianDpEvent(plan.units[key]))
    assert acc.get_epsilon(delta) == pytest.approx(epsilon, rel=2e-3)


def test_released_noise_has_the_planned_standard_deviation(release_noise):
    """Each release's noise, measured over many fits, has sd Delta_k * unit_k."""
    drawn = release_noise(ssp)
    X, y = _data(n=50, p=2)
    est = DPGreedyCDRegressor(epsilon=1.0, delta=1e-6, solver="sufficient_statistics",
                              norm_bound=10.0, target_bound=2.0)
    for seed in range(1000):
        est.set_params(random_state=seed).fit(X, y)
    plan = _plan(1.0, 1e-6, p=2)
    for key in ssp.SHARES:
        noise = np.concatenate(drawn[float(plan.sensitivities[key])])
        expected = plan.sensitivities[key] * plan.units[key]
        # 1000 to 5000 draws: the sample sd is within 8% (3.5 standard errors or more).
        assert np.std(noise) == pytest.approx(expected, rel=0.08), key
        assert abs(np.mean(noise)) < 4 * expected / math.sqrt(noise.size)


# --------------------------------------------------------------------------
# Exactness and the adaptive ridge
# --------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_without_noise_it_is_least_squares(sparse, fit_intercept):
    X, y = _data()
    Xf = sp.csr_matrix(X) if sparse else X
    est = DPGreedyCDRegressor(epsilon=np.inf, solver="sufficient_statistics", norm_bound=10,
                              target_bound=5.0, fit_intercept=fit_intercept).fit(Xf, y)
    ols = LinearRegression(fit_intercept=fit_intercept).fit(X, y)
    np.testing.assert_allclose(est.coef_, ols.coef_, rtol=1e-10, atol=1e-12)
    assert est.intercept_ == pytest.approx(ols.intercept_, abs=1e-12)


def test_without_noise_an_l2_penalty_is_ridge():
    X, y = _data()
    alpha = 0.01
    est = DPGreedyCDRegressor(epsilon=np.inf, solver="sufficient_statistics", penalty="l2",
                              alpha=alpha, norm_bound=10, target_bound=5.0).fit(X, y)
    # (1/n) sum (y - xw)^2 / 2 + alpha ||w||^2 / 2 is Ridge's objective with n alpha.
    ridge = Ridge(alpha=X.shape[0] * alpha).fit(X, y)
    np.testing.assert_allclose(est.coef_, ridge.coef_, rtol=1e-10, atol=1e-12)
    assert est.intercept_ == pytest.approx(ridge.intercept_, abs=1e-12)


def test_without_noise_rows_and_targets_are_clipped_first():
    X, y = _data()
    X[0] *= 100
    y[1] = 1e3
    est = DPGreedyCDRegressor(epsilon=np.inf, solver="sufficient_statistics",
                              feature_bound=1.0, norm_bound=1.5, target_bound=2.0).fit(X, y)
    Xc = np.clip(X, -1, 1)
    norms = np.linalg.norm(Xc, axis=1)
    Xc = Xc * np.minimum(1.0, 1.5 / norms)[:, None]
    ols = LinearRegression().fit(Xc, np.clip(y, -2, 2))
    np.testing.assert_allclose(est.coef_, ols.coef_, rtol=1e-9, atol=1e-12)


def test_adaptive_ridge_formula():
    rho = ssp.RIDGE_FAILURE_PROBABILITY
    d, se, sg = 5, 2.0, 3.0
    spectral = sg * math.sqrt(d * math.log(2 * d * d / rho))
    # A small released eigenvalue: the ridge makes up the difference.
    lam = 4.0
    expected = spectral - (lam - se * norm.isf(rho))
    assert ssp.adaptive_ridge(lam, se, sg, d) == pytest.approx(expected)
    # A large one: no ridge. A negative one counts as 0. No noise: no ridge.
    assert ssp.adaptive_ridge(1e6, se, sg, d) == 0.0
    assert ssp.adaptive_ridge(-50.0, se, sg, d) == pytest.approx(spectral)
    assert ssp.adaptive_ridge(3.0, 0.0, 0.0, d) == 0.0


def test_private_fit_of_a_well_posed_problem_is_close_to_least_squares():
    X, y = _data(n=20_000, p=3)
    est = DPGreedyCDRegressor(epsilon=1.0, delta=1e-8, solver="sufficient_statistics",
                              norm_bound=1.0, target_bound=2.0, random_state=0).fit(X, y)
    ols = LinearRegression().fit(X, y)
    assert est.score(X, y) > ols.score(X, y) - 0.02
    assert est.epsilon_spent_ == pytest.approx(1.0, rel=1e-6)
    assert est.n_iter_ == 1


# --------------------------------------------------------------------------
# Rules on public values, and bad input
# --------------------------------------------------------------------------
def test_auto_rule():
    sq = SquaredLoss()
    p_max, ratio = SUFFICIENT_STATISTICS_MAX_FEATURES, SUFFICIENT_STATISTICS_MIN_RATIO
    n = ratio * 81  # p = 8: n epsilon / (p + 1)^2 = ratio at epsilon 1
    assert resolve_solver("auto", n, 8, 1.0, loss=sq) == "sufficient_statistics"
    assert resolve_solver("auto", n - 1, 8, 1.0, loss=sq) == "greedy_cd"
    assert resolve_solver("auto", n, 8, 0.5, loss=sq) == "greedy_cd"
    assert resolve_solver("auto", n, 8, np.inf, loss=sq) == "greedy_cd"
    big = ratio * (p_max + 2) ** 2
    assert resolve_solver("auto", big, p_max, 1.0, loss=sq) == "sufficient_statistics"
    assert resolve_solver("auto", big, p_max + 1, 1.0, loss=sq) == "greedy_cd"
    assert resolve_solver("auto", n, 8, 1.0, loss=sq, l1_penalty=True) == "greedy_cd"
    assert resolve_solver("auto", n, 8, 1.0, loss=HuberLoss(1.0)) == "greedy_cd"
    # California housing (14,448 x 8) and abalone (2,923 x 8) stay with greedy CD.
    assert resolve_solver("auto", 14_448, 8, 1.0, loss=sq) == "greedy_cd"
    X, y = _data(n=ratio * 16, p=3)
    assert DPGreedyCDRegressor(random_state=0).fit(X, y).solver_ == "sufficient_statistics"
    assert DPGreedyCDRegressor(alpha=1e-3, random_state=0).fit(X, y).solver_ != \
        "sufficient_statistics"


@pytest.mark.parametrize("params, message", [
    ({"loss": "huber"}, "squared loss only"),
    ({"penalty": "l1", "alpha": 0.1}, "l2 penalty at most"),
    ({"penalty": "elasticnet", "alpha": 0.1}, "l2 penalty at most"),
    ({"delta": 0.0}, "delta > 0"),
])
def test_bad_settings_fail_before_any_budget_is_reserved(params, message):
    X, y = _data(n=50, p=2)
    est = DPGreedyCDRegressor(solver="sufficient_statistics", **params)
    with privacy_ledger() as ledger, pytest.raises(ValueError, match=message):
        est.fit(X, y)
    assert ledger.spent() == (0.0, 0.0)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_is_a_clear_error(bad):
    X, y = _data(n=50, p=2)
    X[3, 1] = bad
    est = DPGreedyCDRegressor(solver="sufficient_statistics")
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="NaN|infinity"):
        est.fit(X, y)
    assert ledger.spent() == (0.0, 0.0)


def test_audit_is_registered_on_a_pair_that_moves_only_the_moment():
    audit = AUDITS["sufficient_statistics"]
    (X, y), (X2, y2) = audit.datasets
    np.testing.assert_array_equal(X, X2)
    assert np.count_nonzero(y != y2) == 1
    assert np.all(np.linalg.norm(X, axis=1) == 1.0)
