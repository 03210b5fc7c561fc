"""Cost of floating-point-safe coordinate descent against its float path.

``DPSparseLogisticRegression`` fits (default settings: the user sets epsilon, delta and
the public bounds) with ``floating_point_safe=True`` (the default: exact exponential
mechanism on lattice keys, discrete Gaussian updates) against ``False`` (Gumbel-max
and ``rng.normal`` in doubles):

* a9a (32,561 x 123, ``norm_bound = sqrt(14)``, delta = 1/n^2, epsilon = 1 and 10),
  where ``solver="auto"`` takes ``greedy_cd`` and the selection scans the 124 keys;
  accuracy on the official test set ``a9a.t``;
* a synthetic CSR problem with many features (10^4 x 10^5, about 30 non-zeros per row,
  ``solver="greedy_cd"``), where the selection keeps the exact sampler's dynamic sum
  tree (the float path its log-sum-exp heap); accuracy on 5,000 held-out rows.

Times are CPU seconds of the calling thread, the minimum over ``--repeats``
interleaved fits per path (seeds 1, 2, ...), after a first fit (seed 0) that starts
from empty calibration and lattice caches and is reported on its own: it pays for the
calibration and, on the safe path, for the exact selection's tables at its
temperature (a few tens of milliseconds, cached for later fits at the same epsilon).
Accuracies are means over all fits.

Run: ``python benchmarks/bench_fp_safe_cd.py [--quick] [--repeats 5]``; ``--quick``
sets ``--repeats 2``.
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

from _common import data_dir, markdown_table  # noqa: E402

from skdp_sparse import DPSparseLogisticRegression  # noqa: E402
from skdp_sparse.exceptions import PrivacyLeakWarning  # noqa: E402
from skdp_sparse.privacy import discrete  # noqa: E402
from skdp_sparse.privacy.discrete import _lattice, _selection  # noqa: E402
from skdp_sparse.solvers import coordinate_descent as cd_solver  # noqa: E402


def _clear_caches():
    cd_solver._calibration.cache_clear()
    discrete.plan_selection.cache_clear()
    discrete.plan_gaussian.cache_clear()
    discrete.plan_laplace.cache_clear()
    _selection._selection_tables.cache_clear()
    _lattice._plan_unit.cache_clear()


def _a9a():
    from sklearn.datasets import load_svmlight_file

    root = data_dir()
    X, y = load_svmlight_file(str(root / "a9a.bz2"), n_features=123)
    Xt, yt = load_svmlight_file(str(root / "a9a.t.bz2"), n_features=123)
    return sp.csr_matrix(X), y, sp.csr_matrix(Xt), yt


def _many_features(n=10_000, p=100_000, n_test=5_000, per_row=30, seed=0):
    """Binary rows with Zipf-like feature frequencies and a sparse logistic model."""
    rng = np.random.default_rng(seed)
    m = n + n_test
    freq = 1.0 / np.arange(1, p + 1) ** 0.8
    cols = rng.choice(p, size=(m, per_row), p=freq / freq.sum())
    X = sp.csr_matrix((np.ones(m * per_row), (np.repeat(np.arange(m), per_row),
                                              cols.ravel())), shape=(m, p))
    X.data[:] = 1.0  # repeated draws of a feature stay binary
    w = np.zeros(p)
    w[:200] = rng.normal(0.0, 1.5, 200)
    y = np.where(rng.random(m) < 1 / (1 + np.exp(-(X @ w))), 1.0, -1.0)
    return X[:n], y[:n], X[n:], y[n:]


def _fit_time(X, y, cold=True, **params):
    if cold:
        _clear_caches()
    est = DPSparseLogisticRegression(classes=[-1, 1], **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        start = time.process_time()
        est.fit(X, y)
        return time.process_time() - start, est


def rows_for(name, data, cases, repeats):
    X, y, Xt, yt = data
    n = X.shape[0]
    rows = []
    for extra in cases:
        params = dict(delta=1.0 / n**2, **extra)
        for safe in (False, True):  # compile and load the kernels
            _fit_time(X[:500], y[:500], floating_point_safe=safe, max_iter=3, **params)
        times, accs, solver = {False: [], True: []}, {False: [], True: []}, None
        for seed in range(repeats + 1):
            for safe in (False, True):
                t, est = _fit_time(X, y, cold=seed == 0, floating_point_safe=safe,
                                   random_state=seed, **params)
                times[safe].append(t)
                accs[safe].append(est.score(Xt, yt))
                solver = est.solver_
        t_float, t_safe = min(times[False][1:]), min(times[True][1:])
        rows.append({
            "data": f"{name} ({n} x {X.shape[1]})", "epsilon": params["epsilon"],
            "solver": solver, "float path (s)": t_float, "safe path (s)": t_safe,
            "safe / float": t_safe / t_float,
            "first fit safe / float": times[True][0] / times[False][0],
            "accuracy float": float(np.mean(accs[False])),
            "accuracy safe": float(np.mean(accs[True])),
        })
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 repeats")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 2
    rows = rows_for("a9a", _a9a(), [dict(epsilon=1.0, norm_bound=14**0.5),
                                    dict(epsilon=10.0, norm_bound=14**0.5)], args.repeats)
    rows += rows_for("synthetic CSR", _many_features(),
                     [dict(epsilon=eps, norm_bound=30**0.5, solver="greedy_cd")
                      for eps in (1.0, 10.0)],
                     args.repeats)
    columns = ["data", "epsilon", "solver", "float path (s)", "safe path (s)",
               "safe / float", "first fit safe / float", "accuracy float", "accuracy safe"]
    print(markdown_table(rows, columns, floatfmt=".3f"))


if __name__ == "__main__":
    main()
