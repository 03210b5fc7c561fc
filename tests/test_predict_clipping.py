"""Predict as you fit: prediction methods clip new rows with the public bounds the
solver clipped the training rows with (``clip_predict=True``, the default)."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from skdp_sparse import DPGreedyCDRegressor, DPSparseLogisticRegression
from skdp_sparse.linear_model import (
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
)


def _data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 3))
    y = 300.0 + 100.0 * X[:, 0] - 50.0 * X[:, 1] + 5.0 * rng.normal(size=n)
    return X, y


OUTLIER = np.array([[1e4, -3e3, 50.0]])

REGRESSORS = [
    DPGreedyCDRegressor(solver="greedy_cd", norm_bound=2.0),
    DPGreedyCDRegressor(solver="cd", norm_bound=2.0),
    DPGreedyCDRegressor(solver="sgd", norm_bound=2.0),
    DPGreedyCDRegressor(solver="sufficient_statistics", norm_bound=2.0),
    DPOutputPerturbationRegressor(norm_bound=2.0, delta=1e-6),
]


@pytest.mark.parametrize("estimator", REGRESSORS, ids=lambda e: type(e).__name__ + "-" +
                         str(e.get_params().get("solver", "op")))
def test_one_outlying_row_cannot_produce_a_huge_prediction(estimator):
    X, y = _data()
    # The solver's own decision: a refit of 400 rows may shrink the slope to the mean,
    # leaving nothing to extrapolate.
    est = estimator.set_params(epsilon=2.0, target_bounds=(0.0, 600.0), random_state=0)
    if "decision" in est.get_params():
        est.set_params(decision="fitted")
    est.fit(X, y)
    # The largest prediction any row within the bounds can get:
    fb, nb, _ = est.input_clipping_
    coef = np.asarray(est.coef_)
    reach = np.inf if fb is None else float(np.sum(np.abs(coef) * fb))
    if np.isfinite(nb):
        reach = min(reach, nb * np.linalg.norm(coef))
    pred = est.predict(OUTLIER)[0]
    assert abs(pred - est.intercept_) <= reach * (1 + 1e-12)
    assert 0.0 - reach <= pred <= 600.0 + reach
    # Off, the same row gets the linear extrapolation.
    raw = est.set_params(clip_predict=False).predict(OUTLIER)[0]
    assert raw == pytest.approx(OUTLIER[0] @ coef + est.intercept_)
    assert abs(raw - 300.0) > 1e4


@pytest.mark.parametrize("estimator", REGRESSORS[:4] + [REGRESSORS[4]],
                         ids=lambda e: str(e.get_params().get("solver", "op")))
def test_rows_inside_the_bounds_are_predicted_unchanged(estimator):
    X, y = _data()
    # The solver's own decision: a refit of 400 rows may shrink the slope to the mean,
    # leaving nothing to extrapolate.
    est = estimator.set_params(epsilon=2.0, target_bounds=(0.0, 600.0), random_state=0)
    if "decision" in est.get_params():
        est.set_params(decision="fitted")
    est.fit(X, y)
    inside = X / np.maximum(1.0, np.linalg.norm(X, axis=1) / 2.0)[:, None]
    np.testing.assert_allclose(est.predict(inside), inside @ est.coef_ + est.intercept_,
                               rtol=1e-12)


def test_predict_clips_as_the_solver_clipped():
    X, y = _data()
    kw = dict(epsilon=2.0, target_bounds=(0.0, 600.0), random_state=0, norm_bound=2.0,
              feature_bound=[1.0, 0.5, 2.0])
    greedy = DPGreedyCDRegressor(solver="greedy_cd", curvature="bound", **kw).fit(X, y)
    np.testing.assert_array_equal(greedy.input_clipping_[0], [1.0, 0.5, 2.0])
    assert greedy.input_clipping_[1:] == (np.inf, np.inf)
    sgd = DPGreedyCDRegressor(solver="sgd", **kw).fit(X, y)
    assert sgd.input_clipping_ == (None, 2.0, np.inf)
    ssp = DPGreedyCDRegressor(solver="sufficient_statistics", **kw).fit(X, y)
    assert ssp.input_clipping_[1] == 2.0
    row = np.array([[3.0, -3.0, 3.0]])
    clipped = np.array([1.0, -0.5, 2.0])
    clipped = clipped * min(1.0, 2.0 / np.linalg.norm(clipped))
    assert ssp.predict(row)[0] == pytest.approx(clipped @ ssp.coef_ + ssp.intercept_)
    assert greedy.predict(row)[0] == pytest.approx(
        np.array([1.0, -0.5, 2.0]) @ greedy.coef_ + greedy.intercept_)


@pytest.mark.parametrize("estimator", [
    DPSparseLogisticRegression(classes=[0, 1], solver="sgd", epsilon=2.0),
    DPOutputPerturbationClassifier(classes=[0, 1], epsilon=2.0),
], ids=["logistic", "op"])
def test_classifier_scores_are_clipped_too(estimator):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(400, 3))
    y = (X[:, 0] > 0).astype(int)
    est = estimator.set_params(random_state=0, norm_bound=1.0).fit(X, y)
    bound = np.linalg.norm(est.coef_) + np.abs(est.intercept_).max()
    assert np.all(np.abs(est.decision_function(OUTLIER)) <= bound * (1 + 1e-12))
    proba = est.predict_proba(OUTLIER)
    assert 0 < proba[0, 1] < 1
    sparse = est.decision_function(sp.csr_matrix(OUTLIER))
    np.testing.assert_allclose(sparse, est.decision_function(OUTLIER))
    off = est.set_params(clip_predict=False).decision_function(OUTLIER)
    assert np.all(np.abs(off) > bound)


@pytest.mark.parametrize("estimator", REGRESSORS, ids=lambda e: type(e).__name__ + "-" +
                         str(e.get_params().get("solver", "op")))
def test_a_symmetric_target_bound_clips_predictions_as_its_range_does(estimator):
    # target_bound=T and target_bounds=(-T, T) state the same public range: both clip.
    X, y = _data(n=2000)
    y = (y - 300.0) / 40.0
    # A clone: the tests above leave target_bounds and clip_predict set on the shared
    # estimators.
    symmetric = clone(estimator).set_params(epsilon=2.0, target_bound=0.5, target_bounds=None,
                                            clip_predict=True, random_state=0)
    if "decision" in symmetric.get_params():
        symmetric.set_params(decision="fitted")
    pred = symmetric.fit(X, y).predict(X)
    # The rows of X are within the input bounds: only the range can move a prediction.
    raw = symmetric.set_params(clip_predict=False).predict(X)
    assert np.abs(raw).max() > 0.5
    np.testing.assert_array_equal(pred, np.clip(raw, -0.5, 0.5))


def test_scores_of_a_few_rows_make_no_copy_of_the_coefficients():
    # X @ coef_.T copied the K x p coefficients into a C-ordered p x K block on every
    # call, whatever the number of rows: 400 MB to score one row at K = 5, p = 10^7.
    import tracemalloc

    rng = np.random.default_rng(0)
    n, p, K = 300, 200_000, 5
    X = sp.random(n, p, density=1e-4, format="csr", random_state=1) * 0.1
    y = rng.integers(0, K, n)
    # Rows inside the public bounds: the clipping of predict leaves them as they are.
    clf = DPSparseLogisticRegression(epsilon=1.0, delta=1e-6, classes=list(range(K)),
                                     max_iter=2, random_state=0).fit(X, y)
    assert clf.coef_.shape == (K, p)
    rows = X[:10]
    want = rows @ np.ascontiguousarray(clf.coef_.T) + clf.intercept_
    clf.decision_function(rows)
    tracemalloc.start()
    scores = clf.decision_function(rows)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert scores.tobytes() == want.tobytes()
    assert peak < clf.coef_.nbytes / 10
    # Many rows (more stored entries than coefficients): the one product, same bits.
    many = sp.random(2000, p, density=3e-3, format="csr", random_state=2) * 1e-3
    np.testing.assert_array_equal(clf.decision_function(many),
                                  many @ np.ascontiguousarray(clf.coef_.T) + clf.intercept_)
