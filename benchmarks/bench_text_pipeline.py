"""Text classification from raw documents: a private vocabulary and a private classifier.

The IMDB reviews (25,000 training and 25,000 test documents, the aclImdb splits) and
the SMS Spam Collection (stratified 70/30 split), read as raw text. The private
pipeline is ``DPTfidfVectorizer`` (partition selection of the vocabulary, noisy idf,
unit rows; English stop words, sublinear tf; 50 terms a review, 10 a text message)
followed by ``DPSparseLogisticRegression`` (``norm_bound=1``, its defaults otherwise),
with one budget ``epsilon = 1`` total, ``delta = 1/n^2``, split by ``split_budget``
(``--vocabulary-share``, default one half, to the vectorizer). A fit whose vocabulary
is empty (no term passed the threshold) scores every document the same: AUC 0.5. Optionally
(``--select k``) a ``DPSelectKBest(score_func="association")`` step between them
takes a share of the budget too. Next to it: scikit-learn's non-private
``TfidfVectorizer`` + ``LogisticRegression`` with the same tokenisation, and the route
that needs no vocabulary: a public ``HashingVectorizer`` (a function of each document
alone, unit rows, 2^18 columns: no privacy cost) of word unigrams or of character
2- to 4-grams within words, followed by ``DPSparseLogisticRegression`` with the whole
budget. Test ROC AUC and accuracy, mean and standard deviation over the seeds, the
vocabulary size and the fit time (featurising included). ``--compare-weighting`` runs
only the private pipeline, with each ``vocabulary_weighting`` of the vectorizer on the
same seeds (``"uniform"``, the default, or ``"count"``).

The rows "public vocabulary" give ``DPTfidfVectorizer`` a vocabulary taken from the
*other* corpus: the ``--public-vocabulary-size`` (default 10,000) terms of highest
document frequency, with the same tokenisation, among all the documents of IMDB for
SMS spam, and of SMS spam for IMDB. Assumption: that other corpus is public, so its
document frequencies, counted without privacy, are public too, and the vocabulary
depends on nothing of the documents the pipeline is fitted on. The vectorizer then
releases the noisy document frequencies of those terms (``use_idf=True``, with the
vectorizer's share of the budget) or nothing (``use_idf=False``, the classifier gets
the whole budget); next to them, the non-private pipeline on the same vocabulary.
``--search`` adds the rows of :class:`~skdp_sparse.model_selection.PrivateHyperparameterSearch`
over that pipeline at the same total epsilon: grids over the vectorizer's ``use_idf``
and ``sublinear_tf`` (and the classifier's ``alpha``), scored by validation accuracy.

    python benchmarks/bench_text_pipeline.py [--quick] [--datasets imdb sms] [--seeds 5]
        [--epsilon 1] [--max-terms M] [--vocabulary-share 0.5] [--select K]
        [--vocabulary-weighting {uniform,count}] [--compare-weighting]
        [--public-vocabulary-size 10000] [--search]

Nothing is downloaded: the raw text is read from ``../shared/data``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _common import markdown_table
from _text import load_raw_text
from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score
from sklearn.pipeline import Pipeline

from skdp_sparse import DPSparseLogisticRegression, privacy_ledger
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
from skdp_sparse.feature_selection import DPSelectKBest
from skdp_sparse.model_selection import PrivateHyperparameterSearch
from skdp_sparse.pipeline import split_budget

DATASETS = ("imdb", "sms")
WEIGHTINGS = ("count", "uniform")
#: ``max_terms_per_document`` of each data set: reviews are long, text messages short.
MAX_TERMS = {"imdb": 50, "sms": 10}
#: The tokenisation shared by the private and the non-private pipelines.
TOKENS = {"stop_words": "english", "sublinear_tf": True}
#: The public hashing featurisers: word unigrams, and character 2- to 4-grams within
#: words (many per document, each shared by many documents).
HASHING = {"words": {}, "characters": {"analyzer": "char_wb", "ngram_range": (2, 4)}}
#: Where each data set's public vocabulary comes from: the other corpus.
PUBLIC_SOURCE = {"imdb": "sms", "sms": "imdb"}
#: The grids of ``--search`` over the public-vocabulary pipeline.
SEARCH_GRIDS = {
    "use_idf x sublinear_tf": {"tfidf__use_idf": [True, False],
                               "tfidf__sublinear_tf": [True, False]},
    "use_idf x sublinear_tf x alpha": {"tfidf__use_idf": [True, False],
                                       "tfidf__sublinear_tf": [True, False],
                                       "clf__alpha": [None, 1e-3]},
}


def private_pipeline(n, epsilon, max_terms, vocabulary_share, select, seed,
                     weighting="uniform"):
    steps = [("tfidf", DPTfidfVectorizer(max_terms_per_document=max_terms,
                                         vocabulary_weighting=weighting,
                                         random_state=seed, **TOKENS))]
    weights = {"tfidf": vocabulary_share}
    if select:
        steps.append(("select", DPSelectKBest(k=select, score_func="association",
                                              classes=[0, 1], random_state=seed)))
        weights["select"] = (1 - vocabulary_share) / 3
    steps.append(("clf", DPSparseLogisticRegression(classes=[0, 1], random_state=seed)))
    weights["clf"] = 1 - sum(weights.values())
    return split_budget(Pipeline(steps), epsilon, 1.0 / n**2, weights=weights)


def public_vocabulary(source, size):
    """The ``size`` terms of highest document frequency (ties in term order) among all
    the documents, training and test, of the corpus ``source``, counted without
    privacy: a public vocabulary for the other corpus (``source`` is public in this
    scenario). Sorted, as scikit-learn's vocabularies."""
    docs_train, _, docs_test, _ = load_raw_text(source)
    counter = CountVectorizer(binary=True, stop_words=TOKENS["stop_words"])
    df = np.asarray(counter.fit_transform(docs_train + docs_test).sum(axis=0)).ravel()
    top = np.argsort(-df, kind="stable")[:size]
    return sorted(counter.get_feature_names_out()[top].tolist())


