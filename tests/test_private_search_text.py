"""The private search over raw documents: a DPTfidfVectorizer with a public vocabulary
is searched (what it releases and the width of its output follow from its parameters),
one whose vocabulary is chosen from the documents is refused before any budget."""

import textwrap
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.model_selection import ParameterGrid
from sklearn.pipeline import FeatureUnion, Pipeline

from skdp_sparse import DPSparseLogisticRegression, PrivateHyperparameterSearch
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
from skdp_sparse.feature_selection import DPSelectKBest
from skdp_sparse.model_selection._public import same_events
from skdp_sparse.pipeline import split_budget
from skdp_sparse.privacy.ledger import privacy_ledger

SPAM = ["free", "prize", "call", "win", "cash", "claim"]
HAM = ["lunch", "see", "you", "home", "later", "ok"]
#: Public: a word list, not read from the documents (it holds words none of them uses).
VOCABULARY = [*SPAM, *HAM, "the", "meeting"]


def _corpus(n=160, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    docs = [" ".join([*rng.choice(SPAM if label else HAM, 3), *rng.choice(SPAM + HAM, 2),
                      "unlisted"]) for label in y]
    return docs, y


def _pipeline(**tfidf):
    tfidf = {"vocabulary": VOCABULARY, "max_terms_per_document": 5, **tfidf}
    return Pipeline([("tfidf", DPTfidfVectorizer(**tfidf)),
                     ("clf", DPSparseLogisticRegression(classes=[0, 1]))])


def _search(estimator, grid, **kwargs):
    return PrivateHyperparameterSearch(estimator, grid, epsilon=1.0, delta=1e-6,
                                       expected_repetitions=4, random_state=0, **kwargs)


_GRIDS = [{"clf__alpha": [1e-4, 1e-2], "clf__solver": ["sgd", "screened_newton"]},
          {"tfidf__use_idf": [True, False], "tfidf__sublinear_tf": [True, False]},
          {"tfidf__max_features": [3, None], "tfidf__vocabulary": [VOCABULARY, SPAM]}]


@pytest.mark.parametrize("grid", _GRIDS)
def test_a_public_vocabulary_is_searched_on_raw_documents(grid):
    # It was refused as a step that learns from text: the search fits it on stand-in
    # empty strings first, which is right for it only if its vocabulary is public.
    docs, y = _corpus()
    with privacy_ledger() as ledger:
        search = _search(_pipeline(), grid).fit(docs, y)
    assert search.epsilon_spent_ <= 1.0 + 1e-9 and search.delta_spent_ <= 1e-6
    (record,) = ledger.records()
    assert record.estimator == "PrivateHyperparameterSearch"
    assert (record.epsilon_spent, record.delta_spent) == (search.epsilon_spent_,
                                                          search.delta_spent_)
    assert ledger.spent(search.delta_spent_)[0] == pytest.approx(search.epsilon_spent_)
    assert ledger.pending() == []
    best = search.best_estimator_
    vocabulary = search.best_params_.get("tfidf__vocabulary", VOCABULARY)
    assert best["tfidf"].vocabulary_ == {t: i for i, t in enumerate(vocabulary)}
    assert best["clf"].coef_.shape[-1] == len(vocabulary)
    assert search.predict(docs[:5]).shape == (5,)


@pytest.mark.parametrize("params", list(ParameterGrid({
    "tfidf__use_idf": [True, False], "tfidf__sublinear_tf": [True, False],
    "tfidf__max_features": [2, None], "tfidf__vocabulary_weighting": ["uniform", "count"]})))
def test_the_stand_in_fit_records_the_events_and_width_of_the_real_fit(params):
    # What the search compares after each real fit (its _SpendMismatch), and the width
    # the classifier's events were planned for.
    docs, _ = _corpus(n=60)
    y = np.arange(60) % 2
    fits = []
    for X in (docs, [""] * 60):
        with warnings.catch_warnings():
            # Its warning that a vectorizer without idf leaves its share unspent.
            warnings.simplefilter("ignore", UserWarning)
            model = split_budget(_pipeline(random_state=0).set_params(**params), 0.5, 1e-6)
        fits.append(model.fit(X, y))
    real, stand_in = fits
    for step in ("tfidf", "clf"):
        assert same_events(real[step].privacy_events_, stand_in[step].privacy_events_)
    assert real["tfidf"].transform(docs).shape == stand_in["tfidf"].transform(docs).shape
    assert (len(real["tfidf"].privacy_events_) > 0) == params["tfidf__use_idf"]


@pytest.mark.parametrize("container", [np.array, pd.Series, tuple])
def test_documents_of_any_container_the_search_takes(container):
    # The stand-in documents follow the container (an array keeps its dtype of str).
    docs, y = _corpus(n=40)
    search = _search(_pipeline(), {"tfidf__use_idf": [True, False]}).fit(container(docs), y)
    assert search.predict(container(docs[:3])).shape == (3,)


def test_a_text_column_with_a_public_vocabulary_is_searched():
    docs, y = _corpus()
    frame = pd.DataFrame({"text": docs, "length": [len(d) / 100 for d in docs]})
    columns = ColumnTransformer(
        [("words", DPTfidfVectorizer(vocabulary=VOCABULARY, max_terms_per_document=5),
          "text")], sparse_threshold=0)
    pipe = Pipeline([("columns", columns),
                     ("clf", DPSparseLogisticRegression(classes=[0, 1]))])
    with privacy_ledger() as ledger:
        search = _search(pipe, {"columns__words__use_idf": [True, False]}).fit(frame, y)
    assert ledger.spent(search.delta_spent_)[0] == pytest.approx(search.epsilon_spent_)
    assert search.best_estimator_["clf"].coef_.shape[-1] == len(VOCABULARY)


def test_private_steps_after_and_beside_a_public_vocabulary_are_searched():
    # A selector after the vectorizer plans its release on the vectorizer's width; a
    # feature union of two vectorizers has the sum of theirs.
    docs, y = _corpus()
    select = Pipeline([
        ("tfidf", DPTfidfVectorizer(vocabulary=VOCABULARY, max_terms_per_document=5)),
        ("select", DPSelectKBest(k=4, score_func="frequency", sparsity=5)),
        ("clf", DPSparseLogisticRegression(classes=[0, 1]))])
    union = Pipeline([("union", FeatureUnion([
        ("words", DPTfidfVectorizer(vocabulary=VOCABULARY, max_terms_per_document=5)),
        ("chars", DPTfidfVectorizer(vocabulary=["fr", "ee", "lu"], analyzer="char_wb",
                                    ngram_range=(2, 2), max_terms_per_document=5))])),
        ("clf", DPSparseLogisticRegression(classes=[0, 1]))])
    for pipe, grid, width in [(select, {"select__k": [3, 6], "tfidf__use_idf": [True, False]},
                               None),
                              (union, {"union__words__use_idf": [True, False]},
                               len(VOCABULARY) + 3)]:
        with privacy_ledger() as ledger:
            search = _search(pipe, grid).fit(docs, y)
        assert ledger.spent(search.delta_spent_)[0] == pytest.approx(search.epsilon_spent_)
        width = width or search.best_params_["select__k"]
        assert search.best_estimator_["clf"].coef_.shape[-1] == width


def test_a_grid_that_sets_every_candidates_vocabulary_is_searched():
    # The estimator given is never fitted itself: each candidate is what counts.
    docs, y = _corpus()
    grid = {"tfidf__vocabulary": [VOCABULARY, SPAM + ["ok"]]}
    search = _search(_pipeline(vocabulary=None), grid).fit(docs, y)
    assert search.best_estimator_["tfidf"].fixed_vocabulary_


@pytest.mark.parametrize("estimator, grid, named", [
    (_pipeline(vocabulary=None), {"clf__alpha": [1e-3]}, "'tfidf' learns"),
    (_pipeline(), {"tfidf__vocabulary": [VOCABULARY, None]},
     "the candidate {'tfidf__vocabulary': None} sets it"),
    (_pipeline(), {"tfidf": [DPTfidfVectorizer(vocabulary=VOCABULARY), DPTfidfVectorizer()]},
     "the candidate {'tfidf': DPTfidfVectorizer()} sets it"),
])
def test_a_vocabulary_chosen_from_the_documents_is_refused_before_any_budget(
        estimator, grid, named):
    # On the stand-in empty strings its vocabulary would come out empty, and the
    # classifier after it would be planned for no columns.
    docs, y = _corpus()
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="public vocabulary") \
            as info:
        _search(estimator, grid).fit(docs, y)
    assert named in str(info.value) and "FrozenEstimator" in str(info.value)
    assert len(ledger) == 0 and ledger.pending() == []


