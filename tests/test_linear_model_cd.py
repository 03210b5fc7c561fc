"""Private coordinate-descent estimators: exactness without noise, calibration,
privacy audits, input errors."""

import functools
import math
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.linear_model import Lasso, LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler

import skdp_sparse.solvers.coordinate_descent as cd_module
from skdp_sparse.linear_model import DPGreedyCDRegressor, DPSparseLogisticRegression
from skdp_sparse.privacy.accounting import compose, gaussian_epsilon, zcdp_rho
from skdp_sparse.privacy.auditing import epsilon_lower_bound


def _regression_data(n=200, p=30, seed=0, sparse=True):
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=0.3, random_state=seed, format="csr")
    X.data = rng.uniform(-1, 1, X.data.size)
    w = np.zeros(p)
    w[:4] = [1.0, -2.0, 0.5, 1.5]
    y = X @ w + 0.3 + 0.05 * rng.standard_normal(n)
    return (X if sparse else X.toarray()), y


def _classification_data(n=300, p=20, seed=0, n_classes=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, p)) * (rng.random((n, p)) < 0.4)
    W = rng.standard_normal((p, n_classes)) * 2
    y = np.argmax(X @ W + rng.gumbel(size=(n, n_classes)), axis=1)
    return X, y


# ------------------------------------------------------------- exactness
@pytest.mark.parametrize("solver", ["greedy_cd", "cd"])
@pytest.mark.parametrize("sparse", [True, False])
def test_noiseless_lasso_matches_sklearn(solver, sparse):
    X, y = _regression_data(sparse=sparse)
    alpha = 0.01
    reg = DPGreedyCDRegressor(epsilon=np.inf, penalty="l1", alpha=alpha, gradient_clip=np.inf,
                              solver=solver, max_iter=20000 if solver == "greedy_cd" else 2000,
                              tol=1e-12, random_state=0).fit(X, y)
    ref = Lasso(alpha=alpha, tol=1e-14, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(reg.coef_, ref.coef_, atol=1e-6)
    assert reg.intercept_ == pytest.approx(ref.intercept_, abs=1e-6)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_noiseless_logistic_l2_matches_sklearn(fit_intercept):
    X, y = _classification_data()
    n = X.shape[0]
    alpha = 1e-2
    clf = DPSparseLogisticRegression(epsilon=np.inf, penalty="l2", alpha=alpha,
                                     fit_intercept=fit_intercept, max_iter=50_000, tol=1e-12,
                                     random_state=0).fit(sp.csc_matrix(X), y == 1)
    # scikit-learn's objective is C * sum(log-loss) + ||w||^2 / 2, ours is the mean
    # log-loss + alpha/2 ||w||^2: C = 1 / (n alpha). lbfgs leaves the intercept unpenalised.
    ref = LogisticRegression(C=1 / (n * alpha), tol=1e-12, max_iter=10_000,
                             fit_intercept=fit_intercept).fit(X, y == 1)
    np.testing.assert_allclose(clf.coef_, ref.coef_, atol=1e-6)
    np.testing.assert_allclose(clf.intercept_, ref.intercept_, atol=1e-6)


# ------------------------------------------------------------ calibration
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 5.0])
def test_cd_gaussian_calibration(cd_calls, epsilon):
    X, y = _regression_data()
    n, p = X.shape
    delta = 1e-5
    # The bound's constants; curvature="private" is tested in test_curvature.py.
    reg = DPGreedyCDRegressor(epsilon=epsilon, delta=delta, solver="cd", max_iter=3,
                              curvature="bound", floating_point_safe=False,
                              decision="fitted", random_state=0).fit(X, y)
    kw = cd_calls[0]
    k = 3 * (p + 1)
    assert kw["n_updates"] == k
    sensitivity = 2 * kw["clip"] / n
    # Default clip for the squared loss: target_bound * feature_bound.
    np.testing.assert_allclose(kw["clip"], 1.0)
    mu = sensitivity / kw["update_scale"]
    np.testing.assert_allclose(mu, mu[0])
    # All k updates compose exactly into one Gaussian with mu * sqrt(k).
    assert gaussian_epsilon(mu[0] * math.sqrt(k), delta) == pytest.approx(epsilon, rel=1e-6)
    assert reg.epsilon_spent_ == pytest.approx(epsilon, rel=1e-6)
    assert reg.delta_spent_ == delta


