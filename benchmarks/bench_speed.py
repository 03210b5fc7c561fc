"""Cost model of every solver: each fit next to the cost of reading its data.

For each case (a solver with its options and epsilon, on a data set) the table gives

* ``fit (s)``: the median time of ``--repeats`` fits (seeds 1, 2, ...), after one
  fit (seed 0) that compiles the kernels and fills the calibration caches;
* ``SpMV (ms)``: the median time of one sparse matrix-vector product ``X @ v`` over
  the same CSR matrix (scipy);
* ``passes``: the passes over X the fit made, as its solver reports them in
  ``SolverResult.info`` (read through a recording wrapper of the solver registry):
  ``data_passes`` where the solver counts them (coordinate descent: the entries its
  updates and gradient recomputations read), else ``2 n_gradient_evaluations / n``
  (a per-example gradient reads its row twice: margin and gradient), else
  ``2 sum(solver_iterations)`` (each iteration of the non-private solver of output
  perturbation a gradient over all rows); ``n/a`` when none is reported;
* ``fit / floor``: ``fit / (passes x SpMV)``, how far the fit is from the cost of the
  passes it needs;
* ``fit / sklearn``: fit time over the median fit time of scikit-learn's non-private
  ``LogisticRegression`` (lbfgs) on the same data, fitted in the same rounds;
* ``safe / float``: the median time a step of the floating-point-safe path (the
  default) over that of ``floating_point_safe=False``, fitted in the same rounds (a
  step: the fit time over ``n_iter``, which a privacy filter's random stop makes
  differ between two fits of ``bias_reduced_sgd``).

Times are wall-clock seconds, or with ``--clock cpu`` the CPU seconds of the process,
steadier on a busy machine (scikit-learn then runs on one thread, so that its time is
its work and not that of threads waiting for it). All cases of a data
set run round-robin within each repeat (scikit-learn, then every
case safe and float), so the ratio columns compare fits made under the same load.

Data: a9a (32,561 x 123, the training file) for every solver; a generated CSR matrix of
200,000 rows with 20 non-zeros each (column indices uniform, duplicates summed, values
1/sqrt(20), labels from a sparse linear model) at p = 10^6 and at p = 10^4 (the same
rows with their columns taken modulo 10^4) for the solvers meant for large sparse
problems (``--quick``: 20,000 rows at 10^5 and 10^3 features). Every fit uses the
estimator's defaults plus ``delta = 1/n^2`` and the public label set; a case's own
options are in the table.

A case is data: add an entry to :data:`CASES` (label, data set, epsilon, estimator
options); nothing else in the script names a solver.

Run: ``python benchmarks/bench_speed.py [--quick] [--repeats 3] [--clock cpu]
[--only greedy_cd cd] [--data a9a]`` (``--only`` keeps the cases whose label starts with
one of the given words, ``--data`` those on the given data sets).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import PUBLIC_NORM_BOUNDS, load_dataset, markdown_table  # noqa: E402

from skdp_sparse import DPSparseLogisticRegression  # noqa: E402
from skdp_sparse.solvers import SOLVERS  # noqa: E402

#: The clock of every timing: ``time.perf_counter`` or ``time.process_time``.
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


class Case(NamedTuple):
    label: str
    data: str
    epsilon: float
    options: dict


#: The cases, in table order. ``data``: "a9a", "sparse" (p = 10^6) or "sparse_small_p"
#: (the same rows at p = 10^4).
CASES = [
    Case("greedy_cd", "a9a", 10.0, {"solver": "greedy_cd"}),
    Case("greedy_cd", "a9a", 1.0, {"solver": "greedy_cd"}),
    Case("cd", "a9a", 10.0, {"solver": "cd"}),
    Case("sgd full batch", "a9a", 1.0, {"solver": "sgd"}),
    Case("sgd minibatch", "a9a", 1.0, {"solver": "sgd", "batch_size": 1024}),
    Case("sparse_sgd", "a9a", 1.0, {"solver": "sparse_sgd"}),
    Case("phased_sgd", "a9a", 1.0, {"solver": "phased_sgd"}),
    Case("bias_reduced_sgd", "a9a", 1.0, {"solver": "bias_reduced_sgd"}),
    Case("output_perturbation", "a9a", 1.0, {"solver": "output_perturbation",
                                              "penalty": "l2"}),
    Case("screened_newton", "a9a", 1.0, {"solver": "screened_newton"}),
    Case("bounded_newton", "a9a", 1.0, {"solver": "bounded_newton"}),
    Case("bounded_newton", "a9a", 10.0, {"solver": "bounded_newton"}),
    Case("auto", "a9a", 0.1, {}),
    Case("auto", "a9a", 1.0, {}),
    Case("auto", "a9a", 10.0, {}),
    Case("sparse_sgd", "sparse", 1.0, {"solver": "sparse_sgd"}),
    Case("sparse_sgd", "sparse_small_p", 1.0, {"solver": "sparse_sgd"}),
    Case("bias_reduced_sgd", "sparse", 1.0, {"solver": "bias_reduced_sgd"}),
]

#: How a solver's ``SolverResult.info`` gives its passes over X: the first key present.
PASSES_FROM_INFO = (
    ("data_passes", lambda value, n: float(value)),
    ("n_gradient_evaluations", lambda value, n: 2.0 * float(value) / n),
    ("solver_iterations", lambda value, n: 2.0 * float(np.sum(value))),
)


class _Recording:
    """A registry solver that keeps the result of every ``solve``."""

    def __init__(self, solver):
        self._solver = solver
        self.results = []

    def __getattr__(self, name):
        return getattr(self._solver, name)

    def solve(self, *args, **kwargs):
        result = self._solver.solve(*args, **kwargs)
        self.results.append(result)
        return result


@contextmanager
def recording_solvers():
    """Every registry solver wrapped in :class:`_Recording` for the duration."""
    originals = dict(SOLVERS)
    recorders = {name: _Recording(solver) for name, solver in originals.items()}
    SOLVERS.update(recorders)
    try:
        yield recorders
    finally:
        SOLVERS.update(originals)


def passes_of(result, n_samples):
    for key, rule in PASSES_FROM_INFO:
        if key in result.info:
            return rule(result.info[key], n_samples)
    return None


def generated_sparse(n, p, p_small, per_row=20, seed=0):
    """Two CSR matrices with the same rows: columns uniform in ``[0, p)``, and the same
    columns modulo ``p_small``; labels from a sparse linear model on the first."""
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, p, size=(n, per_row))
    rows = np.repeat(np.arange(n), per_row)
    values = np.full(n * per_row, 1.0 / np.sqrt(per_row))
    X = sp.csr_matrix((values, (rows, cols.ravel())), shape=(n, p))
    X_small = sp.csr_matrix((values, (rows, (cols % p_small).ravel())), shape=(n, p_small))
    w = np.zeros(p)
    support = rng.choice(p, size=min(p, 1000), replace=False)
    w[support] = rng.normal(0.0, 3.0, support.size)
    margin = X @ w
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-margin))).astype(np.int64)
    return X, X_small, y


def load(names, quick):
    """The data sets called ``names``: name -> (CSR X, labels in {0, 1})."""
    data = {}
    if "a9a" in names:
        a9a = load_dataset("a9a")
        data["a9a"] = (a9a.X_train, a9a.y_train)
    if {"sparse", "sparse_small_p"} & set(names):
        n, p, p_small = (20_000, 100_000, 1_000) if quick else (200_000, 1_000_000, 10_000)
        X, X_small, y = generated_sparse(n, p, p_small)
        data.update(sparse=(X, y), sparse_small_p=(X_small, y))
    return data


def spmv_time(X, repeats=30):
    X = sp.csr_matrix(X)
    v = np.ones(X.shape[1])
    X @ v
    times = []
    for _ in range(repeats):
        start = clock()
        X @ v
        times.append(clock() - start)
    return float(np.median(times))


def fit_once(case, X, y, seed, safe, recorders):
    n = X.shape[0]
    options = dict(case.options)
    options.setdefault("delta", 1.0 / n**2)
    # The generated rows have unit norm: 20 entries of 1 / sqrt(20).
    options.setdefault("norm_bound", PUBLIC_NORM_BOUNDS.get(case.data, 1.0))
    est = DPSparseLogisticRegression(epsilon=case.epsilon, classes=[0, 1], random_state=seed,
                                     floating_point_safe=safe, **options)
    for recorder in recorders.values():
        recorder.results.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = clock()
        est.fit(X, y)
        elapsed = clock() - start
    results = recorders[est.solver_].results
    passes = passes_of(results[-1], n) if results else None
    return elapsed, est, passes


def sklearn_time(X, y):
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    # CPU time adds up every thread's, spinning ones too: count one thread's work.
    with threadpool_limits(1 if clock is CLOCKS["cpu"] else None):
        start = clock()
        LogisticRegression(max_iter=1000).fit(X, y)
        return clock() - start


def run(cases, data, repeats):
    rows = []
    with recording_solvers() as recorders:
        for name in dict.fromkeys(c.data for c in cases):
            X, y = data[name]
            mine = [c for c in cases if c.data == name]
            spmv = spmv_time(X)
            for case in mine:  # compile and fill the caches outside the timing
                for safe in (True, False):
                    fit_once(case, X, y, 0, safe, recorders)
            sk_times = []
            times = {(i, safe): [] for i in range(len(mine)) for safe in (True, False)}
            per_step = {key: [] for key in times}
            info = {}
            for r in range(repeats):
                sk_times.append(sklearn_time(X, y))
                for i, case in enumerate(mine):
                    for safe in (True, False):
                        elapsed, est, passes = fit_once(case, X, y, r + 1, safe, recorders)
                        times[i, safe].append(elapsed)
                        per_step[i, safe].append(elapsed / max(int(est.n_iter_), 1))
                        if safe:
                            info[i] = (est.solver_, int(est.n_iter_), passes)
            sk = float(np.median(sk_times))
            for i, case in enumerate(mine):
                fit = float(np.median(times[i, True]))
                solver, n_iter, passes = info[i]
                floor = passes * spmv if passes else None
                rows.append({
                    "case": case.label, "data": f"{name} {X.shape[0]}x{X.shape[1]}",
                    "epsilon": case.epsilon, "solver": solver, "n_iter": n_iter,
                    "fit (s)": fit, "SpMV (ms)": 1e3 * spmv,
                    "passes": None if passes is None else round(passes, 1),
                    "fit / floor": None if floor is None else fit / floor,
                    "fit / sklearn": fit / sk,
                    "safe / float": float(np.median(per_step[i, True])
                                          / np.median(per_step[i, False])),
                    "sklearn (s)": sk,
                })
    return rows


COLUMNS = ["case", "data", "epsilon", "solver", "n_iter", "fit (s)", "SpMV (ms)", "passes",
           "fit / floor", "fit / sklearn", "safe / float", "sklearn (s)"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller generated data")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="+", help="cases whose label starts with these")
    parser.add_argument("--data", nargs="+", choices=["a9a", "sparse", "sparse_small_p"],
                        help="only the cases on these data sets")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    cases = [c for c in CASES
             if (not args.only or any(c.label.startswith(word) for word in args.only))
             and (not args.data or c.data in args.data)]
    data = load({c.data for c in cases}, args.quick)
    rows = run(cases, data, args.repeats)
    print(f"# Cost model of the solvers ({'quick' if args.quick else 'full'}, "
          f"medians of {args.repeats} fits, {args.clock} time)\n")
    print(markdown_table(rows, COLUMNS, floatfmt=".3g"))


if __name__ == "__main__":
    main()
