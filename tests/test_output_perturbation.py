"""Output perturbation (paper 003, Alg. 3): projections, solver, calibration, audits."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog, minimize
from sklearn.linear_model import LogisticRegression, Ridge

from skdp_sparse import privacy_ledger
from skdp_sparse.linear_model import (
    DPOutputPerturbation,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
)
from skdp_sparse.optim.erm import ERMConvergenceError, solve_l2_erm
from skdp_sparse.optim.linf_projections import (
    linf_project,
    linf_project_box,
    linf_project_l1_ball,
    linf_project_l2_ball,
)
from skdp_sparse.optim.losses import HuberLoss, LogisticLoss, SquaredLoss
from skdp_sparse.optim.projections import project_l1_ball
from skdp_sparse.privacy.accounting import compose
from skdp_sparse.privacy.auditing import epsilon_lower_bound
from skdp_sparse.privacy.discrete import SENSITIVITY_SLACK, plan_gaussian, plan_laplace
from skdp_sparse.privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from skdp_sparse.solvers import output_perturbation as op
from skdp_sparse.solvers.output_perturbation import (
    fit_output_perturbation,
    output_perturbation_bounds,
)

SAFE = pytest.mark.parametrize("safe", [True, False], ids=["fp_safe", "float"])


def _random_cases(n_cases, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n_cases):
        d = int(rng.integers(1, 12))
        x = rng.standard_normal(d) * rng.choice([0.1, 1.0, 10.0])
        if d > 2 and rng.random() < 0.3:
            x[1] = -x[0]  # ties in |x|
        yield x, float(rng.choice([0.05, 0.5, 1.0, 3.0]))


# ---------------------------------------------------------------------------
# l_inf projections against brute force
# ---------------------------------------------------------------------------
def _lp_distance(x, radius, kind):
    """min t s.t. |x_j - z_j| <= t, z in the set, by linear programming."""
    d = x.size
    if kind == "box":
        # variables (z, t)
        c = np.r_[np.zeros(d), 1.0]
        eye = np.eye(d)
        A = np.block([[-eye, -np.ones((d, 1))], [eye, -np.ones((d, 1))]])
        b = np.r_[-x, x]
        bounds = [(-radius, radius)] * d + [(0, None)]
        return linprog(c, A_ub=A, b_ub=b, bounds=bounds, method="highs").fun
    # l1 ball: variables (z, u, t) with |z_j| <= u_j, sum u <= R
    c = np.r_[np.zeros(2 * d), 1.0]
    eye, zero, one = np.eye(d), np.zeros((d, d)), np.ones((d, 1))
    A = np.block([
        [-eye, zero, -one],
        [eye, zero, -one],
        [eye, -eye, np.zeros((d, 1))],
        [-eye, -eye, np.zeros((d, 1))],
        [np.zeros((1, d)), np.ones((1, d)), np.zeros((1, 1))],
    ])
    b = np.r_[-x, x, np.zeros(2 * d), radius]
    bounds = [(None, None)] * d + [(0, None)] * d + [(0, None)]
    return linprog(c, A_ub=A, b_ub=b, bounds=bounds, method="highs").fun


@pytest.mark.parametrize("kind", ["box", "l1"])
def test_linf_projection_matches_linear_program(kind):
    project = linf_project_box if kind == "box" else linf_project_l1_ball
    for x, radius in _random_cases(40, seed=1):
        z = project(x, radius)
        dist = np.max(np.abs(z - x))
        if kind == "box":
            assert np.max(np.abs(z)) <= radius
        else:
            assert np.abs(z).sum() <= radius * (1 + 1e-15)
        assert dist == pytest.approx(_lp_distance(x, radius, kind), rel=1e-9, abs=1e-12)


def _slsqp_l2_distance(x, radius):
    d = x.size
    return minimize(
        lambda v: v[-1],
        np.r_[x * radius / np.linalg.norm(x), np.max(np.abs(x))],
        jac=lambda v: np.r_[np.zeros(d), 1.0],
        constraints=[
            {"type": "ineq", "fun": lambda v: v[-1] - (x - v[:-1])},
            {"type": "ineq", "fun": lambda v: v[-1] + (x - v[:-1])},
            {"type": "ineq", "fun": lambda v: radius**2 - v[:-1] @ v[:-1]},
        ],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )


def test_linf_projection_l2_ball_is_optimal():
    for x, radius in _random_cases(40, seed=2):
        z = linf_project_l2_ball(x, radius)
        t = np.max(np.abs(z - x))
        assert np.linalg.norm(z) <= radius
        if np.linalg.norm(x) <= radius:
            np.testing.assert_array_equal(z, x)
            continue
        # Within l_inf distance t' of x the smallest l2 norm is that of the soft
        # threshold at t'; it exceeds R for every t' < t, so no feasible point is closer.
        t_less = t * (1 - 1e-9) - 1e-15
        closest = np.sign(x) * np.maximum(np.abs(x) - t_less, 0)
        assert np.linalg.norm(closest) > radius
        # Independent check by a generic constrained solver over (z, t).
        res = _slsqp_l2_distance(x, radius)
        assert t <= res.fun + 1e-7
        assert t == pytest.approx(res.fun, rel=1e-5, abs=1e-7)


def test_linf_projections_edge_cases():
    x = np.array([3.0, -1.0, 0.5])
    np.testing.assert_array_equal(linf_project(x, "none"), x)
    np.testing.assert_array_equal(linf_project(x, "box", 1.0), [1.0, -1.0, 0.5])
    # l1: the same point as the Euclidean projection (same soft threshold).
    np.testing.assert_allclose(linf_project_l1_ball(x, 1.0), project_l1_ball(x, 1.0))
    # A single dominant coordinate: the l2 and l1 answers shrink only it.
    np.testing.assert_allclose(linf_project_l2_ball(np.array([5.0, 0.0]), 2.0), [2.0, 0.0])
    with pytest.raises(ValueError):
        linf_project(x, "l3", 1.0)
    with pytest.raises(ValueError):
        linf_project_l2_ball(x, -1.0)
    with pytest.raises(ValueError):
        linf_project_box(np.array([np.nan]), 1.0)


# ---------------------------------------------------------------------------
# The solver: certificate and agreement with scikit-learn
# ---------------------------------------------------------------------------
def _data(n=60, d=8, seed=0, sparse=True, density=0.4):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=seed, format="csr")
    X.data = rng.standard_normal(X.data.size)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1 / np.maximum(norms, 1.0)) @ X  # every row inside the unit ball
    w = rng.standard_normal(d)
    y = np.where(X @ w + 0.3 * rng.standard_normal(n) > 0, 1, 0)
    return (sp.csr_matrix(X) if sparse else X.toarray()), y


def test_noise_free_classifier_equals_sklearn_logistic_regression():
    X, y = _data(n=80, d=6)
    n, lam = X.shape[0], 0.01
    ours = DPOutputPerturbationClassifier(
        epsilon=np.inf, alpha=lam, fit_intercept=False, tol=1e-6, random_state=0
    ).fit(X, y)
    ref = LogisticRegression(C=1 / (n * lam), fit_intercept=False, tol=1e-12,
                             max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    assert ours.epsilon_spent_ == math.inf

    # With an intercept: the same problem on the rows augmented by the constant b.
    b = 0.7
    ours = DPOutputPerturbationClassifier(
        epsilon=np.inf, alpha=lam, intercept_bound=b, tol=1e-6, random_state=0
    ).fit(X, y)
    Xa = sp.hstack([X, np.full((n, 1), b)]).tocsr()
    ref = LogisticRegression(C=1 / (n * lam), fit_intercept=False, tol=1e-12,
                             max_iter=10_000).fit(Xa, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_[:, :-1], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ours.intercept_, b * ref.coef_[:, -1], rtol=1e-6, atol=1e-8)


def test_noise_free_regressor_equals_ridge():
    X, _ = _data(n=70, d=5, sparse=False)
    rng = np.random.default_rng(3)
    y = X @ rng.standard_normal(5) + 0.1 * rng.standard_normal(70)
    n, lam = X.shape[0], 0.02
    ours = DPOutputPerturbationRegressor(
        epsilon=np.inf, alpha=lam, fit_intercept=False, target_bound=100.0, tol=1e-11
    ).fit(sp.csr_matrix(X), y)
    ref = Ridge(alpha=n * lam, fit_intercept=False, solver="cholesky").fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("loss", [LogisticLoss(), SquaredLoss(), HuberLoss(0.5)])
@pytest.mark.parametrize("domain, radius", [("none", None), ("box", 0.3), ("l2", 0.5),
                                            ("l1", 0.6)])
def test_solver_certificate_holds(loss, domain, radius):
    X, y01 = _data(n=50, d=6, seed=4)
    y = 2.0 * y01 - 1 if isinstance(loss, LogisticLoss) else 3.0 * (y01 - 0.4)
    lam, tol = 0.05, 1e-7
    res = solve_l2_erm(X, y, loss, lam, tol=tol, domain=domain, radius=radius)
    assert res.residual <= tol
    Xd = X.toarray()

    def obj(w):
        return np.mean(loss.value(y, Xd @ w)) + 0.5 * lam * w @ w

    def grad(w):
        return Xd.T @ loss.derivative(y, Xd @ w) / len(y) + lam * w

    # Reference minimiser by a different method (SLSQP with explicit constraints).
    cons = []
    if domain == "l2":
        cons = [{"type": "ineq", "fun": lambda w: radius**2 - w @ w,
                 "jac": lambda w: -2 * w}]
    elif domain == "l1":
        # |w_j| <= u_j, sum u <= R, over (w, u)
        d = Xd.shape[1]
        ref = minimize(
            lambda v: obj(v[:d]), np.zeros(2 * d),
            jac=lambda v: np.r_[grad(v[:d]), np.zeros(d)],
            constraints=[{"type": "ineq", "fun": lambda v: v[d:] - v[:d]},
                         {"type": "ineq", "fun": lambda v: v[d:] + v[:d]},
                         {"type": "ineq", "fun": lambda v: radius - v[d:].sum()}],
            method="SLSQP", options={"ftol": 1e-15, "maxiter": 1000},
        )
        w_ref = ref.x[:d]
    if domain != "l1":
        bounds = [(-radius, radius)] * Xd.shape[1] if domain == "box" else None
        w_ref = minimize(obj, np.zeros(Xd.shape[1]), jac=grad, bounds=bounds,
                         constraints=cons, method="SLSQP",
                         options={"ftol": 1e-15, "maxiter": 1000}).x
    assert np.linalg.norm(res.coef - w_ref) <= tol / lam + 1e-7


def test_solver_raises_when_certificate_unreachable():
    X, y = _data()
    with pytest.raises(ERMConvergenceError):
        solve_l2_erm(X, 2.0 * y - 1, LogisticLoss(), 1e-3, tol=1e-300, max_iter=2)


# ---------------------------------------------------------------------------
# Calibration: the noise is the stated mechanism at the stated sensitivity
# ---------------------------------------------------------------------------
@SAFE
def test_gaussian_calibration_formula(safe):
    X, y = _data(n=120, d=7)
    n, d, lam, tol, eps, delta = 120, 7, 0.03, 1e-3, 0.8, 1e-5
    _, _, info = fit_output_perturbation(
        X, 2.0 * y - 1, "logistic", alpha=lam, epsilon=eps, delta=delta, norm_bound=1.0,
        tol=tol, rng=0, intercept_bound=1.0, floating_point_safe=safe, return_info=True,
    )
    L = math.sqrt(2.0)  # |l'| <= 1 times the augmented row norm sqrt(1 + 1)
    g = tol * L / n
    delta2 = 2 * L / (lam * n) + 2 * g / lam
    assert info["l2_sensitivity"] == pytest.approx(delta2, rel=1e-14)
    mech = GaussianMechanism(info["l2_sensitivity"], epsilon=eps, delta=delta,
                             floating_point_safe=safe)
    assert info["noise_scale"] == pytest.approx(mech.sigma, rel=1e-14)
    assert info["noise_scale"] >= mech.sigma
    assert info["floating_point_safe"] is safe
    eps_spent, _ = info["accountant"].spent(delta)
    assert eps_spent <= eps and eps_spent == pytest.approx(eps, rel=1e-6)
    (event,) = info["accountant"].events
    if safe:
        # zCDP only, with the rounding slack in rho; the continuous calibration would
        # under-noise this path.
        assert event.name == "discrete_gaussian" and event.mu is None
        assert event.rho == pytest.approx(
            ((1 + SENSITIVITY_SLACK) * delta2 / info["noise_scale"]) ** 2 / 2, rel=1e-12)
        analytic = GaussianMechanism(delta2, epsilon=eps, delta=delta).sigma
        assert 1.02 * analytic < info["noise_scale"] < 1.1 * analytic
        assert info["granularity"] == plan_gaussian(
            info["l2_sensitivity"], info["noise_scale"], d + 1).gamma
    else:
        assert event.name == "gaussian" and info["granularity"] is None
    assert info["lipschitz"] == pytest.approx(L)
    # Only public values: the optimiser's iteration count depends on the rows.
    assert "n_iter" not in info and X.shape[1] == d


def test_laplace_calibration_formula_and_paper_bound():
    rng = np.random.default_rng(5)
    n, d, s, lam, tol, eps = 200, 30, 3, 0.05, 1e-3, 2.0
    rows = [rng.choice(d, s, replace=False) for _ in range(n)]
    X = sp.csr_matrix((rng.standard_normal(n * s), np.concatenate(rows),
                       np.arange(0, n * s + 1, s)), shape=(n, d))
    y = rng.choice([-1.0, 1.0], n)
    _, _, info = fit_output_perturbation(
        X, y, "logistic", alpha=lam, epsilon=eps, delta=0.0, norm_bound=1.0, tol=tol,
        rng=0, sparsity=s, return_info=True,
    )
    A2, A1 = math.sqrt(2.0), math.sqrt(s) + 1.0
    L, H = A2, 0.25 * A2**2
    g = tol * L / n
    sparse_bound = 2 * A1 / (lam * n) * (1 + H * (n - 1) / (lam * n))
    dense_bound = math.sqrt(d + 1) * 2 * L / (lam * n)
    delta1 = min(sparse_bound, dense_bound) + math.sqrt(d + 1) * 2 * g / lam
    assert info["l1_sensitivity"] == pytest.approx(delta1, rel=1e-14)
    # The floating-point-safe Laplace inflates the sensitivity by 2^-16 for its lattice.
    assert info["noise_scale"] == pytest.approx(
        LaplaceMechanism(delta1, epsilon=eps).scale, rel=1e-14)
    # Never above the paper's bound for s-sparse rows (s + 1 with the intercept).
    paper = 2 * math.sqrt(2 * (s + 1)) * L / (lam * n) * (2 * H / lam + 1)
    assert sparse_bound <= paper


@SAFE
def test_multiclass_budget_split(safe):
    X, _ = _data(n=90, d=5)
    y = np.random.default_rng(0).integers(0, 3, 90)
    eps, delta = 1.0, 1e-5
    # The solver's own budget split: without the calibrated decision's releases.
    clf = DPOutputPerturbationClassifier(epsilon=eps, delta=delta, alpha=0.1,
                                         floating_point_safe=safe, random_state=0,
                                         decision="fitted").fit(X, y)
    assert clf.coef_.shape == (3, 5) and clf.intercept_.shape == (3,)
    assert clf.epsilon_spent_ <= eps and clf.epsilon_spent_ == pytest.approx(eps, rel=1e-6)
    assert clf.delta_spent_ == delta
    assert clf.privacy_events_[0].count == 3
    _, _, info = fit_output_perturbation(
        X, np.where(y[:, None] == np.arange(3), 1.0, -1.0), "logistic", alpha=0.1,
        epsilon=eps, delta=delta, norm_bound=1.0, rng=0, floating_point_safe=safe,
        return_info=True,
    )
    joint = GaussianMechanism(math.sqrt(3) * info["l2_sensitivity"], epsilon=eps, delta=delta,
                              floating_point_safe=safe)
    assert info["noise_scale"] == pytest.approx(joint.sigma, rel=1e-14)
    # Joint calibration needs less noise than (eps/K, delta/K) for each release.
    split = GaussianMechanism(info["l2_sensitivity"], epsilon=eps / 3, delta=delta / 3,
                              floating_point_safe=safe)
    assert joint.sigma < split.sigma

    pure = DPOutputPerturbationClassifier(epsilon=eps, delta=0.0, alpha=0.1,
                                          random_state=0, decision="fitted").fit(X, y)
    assert pure.epsilon_spent_ == pytest.approx(eps) and pure.delta_spent_ == 0.0
    assert [e.epsilon for e in pure.privacy_events_] == [pytest.approx(eps / 3)]
    assert pure.privacy_events_[0].count == 3


def test_squared_loss_lipschitz_from_ridge_bound():
    b = output_perturbation_bounds("squared", n=100, d=4, alpha=0.04, norm_bound=2.0,
                                   intercept_bound=None, target_bound=3.0)
    # ||theta*|| <= T / sqrt(lambda) = 15, so |a.theta - y| <= 2 * 15 + 3.
    assert b["derivative_bound"] == pytest.approx(33.0)
    assert b["lipschitz"] == pytest.approx(66.0)
    boxed = output_perturbation_bounds("squared", n=100, d=4, alpha=0.04, norm_bound=2.0,
                                       intercept_bound=None, target_bound=3.0,
                                       domain="l2", radius=1.0)
    assert boxed["derivative_bound"] == pytest.approx(5.0)
    huber = output_perturbation_bounds("huber", n=100, d=4, alpha=0.04, norm_bound=2.0,
                                       intercept_bound=None, target_bound=3.0)
    assert huber["derivative_bound"] == 1.0


def test_default_alpha_uses_public_values_only():
    X1, y1 = _data(n=100, d=6, seed=1)
    X2, y2 = _data(n=100, d=6, seed=2)
    for delta in (0.0, 1e-4):
        a1 = DPOutputPerturbationClassifier(delta=delta, random_state=0).fit(X1, y1).alpha_
        a2 = DPOutputPerturbationClassifier(delta=delta, random_state=0).fit(X2, y2).alpha_
        assert a1 == a2 > 0
    # A larger budget needs less regularisation.
    small = DPOutputPerturbationClassifier(epsilon=0.1, delta=1e-4).fit(X1, y1).alpha_
    large = DPOutputPerturbationClassifier(epsilon=10.0, delta=1e-4).fit(X1, y1).alpha_
    assert large < small


@pytest.mark.parametrize("delta", [0.0, 1e-4])
def test_default_alpha_never_grows_with_epsilon(delta):
    # Without noise the default must not regularise more than at any finite budget.
    X, y = _data(n=100, d=6, seed=1)
    budgets = [0.1, 1.0, 10.0, 100.0, 1000.0, np.inf]
    alphas = [DPOutputPerturbationClassifier(epsilon=e, delta=delta, random_state=0)
              .fit(X, y).alpha_ for e in budgets]
    assert np.all(np.diff(alphas) <= 0), alphas
    assert alphas[-1] < alphas[0] / 100


def test_default_alpha_without_noise_matches_scikit_learn_accuracy():
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import MinMaxScaler, Normalizer

    X, y = load_breast_cancer(return_X_y=True)
    X = Normalizer().fit_transform(MinMaxScaler().fit_transform(X))
    X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0, stratify=y)
    reference = LogisticRegression().fit(X_train, y_train).score(X_test, y_test)
    model = DPOutputPerturbationClassifier(epsilon=np.inf).fit(X_train, y_train)
    majority = max(np.mean(y_test), 1 - np.mean(y_test))
    assert reference > majority + 0.2
    assert model.score(X_test, y_test) >= reference - 0.02


# ---------------------------------------------------------------------------
# Sensitivity on random neighbouring datasets
# ---------------------------------------------------------------------------
def _theta(X, y, loss, **kw):
    coef, intercept, info = fit_output_perturbation(
        X, y, loss, epsilon=np.inf, return_info=True, **kw
    )
    b = kw.get("intercept_bound", 1.0)
    theta = np.r_[coef, intercept / b] if kw.get("fit_intercept", True) else coef
    return theta, info


@pytest.mark.parametrize("loss", ["logistic", "squared", "huber"])
@pytest.mark.parametrize("domain, radius, delta", [("none", None, 0.0), ("none", None, 1e-6),
                                                   ("box", 0.4, 1e-6), ("l2", 0.5, 1e-6),
                                                   ("l1", 0.8, 1e-6)])
def test_sensitivity_on_random_neighbours(loss, domain, radius, delta):
    rng = np.random.default_rng(7)
    n, d, s = 25, 6, 2
    kw = dict(alpha=0.05, norm_bound=1.0, domain=domain, radius=radius, delta=delta,
              sparsity=s, target_bound=2.0 if loss != "logistic" else None)
    worst2 = worst1 = 0.0
    for _ in range(25):
        X = rng.standard_normal((n, d)) * rng.choice([0.3, 3.0])
        X[rng.random((n, d)) < 0.5] = 0.0
        y = (rng.choice([-1.0, 1.0], n) if loss == "logistic"
             else 4 * rng.standard_normal(n))
        X2, y2 = X.copy(), y.copy()
        k = rng.integers(n)
        X2[k] = rng.standard_normal(d) * 5
        y2[k] = -y[k] if loss == "logistic" else 10 * rng.standard_normal()
        t1, info = _theta(X, y, loss, **kw)
        t2, _ = _theta(X2, y2, loss, **kw)
        worst2 = max(worst2, np.linalg.norm(t1 - t2) / info["l2_sensitivity"])
        worst1 = max(worst1, np.abs(t1 - t2).sum() / info["l1_sensitivity"])
    assert worst2 <= 1.0
    if delta == 0.0:
        assert worst1 <= 1.0


def _saturated_huber(n=10):
    """Every residual is beyond the Huber threshold: theta* is linear in the data and
    replacing one target moves it by exactly 2L/(lambda n)."""
    X = np.ones((n, 1))
    y = np.full(n, 100.0)
    y2 = y.copy()
    y2[0] = -100.0
    kw = dict(alpha=1.0, norm_bound=1.0, fit_intercept=False, target_bound=100.0)
    return X, y, y2, kw


def test_sensitivity_bound_is_attained():
    X, y, y2, kw = _saturated_huber()
    t1, info = _theta(X, y, HuberLoss(1.0), delta=1e-6, **kw)
    t2, _ = _theta(X, y2, HuberLoss(1.0), delta=1e-6, **kw)
    exact = 2 * info["lipschitz"] / (kw["alpha"] * X.shape[0])
    assert np.linalg.norm(t1 - t2) == pytest.approx(exact, rel=1e-8)
    assert np.linalg.norm(t1 - t2) <= info["l2_sensitivity"] <= exact * (1 + 1.01e-3)


def test_l1_sensitivity_with_sparse_rows():
    """Rows with s nonzeros: the l1 movement stays below the sparse l1 bound."""
    rng = np.random.default_rng(11)
    n, d, s = 40, 200, 3
    kw = dict(alpha=0.5, norm_bound=1.0, sparsity=s, delta=0.0, intercept_bound=1.0)
    worst = 0.0
    for _ in range(15):
        rows = [rng.choice(d, s, replace=False) for _ in range(n)]
        X = sp.csr_matrix((rng.standard_normal(n * s), np.concatenate(rows),
                           np.arange(0, n * s + 1, s)), shape=(n, d))
        y = rng.choice([-1.0, 1.0], n)
        X2 = X.tolil()
        X2[0, :] = 0
        X2[0, rng.choice(d, s, replace=False)] = rng.standard_normal(s) * 3
        y2 = y.copy()
        y2[0] = -y[0]
        t1, info = _theta(X, y, "logistic", **kw)
        t2, _ = _theta(X2.tocsr(), y2, "logistic", **kw)
        assert info["l1_sensitivity_sparse"] < info["l1_sensitivity_dense"]
        worst = max(worst, np.abs(t1 - t2).sum() / info["l1_sensitivity"])
    assert 0 < worst <= 1.0


# ---------------------------------------------------------------------------
# Privacy audits of whole fits
# ---------------------------------------------------------------------------
def _audit_statistics(delta, epsilon, n_runs, seed, safe="auto"):
    X, y, y2, kw = _saturated_huber()
    out = []
    for j, yy in enumerate((y, y2)):
        stats = np.empty(n_runs)
        for r in range(n_runs):
            coef, _ = fit_output_perturbation(
                X, yy, HuberLoss(1.0), epsilon=epsilon, delta=delta,
                rng=np.random.default_rng([seed, j, r]), floating_point_safe=safe, **kw
            )
            stats[r] = coef[0]  # direction of theta(S) - theta(S') is +e_1
        out.append(stats)
    return out


class _HalfScaleLaplace(LaplaceMechanism):
    def __init__(self, sensitivity, **kwargs):
        super().__init__(sensitivity, **kwargs)
        self.scale /= 2


@SAFE
@pytest.mark.parametrize("under_noised", [False, True])
def test_audit_pure_dp_fit(monkeypatch, under_noised, safe):
    eps = 2.0
    if under_noised:
        monkeypatch.setattr(op, "LaplaceMechanism", _HalfScaleLaplace)
    a, b = _audit_statistics(0.0, eps, 2000, seed=1, safe=safe)
    lb = epsilon_lower_bound(a, b, delta=0.0, rng=0).epsilon_lb
    if under_noised:
        assert lb > eps
    else:
        assert lb <= eps


@SAFE
@pytest.mark.parametrize("under_noised", [False, True])
def test_audit_gaussian_fit(monkeypatch, under_noised, safe):
    eps, delta = 1.0, 1e-2
    if under_noised:
        real = op._gaussian_sigma
        monkeypatch.setattr(op, "_gaussian_sigma", lambda *a: real(*a) / 2)
    a, b = _audit_statistics(delta, eps, 4000, seed=2, safe=safe)
    lb = epsilon_lower_bound(a, b, delta=delta, rng=0).epsilon_lb
    if under_noised:
        assert lb > eps
    else:
        assert lb <= eps


@pytest.mark.slow
def test_audit_estimator_fit_with_intercept():
    """The audit through the estimator class, 2 features and an intercept."""
    n, eps, delta = 12, 1.0, 1e-2
    X = np.tile([1.0, 0.0], (n, 1))
    y = np.full(n, 50.0)
    y2 = y.copy()
    y2[0] = -50.0
    stats = []
    for yy in (y, y2):
        runs = []
        for r in range(6000):
            m = DPOutputPerturbationRegressor(
                loss="huber", huber_threshold=0.5, target_bound=50.0, alpha=2.0,
                epsilon=eps, delta=delta, random_state=r,
            ).fit(X, yy)
            runs.append(np.r_[m.coef_, m.intercept_])
        stats.append(np.array(runs))
    t_s = np.mean(stats[0], axis=0)
    t_sp = np.mean(stats[1], axis=0)
    u = (t_s - t_sp) / np.linalg.norm(t_s - t_sp)
    lb = epsilon_lower_bound(stats[0] @ u, stats[1] @ u, delta=delta, rng=0).epsilon_lb
    assert lb <= eps


# ---------------------------------------------------------------------------
# Floating-point-safe noise
# ---------------------------------------------------------------------------
def _unit_ratio(values, gamma):
    """``values / gamma`` and whether every entry is an integer."""
    units = np.ldexp(np.asarray(values, dtype=float), -int(round(math.log2(gamma))))
    return units, bool(np.all(units == np.rint(units)))


@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_auto_is_floating_point_safe_for_both_mechanisms(delta):
    X, y = _data()
    # The output's own release (the calibrated decision's are in test_decision.py).
    auto = DPOutputPerturbationClassifier(delta=delta, random_state=0,
                                          decision="fitted").fit(X, y)
    safe = DPOutputPerturbationClassifier(delta=delta, floating_point_safe=True,
                                          random_state=0, decision="fitted").fit(X, y)
    flt = DPOutputPerturbationClassifier(delta=delta, floating_point_safe=False,
                                         random_state=0, decision="fitted").fit(X, y)
    kind = "laplace" if delta == 0 else "gaussian"
    assert auto.get_params()["floating_point_safe"] == "auto"
    assert [e.name for e in auto.privacy_events_] == [f"discrete_{kind}"]
    np.testing.assert_array_equal(auto.coef_, safe.coef_)
    assert [e.name for e in flt.privacy_events_] == [kind]


@SAFE
@pytest.mark.parametrize("delta", [0.0, 1e-5])
@pytest.mark.parametrize("n_classes", [2, 4])
def test_spend_equals_the_budget(safe, delta, n_classes):
    X, _ = _data(n=120, d=6)
    y = np.arange(120) % n_classes
    eps = 0.7
    clf = DPOutputPerturbationClassifier(epsilon=eps, delta=delta, floating_point_safe=safe,
                                         random_state=0, decision="fitted").fit(X, y)
    assert clf.epsilon_spent_ <= eps
    assert clf.epsilon_spent_ == pytest.approx(eps, rel=1e-6)
    assert clf.delta_spent_ == delta
    assert compose(clf.privacy_events_, delta) == (clf.epsilon_spent_, clf.delta_spent_)


@SAFE
@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_safe_outputs_lie_on_the_lattice(safe, delta):
    X, y = _data(n=80, d=6)
    Y = np.where(y[:, None] == np.arange(2), 1.0, -1.0)  # two releases, one lattice
    for seed in range(3):
        coef, intercept, info = fit_output_perturbation(
            X, Y, "logistic", epsilon=1.0, delta=delta, norm_bound=1.0, rng=seed,
            floating_point_safe=safe, return_info=True,
        )
        released = np.column_stack([coef, intercept])  # intercept_bound = 1
        if not safe:
            assert info["granularity"] is None
            gamma = plan_gaussian(info["l2_sensitivity"], info["noise_scale"], 14).gamma \
                if delta else plan_laplace(info["l1_sensitivity"], info["noise_scale"], 14).gamma
            assert not _unit_ratio(released, gamma)[1]
            continue
        plan = plan_gaussian if delta else plan_laplace
        sens = info["l2_sensitivity"] if delta else info["l1_sensitivity"]
        assert info["granularity"] == plan(sens, info["noise_scale"], released.size).gamma
        assert _unit_ratio(released, info["granularity"])[1]


@SAFE
@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_neighbouring_fits_reach_the_same_lattice(safe, delta):
    """Replace-one neighbours get the same public lattice, and with the same seed their
    releases differ by whole lattice steps only. Data that differ in the low-order bits
    of one entry give bit-identical safe releases, while the float path shows the
    difference (the leak of Mironov 2012)."""
    X, y = _data(n=60, d=4)
    y = 2.0 * y - 1
    X_sp, y_sp = X.tolil(), y.copy()
    X_sp[0, :] = 0.5  # replace row 0
    y_sp[0] = -y[0]
    X_low = X.copy()
    X_low.data[0] *= 1 + 2.0**-40
    kw = dict(alpha=0.1, epsilon=1.0, delta=delta, norm_bound=1.0, sparsity=4)
    exact = [fit_output_perturbation(XX, y, "logistic", rng=0, **{**kw, "epsilon": np.inf})
             for XX in (X, X_low)]
    # The low-order bits do move the solution.
    assert not np.array_equal(np.r_[exact[0][0], exact[0][1]], np.r_[exact[1][0], exact[1][1]])
    for seed in range(10):
        runs = [fit_output_perturbation(XX, yy, "logistic", rng=seed, floating_point_safe=safe,
                                        return_info=True, **kw)
                for XX, yy in ((X, y), (X_sp.tocsr(), y_sp), (X_low, y))]
        released = [np.r_[coef, intercept] for coef, intercept, _ in runs]
        if not safe:
            assert not np.array_equal(released[0], released[2])
            continue
        gammas = {info["granularity"] for _, _, info in runs}
        assert len(gammas) == 1
        steps, whole = _unit_ratio(released[0] - released[1], gammas.pop())
        assert whole and np.any(steps != 0)
        np.testing.assert_array_equal(released[0], released[2])


def test_safe_gaussian_at_small_epsilon():
    X, y = _data()
    clf = DPOutputPerturbationClassifier(epsilon=0.01, delta=1e-5, random_state=0,
                                         decision="fitted").fit(X, y)
    assert clf.privacy_events_[0].name == "discrete_gaussian"
    assert clf.epsilon_spent_ <= 0.01 and clf.epsilon_spent_ == pytest.approx(0.01, rel=1e-6)


def test_unsafe_setting_refused_before_the_solver(monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("the solver ran before the lattice was planned")

    monkeypatch.setattr(op, "solve_l2_erm", no_work)
    X, y = _data()
    # epsilon = 1e-12: a Laplace scale 2^40 times the sensitivity, beyond the lattice.
    # (The Gaussian lattice reaches sigma sqrt(d) / Delta_2 = 2^40, out of practical reach.)
    with pytest.raises(ValueError, match="floating_point_safe=False"):
        DPOutputPerturbationClassifier(epsilon=1e-12, delta=0.0).fit(X, y)


# ---------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------
def test_sparse_formats_agree_and_are_not_densified(monkeypatch):
    X, y = _data(n=60, d=9)

    def boom(*a, **k):
        raise AssertionError("a sparse matrix was densified")

    results = {}
    for fmt in ("csr", "csc", "coo"):
        Xf = X.asformat(fmt)
        with monkeypatch.context() as m:
            for cls in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix):
                m.setattr(cls, "toarray", boom)
                m.setattr(cls, "todense", boom)
            clf = DPOutputPerturbationClassifier(delta=1e-5, random_state=3).fit(Xf, y)
            clf.predict(Xf)
        results[fmt] = clf.coef_
    dense = DPOutputPerturbationClassifier(delta=1e-5, random_state=3).fit(X.toarray(), y)
    for coef in results.values():
        np.testing.assert_allclose(coef, dense.coef_, rtol=1e-9, atol=1e-12)


def test_randomness_fresh_and_reproducible():
    X, y = _data()
    c1 = DPOutputPerturbationClassifier(delta=1e-5, random_state=4).fit(X, y).coef_
    c2 = DPOutputPerturbationClassifier(delta=1e-5, random_state=4).fit(X, y).coef_
    c3 = DPOutputPerturbationClassifier(delta=1e-5).fit(X, y).coef_
    c4 = DPOutputPerturbationClassifier(delta=1e-5).fit(X, y).coef_
    np.testing.assert_array_equal(c1, c2)
    assert not np.array_equal(c3, c4)


@pytest.mark.parametrize("domain, radius", [("box", 0.2), ("l2", 0.3), ("l1", 0.3)])
def test_output_lies_in_domain(domain, radius):
    X, y = _data()
    # The released coefficients; a calibrated decision rescales them.
    clf = DPOutputPerturbationClassifier(epsilon=0.5, delta=1e-5, domain=domain,
                                         radius=radius, random_state=0,
                                         decision="fitted").fit(X, y)
    theta = np.r_[clf.coef_.ravel(), clf.intercept_ / clf.intercept_bound]
    norm = {"box": np.max(np.abs(theta)), "l2": np.linalg.norm(theta),
            "l1": np.abs(theta).sum()}[domain]
    assert norm <= radius * (1 + 1e-12)


def test_predict_proba():
    X, y = _data()
    clf = DPOutputPerturbation(delta=1e-5, random_state=0).fit(X, np.array(["a", "b"])[y])
    p = clf.predict_proba(X)
    assert p.shape == (X.shape[0], 2)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.classes_[np.argmax(p, axis=1)], clf.predict(X))
    y3 = np.random.default_rng(0).integers(0, 3, X.shape[0])
    p3 = DPOutputPerturbationClassifier(random_state=0).fit(X, y3).predict_proba(X)
    np.testing.assert_allclose(p3.sum(axis=1), 1.0)


X_OK, Y_OK = _data(n=30, d=4, sparse=False)
X_NAN = X_OK.copy()
X_NAN[0, 0] = np.nan
X_INF = X_OK.copy()
X_INF[1, 1] = np.inf


@pytest.mark.parametrize(
    "params, X, y, match",
    [
        ({"epsilon": 0}, X_OK, Y_OK, "epsilon"),
        ({"epsilon": -1.0}, X_OK, Y_OK, "epsilon"),
        ({"delta": 1.0}, X_OK, Y_OK, "delta"),
        ({"delta": -1e-3}, X_OK, Y_OK, "delta"),
        ({"delta": np.nan}, X_OK, Y_OK, "delta"),
        ({"norm_bound": -1.0}, X_OK, Y_OK, "norm_bound"),
        ({"intercept_bound": 0.0}, X_OK, Y_OK, "intercept_bound"),
        ({"alpha": -0.1}, X_OK, Y_OK, "alpha"),
        ({"sparsity": 0}, X_OK, Y_OK, "sparsity"),
        ({"tol": 0.0}, X_OK, Y_OK, "tol"),
        ({"max_iter": 0}, X_OK, Y_OK, "max_iter"),
        ({"domain": "l3"}, X_OK, Y_OK, "domain"),
        ({"domain": "box", "delta": 1e-5}, X_OK, Y_OK, "radius"),
        ({"domain": "l2", "radius": 1.0, "delta": 0.0}, X_OK, Y_OK, "pure DP"),
        ({}, X_NAN, Y_OK, "NaN"),
        ({}, X_INF, Y_OK, "infinity"),
        ({}, X_OK, np.zeros(30), "class"),
        ({}, X_OK, np.linspace(0, 1, 30), "Unknown label type"),
        ({}, X_OK, None, "requires y"),
        ({"floating_point_safe": "yes"}, X_OK, Y_OK, "floating_point_safe"),
        ({"floating_point_safe": None}, X_OK, Y_OK, "floating_point_safe"),
    ],
)
def test_bad_input_raises_before_any_work(monkeypatch, params, X, y, match):
    def no_work(*a, **k):
        raise AssertionError("the solver ran before the input was checked")

    monkeypatch.setattr(op, "solve_l2_erm", no_work)
    with pytest.raises(ValueError, match=match):
        DPOutputPerturbationClassifier(**params).fit(X, y)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"target_bound": -1.0}, "target_bound"),
        # None is the default bound 1 (as for DPGreedyCDRegressor); with a range too:
        ({"target_bound": 2.0, "target_bounds": (0.0, 1.0)}, "not both"),
        ({"target_bounds": (1.0, 0.0)}, "target_bounds"),
        ({"loss": "logistic"}, "loss"),
        ({"loss": "huber", "huber_threshold": 0.0}, "huber_threshold"),
    ],
)
def test_bad_regressor_params(monkeypatch, params, match):
    monkeypatch.setattr(op, "solve_l2_erm", None)
    with pytest.raises(ValueError, match=match):
        DPOutputPerturbationRegressor(**params).fit(X_OK, X_OK[:, 0])


# ---------------------------------------------------------------------------
# scikit-learn conventions
# ---------------------------------------------------------------------------
# ---------------------------------------------------------------------------
# Real data
# ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a9a_beats_majority_and_matches_sklearn_without_noise():
    import os
    from pathlib import Path

    from sklearn.datasets import load_svmlight_file

    root = Path(os.environ.get("SKDP_DATA_DIR")
                or Path(__file__).resolve().parents[1].parent / "shared" / "data")
    if not (root / "a9a.bz2").exists():
        pytest.skip("a9a not available")
    X, y = load_svmlight_file(str(root / "a9a.bz2"), n_features=123)
    Xt, yt = load_svmlight_file(str(root / "a9a.t.bz2"), n_features=123)
    X = X / np.sqrt(14.0)  # at most 14 ones per row: rows inside the unit ball
    Xt = Xt / np.sqrt(14.0)
    n, lam = X.shape[0], 1e-3
    free = DPOutputPerturbationClassifier(epsilon=np.inf, alpha=lam, fit_intercept=False,
                                          tol=1e-6).fit(X, y)
    ref = LogisticRegression(C=1 / (n * lam), fit_intercept=False, tol=1e-12,
                             max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(free.coef_, ref.coef_, rtol=1e-5, atol=1e-6)
    private = DPOutputPerturbationClassifier(epsilon=1.0, delta=1 / n**2, sparsity=14,
                                             random_state=0).fit(X, y)
    assert private.score(Xt, yt) > np.mean(yt == -1) + 0.01


@pytest.mark.parametrize("make, params", [
    (DPOutputPerturbationClassifier, {"norm_bound": 1e100}),
    (DPOutputPerturbationClassifier, {"norm_bound": 1e-100, "intercept_bound": 1e100}),
    (DPOutputPerturbationRegressor, {"target_bound": 1.0, "intercept_bound": 1e100}),
    (DPOutputPerturbationRegressor, {"target_bound": 1.0, "alpha": 1e-100,
                                     "intercept_bound": 1e100}),
])
def test_bounds_whose_sensitivity_leaves_the_doubles_are_refused_by_name(make, params):
    # The default strength's L^2 H overflowed to inf (a zero sensitivity), or the
    # sensitivity to inf; the mechanism then refused "sensitivity 0.0", naming nothing
    # the user had set.
    X = sp.random(20, 4, density=0.5, format="csr", random_state=0)
    y = np.arange(20) % 2
    with privacy_ledger() as ledger, \
            pytest.raises(ValueError, match="intercept_bound=|norm_bound="):
        make(delta=0.0, random_state=0, **params).fit(X, y)
    assert len(ledger) == 0 and ledger.pending() == []
