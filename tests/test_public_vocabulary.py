"""DPTfidfVectorizer with a public vocabulary: scikit-learn's semantics, the noise of the
document frequencies against its formula, nothing about the documents beyond those
frequencies, the fit that releases nothing, bad vocabularies, clone, search, pickle.

The audit of the release through fit is ``tfidf_public_vocabulary_document_frequency``
(``tests/test_audits.py``)."""

import math
import pickle
import warnings

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from scipy.optimize import brentq
from sklearn.base import clone
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from skdp_sparse import DPSparseLogisticRegression, privacy_ledger
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer, document_terms
from skdp_sparse.privacy.accounting import compose
from skdp_sparse.privacy.partitions import WEIGHT_BITS, plan_public_counts

DOCS = ["The cat sat on the mat.", "A dog sat on the log!", "the cat and the dog",
        "Birds fly; cats don't.", "dog days of summer", "the mat is red"] * 5
WORDS = ["dog", "cat", "mat", "zebra", "the"]


def _cks_epsilon(rho, delta):
    """Canonne, Kamath & Steinke (2020), Prop. 12, minimised on a fine grid of orders."""
    a = 1 + np.geomspace(1e-4, 1e4, 400_001)
    return float(np.min(a * rho + (math.log(1 / delta) + (a - 1) * np.log1p(-1 / a)
                                   - np.log(a)) / (a - 1)))


# -- calibration: the whole budget on one Gaussian release of sensitivity sqrt(2 m) ----
@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("epsilon, delta, m", [(1.0, 1e-6, 10), (0.3, 1e-8, 100),
                                               (4.0, 1e-3, 1)])
def test_public_counts_noise_is_the_gaussian_of_the_whole_budget(safe, epsilon, delta, m):
    plan = plan_public_counts(epsilon, delta, m, 7, floating_point_safe=safe)
    sensitivity = math.sqrt(2 * m)
    assert plan.sensitivity == pytest.approx(sensitivity, rel=1e-15)
    assert plan.threshold == -math.inf and plan.public_keys == 7
    (event,) = plan.events
    assert compose(plan.events, delta)[0] == pytest.approx(epsilon, rel=1e-6)
    if safe:
        # The largest rho at (epsilon, delta), and the lattice's 2^-16 slack.
        rho = brentq(lambda r: _cks_epsilon(r, delta) - epsilon, 1e-9, 1e3, xtol=1e-15)
        expected = (1 + 2.0**-16) * sensitivity / math.sqrt(2 * rho)
        assert plan.sigma == pytest.approx(expected, rel=1e-5)
    else:
        # An independent accountant: the Gaussian of this sigma spends (epsilon, delta).
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dp_event.GaussianDpEvent(plan.sigma / sensitivity))
        assert acc.get_epsilon(delta) == pytest.approx(epsilon, rel=2e-3)


def test_vectorizer_noise_is_the_plans_and_is_drawn():
    # 300 fits on 400 documents of one word, a public vocabulary of two (one unused):
    # each released count has the planned standard deviation around its true count.
    docs = ["word"] * 400
    vocabulary = ["unused", "word"]
    fits = [DPTfidfVectorizer(epsilon=1.0, delta=1e-6, max_terms_per_document=2,
                              vocabulary=vocabulary, vocabulary_weighting="count",
                              random_state=s).fit(docs) for s in range(300)]
    sigma = plan_public_counts(1.0, 1e-6, 2, 2).sigma
    df = np.array([f.document_frequency_ for f in fits])
    assert all(f.noise_scale_ == sigma for f in fits)
    assert all(f.epsilon_spent_ == pytest.approx(1.0, rel=1e-6) for f in fits)
    assert all(f.delta_spent_ <= 1e-6 * (1 + 1e-12) for f in fits)
    assert df.mean(axis=0) == pytest.approx([0, 400], abs=4 * sigma / math.sqrt(300))
    assert df.std(axis=0) == pytest.approx([sigma, sigma], rel=0.15)


