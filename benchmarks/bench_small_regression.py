"""The regressor's default on small tabular sets and generated problems, with the
default decision against noisy gradient descent's refitted and own predictions.

``DPGreedyCDRegressor`` with its defaults behind ``BoundedScaler`` (public ranges,
``delta = 1/n^2``), 70/30 split (``random_state=0``), test R^2 mean +- sd over the
seeds:

* ``diabetes``: scikit-learn's ``load_diabetes(scaled=False)`` (309 training rows, 10
  features) with clinical ranges a user would know (age 18-90, sex 1-2, BMI 15-50,
  blood pressure 50-150 mmHg, total cholesterol 50-350 mg/dL, LDL 0-300, HDL 10-120,
  cholesterol/HDL ratio 1-10, log triglycerides 3-7, glucose 50-200), target (0, 400);
* ``abalone``, ``california``: the ranges of ``bench_preprocessing.py``;
* ``gen_N``: ``make_regression`` features (5 of 10 informative) scaled by 0.5-2 and
  shifted by up to 1, target ``10 + 3 (signal + noise)`` (R^2 about 0.5), ranges +-9
  and (-5, 25); ``_heavy``: Student-t (3) features and noise; ``_loose``: ranges +-13
  and (-20, 40), a signal small against its bounds.

Columns: ``auto`` (the default), ``sgd calibrated`` (the refit, ``decision=
"calibrated"``), ``sgd fitted`` (its own prediction, without the noise ridge).

Run: ``python benchmarks/bench_small_regression.py [--seeds 10]``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_diabetes, make_regression
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table  # noqa: E402
from bench_preprocessing import RANGES, load  # noqa: E402

from skdp_sparse.linear_model import DPGreedyCDRegressor  # noqa: E402
from skdp_sparse.preprocessing import BoundedScaler  # noqa: E402
from skdp_sparse.privacy.accounting import gaussian_mu  # noqa: E402

DIABETES_RANGES = ([18, 1, 15, 50, 50, 0, 10, 1, 3, 50],
                   [90, 2, 50, 150, 350, 300, 120, 10, 7, 200])
CASES = [("diabetes", 1.0), ("diabetes", 3.0), ("diabetes", 10.0), ("abalone", 0.1),
         ("abalone", 0.3), ("abalone", 1.0), ("abalone", 10.0), ("california", 0.05),
         ("california", 0.1), ("gen_300", 1.0), ("gen_300", 10.0), ("gen_2000", 0.3),
         ("gen_2000", 1.0), ("gen_2000", 10.0), ("gen_20000", 0.1), ("gen_20000", 1.0),
         ("gen_2000_heavy", 0.3), ("gen_2000_heavy", 1.0), ("gen_2000_loose", 0.1),
         ("gen_2000_loose", 1.0)]
VARIANTS = {"auto": {}, "sgd calibrated": {"solver": "sgd", "decision": "calibrated"},
            "sgd fitted": {"solver": "sgd", "decision": "fitted"}}


def generated(name):
    parts = name.split("_")
    n, heavy, loose = int(parts[1]), "heavy" in parts, "loose" in parts
    rng = np.random.default_rng(0)
    X, _, coef = make_regression(n_samples=int(n / 0.7) + 1, n_features=10,
                                 n_informative=5, coef=True, random_state=0)
    if heavy:
        X = rng.standard_t(3, size=X.shape)
    X = X * rng.uniform(0.5, 2.0, 10) + rng.uniform(-1, 1, 10)
    signal = X @ (coef / np.linalg.norm(coef))
    noise = rng.standard_t(3, size=len(signal)) if heavy else rng.standard_normal(len(signal))
    y = 10 + 3 * (signal / np.std(signal) + noise)
    if loose:
        return X, y, ([-13.0] * 10, [13.0] * 10), (-20.0, 40.0)
    return X, y, ([-9.0] * 10, [9.0] * 10), (-5.0, 25.0)


def dataset(name):
    if name == "diabetes":
        X, y = load_diabetes(return_X_y=True, scaled=False)
        return X, y, DIABETES_RANGES, (0.0, 400.0)
    if name in RANGES:
        X, y = load(name)
        return X, y, (RANGES[name]["lower"], RANGES[name]["upper"]), RANGES[name]["target"]
    return generated(name)


def scores(name, epsilon, seeds, options):
    X, y, ranges, target = dataset(name)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0)
    bounds = tuple(np.asarray(r, dtype=float) for r in ranges)
    feature_bound, norm_bound = BoundedScaler(bounds=bounds,
                                              feature_range=(-1, 1)).output_bounds()
    out = []
    for seed in range(seeds):
        model = make_pipeline(
            BoundedScaler(bounds=bounds, feature_range=(-1, 1)),
            DPGreedyCDRegressor(epsilon=epsilon, delta=1.0 / len(y_tr) ** 2,
                                feature_bound=feature_bound, norm_bound=norm_bound,
                                target_bounds=target, random_state=seed, **options))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X_tr, y_tr)
        out.append(r2_score(y_te, model.predict(X_te)))
    return np.array(out), len(y_tr), model[-1].solver_


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args(argv)
    rows = []
    for name, epsilon in CASES:
        row = {"data": name, "epsilon": f"{epsilon:g}"}
        for label, options in VARIANTS.items():
            r2, n, solver = scores(name, epsilon, args.seeds, options)
            if label == "auto":
                row["n mu"] = f"{n * gaussian_mu(epsilon, 1.0 / n**2):.0f}"
                row["solver"] = solver
            row[label] = f"{r2.mean():+.3f} ± {r2.std():.3f}"
        rows.append(row)
        print(row, flush=True)
    print()
    print(markdown_table(rows, ["data", "epsilon", "n mu", "solver", *VARIANTS]))


if __name__ == "__main__":
    main()
