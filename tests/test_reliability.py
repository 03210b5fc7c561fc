"""What a fit may and may not do with its input, its budget and its output.

Each test pins a defect found in review: bounds applied to the wrong features,
the caller's matrix changed in place, stored zeros counted as features, verbose
output derived from the data, a stale model after a failed refit, an unexact
spend at extreme budgets, a curvature share taken in the wrong measure.
"""

import contextlib
import io
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

import skdp_sparse.optim.erm as erm_module
import skdp_sparse.solvers._screening as screening_module
import skdp_sparse.solvers.coordinate_descent as cd_module
from skdp_sparse import (
    DPGreedyCDRegressor,
    DPOutputPerturbationClassifier,
    DPSparseLogisticRegression,
    DPSparseMeanEstimator,
    privacy_ledger,
)
from skdp_sparse.optim.erm import guaranteed_iterations, solve_l2_erm
from skdp_sparse.optim.losses import LogisticLoss
from skdp_sparse.privacy.accounting import compose
from skdp_sparse.privacy.clipping import TINY_FACTOR, clip_rows
from skdp_sparse.solvers import SOLVERS as REGISTERED_SOLVERS
from skdp_sparse.solvers._screening import noise_units
from skdp_sparse.solvers.output_perturbation import output_perturbation_bounds
from skdp_sparse.utils.validation import (
    MAX_EPSILON,
    MIN_BOUND,
    check_privacy_params,
    smallest_epsilon,
)

SOLVERS = ["greedy_cd", "cd", "sgd", "sparse_sgd", "phased_sgd", "bias_reduced_sgd"]


def _data(n=80, p=6, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=0.5, format="csr", random_state=seed)
    X.data = rng.uniform(-2, 2, X.nnz)
    y = (X @ rng.normal(size=p) > 0).astype(int)
    return X, y


def _model(solver, **kw):
    """The classifier of ``solver``, or the regressor for the least-squares-only solver."""
    if solver == "sufficient_statistics":
        kw.pop("max_iter", None)
        return DPGreedyCDRegressor(epsilon=2.0, delta=1e-5, solver=solver, random_state=0,
                                   **kw)
    return _logistic(solver, **kw)


def _logistic(solver, **kw):
    kw.setdefault("max_iter", 3 if solver in ("cd", "greedy_cd") else 4)
    if solver == "phased_sgd":
        kw.pop("max_iter")
    return DPSparseLogisticRegression(epsilon=2.0, delta=1e-5, solver=solver, classes=[0, 1],
                                      random_state=0, **kw)


# ------------------------------------------------------------------ bounds
@pytest.mark.parametrize("solver", ["greedy_cd", "cd"])
def test_per_feature_bounds_apply_to_features_in_every_format(solver):
    # n > p: indexing the bounds by row (the CSC indices) would run past them.
    X, y = _data(n=80, p=6)
    bound = np.array([0.1, 0.2, 0.5, 1.0, 1.5, 2.0])
    fits = [_logistic(solver, feature_bound=bound, curvature="bound").fit(Z, y).coef_
            for Z in (X.tocsr(), X.tocsc(), X.toarray())]
    np.testing.assert_allclose(fits[1], fits[0], rtol=1e-12)
    np.testing.assert_allclose(fits[2], fits[0], rtol=1e-12)


# ------------------------------------------------------------ input intact
def _messy(X):
    """The same matrix with unsorted indices, a duplicate split and a stored zero."""
    coo = sp.coo_matrix(X)
    rows = np.r_[coo.row, coo.row[:1], 0]
    cols = np.r_[coo.col, coo.col[:1], X.shape[1] - 1]
    vals = np.r_[coo.data, coo.data[:1] * 0.5, 0.0]
    vals[0] *= 0.5
    order = np.argsort(-cols, kind="stable")  # descending columns: unsorted rows
    rows, cols, vals = rows[order], cols[order], vals[order]
    order = np.argsort(rows, kind="stable")
    indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=X.shape[0]))]
    messy = sp.csr_matrix((vals[order], cols[order], indptr), shape=X.shape)
    assert not messy.has_sorted_indices and not messy.has_canonical_format
    return messy


