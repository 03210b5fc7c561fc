"""DPTfidfVectorizer and the partition selection behind it: calibration, the threshold's
audit, exactness without noise, bad input, the ledger."""

import math
import pickle
import warnings

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from scipy.stats import binomtest, norm
from sklearn.base import clone
from sklearn.feature_extraction.text import TfidfVectorizer

from skdp_sparse import PrivacyLeakWarning, privacy_ledger
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer, document_terms
from skdp_sparse.privacy.accounting import compose, zcdp_epsilon
from skdp_sparse.privacy.partitions import (
    THRESHOLD_SHARE,
    plan_partition_selection,
    select_partitions,
)
from skdp_sparse.testing._registry_text import rare_term_kept

DOCS = ["The cat sat on the mat.", "A dog sat on the log!", "the cat and the dog",
        "Birds fly; cats don't.", "dog days of summer", "the mat is red"] * 5


# -- calibration -------------------------------------------------------------------
@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("epsilon, delta, m", [(1.0, 1e-6, 10), (0.3, 1e-8, 100),
                                               (4.0, 1e-3, 1)])
def test_partition_plan_spends_its_budget(safe, epsilon, delta, m):
    plan = plan_partition_selection(epsilon, delta, m, floating_point_safe=safe)
    assert plan.sensitivity == pytest.approx(math.sqrt(2 * m), rel=1e-15)
    spent = compose(plan.events, delta)
    assert spent[0] <= epsilon * (1 + 1e-9)
    assert spent[0] == pytest.approx(epsilon, rel=1e-6)
    assert spent[1] <= delta * (1 + 1e-12)
    delta_1 = THRESHOLD_SHARE * delta
    counts, single = plan.events
    assert (single.epsilon, single.delta) == pytest.approx((-math.log1p(-delta_1), delta_1))
    if safe:
        # The discrete Gaussian's zCDP converts to the rest of the budget.
        assert zcdp_epsilon(counts.rho, delta - delta_1) == pytest.approx(
            epsilon - single.epsilon, rel=1e-6)
    else:
        # An independent accountant agrees on the Gaussian part.
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dp_event.GaussianDpEvent(plan.sigma / plan.sensitivity))
        assert acc.get_epsilon(delta - delta_1) == pytest.approx(epsilon - single.epsilon,
                                                                 rel=2e-3)


@pytest.mark.parametrize("safe", [True, False])
def test_partition_threshold_keeps_a_single_row_key_with_probability_below_its_share(safe):
    delta, m = 1e-6, 20
    plan = plan_partition_selection(1.0, delta, m, floating_point_safe=safe)
    z = (plan.threshold - 1.0) / plan.sigma
    per_key = THRESHOLD_SHARE * delta / m
    assert plan.single_row_probability == pytest.approx(per_key)
    if safe:
        # The sub-Gaussian tail bound of the discrete Gaussian, with its margin.
        assert math.exp(-z * z / 2) <= per_key
        assert math.exp(-(z - 1e-5) ** 2 / 2) > per_key
    else:
        assert norm.sf(z) == pytest.approx(per_key, rel=1e-9)
    assert plan.single_row_probability * m <= delta


def test_partition_selection_without_noise_keeps_every_key():
    plan = plan_partition_selection(np.inf, 1e-6, 3)
    kept, noisy = select_partitions(np.array([1.0, 5.0, 2.0]), plan, None, n_rows=3)
    assert kept.tolist() == [0, 1, 2] and noisy.tolist() == [1.0, 5.0, 2.0]


def _power_of_two_dividing(value):
    """The largest k with value a multiple of 2^k (value a multiple of 2^-60)."""
    units = int(math.ldexp(float(value), 60))
    return (units & -units).bit_length() - 1 - 60


