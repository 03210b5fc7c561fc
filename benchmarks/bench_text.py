"""Private logistic regression on text with the defaults a user gets.

IMDB and the SMS Spam Collection featurised by a public map (hashed unigrams and
bigrams, unit l2 rows: ``norm_bound=1`` is public), the Reuters tf-idf rows (unit
norm) and, as checks that the low-dimensional regime does not regress, a9a
(``norm_bound=sqrt(14)``, one-hot encoding of 14 attributes) and w8a (300 binary
features, rows clipped to the default ``norm_bound=1``); ``imdb_tfidf`` has the shape
of a tf-idf matrix a user brings (11,314 reviews, scikit-learn's ``TfidfVectorizer``
fitted on them, not privately: see ``_text.py``); ``clicklog`` is the generated click
log of ``bench_sgd.py`` (10^5 rows of 10 one-hot fields over 10^6 values, rows scaled
to unit norm: ``norm_bound=1`` is public). For each data set and
epsilon in {0.1, 1, 10}, ``delta = 1/n^2``: test ROC AUC and accuracy, mean of three
seeds, of ``DPSparseLogisticRegression`` with its defaults (``solver="auto"``), with
each solver named, next to scikit-learn's ``LogisticRegression`` (non-private) and
the majority class of the training labels (the floor a default must not go under).
Times are medians over the seeds (and over three fits of the non-private model);
``time / sklearn`` is a private fit's median over the non-private fit's, in the same
run.

    python benchmarks/bench_text.py [--quick] [--datasets imdb sms reuters a9a w8a]
        [--solvers auto sgd ...] [--epsilons 0.1 1 10] [--seeds 3]

A solver ``sparse_sgd:k`` runs DP-FEST on the ``k`` features of largest noisy count
(``frequent_features=k``); ``screened_newton:rule`` screens by ``feature_selection=rule``
(``sure``, or an integer ``k``).

Featurised text is cached (``_text.py``); the fits run one at a time.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _common import PUBLIC_NORM_BOUNDS, load_dataset, markdown_table
from _text import load_text
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score

from skdp_sparse import DPSparseLogisticRegression
from skdp_sparse.solvers import bounded_newton

DATASETS = ("imdb", "sms", "reuters", "a9a", "w8a", "imdb_tfidf", "clicklog")
SOLVERS = ("auto", "screened_newton", "bounded_newton", "sgd", "sparse_sgd", "greedy_cd",
           "phased_sgd", "cd", "bias_reduced_sgd")
#: w8a has no public row bound tighter than sqrt(300) (300 binary features); it keeps
#: the estimator's default ``norm_bound=1``, which clips its rows.
NORM_BOUNDS = {"imdb": 1.0, "sms": 1.0, "imdb_tfidf": 1.0, "clicklog": 1.0,
               "reuters": PUBLIC_NORM_BOUNDS["reuters"],
               "a9a": PUBLIC_NORM_BOUNDS["a9a"], "w8a": 1.0}


def load(name):
    if name == "clicklog":
        from bench_sgd import click_log  # rows scaled to unit norm

        return click_log()
    return load_dataset(name) if name in ("a9a", "w8a") else load_text(name)


def scores(y, s, pred):
    return roc_auc_score(y, s), accuracy_score(y, pred)


def private_fit(ds, solver, epsilon, seed):
    n = ds.X_train.shape[0]
    # "sparse_sgd:k": DP-FEST on the k features of largest noisy count;
    # "screened_newton:rule": feature_selection=rule.
    solver, _, option = solver.partition(":")
    extra = {} if not option else {"frequent_features": int(option)} \
        if solver == "sparse_sgd" else \
        {"feature_selection": int(option) if option.isdigit() else option}
    clf = DPSparseLogisticRegression(
        epsilon=epsilon, delta=1.0 / n**2, norm_bound=NORM_BOUNDS[ds.name], classes=[0, 1],
        solver=solver, random_state=seed, **extra)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(ds.X_train, ds.y_train)
    elapsed = time.perf_counter() - t0
    auc, acc = scores(ds.y_test, clf.decision_function(ds.X_test), clf.predict(ds.X_test))
    return auc, acc, elapsed, clf.solver_


def baselines(ds):
    """The non-private model's and the majority's rows, and the non-private fit's
    median time over three fits."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        lr = LogisticRegression(max_iter=2000).fit(ds.X_train, ds.y_train)
        times.append(time.perf_counter() - t0)
    reference = float(np.median(times))
    auc, acc = scores(ds.y_test, lr.decision_function(ds.X_test), lr.predict(ds.X_test))
    majority = int(ds.y_train.mean() >= 0.5)
    maj_acc = accuracy_score(ds.y_test, np.full(ds.y_test.size, majority))
    return [{"method": "non-private LogisticRegression", "epsilon": "inf",
             "AUC": f"{auc:.3f}", "accuracy": f"{acc:.3f}", "time (s)": f"{reference:.3f}",
             "time / sklearn": "1"},
            {"method": "majority class", "epsilon": "-", "AUC": "0.500",
             "accuracy": f"{maj_acc:.3f}", "time (s)": "", "time / sklearn": ""}], reference


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one seed, epsilon 1, defaults and sgd only")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--solvers", nargs="+", default=list(SOLVERS))
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.1, 1.0, 10.0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epsilons, args.solvers = 1, [1.0], ["auto", "sgd"]
    for name in args.datasets:
        ds = load(name)
        n, p = ds.X_train.shape
        print(f"\n### {name}: n = {n}, p = {p}, {ds.y_train.mean():.1%} positive, "
              f"norm_bound = {NORM_BOUNDS[name]:.4g}, delta = 1/n^2\n")
        rows, reference = baselines(ds)
        for epsilon in args.epsilons:
            for solver in args.solvers:
                if solver.startswith("bounded_newton") and p > bounded_newton.MAX_FEATURES:
                    continue  # it releases the (p + 1)^2 Gram matrix: refused at this p
                runs = [private_fit(ds, solver, epsilon, seed) for seed in range(args.seeds)]
                auc, acc = (float(np.mean([r[i] for r in runs])) for i in range(2))
                elapsed = float(np.median([r[2] for r in runs]))
                used = runs[0][3]
                name_, _, option = solver.partition(":")
                label = f"defaults ({used})" if solver == "auto" else \
                    f"DP-FEST top-{option}" if name_ == "sparse_sgd" and option else \
                    f"{name_}, feature_selection={option}" if option else solver
                rows.append({"method": label, "epsilon": f"{epsilon:g}",
                             "AUC": f"{auc:.3f}", "accuracy": f"{acc:.3f}",
                             "time (s)": f"{elapsed:.3f}",
                             "time / sklearn": f"{elapsed / reference:.2f}"})
                print(f"  {name} eps={epsilon:g} {label}: AUC {auc:.3f} acc {acc:.3f} "
                      f"({elapsed:.3f}s a fit, {elapsed / reference:.2f}x scikit-learn's)",
                      flush=True)
        print()
        print(markdown_table(rows, ["method", "epsilon", "AUC", "accuracy", "time (s)",
                                    "time / sklearn"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
