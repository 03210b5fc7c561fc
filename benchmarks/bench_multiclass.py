"""Multiclass classification: the multinomial fit, and each solver's one-vs-rest fit with
its default decision against its own fitted one.

:class:`~skdp_sparse.linear_model.DPSparseLogisticRegression` fits one multinomial
problem (``multi_class="multinomial"``, noisy gradient descent) or K one-vs-rest
problems, and predicts the argmax of their scores. The rows: the defaults (``solver``
and ``multi_class`` "auto"), the multinomial fit, and every solver's one-vs-rest fit.
The data:

* ``digits``: scikit-learn's bundled 8x8 digits (1,797 x 64, 10 classes), pixels
  divided by their public maximum 16, so ``norm_bound = 8`` holds;
* ``synthetic``: ``make_classification`` (20,000 x 50, 5 classes), clipped to
  [-3, 3] and divided by 3 (``norm_bound = 4``, a bound that clips some rows);
* ``we8there``: restaurant-review bigram counts (6,166 x 2,640) with the overall
  rating 1-5 as the class, rows scaled to unit l2 norm (``norm_bound = 1``).

A 75/25 split (seed 0); ``epsilon`` 1 and 10, ``delta = 1/n^2``, the public label set,
defaults otherwise. Each cell is the test accuracy, mean over three seeds; for the
solvers whose ``decision="auto"`` is ``"calibrated"``, also ``decision="fitted"``.

Run: ``python benchmarks/bench_multiclass.py [--quick]`` (``--quick``: digits only).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits, load_svmlight_file, make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import normalize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import data_dir, markdown_table  # noqa: E402

from skdp_sparse import DPSparseLogisticRegression  # noqa: E402

#: (solver, multi_class): the defaults, the multinomial noisy gradient descent, and each
#: solver's one-vs-rest fit.
SOLVERS = [("auto", "auto"), ("sgd", "multinomial"),
           *((name, "ovr") for name in ("sgd", "cd", "sparse_sgd", "phased_sgd",
                                        "screened_newton", "greedy_cd"))]
CALIBRATED = {"sgd", "cd", "sparse_sgd", "phased_sgd"}


def datasets(quick):
    X, y = load_digits(return_X_y=True)
    yield "digits", X / 16.0, y, 8.0
    if quick:
        return
    X, y = make_classification(n_samples=20000, n_features=50, n_informative=10,
                               n_classes=5, n_clusters_per_class=1, random_state=0)
    yield "synthetic", np.clip(X, -3, 3) / 3, y, 4.0
    X, y = load_svmlight_file(str(data_dir() / "we8there_overall.svm.bz2"))
    yield "we8there", normalize(X), y.astype(int), 1.0


def accuracy(X_train, y_train, X_test, y_test, classes, norm_bound, epsilon, solver,
             multi_class, decision):
    scores = []
    for seed in range(3):
        model = DPSparseLogisticRegression(
            epsilon=epsilon, delta=1.0 / len(y_train) ** 2, classes=classes,
            norm_bound=norm_bound, solver=solver, multi_class=multi_class, decision=decision,
            random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X_train, y_train)
        scores.append(model.score(X_test, y_test))
    return float(np.mean(scores)), f"{model.solver_}, {model.multi_class_}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = []
    for name, X, y, norm_bound in datasets(args.quick):
        X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
        classes = sorted(set(y.tolist()))
        reference = LogisticRegression(max_iter=3000).fit(X_train, y_train)
        majority = np.bincount(y_test).max() / len(y_test)
        rows.append({"data": name, "solver": "not private (majority)", "epsilon": "inf",
                     "auto": f"{reference.score(X_test, y_test):.3f} ({majority:.3f})",
                     "fitted": ""})
        for epsilon in (1.0, 10.0):
            for solver, multi_class in SOLVERS:
                auto, chosen = accuracy(X_train, y_train, X_test, y_test, classes,
                                        norm_bound, epsilon, solver, multi_class, "auto")
                calibrated = solver in CALIBRATED and multi_class == "ovr"
                fitted = accuracy(X_train, y_train, X_test, y_test, classes, norm_bound,
                                  epsilon, solver, multi_class, "fitted")[0] \
                    if calibrated else None
                label = f"auto ({chosen})" if solver == "auto" else f"{solver}, {multi_class}"
                rows.append({"data": name, "solver": label, "epsilon": f"{epsilon:g}",
                             "auto": auto, "fitted": fitted})
                print(rows[-1], flush=True)
    print()
    print(markdown_table(rows, ["data", "solver", "epsilon", "auto", "fitted"]))


if __name__ == "__main__":
    main()
