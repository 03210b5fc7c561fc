"""The public rules behind the greedy coordinate-descent defaults: when the curvature
release is made (``curvature="auto"``), the norm-share constants used otherwise, and
the number of steps. Pure functions of public values, then how a fit applies them."""

import math

import numpy as np
import pytest

import skdp_sparse.solvers.coordinate_descent as cd_module
from skdp_sparse.linear_model import DPGreedyCDRegressor, DPSparseLogisticRegression
from skdp_sparse.privacy.accounting import compose, zcdp_epsilon, zcdp_rho
from skdp_sparse.privacy.statistics import second_moment_noise_std
from skdp_sparse.solvers.coordinate_descent import (
    CURVATURE_SHARE,
    SIGNAL_NOISE_RATIO,
    curvature_release_informative,
    default_greedy_iterations,
    norm_share_ratio,
)

LN2 = math.log(2.0)


# ------------------------------------------------------------ zcdp_rho
@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (0.1, 1e-9), (10.0, 1e-5),
                                            (1.0, 1 / 32561**2)])
def test_zcdp_rho_inverts_the_conversion_from_below(epsilon, delta):
    rho = zcdp_rho(epsilon, delta)
    assert zcdp_epsilon(rho, delta) <= epsilon
    assert zcdp_epsilon(rho * (1 + 1e-9), delta) > epsilon * (1 - 1e-12)
    assert zcdp_rho(math.inf, delta) == math.inf and zcdp_rho(epsilon, 0.0) == 0.0


def test_zcdp_rho_values():
    assert zcdp_rho(1.0, 1e-6) == pytest.approx(0.024356, rel=1e-4)
    assert zcdp_rho(1.0, 1 / 32561**2) == pytest.approx(0.014924, rel=1e-4)


# ------------------------------------------------------- the release rule
def test_release_noise_std_formulas():
    # Gaussian: Delta_2 = sqrt(2 m^2 L^2 + 1) over sqrt(2 rho); Laplace: sqrt(2) Delta_1 / eps.
    assert second_moment_noise_std(1.0, 1.0, rho=0.5) == pytest.approx(math.sqrt(3.0))
    assert second_moment_noise_std(2.0, 0.5, rho=2.0) == pytest.approx(math.sqrt(3.0) / 2)
    assert second_moment_noise_std(1.0, 1.0, epsilon=3.0) == pytest.approx(math.sqrt(2.0))


@pytest.mark.parametrize("case, n, p, norm_bound, expected", [
    # The paper's problems: average column sum n L^2 / p = 10, noise sd 24.8.
    ("synthetic", 1000, 100, 1.0, False),
    # a9a: one-hot of 14 attributes, L = sqrt(14): average column sum 3706, sd 98.6.
    ("a9a", 32561, 123, math.sqrt(14.0), True),
    # w8a with the default norm bound 1: 124 against twice 32.2.
    ("w8a", 37311, 300, 1.0, True),
    # reuters, unit tf-idf rows: under one per column.
    ("reuters", 7770, 8315, 1.0, False),
])
def test_release_decision_on_the_benchmark_shapes(case, n, p, norm_bound, expected):
    delta = 1.0 / n**2
    assert curvature_release_informative(n, p, 1.0, norm_bound, 1.0, delta) is expected
    sigma = second_moment_noise_std(norm_bound, 1.0,
                                    rho=CURVATURE_SHARE * zcdp_rho(1.0, delta))
    average = n * min(norm_bound**2, p) / p
    assert (average > SIGNAL_NOISE_RATIO * sigma) is expected


def test_release_decision_threshold_and_monotonicity():
    delta = 1e-6
    sigma = second_moment_noise_std(1.0, 1.0, rho=CURVATURE_SHARE * zcdp_rho(1.0, delta))
    # Exactly where n L^2 / p crosses 2 sigma.
    n_star = SIGNAL_NOISE_RATIO * sigma * 100
    assert not curvature_release_informative(math.floor(n_star), 100, 1.0, 1.0, 1.0, delta)
    assert curvature_release_informative(math.ceil(n_star) + 1, 100, 1.0, 1.0, 1.0, delta)
    # More budget, more rows or a larger norm bound can only turn the release on.
    for n in (500, 2000, 8000):
        for eps in (0.3, 1.0, 3.0):
            now = curvature_release_informative(n, 100, 1.0, 1.0, eps, delta)
            assert now <= curvature_release_informative(2 * n, 100, 1.0, 1.0, eps, delta)
            assert now <= curvature_release_informative(n, 100, 1.0, 1.0, 2 * eps, delta)
    # No noise: the exact moments are always used.
    assert curvature_release_informative(10, 100, 1.0, 1.0, math.inf, delta)