def public_vocabulary_pipeline(n, epsilon, vocabulary, max_terms, use_idf,
                               vocabulary_share, seed):
    """The vectorizer on a public vocabulary: with the idf, the budget split as the
    private pipeline's; without it the vectorizer releases nothing and the classifier
    takes the whole budget."""
    tfidf = DPTfidfVectorizer(vocabulary=vocabulary, max_terms_per_document=max_terms,
                              use_idf=use_idf, random_state=seed, **TOKENS)
    clf = DPSparseLogisticRegression(classes=[0, 1], random_state=seed)
    model = Pipeline([("tfidf", tfidf), ("clf", clf)])
    if use_idf:
        return split_budget(model, epsilon, 1.0 / n**2,
                            weights={"tfidf": vocabulary_share, "clf": 1 - vocabulary_share})
    return model.set_params(clf__epsilon=epsilon, clf__delta=1.0 / n**2)


def run_private(data, max_terms, args, seed):
    docs = data[0]
    model = private_pipeline(len(docs), args.epsilon, max_terms, args.vocabulary_share,
                             args.select, seed, args.vocabulary_weighting)
    return fit_and_score(model, data)


def fit_and_score(model, data):
    """``(AUC, vocabulary size, fit seconds, ledger spend, classifier solver,
    accuracy)`` of a private pipeline."""
    docs, y, docs_test, y_test = data
    t0 = time.perf_counter()
    with warnings.catch_warnings(), privacy_ledger() as ledger:
        warnings.simplefilter("ignore")
        try:
            model.fit(docs, y)
        except ValueError:
            # No term passed the threshold (public: the vocabulary is released): the
            # classifier cannot be fitted, and the pipeline's scores are constant.
            if model["tfidf"].vocabulary_:
                raise
            majority = max(np.mean(y_test), 1 - np.mean(y_test))
            return (0.5, 0, time.perf_counter() - t0, ledger.spent(1.0 / len(docs) ** 2),
                    "-", majority)
    elapsed = time.perf_counter() - t0
    auc = roc_auc_score(y_test, model.decision_function(docs_test))
    accuracy = accuracy_score(y_test, model.predict(docs_test))
    spent = ledger.spent(1.0 / len(docs) ** 2)
    return (auc, len(model["tfidf"].vocabulary_), elapsed, spent, model["clf"].solver_,
            accuracy)