def test_safe_counts_lattice_is_chosen_from_public_values_only():
    # How many distinct terms occur is private: two corpora that differ in one document
    # (a unique term in place of a common one) get the same lattice of released counts.
    base = ["common"] * 6000 + [f"w{i}" for i in range(2046)]
    neighbours = (base + ["common"], base + ["secret"])
    grids = []
    for docs in neighbours:
        released = [DPTfidfVectorizer(epsilon=0.01, delta=1e-8, max_terms_per_document=1,
                                      random_state=seed).fit(docs).document_frequency_[0]
                    for seed in range(12)]
        grids.append(min(_power_of_two_dividing(v) for v in released))
    assert grids[0] == grids[1]
    # The lattice's limit is checked from public values, before any budget.
    with privacy_ledger() as ledger:
        with pytest.raises(ValueError, match="floating-point-safe Gaussian"):
            DPTfidfVectorizer(epsilon=1e-10, delta=1e-12).fit(["a b"] * 5000)
    assert len(ledger) == 0


def test_vectorizer_noise_is_the_plans():
    vec = DPTfidfVectorizer(epsilon=0.5, delta=1e-5, max_terms_per_document=7,
                            random_state=0).fit(DOCS)
    plan = plan_partition_selection(0.5, 1e-5, 7)
    assert vec.noise_scale_ == plan.sigma and vec.threshold_ == plan.threshold
    assert vec.epsilon_spent_ == pytest.approx(0.5, rel=1e-6)
    assert vec.delta_spent_ <= 1e-5 * (1 + 1e-12)


def test_vectorizer_noise_on_common_counts_matches_its_standard_deviation():
    # 200 fits on documents sharing one word: the noisy count of that word has the
    # planned standard deviation (the noise is drawn, not only planned).
    docs = ["word"] * 400
    values = [DPTfidfVectorizer(epsilon=1.0, delta=1e-6, max_terms_per_document=2,
                                vocabulary_weighting="count",
                                random_state=s).fit(docs).document_frequency_[0]
              for s in range(300)]
    sigma = plan_partition_selection(1.0, 1e-6, 2).sigma
    assert np.mean(values) == pytest.approx(400, abs=4 * sigma / math.sqrt(300))
    assert np.std(values) == pytest.approx(sigma, rel=0.15)


# -- the threshold's audit through fit ----------------------------------------------
def _rare_kept(n_runs, *, safe, mutate=None):
    return rare_term_kept(n_runs, {"epsilon": 1.5, "delta": 0.2, "max_terms_per_document": 1,
                                   "floating_point_safe": safe}, threshold=mutate)


@pytest.mark.parametrize("safe", [True, False])
def test_audit_a_term_of_one_document_is_kept_with_probability_at_most_delta(safe):
    """The term used by one document of D (absent from D', where it cannot be kept) is
    kept with probability at most delta: its Clopper-Pearson lower bound (99%) over
    600 fits stays at or below the per-key share of delta (0.1 here)."""
    n = 600
    kept = _rare_kept(n, safe=safe)
    lower = binomtest(kept, n).proportion_ci(0.98).low
    assert lower <= THRESHOLD_SHARE * 0.2


def test_audit_catches_a_threshold_for_keys_of_count_zero():
    """Power: the threshold of a key of count 0 (tau - 1, the classic slip) keeps the
    term of one document far more often than delta allows, and the audit sees it."""
    n = 600
    kept = _rare_kept(n, safe=False, mutate=lambda plan: plan.threshold - 1.0)
    lower = binomtest(kept, n).proportion_ci(0.98).low
    assert lower > 1.3 * THRESHOLD_SHARE * 0.2


