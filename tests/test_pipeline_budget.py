"""One budget for a pipeline (split_budget), and what a grid search over a private
pipeline spends: every private step of every candidate, in the ledger."""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.compose import ColumnTransformer, make_column_selector
from sklearn.ensemble import BaggingClassifier
from sklearn.feature_selection import SelectKBest
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import FeatureUnion, Pipeline, make_pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    Normalizer,
    OneHotEncoder,
    PolynomialFeatures,
    StandardScaler,
)

from skdp_sparse import (
    DPSparseLogisticRegression,
    DPStandardScaler,
    PrivateHyperparameterSearch,
    privacy_ledger,
)
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
from skdp_sparse.feature_selection import DPSelectKBest
from skdp_sparse.pipeline import private_steps, split_budget
from skdp_sparse.privacy.accounting import compose

_WORDS = ["good", "great", "fine", "bad", "awful", "poor", "film", "plot", "actor"]


def _corpus(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    docs = [" ".join(rng.choice(_WORDS[:3] if label else _WORDS[3:6], 2).tolist()
                     + rng.choice(_WORDS[6:], 2).tolist()) for label in y]
    return docs, y


def _pipeline():
    return Pipeline([
        ("tfidf", DPTfidfVectorizer(max_terms_per_document=4, random_state=0)),
        ("select", DPSelectKBest(k=5, sparsity=4, random_state=0)),
        ("clf", DPSparseLogisticRegression(classes=[0, 1], random_state=0)),
    ])


def test_split_budget_by_weights():
    model = split_budget(_pipeline(), 2.0, 1e-6, weights={"tfidf": 1, "select": 1, "clf": 2})
    assert [model[s].epsilon for s in ("tfidf", "select", "clf")] == [0.5, 0.5, 1.0]
    assert sum(model[s].delta for s in ("tfidf", "select", "clf")) == pytest.approx(1e-6)
    model = split_budget(_pipeline(), 3.0, 3e-6)
    assert [model[s].epsilon for s in ("tfidf", "select", "clf")] == [1.0, 1.0, 1.0]
    model = split_budget(_pipeline(), 1.0, 1e-6, weights=[1, 3, 6])
    assert model["clf"].epsilon == pytest.approx(0.6)


def test_split_budget_warns_of_a_share_a_step_never_spends():
    """A vectorizer with a public vocabulary and no idf releases nothing: its share is
    kept (a later use_idf=True would spend it), and the split says so."""
    def model(**tfidf):
        return make_pipeline(DPTfidfVectorizer(vocabulary=_WORDS, **tfidf),
                             DPSparseLogisticRegression(classes=[0, 1]))

    with pytest.warns(UserWarning, match=r"\['dptfidfvectorizer'\] release nothing.*0\.25"):
        split = split_budget(model(use_idf=False), 1.0, 1e-6, weights=[1, 3])
    assert split[0].epsilon == 0.25 and split[1].epsilon == 0.75
    docs, y = _corpus(300)
    with privacy_ledger() as ledger:
        split.fit(docs, y)
    assert split[0].epsilon_spent_ == 0 and ledger.spent()[0] <= 0.75
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        split_budget(model(use_idf=True), 1.0, 1e-6)
        split_budget(_pipeline(), 1.0, 1e-6)
        split_budget(model(use_idf=False)[0], 1.0, 1e-6)  # alone: nothing to give
    # The private search gives such a step no share: nothing to warn of there.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        PrivateHyperparameterSearch(
            model(use_idf=False), {"dpsparselogisticregression__alpha": [1e-3, 1e-2]},
            epsilon=1.0, delta=1e-6, expected_repetitions=2, random_state=0).fit(docs, y)
    assert not [w for w in caught if "split_budget" in str(w.message)]


def test_private_steps_found_in_nested_composites():
    ct = ColumnTransformer([("scale", DPStandardScaler(bounds=(0, 1)), [0, 1]),
                            ("norm", Normalizer(), [2])], sparse_threshold=0)
    model = make_pipeline(ct, DPSparseLogisticRegression())
    steps = private_steps(model)
    assert list(steps) == ["columntransformer__scale", "dpsparselogisticregression"]
    split_budget(model, 1.0, 1e-6)
    assert model[0].transformers[0][1].epsilon == 0.5
    clf = DPSparseLogisticRegression()
    assert private_steps(clf) == {"": clf}