def _snapshot(X):
    return [a.copy() for a in (X.data, X.indices, X.indptr)]


def _read_only(X):
    for a in (X.data, X.indices, X.indptr):
        a.flags.writeable = False
    return X


ESTIMATORS = [
    *[(f"logistic-{s}", lambda s=s: _logistic(s)) for s in SOLVERS
      if s != "sufficient_statistics"],
    ("regressor-sufficient_statistics", lambda: _model("sufficient_statistics")),
    ("logistic-output_perturbation",
     lambda: _logistic("output_perturbation", penalty="l2")),
    ("regressor", lambda: DPGreedyCDRegressor(epsilon=2.0, delta=1e-5, max_iter=3,
                                              random_state=0)),
    ("output_perturbation", lambda: DPOutputPerturbationClassifier(classes=[0, 1],
                                                                   random_state=0)),
    ("mean", lambda: DPSparseMeanEstimator(epsilon=2.0, delta=1e-5, sparsity=4,
                                           random_state=0)),
]


@pytest.mark.parametrize("name, make", ESTIMATORS, ids=[e[0] for e in ESTIMATORS])
def test_caller_matrix_is_never_changed(name, make):
    X, y = _data()
    target = y.astype(float) if name.startswith("regressor") else y
    for fmt in ("csr", "csc"):
        messy = _messy(X).asformat(fmt) if fmt == "csc" else _messy(X)
        if fmt == "csc":
            messy.has_sorted_indices = False  # keep scipy's flag honest about the copy
        before = _snapshot(messy)
        est = make()
        est.fit(_read_only(messy), None if name == "mean" else target)
        if hasattr(est, "predict"):
            est.predict(messy)
        for a, b in zip(before, _snapshot(messy), strict=True):
            np.testing.assert_array_equal(a, b)


def test_read_only_memmap_input(tmp_path):
    X, y = _data()
    path = tmp_path / "X.npy"
    np.save(path, X.toarray())
    Xm = np.load(path, mmap_mode="r")
    clf = _logistic("greedy_cd").fit(Xm, y)
    clf.predict(Xm)
    ref = _logistic("greedy_cd").fit(X.toarray(), y)
    np.testing.assert_allclose(clf.coef_, ref.coef_)


@pytest.mark.parametrize("solver", SOLVERS + ["screened_newton", "output_perturbation"])
def test_duplicates_whose_sum_overflows_fail_before_any_budget(solver):
    # Every stored value is finite; their sum over a duplicated (row, column) is not.
    X, y = _data()
    X = X.tocoo()
    rows, cols, vals = np.r_[X.row, 0, 0], np.r_[X.col, 0, 0], np.r_[X.data, 1e308, 1e308]
    order = np.lexsort((cols, rows))
    indptr = np.searchsorted(rows[order], np.arange(X.shape[0] + 1))
    duplicated = sp.csr_matrix((vals[order], cols[order], indptr), shape=X.shape)
    assert not duplicated.has_canonical_format
    kw = {"penalty": "l2"} if solver == "output_perturbation" else {}
    with privacy_ledger(max_epsilon=10.0, max_delta=1e-3) as ledger:
        with pytest.raises(ValueError, match="duplicate entries"):
            _logistic(solver, **kw).fit(duplicated, y)
        assert ledger.records() == [] and ledger.pending() == []


def test_bias_reduced_sgd_refuses_one_row_before_any_budget():
    X, y = _data()
    with privacy_ledger(max_epsilon=10.0, max_delta=1e-3) as ledger:
        with pytest.raises(ValueError, match="n_samples >= 2"):
            _logistic("bias_reduced_sgd").fit(X[:1], y[:1])
        assert ledger.records() == [] and ledger.pending() == []
    _logistic("bias_reduced_sgd").fit(X[:2], np.array([0, 1]))