def test_the_model_selection_pages_text_example_runs():
    page = (Path(__file__).resolve().parents[1] / "doc" / "model_selection.rst").read_text()
    (block,) = [b for b in page.split(".. code-block:: python\n")[1:] if "vocabulary=words" in b]
    lines = []
    for line in block.splitlines():
        if line.strip() and not line.startswith("    "):
            break
        lines.append(line)
    docs, labels = _corpus()
    namespace = {"docs": docs, "labels": labels}
    exec(textwrap.dedent("\n".join(lines)), namespace)
    search, ledger = namespace["search"], namespace["ledger"]
    assert [r.estimator for r in ledger.records()] == ["PrivateHyperparameterSearch"]
    assert ledger.spent(search.delta_spent_)[0] == pytest.approx(search.epsilon_spent_)
    assert search.epsilon_spent_ <= 1.0 + 1e-9


def test_a_candidates_bad_public_vocabulary_fails_on_the_stand_in_before_any_budget():
    docs, y = _corpus(n=40)
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="vocabulary is empty"):
        _search(_pipeline(), {"tfidf__vocabulary": [VOCABULARY, []]}).fit(docs, y)
    assert len(ledger) == 0 and ledger.pending() == []


def test_a_vectorizer_that_releases_nothing_leaves_the_whole_budget_to_the_classifier():
    # Without the idf the vectorizer's fit records no event; its equal share of each
    # fit's budget was lost, and a candidate without idf fitted its classifier with
    # half the budget a candidate with idf spent in all.
    from skdp_sparse.model_selection._public import PrivateSteps, PublicData

    docs, y = _corpus(n=40)
    pipe = _pipeline()
    search = _search(pipe, {"tfidf__use_idf": [False]}).fit(docs, y)
    assert search.best_estimator_["clf"].epsilon == pytest.approx(search.fit_epsilon_)
    assert search.best_estimator_["tfidf"].epsilon_spent_ == 0.0
    candidates = [{"tfidf__use_idf": True}, {"tfidf__use_idf": False}]
    public = PublicData(pipe, PrivateSteps(pipe), candidates, 1e-6, docs, y,
                        np.array([0, 1]), 40, 32)
    with_idf, without = (public.configured(i, 0.5) for i in range(2))
    assert (with_idf["tfidf"].epsilon, with_idf["clf"].epsilon) == (0.25, 0.25)
    assert without["clf"].epsilon == 0.5 and without["clf"].delta == 1e-6
    # What the search composes for it: the classifier's events at the whole budget.
    alone = _pipeline(use_idf=False, random_state=0).set_params(
        clf__epsilon=0.5, clf__delta=1e-6, clf__classes=[0, 1])
    stand_in, _ = public.dummy(32)
    alone.fit(stand_in, np.resize([0, 1], 32))
    assert same_events(public.probe(1, 0.5, 32)[0], alone["clf"].privacy_events_)


