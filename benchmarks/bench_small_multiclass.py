"""The multinomial default on small multiclass sets, against the majority class.

:class:`~skdp_sparse.linear_model.DPSparseLogisticRegression` with its defaults (more
than two classes: noisy gradient descent on the multinomial loss, its own decision),
``classes`` the public label set, ``delta = 1/n^2``, behind
:class:`~skdp_sparse.preprocessing.DPStandardScaler` (half the budget, output clipped
to [-3, 3]) or :class:`~skdp_sparse.preprocessing.BoundedScaler` (to [-1, 1], the whole
budget to the model), on wine and iris (the public ranges of
``bench_small_decision.py``) and the first 500 digits (pixels 0-16). Each cell is the
test accuracy over 20 splits (70/30, ``random_state`` the seed, the fit's seed too),
mean ± sd, with two majorities: the training part's most frequent class scored on the
test part (what a fallback on the majority can reach, before the noise of its private
estimate), and the test part's own most frequent class (known to no rule fitted on the
training part).

Run: ``python benchmarks/bench_small_multiclass.py [--seeds 20]``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table  # noqa: E402
from bench_small_decision import IRIS_RANGES, WINE_RANGES  # noqa: E402

from skdp_sparse import DPSparseLogisticRegression  # noqa: E402
from skdp_sparse.preprocessing import BoundedScaler, DPStandardScaler  # noqa: E402


def dataset(name):
    if name == "wine":
        X, y = load_wine(return_X_y=True)
        return X, y, tuple(np.asarray(r, float) for r in WINE_RANGES)
    if name == "iris":
        X, y = load_iris(return_X_y=True)
        return X, y, tuple(np.asarray(r, float) for r in IRIS_RANGES)
    X, y = load_digits(return_X_y=True)
    return X[:500], y[:500], (np.zeros(64), np.full(64, 16.0))


def pipeline(scaler, ranges, n_features, epsilon, n_train, classes, seed):
    if scaler == "standard":
        first = DPStandardScaler(bounds=ranges, epsilon=epsilon / 2, clip_output=3.0,
                                 random_state=seed)
        norm_bound, epsilon = first.output_bounds(n_features)[1], epsilon / 2
    else:
        first = BoundedScaler(bounds=ranges, feature_range=(-1, 1))
        norm_bound = first.output_bounds()[1]
    return make_pipeline(first, DPSparseLogisticRegression(
        epsilon=epsilon, delta=1.0 / n_train**2, classes=classes, norm_bound=norm_bound,
        random_state=seed))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args(argv)
    rows = []
    for name in ("wine", "iris", "digits_500"):
        X, y, ranges = dataset(name)
        for epsilon in (1.0, 10.0):
            for scaler in ("standard", "bounded"):
                accuracy, train_majority, test_majority = [], [], []
                for seed in range(args.seeds):
                    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3,
                                                              random_state=seed)
                    model = pipeline(scaler, ranges, X.shape[1], epsilon, len(y_tr),
                                     np.unique(y), seed)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        model.fit(X_tr, y_tr)
                    accuracy.append(model.score(X_te, y_te))
                    train_majority.append(np.mean(y_te == np.argmax(np.bincount(y_tr))))
                    test_majority.append(np.max(np.bincount(y_te)) / len(y_te))
                rows.append({"data": name, "epsilon": f"{epsilon:g}", "scaler": scaler,
                             "n": len(y_tr),
                             "accuracy": f"{np.mean(accuracy):.3f} ± {np.std(accuracy):.3f}",
                             "training majority": f"{np.mean(train_majority):.3f}",
                             "test majority": f"{np.mean(test_majority):.3f}"})
                print(rows[-1], flush=True)
    print()
    print(markdown_table(rows, ["data", "epsilon", "scaler", "n", "accuracy",
                                "training majority", "test majority"]))


if __name__ == "__main__":
    main()
