"""Noisy sufficient statistics (AdaSSP) against greedy coordinate descent, side by side.

Synthetic least squares with independent features uniform on [-1, 1] (the public
bound, ``feature_bound=1``, ``norm_bound=sqrt(p)``), coefficients ``N(0, 1/p)``,
noise sd 0.3, targets clipped to [-1, 1]; 5,000 test rows. Both solvers of
``DPGreedyCDRegressor`` at epsilon 1, delta 1/n^2, over 3 seeds: test R^2 (mean and
sd) and the median fit time, as a multiple of the median of 3 fits of ordinary
least squares (scikit-learn's ``LinearRegression``, not private) in the same run.
The column ``n eps / (p+1)^2`` is the public ratio ``solver="auto"`` reads
(``SUFFICIENT_STATISTICS_MIN_RATIO``).

Run: ``python benchmarks/bench_sufficient_statistics.py [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table  # noqa: E402

from skdp_sparse.linear_model import DPGreedyCDRegressor  # noqa: E402

EPSILON = 1.0
SHAPES = [(5_000, 5), (5_000, 20), (5_000, 100), (20_000, 3), (50_000, 5), (50_000, 20),
          (100_000, 10)]
QUICK_SHAPES = [(5_000, 5), (5_000, 20), (20_000, 3)]


def make_data(n, p, seed=1, n_test=5_000):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n + n_test, p))
    w = rng.normal(size=p) / np.sqrt(p)
    y = np.clip(X @ w + 0.3 * rng.normal(size=n + n_test), -1, 1)
    return X[:n], y[:n], X[n:], y[n:]


def run(n, p, seeds):
    X, y, X_te, y_te = make_data(n, p)
    ols_times = []
    for _ in range(3):
        start = time.perf_counter()
        ols = LinearRegression().fit(X, y)
        ols_times.append(time.perf_counter() - start)
    ols_time = float(np.median(ols_times))
    row = {"n": n, "p": p, "n eps / (p+1)^2": round(n * EPSILON / (p + 1) ** 2),
           "OLS R^2": r2_score(y_te, ols.predict(X_te))}
    for solver, label in [("sufficient_statistics", "AdaSSP"), ("greedy_cd", "greedy CD")]:
        scores, times = [], []
        for seed in seeds:
            model = DPGreedyCDRegressor(epsilon=EPSILON, delta=1.0 / n**2, feature_bound=1.0,
                                        norm_bound=float(np.sqrt(p)), solver=solver,
                                        random_state=seed)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(X, y)
            times.append(time.perf_counter() - start)
            scores.append(r2_score(y_te, model.predict(X_te)))
        row[f"{label} R^2"] = f"{np.mean(scores):.3f} ± {np.std(scores):.3f}"
        row[f"{label} time / OLS"] = float(np.median(times) / ols_time)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    seeds = [0, 1, 2]
    rows = []
    for n, p in (QUICK_SHAPES if args.quick else SHAPES):
        rows.append(run(n, p, seeds))
        print(rows[-1], flush=True)
    print()
    print(markdown_table(rows, ["n", "p", "n eps / (p+1)^2", "OLS R^2", "AdaSSP R^2",
                                "greedy CD R^2", "AdaSSP time / OLS",
                                "greedy CD time / OLS"], floatfmt=".2f"))


if __name__ == "__main__":
    main()