class _IdfOnlyOnText(DPTfidfVectorizer):
    """Releases nothing on documents that are all empty (the search's stand-in), the
    idf on any others: a spend that depends on the data."""

    def _with_idf(self, docs):
        return self.use_idf and any(docs)

    def fit(self, raw_documents, y=None, sample_weight=None):
        docs = list(raw_documents)
        use_idf, self.use_idf = self.use_idf, self._with_idf(docs)
        try:
            return super().fit(docs, y, sample_weight)
        finally:
            self.use_idf = use_idf

    def transform(self, raw_documents):
        use_idf, self.use_idf = self.use_idf, hasattr(self, "idf_")
        try:
            return super().transform(raw_documents)
        finally:
            self.use_idf = use_idf


def test_a_step_silent_on_the_stand_in_that_spends_on_the_data_is_reported_as_run():
    # Silent on the stand-in, the vectorizer is given the whole per-fit budget and the
    # classifier the whole of it as well; its real fit then spends, which the search
    # must raise on, with the composition of what ran in its ledger.
    from skdp_sparse.exceptions import SpendDeviationError
    from skdp_sparse.privacy.accounting import compose

    docs, y = _corpus(n=60)
    pipe = Pipeline([("tfidf", _IdfOnlyOnText(vocabulary=VOCABULARY,
                                              max_terms_per_document=5)),
                     ("clf", DPSparseLogisticRegression(classes=[0, 1]))])
    with privacy_ledger() as ledger, pytest.raises(SpendDeviationError) as info:
        _search(pipe, {"clf__alpha": [1e-4, 1e-2]}).fit(docs, y)
    ran = info.value.privacy_events
    names = [event.name for event in ran]
    assert names[0].startswith("public keys") and names[-1] == "validation scores"
    assert any(name.startswith("screened_newton") for name in names)
    (record,) = ledger.records()
    assert (record.epsilon_spent, record.delta_spent) == compose(ran, 1e-6)
    assert ledger.pending() == []
