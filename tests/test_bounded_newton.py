"""Solver ``"bounded_newton"`` (quadratic-bound Newton steps on a noisy Gram matrix):
calibration of its releases against their formulas and an independent accountant,
exactness without noise, the rule of ``solver="auto"``, and bad input. Its statistical
audit through ``fit`` is ``AUDITS["bounded_newton"]`` (tests/test_audits.py)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

import skdp_sparse.solvers.bounded_newton as bn
from skdp_sparse import DPGreedyCDRegressor, DPSparseLogisticRegression, privacy_ledger
from skdp_sparse.optim.losses import LogisticLoss
from skdp_sparse.privacy.accounting import compose, gaussian_mu
from skdp_sparse.solvers import (
    BOUNDED_NEWTON_MAX_RIDGE_RATIO,
    SOLVERS,
    Problem,
    bounded_newton_ridge_ratio,
    resolve_solver,
)


def _plan(epsilon, delta, *, n=1000, p=3, k=1, safe=True, norm_bound=2.0, max_iter=None,
          fit_intercept=True):
    problem = Problem(loss=LogisticLoss(), fit_intercept=fit_intercept, norm_bound=norm_bound)
    return SOLVERS["bounded_newton"].plan(
        problem, (n, p, k), epsilon, delta,
        {"floating_point_safe": safe, "max_iter": max_iter})


def _classification(n=400, p=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = (X @ np.linspace(2.0, -1.0, p) + 0.3 + 0.5 * rng.normal(size=n) > 0).astype(int)
    return X, y


# --------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 3])
def test_sensitivities_follow_the_row_and_derivative_bounds(k):
    # Rows of norm 2 and the intercept's 1: B^2 = 5; the logistic derivative's bound 1.
    plan = _plan(1.0, 1e-6, k=k)
    assert plan.gram_sensitivity == pytest.approx(math.sqrt(2) * 5.0)
    assert plan.gradient_sensitivity == pytest.approx(2 * math.sqrt(5.0) * math.sqrt(k))
    plan = _plan(1.0, 1e-6, k=k, fit_intercept=False)
    assert plan.gram_sensitivity == pytest.approx(math.sqrt(2) * 4.0)


@pytest.mark.parametrize("epsilon, delta, steps", [(1.0, 1e-6, None), (0.3, 1e-9, 3),
                                                   (8.0, 1e-5, 10)])
def test_units_are_the_shares_of_one_gaussian_budget(epsilon, delta, steps):
    """The Gram matrix gets GRAM_SHARE of mu^2, each step an equal part of the rest;
    the float path's releases compose to exactly the budget's mu (GDP)."""
    plan = _plan(epsilon, delta, safe=False, max_iter=steps)
    t = steps or bn.DEFAULT_STEPS
    assert plan.n_iter == t and len(plan.events) == 1 + t
    mu = gaussian_mu(epsilon, delta)
    assert plan.gram_unit == pytest.approx(1 / (mu * math.sqrt(bn.GRAM_SHARE)), rel=1e-6)
    assert plan.step_unit == pytest.approx(
        1 / (mu * math.sqrt((1 - bn.GRAM_SHARE) / t)), rel=1e-6)
    assert math.hypot(1 / plan.gram_unit, math.sqrt(t) / plan.step_unit) == pytest.approx(
        mu, rel=1e-6)
    eps, dlt = compose(plan.events, delta)
    assert eps == pytest.approx(epsilon, rel=1e-6) and eps <= epsilon * (1 + 1e-9)
    assert dlt <= delta
    safe = _plan(epsilon, delta, safe=True, max_iter=steps)
    assert compose(safe.events, delta)[0] <= epsilon * (1 + 1e-9)
    assert safe.step_unit > plan.step_unit


def test_gaussian_calibration_matches_dp_accounting():
    """The float path's 1 + T releases, composed by an independent accountant."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import pld

    epsilon, delta = 1.0, 1e-6
    plan = _plan(epsilon, delta, safe=False)
    acc = pld.PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(plan.gram_unit))
    acc.compose(dp_accounting.GaussianDpEvent(plan.step_unit), plan.n_iter)
    assert acc.get_epsilon(delta) == pytest.approx(epsilon, rel=2e-3)


