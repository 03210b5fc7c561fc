"""The weighted partition selection of DPTfidfVectorizer (vocabulary_weighting="uniform"):
the weights, the threshold and the noise against their formulas, exactness without
noise, and the threshold's audit on the worst document (one term of its own)."""

import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm
from sklearn.feature_extraction.text import TfidfVectorizer

from skdp_sparse.feature_extraction import text as text_module
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer, document_terms
from skdp_sparse.privacy.accounting import compose
from skdp_sparse.privacy.partitions import (
    THRESHOLD_SHARE,
    WEIGHT_BITS,
    plan_partition_selection,
    row_weight,
)
from skdp_sparse.testing._registry_text import rare_term_kept

DOCS = ["The cat sat on the mat.", "A dog sat on the log!", "the cat and the dog",
        "Birds fly; cats don't.", "dog days of summer", "the mat is red",
        "cat"] * 5
UNIT = 2**WEIGHT_BITS


# -- the weights ---------------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 2, 3, 7, 100, 1000])
def test_row_weights_are_sqrt_m_over_k_rounded_down(m):
    """A row of k keys gives each floor(2^20 sqrt(m / k)) units: its squared weights sum
    to at most m (the sensitivity's premise), none below 1, and the rounding loses less
    than one unit."""
    plan = plan_partition_selection(1.0, 1e-6, m, weighting="uniform")
    for k in range(1, m + 1):
        w = row_weight(plan, k)
        assert k * w * w <= m * UNIT * UNIT < k * (w + 1) ** 2
        assert w >= UNIT
    counts = plan_partition_selection(1.0, 1e-6, m)
    assert {row_weight(counts, k) for k in range(1, m + 1)} == {UNIT}
    with pytest.raises(ValueError, match="keys"):
        row_weight(plan, m + 1)


# -- the plan ------------------------------------------------------------------------
@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("epsilon, delta, m", [(1.0, 1e-6, 100), (0.5, 1e-8, 10),
                                               (20.0, 1e-3, 4), (4.0, 0.2, 1)])
def test_weighted_plan_threshold_matches_its_formula(safe, epsilon, delta, m):
    """Same noise and events as the counts (the sensitivity is sqrt(2 m) either way);
    the threshold is max_k (w_k + sigma z_k) with P(Z > sigma z_k) = delta_1 / k, so a
    row of any size k keeps one of its own keys with probability at most delta_1."""
    plan = plan_partition_selection(epsilon, delta, m, floating_point_safe=safe,
                                    weighting="uniform")
    counts = plan_partition_selection(epsilon, delta, m, floating_point_safe=safe)
    assert plan.sigma == counts.sigma and plan.sensitivity == counts.sensitivity
    assert plan.events == counts.events
    assert compose(plan.events, delta)[0] == pytest.approx(epsilon, rel=1e-6)
    delta_1 = THRESHOLD_SHARE * delta
    k = np.arange(1, m + 1)
    w = np.array([row_weight(plan, j) for j in k]) / UNIT
    z = (plan.threshold - w) / plan.sigma
    if safe:
        # The discrete Gaussian's sub-Gaussian tail, with the lattice margin.
        tail = np.exp(-(z - 2.0**-20) ** 2 / 2)
    else:
        tail = norm.sf(z)
    assert np.all(k * tail <= delta_1 * (1 + 1e-9))
    assert np.max(k * tail) == pytest.approx(delta_1, rel=1e-6)
    assert plan.single_row_probability == delta_1 <= delta
    # Never below the counts' threshold; above it where the one-key row's weight
    # sqrt(m) needs it (small noise).
    assert plan.threshold >= counts.threshold
    if m > 1 and plan.sigma < 1:
        assert plan.threshold > counts.threshold + 0.5


def test_weighting_is_checked():
    with pytest.raises(ValueError, match="weighting"):
        plan_partition_selection(1.0, 1e-6, 3, weighting="sqrt")
    with pytest.raises(ValueError, match="vocabulary_weighting"):
        DPTfidfVectorizer(vocabulary_weighting="weighted").fit(DOCS)


def test_weighted_sums_that_would_not_be_exact_raise_before_any_budget():
    plan = plan_partition_selection(1.0, 1e-6, 10**6, weighting="uniform")
    with pytest.raises(ValueError, match="2\\^53"):
        text_module.check_release(plan, 10**7)


# -- the fit -------------------------------------------------------------------------
def _weighted_counts(docs, m):
    analyze = DPTfidfVectorizer().build_analyzer()
    sums = {}
    for doc in docs:
        terms = document_terms(analyze, doc, m)
        for term in terms:
            sums[term] = sums.get(term, 0.0) + math.sqrt(m / len(terms))
    return sums


