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

from skdp_sparse import DPOutputPerturbationClassifier, DPSparseLogisticRegression
from skdp_sparse.privacy.accounting import compose, gaussian_mu
from skdp_sparse.solvers import _calibration
from skdp_sparse.solvers import decision as D
from skdp_sparse.solvers._calibration import CALIBRATION_BINS, calibrate
from skdp_sparse.testing.bounds import assert_pair_audit

SOLVERS = ["sgd", "sparse_sgd", "phased_sgd", "cd", "output_perturbation", "bounded_newton"]


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
    if solver == "output_perturbation":
        kw.setdefault("penalty", "l2")  # the problem it solves
    # The decision of one-vs-rest scores (a multinomial fit keeps its own).
    kw.setdefault("multi_class", "ovr")
    if X is None:
        X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DPSparseLogisticRegression(
            epsilon=epsilon, delta=delta, solver=solver, classes=np.unique(y),
            random_state=seed, **kw).fit(X, y)


def _cap(K):
    # A binary decision takes up to twice a multiclass one's share: its gain tests
    # choose between the fitted rule, the class count's threshold and the majority.
    return D.MAX_DECISION_SHARE if K == 1 else D.MAX_MULTICLASS_DECISION_SHARE


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
    assert share == pytest.approx(min(_cap(K), need), rel=1e-12)
    units, events = D.decision_units(epsilon, delta, safe, n, K)
    splits = D.decision_splits(K)
    # A quarter on top: with K > 1 the multiclass comparison with the majority, with one
    # problem its class count.
    assert splits == {**D.DECISION_SPLIT, ("classes" if K == 1 else "gain"): 0.25}
    for (name, part), event in zip(splits.items(), events, strict=True):
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
    if need < _cap(K):
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
    for name in D.decision_splits(1):
        # A count moves by one in two cells (by one in the class count): the replace-one
        # Gaussian of ratio 1 / unit, dp-accounting's GaussianDpEvent(2 unit) (its
        # replace-one shift is 2 / z).
        acc.compose(dpa.GaussianDpEvent(2.0 * units[name]))
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=2e-3)


@pytest.mark.parametrize("n, K, epsilon", [(200, 1, 1.0), (30_000, 1, 1.0), (30_000, 3, 0.1)])
def test_pure_units_follow_their_formula(n, K, epsilon):
    # delta = 0: Laplace releases at their part of epsilon, composed by adding them.
    split = D.DECISION_SPLIT["calibration"]
    need = 2 * math.sqrt(2) * K * 2 * CALIBRATION_BINS / (D.CELL_NOISE * n * epsilon * split)
    share = D.decision_share_pure(n, K, epsilon)
    assert share == pytest.approx(min(_cap(K), need), rel=1e-12)
    units, events = D.decision_units(epsilon, 0.0, True, n, K)
    for (name, part), event in zip(D.decision_splits(K).items(), events, strict=True):
        assert event.epsilon == pytest.approx(epsilon * share * part, rel=1e-12)
        assert event.delta == 0 and units[name] == pytest.approx(1 / event.epsilon)
    if need < _cap(K):
        # A class histogram's cell: Laplace of l1 sensitivity 2K, sd sqrt(2) times its scale.
        cell_sd = math.sqrt(2) * 2 * K * units["calibration"]
        assert cell_sd == pytest.approx(D.CELL_NOISE * n / (2 * CALIBRATION_BINS), rel=1e-9)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_output_perturbation_spends_its_budget_with_the_decision(delta, n_classes):
    X, y = _data()
    if n_classes == 3:
        y = y + (np.arange(y.size) % 3 == 0) * (1 - y) * 2
    m = DPOutputPerturbationClassifier(epsilon=1.0, delta=delta, classes=np.unique(y),
                                       random_state=0).fit(X, y)
    third = "class count" if n_classes == 2 else "multiclass comparison with the majority"
    assert [e.name for e in _decision_events(m)] == [
        "decision: scale histogram", "decision: calibration histogram", f"decision: {third}"]
    if delta == 0:
        assert all(e.delta == 0 for e in m.privacy_events_)
        assert m.epsilon_spent_ == pytest.approx(1.0, rel=1e-12) and m.delta_spent_ == 0
    else:
        assert 1.0 * (1 - 0.002) <= m.epsilon_spent_ <= 1.0 * (1 + 1e-9)
    assert compose(m.privacy_events_, delta)[0] == pytest.approx(m.epsilon_spent_)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_output_perturbation_does_not_decide_below_the_majority(delta):
    # Many features and a weak signal: the one noisy release points the coefficients
    # almost anywhere (hashed SMS messages at epsilon 1 and delta 0: accuracy 0.53
    # against the majority's 0.87). The calibrated decision sees it and keeps the
    # majority; with delta = 0 the solver's own decision is below it, so the test sees
    # the defect it guards against.
    rng = np.random.default_rng(0)
    X = sp.random(2000, 5000, density=0.002, format="csr", random_state=rng)
    X = sp.csr_matrix(X.multiply(1.0 / np.maximum(sp.linalg.norm(X, axis=1), 1e-12)[:, None]))
    y = (rng.random(2000) < 0.15).astype(int)
    majority = 1 - y.mean()

    def accuracy(decision):
        return np.mean([np.mean(DPOutputPerturbationClassifier(
            epsilon=0.3, delta=delta, classes=[0, 1], decision=decision, random_state=seed)
            .fit(X, y).predict(X) == y) for seed in range(4)])

    assert accuracy("auto") >= majority - 0.005
    if delta == 0:
        assert accuracy("fitted") < majority - 0.02


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 5.0])
def test_fit_spends_its_budget_with_the_decision(solver, safe, epsilon):
    m = _fit(solver, epsilon=epsilon, floating_point_safe=safe)
    assert [e.name for e in _decision_events(m)] == ["decision: scale histogram",
                                                     "decision: calibration histogram",
                                                     "decision: class count"]
    assert m.epsilon_spent_ <= epsilon * (1 + 1e-9)
    assert m.epsilon_spent_ >= epsilon * (1 - 0.002)
    assert m.delta_spent_ <= 1e-6 * (1 + 1e-9)
    assert compose(m.privacy_events_, 1e-6)[0] == pytest.approx(m.epsilon_spent_)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("n_classes", [2, 3])
