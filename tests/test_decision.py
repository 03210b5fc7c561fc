"""The calibrated decision of the gradient solvers (:mod:`skdp_sparse.solvers.decision`).

The solver runs on part of the budget; two Gaussian histograms of the training scores
(l2 sensitivity ``sqrt(2K)``) fit the slope and the intercept. Both releases are
recorded with their privacy loss distribution and composed with the solver's steps,
so that the whole fit spends its ``(epsilon, delta)`` (to 0.1%).
"""

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from skdp_sparse import DPSparseLogisticRegression
from skdp_sparse.privacy.accounting import compose, gaussian_mu
from skdp_sparse.solvers import _calibration
from skdp_sparse.solvers import decision as D
from skdp_sparse.solvers._calibration import CALIBRATION_BINS, calibrate
from skdp_sparse.testing.bounds import assert_pair_audit

SOLVERS = ["sgd", "sparse_sgd", "phased_sgd", "cd"]


def _data(n=3000, p=20, rate=0.25, seed=0):
    """Rows of unit norm whose score ranks the labels, with a minority class."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=0.3, format="csr", random_state=rng)
    X = sp.csr_matrix(X.multiply(1.0 / np.maximum(sp.linalg.norm(X, axis=1), 1e-12)[:, None]))
    w = rng.normal(size=p)
    s = X @ w + rng.logistic(scale=0.1, size=n)
    y = (s > np.quantile(s, 1 - rate)).astype(int)
    return X, y


def _fit(solver, epsilon=1.0, delta=1e-6, seed=0, X=None, y=None, **kw):
    if X is None:
        X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DPSparseLogisticRegression(
            epsilon=epsilon, delta=delta, solver=solver, classes=np.unique(y),
            random_state=seed, **kw).fit(X, y)


def _decision_events(model):
    return [e for e in model.privacy_events_ if e.name.startswith("decision:")]


@pytest.mark.parametrize("n, K, epsilon", [(200, 1, 1.0), (30_000, 1, 1.0), (30_000, 3, 0.1),
                                           (30_000, 1, 10.0), (10**6, 2, 1.0)])
@pytest.mark.parametrize("safe", [False, True])
def test_share_and_units_follow_their_formulas(n, K, epsilon, safe):
    delta = 1.0 / n**2
    mu = gaussian_mu(epsilon, delta)
    split = D.DECISION_SPLIT["calibration"]
    need = 2 * K * (2 * CALIBRATION_BINS) ** 2 / (D.CELL_NOISE**2 * n**2 * mu**2 * split)
    share = D.decision_share(n, K, mu)
    assert share == pytest.approx(min(D.MAX_DECISION_SHARE, need), rel=1e-12)
    units, events = D.decision_units(epsilon, delta, safe, n, K)
    for (name, part), event in zip(D.DECISION_SPLIT.items(), events, strict=True):
        assert units[name] == pytest.approx(1.0 / (mu * math.sqrt(share * part)), rel=1e-12)
        if safe:
            # The lattice release, bounded by the continuous one with its slack.
            assert event.pld.lattice
            assert 2.0 / event.pld.noise_multiplier == pytest.approx(1.0 / units[name],
                                                                     rel=1e-4)
        else:
            assert event.mu == pytest.approx(1.0 / units[name], rel=1e-12)
    # Where the counts need it, a class histogram's cell has noise CELL_NOISE of an
    # average cell's count.
    if need < D.MAX_DECISION_SHARE:
        cell_sd = math.sqrt(2 * K) * units["calibration"]
        assert cell_sd == pytest.approx(D.CELL_NOISE * n / (2 * CALIBRATION_BINS), rel=1e-9)


def test_decision_events_match_dp_accounting():
    dpa = pytest.importorskip("dp_accounting")

    from skdp_sparse.privacy.subsampling import subsampled_gaussian_event
    delta = 1e-8
    units, events = D.decision_units(1.0, delta, False, 2000, 1)
    steps = subsampled_gaussian_event(3.0, 0.02, count=300)
    ours = compose([steps, *events], delta)[0]
    acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE,
                                value_discretization_interval=1e-4)
    acc.compose(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(3.0)), 300)
    for name in D.DECISION_SPLIT:
        # A count moves by one in two cells: the replace-one Gaussian of ratio 1 / unit,
        # dp-accounting's GaussianDpEvent(2 unit) (its replace-one shift is 2 / z).
        acc.compose(dpa.GaussianDpEvent(2.0 * units[name]))
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=2e-3)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 5.0])
def test_fit_spends_its_budget_with_the_decision(solver, safe, epsilon):
    m = _fit(solver, epsilon=epsilon, floating_point_safe=safe)
    assert [e.name for e in _decision_events(m)] == ["decision: scale histogram",
                                                     "decision: calibration histogram"]
    assert m.epsilon_spent_ <= epsilon * (1 + 1e-9)
    assert m.epsilon_spent_ >= epsilon * (1 - 0.002)
    assert m.delta_spent_ <= 1e-6 * (1 + 1e-9)
    assert compose(m.privacy_events_, 1e-6)[0] == pytest.approx(m.epsilon_spent_)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("n_classes", [2, 3])
def test_histograms_get_the_planned_noise(solver, n_classes, monkeypatch):
    calls = []
    real = _calibration.release

    def spy(value, sensitivity, unit, floating_point_safe, rng):
        calls.append((np.shape(value), sensitivity, unit))
        return real(value, sensitivity, unit, floating_point_safe, rng)

    monkeypatch.setattr(_calibration, "release", spy)
    X, y = _data()
    if n_classes == 3:
        y = y + (np.arange(y.size) % 3 == 0) * (1 - y) * 2
    m = _fit(solver, X=X, y=y)
    K = 1 if n_classes == 2 else 3
    units, _ = D.decision_units(1.0, 1e-6, True, X.shape[0], K)
    assert [c[0] for c in calls] == [(K, _calibration.SCALE_LEVELS), (K, 2 * CALIBRATION_BINS)]
    for (_, sensitivity, unit), name in zip(calls, D.DECISION_SPLIT, strict=True):
        assert sensitivity == pytest.approx(math.sqrt(2 * K))
        assert unit == pytest.approx(units[name], rel=1e-12)
    assert m.coef_.shape == (K, X.shape[1])


@pytest.mark.parametrize("solver", SOLVERS)
def test_fitted_decision_and_runs_without_noise_keep_the_solver_own(solver):
    assert not _decision_events(_fit(solver, decision="fitted"))
    exact = _fit(solver, epsilon=math.inf)
    fitted = _fit(solver, epsilon=math.inf, decision="fitted")
    assert not _decision_events(exact)
    np.testing.assert_array_equal(exact.coef_, fitted.coef_)
    np.testing.assert_array_equal(exact.intercept_, fitted.intercept_)


def test_other_solvers_keep_their_decision_unless_asked():
    assert not _decision_events(_fit("greedy_cd"))
    assert len(_decision_events(_fit("greedy_cd", decision="calibrated"))) == 2
    with pytest.raises(ValueError, match="does not apply to solver='bias_reduced_sgd'"):
        _fit("bias_reduced_sgd", decision="calibrated")
    with pytest.raises(ValueError, match="decision"):
        _fit("sgd", decision="best")


def test_calibrated_decision_follows_the_ranking():
    # A quarter of positives and unit rows: a few noisy steps of sgd rank the rows but
    # leave the intercept at the majority's side; the calibrated decision uses the
    # ranking. The ranking itself (ROC AUC) is the solver's.
    from sklearn.metrics import roc_auc_score
    X, y = _data(n=20_000, seed=3)
    Xt, yt = _data(n=20_000, seed=3)
    gains, aucs = [], []
    for seed in range(3):
        fitted = _fit("sgd", epsilon=0.5, seed=seed, X=X, y=y, decision="fitted")
        calibrated = _fit("sgd", epsilon=0.5, seed=seed, X=X, y=y)
        gains.append(np.mean(calibrated.predict(Xt) == yt) - np.mean(fitted.predict(Xt) == yt))
        aucs.append(roc_auc_score(yt, calibrated.decision_function(Xt)))
    assert np.mean(aucs) > 0.8
    assert np.mean(gains) > 0.03


@pytest.mark.parametrize("undernoised", [False, True])
def test_decision_audit(undernoised, monkeypatch):
    # Worst-case pair: one row's label flips, its score stays in the same bin, so one
    # positive cell loses a count and the negative cell of that bin gains one (the
    # full sensitivity sqrt(2)). The statistic is the difference of the two noisy
    # cells, drawn by the release the real calibration calls with the parameters it
    # passed; the honest release stays within the epsilon its recorded event claims,
    # the same release at half the noise is caught above it.
    from skdp_sparse.data import LocalData
    safe = True
    n, delta = 200, 1e-3
    units, events = D.decision_units(30.0, delta, safe, n, 1)
    claim_delta = 0.05
    claim = compose([events[1]], claim_delta)[0]
    captured = []
    real = _calibration.release

    def spy(value, sensitivity, unit, floating_point_safe, rng):
        captured.append((np.array(value), sensitivity, unit, floating_point_safe))
        return real(value, sensitivity, unit, floating_point_safe, rng)

    monkeypatch.setattr(_calibration, "release", spy)
    X = sp.csr_matrix(np.linspace(-1, 1, n)[:, None])
    y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    y_prime = y.copy()
    y_prime[0] = -1.0
    hists = []
    for labels in (y, y_prime):
        captured.clear()
        calibrate(LocalData(X, labels[:, None]), np.array([0]), np.array([[1.0]]),
                  norm_bound=1.0, offsets=np.zeros(1), scale_unit=units["scale"],
                  calibration_unit=units["calibration"], floating_point_safe=safe,
                  rng=np.random.default_rng(0))
        hists.append(captured[1])
    (h, sensitivity, unit, fp), (h_prime, *_) = hists
    differ = np.flatnonzero(h[0] != h_prime[0])
    assert differ.size == 2 and np.abs(h - h_prime).sum() == 2
    if undernoised:
        unit = unit / 2
    runs = 4000
    rng = np.random.default_rng(1)

    def statistic(hist):
        noisy = np.stack([real(hist, sensitivity, unit, fp, rng)[0][0] for _ in range(runs)])
        return noisy[:, differ[1]] - noisy[:, differ[0]]

    assert_pair_audit(statistic(h), statistic(h_prime), claim, claim_delta, undernoised)


@pytest.mark.parametrize("decision, below_majority", [("auto", False), ("fitted", True)])
def test_cd_does_not_decide_below_the_majority(decision, below_majority):
    # 7% positives: randomised coordinate descent's noisy intercept alone decided below
    # the majority class; with its calibrated decision it does not.
    X, y = _data(n=6000, rate=0.07, seed=4)
    Xt, yt = _data(n=6000, rate=0.07, seed=5)
    accs = [np.mean(_fit("cd", epsilon=0.1, seed=seed, X=X, y=y, decision=decision)
                    .predict(Xt) == yt) for seed in range(3)]
    majority = max(np.mean(yt), 1 - np.mean(yt))
    assert (np.mean(accs) < majority - 0.02) == below_majority


def _weak_multiclass(n=4000, p=8, k=8, seed=0):
    """k balanced classes, each a weak shift along its own axis: no one-vs-rest rule
    beats 'not this class' on its own, while the argmax of the scores does."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    X = np.eye(k, p)[y] * 1.5 + rng.normal(size=(n, p))
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0), y


@pytest.mark.parametrize("solver", ["sgd", "cd"])
def test_multiclass_calibrated_decision_keeps_the_argmax_of_the_scores(solver):
    # Each class scores its own fitted log-odds; the binary majority of each
    # one-vs-rest problem (every class's fallback) used to leave the argmax to the
    # offsets: 0.51 (sgd) and 0.45 (cd) against 0.55 with the solver's own decision.
    X, y = _weak_multiclass()
    classes = list(range(8))

    def accuracy(decision):
        return np.mean([DPSparseLogisticRegression(
            solver=solver, epsilon=4.0, delta=1e-6, classes=classes, decision=decision,
            random_state=seed).fit(X, y).score(X, y) for seed in range(3)])

    assert accuracy("calibrated") >= accuracy("fitted") - 0.03


def test_multiclass_decision_without_signal_predicts_the_most_frequent_class():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 6)) / 3
    y = rng.choice(3, size=3000, p=[0.6, 0.25, 0.15])  # independent of X
    for seed in range(3):
        model = DPSparseLogisticRegression(solver="sgd", epsilon=2.0, delta=1e-6,
                                           classes=[0, 1, 2], random_state=seed).fit(X, y)
        assert np.mean(model.predict(X) == 0) > 0.95
