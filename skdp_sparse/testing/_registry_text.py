"""The audits of the private preprocessing of text: the top-k selector and the tf-idf
vectorizer. :mod:`skdp_sparse.testing.audits` describes the method.

The audits of the partition selection's threshold (a term of one document is kept with
probability at most ``delta``) count how often the term is kept (:func:`rare_term_kept`):
they are in ``tests/test_text_preprocessing.py`` and ``tests/test_weighted_vocabulary.py``,
as they hold a probability, not a ratio.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from functools import partial
from unittest import mock

import numpy as np
import scipy.sparse as sp
from scipy.optimize import brentq

from ..exceptions import PrivacyLeakWarning
from ..feature_extraction import text as _text
from ..feature_extraction.text import DPTfidfVectorizer
from ..feature_selection import DPSelectKBest
from ..privacy.accounting import gaussian_epsilon
from ..privacy.partitions import plan_partition_selection, plan_public_counts
from ._audit import AUDITS, Audit, register
from ._claims import gaussian_claim, gaussian_ratio
from ._halving import halved_noise_epsilon

__all__ = ["TEXT_AUDIT_DOCUMENTS", "association_claim", "partition_counts_claim",
           "rare_term_kept", "tfidf_halved_epsilon"]

#: Documents of each of the two terms in the vectorizer's pair.
TEXT_AUDIT_DOCUMENTS = 30
_GAUSS = (1.5, 0.2)


# -- DPSelectKBest(score_func="frequency") ------------------------------------------
def _frequency_make(epsilon, delta, seed):
    return DPSelectKBest(k=1, epsilon=epsilon, delta=delta, score_func="frequency", sparsity=1,
                         random_state=seed)


def _frequency_datasets():
    X = sp.csr_matrix(np.array([[1.0, 0.0]]))
    return (X, None), (sp.csr_matrix(np.array([[0.0, 1.0]])), None)


def _score_gap(fitted):
    return float(fitted.scores_[1] - fitted.scores_[0])


register(Audit(
    name="select_k_best_frequency",
    make=_frequency_make,
    datasets=_frequency_datasets(),
    statistic=_score_gap,
    epsilon=_GAUSS[0], delta=_GAUSS[1], n_runs=800, slow_runs=3000,
    claim=gaussian_claim(),
    pair="one row, sparsity 1: e_0 replaced by e_1. The counts move by (-1, +1), the "
         "full l2 sensitivity sqrt(2) the noise is calibrated to.",
    statistic_doc="scores_[1] - scores_[0]: the projection of the noisy counts on the "
                  "direction of the change.",
))


# -- DPSelectKBest(score_func="association") ----------------------------------------
def _association_make(epsilon, delta, seed):
    return DPSelectKBest(k=1, epsilon=epsilon, delta=delta, score_func="association",
                         classes=[0, 1], random_state=seed)


def _association_datasets(n=200):
    """Class 1: n/4 rows e_0, n/4 - 1 empty rows and e_0, replaced by -e_0; class 0: n/4
    rows -e_0 and n/4 empty rows."""
    q = n // 4
    X = sp.lil_matrix((n, 1))
    X[:q, 0] = 1.0
    X[n - 1, 0] = 1.0
    X[2 * q: 3 * q, 0] = -1.0
    X = sp.csr_matrix(X)
    X_prime = X.tolil()
    X_prime[n - 1, 0] = -1.0
    y = np.r_[np.ones(2 * q, dtype=int), np.zeros(n - 2 * q - 1, dtype=int), 1]
    y[2 * q - 1] = 0  # n/2 rows of each class
    return (X, y), (sp.csr_matrix(X_prime), y)


def _association_halved():
    # The noise of the association is its sensitivity 2 L max(p, 1 - p), p the noisy
    # rate, times a unit from the budget; halving the units is halving every event.
    audit = AUDITS["select_k_best_association"]
    X, y = audit.datasets[0]
    return halved_noise_epsilon(audit.make(audit.epsilon, audit.delta, 0), X, y)


def association_claim(fitted, delta):
    """The association's Gaussian alone (the class counts have one law on both sides)."""
    events = [e for e in fitted.privacy_events_ if "association" in e.name]
    return gaussian_epsilon(gaussian_ratio(events), delta)