def test_histograms_get_the_planned_noise(solver, n_classes, spy_on_releases):
    captured, _ = spy_on_releases()
    X, y = _data()
    if n_classes == 3:
        y = y + (np.arange(y.size) % 3 == 0) * (1 - y) * 2
    m = _fit(solver, X=X, y=y)
    K = 1 if n_classes == 2 else 3
    units, _ = D.decision_units(1.0, 1e-6, True, X.shape[0], K)
    # The class histograms' bins follow from n and the planned noise of a cell.
    bins = _calibration.calibration_bins(X.shape[0], math.sqrt(2 * K) * units["calibration"])
    shapes = [(K, _calibration.SCALE_LEVELS), (K, 2 * bins)]
    # K > 1: the correct rows of the calibrated argmax rule and of the solver's own, and
    # the K class counts (sensitivity 2); one problem: its positive rows (sensitivity 1).
    sensitivities = [math.sqrt(2 * K)] * 2 + [2.0 if K > 1 else 1.0]
    calls = [(c[0].shape, c[1], c[2]) for c in captured]
    assert [c[0] for c in calls] == shapes + [(2 + K,) if K > 1 else (1,)]
    for (_, sensitivity, unit), name, expected in zip(calls, D.decision_splits(K),
                                                      sensitivities, strict=True):
        assert sensitivity == pytest.approx(expected)
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
    assert len(_decision_events(_fit("greedy_cd", decision="calibrated"))) == 3
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


def _audited_release(n, K, name, claim_delta, pure=False):
    """``(units, claim)``: the decision's units at epsilon 30 and delta 1e-3 (0 with
    ``pure``; few rows, so that half the noise shows), and the epsilon that the event
    of release ``name`` claims at ``claim_delta``."""
    units, events = D.decision_units(30.0, 0.0 if pure else 1e-3, True, n, K)
    event = events[list(D.decision_splits(K)).index(name)]
    return units, compose([event], claim_delta)[0]


