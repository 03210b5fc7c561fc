"""Cost of the floating-point-safe path of ``sparse_sgd`` (DP-AdaFEST) against the float path.

* Time: the fit of ``DPSparseLogisticRegression(epsilon=1, delta=1/n^2,
  classes=[0, 1], solver="sparse_sgd")`` (its other parameters left alone) on a
  generated ``n x d``
  CSR matrix with ``nnz`` non-zeros a row (uniform columns, value 1, random labels),
  ``floating_point_safe=True`` (the default) against ``False``. CPU seconds of the
  calling thread, the minimum over ``--repeats`` interleaved fits per path (one fit
  of each first, to compile and load the kernels).
* Accuracy: the same estimator on the click log of ``bench_sgd.py`` (``click_log``:
  one-hot fields over a Zipf vocabulary of 10^6 values, 10^5 training rows), test ROC
  AUC and accuracy of each path, mean over ``--seeds`` fits, at each epsilon of
  ``--epsilons`` (delta = 1/n^2), and the minimum fit time.

Run: ``python benchmarks/bench_fp_safe_sparse.py [--quick] [--repeats 7] [--seeds 5]``;
``--quick`` sets ``--repeats 3 --seeds 2`` and epsilon 1 only.
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

from _common import markdown_table  # noqa: E402
from bench_sgd import click_log  # noqa: E402
from sklearn.metrics import accuracy_score, roc_auc_score  # noqa: E402

from skdp_sparse import DPSparseLogisticRegression  # noqa: E402
from skdp_sparse.exceptions import PrivacyLeakWarning  # noqa: E402


def generated(n, d, nnz, seed=0):
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, d, size=(n, nnz))
    X = sp.csr_matrix((np.ones(n * nnz), cols.ravel(), np.arange(0, n * nnz + 1, nnz)),
                      shape=(n, d))
    X.sum_duplicates()
    return X, (rng.random(n) < 0.5).astype(int)


def _model(n, safe, seed, epsilon=1.0):
    return DPSparseLogisticRegression(epsilon=epsilon, delta=1.0 / n**2, classes=[0, 1],
                                      solver="sparse_sgd", floating_point_safe=safe,
                                      random_state=seed)


def _timed_fit(model, X, y):
    start = time.process_time()
    model.fit(X, y)
    return time.process_time() - start, model


def time_rows(n, d, nnz, repeats):
    X, y = generated(n, d, nnz)
    for safe in (False, True):
        _timed_fit(_model(n, safe, 0), X, y)
    times = {False: [], True: []}
    for seed in range(repeats):
        for safe in (False, True):
            t, model = _timed_fit(_model(n, safe, seed), X, y)
            times[safe].append(t)
    t_float, t_safe = min(times[False]), min(times[True])
    return [{
        "data": f"{n:.0e} x {d:.0e}, {nnz} nnz/row", "solver": model.solver_,
        "steps": model.n_iter_, "float path (s)": t_float, "safe path (s)": t_safe,
        "safe / float": t_safe / t_float,
    }]


def accuracy_rows(epsilons, seeds):
    data = click_log()
    X, y = data.X_train, data.y_train
    n = X.shape[0]
    rows = []
    for epsilon in epsilons:
        stats = {False: [], True: []}
        for seed in range(seeds):
            for safe in (False, True):
                t, model = _timed_fit(_model(n, safe, seed, epsilon), X, y)
                scores = model.decision_function(data.X_test)
                stats[safe].append((roc_auc_score(data.y_test, scores),
                                    accuracy_score(data.y_test, model.predict(data.X_test)),
                                    t))
        for safe in (False, True):
            auc, acc, t = (np.array(v) for v in zip(*stats[safe], strict=True))
            rows.append({
                "epsilon": epsilon, "path": "safe" if safe else "float",
                "solver": model.solver_, "ROC AUC (mean)": float(auc.mean()),
                "ROC AUC (sd)": float(auc.std()), "accuracy (mean)": float(acc.mean()),
                "fit (s, min)": float(t.min()),
            })
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats, 2 seeds, epsilon 1")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 4.0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=1_000_000)
    parser.add_argument("--nnz", type=int, default=20)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.seeds, args.epsilons = 3, 2, [1.0]
    # floating_point_safe=False warns on every fit; the comparison is the point here.
    warnings.simplefilter("ignore", PrivacyLeakWarning)

    rows = time_rows(args.n, args.d, args.nnz, args.repeats)
    columns = ["data", "solver", "steps", "float path (s)", "safe path (s)", "safe / float"]
    print("Default fit, epsilon = 1, delta = 1/n^2 (CPU seconds, best of "
          f"{args.repeats}):\n")
    print(markdown_table(rows, columns, floatfmt=".3f"))

    rows = accuracy_rows(args.epsilons, args.seeds)
    columns = ["epsilon", "path", "solver", "ROC AUC (mean)", "ROC AUC (sd)",
               "accuracy (mean)", "fit (s, min)"]
    print(f"\nClick log (bench_sgd.click_log), {args.seeds} seeds per path:\n")
    print(markdown_table(rows, columns, floatfmt=".4f"))


if __name__ == "__main__":
    main()
