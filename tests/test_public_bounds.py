"""Public bounds without the data: one-hot features' bounds from their categories; fits
that show nothing about how their rows compare with the bounds, and the (not private)
diagnostic that does, naming the bound to supply."""

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder

from skdp_sparse import DPSparseLogisticRegression, PrivacyLeakWarning
from skdp_sparse.preprocessing import OneHotBounds, diagnose_bounds, one_hot_bounds

CATEGORIES = [["red", "green", "blue"], ["s", "m", "l", "xl"], ["yes", "no"]]


def _categorical(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.choice(c, size=n) for c in CATEGORIES]).astype(object)
    y = (X[:, 0] == "red").astype(int)
    return X, y


@pytest.mark.parametrize("handle_unknown", ["ignore", "infrequent_if_exist"])
def test_one_hot_bounds_hold_for_every_encoded_row(handle_unknown):
    encoder = OneHotEncoder(categories=CATEGORIES, handle_unknown=handle_unknown)
    bounds = one_hot_bounds(encoder)
    assert bounds == OneHotBounds(1.0, math.sqrt(3), 3)
    assert one_hot_bounds(CATEGORIES) == bounds
    X, _ = _categorical()
    Z = encoder.fit_transform(X)
    assert np.abs(Z.toarray()).max() <= bounds.feature_bound
    assert np.diff(Z.tocsr().indptr).max() <= bounds.sparsity
    assert sp.linalg.norm(Z, axis=1).max() <= bounds.norm_bound + 1e-12
    # Every row meets the bounds exactly: they are tight.
    assert np.diff(Z.tocsr().indptr).min() == bounds.sparsity


def test_one_hot_bounds_feed_a_private_pipeline_without_warnings():
    X, y = _categorical()
    encoder = OneHotEncoder(categories=CATEGORIES, handle_unknown="ignore")
    model = make_pipeline(encoder, DPSparseLogisticRegression(
        classes=[0, 1], epsilon=5.0, random_state=0, **one_hot_bounds(encoder)._asdict()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        model.fit(X, y)
    assert model.score(X, y) > 0.9
    # Beside other columns: the norms add in squares, the sparsities add.
    columns = ColumnTransformer([("cat", encoder, [0, 1, 2])], sparse_threshold=0)
    assert columns.fit_transform(X).shape[1] == 9


@pytest.mark.parametrize("params, message", [
    ({}, "reads the categories from the training data"),
    ({"categories": CATEGORIES, "min_frequency": 5}, "min_frequency"),
    ({"categories": CATEGORIES, "max_categories": 2}, "max_categories"),
])
def test_one_hot_bounds_refuse_categories_read_from_data(params, message):
    with pytest.raises(ValueError, match=message):
        one_hot_bounds(OneHotEncoder(handle_unknown="ignore", **params))


@pytest.mark.parametrize("handle_unknown", ["error", "warn"])
def test_one_hot_bounds_refuse_an_encoder_that_tells_of_unknown_values(handle_unknown):
    # With "error", a row outside the categories made the fit raise, quoting its value.
    encoder = OneHotEncoder(categories=CATEGORIES, handle_unknown=handle_unknown)
    with pytest.raises(ValueError, match="handle_unknown='ignore'"):
        one_hot_bounds(encoder)


@pytest.mark.parametrize("drop", ["first", "if_binary", ["red", "s", "no"]])
@pytest.mark.parametrize("handle_unknown", ["ignore", "infrequent_if_exist"])
def test_one_hot_bounds_refuse_a_dropped_column(drop, handle_unknown):
    # With a dropped column, scikit-learn warns when a row's value is outside the
    # categories: of two neighbouring data sets, only the one with such a row warns.
    encoder = OneHotEncoder(categories=CATEGORIES, drop=drop, handle_unknown=handle_unknown)
    X, _ = _categorical(20)
    neighbour = X.copy()
    neighbour[0, 0] = "purple"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encoder.fit_transform(X)
        quiet = len(caught)
        encoder.fit_transform(neighbour)
    assert quiet == 0 and len(caught) == 1
    with pytest.raises(ValueError, match="drop=None"):
        one_hot_bounds(encoder)


def test_one_hot_bounds_name_what_they_take():
    columns = ColumnTransformer([("cat", OneHotEncoder(categories=CATEGORIES), [0])],
                                sparse_threshold=0)
    with pytest.raises(ValueError, match="takes a OneHotEncoder .* got ColumnTransformer"):
        one_hot_bounds(columns)


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


@pytest.mark.parametrize("solver", [{"solver": "sgd"},
                                    {"solver": "greedy_cd", "curvature": "bound"}])
@pytest.mark.parametrize("sparse", [False, True])
def test_fit_shows_nothing_about_how_its_rows_compare_with_the_bounds(solver, sparse):
    # Whether most rows exceed the bounds is a fact about the data: the fit's warnings
    # are the same whichever side of that line the training data are. (The greedy
    # solver's private curvature rule may warn from its noisy, accounted count.)
    records = []
    for scale in (0.4, 1000.0):
        X, y = _wide(scale=scale)
        X = sp.csr_matrix(X) if sparse else X
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            DPSparseLogisticRegression(classes=[0, 1], max_iter=3, random_state=0,
                                       **solver).fit(X, y)
        records.append(sorted({(w.category.__name__, str(w.message)) for w in record}))
    assert records[0] == records[1]


@pytest.mark.parametrize("sparse", [False, True])
def test_diagnose_bounds_names_the_value_to_supply(sparse):
    X, _ = _wide()
    X = sp.csr_matrix(X) if sparse else X
    report = diagnose_bounds(X)
    assert report.rows_above_feature_bound == 1.0 and report.rows_above_norm_bound == 1.0
    assert "feature_bound (1," in report.advice and "norm_bound (1," in report.advice
    assert "BoundedScaler" in report.advice and "one_hot_bounds" in report.advice
    # Bounds that hold, or a few outlying rows (what clipping is for): no advice.
    assert diagnose_bounds(X, feature_bound=1000.0, norm_bound=2000.0).advice == ""
    X_small, _ = _wide(scale=0.4)
    X_small[:10] *= 1e4
    small = diagnose_bounds(sp.csr_matrix(X_small) if sparse else X_small)
    assert small.advice == "" and small.rows_above_norm_bound == pytest.approx(10 / 300)
    per_feature = diagnose_bounds(X, feature_bound=[1.0, 2.0, 3.0, 4.0], norm_bound=1e9)
    assert "feature_bound (its per-feature values" in per_feature.advice
    assert "norm_bound (" not in per_feature.advice


def test_diagnose_bounds_reports_targets_outside_their_range():
    X, _ = _wide(scale=0.4)
    prices = np.linspace(1e5, 9e5, X.shape[0])
    report = diagnose_bounds(X, prices)
    assert report.targets_outside_bounds == 1.0
    assert "target_bounds=(low, high)" in report.advice and "feature_bound" not in report.advice
    assert diagnose_bounds(X, prices, target_bounds=(0, 1e6)).targets_outside_bounds == 0.0
    assert diagnose_bounds(X, prices, target_bounds=(0, 1e6)).advice == ""
    assert diagnose_bounds(X).targets_outside_bounds is None