def compare_weightings(data, max_terms, args):
    """The private pipeline with each ``vocabulary_weighting``, seed by seed: test ROC
    AUC, accuracy and vocabulary size, mean +- standard deviation over the seeds."""
    rows = []
    runs = {w: [] for w in WEIGHTINGS}
    for seed in range(args.seeds):
        for weighting in WEIGHTINGS:
            args.vocabulary_weighting = weighting
            runs[weighting].append(run_private(data, max_terms, args, seed))
    for weighting, result in runs.items():
        auc, vocab, accuracy = (np.array([r[i] for r in result]) for i in (0, 1, 5))
        rows.append({"vocabulary_weighting": weighting, "epsilon": f"{args.epsilon:g}",
                     "AUC": f"{auc.mean():.3f} +- {auc.std():.3f}",
                     "accuracy": f"{accuracy.mean():.3f} +- {accuracy.std():.3f}",
                     "vocabulary": f"{vocab.mean():.1f} +- {vocab.std():.1f}"})
    print(markdown_table(rows, ["vocabulary_weighting", "epsilon", "AUC", "accuracy",
                                "vocabulary"]))


def run_hashing(data, featuriser, epsilon, seeds):
    """AUCs and accuracies over the seeds and the median fit time of a public hashing
    featuriser followed by the private classifier with the whole budget."""
    docs, y, docs_test, y_test = data
    aucs, accuracies, times = [], [], []
    for seed in range(seeds):
        model = Pipeline([
            ("hash", HashingVectorizer(n_features=2**18, alternate_sign=False, norm="l2",
                                       **HASHING[featuriser])),
            ("clf", DPSparseLogisticRegression(epsilon=epsilon, delta=1.0 / len(docs) ** 2,
                                               norm_bound=1.0, classes=[0, 1],
                                               random_state=seed))])
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(docs, y)
        times.append(time.perf_counter() - t0)
        aucs.append(roc_auc_score(y_test, model.decision_function(docs_test)))
        accuracies.append(accuracy_score(y_test, model.predict(docs_test)))
    return np.array(aucs), np.array(accuracies), float(np.median(times))


def run_public(data, vocabulary=None):
    """The non-private pipeline (on ``vocabulary`` if given): AUC, accuracy, vocabulary
    size, fit seconds."""
    docs, y, docs_test, y_test = data
    model = Pipeline([("tfidf", TfidfVectorizer(vocabulary=vocabulary, **TOKENS)),
                      ("clf", LogisticRegression(max_iter=2000))])
    t0 = time.perf_counter()
    model.fit(docs, y)
    elapsed = time.perf_counter() - t0
    auc = roc_auc_score(y_test, model.decision_function(docs_test))
    accuracy = accuracy_score(y_test, model.predict(docs_test))
    return auc, accuracy, len(model["tfidf"].vocabulary_), elapsed


def _mean_sd(values):
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.3f} +- {values.std():.3f}"


