"""The decisions and the screening read the private rows through their releases only.

Every release of the calibrated decision (:mod:`skdp_sparse.solvers._calibration`) and
of the screened Newton step (its screening, curvature and histograms) is replaced by a
stand-in that ignores the value it is given. The stand-in's outputs are those of noisy
releases on a third, reference dataset of the same shape, recorded call by call and
replayed in the same order: realistic values, so that the code after the releases
takes the branches a real fit takes (a slope seen, the majority's test passed), yet
fixed whatever rows are given. What the code computes after the releases is then a
function of public values only (the shape of the data, the bounds), so it must come
out bit for bit the same on any two datasets of the same shape: a scale, a bin, a
fallback to the majority or a cut decided on a raw count would tell them apart, and a
number of releases that depends on the rows stops the replay. Two unrelated datasets
move every such statistic, where a pair of neighbours would move few. The first test
shows that the comparison sees data that reaches the output through a release.
"""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import skdp_sparse.solvers._calibration as calibration
import skdp_sparse.solvers._screening as screening
import skdp_sparse.solvers.screened_newton as screened_newton
from skdp_sparse import DPGreedyCDRegressor
from skdp_sparse.data import LocalData
from skdp_sparse.optim.losses import LogisticLoss, SquaredLoss
from skdp_sparse.optim.penalties import NoPenalty
from skdp_sparse.solvers import Problem, SolverResult, get_solver
from skdp_sparse.solvers.decision import CalibratedDecision

#: Seed and noise (in sds of the real release) of the recorded releases: exact values,
#: two draws at the planned noise and two far above it (the sd reported with them is
#: that noise's), so that every branch after the releases (a slope seen or not, the
#: majority's test passed or not) is taken by some.
SEEDS = ((0, 0.0), (1, 1.0), (2, 1.0), (3, 8.0), (4, 100.0))

#: Rows of each dataset and the epsilon of the solvers' plans: few rows and a small
#: budget, where the rules mostly fall back on the majority, and enough of both for
#: the calibrated rules to beat it on the reference, so that the code after their gain
#: tests is compared too.
REGIMES = ((60, 1.0), (400, 30.0))

#: The columns the calibration tests score.
COLUMNS = np.array([0, 2, 3, 6])


class _StandIn:
    """Releases that record ``value`` plus noise (the reference run) and then replay
    the recorded outputs call by call, ignoring the value; with ``passthrough`` every
    call returns its value plus noise (what a real release leaks to the comparison)."""

    def __init__(self, seed=0, noise=1.0, passthrough=False):
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.passthrough = passthrough
        self.recorded = []
        self.replayed = None

    def replay(self):
        self.replayed = 0

    def _draw(self, value, sd):
        value = np.asarray(value, dtype=np.float64)
        if self.replayed is None or self.passthrough:
            out = value + self.rng.normal(0.0, self.noise * sd, value.shape)
            self.recorded.append(out)
            return out.copy()
        assert self.replayed < len(self.recorded), "more releases than on the reference"
        out = self.recorded[self.replayed]
        self.replayed += 1
        assert out.shape == value.shape, "a release of another shape than on the reference"
        return out.copy()

    def gaussian(self, value, sensitivity, unit, floating_point_safe, rng):
        return self._released(value, float(sensitivity) * unit)

    def laplace(self, value, sensitivity, unit, floating_point_safe, rng):
        return self._released(value, np.sqrt(2.0) * float(sensitivity) * unit)

    def _released(self, value, sd):
        # The noise the values carry is the sd reported (at least the planned one), as
        # a release's rules that weigh a value against its noise expect.
        return self._draw(value, sd), max(self.noise, 1.0) * sd


def _stand_in(monkeypatch, seed=0, noise=1.0, passthrough=False):
    stand_in = _StandIn(seed, noise, passthrough)
    monkeypatch.setattr(calibration, "release", stand_in.gaussian)
    monkeypatch.setattr(calibration, "release_pure", stand_in.laplace)
    monkeypatch.setattr(screening, "release", stand_in.gaussian)
    monkeypatch.setattr(screened_newton, "release", stand_in.gaussian)
    return stand_in


def _replayed(monkeypatch, seed, noise, reference, pair, run):
    """``run`` on the reference data with recording releases, then on each dataset of
    the pair with those releases replayed: the pair's outputs."""
    stand_in = _stand_in(monkeypatch, seed, noise)
    run(*reference)
    outputs = []
    for data in pair:
        stand_in.replay()
        outputs.append(run(*data))
        assert stand_in.replayed == len(stand_in.recorded), "fewer releases than on the reference"
    return outputs


