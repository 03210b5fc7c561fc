"""The score range of the private search: errors in the targets' own units are
bounded by the public target range the model states, not clipped at 1."""

import warnings

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline

from skdp_sparse import (
    BoundedScaler,
    DPGreedyCDRegressor,
    PrivateHyperparameterSearch,
    privacy_ledger,
)
from skdp_sparse.linear_model import DPOutputPerturbationRegressor


def _prices(n, seed=0):
    """Flat prices in euros: far above 1, inside the public range (0, 1e6)."""
    rng = np.random.default_rng(seed)
    area, year = rng.uniform(20, 200, n), rng.uniform(1900, 2020, n)
    price = 3000 * area + 500 * (year - 1900) + rng.normal(0, 20000, n)
    return np.column_stack([area, year]), price


def test_search_in_euros_picks_the_useful_candidate():
    # With every squared error clipped to 1, both candidates scored about -1 and the
    # search picked either as often: the range (0, 1e6) of the targets sets the scale.
    X, y = _prices(1000)
    pipe = make_pipeline(
        BoundedScaler(bounds=([0, 1850], [250, 2030]), feature_range=(-1, 1)),
        DPGreedyCDRegressor(norm_bound=np.sqrt(2), target_bounds=(0, 1e6), penalty="l2"))
    grid = {"dpgreedycdregressor__alpha": [1e-4, 1e3]}  # fits the prices / the mean only
    seeds = range(12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stated range leaves nothing to warn about
        picks = [PrivateHyperparameterSearch(pipe, grid, epsilon=5.0, delta=1e-6,
                                             random_state=seed).fit(X, y).best_params_
                 for seed in seeds]
    useful = sum(p["dpgreedycdregressor__alpha"] == 1e-4 for p in picks)
    assert useful >= 0.75 * len(seeds)


def _fit(estimator, grid=None, X=None, y=None, **kwargs):
    if X is None:
        rng = np.random.default_rng(0)
        X = rng.uniform(-1, 1, (100, 3))
        y = 50 + 10 * X[:, 0]
    return PrivateHyperparameterSearch(
        estimator, grid or {"alpha": [0.1, 1.0]}, epsilon=1.0, delta=1e-6,
        expected_repetitions=2, random_state=0, **kwargs).fit(X, y)


@pytest.mark.parametrize("scoring, bounds", [(None, (-1e4, 0.0)),
                                             ("neg_squared_error", (-1e4, 0.0)),
                                             ("neg_absolute_error", (-100.0, 0.0))])
def test_error_bounds_follow_the_stated_target_range(scoring, bounds):
    search = _fit(DPOutputPerturbationRegressor(target_bounds=(0, 100), delta=1e-6),
                  scoring=scoring)
    assert search.score_bounds_ == bounds


def test_symmetric_target_bound_and_pipeline_final_step():
    model = DPOutputPerturbationRegressor(target_bound=60.0, delta=1e-6)
    pipe = make_pipeline(BoundedScaler(bounds=(-1, 1)), model)
    search = _fit(pipe, {"dpoutputperturbationregressor__alpha": [0.1, 1.0]})
    assert search.score_bounds_ == (-(120.0 ** 2), 0.0)


def test_a_grid_of_target_ranges_scores_on_their_hull():
    grid = {"target_bounds": [(0, 100), (20, 150)], "alpha": [0.1]}
    search = _fit(DPOutputPerturbationRegressor(delta=1e-6), grid)
    assert search.score_bounds_ == (-(150.0 ** 2), 0.0)


def test_given_score_bounds_are_kept():
    search = _fit(DPOutputPerturbationRegressor(target_bounds=(0, 100), delta=1e-6),
                  score_bounds=(-50.0, 0.0))
    assert search.score_bounds_ == (-50.0, 0.0)


@pytest.mark.parametrize("bounds", [1.0, np.float32(1.0), 3, "ab", (0.0, 1.0, 2.0), (0.0,),
                                    (True, 2.0), ("a", "b"), np.zeros((2, 1))])
def test_score_bounds_that_are_not_a_pair_of_numbers_are_refused_by_name(bounds):
    # A number or a string failed inside float() or the unpacking, naming no parameter
    # ("'float' object is not iterable"); booleans are not numbers.
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="score_bounds must be"):
        _fit(DPOutputPerturbationRegressor(target_bounds=(0, 100), delta=1e-6),
             score_bounds=bounds)
    assert len(ledger) == 0 and ledger.pending() == []


def test_score_bounds_may_be_an_array():
    search = _fit(DPOutputPerturbationRegressor(target_bounds=(0, 100), delta=1e-6),
                  score_bounds=np.array([-50.0, 0.0]))
    assert search.score_bounds_ == (-50.0, 0.0)


def test_no_stated_range_keeps_unit_bounds_and_warns():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (100, 3))
    y = np.clip(X[:, 0], -1, 1)
    with pytest.warns(UserWarning, match="states no public target range"):
        search = _fit(DPOutputPerturbationRegressor(target_bound=None, delta=1e-6),
                      X=X, y=y)
    assert search.score_bounds_ == (-1.0, 0.0)
    # Some candidates without a range: no common scale either.
    grid = {"target_bounds": [(0, 100), None], "alpha": [0.1]}
    with pytest.warns(UserWarning, match="states no public target range"):
        _fit(DPOutputPerturbationRegressor(delta=1e-6), grid, X=X, y=y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _fit(DPOutputPerturbationRegressor(delta=1e-6), X=X, y=y, score_bounds=(-1, 0))