def _flipped_label_releases(spy_on_releases, name, pure, index):
    """The worst-case pair of one flipped label (200 rows on one axis, one class every
    other row) through the real calibration: ``(units, claim, claim_delta, real,
    releases)``, ``releases`` holding on each side the ``index``-th release it made as
    ``(value, sensitivity, unit, floating_point_safe)``, and ``claim`` the epsilon the
    event of release ``name`` claims."""
    from skdp_sparse.data import LocalData
    n, claim_delta = 200, 0.05
    units, claim = _audited_release(n, 1, name, claim_delta, pure)
    captured, real = spy_on_releases(pure)
    X = sp.csr_matrix(np.linspace(-1, 1, n)[:, None])
    y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    y_prime = y.copy()
    y_prime[0] = -1.0
    count = {"class_count_unit": units["classes"]} if name == "classes" else {}
    releases = []
    for labels in (y, y_prime):
        captured.clear()
        calibrate(LocalData(X, labels[:, None]), np.array([0]), np.array([[1.0]]),
                  norm_bound=1.0, offsets=np.zeros(1), scale_unit=units["scale"],
                  calibration_unit=units["calibration"], floating_point_safe=True,
                  rng=np.random.default_rng(0), pure=pure, **count)
        releases.append(captured[index])
    return units, claim, claim_delta, real, releases


@pytest.mark.parametrize("pure", [False, True], ids=["gaussian", "laplace"])
@pytest.mark.parametrize("undernoised", [False, True])
def test_decision_audit(undernoised, pure, spy_on_releases):
    # Worst-case pair: one row's label flips, its score stays in the same bin, so one
    # positive cell loses a count and the negative cell of that bin gains one (the
    # full sensitivity sqrt(2)). The statistic is the difference of the two noisy
    # cells, drawn by the release the real calibration calls with the parameters it
    # passed; the honest release stays within the epsilon its recorded event claims,
    # the same release at half the noise is caught above it.
    units, claim, claim_delta, real, hists = _flipped_label_releases(
        spy_on_releases, "calibration", pure, 1)
    (h, sensitivity, unit, fp), (h_prime, *_) = hists
    # One count moves between two cells: l2 sensitivity sqrt(2), l1 2.
    assert sensitivity == pytest.approx(2.0 if pure else math.sqrt(2.0))
    assert unit == units["calibration"]
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
            multi_class="ovr", random_state=seed).fit(X, y).score(X, y) for seed in range(3)])

    assert accuracy("calibrated") >= accuracy("fitted") - 0.03


@pytest.mark.parametrize("solver", ["sgd", "sparse_sgd"])
def test_multiclass_default_decision_keeps_the_solver_own_where_it_ranks_better(solver):
    # Ten classes of about 130 training rows: each class's calibration from its own
    # noisy histogram gave slopes 0.7x to 5x apart and the argmax fell to a few classes
    # (digits at epsilon 10: sgd 0.38 with the default decision, 0.68 with its own).
    # The comparison now counts the solver's own rule's correct rows too.
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    X_train, y_train, X_test, y_test = X[:1300], y[:1300], X[1300:], y[1300:]

    def accuracy(decision):
        return np.mean([DPSparseLogisticRegression(
            solver=solver, epsilon=10.0, classes=list(range(10)), decision=decision,
            multi_class="ovr", random_state=seed).fit(X_train, y_train).score(X_test, y_test)
            for seed in range(3)])

    assert accuracy("auto") >= accuracy("fitted") - 0.06


def test_multiclass_decision_without_signal_predicts_the_most_frequent_class():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 6)) / 3
    y = rng.choice(3, size=3000, p=[0.6, 0.25, 0.15])  # independent of X
    for seed in range(3):
        model = DPSparseLogisticRegression(solver="sgd", epsilon=2.0, delta=1e-6,
                                           classes=[0, 1, 2], multi_class="ovr",
                                           random_state=seed).fit(X, y)
        assert np.mean(model.predict(X) == 0) > 0.95


def test_multiclass_decision_without_signal_is_not_below_the_majority():
    # Labels independent of X, one class a little more frequent than the others: the
    # argmax of K noisy calibrated scores is right about once in K; without the
    # multiclass comparison 12 of these 15 fits scored below the majority's 0.234 on
    # the training rows. With it every fit predicts the most frequent class.
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 6)) / 3
    y = rng.choice(5, size=3000, p=[0.24, 0.19, 0.19, 0.19, 0.19])
    for solver in ["sgd", "cd", "sparse_sgd", "phased_sgd", "screened_newton"]:
        for seed in range(3):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = DPSparseLogisticRegression(
                    solver=solver, epsilon=2.0, delta=1e-6, classes=list(range(5)),
                    multi_class="ovr", random_state=seed).fit(X, y)
            assert np.all(model.predict(X) == 0), (solver, seed)