@pytest.mark.parametrize("solver", list(REGISTERED_SOLVERS))
@pytest.mark.parametrize("task", ["classifier", "regressor"])
def test_every_input_layout_gives_the_csr_fit(solver, task):
    # Values exact in float32, a quarter of them zero: every layout holds the same rows.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (120, 5)).astype(np.float32).astype(np.float64)
    X[X < -0.5] = 0.0
    penalty = "l2" if solver in ("output_perturbation", "sufficient_statistics") else "l1"
    if task == "classifier":
        if solver == "sufficient_statistics":
            pytest.skip("least squares only")
        est, y = _logistic(solver, penalty=penalty, max_iter=None), (X[:, 0] > 0).astype(int)
    else:
        if solver == "screened_newton":
            pytest.skip("logistic loss only")
        est = DPGreedyCDRegressor(epsilon=2.0, delta=1e-5, solver=solver, penalty=penalty,
                                  target_bounds=(-1, 1), random_state=0)
        y = X[:, 0]
    reference = clone(est).fit(sp.csr_matrix(X), y)
    layouts = {"dense": X, "fortran": np.asfortranarray(X), "float32": X.astype(np.float32),
               "list": X.tolist(), "csc": sp.csc_matrix(X), "coo": sp.coo_matrix(X),
               "lil": sp.lil_matrix(X)}
    for name, layout in layouts.items():
        fitted = clone(est).fit(layout, y)
        # Up to the order of a sum (bias-reduced SGD's dense gradients): 1e-12.
        np.testing.assert_allclose(fitted.coef_, reference.coef_, rtol=1e-12, atol=1e-14,
                                   err_msg=name)
        np.testing.assert_allclose(fitted.intercept_, reference.intercept_, rtol=1e-12,
                                   atol=1e-14, err_msg=name)


def test_stored_zeros_are_not_features():
    # sparse_sgd selects features by how many rows hold them: an explicit zero
    # must not count, or the same data gives other coefficients.
    X, y = _data(n=200, p=30)
    # The last row stores a zero in every column it does not hold.
    last = X[-1]
    missing = np.setdiff1d(np.arange(30), last.indices)
    row = sp.csr_matrix((np.r_[last.data, np.zeros(missing.size)],
                         np.r_[last.indices, missing], [0, 30]), shape=(1, 30))
    zeros = sp.vstack([X[:-1], row], format="csr")
    assert zeros.nnz > X.nnz
    est = _logistic("sparse_sgd", batch_size=50)
    np.testing.assert_array_equal(clone(est).fit(zeros, y).coef_, clone(est).fit(X, y).coef_)


# ------------------------------------------------------------------ verbose
@pytest.mark.parametrize("solver", SOLVERS)
def test_verbose_output_is_public(solver, capsys):
    """Two datasets of one shape give the same verbose output with the same seed:
    nothing printed depends on the data."""
    outputs = []
    for seed in (0, 1):
        X, y = _data(seed=seed)
        _model(solver, verbose=2).fit(X, y)
        outputs.append(capsys.readouterr().out)
    assert outputs[0].strip()
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize("solver", SOLVERS)
def test_verbose_lines_name_their_solver(solver, capsys):
    # Every progress line starts with "[solver]", as the gradient solvers' do: the
    # coordinate solvers printed a bare "update t/T".
    X, y = _data()
    _model(solver, verbose=1).fit(X, y)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines and all(line.startswith(f"[{solver}] ") for line in lines), lines


# ------------------------------------------------------- a failed refit
def test_failed_refit_leaves_no_stale_model():
    X, y = _data()
    clf = _logistic("greedy_cd").fit(X, y)
    with pytest.raises(ValueError, match="outside the public label set"):
        clf.fit(X, np.r_[y[:-1], 5])
    assert not hasattr(clf, "classes_") and not hasattr(clf, "coef_")
    with pytest.raises(NotFittedError):
        clf.predict(X)