# -- nothing about the documents beyond the noisy frequencies -------------------------
def test_neighbouring_corpora_get_the_same_columns_and_noise():
    # One document replaced: a term of its own, outside the vocabulary, and one inside.
    base = ["cat dog", "dog mat", "the cat"] * 30
    neighbours = (base + ["cat secretword"], base + ["zebra othersecret"])
    fits = [DPTfidfVectorizer(vocabulary=WORDS, epsilon=1.0, delta=1e-6,
                              max_terms_per_document=3, vocabulary_weighting="count",
                              random_state=7).fit(docs)
            for docs in neighbours]
    a, b = fits
    assert a.vocabulary_ == b.vocabulary_ == {w: i for i, w in enumerate(WORDS)}
    assert list(a.get_feature_names_out()) == list(b.get_feature_names_out()) == WORDS
    public = ("threshold_", "noise_scale_", "n_documents_", "epsilon_spent_",
              "delta_spent_", "privacy_events_", "fixed_vocabulary_")
    assert all(getattr(a, name) == getattr(b, name) for name in public)
    # The same seed draws the same noise: the released counts differ by the counts'.
    exact = [np.array([sum(w in d.split() for d in docs) for w in WORDS], dtype=float)
             for docs in neighbours]
    np.testing.assert_allclose(a.document_frequency_ - b.document_frequency_,
                               exact[0] - exact[1], atol=1e-9)
    # The idf is a function of the released counts and n alone.
    n = len(neighbours[0])
    for fit in fits:
        expected = np.log((1 + n) / (1 + np.clip(fit.document_frequency_, 0, n))) + 1
        np.testing.assert_array_equal(fit.idf_, expected)


def test_without_idf_the_fit_is_the_same_on_any_corpus_and_spends_nothing():
    with privacy_ledger() as ledger:
        a = DPTfidfVectorizer(vocabulary=WORDS, use_idf=False, random_state=0).fit(DOCS)
        b = DPTfidfVectorizer(vocabulary=WORDS, use_idf=False, random_state=1).fit(
            ["zebra"] * 3)
    state = ("vocabulary_", "fixed_vocabulary_", "threshold_", "noise_scale_",
             "epsilon_spent_", "delta_spent_", "privacy_events_")
    assert [getattr(a, s) for s in state] == [getattr(b, s) for s in state]
    assert (a.epsilon_spent_, a.delta_spent_, a.privacy_events_) == (0.0, 0.0, ())
    assert not hasattr(a, "idf_") and not hasattr(a, "document_frequency_")
    assert [(r.epsilon_spent, r.delta_spent, r.events) for r in ledger.records()] == [
        (0.0, 0.0, ())] * 2
    # Nothing is released, so no delta is needed; epsilon=inf changes nothing either.
    c = DPTfidfVectorizer(vocabulary=WORDS, use_idf=False, delta=0.0,
                          epsilon=np.inf).fit(DOCS)
    assert (c.epsilon_spent_, c.delta_spent_) == (0.0, 0.0)
    X = a.transform(DOCS).toarray()
    expected = TfidfVectorizer(vocabulary=WORDS, use_idf=False).fit_transform(DOCS)
    np.testing.assert_allclose(X, expected.toarray(), rtol=1e-12)


# -- scikit-learn's semantics ----------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: WORDS, lambda: {"zebra": 2, "cat": 0, "the": 1}, lambda: set(WORDS),
    lambda: tuple(WORDS), lambda: np.array(WORDS)])
@pytest.mark.parametrize("params", [{}, {"smooth_idf": False}, {"sublinear_tf": True},
                                    {"binary": True, "ngram_range": (1, 2)}])
def test_without_noise_matches_scikit_learn(make, params):
    ours = DPTfidfVectorizer(vocabulary=make(), epsilon=np.inf, max_terms_per_document=50,
                             vocabulary_weighting="count", **params).fit(DOCS)
    theirs = TfidfVectorizer(vocabulary=make(), **params).fit(DOCS)
    assert ours.fixed_vocabulary_ and theirs.fixed_vocabulary_
    assert ours.vocabulary_ == theirs.vocabulary_
    assert list(ours.get_feature_names_out()) == list(theirs.get_feature_names_out())
    # Without smoothing scikit-learn's idf of a term no document uses is inf; the
    # noisy count is clipped to [1, n] instead.
    finite = np.isfinite(theirs.idf_)
    np.testing.assert_allclose(ours.idf_[finite], theirs.idf_[finite], rtol=1e-12)
    np.testing.assert_allclose(ours.idf_[~finite], math.log(len(DOCS)) + 1, rtol=1e-12)
    np.testing.assert_allclose(ours.transform(DOCS).toarray(),
                               theirs.transform(DOCS).toarray(), rtol=1e-12, atol=1e-15)


