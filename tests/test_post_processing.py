"""The decisions and the screening read the private rows through their releases only.

Every release of the calibrated decision (:mod:`skdp_sparse.solvers._calibration`) and
of the screened Newton step (its screening, curvature and histograms) is replaced by a
stand-in that ignores the value it is given and returns draws fixed by the order of
the calls and the value's shape (public). What the code computes after the releases
is then a function of public values only (the shape of the data, the bounds), so it
must come out bit for bit the same on any two datasets of the same shape: a scale, a
bin, a fallback to the majority or a cut decided on a raw count would tell them apart.
Two unrelated datasets move every such statistic, where a pair of neighbours would
move few. The first test shows that the comparison sees data that reaches the output
through a release.
"""

import itertools
import math

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

#: Seeds of the stand-ins: each draws other values, so that every branch after the
#: releases (a slope seen or not, the majority's test passed or not) is taken by some.
SEEDS = range(4)


class _StandIn:
    """A release whose output is fixed by the call order and the value's shape; with
    ``passthrough`` the value plus those draws (what a real release leaks to the
    comparison)."""

    def __init__(self, seed=0, passthrough=False):
        self.rng = np.random.default_rng(seed)
        self.passthrough = passthrough

    def _draw(self, value):
        value = np.asarray(value, dtype=np.float64)
        draw = self.rng.normal(0.0, 7.0, value.shape) + self.rng.uniform(0.0, 40.0, value.shape)
        return value + draw if self.passthrough else draw

    def gaussian(self, value, sensitivity, unit, floating_point_safe, rng):
        return self._draw(value), float(sensitivity) * unit

    def laplace(self, value, sensitivity, unit, floating_point_safe, rng):
        return self._draw(value), math.sqrt(2.0) * float(sensitivity) * unit


def _stand_in(monkeypatch, seed=0, passthrough=False):
    stand_in = _StandIn(seed, passthrough)
    monkeypatch.setattr(calibration, "release", stand_in.gaussian)
    monkeypatch.setattr(calibration, "release_pure", stand_in.laplace)
    monkeypatch.setattr(screening, "release", stand_in.gaussian)
    monkeypatch.setattr(screened_newton, "release", stand_in.gaussian)


def _datasets(n_classes, n=60, p=8):
    """Two unrelated datasets of the same shape: sparse small rows, most labelled 0,
    and denser, larger rows, most labelled 1."""
    out = []
    for seed, density, scale, common in ((0, 0.3, 1.0, 0), (1, 0.8, 3.0, 1)):
        rng = np.random.default_rng(seed)
        X = sp.random(n, p, density=density, format="csr", random_state=seed)
        X.data = rng.uniform(-scale, scale, X.data.size)
        labels = np.where(rng.random(n) < 0.8, common, rng.integers(0, max(n_classes, 2), n))
        out.append((X, labels))
    return out


def _targets(labels, n_classes):
    if n_classes == 1:
        return np.where(labels == 1, 1.0, -1.0)[:, None]
    return np.column_stack([np.where(labels == k, 1.0, -1.0) for k in range(n_classes)])


def _calibrated(X, labels, n_classes, fit_intercept, pure, rows_bound):
    rng = np.random.default_rng(1)
    columns = np.array([0, 2, 3, 6])
    return calibration.calibrate(
        LocalData(X, _targets(labels, n_classes)), columns,
        rng.normal(size=(columns.size, n_classes)), norm_bound=1.0,
        offsets=rng.normal(size=n_classes), scale_unit=0.3, calibration_unit=0.2,
        floating_point_safe=True, rng=None, fit_intercept=fit_intercept,
        rows_bound=rows_bound, pure=pure,
        gain_unit=0.1 if n_classes > 1 and fit_intercept else None,
        class_count_unit=0.5 if n_classes == 1 and fit_intercept else None)


def _same(first, second):
    return all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def test_the_comparison_sees_data_that_passes_through_a_release(monkeypatch):
    (X, labels), (X_prime, labels_prime) = _datasets(1)
    outputs = []
    for rows, y in ((X, labels), (X_prime, labels_prime)):
        _stand_in(monkeypatch, passthrough=True)
        outputs.append(_calibrated(rows, y, 1, True, False, None))
    assert not _same(*outputs)