@pytest.mark.parametrize("after_noise", [False, True])
def test_failure_inside_the_solver_releases_or_keeps_the_budget(after_noise, monkeypatch):
    X, y = _data()
    real = cd_module.coordinate_descent

    def failing(*args, rng=None, **kwargs):
        if after_noise:
            real(*args, rng=rng, **kwargs)
        raise FloatingPointError("solver failure")

    monkeypatch.setattr(cd_module, "coordinate_descent", failing)
    with privacy_ledger(max_epsilon=5.0, max_delta=1e-3) as ledger:
        with pytest.raises(FloatingPointError):
            _logistic("greedy_cd", curvature="bound").fit(X, y)
    assert ledger.pending() == []
    assert len(ledger) == int(after_noise)
    if after_noise:
        assert ledger.spent(delta=1e-5)[0] == pytest.approx(2.0, rel=1e-6)


# --------------------------------------------------------- extreme budgets
@pytest.mark.parametrize("solver", SOLVERS + ["output_perturbation"])
def test_largest_epsilon_is_handled_exactly(solver):
    X, y = _data()
    kw = {"penalty": "l2"} if solver == "output_perturbation" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        clf = _logistic(solver, **kw).set_params(epsilon=MAX_EPSILON).fit(X, y)
    assert np.all(np.isfinite(clf.coef_))
    assert clf.epsilon_spent_ <= MAX_EPSILON * (1 + 1e-9)
    assert compose(clf.privacy_events_, 1e-5)[0] == pytest.approx(clf.epsilon_spent_)


@pytest.mark.parametrize("epsilon", [MAX_EPSILON * 1.01, 1e9, 1e300, -1.0, 0.0, np.nan])
def test_epsilon_above_the_maximum_is_refused(epsilon):
    X, y = _data()
    with pytest.raises(ValueError, match="epsilon"):
        _logistic("sgd").set_params(epsilon=epsilon).fit(X, y)


@pytest.mark.parametrize("delta", [1e-6, 1e-3, 0.1])
@pytest.mark.parametrize("solver", SOLVERS + ["screened_newton", "sufficient_statistics"])
def test_epsilon_that_delta_alone_nearly_buys_is_refused_and_just_above_it_fits(solver, delta):
    # Below the floor a share of the fit's ratio would be (0, delta)-DP on its own and
    # the solvers' budget splits hit a zero epsilon (before the check: "epsilon must be
    # > 0, got 0.0" or a division by zero from inside a plan).
    X, y = _data()
    floor = smallest_epsilon(delta)
    with privacy_ledger(max_epsilon=10.0, max_delta=0.5) as ledger:
        with pytest.raises(ValueError, match="too small for delta"):
            _model(solver).set_params(epsilon=floor / 2, delta=delta).fit(X, y)
        assert ledger.records() == [] and ledger.pending() == []
    model = _model(solver).set_params(epsilon=floor * 1.02, delta=delta).fit(X, y)
    assert model.epsilon_spent_ <= floor * 1.02 * (1 + 1e-9)
    with pytest.raises(ValueError, match="too small for delta"):
        check_privacy_params(floor / 2, delta)


def test_noise_units_search_ends_on_any_epsilon(monkeypatch):
    # The search adds noise in doubling relative steps: an epsilon near the lattice's
    # own cost (2^-40) takes a few dozen rounds (it took about 10^6 rounds of a scalar
    # minimisation each at epsilon 1e-6, and did not end at 1e-13), and a search that
    # never lands fails with a message instead of looping.
    rounds = []
    real = screening_module.compose

    def counted(events, delta):
        rounds.append(1)
        return real(events, delta)

    monkeypatch.setattr(screening_module, "compose", counted)
    for epsilon in (1e-6, 1e-9, 1e-13):
        rounds.clear()
        units, events = noise_units(epsilon, 1e-30, [0.5, 0.5], True, ["a", "b"])
        assert all(math.isfinite(u) and u > 0 for u in units)
        assert real(events, 1e-30)[0] <= epsilon and len(rounds) <= 60
    monkeypatch.setattr(screening_module, "compose", lambda events, delta: (math.inf, delta))
    with pytest.raises(ValueError, match="too small to calibrate"):
        noise_units(1.0, 1e-6, [0.5, 0.5], True, ["a", "b"])