def test_release_decision_pure_dp_uses_the_epsilon_share():
    # delta = 0: Laplace at CURVATURE_SHARE * epsilon, sd sqrt(2) (2 L^2 + 1) / eps_c.
    sigma = math.sqrt(2.0) * 3.0 / (CURVATURE_SHARE * 2.0)
    n_star = SIGNAL_NOISE_RATIO * sigma * 10
    assert not curvature_release_informative(int(n_star) - 1, 10, 1.0, 1.0, 2.0, 0.0,
                                             pure=True)
    assert curvature_release_informative(int(n_star) + 1, 10, 1.0, 1.0, 2.0, 0.0, pure=True)


def test_norm_share_ratio():
    assert norm_share_ratio(np.ones(100), 1.0) == pytest.approx(0.01)
    assert norm_share_ratio(np.ones(123), math.sqrt(14)) == pytest.approx(14 / 123)
    # Bounds of unequal size: the row's norm is shared in proportion to b_j^2.
    assert norm_share_ratio(np.array([1.0, 2.0, 2.0]), 1.5) == pytest.approx(2.25 / 9)
    # A norm bound above sqrt(sum b_j^2) says nothing: the feature bounds' curvature.
    assert norm_share_ratio(np.ones(4), 3.0) == 1.0


# ------------------------------------------------------------ the step rule
def _zcdp_steps(n, p, epsilon, delta, *, share=1.0, ratio=2.0, gap=LN2, k=1, c=1.0):
    rho = share * zcdp_rho(epsilon, delta)
    return math.floor(math.sqrt(2 * gap * rho / (c * k)) / (2 * ratio / n * math.log(2 * p)))


@pytest.mark.parametrize("case, n, p, share, expected", [
    ("synthetic", 1000, 100, 1.0, 8),
    ("a9a", 32561, 124, 1 - CURVATURE_SHARE, 201),
    ("w8a", 37311, 301, 1 - CURVATURE_SHARE, 197),
    ("reuters", 7770, 8316, 1.0, 31),
])
def test_greedy_steps_on_the_benchmark_shapes(case, n, p, share, expected):
    delta = 1.0 / n**2
    steps = default_greedy_iterations(n, p, 1.0, delta, budget_share=share)
    assert steps == _zcdp_steps(n, p, 1.0, delta, share=share) == expected


def test_greedy_steps_formula_and_monotonicity():
    n, p, eps, delta = 5000, 50, 1.0, 1e-7
    assert default_greedy_iterations(n, p, eps, delta) == _zcdp_steps(n, p, eps, delta)
    # Report-noisy-max with Laplace noise: selection scale 2 Delta_u / eps_0 (c = 4).
    assert default_greedy_iterations(n, p, eps, delta, pure=True) == \
        _zcdp_steps(n, p, eps, delta, c=4.0)
    # K one-vs-rest problems share the budget; the squared loss: F0 = T^2 / 2, C / sqrt(M) = T.
    assert default_greedy_iterations(n, p, eps, delta, n_problems=3) == \
        _zcdp_steps(n, p, eps, delta, k=3)
    assert default_greedy_iterations(n, p, eps, delta, score_ratio=1.0, initial_gap=0.5) == \
        _zcdp_steps(n, p, eps, delta, ratio=1.0, gap=0.5)
    # T grows linearly with n (about sqrt(rho) n), falls with p.
    base = default_greedy_iterations(n, p, eps, delta)
    assert default_greedy_iterations(4 * n, p, eps, delta) >= 4 * base - 4
    assert default_greedy_iterations(n, 10 * p, eps, delta) < base
    assert default_greedy_iterations(n, p, 4 * eps, delta) > 2 * base
    assert default_greedy_iterations(n, p, eps, delta, budget_share=0.9) <= base


def test_greedy_steps_pure_dp_and_limits():
    # delta = 0: T = (F0 eps^2 / (8 Delta_u^2 K^2 ln(2p)^2))^(1/3).
    n, p, eps = 20000, 30, 2.0
    expected = math.floor((LN2 * eps**2 / (8 * (4.0 / n) ** 2 * math.log(2 * p) ** 2))
                          ** (1 / 3))
    assert default_greedy_iterations(n, p, eps, 0.0, pure=True) == expected
    # Clipped to [1, 200 p]; no noise: 200 p.
    assert default_greedy_iterations(10, 50, 0.01, 1e-6) == 1
    assert default_greedy_iterations(10**9, 5, 10.0, 1e-6) == 200 * 5
    assert default_greedy_iterations(100, 7, math.inf, 0.0) == 200 * 7