def test_greedy_exponential_calibration(cd_calls):
    X, y = _classification_data(n_classes=3)
    n = X.shape[0]
    eps, delta, T = 1.0, 1e-6, 40
    clf = DPSparseLogisticRegression(epsilon=eps, delta=delta, max_iter=T, solver="greedy_cd",
                                     feature_bound=0.5, curvature="bound",
                                     floating_point_safe=False, random_state=0).fit(X, y)
    assert len(cd_calls) == 3
    kw = cd_calls[0]
    # Logistic loss: C_j = feature bound (0.5; intercept 1), M_j = b_j^2 / 4.
    np.testing.assert_allclose(kw["clip"][:-1], 0.5)
    np.testing.assert_allclose(kw["smoothness"][:-1], 0.25 * 0.25)
    delta_j = 2 * kw["clip"] / n
    mu = delta_j[0] / kw["update_scale"][0]
    np.testing.assert_allclose(delta_j / kw["update_scale"], mu)
    delta_u = np.max(delta_j / np.sqrt(kw["smoothness"]))
    eps_sel = 2 * delta_u / kw["selection_scale"]
    # Equal zCDP shares: eps_sel^2 / 8 == mu^2 / 2.
    assert eps_sel**2 / 8 == pytest.approx(mu**2 / 2)
    rho_total = 3 * T * (eps_sel**2 / 8 + mu**2 / 2)
    from skdp_sparse.privacy.accounting import zcdp_epsilon
    assert zcdp_epsilon(rho_total, delta) == pytest.approx(eps, rel=1e-6)
    assert clf.epsilon_spent_ == pytest.approx(eps, rel=1e-6)
    assert compose(clf.privacy_events_, delta)[0] == clf.epsilon_spent_


def test_greedy_laplace_pure_calibration(cd_calls):
    X, y = _regression_data()
    n = X.shape[0]
    T = 25
    reg = DPGreedyCDRegressor(epsilon=2.0, delta=0.0, selection="laplace", max_iter=T,
                              solver="greedy_cd", curvature="bound",
                              loss="huber", huber_threshold=0.5, floating_point_safe=False,
                              random_state=0).fit(X, y)
    kw = cd_calls[0]
    eps0 = 2.0 / (2 * T)  # basic composition of 2T pure steps
    delta_j = 2 * kw["clip"] / n
    np.testing.assert_allclose(kw["clip"], 0.5)  # |huber'| <= 0.5, b = 1
    np.testing.assert_allclose(kw["update_scale"], delta_j / eps0, rtol=1e-8)
    delta_u = np.max(delta_j / np.sqrt(kw["smoothness"]))
    assert kw["selection_scale"] == pytest.approx(2 * delta_u / eps0, rel=1e-8)
    assert kw["selection_noise"] == "laplace" and kw["update_noise"] == "laplace"
    assert reg.epsilon_spent_ == pytest.approx(2.0, rel=1e-8)
    assert reg.delta_spent_ == 0.0


def test_default_iterations_follow_public_rule(cd_calls):
    X, y = _regression_data(n=400)
    DPGreedyCDRegressor(epsilon=1.0, delta=1e-6, solver="greedy_cd", random_state=0).fit(X, y)
    # Squared loss with target_bound 1: F0 = 1/2 and C_j / sqrt(M_j) = 1; at n = 400 and
    # p = 30 the curvature release is skipped, so the steps get the whole budget
    # (default_greedy_iterations; tests/test_gcd_defaults.py pins the rule itself).
    rho = zcdp_rho(1.0, 1e-6)
    expected = math.floor(math.sqrt(2 * 0.5 * rho) / (2 / 400 * math.log(2 * 31)))
    assert cd_calls[0]["n_updates"] == expected == 7


def test_noise_is_fresh_and_seeded():
    X, y = _regression_data()
    # The solver's own coefficients: at this n the refit shrinks them to the mean.
    make = functools.partial(DPGreedyCDRegressor, epsilon=1.0, decision="fitted")
    a = make(random_state=3).fit(X, y).coef_
    b = make(random_state=3).fit(X, y).coef_
    c = make(random_state=4).fit(X, y).coef_
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Unseeded fits draw OS entropy.
    d = make().fit(X, y).coef_
    e = make().fit(X, y).coef_
    assert not np.array_equal(d, e)


