"""The default private fits at the scale of text and click logs: time and peak memory.

Generates a CSR matrix block by block (seeded): ``--rows`` rows, ``--features``
columns, on average ``--nnz`` non-zeros a row (uniform in ``[nnz/2, 3 nnz/2]``),
columns drawn from a power law (column ``j`` of the frequency order has frequency
about ``1/(j+1)``, as words or click-log values; the order is a fixed permutation of
the columns), values ``log(1 + count)`` with every row scaled to unit l2 norm, so
``norm_bound=1`` is the public bound. Labels come from a sparse linear model on the
frequent columns (binary, 5 classes by the argmax of 5 scores, and a regression target
in ``[-1, 1]``). ``--index-dtype int64`` and ``--dtype float32`` store the matrix as
scipy does for very large matrices and as a user short of memory would.

Each fit runs in a new process that loads the saved matrix, runs the same fit on 2,000
of its rows first (Numba kernels compiled or read from the cache, imports done), then
resets the peak resident set (``/proc/self/clear_refs``) and times the fit: wall time,
CPU time (user + system), the peak resident set during the fit (``VmHWM``: the whole
process, the loaded data and the interpreter included), the size of X (data, indices
and indptr) and ``peak/X``, the memory the fit held at its peak counted in copies of X
(``(peak - resident set before the fit + X) / X``: 1 is X alone). ``sklearn s`` is the
non-private scikit-learn fit (``LogisticRegression(solver="lbfgs")``,
``Ridge(solver="sparse_cg")``) in the same kind of process, for the estimators named by
``--sklearn-for`` (all by default). Every private fit uses its estimator's defaults with
the public bounds a user gives: ``epsilon=1``, ``delta=1/n^2``, ``norm_bound=1``,
``classes``, ``target_bounds=(-1, 1)``, ``sparsity`` (the generator's largest row) for
the selection, and ``bounds=(0, 1)`` for the scaler; the rows naming a solver set
``solver`` (``sgd mb`` also ``batch_size=1000``). The estimator column names the solver
the fit ran.

Run: ``python benchmarks/bench_scale.py [--quick] [--rows N] [--features P] [--nnz S]
[--index-dtype int64] [--dtype float32] [--only NAME ...] [--no-sklearn]
[--sklearn-for NAME ...] [--timeout S]``. The default is 10^6 rows, 10^7 columns, 30
non-zeros a row (332 MB); ``--quick`` is 2 x 10^4 rows and 10^6 columns.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import markdown_table  # noqa: E402

COLUMNS = ["rows", "features", "nnz", "estimator/solver", "fit s", "CPU s",
           "peak RSS MB", "X MB", "peak/X", "sklearn s"]
BLOCK = 50_000


def generate(n, p, nnz, seed, index_dtype, dtype):
    """CSR rows with power-law column frequencies, unit l2 norm, and three targets."""
    rng = np.random.default_rng(seed)
    # The frequency order is a permutation of the columns: frequent columns are spread
    # over the index range, as a hashed vocabulary's are.
    order = rng.permutation(p).astype(index_dtype)
    informative = order[:200]
    weights = rng.standard_normal((5, informative.size))
    data, indices, indptr = [], [], [np.zeros(1, dtype=np.int64)]
    scores = np.empty((n, 5))
    offset = 0
    for start in range(0, n, BLOCK):
        m = min(BLOCK, n - start)
        counts = rng.integers(nnz // 2, nnz + nnz // 2 + 1, size=m)
        ranks = np.floor(np.exp(rng.random(counts.sum()) * np.log(p + 1.0))).astype(np.int64) - 1
        rows = np.repeat(np.arange(m), counts)
        block = sp.coo_matrix((np.ones(rows.size), (rows, order[ranks])), shape=(m, p)).tocsr()
        block.sum_duplicates()
        block.data = np.log1p(block.data)
        norms = np.sqrt(np.asarray(block.multiply(block).sum(axis=1)).ravel())
        block.data /= np.repeat(np.maximum(norms, 1e-12), np.diff(block.indptr))
        scores[start:start + m] = block[:, informative] @ weights.T
        data.append(block.data.astype(dtype))
        indices.append(block.indices.astype(index_dtype))
        indptr.append(block.indptr[1:].astype(np.int64) + offset)
        offset += block.nnz
    X = _csr(np.concatenate(data), np.concatenate(indices),
             np.concatenate(indptr).astype(index_dtype), (n, p))
    scores -= scores.mean(axis=0)
    y_binary = (scores[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(np.int64)
    y_multi = np.argmax(scores + 0.5 * rng.standard_normal((n, 5)), axis=1)
    y_reg = np.clip(scores[:, 0] / (3 * scores[:, 0].std() + 1e-12), -1, 1)
    return X, y_binary, y_multi, y_reg


def _csr(data, indices, indptr, shape):
    """A CSR matrix on these very arrays: scipy narrows int64 index arrays whose values
    fit in int32, where a matrix with more non-zeros than 2^31 keeps them."""
    X = sp.csr_matrix((data, indices, indptr), shape=shape)
    X.indices, X.indptr = indices, indptr
    return X


def x_megabytes(X):
    return (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / 2**20


def estimators(n, nnz):
    """name -> (factory of the private fit, target, scikit-learn factory or None)."""
    from sklearn.linear_model import LogisticRegression, Ridge

    from skdp_sparse import (
        DPGreedyCDRegressor,
        DPSparseLogisticRegression,
        DPSparseMeanEstimator,
        DPStandardScaler,
    )
    from skdp_sparse.feature_selection import DPSelectKBest

    delta = 1.0 / n ** 2
    sparsity = nnz + nnz // 2  # the generator's largest row
    common = dict(epsilon=1.0, delta=delta, norm_bound=1.0, random_state=0)

    def logistic(**kw):
        return lambda: DPSparseLogisticRegression(classes=[0, 1], **common, **kw)

    return {
        "logistic (default)": (logistic(), "binary",
                               lambda: LogisticRegression(solver="lbfgs")),
        "logistic 5 classes": (
            lambda: DPSparseLogisticRegression(classes=list(range(5)), **common), "multi",
            lambda: LogisticRegression(solver="lbfgs")),
        "greedy CD regressor": (
            lambda: DPGreedyCDRegressor(target_bounds=(-1.0, 1.0), **common), "reg",
            lambda: Ridge(solver="sparse_cg")),
        "mean": (lambda: DPSparseMeanEstimator(**common), None, None),
        "select k best": (lambda: DPSelectKBest(k=1000, classes=[0, 1], sparsity=sparsity,
                                                **common), "binary", None),
        "scaler": (lambda: DPStandardScaler(bounds=(0.0, 1.0), with_mean=False,
                                            epsilon=1.0, delta=delta, random_state=0),
                   None, None),
        "logistic sgd": (logistic(solver="sgd"), "binary", None),
        "logistic sgd mb": (logistic(solver="sgd", batch_size=1000), "binary", None),
        "logistic sparse_sgd": (logistic(solver="sparse_sgd"), "binary", None),
        "logistic greedy_cd": (logistic(solver="greedy_cd"), "binary", None),
        "logistic screened_newton": (logistic(solver="screened_newton"), "binary", None),
    }


def _proc_status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(path, name, nnz, sklearn):
    """One measured fit in this process; prints a JSON line."""
    import skdp_sparse  # noqa: F401  (imports outside the measure)
    loaded = np.load(path)
    X = _csr(loaded["data"], loaded["indices"], loaded["indptr"], tuple(loaded["shape"]))
    n = X.shape[0]
    make, target, make_sklearn = estimators(n, int(nnz))[name]
    y = None if target is None else loaded["y_" + target]
    factory = make_sklearn if sklearn else make
    if factory is None:
        print(json.dumps(None))
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        small = min(n, 2000)
        factory().fit(X[:small], None if y is None else y[:small])
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _proc_status("VmRSS")
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        est = factory().fit(X, y)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps(dict(wall=wall, cpu=cpu, peak=_proc_status("VmHWM"), base=base,
                          solver=getattr(est, "solver_", None))))


def run_one(path, name, nnz, sklearn, timeout):
    cmd = [sys.executable, __file__, "--worker", path, name, str(nnz)] + \
        (["--sklearn"] if sklearn else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout} s"}
    if out.returncode:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:120]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2e4 rows, 1e6 columns")
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--features", type=float, default=1e7)
    parser.add_argument("--nnz", type=int, default=30, help="mean non-zeros a row")
    parser.add_argument("--index-dtype", choices=["int32", "int64"], default="int32")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--only", nargs="*", help="estimator names to run (default all)")
    parser.add_argument("--no-sklearn", action="store_true", help="skip scikit-learn")
    parser.add_argument("--sklearn-for", nargs="*",
                        help="run scikit-learn next to these estimator names only")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds a fit may take before it is stopped")
    parser.add_argument("--sklearn-timeout", type=float, default=1200.0,
                        help="seconds a scikit-learn fit may take")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--sklearn", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker, args.sklearn)
        return
    if args.quick:
        args.rows, args.features = 2e4, 1e6
    n, p = int(args.rows), int(args.features)
    X, y_binary, y_multi, y_reg = generate(n, p, args.nnz, args.seed,
                                           np.dtype(args.index_dtype), np.dtype(args.dtype))
    names = list(estimators(n, args.nnz))
    if args.only:
        unknown = set(args.only) - set(names)
        if unknown:
            parser.error(f"unknown --only {sorted(unknown)}; choose from {names}")
        names = args.only
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr,
                 shape=np.array(X.shape), y_binary=y_binary, y_multi=y_multi, y_reg=y_reg)
        x_mb = x_megabytes(X)
        print(f"X: {n} x {p}, {X.nnz} non-zeros, {X.data.dtype} data, "
              f"{X.indices.dtype} indices, {x_mb:.0f} MB", file=sys.stderr, flush=True)
        del X
        for name in names:
            res = run_one(path, name, args.nnz, False, args.timeout)
            skip = args.no_sklearn or (args.sklearn_for is not None
                                       and name not in args.sklearn_for)
            ref = None if skip else run_one(path, name, args.nnz, True,
                                                       args.sklearn_timeout)
            row = {"rows": n, "features": p, "nnz": int(np.load(path)["indptr"][-1]),
                   "X MB": round(x_mb), "estimator/solver": name}
            if res and "error" not in res:
                label = f"{name} ({res['solver']})" if res.get("solver") else name
                row.update({"estimator/solver": label, "fit s": res["wall"],
                            "CPU s": res["cpu"], "peak RSS MB": round(res["peak"]),
                            "peak/X": (res["peak"] - res["base"] + x_mb) / x_mb})
            elif res:
                row["fit s"] = res["error"]
            if ref and "error" not in ref:
                row["sklearn s"] = ref["wall"]
            elif ref:
                row["sklearn s"] = ref["error"]
            rows.append(row)
            # Progress on stderr: stdout holds the one table.
            print(markdown_table([row], COLUMNS, floatfmt=".1f").splitlines()[-1],
                  file=sys.stderr, flush=True)
    print()
    print(markdown_table(rows, COLUMNS, floatfmt=".1f"))


if __name__ == "__main__":
    main()
