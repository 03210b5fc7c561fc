"""A regression's prediction fitted privately, against each solver's own.

``DPGreedyCDRegressor(solver=..., decision=...)`` behind ``BoundedScaler`` with the
public ranges of :mod:`bench_preprocessing` (California housing and abalone, in their
own units; the targets' ranges go in as ``target_bounds``), ``delta = 1/n^2``:

* ``fitted``: the solver's own coefficients and intercept;
* ``auto``: the default, which for these solvers is ``calibrated``: the slope and
  intercept of the solver's score refitted on the private moment sums
  (:func:`skdp_sparse.solvers._calibration.calibrate_regression`), falling back on
  the private mean of the targets where the noise hides the slope; the share of the
  budget the refit takes grows as ``n mu`` falls, up to a half below ``n mu`` of
  about 480 (:data:`~skdp_sparse.solvers.decision.MAX_REGRESSION_SHARE`).

Split: 70% train, 30% test (``train_test_split(random_state=0)``); R^2 on the test
part, mean (and minimum) over the seeds. The mean of the training targets scores
about 0; a row below 0 predicts worse than that constant.

Run: ``python benchmarks/bench_regression_decision.py [--seeds N] [--datasets ...]``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table  # noqa: E402
from bench_preprocessing import RANGES, load  # noqa: E402

from skdp_sparse.linear_model import DPGreedyCDRegressor  # noqa: E402
from skdp_sparse.preprocessing import BoundedScaler  # noqa: E402

SOLVERS = ["sgd", "sparse_sgd", "phased_sgd", "cd", "output_perturbation"]
DECISIONS = ["fitted", "auto"]
EPSILONS = [0.1, 1.0, 10.0]


def r2_of(name, solver, decision, epsilon, seeds):
    spec = RANGES[name]
    X, y = load(name)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0)
    bounds = (np.array(spec["lower"]), np.array(spec["upper"]))
    feature_bound, norm_bound = BoundedScaler(bounds=bounds,
                                              feature_range=(-1.0, 1.0)).output_bounds()
    extra = {"penalty": "l2"} if solver == "output_perturbation" else {}
    scores = []
    for seed in range(seeds):
        model = make_pipeline(
            BoundedScaler(bounds=bounds, feature_range=(-1.0, 1.0)),
            DPGreedyCDRegressor(epsilon=epsilon, delta=1.0 / len(y_tr) ** 2,
                                feature_bound=feature_bound, norm_bound=norm_bound,
                                target_bounds=spec["target"], solver=solver,
                                decision=decision, random_state=seed, **extra))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X_tr, y_tr)
        scores.append(r2_score(y_te, model.predict(X_te)))
    return float(np.mean(scores)), float(np.min(scores))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--datasets", nargs="+", default=["california", "abalone"])
    args = parser.parse_args(argv)
    for name in args.datasets:
        rows = []
        for solver in SOLVERS:
            for epsilon in EPSILONS:
                row = {"solver": solver, "epsilon": f"{epsilon:g}"}
                for decision in DECISIONS:
                    mean, low = r2_of(name, solver, decision, epsilon, args.seeds)
                    row[decision] = f"{mean:+.3f} (min {low:+.3f})"
                rows.append(row)
        print(f"\n{name}: test R^2, mean (min) of {args.seeds} seeds\n")
        print(markdown_table(rows, ["solver", "epsilon", *DECISIONS]))


if __name__ == "__main__":
    main()