register(Audit(
    name="select_k_best_association",
    make=_association_make,
    datasets=_association_datasets(),
    statistic=lambda fitted: float(fitted.scores_[0]),
    epsilon=_GAUSS[0], delta=_GAUSS[1], n_runs=800, slow_runs=3000,
    claim=association_claim,
    halved=_association_halved,
    pair="200 rows, 100 a class: 50 rows e_0 and 49 empty rows of class 1, 50 rows -e_0 "
         "and 50 empty rows of class 0, and a last row e_0 of class 1 replaced by -e_0. "
         "The class counts are the same on both sides, and the other rows sum to 0, so "
         "the noisy rate p enters the association of feature 0, 100 + (1 - p) x_0, "
         "through the changed row only: it moves by 2 (1 - p) (p about 1/2), the full "
         "sensitivity 2 L max(p, 1 - p), and stays far from 0, so its absolute value "
         "(the score) moves as much.",
    statistic_doc="scores_[0] = |A_0|: the noisy association of feature 0.",
))


# -- DPTfidfVectorizer ---------------------------------------------------------
#: ``max_terms_per_document`` of the weighted audit: a one-term document weighs
#: ``sqrt(4) = 2`` documents.
_WEIGHTED_MAX_TERMS = 4


def _tfidf_make(epsilon, delta, seed):
    return DPTfidfVectorizer(epsilon=epsilon, delta=delta, max_terms_per_document=1,
                             vocabulary_weighting="count", random_state=seed)


def _tfidf_weighted_make(epsilon, delta, seed):
    return DPTfidfVectorizer(epsilon=epsilon, delta=delta,
                             max_terms_per_document=_WEIGHTED_MAX_TERMS,
                             vocabulary_weighting="uniform", random_state=seed)


def _tfidf_datasets(n=TEXT_AUDIT_DOCUMENTS):
    docs = ["alpha"] * n + ["beta"] * n
    return (docs + ["alpha"], None), (docs + ["beta"], None)


def _frequency(fitted, term):
    index = fitted.vocabulary_.get(term)
    return fitted.threshold_ if index is None else float(fitted.document_frequency_[index])


def _tfidf_gap(fitted):
    return _frequency(fitted, "beta") - _frequency(fitted, "alpha")


def partition_counts_claim(fitted, delta):
    """The Gaussian release of the counts alone: on the pair both terms are common to the
    two sides (no term of one document), and the counts move by their full sensitivity."""
    events = [e for e in fitted.privacy_events_ if "counts" in e.name]
    return gaussian_epsilon(gaussian_ratio(events), delta)


def tfidf_halved_epsilon(epsilon=_GAUSS[0], delta=_GAUSS[1], max_terms=1,
                         plan=plan_partition_selection):
    """The epsilon at which the vectorizer's calibration adds half the noise of its fit at
    ``epsilon`` (the threshold's event has no noise scale, so the events cannot be
    halved one by one). ``plan``: ``(epsilon, delta, max_terms) -> plan``, the
    partition selection's or that of a public vocabulary's counts."""
    sigma = plan(epsilon, delta, max_terms).sigma

    def gap(eps):
        return math.log(plan(eps, delta, max_terms).sigma) - math.log(sigma / 2)

    return brentq(gap, epsilon, 50.0 * epsilon, xtol=1e-12)


_GAP_DOC = ("document_frequency_['beta'] - document_frequency_['alpha'] (the threshold "
            "for a term not kept).")


def _register_counts_audit(name, make, halved, pair, statistic_doc=_GAP_DOC):
    """An audit of the released counts of 'alpha' and 'beta' on the pair of
    :func:`_tfidf_datasets`, against the Gaussian release of the counts alone."""
    register(Audit(
        name=name, make=make, datasets=_tfidf_datasets(), statistic=_tfidf_gap,
        epsilon=_GAUSS[0], delta=_GAUSS[1], n_runs=800, slow_runs=3000,
        claim=partition_counts_claim, halved=halved, pair=pair,
        statistic_doc=statistic_doc,
    ))