# ----------------------------------------------------------------- audits
def _cd_audit(noise_factor, monkeypatch, n_runs=25_000):
    """Whole one-update DP-CD fit, update noise times ``noise_factor``.

    One feature, squared loss, targets far outside the clip: the changed row's
    per-example gradient goes from +C to -C, the full sensitivity 2C/n.
    """
    n = 8
    X = np.zeros((n, 1))
    X[0, 0] = 1.0
    y = np.zeros(n)
    real = cd_module.coordinate_descent

    def scaled(*args, **kwargs):
        kwargs["update_scale"] = kwargs["update_scale"] * noise_factor
        return real(*args, **kwargs)

    monkeypatch.setattr(cd_module, "coordinate_descent", scaled)
    outs = []
    for seed, target in enumerate((10.0, -10.0)):
        y[0] = target
        rng = np.random.default_rng(seed)
        reg = DPGreedyCDRegressor(epsilon=1.0, delta=1e-5, solver="cd", fit_intercept=False,
                                  penalty=None, max_iter=1, curvature="bound",
                                  random_state=rng)
        outs.append(np.array([reg.fit(X, y).coef_[0] for _ in range(n_runs)]))
    return epsilon_lower_bound(outs[0], outs[1], delta=1e-5)


@pytest.mark.slow
def test_audit_whole_cd_fit(monkeypatch):
    assert _cd_audit(1.0, monkeypatch).epsilon_lb <= 1.0
    assert _cd_audit(0.5, monkeypatch).epsilon_lb > 1.0


def _selection_audit(noise_factor, sampler, n_runs=15_000, p=30):
    """One greedy step on a worst-case pair, through the engine's selection rule.

    Squared loss with targets far outside the clip, so each per-example
    coordinate gradient sits at +-C: on S only coordinate 0 has gradient 2C/n,
    on S' every other coordinate has it and coordinate 0 has none. Every score
    moves by the full sensitivity Delta_u, the exponential mechanism's worst case.
    """
    from skdp_sparse.optim.coordinate_descent import coordinate_descent
    from skdp_sparse.optim.losses import SquaredLoss
    from skdp_sparse.optim.penalties import NoPenalty

    n, epsilon = 2, 1.0
    shared = np.ones(p)
    row_s = -np.ones(p)
    row_s[0] = 1.0
    y = np.full(n, -10.0)
    delta_u = 2 * 1.0 / n / 1.0  # 2 C / (n sqrt(M)) with C = M = 1
    picks = []
    for seed, changed in enumerate((row_s, -row_s)):
        X = np.vstack([shared, changed])
        rng = np.random.default_rng(seed + int(10 * noise_factor))
        hit = np.empty(n_runs)
        for r in range(n_runs):
            res = coordinate_descent(
                X, y, SquaredLoss(), NoPenalty(), fit_intercept=False, clip=np.ones(p),
                smoothness=np.ones(p), n_updates=1, selection="greedy",
                selection_noise="gumbel",
                selection_scale=noise_factor * 2 * delta_u / epsilon,
                # A tiny update noise marks the selected coordinate even where g_j = 0.
                update_noise="laplace", update_scale=np.full(p, 1e-12), rng=rng,
                gumbel_sampler=sampler,
            )
            hit[r] = res.coef[0] != 0
        picks.append(hit)
    return epsilon_lower_bound(picks[0], picks[1]).epsilon_lb


@pytest.mark.parametrize("sampler", ["pass", "heap"])
def test_audit_greedy_selection_step(sampler):
    assert _selection_audit(1.0, sampler) <= 1.0
    assert _selection_audit(0.5, sampler) > 1.0


# --------------------------------------------------------------- sklearn API
def test_pipeline_gridsearch_clone_pickle():
    X, y = _classification_data()
    pipe = make_pipeline(MaxAbsScaler(), DPSparseLogisticRegression(random_state=0))
    # Epsilons at which 150 rows carry signal: the best estimator must have learnt.
    grid = GridSearchCV(pipe, {"dpsparselogisticregression__epsilon": [2.0, 20.0]}, cv=2)
    grid.fit(sp.csr_matrix(X), y)
    assert grid.best_estimator_.score(X, y) > 0.5
    clf = clone(DPSparseLogisticRegression(epsilon=2.0, feature_bound=np.ones(20)))
    clf.fit(X, y)
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(again.predict(X), clf.predict(X))