def _datasets(n_classes, n, p=8):
    """Two unrelated datasets of the same shape: sparse small rows, most labelled 0,
    and denser, larger rows, most labelled 1."""
    out = []
    for seed, density, scale, common in ((0, 0.3, 0.02, 0), (1, 0.8, 3.0, 1)):
        rng = np.random.default_rng(seed)
        X = sp.random(n, p, density=density, format="csr", random_state=seed)
        X.data = rng.uniform(-scale, scale, X.data.size)
        labels = np.where(rng.random(n) < 0.8, common, rng.integers(0, max(n_classes, 2), n))
        out.append((X, labels))
    return out


def _reference(weights, n):
    """Rows of the pair's shape whose labels (one column of ``weights``: the sign of the
    score; several: the argmax) follow the scores ``X @ weights`` (the realistic
    releases to replay); with ``targets``, the scores themselves plus noise."""
    rng = np.random.default_rng(7)
    X = sp.random(n, weights.shape[0], density=0.6, format="csr", random_state=7)
    X.data = rng.uniform(-1.0, 1.0, X.data.size)
    scores = X @ weights + 0.3 * rng.normal(size=(n, weights.shape[1]))
    labels = np.argmax(scores, axis=1) if weights.shape[1] > 1 else (scores[:, 0] > 0).astype(int)
    return X, labels, scores[:, 0]


def _embedded(columns, directions, p=8):
    weights = np.zeros((p, directions.shape[1]))
    weights[columns] = directions
    return weights


def _targets(labels, n_classes):
    if n_classes == 1:
        return np.where(labels == 1, 1.0, -1.0)[:, None]
    return np.column_stack([np.where(labels == k, 1.0, -1.0) for k in range(n_classes)])


def _directions(n_classes):
    rng = np.random.default_rng(1)
    return rng.normal(size=(COLUMNS.size, n_classes)), rng.normal(size=n_classes)


def _calibrated(X, labels, n_classes, fit_intercept, pure, rows_bound):
    directions, offsets = _directions(n_classes)
    return calibration.calibrate(
        LocalData(X, _targets(labels, n_classes)), COLUMNS, directions, norm_bound=1.0,
        offsets=offsets, scale_unit=0.3, calibration_unit=0.2,
        floating_point_safe=True, rng=None, fit_intercept=fit_intercept,
        rows_bound=rows_bound, pure=pure,
        gain_unit=0.1 if n_classes > 1 and fit_intercept else None,
        class_count_unit=0.5 if n_classes == 1 and fit_intercept else None)


def _same(first, second):
    return all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def _cases():
    """``(n, epsilon, seed, noise)`` of every comparison."""
    return [(n, epsilon, seed, noise) for n, epsilon in REGIMES for seed, noise in SEEDS]


def test_the_comparison_sees_data_that_passes_through_a_release(monkeypatch):
    outputs = []
    for rows, y in _datasets(1, REGIMES[0][0]):
        _stand_in(monkeypatch, passthrough=True)
        outputs.append(_calibrated(rows, y, 1, True, False, None))
    assert not _same(*outputs)


@pytest.mark.parametrize("n_classes, fit_intercept, pure, rows_bound", list(itertools.product(
    (1, 3), (True, False), (False, True), (None, (1.0, 2.0)))))
def test_calibrated_decision_reads_the_rows_through_its_releases(
        monkeypatch, n_classes, fit_intercept, pure, rows_bound):
    weights = _embedded(COLUMNS, _directions(n_classes)[0])
    for n, _, seed, noise in _cases():
        outputs = _replayed(
            monkeypatch, seed, noise, _reference(weights, n)[:2], _datasets(n_classes, n),
            lambda rows, y: _calibrated(rows, y, n_classes, fit_intercept, pure, rows_bound))
        assert _same(*outputs), f"{n} rows, stand-in seed {seed}"


@pytest.mark.parametrize("fit_intercept, pure, rows_bound", list(itertools.product(
    (True, False), (False, True), (None, (1.0, 2.0)))))
