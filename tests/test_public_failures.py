"""What a failed fit may say: errors raised before any budget, whose messages quote no
data and whose raising does not depend on private values."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from skdp_sparse import (
    BoundedScaler,
    DPGreedyCDRegressor,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
    DPSparseLogisticRegression,
    DPSparseMeanEstimator,
    DPStandardScaler,
    PrivateHyperparameterSearch,
    privacy_ledger,
)
from skdp_sparse.feature_selection import DPSelectKBest
from skdp_sparse.privacy.ledger._store import scalar_params
from skdp_sparse.utils.validation import data_free_errors

_SECRETS = ("52311", "250001", "alice smith", "HIV+")


def _refused(fit, match=None):
    """The exception of ``fit()``, which must leave every ledger empty."""
    with privacy_ledger() as ledger:
        with pytest.raises((ValueError, TypeError), match=match) as info:
            fit()
    assert len(ledger) == 0 and ledger.spent() == (0, 0)
    return info.value


def _quotes_nothing(exc):
    chain = [exc, exc.__cause__, exc.__context__]
    text = " ".join(str(e) for e in chain if e is not None)
    assert not [s for s in _SECRETS if s in text], text


_SALARIES = np.array([52311.25, 98123.5, 40400.75, 250001.0, 61234.0])
_NAMES = np.array([["alice smith", 1.0]] * 5, dtype=object)


@pytest.mark.parametrize("fit", [
    lambda: DPStandardScaler(bounds=(0, 3e5)).fit(_SALARIES),
    lambda: BoundedScaler(bounds=(0, 3e5)).fit(_SALARIES),
    lambda: DPSelectKBest(k=1, sparsity=1).fit(_SALARIES),
    lambda: DPSparseMeanEstimator().fit(_SALARIES),
    lambda: DPStandardScaler(bounds=(0, 1)).fit(_NAMES),
    lambda: DPSparseMeanEstimator().fit(pd.DataFrame({"a": [1, 2], "b": ["3", "HIV+ #17"]})),
    lambda: DPGreedyCDRegressor(target_bounds=(0, 1)).fit(
        np.ones((5, 2)), np.array(["alice smith", "b", "c", "d", "e"])),
    lambda: DPOutputPerturbationRegressor(target_bounds=(0, 3e5)).fit(
        sp.random(5, 3, density=0.5, format="csr", random_state=0),
        np.array(["1", "2", "alice smith", "4", "5"], dtype=object)),
    lambda: DPSparseLogisticRegression(classes=[0, 1]).fit(_NAMES, [0, 1, 0, 1, 0]),
    lambda: PrivateHyperparameterSearch(
        DPSparseLogisticRegression(classes=[0, 1]), {"alpha": [1e-4]}).fit(
            ["patient alice smith diagnosed HIV+"] * 8, [0, 1] * 4),
])
def test_validation_errors_do_not_quote_the_data(fit):
    _quotes_nothing(_refused(fit))


def test_predict_errors_do_not_quote_the_data():
    X = np.random.default_rng(0).uniform(0, 1, (40, 2))
    clf = DPSparseLogisticRegression(classes=[0, 1], random_state=0).fit(X, np.arange(40) % 2)
    with pytest.raises(ValueError) as info:
        clf.predict(np.array([[0.1, "alice smith"]], dtype=object))
    _quotes_nothing(info.value)


def test_data_free_errors_keep_other_messages():
    with pytest.raises(ValueError, match="^norm_bound must be positive$"):
        with data_free_errors():
            raise ValueError("norm_bound must be positive")
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array instead.\nReshape"):
        with data_free_errors():
            raise ValueError("Expected 2D array, got 1D array instead:\narray=[1. 2.\n 3.].\n"
                             "Reshape your data either using array.reshape(-1, 1)")


@pytest.mark.parametrize("make", [
    lambda: DPSparseLogisticRegression(classes=[0, 1]),
    lambda: DPGreedyCDRegressor(target_bounds=(0, 1)),
    lambda: DPOutputPerturbationClassifier(classes=[0, 1]),
    lambda: DPSparseMeanEstimator(),
    lambda: DPStandardScaler(bounds=(0, 1)),
    lambda: PrivateHyperparameterSearch(DPSparseLogisticRegression(classes=[0, 1]),
                                        {"alpha": [1e-4]}),
])
def test_a_random_state_that_makes_no_generator_fails_before_any_budget(make):
    X = np.random.default_rng(0).uniform(0, 1, (40, 2))
    y = np.arange(40) % 2
    est = make().set_params(random_state=-1)
    fit = (lambda: est.fit(X)) if isinstance(est, DPSparseMeanEstimator | DPStandardScaler) \
        else (lambda: est.fit(X, y))
    _refused(fit, match="random_state must be None, a non-negative int")
    assert not hasattr(est, "epsilon_spent_")


@pytest.mark.parametrize("make", [
    lambda: DPSparseLogisticRegression(classes=[0.0, 0.5, 1.0], random_state=0),
    lambda: DPOutputPerturbationClassifier(classes=[0.0, 0.5, 1.0], random_state=0),
])
def test_with_public_classes_only_labels_outside_them_raise(make):
    # scikit-learn calls [0, 0.5, 1] continuous only when some row is labelled 0.5:
    # whether the fit raised would tell whether such a row exists.
    X = np.random.default_rng(0).uniform(0, 1, (60, 2))
    without = np.where(np.arange(60) % 2, 1.0, 0.0)
    with_one = without.copy()
    with_one[7] = 0.5
    assert make().fit(X, without).classes_.tolist() == [0.0, 0.5, 1.0]
    assert make().fit(X, with_one).classes_.tolist() == [0.0, 0.5, 1.0]
    outside = without.copy()
    outside[3] = 0.25
    _refused(lambda: make().fit(X, outside), match="outside the public label set")
    labels = np.array(["ham", "spam"] * 30, dtype=object)
    labels[5] = None  # incomparable with the label set: outside it, like any other
    _refused(lambda: DPSparseLogisticRegression(classes=["ham", "spam"]).fit(X, labels),
             match="outside the public label set")


@pytest.mark.parametrize("bounds", [(-1e308, 1e308), (1e308, 1.7e308), (0, 5e-324),
                                    (0, 1e-101), (-2e100, 0)])
def test_target_bounds_outside_the_range_of_a_bound_are_refused(bounds):
    X, y = np.ones((10, 2)), np.linspace(0, 1, 10)
    for est in (DPGreedyCDRegressor(target_bounds=bounds),
                DPOutputPerturbationRegressor(target_bounds=bounds)):
        _refused(lambda est=est: est.fit(X, y), match="target_bounds must be a pair")


def test_target_bounds_may_be_an_array():
    X, y = np.ones((10, 2)), np.linspace(0, 1, 10)
    est = DPGreedyCDRegressor(target_bounds=np.array([0.0, 1.0]), random_state=0).fit(X, y)
    assert np.isfinite(est.predict(X)).all()


@pytest.mark.parametrize("bounds", [(0, 1e-300), (-1e200, 1e200), (-1e308, 1e308)])
def test_scaler_ranges_outside_the_range_of_a_bound_are_refused(bounds):
    X = np.zeros((10, 2))
    for est in (DPStandardScaler(bounds=bounds), BoundedScaler(bounds=bounds)):
        _refused(lambda est=est: est.fit(X), match="every range must lie within")


def test_contribution_bound_outside_the_range_of_a_bound_is_refused():
    X, y = np.ones((10, 2)), np.arange(10) % 2
    est = DPSparseLogisticRegression(classes=[0, 1], solver="sparse_sgd",
                                     contribution_bound=1e-300)
    _refused(lambda: est.fit(X, y), match="contribution_bound")


def test_ledger_records_keep_no_seed():
    # A seed lets whoever reads the ledger regenerate the noise of the fit.
    params = scalar_params(DPSparseLogisticRegression(random_state=12345, epsilon=0.5))
    assert "random_state" not in params and params["epsilon"] == 0.5


@pytest.mark.parametrize("solver", ["sgd", "sparse_sgd", "bias_reduced_sgd"])
def test_a_learning_rate_that_lets_iterates_overflow_is_refused_before_any_budget(solver):
    # At learning_rate 1e200 and bounds 1e100, one noisy step takes the weights to about
    # 1e208, and a row [L, -L, L, -L] has margin inf - inf: the fit failed on that row
    # and not on a row of zeros. The rate is refused from public values instead.
    bound = 1e100
    X = np.zeros((40, 4))
    X[0] = [bound, -bound, bound, -bound]
    y = np.arange(40) % 2
    est = DPSparseLogisticRegression(classes=[0, 1], solver=solver, learning_rate=1e200,
                                     norm_bound=bound, feature_bound=bound, max_iter=5,
                                     random_state=0)
    _refused(lambda: est.fit(X, y), match="learning_rate=1e\\+200 is above")
    # A large rate within the cap fits on both neighbours alike.
    for rows in (X, np.zeros((40, 4))):
        est.set_params(learning_rate=1e5 / (0.25 * (2 * bound**2 + 1)))
        assert np.isfinite(est.fit(rows, y).coef_).all()