def test_multiclass_shapes_and_proba():
    X, y = _classification_data(n_classes=3)
    clf = DPSparseLogisticRegression(epsilon=5.0, random_state=0).fit(X, y)
    assert clf.coef_.shape == (3, 20)
    assert clf.intercept_.shape == (3,)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert set(clf.predict(X)) <= set(clf.classes_)


def test_accepts_coo_and_lil():
    X, y = _regression_data()
    a = DPGreedyCDRegressor(random_state=0).fit(X.tocoo(), y).coef_
    b = DPGreedyCDRegressor(random_state=0).fit(X.tolil(), y).coef_
    c = DPGreedyCDRegressor(random_state=0).fit(X, y).coef_
    np.testing.assert_allclose(a, c)
    np.testing.assert_allclose(b, c)


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize("params, match", [
    (dict(epsilon=0.0), "epsilon"),
    (dict(epsilon=-1.0), "epsilon"),
    (dict(delta=1.0), "delta"),
    (dict(delta=-0.1), "delta"),
    (dict(feature_bound=-1.0), "feature_bound"),
    (dict(gradient_clip=-2.0, solver="greedy_cd"), "gradient_clip"),
    (dict(gradient_clip=np.inf, solver="greedy_cd"), "gradient_clip"),
    (dict(solver="sgdx"), "solver"),
    (dict(penalty="l3"), "penalty"),
    (dict(delta=0.0, solver="greedy_cd", selection="exponential"), "delta > 0"),
    (dict(delta=0.0, solver="sgd"), "delta > 0"),
    (dict(solver="output_perturbation"), "penalty='l2'"),
    (dict(norm_bound=0.0, solver="sgd"), "norm_bound"),
    (dict(batch_size=0, solver="sgd"), "batch_size"),
    (dict(alpha=-1.0), "alpha"),
    (dict(max_iter=0), "max_iter"),
])
def test_bad_parameters_raise(params, match):
    X, y = _classification_data()
    with pytest.raises(ValueError, match=match):
        DPSparseLogisticRegression(**params).fit(X, y)