def test_regression_refit_reads_the_rows_through_its_releases(
        monkeypatch, fit_intercept, pure, rows_bound):
    direction = np.random.default_rng(3).normal(size=(COLUMNS.size, 1))

    def refit(rows, targets):
        return calibration.calibrate_regression(
            LocalData(rows, targets[:, None]), COLUMNS, direction,
            norm_bound=1.0, target_bound=2.0, location_unit=0.3, scale_unit=0.3,
            moment_unit=0.2, floating_point_safe=True, rng=None,
            fit_intercept=fit_intercept, rows_bound=rows_bound, pure=pure)

    for n, _, seed, noise in _cases():
        (X, _), (X_prime, _) = _datasets(1, n)
        y = np.random.default_rng(2).normal(0.0, 3.0, n)
        y_prime = 0.5 * X_prime @ np.arange(X.shape[1]) - 1.0
        X_reference, _, scores = _reference(_embedded(COLUMNS, direction), n)
        outputs = _replayed(monkeypatch, seed, noise, (X_reference, 0.8 * scores + 0.2),
                            ((X, y), (X_prime, y_prime)), refit)
        assert _same(*outputs), f"{n} rows, stand-in seed {seed}"


@pytest.mark.parametrize("rule, fit_intercept, n_classes", list(itertools.product(
    ("auto", "sure", 3, "none"), (True, False), (1, 3))))
def test_screened_newton_reads_the_rows_through_its_releases(
        monkeypatch, rule, fit_intercept, n_classes):
    problem = Problem(loss=LogisticLoss(), penalty=NoPenalty(), fit_intercept=fit_intercept,
                      feature_bound=1.0, norm_bound=1.0)
    solver = screened_newton.ScreenedNewton()
    weights = np.random.default_rng(4).normal(0.0, 2.0, size=(8, n_classes))
    for n, epsilon, seed, noise in _cases():
        plan = solver.plan(problem, (n, 8, n_classes), epsilon, 1e-6,
                           {"feature_selection": rule})

        def fit(rows, y, plan=plan):
            result = solver.solve(problem, LocalData(rows, _targets(y, n_classes)), plan,
                                  np.random.default_rng(0))
            return result.coef, result.intercept, result.info["association"]

        outputs = _replayed(monkeypatch, seed, noise, _reference(weights, n)[:2],
                            _datasets(n_classes, n), fit)
        assert _same(*outputs), f"{n} rows, stand-in seed {seed}"


@pytest.mark.parametrize("loss, solver_name", [
    (LogisticLoss(), "cd"), (LogisticLoss(), "sgd"), (LogisticLoss(), "greedy_cd"),
    (SquaredLoss(), "cd"), (SquaredLoss(), "sgd"), (SquaredLoss(), "greedy_cd")])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_calibrated_decision_wrapper_reads_the_rows_through_its_releases(
        monkeypatch, loss, solver_name, fit_intercept):
    # The solver's own result is fixed (a release of its own, audited apart): what the
    # wrapper adds (the columns it scores, the bounds, the offsets) is then public.
    solver = CalibratedDecision(get_solver(solver_name))
    problem = Problem(loss=loss, penalty=NoPenalty(), fit_intercept=fit_intercept,
                      feature_bound=1.0, norm_bound=1.0, target_bound=1.0)
    options = DPGreedyCDRegressor(max_iter=2, curvature="bound")._solver_options()
    coef = np.zeros((1, 8))
    coef[0, [1, 4, 5]] = (0.7, -1.2, 0.4)
    logistic = isinstance(loss, LogisticLoss)

    def targets(rows, labels, scores):
        if logistic:
            return _targets(labels, 1)
        return np.clip(scores, -1.0, 1.0) if scores is not None \
            else 0.5 * rows @ np.arange(rows.shape[1]) - 1.0

    for n, epsilon, seed, noise in _cases():
        plan = solver.plan(problem, (n, 8, 1), epsilon, 1e-6, options)
        fixed = SolverResult(coef, np.array([0.3]), 2, plan.inner.events, {})
        monkeypatch.setattr(solver.inner, "solve", lambda *args, fixed=fixed: fixed)

        def fit(rows, y, plan=plan):
            result = solver.solve(problem, LocalData(rows, np.reshape(y, (-1, 1))),
                                  plan, np.random.default_rng(0))
            return result.coef, result.intercept, result.info["decision_used"]

        X_reference, labels, scores = _reference(coef.T, n)
        pair = [(rows, targets(rows, y, None)) for rows, y in _datasets(1, n)]
        outputs = _replayed(monkeypatch, seed, noise,
                            (X_reference, targets(X_reference, labels, scores)), pair, fit)
        assert _same(*outputs), f"{n} rows, stand-in seed {seed}"