def test_infinite_epsilon_fits_without_noise():
    X, y = _data()
    clf = _logistic("sgd").set_params(epsilon=np.inf).fit(X, y)
    assert clf.epsilon_spent_ == math.inf


# ------------------------------------------- curvature share with Laplace
def test_laplace_curvature_share_is_taken_in_zcdp_when_delta_is_positive():
    """With delta > 0 the Laplace steps compose in zCDP (or advanced composition), so
    the estimate's share is a share of rho: the steps keep about 95% of the budget,
    not the 65% a share of the summed epsilons leaves them."""
    X, y = _data(n=400, p=8)
    eps, delta = 2.0, 1e-6
    clf = DPSparseLogisticRegression(epsilon=eps, delta=delta, solver="greedy_cd",
                                     selection="laplace", curvature="private", max_iter=20,
                                     norm_bound=4.0, classes=[0, 1], random_state=0).fit(X, y)
    steps, curvature = clf.privacy_events_[:-1], clf.privacy_events_[-1]
    assert curvature.name.startswith("curvature")
    rho_steps = sum(e.rho * e.count for e in steps)
    assert curvature.rho == pytest.approx(cd_module.CURVATURE_SHARE
                                          / (1 - cd_module.CURVATURE_SHARE) * rho_steps)
    assert compose(steps, delta)[0] >= 0.9 * eps
    assert clf.epsilon_spent_ == pytest.approx(eps, rel=1e-6)


# -------------------------------------------------------------- prediction
def test_probabilities_of_huge_scores_do_not_overflow():
    X, y = _data()
    clf = _logistic("sgd").fit(X, y)
    clf.coef_ = clf.coef_ * 1e6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proba = clf.predict_proba(X)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(axis=1), 1)


@pytest.mark.parametrize("make", [
    lambda: DPSparseLogisticRegression(epsilon=np.inf, classes=[0, 1, 2], max_iter=20),
    lambda: DPOutputPerturbationClassifier(epsilon=np.inf, classes=[0, 1, 2]),
])
def test_multiclass_probabilities_of_rows_far_from_every_class_are_finite(make):
    # When every one-vs-rest sigmoid of a row underflowed, its probabilities were
    # 0 / 0 = NaN.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (300, 4))
    clf = make().fit(X, np.argmax(X[:, :3], axis=1))
    clf.intercept_ = clf.intercept_ - 2000.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proba = clf.predict_proba(X)
        log_proba = clf.predict_log_proba(X)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(axis=1), 1)
    assert np.all(np.isfinite(log_proba))
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)], clf.predict(X))


def test_curvature_warning_points_at_the_caller():
    X, y = _data(n=300, p=10)
    X = X.multiply(10).tocsr()  # rows far above norm_bound=1
    with pytest.warns(UserWarning, match="norm_bound") as record:
        _logistic("greedy_cd", curvature="private").fit(X, y)
    assert {w.filename for w in record} == {__file__}