def test_max_features_is_ignored_with_a_public_vocabulary_as_in_scikit_learn():
    ours = DPTfidfVectorizer(vocabulary=WORDS, max_features=2, epsilon=np.inf).fit(DOCS)
    theirs = TfidfVectorizer(vocabulary=WORDS, max_features=2).fit(DOCS)
    assert ours.vocabulary_ == theirs.vocabulary_ and len(ours.vocabulary_) == 5
    assert DPTfidfVectorizer(epsilon=np.inf).fit(DOCS).fixed_vocabulary_ is False


@pytest.mark.parametrize("weighting", ["count", "uniform"])
def test_a_document_counts_its_first_terms_of_the_vocabulary(weighting):
    # The bound counts the vocabulary's terms only: the words outside it take no slot,
    # and a document with k of them weighs sqrt(m / k) each ("uniform").
    analyze = DPTfidfVectorizer().build_analyzer()
    doc = "aa bb cc dd cat ee dog ff"
    assert document_terms(analyze, doc, 1, dict.fromkeys(WORDS)) == ["cat"]
    vec = DPTfidfVectorizer(vocabulary=WORDS, epsilon=np.inf, max_terms_per_document=4,
                            vocabulary_weighting=weighting).fit([doc])
    weight = 1.0 if weighting == "count" else math.isqrt(2 << 2 * WEIGHT_BITS) / 2**WEIGHT_BITS
    assert vec.document_frequency_.tolist() == [weight, weight, 0, 0, 0]


# -- bad vocabularies: clear errors before any work -----------------------------------
@pytest.mark.parametrize("vocabulary, error, message", [
    (["cat", "dog", "cat"], ValueError, "duplicate term in the vocabulary: 'cat'"),
    ({"cat": 0, "dog": 2}, ValueError, "does not contain column 1"),
    ({"cat": 0, "dog": 0}, ValueError, "repeated column indices"),
    ({"cat": 0, "dog": 1.0}, ValueError, "columns are integers"),
    ({"cat": 0, "dog": True}, ValueError, "columns are integers"),
    ([], ValueError, "the vocabulary is empty"),
    ("cat dog", ValueError, "single string"),
    (3, ValueError, "mapping term -> column or an iterable of terms, got int"),
    (["cat", 1], TypeError, "terms must be of type str"),
    (iter(["cat"]), ValueError, "an iterator"),
    ((t for t in ["cat"]), ValueError, "an iterator"),
])
def test_bad_vocabularies_raise_before_any_work(vocabulary, error, message):
    with privacy_ledger(max_epsilon=10.0, max_delta=1e-3) as ledger:
        with pytest.raises(error, match=message):
            DPTfidfVectorizer(vocabulary=vocabulary).fit(DOCS)
        assert ledger.records() == [] and ledger.pending() == []
    # The parameters alone are checked: a pipeline refuses them before its first fit.
    with pytest.raises(error, match=message):
        DPTfidfVectorizer(vocabulary=vocabulary)._check_parameters()


def test_the_idf_release_needs_delta():
    with pytest.raises(ValueError, match="document frequencies of the public vocabulary"):
        DPTfidfVectorizer(vocabulary=WORDS, delta=0.0).fit(DOCS)


# -- clone, search, pickle --------------------------------------------------------------
def test_clone_pickle_and_search_over_the_vocabulary():
    vec = DPTfidfVectorizer(vocabulary=WORDS, epsilon=2.0, random_state=0)
    assert clone(vec).get_params()["vocabulary"] == WORDS
    fitted = clone(vec).fit(DOCS)
    again = pickle.loads(pickle.dumps(fitted))
    assert again.vocabulary_ == fitted.vocabulary_
    assert (again.transform(DOCS) != fitted.transform(DOCS)).nnz == 0
    docs = ["cat dog", "dog mat", "cat sat", "the mat"] * 20
    y = np.array([0, 1, 0, 1] * 20)
    model = Pipeline([("tfidf", DPTfidfVectorizer(epsilon=np.inf, use_idf=False)),
                      ("clf", DPSparseLogisticRegression(epsilon=np.inf, classes=[0, 1]))])
    grid = {"tfidf__vocabulary": [["cat", "dog"], {"mat": 0, "cat": 1, "dog": 2}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = GridSearchCV(model, grid, cv=2).fit(docs, y)
    best = search.best_params_["tfidf__vocabulary"]
    expected = best if isinstance(best, dict) else {t: i for i, t in enumerate(best)}
    assert search.best_estimator_["tfidf"].vocabulary_ == expected
    assert [p["tfidf__vocabulary"] for p in search.cv_results_["params"]] == grid[
        "tfidf__vocabulary"]
