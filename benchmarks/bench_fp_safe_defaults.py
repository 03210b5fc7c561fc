"""What floating-point safety costs a default fit, estimator by estimator.

Every estimator releases with exact integer noise on lattices by default
(``floating_point_safe="auto"``); ``floating_point_safe=False`` restores the textbook
float path (with a ``PrivacyLeakWarning``). This benchmark times the *default* fit a
user gets (epsilon, delta = 1/n^2, public bounds, every other parameter left alone)
with both settings, side by side in one run:

* a9a (32,561 x 123, ``norm_bound = sqrt(14)``): ``DPSparseLogisticRegression`` at
  epsilon 0.1, 1 and 10 (``solver="auto"`` picks the solver) and
  ``DPGreedyCDRegressor`` at epsilon 1 on the labels mapped to {-1, 1};
* a generated CSR matrix of ``n x d`` (default 10^5 x 10^6, 20 ones a row, Zipf-like
  column frequencies, labels from a sparse logistic model): the logistic regression
  at epsilon 1 (``solver="auto"``) and ``DPSparseMeanEstimator`` (default
  method with the public ``sparsity=20``, delta = 1/n^2).

Times are CPU seconds of the calling thread, the minimum over ``--repeats``
interleaved fits per path after one warm-up fit of each (compilation, calibration
caches): other load on the machine inflates the minimum least. The ratio
safe / float is what the default costs; the score columns (test accuracy, or the
l2 error of the mean) show the result is unchanged.

Run: ``python benchmarks/bench_fp_safe_defaults.py [--quick] [--repeats 5]``;
``--quick`` uses a 10^4 x 10^5 matrix and 2 repeats.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import PUBLIC_NORM_BOUNDS, load_dataset, markdown_table  # noqa: E402

from skdp_sparse import (  # noqa: E402
    DPGreedyCDRegressor,
    DPSparseLogisticRegression,
    DPSparseMeanEstimator,
)
from skdp_sparse.exceptions import PrivacyLeakWarning  # noqa: E402


def generated_csr(n, d, per_row=20, seed=0):
    """Binary CSR rows with Zipf-like column frequencies and labels of a sparse model."""
    rng = np.random.default_rng(seed)
    freq = 1.0 / np.arange(1, d + 1) ** 0.8
    cols = rng.choice(d, size=(n, per_row), p=freq / freq.sum())
    X = sp.csr_matrix((np.ones(n * per_row), (np.repeat(np.arange(n), per_row),
                                              cols.ravel())), shape=(n, d))
    X.data[:] = 1.0
    w = np.zeros(d)
    w[:200] = rng.normal(0.0, 1.5, 200)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ w)))).astype(float)
    return X, y


def _timed_fit(make, X, y, seed, safe):
    est = make(seed, safe)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        start = time.process_time()
        est.fit(X) if y is None else est.fit(X, y)
        return time.process_time() - start, est


def compare(label, make, X, y, score, repeats):
    """One row: both paths of ``make(seed, floating_point_safe)`` fitted on ``(X, y)``."""
    for safe in (False, True):
        _timed_fit(make, X, y, 0, safe)
    times, scores = {False: [], True: []}, {False: [], True: []}
    for seed in range(1, repeats + 1):
        for safe in (False, True):
            t, est = _timed_fit(make, X, y, seed, safe)
            times[safe].append(t)
            scores[safe].append(score(est))
    t_float, t_safe = min(times[False]), min(times[True])
    return {"fit": label, "solver": getattr(est, "solver_", getattr(est, "method", "")),
            "float (s)": t_float, "safe (s)": t_safe, "safe / float": t_safe / t_float,
            "score float": float(np.mean(scores[False])),
            "score safe": float(np.mean(scores[True]))}


def a9a_rows(repeats):
    data = load_dataset("a9a")
    X, y, Xt, yt = data.X_train, data.y_train, data.X_test, data.y_test
    n, bound = X.shape[0], PUBLIC_NORM_BOUNDS["a9a"]
    rows = []
    for eps in (0.1, 1.0, 10.0):
        def make(seed, safe, eps=eps):
            return DPSparseLogisticRegression(
                epsilon=eps, delta=1 / n**2, norm_bound=bound, classes=[0, 1],
                floating_point_safe=safe, random_state=seed)
        rows.append(compare(f"a9a logistic, epsilon {eps:g}", make, X, y,
                            lambda est: est.score(Xt, yt), repeats))

    def make_regressor(seed, safe):
        return DPGreedyCDRegressor(epsilon=1.0, delta=1 / n**2, norm_bound=bound,
                                   floating_point_safe=safe, random_state=seed)
    rows.append(compare("a9a regressor (y in {-1, 1}), epsilon 1", make_regressor, X,
                        2 * y - 1, lambda est: est.score(Xt, 2 * yt - 1), repeats))
    return rows


def generated_rows(n, d, repeats):
    X, y = generated_csr(n + n // 5, d)
    X, y, Xt, yt = X[:n], y[:n], X[n:], y[n:]
    bound = float(np.sqrt(20))

    def make_logistic(seed, safe):
        return DPSparseLogisticRegression(
            epsilon=1.0, delta=1 / n**2, norm_bound=bound, classes=[0, 1],
            floating_point_safe=safe, random_state=seed)

    truth = np.asarray(X.mean(axis=0)).ravel() / bound

    def make_mean(seed, safe):
        return DPSparseMeanEstimator(epsilon=1.0, delta=1 / n**2, norm_bound=bound,
                                     sparsity=20, floating_point_safe=safe,
                                     random_state=seed)

    def mean_error(est):
        # l2 error of the released mean, relative to the norm bound
        return float(np.linalg.norm(np.asarray(est.mean_).ravel() / bound - truth))

    label = f"{n:.0e} x {d:.0e} CSR"
    return [compare(f"{label} logistic, epsilon 1", make_logistic, X, y,
                    lambda est: est.score(Xt, yt), repeats),
            compare(f"{label} mean (l2 error / bound)", make_mean, X, None, mean_error,
                    repeats)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.n, args.d = 2, 10_000, 100_000
    rows = a9a_rows(args.repeats) + generated_rows(args.n, args.d, args.repeats)
    columns = ["fit", "solver", "float (s)", "safe (s)", "safe / float", "score float",
               "score safe"]
    print(markdown_table(rows, columns, floatfmt=".3f"))


if __name__ == "__main__":
    main()
