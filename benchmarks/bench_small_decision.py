"""The default classifier's decision on small tabular sets: test accuracy and ROC AUC.

:class:`~skdp_sparse.linear_model.DPSparseLogisticRegression` with its defaults
(``solver="auto"``, ``classes=[0, 1]``, ``delta = 1/n^2``) on a few hundred to a few
thousand rows, where the private decision (the scale and threshold of the score,
``solvers/_calibration.py``) has to be read from histograms whose noise is a large
part of their counts:

* ``breast_cancer``: scikit-learn's bundled set (569 x 30), behind
  :class:`~skdp_sparse.preprocessing.BoundedScaler` with each feature's range
  ``[0, 10^ceil(log10(max))]``;
* ``iris``, ``wine``: one class against the rest (virginica; cultivar 0), behind
  ``BoundedScaler`` with the ranges of their documented summaries rounded outward;
* ``digits``: the digit 0 against the rest, pixels in their public range 0-16;
* ``a9a_300``, ``a9a_1000``, ``a9a_3000``: random subsamples of a9a's training rows
  (``norm_bound = sqrt(14)``), tested on ``a9a.t``.

The tabular sets are split 70/30 by the seed; each cell is the mean +- standard
deviation over the seeds (the split, the subsample and the fit's noise change with
it), with the majority's test accuracy and scikit-learn's ``LogisticRegression``
(defaults, same pipeline) beside.

Run: ``python benchmarks/bench_small_decision.py [--seeds 30] [--epsilons 1 10]``.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from _common import PUBLIC_NORM_BOUNDS, load_dataset, markdown_table
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from skdp_sparse import DPSparseLogisticRegression
from skdp_sparse.preprocessing import BoundedScaler

#: Public ranges from the sets' documented summaries (minimum and maximum of each
#: attribute), rounded outward.
IRIS_RANGES = ([4, 2, 1, 0], [8, 5, 7, 3])
WINE_RANGES = ([11, 0, 1, 10, 70, 0, 0, 0, 0, 1, 0, 1, 200],
               [15, 6, 4, 30, 170, 4, 6, 1, 4, 13, 2, 4, 1700])
SETS = ("breast_cancer", "iris", "wine", "digits", "a9a_300", "a9a_1000", "a9a_3000")


def _tabular(name):
    """``(X, y, ranges)``: one class against the rest, and the features' public ranges."""
    if name == "breast_cancer":
        X, y = load_breast_cancer(return_X_y=True)
        # The decade of each feature's largest value, as in the set's documented units.
        return X, y, (0.0, 10.0 ** np.ceil(np.log10(X.max(axis=0))))
    if name == "iris":
        X, y = load_iris(return_X_y=True)
        return X, (y == 2).astype(int), tuple(np.asarray(r, float) for r in IRIS_RANGES)
    if name == "wine":
        X, y = load_wine(return_X_y=True)
        return X, (y == 0).astype(int), tuple(np.asarray(r, float) for r in WINE_RANGES)
    X, y = load_digits(return_X_y=True)
    return X, (y == 0).astype(int), (0.0, 16.0)


def split(name, seed):
    """``(wrap, X_train, y_train, X_test, y_test, norm_bound)`` of one seed: ``wrap``
    puts an estimator behind the public scaler (a9a's rows are fitted as they are)."""
    if name.startswith("a9a_"):
        data = load_dataset("a9a")
        rows = np.random.default_rng(1000 + seed).choice(
            data.X_train.shape[0], int(name[4:]), replace=False)
        return (lambda est: est, data.X_train[rows], data.y_train[rows], data.X_test,
                data.y_test, PUBLIC_NORM_BOUNDS["a9a"])
    X, y, ranges = _tabular(name)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3,
                                                        random_state=seed)
    return (lambda est: make_pipeline(BoundedScaler(bounds=ranges), est), X_train, y_train,
            X_test, y_test, 1.0)


def run(name, epsilon, seeds):
    accuracy, auc, reference, majority = [], [], [], []
    for seed in range(seeds):
        wrap, X_train, y_train, X_test, y_test, norm_bound = split(name, seed)
        n = X_train.shape[0]
        model = wrap(DPSparseLogisticRegression(
            epsilon=epsilon, delta=1.0 / n**2, classes=[0, 1], norm_bound=norm_bound,
            random_state=seed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X_train, y_train)
        accuracy.append(np.mean(model.predict(X_test) == y_test))
        auc.append(roc_auc_score(y_test, model.decision_function(X_test)))
        exact = clone(wrap(LogisticRegression(max_iter=5000))).fit(X_train, y_train)
        reference.append(exact.score(X_test, y_test))
        majority.append(max(np.mean(y_test), 1 - np.mean(y_test)))
    return {"data": name, "n": n, "epsilon": f"{epsilon:g}",
            "accuracy": f"{np.mean(accuracy):.3f} +- {np.std(accuracy):.3f}",
            "ROC AUC": f"{np.mean(auc):.3f} +- {np.std(auc):.3f}",
            "not private": float(np.mean(reference)), "majority": float(np.mean(majority))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--datasets", nargs="+", default=list(SETS), choices=SETS)
    args = parser.parse_args()
    rows = []
    for name in args.datasets:
        for epsilon in args.epsilons:
            rows.append(run(name, epsilon, args.seeds))
            print(rows[-1], flush=True)
    print()
    print(markdown_table(rows, ["data", "n", "epsilon", "accuracy", "ROC AUC",
                                "not private", "majority"]))


if __name__ == "__main__":
    main()