# ------------------------------------------------- output perturbation's solver
def test_output_perturbation_never_fails_on_a_small_budget():
    """A budget too small to certify the solution used to raise, which depends on
    the data; the solver now runs the public number of iterations of the
    accelerated method, whose point is as close to the optimum as certified."""
    X, y = _data(n=300, p=20)
    kw = dict(epsilon=np.inf, classes=[0, 1], alpha=1e-3, random_state=0)
    exact = DPOutputPerturbationClassifier(tol=1e-9, **kw).fit(X, y)
    small = DPOutputPerturbationClassifier(max_iter=1, **kw).fit(X, y)
    theta = np.r_[small.coef_.ravel(), small.intercept_]
    ref = np.r_[exact.coef_.ravel(), exact.intercept_]
    bounds = output_perturbation_bounds("logistic", n=300, d=20, alpha=1e-3, norm_bound=1.0,
                                        intercept_bound=1.0, tol=1e-3)
    assert np.linalg.norm(theta - ref) <= 1.01 * bounds["tol_abs"] / 1e-3


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("domain", ["none", "l2"])
def test_guaranteed_iterations_reach_the_distance(seed, domain):
    """On random strongly convex problems the fixed-iteration method lands within the
    distance its public iteration count promises, with nothing certified early."""
    rng = np.random.default_rng(seed)
    n, d, alpha = 50, 8, 0.05
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    loss = LogisticLoss()
    smoothness = loss.smoothness + alpha
    distance = 1e-4
    T = guaranteed_iterations(alpha, smoothness, math.log(2.0), distance)
    prob = erm_module._Problem(X, y, loss, alpha)
    w, it, _, _ = erm_module._accelerated_gradient_fixed(prob, domain, 0.5, smoothness,
                                                         tol=0.0, n_iter=T)
    ref = solve_l2_erm(X, y, loss, alpha, tol=1e-12, domain=domain, radius=0.5).coef
    assert it == T
    assert np.linalg.norm(w - ref) <= distance


@pytest.mark.parametrize("row", [[1e308, 1e308, 0.0, 0.0], [1.7e308, -1.7e308, 0.0, 1.0],
                                 [1e-300, 0.0, -3e-300, 0.0]])
@pytest.mark.parametrize("bound", [1e150, 1.0])
def test_rows_whose_norms_overflow_or_underflow_are_clipped_alike_in_every_layout(row, bound):
    # A finite row's l1 and l2 norms can exceed the largest double: the dense clip
    # left such a row unchanged (inf / inf), the CSR clip zeroed it. Against 1e150 the
    # factors of the rows of about 1e308 stay above TINY_FACTOR and the row keeps its
    # direction; against 1 they fall below it, and the row is 0 (inside the ball) in
    # every layout.
    X = np.array([row, [0.5, 0.0, 0.0, 0.0], [0.0] * 4])
    dense = clip_rows(X, max_l2=bound)
    for layout in (sp.csr_matrix(X), sp.csc_matrix(X)):
        np.testing.assert_allclose(clip_rows(layout, max_l2=bound).toarray(), dense,
                                   rtol=1e-15)
    top = np.abs(X[0]).max()

    def clipped(size, order):
        # min(size, norm), or 0 where the factor size / norm falls below TINY_FACTOR;
        # the norm in logarithms, as it may exceed the largest double
        log_norm = math.log(np.linalg.norm(X[0] / top, order)) + math.log(top)
        if math.log(size) - log_norm < math.log(TINY_FACTOR):
            return 0.0
        return size if log_norm >= math.log(size) else math.exp(log_norm)

    assert np.linalg.norm(dense[0]) == pytest.approx(clipped(bound, 2), rel=1e-12)
    assert np.linalg.norm(clip_rows(X, max_l1=2.0 * bound)[0], 1) == pytest.approx(
        clipped(2.0 * bound, 1), rel=1e-12)
    np.testing.assert_array_equal(dense[1:], X[1:])
    assert np.all(np.sign(dense[0]) == np.sign(X[0])) or not np.any(dense[0])


@pytest.mark.parametrize("bound", [1e-163, 0.0, -1.0, np.nan])
def test_clip_rows_refuses_bounds_below_the_estimators_floor(bound):
    # A row of values 1e-162 squares to 0: against 1e-163 it was returned unchanged,
    # ten times its bound; the estimators refuse such bounds, the public function too.
    X = np.full((1, 4), 1e-162)
    for name in ("max_l2", "max_l1"):
        for layout in (X, sp.csr_matrix(X)):
            with pytest.raises(ValueError, match=name):
                clip_rows(layout, **{name: bound})
    tiny = clip_rows(sp.csr_matrix(np.full((1, 4), 1e-99)), max_l2=MIN_BOUND)
    assert np.linalg.norm(tiny.toarray()) <= MIN_BOUND * (1 + 1e-15)