def public_vocabulary_rows(name, data, max_terms, args):
    """The rows of the public vocabulary taken from the other corpus."""
    source = PUBLIC_SOURCE[name]
    vocabulary = public_vocabulary(source, args.public_vocabulary_size)
    label = f"public vocabulary: top {len(vocabulary)} of {source}"
    auc0, accuracy0, _, time0 = run_public(data, vocabulary)
    rows = [{"pipeline": f"TfidfVectorizer ({label}) + LogisticRegression (non-private)",
             "epsilon": "inf", "AUC": f"{auc0:.3f}", "accuracy": f"{accuracy0:.3f}",
             "vocabulary": str(len(vocabulary)), "fit (s)": f"{time0:.1f}"}]
    n = len(data[0])
    for use_idf in (True, False):
        runs = []
        for seed in range(args.seeds):
            model = public_vocabulary_pipeline(n, args.epsilon, vocabulary, max_terms,
                                               use_idf, args.vocabulary_share, seed)
            runs.append(fit_and_score(model, data))
            auc, _, elapsed, spent, solver, accuracy = runs[-1]
            print(f"  {label}, use_idf={use_idf}, seed {seed}: AUC {auc:.3f}, accuracy "
                  f"{accuracy:.3f}, {elapsed:.1f}s, ledger (epsilon, delta) = "
                  f"({spent[0]:.4f}, {spent[1]:.2e}), classifier solver {solver}",
                  flush=True)
        idf = (f"use_idf=True, {args.vocabulary_share:g} of the budget" if use_idf
               else "use_idf=False, spends nothing")
        rows.append({"pipeline": f"DPTfidfVectorizer ({label}; {idf}) + "
                     "DPSparseLogisticRegression", "epsilon": f"{args.epsilon:g}",
                     "AUC": _mean_sd([r[0] for r in runs]),
                     "accuracy": _mean_sd([r[5] for r in runs]),
                     "vocabulary": str(len(vocabulary)),
                     "fit (s)": f"{np.median([r[2] for r in runs]):.1f}"})
    if args.search:
        rows += [search_row(label, data, vocabulary, max_terms, grid, args)
                 for grid in SEARCH_GRIDS]
    return rows


