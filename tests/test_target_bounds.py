"""Regressors' target_bounds=(low, high): targets in a public range, mapped to [-1, 1]
inside fit, predictions in the targets' units (DPGreedyCDRegressor and
DPOutputPerturbationRegressor)."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LinearRegression

from skdp_sparse import DPGreedyCDRegressor
from skdp_sparse.linear_model import DPOutputPerturbationRegressor


def _data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 4))
    y = 300.0 + 120.0 * X[:, 0] - 60.0 * X[:, 2] + 5.0 * rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("solver", ["greedy_cd", "cd", "sgd"])
def test_target_bounds_is_the_fit_on_mapped_targets(solver):
    """Same noise (same seed): the fit with target_bounds is the fit on (y - c) / h with
    target_bound=1, mapped back."""
    X, y = _data()
    low, high = 0.0, 600.0
    c, h = 300.0, 300.0
    kw = dict(epsilon=2.0, solver=solver, norm_bound=2.0, max_iter=20, random_state=3)
    a = DPGreedyCDRegressor(target_bounds=(low, high), **kw).fit(X, y)
    b = DPGreedyCDRegressor(target_bound=1.0, **kw).fit(X, (y - c) / h)
    np.testing.assert_allclose(a.coef_, h * b.coef_, rtol=1e-12, atol=1e-12)
    assert a.intercept_ == pytest.approx(h * b.intercept_ + c, rel=1e-12)
    np.testing.assert_allclose(a.predict(X), np.clip(h * b.predict(X) + c, low, high),
                               rtol=1e-12)
    assert a.privacy_events_ == b.privacy_events_
    assert a.epsilon_spent_ == b.epsilon_spent_


def test_predictions_clipped_to_the_target_range():
    # A noisy fit at a small epsilon overshoots on some rows (its own decision: a
    # refit would shrink it to the mean); the public range holds every prediction, as
    # it held the training targets. clip_predict=False does not.
    X, y = _data()
    kw = dict(epsilon=0.05, solver="sgd", norm_bound=2.0, random_state=0, decision="fitted")
    reg = DPGreedyCDRegressor(target_bounds=(200.0, 400.0), **kw).fit(X, y)
    raw = X @ reg.coef_ + reg.intercept_
    assert raw.min() < 200.0 or raw.max() > 400.0  # something to clip
    np.testing.assert_array_equal(reg.predict(X), np.clip(raw, 200.0, 400.0))
    free = DPGreedyCDRegressor(target_bounds=(200.0, 400.0), clip_predict=False, **kw)
    np.testing.assert_allclose(free.fit(X, y).predict(X), raw, rtol=1e-12)
    # A symmetric target_bound=T states the range (-T, T) and clips as well
    # (test_predict_clipping.py, every solver).


def test_targets_clipped_to_their_range():
    X, y = _data()
    kw = dict(epsilon=2.0, norm_bound=2.0, max_iter=20, random_state=0)
    y_out = y.copy()
    y_out[:10] = 1e6
    a = DPGreedyCDRegressor(target_bounds=(0.0, 600.0), **kw).fit(X, y_out)
    b = DPGreedyCDRegressor(target_bounds=(0.0, 600.0), **kw).fit(
        X, np.clip(y_out, 0.0, 600.0))
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_without_noise_predictions_in_the_targets_units():
    X, y = _data()
    reg = DPGreedyCDRegressor(epsilon=np.inf, target_bounds=(0.0, 600.0), alpha=0.0,
                              max_iter=200).fit(X, y)
    ols = LinearRegression().fit(X, y)
    np.testing.assert_allclose(reg.coef_, ols.coef_, atol=1.0)
    assert reg.intercept_ == pytest.approx(ols.intercept_, abs=1.0)
    assert reg.score(X, y) == pytest.approx(ols.score(X, y), abs=1e-3)


def test_default_target_bound_is_one():
    X, y = _data()
    y = (y - 300.0) / 300.0
    kw = dict(epsilon=1.0, norm_bound=2.0, max_iter=10, random_state=0)
    a = DPGreedyCDRegressor(**kw).fit(X, y)
    b = DPGreedyCDRegressor(target_bound=1.0, **kw).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert DPGreedyCDRegressor().target_bound is None


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_output_perturbation_target_bounds_is_the_fit_on_mapped_targets(delta):
    X, y = _data()
    c, h = 300.0, 300.0
    kw = dict(epsilon=2.0, delta=delta, norm_bound=2.0, alpha=0.01, random_state=3)
    a = DPOutputPerturbationRegressor(target_bounds=(0.0, 600.0), **kw).fit(X, y)
    b = DPOutputPerturbationRegressor(target_bound=1.0, **kw).fit(X, (y - c) / h)
    np.testing.assert_allclose(a.coef_, h * b.coef_, rtol=1e-12, atol=1e-12)
    assert a.intercept_ == pytest.approx(h * b.intercept_ + c, rel=1e-12)
    assert a.privacy_events_ == b.privacy_events_
    # The default target bound is 1, as before target_bounds existed.
    assert DPOutputPerturbationRegressor().target_bound is None
    d = DPOutputPerturbationRegressor(**kw).fit(X, (y - c) / h)
    np.testing.assert_array_equal(d.coef_, b.coef_)


def test_output_perturbation_target_bounds_beats_raw_targets():
    """Without the range, targets of 300 clip to the default bound 1 and the model
    predicts about 1; with it, the model recovers the signal."""
    X, y = _data(n=4000)
    kw = dict(epsilon=np.inf, norm_bound=2.0, alpha=1e-4)
    ranged = DPOutputPerturbationRegressor(target_bounds=(0.0, 600.0), **kw).fit(X, y)
    raw = DPOutputPerturbationRegressor(**kw).fit(X, y)
    assert ranged.score(X, y) > 0.9
    assert raw.score(X, y) < 0


@pytest.mark.parametrize("estimator", [DPGreedyCDRegressor, DPOutputPerturbationRegressor])
@pytest.mark.parametrize("params, message", [
    (dict(target_bound=2.0, target_bounds=(0, 1)), "not both"),
    (dict(target_bounds=(1, 0)), "low < high"),
    (dict(target_bounds=(0, np.inf)), "finite"),
    (dict(target_bounds=(0,)), "pair"),
    (dict(target_bounds="ab"), "pair"),
])
def test_bad_target_bounds(estimator, params, message):
    X, y = _data(50)
    with pytest.raises(ValueError, match=message):
        estimator(**params).fit(X, y)


def test_clone_keeps_target_bounds():
    reg = DPGreedyCDRegressor(target_bounds=(0.0, 600.0))
    assert clone(reg).get_params()["target_bounds"] == (0.0, 600.0)