@pytest.mark.parametrize("m", [1, 3, 50])
def test_without_noise_every_term_is_kept_with_its_weighted_count(m):
    vec = DPTfidfVectorizer(epsilon=np.inf, max_terms_per_document=m).fit(DOCS)
    expected = _weighted_counts(DOCS, m)
    assert list(vec.vocabulary_) == sorted(expected)
    np.testing.assert_allclose(vec.document_frequency_,
                               [expected[t] for t in vec.vocabulary_], rtol=1e-6)
    # Rounded down, exactly: multiples of 2^-20.
    assert np.all(np.ldexp(vec.document_frequency_, WEIGHT_BITS) % 1 == 0)
    if m == 50:
        ref = TfidfVectorizer().fit(DOCS)
        assert vec.vocabulary_ == ref.vocabulary_


def test_weighted_noise_is_the_plans_and_is_drawn():
    """300 fits on 400 documents of two words each (m = 8: weight 2 per document): the
    noisy weighted count has mean 800 and the plan's standard deviation."""
    docs = ["word other"] * 400
    values = [DPTfidfVectorizer(epsilon=1.0, delta=1e-6, max_terms_per_document=8,
                                random_state=s).fit(docs).document_frequency_[1]
              for s in range(300)]
    plan = plan_partition_selection(1.0, 1e-6, 8, weighting="uniform")
    vec = DPTfidfVectorizer(epsilon=1.0, delta=1e-6, max_terms_per_document=8,
                            random_state=0).fit(docs)
    assert vec.noise_scale_ == plan.sigma and vec.threshold_ == plan.threshold
    assert np.mean(values) == pytest.approx(800, abs=4 * plan.sigma / math.sqrt(300))
    assert np.std(values) == pytest.approx(plan.sigma, rel=0.15)


def test_weighting_keeps_the_terms_of_short_documents_the_counts_drop():
    """200 one-term documents weigh sqrt(100) = 10 each: their term passes the threshold
    of some 400 documents that the 200 count documents cannot."""
    docs = ["short"] * 200 + ["aa bb cc dd ee ff gg hh ii jj"] * 3
    kept = {w: sum("short" in DPTfidfVectorizer(
        epsilon=1.0, delta=1e-6, max_terms_per_document=100, vocabulary_weighting=w,
        random_state=s).fit(docs).vocabulary_ for s in range(5)) for w in ("count", "uniform")}
    assert kept == {"count": 0, "uniform": 5}


# -- the threshold's audit: a term of one one-term document --------------------------
_AUDIT = {"epsilon": 12.0, "delta": 0.2, "max_terms_per_document": 4}


def _rare_kept(n_runs, *, safe, threshold=None):
    """How often the term of the document 'rare' (one term: the largest weight, 2) is
    kept among 20 'common' documents (on the neighbour without it, never)."""
    return rare_term_kept(n_runs, {**_AUDIT, "vocabulary_weighting": "uniform",
                                   "floating_point_safe": safe}, threshold=threshold)


@pytest.mark.parametrize("safe", [True, False])
def test_audit_a_one_term_document_keeps_its_term_with_probability_at_most_delta(safe):
    """At epsilon = 12 the one-term document's weight sets the threshold: on the float
    path it keeps its term with probability delta_1 = 0.1 exactly (the discrete
    Gaussian's tail bound is looser). The Clopper-Pearson lower bound (99%) over 600
    fits stays at or below it."""
    n = 600
    plan = plan_partition_selection(_AUDIT["epsilon"], _AUDIT["delta"], 4,
                                    floating_point_safe=safe, weighting="uniform")
    z = (plan.threshold - 2.0) / plan.sigma
    tail = math.exp(-(z - 2.0**-20) ** 2 / 2) if safe else norm.sf(z)
    assert tail == pytest.approx(THRESHOLD_SHARE * _AUDIT["delta"], rel=1e-9)
    kept = _rare_kept(n, safe=safe)
    assert binomtest(kept, n).proportion_ci(0.98).low <= THRESHOLD_SHARE * _AUDIT["delta"]


def test_audit_catches_a_threshold_that_ignores_the_largest_weight():
    """Power: the counts' threshold (1 + sigma z_m, as if every weight were 1) keeps the
    one-term document's term (weight 2) far more often than delta_1 allows."""
    def count_threshold(plan):
        return plan_partition_selection(plan.epsilon, plan.delta, plan.max_contributions,
                                        floating_point_safe=plan.floating_point_safe,
                                        weighting="count").threshold

    n = 600
    kept = _rare_kept(n, safe=False, threshold=count_threshold)
    lower = binomtest(kept, n).proportion_ci(0.98).low
    assert lower > 1.3 * THRESHOLD_SHARE * _AUDIT["delta"]