def test_released_noise_has_the_planned_standard_deviation(release_noise):
    """Each release's noise, measured over many fits, has sd sensitivity x unit."""
    drawn = release_noise(bn)
    X, y = _classification(n=60, p=2)
    est = DPSparseLogisticRegression(epsilon=1.0, delta=1e-6, solver="bounded_newton",
                                     norm_bound=2.0, max_iter=2, classes=[0, 1],
                                     decision="fitted")
    for seed in range(400):
        est.set_params(random_state=seed).fit(X, y)
    plan = _plan(1.0, 1e-6, n=60, p=2, max_iter=2)
    for sensitivity, unit in ((plan.gram_sensitivity, plan.gram_unit),
                              (plan.gradient_sensitivity, plan.step_unit)):
        noise = np.concatenate(drawn[float(sensitivity)])
        assert noise.std() == pytest.approx(sensitivity * unit, rel=0.06)


def test_fit_records_its_releases_in_the_ledger():
    X, y = _classification()
    with privacy_ledger() as ledger:
        est = DPSparseLogisticRegression(epsilon=0.5, delta=1e-6, solver="bounded_newton",
                                         classes=[0, 1], random_state=0).fit(X, y)
    assert est.solver_ == "bounded_newton" and est.n_iter_ == bn.DEFAULT_STEPS
    # decision="auto" fits the decision privately, within the same budget.
    assert any("decision" in e.name or "histogram" in e.name for e in est.privacy_events_)
    exact = DPSparseLogisticRegression(epsilon=np.inf, solver="bounded_newton",
                                       classes=[0, 1]).fit(X, y)
    assert exact.n_iter_ == bn.NON_PRIVATE_STEPS
    assert est.epsilon_spent_ == pytest.approx(0.5, rel=1e-6)
    assert ledger.spent()[0] == pytest.approx(0.5, rel=1e-6)


# --------------------------------------------------------------------------
# Exactness without noise
# --------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
def test_without_noise_it_converges_to_penalised_logistic_regression(sparse):
    """Boehning's iteration with the exact bound X^T X / 4 converges to the optimum of
    the mean logistic loss plus (alpha / 2) ||w||^2, intercept unpenalised."""
    X, y = _classification()
    alpha = 1e-2
    ref = LogisticRegression(C=1 / (alpha * X.shape[0]), solver="newton-cholesky",
                             tol=1e-12, max_iter=200).fit(X, y)
    est = DPSparseLogisticRegression(epsilon=np.inf, solver="bounded_newton", penalty="l2",
                                     alpha=alpha, max_iter=400, norm_bound=1.0,
                                     classes=[0, 1])
    est.fit(sp.csr_matrix(X) if sparse else X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=0, atol=1e-8)


def test_without_noise_and_penalty_collinear_columns_take_the_least_norm_step():
    """One-hot columns summing to the intercept's make the bound singular: the
    directions the data leave flat are not moved, and the fit's scores are those of
    the optimum."""
    rng = np.random.default_rng(1)
    a = rng.integers(0, 3, size=500)
    X = np.eye(3)[a]
    y = (rng.random(500) < np.array([0.2, 0.5, 0.8])[a]).astype(int)
    est = DPSparseLogisticRegression(epsilon=np.inf, solver="bounded_newton",
                                     max_iter=300, classes=[0, 1]).fit(X, y)
    rates = np.array([y[a == j].mean() for j in range(3)])
    np.testing.assert_allclose(est.predict_proba(np.eye(3))[:, 1], rates, atol=1e-9)