@pytest.mark.parametrize("solver, extra", [("screened_newton", {}),
                                           ("cd", {"max_iter": 5}),
                                           ("greedy_cd", {"decision": "calibrated",
                                                          "max_iter": 20}),
                                           ("sgd", {}), ("phased_sgd", {})])
def test_a_row_of_huge_opposite_entries_fits_like_any_other(solver, extra):
    # Its score inf - inf had no bin in the decision's class histogram (the fit
    # failed on this neighbour and not on the other), and dense rows escaped clipping.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    X[0, :] = 0.0
    X[0, 0], X[0, 1] = 1.7e308, -1.7e308
    for layout in (X, sp.csr_matrix(X)):
        model = DPSparseLogisticRegression(solver=solver, epsilon=5.0, delta=1e-5,
                                           classes=[0, 1], random_state=0, **extra)
        model.fit(layout, y)
        assert np.all(np.isfinite(model.coef_)) and np.all(np.isfinite(model.intercept_))


@pytest.mark.parametrize("solver, params, unused", [
    ("sgd", {"gradient_clip": 0.1}, "gradient_clip"),
    ("greedy_cd", {"batch_size": 64, "learning_rate": 0.1}, "batch_size, learning_rate"),
    ("cd", {"selection": "laplace", "contribution_bound": 3}, "contribution_bound, selection"),
])
def test_a_parameter_the_running_solver_does_not_read_is_pointed_out(solver, params, unused):
    # They were ignored in silence: the fit's coefficients were those without them.
    X = sp.random(400, 20, density=0.3, format="csr", random_state=0)
    y = np.arange(400) % 2
    with pytest.warns(UserWarning, match=f"solver '{solver}' does not use {unused} "):
        DPSparseLogisticRegression(classes=[0, 1], solver=solver, random_state=0,
                                   **params).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        DPSparseLogisticRegression(classes=[0, 1], solver=solver, random_state=0).fit(X, y)


@pytest.mark.parametrize("solver", sorted(REGISTERED_SOLVERS))
def test_verbose_prints_or_is_pointed_out(solver):
    # verbose=2 printed nothing for screened_newton, in silence.
    X = sp.random(400, 20, density=0.3, format="csr", random_state=0)
    y = np.arange(400) % 2
    extra = {"penalty": "l2"} if solver == "output_perturbation" else {}
    model = (DPGreedyCDRegressor() if solver == "sufficient_statistics"
             else DPSparseLogisticRegression(classes=[0, 1]))
    model.set_params(solver=solver, verbose=1, delta=1e-6, random_state=0, **extra)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y)
    pointed_out = [w for w in caught if "does not use verbose " in str(w.message)]
    assert bool(printed.getvalue()) == ("verbose" in REGISTERED_SOLVERS[solver].reads)
    assert bool(pointed_out) != bool(printed.getvalue())


@pytest.mark.parametrize("solver, decision, epsilon, pointed_out", [
    ("greedy_cd", "fitted", 1.0, True),  # greedy CD fits its own decision anyway
    ("greedy_cd", "calibrated", 1.0, False),
    ("cd", "fitted", 1.0, False),
    ("cd", "calibrated", 1.0, True),  # what "auto" chooses for cd
    ("cd", "calibrated", np.inf, True),  # nothing to calibrate without noise
])
def test_a_decision_the_run_takes_anyway_is_pointed_out(solver, decision, epsilon,
                                                         pointed_out):
    X = sp.random(400, 20, density=0.3, format="csr", random_state=0)
    y = np.arange(400) % 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DPSparseLogisticRegression(classes=[0, 1], solver=solver, decision=decision,
                                   epsilon=epsilon, random_state=0).fit(X, y)
    messages = [str(w.message) for w in caught]
    assert any("does not use decision " in m for m in messages) == pointed_out, messages