# -- exactness and behaviour -----------------------------------------------------
@pytest.mark.parametrize("params", [
    {},
    {"ngram_range": (1, 2), "stop_words": "english"},
    {"lowercase": False, "sublinear_tf": True, "smooth_idf": False},
    {"tokenizer": str.split, "token_pattern": None, "binary": True},
    {"analyzer": "char_wb", "ngram_range": (2, 3), "use_idf": False},
])
def test_without_noise_matches_scikit_learn(params):
    # Counts, not weighted counts: the idf is scikit-learn's (the weighted vocabulary
    # without noise is in test_weighted_vocabulary.py).
    ours = DPTfidfVectorizer(epsilon=np.inf, max_terms_per_document=1000,
                             vocabulary_weighting="count", **params)
    X = ours.fit_transform(DOCS)
    ref = TfidfVectorizer(**params)
    X_ref = ref.fit_transform(DOCS)
    assert ours.vocabulary_ == ref.vocabulary_
    assert ours.get_feature_names_out().tolist() == ref.get_feature_names_out().tolist()
    if ours.use_idf:
        np.testing.assert_allclose(ours.idf_, ref.idf_, rtol=1e-12)
    np.testing.assert_allclose(X.toarray(), X_ref.toarray(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ours.transform(["a cat and a mat"]).toarray(),
                               ref.transform(["a cat and a mat"]).toarray(), rtol=1e-12)


def test_document_terms_are_its_first_distinct_terms():
    analyze = DPTfidfVectorizer().build_analyzer()
    assert document_terms(analyze, "bb aa bb cc aa dd", 3) == ["bb", "aa", "cc"]
    assert document_terms(analyze, "xx yy", 5) == ["xx", "yy"]


@pytest.mark.parametrize("weighting, single", [("count", 1.0),
                                               ("uniform", 1482910 / 2**20)])
def test_counts_of_a_document_are_capped(weighting, single):
    # One long document cannot add more than max_terms_per_document terms; weighted, a
    # document with one term of at most 2 adds floor(2^20 sqrt(2)) / 2^20 to it.
    vec = DPTfidfVectorizer(epsilon=np.inf, max_terms_per_document=2,
                            vocabulary_weighting=weighting)
    vec.fit(["aa bb cc dd ee"] * 3 + ["ff"])
    assert sorted(vec.vocabulary_) == ["aa", "bb", "ff"]
    assert vec.document_frequency_.tolist() == [3.0, 3.0, single]


def test_private_fit_keeps_common_terms_and_drops_rare_ones():
    docs = ["good film", "bad film", "good plot"] * 300 + ["zyzzyva unique"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a vocabulary with terms: no warning
        vec = DPTfidfVectorizer(epsilon=1.0, delta=1e-6, max_terms_per_document=3,
                                random_state=0).fit(docs)
    assert set(vec.vocabulary_) == {"good", "bad", "film", "plot"}
    X = vec.transform(docs)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms[:-1], 1.0)
    assert norms[-1] == 0.0


def test_max_features_keeps_the_highest_noisy_counts():
    docs = ["aa bb"] * 500 + ["aa cc"] * 300 + ["aa"] * 100
    vec = DPTfidfVectorizer(epsilon=2.0, delta=1e-6, max_terms_per_document=2,
                            max_features=2, random_state=0).fit(docs)
    assert sorted(vec.vocabulary_) == ["aa", "bb"]


def test_empty_vocabulary_warns_and_gives_zero_columns():
    vec = DPTfidfVectorizer(epsilon=1.0, delta=1e-6, random_state=0)
    with pytest.warns(UserWarning, match="kept no term.*threshold of [0-9]+ .n = 1 doc"):
        vec.fit(["one doc"])
    assert vec.vocabulary_ == {}
    assert vec.transform(["one doc", "two"]).shape == (2, 0)


def test_a_model_after_an_empty_vocabulary_says_so_and_spends_nothing():
    # It failed with scikit-learn's "Found array with 0 feature(s)", naming no cause.
    from sklearn.pipeline import Pipeline

    from skdp_sparse import DPSparseLogisticRegression

    model = Pipeline([("tfidf", DPTfidfVectorizer(epsilon=1.0, delta=1e-6, random_state=0)),
                      ("clf", DPSparseLogisticRegression(classes=[0, 1]))])
    with privacy_ledger() as ledger, pytest.warns(UserWarning, match="kept no term"):
        with pytest.raises(ValueError, match=r"0 feature\(s\) \(shape=\(2, 0\)\).*"
                           "private vocabulary comes out empty"):
            model.fit(["one doc", "two"], [0, 1])
    (record,) = ledger.records()
    assert record.epsilon_spent == model.named_steps["tfidf"].epsilon_spent_


def test_fit_is_recorded_in_the_ledger_and_survives_clone_and_pickle():
    with privacy_ledger() as ledger:
        vec = clone(DPTfidfVectorizer(epsilon=0.7, delta=1e-6, random_state=0)).fit(DOCS)
    (record,) = ledger.records()
    assert record.epsilon_spent == vec.epsilon_spent_
    again = pickle.loads(pickle.dumps(vec))
    assert (again.transform(DOCS) != vec.transform(DOCS)).nnz == 0


def test_float_noise_warns():
    with pytest.warns(PrivacyLeakWarning):
        DPTfidfVectorizer(floating_point_safe=False, random_state=0).fit(DOCS)


# -- bad input: clear errors before any budget is reserved ---------------------------
@pytest.mark.parametrize("docs, message", [
    ("just one string", "single string"),
    (["fine", float("nan")], "must be a string"),
    (["fine", None], "must be a string"),
    ([1, 2, 3], "must be a string"),
    (["fine", {"name": "Jane Roe"}], "must be a string"),
    (["fine", "caf\xe9".encode("latin-1")], "not valid utf-8"),
    ([], "no documents"),
    (42, "iterable of documents"),
])
def test_bad_documents_raise_before_any_budget(docs, message):
    with privacy_ledger(max_epsilon=10.0, max_delta=1e-3) as ledger:
        with pytest.raises(ValueError, match=message) as info:
            DPTfidfVectorizer(random_state=0).fit(docs)
        assert ledger.records() == [] and ledger.pending() == []
    # The documents are the private data: the error neither quotes nor points at one.
    for text in (str(info.value), repr(info.value.__cause__), repr(info.value.__context__)):
        assert "Jane" not in text and "caf" not in text and "xe9" not in text
        assert "document 1" not in text and "position" not in text


def test_bytes_documents_are_decoded_with_the_given_encoding():
    docs = [d.encode("latin-1") for d in DOCS]
    vec = DPTfidfVectorizer(epsilon=np.inf, encoding="latin-1").fit(docs)
    again = DPTfidfVectorizer(epsilon=np.inf).fit(DOCS)
    assert vec.vocabulary_ == again.vocabulary_
    assert (vec.transform(docs) != again.transform(DOCS)).nnz == 0


@pytest.mark.parametrize("params, message", [
    ({"delta": 0.0}, "0 < delta < 1"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": float("nan")}, "epsilon"),
    ({"max_terms_per_document": 0}, "max_terms_per_document"),
    ({"max_terms_per_document": 2.5}, "max_terms_per_document"),
    ({"ngram_range": (2, 1)}, "ngram_range"),
    ({"ngram_range": (1, 2, 3)}, "ngram_range"),
    ({"analyzer": "words"}, "analyzer"),
    ({"dtype": np.int32}, "floating-point"),
    ({"dtype": "banana"}, "floating-point"),
    # re.error (not a ValueError) from inside the analysis, naming no parameter.
    ({"token_pattern": "("}, "token_pattern is not a valid regular expression"),
    ({"token_pattern": "[a-"}, "token_pattern is not a valid regular expression"),
])
def test_bad_parameters_raise_before_any_budget(params, message):
    with privacy_ledger(max_epsilon=10.0, max_delta=1e-3) as ledger:
        with pytest.raises(ValueError, match=message):
            DPTfidfVectorizer(**params).fit(DOCS)
        assert ledger.records() == [] and ledger.pending() == []


def test_transform_checks_documents_too():
    vec = DPTfidfVectorizer(epsilon=np.inf).fit(DOCS)
    with pytest.raises(ValueError, match="must be a string"):
        vec.transform(["ok", 3.0])