def search_row(label, data, vocabulary, max_terms, grid, args):
    """The private search over the public-vocabulary pipeline with the grid ``grid``
    (a key of :data:`SEARCH_GRIDS`), at the total epsilon of the other rows; its
    validation score is the default, accuracy."""
    docs, y, docs_test, y_test = data
    pipe = Pipeline([
        ("tfidf", DPTfidfVectorizer(vocabulary=vocabulary, max_terms_per_document=max_terms,
                                    **TOKENS)),
        ("clf", DPSparseLogisticRegression(classes=[0, 1]))])
    aucs, accuracies, times = [], [], []
    for seed in range(args.seeds):
        search = PrivateHyperparameterSearch(pipe, SEARCH_GRIDS[grid], epsilon=args.epsilon,
                                             delta=1.0 / len(docs) ** 2, classes=[0, 1],
                                             random_state=seed)
        t0 = time.perf_counter()
        with warnings.catch_warnings(), privacy_ledger() as ledger:
            warnings.simplefilter("ignore")
            search.fit(docs, y)
        times.append(time.perf_counter() - t0)
        aucs.append(roc_auc_score(y_test, search.decision_function(docs_test)))
        accuracies.append(accuracy_score(y_test, search.predict(docs_test)))
        spent = ledger.spent(search.delta_spent_)
        print(f"  search ({grid}), seed {seed}: AUC {aucs[-1]:.3f}, accuracy "
              f"{accuracies[-1]:.3f}, {times[-1]:.1f}s, best {search.best_params_}, "
              f"per-fit epsilon {search.fit_epsilon_:.3f}, ledger (epsilon, delta) = "
              f"({spent[0]:.4f}, {spent[1]:.2e})", flush=True)
    return {"pipeline": f"PrivateHyperparameterSearch over DPTfidfVectorizer ({label}) + "
            f"DPSparseLogisticRegression, grid {grid}", "epsilon": f"{args.epsilon:g}",
            "AUC": _mean_sd(aucs), "accuracy": _mean_sd(accuracies),
            "vocabulary": str(len(vocabulary)), "fit (s)": f"{np.median(times):.1f}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="IMDB, two seeds")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--max-terms", type=int, default=None,
                        help="max_terms_per_document (default: 50 for imdb, 10 for sms)")
    parser.add_argument("--vocabulary-share", type=float, default=0.5)
    parser.add_argument("--vocabulary-weighting", default="uniform", choices=WEIGHTINGS)
    parser.add_argument("--compare-weighting", action="store_true",
                        help="only the private pipeline, with each vocabulary_weighting")
    parser.add_argument("--select", type=int, default=0)
    parser.add_argument("--public-vocabulary-size", type=int, default=10_000,
                        help="terms of the public vocabulary taken from the other corpus")
    parser.add_argument("--search", action="store_true",
                        help="also the private search over the public-vocabulary pipeline")
    args = parser.parse_args()
    if args.quick:
        args.datasets, args.seeds = ["imdb"], 2
    for name in args.datasets:
        data = load_raw_text(name)
        n = len(data[0])
        max_terms = MAX_TERMS[name] if args.max_terms is None else args.max_terms
        print(f"\n### {name}: {n} training documents, {np.mean(data[1]):.1%} positive, "
              f"epsilon = {args.epsilon:g} total, delta = 1/n^2, max_terms_per_document = "
              f"{max_terms}, vocabulary share {args.vocabulary_share:g}"
              + (f", DPSelectKBest k = {args.select}" if args.select else "") + "\n")
        if args.compare_weighting:
            compare_weightings(data, max_terms, args)
            continue
        auc0, accuracy0, vocab0, time0 = run_public(data)
        runs = []
        for seed in range(args.seeds):
            runs.append(run_private(data, max_terms, args, seed))
            auc, vocab, elapsed, spent, solver, _ = runs[-1]
            print(f"  seed {seed}: AUC {auc:.3f}, vocabulary {vocab}, {elapsed:.1f}s, "
                  f"ledger (epsilon, delta) = ({spent[0]:.4f}, {spent[1]:.2e}), "
                  f"classifier solver {solver}", flush=True)
        aucs = np.array([r[0] for r in runs])
        vocabs = np.array([r[1] for r in runs])
        rows = [
            {"pipeline": "TfidfVectorizer + LogisticRegression (non-private)",
             "epsilon": "inf", "AUC": f"{auc0:.3f}", "accuracy": f"{accuracy0:.3f}",
             "vocabulary": str(vocab0), "fit (s)": f"{time0:.1f}"},
            {"pipeline": "DPTfidfVectorizer + " + ("DPSelectKBest + " if args.select else "")
             + "DPSparseLogisticRegression", "epsilon": f"{args.epsilon:g}",
             "AUC": _mean_sd(aucs), "accuracy": _mean_sd([r[5] for r in runs]),
             "vocabulary": f"{vocabs.mean():.0f} ({vocabs.min()}-{vocabs.max()})",
             "fit (s)": f"{np.median([r[2] for r in runs]):.1f}"},
        ]
        rows += public_vocabulary_rows(name, data, max_terms, args)
        for featuriser in HASHING:
            hashed, accuracies, hash_time = run_hashing(data, featuriser, args.epsilon,
                                                        args.seeds)
            rows.append({"pipeline": f"HashingVectorizer ({featuriser}, public) + "
                         "DPSparseLogisticRegression", "epsilon": f"{args.epsilon:g}",
                         "AUC": _mean_sd(hashed), "accuracy": _mean_sd(accuracies),
                         "vocabulary": "2^18 hashed", "fit (s)": f"{hash_time:.1f}"})
        print()
        print(markdown_table(rows, ["pipeline", "epsilon", "AUC", "accuracy", "vocabulary",
                                    "fit (s)"]))
        print(f"\nAUC gap to non-private: {auc0 - aucs.mean():.3f} (mean over "
              f"{args.seeds} seeds; worst seed {auc0 - aucs.min():.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