def test_bad_data_raise():
    X, y = _classification_data()
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        DPSparseLogisticRegression().fit(Xn, y)
    Xi = X.copy()
    Xi[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        DPSparseLogisticRegression().fit(Xi, y)
    with pytest.raises(ValueError, match="one class"):
        DPSparseLogisticRegression().fit(X, np.zeros(len(y)))
    with pytest.raises(ValueError, match="continuous|Unknown label"):
        DPSparseLogisticRegression().fit(X, np.linspace(0, 1, len(y)))
    with pytest.raises(ValueError, match="inconsistent|samples"):
        DPSparseLogisticRegression().fit(X, y[:-1])
    with pytest.raises(ValueError, match="loss"):
        DPGreedyCDRegressor(loss="hinge").fit(X, y.astype(float))


# ----------------------------------------------------------- solver choice
def test_auto_solver_rule_uses_public_shape_only():
    from skdp_sparse.optim.losses import LogisticLoss, SquaredLoss
    from skdp_sparse.solvers import resolve_solver

    # Other losses: the rule of before.
    assert resolve_solver("auto", 32_561, 123, 1.0) == "greedy_cd"
    assert resolve_solver("auto", 7_770, 8_315, 1.0) == "sgd"
    assert resolve_solver("auto", 100_000, 1_000_000, 1.0, loss=SquaredLoss()) == "sparse_sgd"
    assert resolve_solver("cd", 10, 10**7, 1.0) == "cd"
    # The logistic loss: greedy CD with many examples per feature, else the screened
    # Newton step (benchmarks/bench_text.py).
    logistic = LogisticLoss()
    assert resolve_solver("auto", 32_561, 123, 1.0, loss=logistic) == "greedy_cd"
    assert resolve_solver("auto", 32_561, 123, 0.1, loss=logistic) == "screened_newton"
    assert resolve_solver("auto", 7_770, 8_315, 1.0, loss=logistic) == "screened_newton"
    assert resolve_solver("auto", 25_000, 2**18, 1.0, loss=logistic) == "screened_newton"
    assert resolve_solver("auto", 100_000, 1_000_000, 1.0, loss=logistic) == "screened_newton"
    X, y = _classification_data()
    clf = DPSparseLogisticRegression(random_state=0).fit(X, y)
    assert clf.solver_ == resolve_solver("auto", *X.shape, 1.0, loss=logistic,
                                         norm_bound=clf.norm_bound)
    # Same shape, different labels and values: same choice.
    rng = np.random.default_rng(5)
    clf2 = DPSparseLogisticRegression(random_state=0).fit(rng.random(X.shape), y[::-1])
    assert clf2.solver_ == clf.solver_

def test_pure_dp_defaults_take_greedy_cd_with_laplace_selection():
    from skdp_sparse.optim.losses import LogisticLoss, SquaredLoss
    from skdp_sparse.solvers import resolve_solver

    # delta = 0 leaves greedy CD, whatever the shape and loss; not without noise.
    for loss in (LogisticLoss(), SquaredLoss(), None):
        assert resolve_solver("auto", 7_770, 8_315, 1.0, delta=0.0, loss=loss) == "greedy_cd"
        assert resolve_solver("auto", 100_000, 10**6, 1.0, delta=0.0, loss=loss) == "greedy_cd"
        assert resolve_solver("auto", 7_770, 8_315, 1.0, delta=1e-6, loss=loss) != "greedy_cd"
    assert resolve_solver("auto", 7_770, 8_315, math.inf, delta=0.0, loss=LogisticLoss()) \
        == resolve_solver("auto", 7_770, 8_315, math.inf, loss=LogisticLoss())
    X, y = _classification_data(n=400, n_classes=3)
    for est in (DPSparseLogisticRegression(delta=0.0, classes=[0, 1, 2], random_state=0),
                DPGreedyCDRegressor(delta=0.0, random_state=0)):
        target = y if isinstance(est, DPSparseLogisticRegression) else (y - 1.0) / 2
        est.fit(sp.csr_matrix(X), target)
        assert est.solver_ == "greedy_cd"
        assert est.delta_spent_ == 0.0
        assert est.epsilon_spent_ <= 1.0 * (1 + 1e-9)
        names = [event.name for event in est.privacy_events_]
        assert names and all("laplace" in name for name in names), names
        assert est.get_params()["selection"] == "auto"  # resolved in the fit only
    # with delta > 0 the default selection stays the exponential mechanism
    clf = DPSparseLogisticRegression(solver="greedy_cd", classes=[0, 1, 2],
                                     random_state=0).fit(X, y)
    assert any("exponential" in event.name for event in clf.privacy_events_)
    # an explicit exponential selection at delta = 0 is still refused, before any work
    with pytest.raises(ValueError, match="selection='laplace'"):
        DPSparseLogisticRegression(delta=0.0, selection="exponential",
                                   classes=[0, 1, 2]).fit(X, y)



@pytest.mark.parametrize("solver", ["sgd", "sparse_sgd", "phased_sgd", "bias_reduced_sgd",
                                    "output_perturbation"])
def test_every_solver_fits_and_spends_the_budget(solver):
    X, y = _classification_data(n=400, n_classes=3)
    penalty = "l2" if solver == "output_perturbation" else "l1"
    clf = DPSparseLogisticRegression(epsilon=2.0, delta=1e-5, solver=solver, penalty=penalty,
                                     random_state=0).fit(sp.csr_matrix(X), y)
    assert clf.coef_.shape == (3, X.shape[1])
    assert clf.epsilon_spent_ <= 2.0 * (1 + 1e-6)
    assert compose(clf.privacy_events_, 1e-5)[0] == pytest.approx(clf.epsilon_spent_)
    assert set(clf.predict(X)) <= set(clf.classes_)
    reg = DPGreedyCDRegressor(epsilon=2.0, delta=1e-5, solver=solver, penalty=penalty,
                              random_state=0).fit(*_regression_data())
    assert reg.epsilon_spent_ <= 2.0 * (1 + 1e-6)


def test_noiseless_sgd_solver_through_estimator_matches_sklearn():
    X, y = _classification_data()
    n = X.shape[0]
    alpha = 1e-2
    Xn = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    clf = DPSparseLogisticRegression(epsilon=np.inf, solver="sgd", penalty="l2", alpha=alpha,
                                     max_iter=20_000, learning_rate=1.0, random_state=0)
    clf.fit(Xn, y == 1)
    ref = LogisticRegression(C=1 / (n * alpha), tol=1e-12, max_iter=10_000).fit(Xn, y == 1)
    np.testing.assert_allclose(clf.coef_, ref.coef_, atol=1e-6)
    np.testing.assert_allclose(clf.intercept_, ref.intercept_, atol=1e-6)
    assert clf.epsilon_spent_ == np.inf