@pytest.mark.parametrize("kwargs, message", [
    ({"weights": {"tfidf": 1}}, "missing"),
    ({"weights": {"tfidf": 1, "select": 1, "clf": 1, "other": 1}}, "unknown"),
    ({"weights": [1, 2]}, "2 weights for 3"),
    ({"weights": [1, -2, 1]}, "positive"),
    ({"weights": [1, True, 1]}, "positive"),
    # A number failed in list() with a TypeError, and a string of three characters was
    # three weights.
    ({"weights": 3}, "a dict from private step to weight"),
    ({"weights": 2.5}, "a dict from private step to weight"),
    ({"weights": "abc"}, "a dict from private step to weight"),
    ({"weights": b"abc"}, "a dict from private step to weight"),
])
def test_split_budget_rejects_bad_weights(kwargs, message):
    with pytest.raises(ValueError, match=message):
        split_budget(_pipeline(), 1.0, 1e-6, **kwargs)


def test_split_budget_rejects_bad_budgets_and_pipelines_without_private_steps():
    with pytest.raises(ValueError, match="epsilon"):
        split_budget(_pipeline(), -1.0, 1e-6)
    with pytest.raises(ValueError, match="delta"):
        split_budget(_pipeline(), 1.0, 1.5)
    with pytest.raises(ValueError, match="finite"):
        split_budget(_pipeline(), np.inf, 1e-6)
    with pytest.raises(ValueError, match="no private step"):
        split_budget(make_pipeline(Normalizer()), 1.0, 1e-6)


def test_pipeline_fit_spends_at_most_the_stated_budget():
    docs, y = _corpus()
    model = split_budget(_pipeline(), 1.0, 1e-6, weights={"tfidf": 1, "select": 1, "clf": 2})
    with privacy_ledger() as ledger:
        model.fit(docs, y)
    assert len(ledger.records()) == 3
    epsilon, delta = ledger.spent(1e-6)
    assert epsilon <= 1.0 * (1 + 1e-9) and delta <= 1e-6 * (1 + 1e-12)
    basic = ledger.spent(composition="basic")
    assert basic[0] == pytest.approx(1.0, rel=1e-6)


def test_grid_search_records_every_private_step_of_every_candidate():
    docs, y = _corpus()
    model = split_budget(_pipeline(), 1.0, 1e-6)
    grid = {"select__k": [3, 5], "clf__alpha": [1e-3, 1e-2]}
    with privacy_ledger() as ledger:
        GridSearchCV(model, grid, cv=3, scoring="roc_auc").fit(docs, y)
    records = ledger.records()
    fits = len(grid["select__k"]) * len(grid["clf__alpha"]) * 3 + 1  # and the refit
    names = [r.estimator for r in records]
    for step in ("DPTfidfVectorizer", "DPSelectKBest", "DPSparseLogisticRegression"):
        assert sum(name.startswith(step) for name in names) == fits
    assert len(records) == 3 * fits
    # The total is the composition of every recorded release.
    events = [e for r in records for e in r.composable_events()]
    total_delta = sum(r.delta_spent for r in records)
    assert ledger.spent(total_delta)[0] == pytest.approx(
        min(compose(events, total_delta)[0], sum(r.epsilon_spent for r in records)))
    assert ledger.spent(composition="basic")[0] == pytest.approx(fits * 1.0, rel=1e-6)


def test_a_frozen_private_step_is_not_fitted_again():
    docs, y = _corpus()
    with privacy_ledger() as ledger:
        vectorizer = DPTfidfVectorizer(epsilon=0.5, delta=5e-7, max_terms_per_document=4,
                                       random_state=0).fit(docs)
        model = make_pipeline(FrozenEstimator(vectorizer),
                              DPSparseLogisticRegression(epsilon=0.5, delta=5e-7,
                                                         classes=[0, 1], random_state=0))
        GridSearchCV(model, {"dpsparselogisticregression__alpha": [1e-3, 1e-2]},
                     cv=3).fit(docs, y)
    names = [r.estimator for r in ledger.records()]
    assert sum(n.startswith("DPTfidfVectorizer") for n in names) == 1
    assert sum(n.startswith("DPSparseLogisticRegression") for n in names) == 2 * 3 + 1


