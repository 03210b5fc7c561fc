"""What the private search takes as X: numbers, DataFrames with text columns, raw
documents; its public stand-in data follow the type, and what it refuses it refuses
before any budget, saying what it takes."""

import functools

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.frozen import FrozenEstimator
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder

from skdp_sparse import BoundedScaler, DPSparseLogisticRegression, PrivateHyperparameterSearch
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
from skdp_sparse.privacy.ledger import privacy_ledger

_GRID = {"clf__alpha": [1e-3, 1e-2]}


def _search(pipe, grid=_GRID):
    return PrivateHyperparameterSearch(pipe, grid, epsilon=1.0, delta=1e-6, classes=[0, 1],
                                       expected_repetitions=3, random_state=0)


def _cities(n=400, seed=0):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"city": rng.choice(["a", "b", "c"], n),
                          "year": rng.integers(1950, 2020, n)})
    y = ((frame.city == "a") | (frame.year > 2000)).astype(int).to_numpy()
    return frame, y


def _city_pipeline():
    columns = ColumnTransformer([
        ("cat", OneHotEncoder(categories=[["a", "b", "c"]], handle_unknown="ignore"),
         ["city"]),
        ("num", BoundedScaler(bounds=([1900], [2030])), ["year"])], sparse_threshold=0)
    return Pipeline([("ct", columns), ("clf", DPSparseLogisticRegression(norm_bound=2.0))])


@pytest.mark.parametrize("text_dtype", [object, "string"])
def test_dataframe_with_string_columns_is_searched(text_dtype):
    frame, y = _cities()
    frame["city"] = frame["city"].astype(text_dtype)
    search = _search(_city_pipeline()).fit(frame, y)
    assert search.epsilon_spent_ <= 1.0 + 1e-9
    assert list(search.feature_names_in_) == ["city", "year"]
    assert search.predict(frame).shape == (len(frame),)


def _documents(n=1200):
    return (["great fun movie loved it"] * (n // 2) + ["bad boring movie hated it"] * (n // 2),
            [1] * (n // 2) + [0] * (n // 2))


@functools.cache
def _frozen_vectorizer():
    # Fitted once, privately and apart from the search: frozen, the search refits nothing.
    vectorizer = DPTfidfVectorizer(epsilon=0.5, delta=1e-8, random_state=0).fit(_documents()[0])
    assert vectorizer.vocabulary_
    return FrozenEstimator(vectorizer)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("container", [list, np.array, pd.Series])
def test_raw_documents_through_a_frozen_vectorizer_are_searched(container):
    docs, y = _documents()
    pipe = Pipeline([("vec", _frozen_vectorizer()), ("clf", DPSparseLogisticRegression())])
    search = _search(pipe).fit(container(docs), y)
    assert search.epsilon_spent_ <= 1.0 + 1e-9
    assert search.predict(container(docs)).shape == (len(docs),)


def _refused(X, y, pipe=None):
    """The ValueError of a search of X, checked to come before any budget."""
    with privacy_ledger() as ledger:
        with pytest.raises(ValueError) as info:
            _search(pipe or _city_pipeline()).fit(X, y)
    assert len(ledger) == 0 and ledger.pending() == []
    return str(info.value)


def test_a_missing_value_in_a_text_column_is_refused_before_any_budget():
    frame, y = _cities()
    frame.loc[7, "city"] = None
    message = _refused(frame, y)
    assert "column 'city' of X holds a value that is not a str" in message


def test_a_document_that_is_not_a_str_is_refused_before_any_budget():
    docs, y = _documents()
    docs[3] = None
    pipe = Pipeline([("vec", _frozen_vectorizer()), ("clf", DPSparseLogisticRegression())])
    assert "holds a value that is not a str" in _refused(docs, y, pipe)


@pytest.mark.parametrize("case", ["categorical column", "1-d numbers", "2-d strings"])
def test_what_the_search_takes_leads_the_refusal(case):
    frame, y = _cities()
    X = {"categorical column": frame.astype({"city": "category"}),
         "1-d numbers": frame["year"].to_numpy(dtype=float),
         "2-d strings": frame.to_numpy(dtype=str)}[case]
    message = _refused(X, y)
    assert message.startswith("The private search takes a 2-d array or sparse matrix of "
                              "numbers, a DataFrame whose columns hold numbers or strings, "
                              "or raw documents")


def test_the_stand_in_frame_keeps_each_column_dtype():
    # The stand-in columns were all float64: a selector by dtype routed them otherwise
    # than the rows (integers), so the probe fits were not those of the real pipeline.
    from sklearn.compose import make_column_selector

    from skdp_sparse import DPStandardScaler
    from skdp_sparse.model_selection._public import PublicData

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"year": rng.integers(1950, 2020, 200),
                      "age": rng.integers(18, 90, 200), "x": rng.uniform(0, 1, 200),
                      "city": ["a", "b"] * 100})
    y = (X.year > 1985).astype(int).to_numpy()
    stand_in, _ = PublicData(None, None, [{}], 1e-6, X, y, np.array([0, 1]), 200,
                             160).dummy(10)
    assert list(stand_in.dtypes) == list(X.dtypes)
    X = X.drop(columns="city")
    columns = ColumnTransformer(
        [("floats", DPStandardScaler(bounds=(0, 1), clip_output=3),
          make_column_selector(dtype_include=np.floating)),
         ("ints", BoundedScaler(bounds=([1900, 0], [2030, 120])),
          make_column_selector(dtype_include=np.integer))], sparse_threshold=0)
    pipe = Pipeline([("ct", columns), ("clf", DPSparseLogisticRegression(norm_bound=3.0))])
    search = PrivateHyperparameterSearch(pipe, {"clf__alpha": [1e-3]}, epsilon=1.0,
                                         delta=1e-6, classes=[0, 1], expected_repetitions=3,
                                         random_state=0).fit(X, y)
    assert search.best_estimator_[0].named_transformers_["ints"].n_features_in_ == 2