_register_counts_audit(
    name="tfidf_document_frequency",
    make=_tfidf_make,
    halved=tfidf_halved_epsilon,
    pair=f"{2 * TEXT_AUDIT_DOCUMENTS + 1} documents of one term each (max_terms_per_"
         f"document = 1): {TEXT_AUDIT_DOCUMENTS} 'alpha', {TEXT_AUDIT_DOCUMENTS} 'beta', "
         "and one 'alpha' replaced by 'beta'. The counts of the two terms move by "
         "(-1, +1), the full l2 sensitivity sqrt(2); both are far above the threshold on "
         "both sides.",
)

_register_counts_audit(
    name="tfidf_weighted_document_frequency",
    make=_tfidf_weighted_make,
    halved=partial(tfidf_halved_epsilon, max_terms=_WEIGHTED_MAX_TERMS),
    pair=f"the documents of tfidf_document_frequency with vocabulary_weighting='uniform' "
         f"and max_terms_per_document = {_WEIGHTED_MAX_TERMS}: each one-term document "
         f"gives its term the largest weight, sqrt({_WEIGHTED_MAX_TERMS}) = 2, so the "
         "weighted counts of the two terms move by (-2, +2), the full l2 sensitivity "
         f"sqrt(2 x {_WEIGHTED_MAX_TERMS}); both are far above the threshold on both "
         "sides.",
)


#: The public vocabulary of the audit of its counts.
_PUBLIC_VOCABULARY = ("alpha", "beta")


def _tfidf_public_make(epsilon, delta, seed):
    return DPTfidfVectorizer(epsilon=epsilon, delta=delta, vocabulary=list(_PUBLIC_VOCABULARY),
                             max_terms_per_document=_WEIGHTED_MAX_TERMS,
                             vocabulary_weighting="uniform", random_state=seed)


def _public_counts_plan(epsilon, delta, max_terms):
    return plan_public_counts(epsilon, delta, max_terms, len(_PUBLIC_VOCABULARY),
                              weighting="uniform")


_register_counts_audit(
    name="tfidf_public_vocabulary_document_frequency",
    make=_tfidf_public_make,
    halved=partial(tfidf_halved_epsilon, max_terms=_WEIGHTED_MAX_TERMS,
                   plan=_public_counts_plan),
    pair=f"the documents of tfidf_document_frequency with the public vocabulary "
         f"{list(_PUBLIC_VOCABULARY)} (no threshold: both counts are released, with the "
         f"whole budget), vocabulary_weighting='uniform' and max_terms_per_document = "
         f"{_WEIGHTED_MAX_TERMS}: the weighted counts move by (-2, +2), the full l2 "
         f"sensitivity sqrt(2 x {_WEIGHTED_MAX_TERMS}).",
    statistic_doc="document_frequency_['beta'] - document_frequency_['alpha'].",
)


def rare_term_kept(n_runs, params, threshold=None):
    """How many of ``n_runs`` fits (seeds 0, 1, ...) of ``DPTfidfVectorizer(**params)``
    on 20 documents 'common' and one 'rare' keep 'rare' (on the neighbour without the
    document 'rare' it is never kept). ``threshold``: a function of the plan replacing
    its threshold (a mutation the audit must catch). The float path's
    ``PrivacyLeakWarning`` is checked on every fit and the ``delta >= 1/n`` warning
    silenced: the audit needs a probability it can see."""
    docs = ["common"] * 20 + ["rare"]
    real = _text.plan_partition_selection

    def mutated(*args, **kwargs):
        plan = real(*args, **kwargs)
        return dataclasses.replace(plan, threshold=threshold(plan))

    kept = 0
    with mock.patch.object(_text, "plan_partition_selection",
                           real if threshold is None else mutated):
        for seed in range(n_runs):
            vec = DPTfidfVectorizer(**params, random_state=seed)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                vec.fit(docs)
            leak = any(issubclass(w.category, PrivacyLeakWarning) for w in caught)
            if leak != (params.get("floating_point_safe", True) is False):
                raise AssertionError(f"PrivacyLeakWarning {'raised' if leak else 'missing'}"
                                     f" with {params}")
            kept += "rare" in vec.vocabulary_
    return kept