def test_split_budget_checks_every_step_with_its_share_before_any_fit():
    # A pipeline fits its steps in turn: a later step's parameter error used to come
    # after the vectorizer had spent and recorded its share.
    no_delta = Pipeline([("t", DPTfidfVectorizer()), ("c", DPSparseLogisticRegression())])
    with pytest.raises(ValueError, match="step 't'.*needs 0 < delta"):
        split_budget(no_delta, 1.0, 0.0)
    assert no_delta[0].epsilon == 1.0 and no_delta[0].delta == DPTfidfVectorizer().delta
    no_sparsity = Pipeline([("t", DPTfidfVectorizer()), ("k", DPSelectKBest(k=5)),
                            ("c", DPSparseLogisticRegression())])
    with pytest.raises(ValueError, match="step 'k'.*sparsity"):
        split_budget(no_sparsity, 1.0, 1e-6)
    assert no_sparsity[1].epsilon == DPSelectKBest().epsilon


def test_split_budget_leaves_a_frozen_private_step_out():
    # A frozen step fits nothing again, so the budget is the other steps' to share
    # (setting a frozen step's parameters is an error in scikit-learn).
    docs, _ = _corpus(n=300)
    vectorizer = DPTfidfVectorizer(epsilon=0.5, delta=5e-7, max_terms_per_document=4,
                                   random_state=0).fit(docs)
    model = make_pipeline(FrozenEstimator(vectorizer), DPSelectKBest(k=3, sparsity=4),
                          DPSparseLogisticRegression(classes=[0, 1]))
    assert list(private_steps(model)) == ["dpselectkbest", "dpsparselogisticregression"]
    split_budget(model, 1.0, 1e-6)
    assert model[1].epsilon == model[2].epsilon == 0.5
    assert vectorizer.epsilon == 0.5 and vectorizer.delta == 5e-7


def test_split_budget_refuses_one_object_in_two_places():
    # Both places would fit it with the share set last: (1, 3, 1) would spend 1.4.
    shared = DPStandardScaler(bounds=(0, 1))
    ct = ColumnTransformer([("a", shared, [0]), ("b", shared, [1])], sparse_threshold=0)
    model = make_pipeline(ct, DPSparseLogisticRegression(classes=[0, 1]))
    with pytest.raises(ValueError, match="are one object"):
        split_budget(model, 1.0, 1e-6, weights=[1, 3, 1])
    ct = ColumnTransformer([("a", shared, [0]), ("b", clone(shared), [1])], sparse_threshold=0)
    split_budget(make_pipeline(ct, DPSparseLogisticRegression(classes=[0, 1])), 1.0, 1e-6)


@pytest.mark.parametrize("meta", [
    lambda clf: OneVsRestClassifier(clf),
    lambda clf: CalibratedClassifierCV(clf, cv=3),
    lambda clf: make_pipeline(Normalizer(), BaggingClassifier(clf, n_estimators=3)),
])
def test_split_budget_refuses_steps_that_a_meta_estimator_fits_several_times(meta):
    # Each of their fits would spend the step's whole share.
    model = meta(DPSparseLogisticRegression(classes=[0, 1]))
    with pytest.raises(ValueError, match="may fit it more than once"):
        split_budget(model, 1.0, 1e-6)
    X = np.random.default_rng(0).uniform(0, 1, (60, 3))
    if isinstance(model, OneVsRestClassifier):
        # What the check prevents: the ledger would hold more than the budget.
        model.estimator.set_params(epsilon=1.0, delta=1e-6)
        with privacy_ledger() as ledger:
            OneVsRestClassifier(model.estimator).fit(X, np.arange(60) % 3)
        assert ledger.spent(1e-6)[0] > 1.0


@pytest.mark.parametrize("step", [StandardScaler(), SelectKBest(k=2)])
def test_split_budget_refuses_a_step_that_fits_without_privacy(step):
    # Such a pipeline was accepted and its fit claimed to be (epsilon, delta)-DP while
    # the step learned exactly from the private rows.
    model = make_pipeline(step, DPSparseLogisticRegression(classes=[0, 1]))
    with pytest.raises(ValueError, match="fits on the data without privacy"):
        split_budget(model, 1.0, 1e-6)
    frozen = make_pipeline(FrozenEstimator(clone(step).fit(np.eye(4), [0, 1, 0, 1])),
                           DPSparseLogisticRegression(classes=[0, 1]))
    assert split_budget(frozen, 1.0, 1e-6)[1].epsilon == 1.0


class _MeanRememberer:
    """A step that is not a scikit-learn estimator and learns the rows' mean."""

    def fit(self, X, y=None):
        self.mean_ = np.asarray(X).mean(axis=0)
        return self

    def transform(self, X):
        return X

    def get_params(self, deep=True):
        return {}

    def set_params(self, **params):
        return self