def _multiclass_pair(n=60):
    """Two datasets differing in one row: three classes on one axis, class 0 the most
    frequent, and a rule (coef, intercept) that is right on every row but the first of
    ``y_prime``, whose label becomes class 0: one fewer correct row, one more row of
    class 0 and one fewer of class 1."""
    sizes = [n // 2, n // 4, n - n // 2 - n // 4]
    x = np.repeat([-1.0, 0.0, 1.0], sizes)
    y = np.repeat([0, 1, 2], sizes)
    X = sp.csr_matrix(x[:, None])
    coef = np.array([[-4.0, 0.0, 4.0]])
    intercept = np.array([0.0, 1.0, 0.0])
    first = int(np.flatnonzero(y == 1)[0])
    y_prime = y.copy()
    y_prime[first] = 0
    return X, y, y_prime, coef, intercept


def _one_hot(y, K=3):
    return np.where(np.eye(K)[y] > 0, 1.0, -1.0)


def _two_rules(coef, intercept):
    """The calibrated rule and the solver's own, stacked as the comparison takes them;
    both classify the pair's changed row (x = 0, class 1) correctly."""
    return np.stack([coef, 2.0 * coef]), np.stack([intercept, intercept])


def test_multiclass_counts_are_the_planned_statistic():
    X, y, y_prime, coef, intercept = _multiclass_pair()
    rules = _two_rules(coef, intercept)
    for labels, right, sizes in ((y, 60, [30, 15, 15]), (y_prime, 59, [31, 14, 15])):
        counts = _calibration._argmax_counts(X, _one_hot(labels), 0, *rules)
        assert list(counts) == [right, right, *sizes]
    a = _calibration._argmax_counts(X, _one_hot(y), 0, *rules)
    b = _calibration._argmax_counts(X, _one_hot(y_prime), 0, *rules)
    assert np.linalg.norm(a - b) == pytest.approx(_calibration.GAIN_SENSITIVITY)
    assert np.abs(a - b).sum() == _calibration.GAIN_SENSITIVITY_L1


@pytest.mark.parametrize("undernoised", [False, True])
def test_multiclass_comparison_audit(undernoised, spy_on_releases):
    # Worst-case pair of _multiclass_pair, with two rules that both classify the changed
    # row correctly; the statistic is the noisy counts projected on their difference (a
    # shift of the full sensitivity 2 in noise units).
    from skdp_sparse.data import LocalData
    safe, n, claim_delta = True, 60, 0.05
    units, claim = _audited_release(n, 3, "gain", claim_delta)
    captured, real = spy_on_releases()
    X, y, y_prime, coef, intercept = _multiclass_pair(n)
    releases = []
    for labels in (y, y_prime):
        captured.clear()
        # The real calibration runs the comparison (its classes fit positive slopes)
        # and passes the release its sensitivity and noise; the audit draws that
        # release on the pair's own statistic, that of the rule (coef, intercept).
        data = LocalData(X, _one_hot(labels))
        counts = _calibration._argmax_counts(X, data.Y, 0, *_two_rules(coef, intercept))
        calibrate(data, np.array([0]), coef, norm_bound=1.0, offsets=np.zeros(3),
                  scale_unit=units["scale"], calibration_unit=units["calibration"],
                  floating_point_safe=safe, rng=np.random.default_rng(0),
                  gain_unit=units["gain"])
        assert len(captured) == 3
        releases.append((counts, *captured[2][1:]))
    (c, sensitivity, unit, fp), (c_prime, *_) = releases
    assert sensitivity == pytest.approx(2.0) and unit == units["gain"]
    if undernoised:
        unit = unit / 2
    runs = 4000
    rng = np.random.default_rng(1)

    def statistic(counts):
        noisy = np.stack([real(counts, sensitivity, unit, fp, rng)[0] for _ in range(runs)])
        return noisy @ (c - c_prime)

    assert_pair_audit(statistic(c), statistic(c_prime), claim, claim_delta, undernoised)


@pytest.mark.parametrize("pure", [False, True], ids=["gaussian", "laplace"])
@pytest.mark.parametrize("undernoised", [False, True])
def test_class_count_audit(undernoised, pure, spy_on_releases):
    # Worst-case pair: one row's label flips, so the positive rows differ by one, the
    # full sensitivity. The statistic is the noisy count, drawn by the release the real
    # calibration calls with the parameters it passed.
    n = 200
    units, claim, claim_delta, real, releases = _flipped_label_releases(
        spy_on_releases, "classes", pure, 2)
    (c, sensitivity, unit, fp), (c_prime, *_) = releases
    assert list(c) == [n // 2] and list(c_prime) == [n // 2 - 1]
    assert sensitivity == 1.0 and unit == units["classes"]
    if undernoised:
        unit = unit / 2
    runs = 4000
    rng = np.random.default_rng(1)

    def statistic(count):
        return np.array([real(count, sensitivity, unit, fp, rng)[0][0] for _ in range(runs)])

    assert_pair_audit(statistic(c), statistic(c_prime), claim, claim_delta, undernoised)


@pytest.mark.parametrize("solver", ["sgd", "sparse_sgd"])
def test_rare_positives_at_small_budget_never_make_the_minority_the_majority(solver):
    # 3% positives, n epsilon = 200: a class-histogram cell's noise (sd about 300) is
    # far above the positives' 55 rows, and the histograms' class sums (each 20 noisy
    # cells clamped at 0) named the minority the majority: 3 (sgd) and 5 (sparse_sgd)
    # of 20 such fits predicted it for every row. The fallback takes the majority from
    # the release of the class count.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (2000, 10))
    s = X[:, 0] * 3 - 2 * X[:, 1] + X[:, 2] + 0.5 * rng.normal(size=2000)
    y = (s > np.quantile(s, 0.97)).astype(int)
    minority = 0
    for seed in range(12):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = DPSparseLogisticRegression(
                solver=solver, epsilon=0.1, delta=1e-7, norm_bound=math.sqrt(10),
                classes=[0, 1], random_state=seed).fit(X, y)
        minority += np.mean(model.predict(X) == 1) > 0.5
    assert minority == 0


@pytest.mark.parametrize("solver", ["screened_newton", "sgd"])
def test_majority_fallback_keeps_probabilities_near_the_class_rate(solver):
    # Labels independent of X, 2% positive: every fit falls back on the majority. Its
    # probabilities stay near the class rate (log loss within 25% of the true rate's),
    # where an intercept beyond every score gave probabilities of 1e-5 and twice the
    # rate's log loss; the ranking and the decisions are those of before.
    from sklearn.metrics import log_loss

    rng = np.random.default_rng(4)
    X, _ = _data(n=5000, seed=4)
    y = (rng.random(5000) < 0.02).astype(int)
    rate = y.mean()
    base = log_loss(y, np.full(y.size, rate))
    for seed in range(3):
        clf = _fit(solver, X=X, y=y, seed=seed)
        assert np.all(clf.predict(X) == 0)
        proba = clf.predict_proba(X)[:, 1]
        assert log_loss(y, proba) <= 1.25 * base, (seed, proba.min(), proba.max())


@pytest.mark.parametrize("solver", ["cd", "sparse_sgd", "output_perturbation"])
def test_a_slope_the_counts_cannot_see_falls_back_with_a_finite_intercept(solver):
    # 300 rows at epsilon 0.3: the histograms often see no slope, and their class sums
    # can contradict the class count's majority; the rule "decide nothing" (intercept
    # -inf) then passed the gain test, and every row got the probability 0 or 1 (1 or
    # 2 fits of these 40 for each solver).
    X = sp.random(300, 20, density=0.2, random_state=0, format="csr")
    y = (X.sum(axis=1).A1 > np.median(X.sum(axis=1).A1)).astype(int)
    for seed in range(40):
        clf = _fit(solver, epsilon=0.3, seed=seed, X=X, y=y)
        proba = clf.predict_proba(X[:20])
        assert np.all(np.isfinite(clf.intercept_)), seed
        assert np.all((proba > 0) & (proba < 1)), seed


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_without_an_intercept_only_the_releases_made_are_planned(n_classes, delta,
                                                                  monkeypatch):
    # The class count (one problem) and the multiclass comparison set offsets, so a fit
    # without an intercept never draws them; they used to be planned and charged, and
    # their share was taken from the solver.
    X, y = _data()
    if n_classes == 3:
        y = y + (np.arange(len(y)) % 3 == 0) * (1 - y) * 2
    draws = []
    for name in ("release", "release_pure"):
        real = getattr(_calibration, name)
        monkeypatch.setattr(_calibration, name,
                            lambda *a, _real=real, **k: draws.append(1) or _real(*a, **k))
    solver = "cd" if delta else "output_perturbation"
    model = _fit(solver, delta=delta, fit_intercept=False, decision="calibrated", X=X, y=y)
    events = _decision_events(model)
    assert [e.name for e in events] == ["decision: scale histogram",
                                        "decision: calibration histogram"]
    assert len(draws) == len(events)
    assert model.epsilon_spent_ <= 1.0 * (1 + 1e-9)
