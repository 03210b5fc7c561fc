"""Public bounds without the data: one-hot features' bounds from their categories, and
the warning that names the bound to supply when the bounds in effect clip most rows."""

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder

from skdp_sparse import DPGreedyCDRegressor, DPSparseLogisticRegression, PrivacyLeakWarning
from skdp_sparse.preprocessing import OneHotBounds, one_hot_bounds

CATEGORIES = [["red", "green", "blue"], ["s", "m", "l", "xl"], ["yes", "no"]]


def _categorical(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.choice(c, size=n) for c in CATEGORIES]).astype(object)
    y = (X[:, 0] == "red").astype(int)
    return X, y


@pytest.mark.parametrize("drop", [None, "first"])
@pytest.mark.parametrize("handle_unknown", ["error", "ignore"])
def test_one_hot_bounds_hold_for_every_encoded_row(drop, handle_unknown):
    encoder = OneHotEncoder(categories=CATEGORIES, drop=drop, handle_unknown=handle_unknown)
    bounds = one_hot_bounds(encoder)
    assert bounds == OneHotBounds(1.0, math.sqrt(3), 3)
    assert one_hot_bounds(CATEGORIES) == bounds
    X, _ = _categorical()
    Z = encoder.fit_transform(X)
    assert np.abs(Z.toarray()).max() <= bounds.feature_bound
    assert np.diff(Z.tocsr().indptr).max() <= bounds.sparsity
    assert sp.linalg.norm(Z, axis=1).max() <= bounds.norm_bound + 1e-12
    # Without drop every row meets the bounds exactly: they are tight.
    if drop is None:
        assert np.diff(Z.tocsr().indptr).min() == bounds.sparsity


def test_one_hot_bounds_feed_a_private_pipeline_without_warnings():
    X, y = _categorical()
    encoder = OneHotEncoder(categories=CATEGORIES)
    model = make_pipeline(encoder, DPSparseLogisticRegression(
        classes=[0, 1], epsilon=5.0, random_state=0, **one_hot_bounds(encoder)._asdict()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        model.fit(X, y)
    assert model.score(X, y) > 0.9
    # Beside other columns: the norms add in squares, the sparsities add.
    columns = ColumnTransformer([("cat", encoder, [0, 1, 2])])
    assert columns.fit_transform(X).shape[1] == 9


@pytest.mark.parametrize("params, message", [
    ({}, "reads the categories from the training data"),
    ({"categories": CATEGORIES, "min_frequency": 5}, "min_frequency"),
    ({"categories": CATEGORIES, "max_categories": 2}, "max_categories"),
])
def test_one_hot_bounds_refuse_categories_read_from_data(params, message):
    with pytest.raises(ValueError, match=message):
        one_hot_bounds(OneHotEncoder(**params))


@pytest.mark.parametrize("bad", ["abc", [], [["a"], []], 3])
def test_one_hot_bounds_bad_categories(bad):
    with pytest.raises(ValueError, match="categor"):
        one_hot_bounds(bad)


# --------------------------------------------------------------------------
# Bounds that clip most rows
# --------------------------------------------------------------------------
def _wide(n=300, seed=0, scale=1000.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, scale, size=(n, 4))
    return X, (X[:, 0] > scale / 2).astype(int)


@pytest.mark.parametrize("solver, named", [("sgd", "norm_bound (1,"),
                                           ("greedy_cd", "feature_bound (1,")])
@pytest.mark.parametrize("sparse", [False, True])
def test_default_bounds_that_clip_most_rows_name_the_value_to_supply(solver, named, sparse):
    X, y = _wide()
    X = sp.csr_matrix(X) if sparse else X
    est = DPSparseLogisticRegression(classes=[0, 1], solver=solver, max_iter=3,
                                     random_state=0)
    with pytest.warns(PrivacyLeakWarning, match=r"more than half of the training rows") \
            as record:
        est.fit(X, y)
    text = " ".join(str(w.message) for w in record)
    assert named in text and "BoundedScaler" in text and "not covered" in text
    assert record[0].filename == __file__


def test_no_warning_when_the_bounds_hold_or_clip_few_rows():
    X, y = _wide()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        DPSparseLogisticRegression(classes=[0, 1], solver="sgd", max_iter=3,
                                   norm_bound=2000.0, random_state=0).fit(X, y)
        # A few outlying rows are what clipping is for: no warning.
        X_small, y_small = _wide(scale=0.4)
        X_small[:10] *= 1e4
        DPSparseLogisticRegression(classes=[0, 1], solver="sgd", max_iter=3,
                                   random_state=0).fit(X_small, y_small)


def test_warning_names_per_feature_bounds_and_regressors():
    X, y = _wide()
    with pytest.warns(PrivacyLeakWarning, match="feature_bound .its per-feature values"):
        DPGreedyCDRegressor(solver="greedy_cd", feature_bound=[1.0, 2.0, 3.0, 4.0],
                            max_iter=3, random_state=0).fit(X, y)