def _refused_steps():
    return [
        Pipeline([("remember", _MeanRememberer()), ("lr", DPSparseLogisticRegression())]),
        make_pipeline(ColumnTransformer([("n", Normalizer(), lambda Z: [int(np.argmax(
            np.asarray(Z).mean(axis=0)))])], sparse_threshold=0), DPSparseLogisticRegression()),
        make_pipeline(OneHotEncoder(), DPSparseLogisticRegression()),
        make_pipeline(OneHotEncoder(categories=[[0, 1]]), DPSparseLogisticRegression()),
    ]


@pytest.mark.parametrize("model", _refused_steps(), ids=["duck", "callable columns",
                                                         "categories auto", "raises"])
def test_split_budget_and_the_search_refuse_steps_that_learn_however_they_look(model):
    # A step that is not a BaseEstimator, and a column transformer choosing its
    # columns on the rows, were accepted: the search released what they learned.
    with pytest.raises(ValueError, match="without privacy"):
        split_budget(model, 1.0, 1e-6)
    with pytest.raises(ValueError, match="without privacy"):
        PrivateHyperparameterSearch(model, {}).fit(np.eye(4), [0, 1, 0, 1])


@pytest.mark.parametrize("step", [
    OneHotEncoder(categories=[[0, 1]] * 4, handle_unknown="ignore"),
    PolynomialFeatures(),
    ColumnTransformer([("a", "passthrough", [0, 1]), ("b", "drop", [2])], sparse_threshold=0),
    FeatureUnion([("a", "passthrough")]),
    Pipeline([("p", "passthrough")]),
    ColumnTransformer([("n", Normalizer(), make_column_selector(dtype_include=np.number))],
                      sparse_threshold=0),
])
def test_split_budget_accepts_steps_that_learn_nothing(step):
    # These were refused: their tags say they need a fit, but they learn nothing from
    # the rows' values.
    model = make_pipeline(step, DPSparseLogisticRegression(classes=[0, 1]))
    assert split_budget(model, 1.0, 1e-6)[-1].epsilon == 1.0


def test_a_function_transformer_that_checks_its_inverse_on_the_rows_is_refused():
    # Its fit maps the rows by func then inverse_func and warns where they differ: of
    # two neighbouring data sets, the one with a single negative row warned.
    def step(**kwargs):
        return FunctionTransformer(np.abs, inverse_func=np.asarray, **kwargs)

    X = np.ones((50, 2))
    neighbour = X.copy()
    neighbour[0, 0] = -1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step().fit(X)
        quiet = len(caught)
        step().fit(neighbour)
    assert quiet == 0 and len(caught) == 1
    model = make_pipeline(step(), DPSparseLogisticRegression(classes=[0, 1]))
    with pytest.raises(ValueError, match="check_inverse=False"):
        split_budget(model, 1.0, 1e-6)
    with pytest.raises(ValueError, match="check_inverse=False"):
        PrivateHyperparameterSearch(model, {}).fit(X, [0, 1] * 25)
    model = make_pipeline(step(check_inverse=False), DPSparseLogisticRegression(classes=[0, 1]))
    assert split_budget(model, 1.0, 1e-6)[-1].epsilon == 1.0


def test_a_column_transformer_that_chooses_its_output_format_from_the_rows_is_refused():
    # Where a block is sparse, ColumnTransformer makes its output sparse iff the rows'
    # density is below sparse_threshold: sparse_output_ held one exact bit of the data
    # (one unknown category flipped it in 5 of 5 fits).
    from sklearn.preprocessing import OneHotEncoder

    from skdp_sparse import PrivateHyperparameterSearch

    def pipeline(**kwargs):
        columns = ColumnTransformer(
            [("city", OneHotEncoder(categories=[["a", "b"]], handle_unknown="ignore"), [0])],
            **kwargs)
        return make_pipeline(columns, DPSparseLogisticRegression(classes=[0, 1]))

    with pytest.raises(ValueError, match="sparse_threshold=0"):
        split_budget(pipeline(), 1.0, 1e-6)
    with pytest.raises(ValueError, match="sparse_threshold=0"):
        PrivateHyperparameterSearch(pipeline(), {"dpsparselogisticregression__alpha": [1e-3]}
                                    ).fit(np.array([["a"], ["b"]] * 4, dtype=object),
                                          [0, 1] * 4)
    split_budget(pipeline(sparse_threshold=0), 1.0, 1e-6)