def test_without_noise_a_singular_matrix_passing_the_factorisation_takes_the_least_norm_step():
    # Columns that are combinations of others leave X^T X singular; its factorisation
    # could still succeed by rounding, with a pivot of the rounding's size, and the step
    # then moved far along a flat direction (18 of these 200 cases).
    for seed in range(200):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(200, 6))
        X[:, 3] = 0.3 * X[:, 0] - 1.7 * X[:, 1]
        X[:, 5] = 0.5 * X[:, 2]
        H = X.T @ X
        rhs = rng.normal(size=(1, 6)) @ H
        ref = rhs @ np.linalg.pinv(H)
        np.testing.assert_allclose(bn._symmetric_solver(H, 0.0)(rhs), ref, rtol=1e-6,
                                   atol=1e-8 * np.abs(ref).max())


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 7, 8, 33, 130])
def test_cholesky_factor_and_solves_match_lapack(d):
    from skdp_sparse.optim._normal_equations import cholesky_lower, cholesky_solve_rows

    rng = np.random.default_rng(d)
    A = rng.normal(size=(d + 3, d))
    H = A.T @ A + 0.1 * np.eye(d)
    L = cholesky_lower(H)
    np.testing.assert_allclose(L, np.linalg.cholesky(H), rtol=1e-10, atol=1e-12)
    B = rng.normal(size=(2, d))
    np.testing.assert_allclose(cholesky_solve_rows(L, B), np.linalg.solve(H, B.T).T,
                               rtol=1e-8, atol=1e-10)
    H[d - 1, d - 1] = -1.0
    assert cholesky_lower(H) is None


def test_squared_loss_without_noise_is_least_squares_in_one_step():
    rng = np.random.default_rng(2)
    X = rng.uniform(-0.5, 0.5, size=(300, 3))
    y = X @ np.array([0.5, -0.2, 0.1]) + 0.05
    est = DPGreedyCDRegressor(epsilon=np.inf, solver="bounded_newton", max_iter=1,
                              norm_bound=1.0, penalty=None).fit(X, y)
    coef, *_ = np.linalg.lstsq(np.c_[X, np.ones(300)], y, rcond=None)
    np.testing.assert_allclose(np.r_[est.coef_, est.intercept_], coef, atol=1e-10)


def test_a_private_fit_of_a_large_problem_is_close_to_the_same_steps_without_noise():
    X, y = _classification(n=20000, p=4, seed=3)
    params = dict(solver="bounded_newton", norm_bound=1.0, classes=[0, 1], random_state=0,
                  decision="fitted")
    est = DPSparseLogisticRegression(epsilon=1.0, delta=1e-9, **params).fit(X, y)
    assert est.n_iter_ == bn.DEFAULT_STEPS
    exact = DPSparseLogisticRegression(epsilon=np.inf, max_iter=bn.DEFAULT_STEPS,
                                       **params).fit(X, y)
    # The noise and the ridge it requires (which slows the steps) move the
    # coefficients by a few percent.
    np.testing.assert_allclose(est.coef_, exact.coef_, rtol=0.05, atol=0.02)
    np.testing.assert_allclose(est.intercept_, exact.intercept_, rtol=0.05, atol=0.02)
    # The steps so far point to the optimum.
    ref = LogisticRegression(C=1e6).fit(X, y)
    cosine = (est.coef_ @ ref.coef_.T).item() / np.linalg.norm(est.coef_) \
        / np.linalg.norm(ref.coef_)
    assert cosine > 0.999


# --------------------------------------------------------------------------
# The rule of solver="auto" and bad input
# --------------------------------------------------------------------------
def test_ridge_and_ratio_are_their_formulas():
    n, p, eps, delta = 32561, 123, 1.0, 1 / 32561**2
    unit = bn.gram_noise_unit(eps, delta, bn.DEFAULT_STEPS)
    assert unit == pytest.approx(1 / (gaussian_mu(eps, delta) * math.sqrt(bn.GRAM_SHARE)))
    margin = 2 * math.sqrt(math.log(1 / 0.05))
    assert bn.ridge_margin(3.0) == pytest.approx(3.0 * margin)
    assert bn.gram_ridge(3.0, 124) == pytest.approx(3.0 * (2 * math.sqrt(124) + margin))
    # lambda / (n B^2 / d) with sigma_G = sqrt(2) B^2 unit: independent of B.
    for b2 in (1.0, 15.0):
        sigma = math.sqrt(2) * b2 * unit
        assert bn.gram_ridge(sigma, 124) / (n * b2 / 124) == pytest.approx(
            bounded_newton_ridge_ratio(n, p, eps, delta))