@pytest.mark.parametrize("n_classes, fit_intercept, pure, rows_bound", list(itertools.product(
    (1, 3), (True, False), (False, True), (None, (1.0, 2.0)))))
def test_calibrated_decision_reads_the_rows_through_its_releases(
        monkeypatch, n_classes, fit_intercept, pure, rows_bound):
    for seed in SEEDS:
        outputs = []
        for rows, y in _datasets(n_classes):
            _stand_in(monkeypatch, seed)
            outputs.append(_calibrated(rows, y, n_classes, fit_intercept, pure, rows_bound))
        assert _same(*outputs), f"stand-in seed {seed}"


@pytest.mark.parametrize("fit_intercept, pure, rows_bound", list(itertools.product(
    (True, False), (False, True), (None, (1.0, 2.0)))))
def test_regression_refit_reads_the_rows_through_its_releases(
        monkeypatch, fit_intercept, pure, rows_bound):
    (X, _), (X_prime, _) = _datasets(1)
    y = np.random.default_rng(2).normal(0.0, 3.0, X.shape[0])
    y_prime = 0.5 * X_prime @ np.arange(X.shape[1]) - 1.0
    direction = np.random.default_rng(3).normal(size=(4, 1))
    for seed in SEEDS:
        outputs = []
        for rows, targets in ((X, y), (X_prime, y_prime)):
            _stand_in(monkeypatch, seed)
            outputs.append(calibration.calibrate_regression(
                LocalData(rows, targets[:, None]), np.array([0, 2, 3, 6]), direction,
                norm_bound=1.0, target_bound=2.0, location_unit=0.3, scale_unit=0.3,
                moment_unit=0.2, floating_point_safe=True, rng=None,
                fit_intercept=fit_intercept, rows_bound=rows_bound, pure=pure))
        assert _same(*outputs), f"stand-in seed {seed}"


@pytest.mark.parametrize("rule, fit_intercept, n_classes", list(itertools.product(
    ("auto", "sure", 3, "none"), (True, False), (1, 3))))
def test_screened_newton_reads_the_rows_through_its_releases(
        monkeypatch, rule, fit_intercept, n_classes):
    problem = Problem(loss=LogisticLoss(), penalty=NoPenalty(), fit_intercept=fit_intercept,
                      feature_bound=1.0, norm_bound=1.0)
    solver = screened_newton.ScreenedNewton()
    pair = _datasets(n_classes)
    plan = solver.plan(problem, (*pair[0][0].shape, n_classes), 1.0, 1e-6,
                       {"feature_selection": rule})
    for seed in SEEDS:
        outputs = []
        for rows, y in pair:
            _stand_in(monkeypatch, seed)
            result = solver.solve(problem, LocalData(rows, _targets(y, n_classes)), plan,
                                  np.random.default_rng(0))
            outputs.append((result.coef, result.intercept, result.info["association"]))
        assert _same(*outputs), f"stand-in seed {seed}"


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
    pair = _datasets(1)
    options = DPGreedyCDRegressor(max_iter=2, curvature="bound")._solver_options()
    plan = solver.plan(problem, (*pair[0][0].shape, 1), 1.0, 1e-6, options)
    coef = np.zeros((1, pair[0][0].shape[1]))
    coef[0, [1, 4, 5]] = (0.7, -1.2, 0.4)
    fixed = SolverResult(coef, np.array([0.3]), 2, plan.inner.events, {})
    monkeypatch.setattr(solver.inner, "solve", lambda *args: fixed)
    for seed in SEEDS:
        outputs = []
        for rows, labels in pair:
            targets = _targets(labels, 1) if isinstance(loss, LogisticLoss) \
                else 0.5 * rows @ np.arange(rows.shape[1]) - 1.0
            _stand_in(monkeypatch, seed)
            result = solver.solve(problem, LocalData(rows, np.reshape(targets, (-1, 1))),
                                  plan, np.random.default_rng(0))
            outputs.append((result.coef, result.intercept, result.info["decision_used"]))
        assert _same(*outputs), f"stand-in seed {seed}"