# ------------------------------------------------------------ in a fit
def _synthetic(n=1000, p=100, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.sign(X @ (rng.lognormal(0.0, 1.0, p) * rng.choice([-1, 1], p)))
    return X, y


def test_auto_without_signal_spends_nothing_on_curvature(cd_calls):
    X, y = _synthetic()
    n, p = X.shape
    delta = 1 / n**2
    clf = DPSparseLogisticRegression(epsilon=1.0, delta=delta, solver="greedy_cd",
                                     penalty="l2", alpha=1e-3, fit_intercept=False,
                                     classes=[-1, 1], random_state=0).fit(X, y)
    assert all(not e.name.startswith("curvature") for e in clf.privacy_events_)
    # The whole budget on the steps: the events compose to exactly (epsilon, delta).
    assert compose(clf.privacy_events_, delta)[0] == pytest.approx(1.0, rel=1e-6)
    assert clf.epsilon_spent_ == pytest.approx(1.0, rel=1e-6)
    kw = cd_calls[0]
    np.testing.assert_allclose(kw["smoothness"], 0.25 / p)
    np.testing.assert_allclose(kw["clip"], 1 / math.sqrt(p))
    assert kw["n_updates"] == clf.n_iter_ == default_greedy_iterations(n, p, 1.0, delta) == 8


def test_auto_with_signal_releases_like_private(cd_calls):
    rng = np.random.default_rng(1)
    n, p = 20000, 20
    X = (rng.random((n, p)) < 0.3).astype(float)
    y = np.where(X[:, 0] + X[:, 1] + 0.5 * rng.standard_normal(n) > 0.6, 1, 0)
    kw = dict(epsilon=1.0, delta=1e-8, solver="greedy_cd", norm_bound=math.sqrt(p),
              classes=[0, 1], random_state=0)
    auto = DPSparseLogisticRegression(**kw).fit(X, y)
    private = DPSparseLogisticRegression(curvature="private", **kw).fit(X, y)
    assert auto.privacy_events_[-1].name.startswith("curvature")
    np.testing.assert_array_equal(auto.coef_, private.coef_)
    assert auto.n_iter_ == default_greedy_iterations(
        n, p + 1, 1.0, 1e-8, budget_share=1 - CURVATURE_SHARE)
    assert compose(auto.privacy_events_, 1e-8)[0] == pytest.approx(1.0, rel=1e-6)


def test_auto_norm_share_clips_rows_to_the_norm_bound(monkeypatch):
    """The norm-share constants assume rows within norm_bound: the run clips them."""
    seen = []
    real = cd_module.coordinate_descent

    def wrapper(X, *args, **kwargs):
        seen.append(X)
        return real(X, *args, **kwargs)

    monkeypatch.setattr(cd_module, "coordinate_descent", wrapper)
    X, y = _synthetic(n=600, p=40)
    X = 3.0 * X  # rows of norm 3 against norm_bound 1
    DPSparseLogisticRegression(epsilon=1.0, delta=1e-6, solver="greedy_cd", max_iter=5,
                               fit_intercept=False, classes=[-1, 1],
                               random_state=0).fit(X, y)
    np.testing.assert_allclose(np.linalg.norm(seen[0], axis=1), 1.0)
    # With the release (or the bounds), only the entries are clipped.
    DPSparseLogisticRegression(epsilon=1.0, delta=1e-6, solver="greedy_cd", max_iter=5,
                               fit_intercept=False, curvature="bound", classes=[-1, 1],
                               random_state=0).fit(X, y)
    np.testing.assert_allclose(seen[1], np.clip(X, -1.0, 1.0))


def test_auto_with_explicit_clip_or_bound_keeps_the_bounds(cd_calls):
    X, y = _synthetic(n=300, p=6)
    DPSparseLogisticRegression(solver="greedy_cd", max_iter=3, gradient_clip=0.3,
                               classes=[-1, 1], random_state=0).fit(X, y)
    np.testing.assert_allclose(cd_calls[-1]["smoothness"], 0.25)
    DPSparseLogisticRegression(solver="greedy_cd", max_iter=3, curvature="bound",
                               classes=[-1, 1], random_state=0).fit(X, y)
    np.testing.assert_allclose(cd_calls[-1]["smoothness"], 0.25)


def test_regressor_default_steps_use_the_squared_loss_constants(cd_calls):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (400, 30)) / math.sqrt(30)
    y = X @ rng.standard_normal(30)
    DPGreedyCDRegressor(epsilon=1.0, delta=1e-6, solver="greedy_cd", random_state=0).fit(X, y)
    # F0 = target_bound^2 / 2 = 1/2, C_j / sqrt(M_j) = 1 (squared loss, beta = 1).
    assert cd_calls[0]["n_updates"] == _zcdp_steps(400, 31, 1.0, 1e-6, ratio=1.0, gap=0.5)


def test_plan_is_public(monkeypatch):
    """The decision and T come from the plan, before any data is read."""
    from skdp_sparse.optim.losses import LogisticLoss
    from skdp_sparse.optim.penalties import L2
    from skdp_sparse.solvers import Problem, get_solver

    problem = Problem(loss=LogisticLoss(), penalty=L2(1e-3), fit_intercept=False,
                      feature_bound=np.ones(100), norm_bound=1.0)
    options = {"max_iter": None, "curvature": "auto", "selection": "exponential",
               "tol": 0.0, "verbose": 0}
    plan = get_solver("greedy_cd").plan(problem, (1000, 100, 1), 1.0, 1e-6, options)
    assert plan.curvature_source == "norm_share" and not plan.curvature
    assert plan.n_iter == default_greedy_iterations(1000, 100, 1.0, 1e-6)
    assert cd_module.NOISELESS_STEPS_PER_COORD == 200