def test_the_ridge_keeps_the_noisy_gram_matrix_above_the_exact_one():
    """P(||E|| > lambda) <= rho = 0.05 for the symmetric noise of the release."""
    rng = np.random.default_rng(0)
    d, sigma, runs = 60, 1.0, 400
    upper = np.triu_indices(d)
    failures = 0
    for _ in range(runs):
        E = np.zeros((d, d))
        E[upper] = rng.normal(scale=sigma, size=upper[0].size)
        E[upper[1], upper[0]] = E[upper]
        failures += np.linalg.eigvalsh(E)[0] < -bn.gram_ridge(sigma, d)
    assert failures / runs <= 0.05


def test_a_noisy_matrix_that_is_not_positive_definite_takes_bounded_steps():
    """Where the Cholesky factor fails, every eigenvalue is raised to the least
    curvature: no direction divides noise by a vanishing or negative eigenvalue.
    Without noise (least curvature 0) flat directions are left out."""
    A = np.diag([4.0, 1e-17, -2.0])
    rhs = np.array([[1.0, 1.0, 1.0]])
    np.testing.assert_allclose(bn._symmetric_solver(A, 0.5)(rhs), [[0.25, 2.0, 2.0]])
    np.testing.assert_allclose(bn._symmetric_solver(A, 0.0)(rhs), [[0.25, 0.0, 0.0]])
    B = np.array([[2.0, 1.0], [1.0, 2.0]])
    np.testing.assert_allclose(bn._symmetric_solver(B, 0.5)(rhs[:, :2]),
                               np.linalg.solve(B, rhs[0, :2])[None], atol=1e-12)


def test_a_positive_definite_matrix_below_the_least_curvature_is_floored():
    """Positive definite is not enough: an eigenvalue between 0 and the least curvature
    (noise that left a flat direction barely above 0) is raised to it too, while a
    matrix whose eigenvalues are all above it is solved exactly."""
    Q = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))[0]
    A = (Q * [4.0, 0.01, 2.0]) @ Q.T
    rhs = np.array([[1.0, -2.0, 0.5]])
    expected = rhs @ ((Q / [4.0, 0.5, 2.0]) @ Q.T)
    np.testing.assert_allclose(bn._symmetric_solver(A, 0.5)(rhs), expected, atol=1e-12)
    np.testing.assert_allclose(bn._symmetric_solver(A, 0.005)(rhs),
                               np.linalg.solve(A, rhs[0])[None], rtol=1e-10)


def test_auto_rule():
    loss = LogisticLoss()
    # a9a's shape: above the ratio at epsilon 0.1, below at 1 and 10.
    n, p = 32561, 123
    choices = {eps: resolve_solver("auto", n, p, eps, delta=1 / n**2, loss=loss,
                                   norm_bound=math.sqrt(14), feature_bound=1.0)
               for eps in (0.1, 1.0, 10.0)}
    assert choices == {0.1: "screened_newton", 1.0: "bounded_newton",
                       10.0: "bounded_newton"}
    assert bounded_newton_ridge_ratio(n, p, 1.0, 1 / n**2) <= BOUNDED_NEWTON_MAX_RIDGE_RATIO
    # Never without noise, with delta = 0, with an l1 penalty or past its feature cap.
    assert resolve_solver("auto", n, p, np.inf, loss=loss) != "bounded_newton"
    assert resolve_solver("auto", n, p, 1.0, loss=loss) != "bounded_newton"  # delta unknown
    assert resolve_solver("auto", n, p, 1.0, delta=0.0, loss=loss) == "greedy_cd"
    assert resolve_solver("auto", n, p, 1.0, delta=1e-9, loss=loss,
                          l1_penalty=True) != "bounded_newton"
    assert resolve_solver("auto", 10**12, bn.MAX_FEATURES + 1, 10.0, delta=1e-9,
                          loss=loss) != "bounded_newton"
    X, y = _classification(n=40000, p=3)
    est = DPSparseLogisticRegression(epsilon=1.0, delta=1e-9, classes=[0, 1],
                                     random_state=0).fit(X, y)
    assert est.solver_ == "bounded_newton"


def test_auto_with_an_integer_feature_selection_takes_a_screening_solver():
    """An integer feature_selection is taken by the screening solvers only: "auto" must
    not choose one that refuses it (here the rule would take the Newton steps)."""
    X, y = _classification(n=40000, p=3)
    assert resolve_solver("auto", *X.shape, 1.0, delta=1e-9,
                          loss=LogisticLoss()) == "bounded_newton"
    est = DPSparseLogisticRegression(epsilon=1.0, delta=1e-9, classes=[0, 1],
                                     feature_selection=2, random_state=0).fit(X, y)
    assert est.solver_ == "screened_newton"
    assert np.count_nonzero(est.coef_) <= 2


@pytest.mark.parametrize("params, message", [
    ({"penalty": "l1", "alpha": 0.1}, "l2 penalty at most"),
    ({"delta": 0.0}, "needs delta > 0"),
])
def test_bad_settings_fail_before_any_budget_is_reserved(params, message):
    X, y = _classification(n=50)
    est = DPSparseLogisticRegression(solver="bounded_newton", classes=[0, 1], **params)
    with privacy_ledger() as ledger, pytest.raises(ValueError, match=message):
        est.fit(X, y)
    assert ledger.spent()[0] == 0


def test_too_many_features_fail_before_any_budget_is_reserved():
    X = sp.random(20, bn.MAX_FEATURES + 1, density=0.01, format="csr", random_state=0)
    y = np.arange(20) % 2
    est = DPSparseLogisticRegression(solver="bounded_newton", classes=[0, 1])
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="at most 2000"):
        est.fit(X, y)
    assert ledger.spent()[0] == 0


@pytest.mark.parametrize("epsilon", [1.0, np.inf])
def test_too_many_steps_fail_before_any_budget_is_reserved(epsilon):
    # The plan records one event a step: 2^31 steps exhausted the memory (the process
    # was killed) before anything was refused.
    X, y = _classification(n=50)
    est = DPSparseLogisticRegression(solver="bounded_newton", classes=[0, 1],
                                     epsilon=epsilon, max_iter=bn.MAX_STEPS + 1)
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="max_iter <= 10000"):
        est.fit(X, y)
    assert len(ledger) == 0 and ledger.pending() == []


# --------------------------------------------------------------------------
# Dask arrays: the same fit as in memory
# --------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("chunks", [(600,), (200, 200, 200), (1, 299, 37, 263)])
@pytest.mark.parametrize("classes", [[0, 1], [0, 1, 2]])
def test_on_a_dask_array_it_equals_the_fit_in_memory(sparse, chunks, classes):
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    rng = np.random.default_rng(0)
    X = sp.random(600, 30, density=0.2, format="csr", random_state=1)
    X.data = rng.normal(size=X.nnz)
    y = np.digitize(X @ rng.normal(size=30), [-0.5, 0.5]) % len(classes)
    X = X if sparse else X.toarray()
    meta = sp.csr_matrix((0, 30)) if sparse else np.empty((0, 30))
    starts = np.concatenate([[0], np.cumsum(chunks)[:-1]])
    blocks = [da.from_delayed(dask.delayed(X[int(a):int(a + c)]), shape=(c, 30),
                              dtype=np.float64, meta=meta)
              for a, c in zip(starts, chunks, strict=True)]
    Xd = da.concatenate(blocks, axis=0)
    kw = dict(epsilon=2.0, delta=1e-6, solver="bounded_newton", multi_class="ovr",
              classes=classes, norm_bound=2.0, random_state=5)
    local = DPSparseLogisticRegression(**kw).fit(X, y)
    remote = DPSparseLogisticRegression(**kw).fit(Xd, da.from_array(y, chunks=(chunks,)))
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(remote.intercept_, local.intercept_, rtol=1e-9, atol=1e-9)
    assert remote.epsilon_spent_ == local.epsilon_spent_
