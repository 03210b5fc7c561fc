"""Speed of the sparse gradient solvers and of the first fit in a new process.

Four tables, each figure the median of ``--repeats`` runs (ratios from runs interleaved
in one process, so both sides see the same machine load):

* ``sparse_sgd`` (DP-AdaFEST) at p = 10^6 against p = 10^4: ``--n`` rows (2 x 10^5) with
  20 non-zeros each, batch 2,000, 200 steps, epsilon 1, delta 1/n^2, on both paths
  (floating-point-safe, the default, and float). Two designs: ``same rows`` (the very
  same matrix, its columns below 10^4, declared 10^4 or 10^6 wide) and ``uniform``
  (columns uniform over p: the rows of the wide matrix touch 100 times more distinct
  features, the memory-bound case);
* ``sparse_sgd`` against dense ``sgd`` with the same batch size and steps on the click log
  of ``bench_sgd.py`` (10^5 rows, 10 one-hot fields over 10^6 values), milliseconds a
  step (fit time over steps) and the ratio;
* ``bias_reduced_sgd`` on a 10^5 x 10^6 CSR matrix with 10^6 non-zeros (10 a row) at
  epsilon 1, delta 1/n^2: fit time, steps, the wall and CPU time a step, the number of
  steps its privacy filter allows on average (from public values) and the CPU time of
  such a run at that rate (``--bias-reduced-max-iter`` stops runs early);
* the quickstart (``examples/quickstart.py``) in a new process on an empty
  ``NUMBA_CACHE_DIR``: wall and CPU time, the import of ``skdp_sparse``, the time of the
  first projection mean (the first fit; it compiles the kernels it runs) and the number
  of Numba compilations started, and the same again with the cache it filled.

Run: ``python benchmarks/bench_speed_sparse.py [--quick] [--repeats 3]``; ``--quick``
runs 10^5 rows, fewer steps, and the quickstart once.
"""

from __future__ import annotations

import argparse
import math
import os
import re
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
from bench_sgd import click_log  # noqa: E402

from skdp_sparse import DPSparseLogisticRegression  # noqa: E402
from skdp_sparse.exceptions import PrivacyLeakWarning  # noqa: E402
from skdp_sparse.solvers.bias_reduced_sgd import (  # noqa: E402
    step_privacy,
    truncated_geometric_probs,
)

ROOT = Path(__file__).resolve().parents[1]


def rows_matrix(n, width, nnz, columns, seed=0):
    """``n`` rows of ``nnz`` entries ``1/sqrt(nnz)`` in columns uniform below ``columns``,
    declared ``width`` wide, and random labels."""
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, columns, size=(n, nnz))
    X = sp.csr_matrix((np.full(n * nnz, 1 / math.sqrt(nnz)), cols.ravel(),
                       np.arange(0, n * nnz + 1, nnz)), shape=(n, width))
    X.sum_duplicates()
    return X, (rng.random(n) < 0.5).astype(int)


def _fit_time(X, y, seed, **params):
    model = DPSparseLogisticRegression(epsilon=1.0, delta=1.0 / X.shape[0] ** 2,
                                       classes=[0, 1], random_state=seed, **params)
    start = time.perf_counter()
    model.fit(X, y)
    return time.perf_counter() - start, model


def _medians(cases, repeats):
    """Median fit time of every case, the cases interleaved in each round (after one
    warm-up fit each, which compiles and loads the kernels)."""
    for X, y, params in cases.values():
        _fit_time(X[:2000], y[:2000], 0, **params)
    times = {key: [] for key in cases}
    models = {}
    for seed in range(repeats):
        for key, (X, y, params) in cases.items():
            seconds, models[key] = _fit_time(X, y, seed, **params)
            times[key].append(seconds)
    return {key: float(np.median(v)) for key, v in times.items()}, models


def width_rows(n, steps, repeats):
    narrow, wide = 10_000, 1_000_000
    designs = {"same rows": rows_matrix(n, narrow, 20, narrow),
               "uniform": None}
    rows = []
    for design in designs:
        for safe in (True, False):
            cases = {}
            for width in (narrow, wide):
                if design == "same rows":
                    X, y = designs[design]
                    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(n, width))
                else:
                    X, y = rows_matrix(n, width, 20, width)
                cases[width] = (X, y, dict(solver="sparse_sgd", batch_size=2000,
                                           max_iter=steps, floating_point_safe=safe))
            med, _ = _medians(cases, repeats)
            rows.append({"design": design, "path": "safe" if safe else "float",
                         "p = 1e4 (s)": med[narrow], "p = 1e6 (s)": med[wide],
                         "1e6 / 1e4": med[wide] / med[narrow]})
    return rows


def click_rows(steps, repeats):
    data = click_log()
    X, y = data.X_train, data.y_train
    batch = 4800  # the default batch of sparse_sgd at this n and p
    rows = []
    for safe in (True, False):
        cases = {solver: (X, y, dict(solver=solver, batch_size=batch, max_iter=steps,
                                     floating_point_safe=safe))
                 for solver in ("sparse_sgd", "sgd")}
        med, _ = _medians(cases, repeats)
        rows.append({"path": "safe" if safe else "float", "steps": steps,
                     "sparse_sgd (ms/step)": 1e3 * med["sparse_sgd"] / steps,
                     "sgd (ms/step)": 1e3 * med["sgd"] / steps,
                     "sparse_sgd / sgd": med["sparse_sgd"] / med["sgd"]})
    return rows


def expected_filter_steps(n, epsilon, delta):
    """Expected number of steps the paper's privacy filter of ``bias_reduced_sgd``
    allows (the rule its default learning rate uses), from public values."""
    M = max(int(math.floor(math.log2(n))) - 1, 0)
    probs = truncated_geometric_probs(M)
    params = np.array([step_privacy(k, n, epsilon, delta, "paper") for k in range(M + 1)])
    eps_f, log_inv = epsilon / 2, math.log(4 / delta)
    return min(eps_f**2 / (2 * log_inv * float(probs @ params[:, 0] ** 2)),
               delta / 4 / float(probs @ params[:, 1]))


def bias_reduced_rows(n, repeats, max_iter):
    X, y = rows_matrix(n, 1_000_000, 10, 1_000_000)
    params = dict(solver="bias_reduced_sgd", max_iter=max_iter)
    med, models = _medians({"fit": (X, y, params)}, repeats)
    cpu = []
    for seed in range(repeats):
        start = time.process_time()
        _fit_time(X, y, seed, **params)
        cpu.append(time.process_time() - start)
    steps = models["fit"].n_iter_
    per_step = float(np.median(cpu)) / max(steps, 1)
    expected = expected_filter_steps(n, 1.0, 1.0 / n**2)
    return [{"data": f"{n:.0e} x 1e6, {X.nnz:.2g} nnz", "max_iter": max_iter,
             "fit (s)": med["fit"], "steps": steps,
             "ms / step": 1e3 * med["fit"] / max(steps, 1),
             "CPU ms / step": 1e3 * per_step, "filter steps (expected)": expected,
             "CPU s, whole run (estimate)": per_step * expected}]


_PROJECTION = re.compile(r"projection: .* (\d+) ms")
_COMPILED = re.compile(r"numba compilations: (\d+)")
# Runs the quickstart and counts the Numba compilations it starts (nested ones included).
_COUNTING = """
import runpy, sys
from numba.core import event
class Count(event.Listener):
    n = 0
    def on_start(self, ev):
        Count.n += 1
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
print("numba compilations:", Count.n)
"""


def _quickstart(cache):
    env = {**os.environ, "NUMBA_CACHE_DIR": cache,
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = os.times()
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", _COUNTING,
                          str(ROOT / "examples" / "quickstart.py")],
                         env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user
           + after.children_system - before.children_system)
    imports = [line for line in out.stderr.splitlines() if line.endswith("| skdp_sparse")]
    import_s = int(imports[-1].split("|")[1]) / 1e6 if imports else math.nan
    found = _PROJECTION.search(out.stdout)
    first = int(found.group(1)) / 1e3 if found else math.nan
    return wall, cpu, import_s, first, int(_COMPILED.search(out.stdout).group(1))


def quickstart_rows(repeats):
    fresh, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            fresh.append(_quickstart(cache))
            warm.append(_quickstart(cache))
    rows = []
    for label, runs in (("empty cache", fresh), ("cache filled", warm)):
        wall, cpu, imp, first, compiled = (float(np.median(v))
                                           for v in zip(*runs, strict=True))
        rows.append({"NUMBA_CACHE_DIR": label, "quickstart wall (s)": wall,
                     "quickstart CPU (s)": cpu, "import skdp_sparse (s)": imp,
                     "first projection mean (s)": first, "Numba compilations": compiled})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tables", nargs="+",
                        default=["width", "click", "bias_reduced", "quickstart"])
    parser.add_argument("--bias-reduced-max-iter", type=int, default=None,
                        help="stop bias_reduced_sgd after this many steps (default: its filter)")
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else 200_000
    steps = 100 if args.quick else 200
    warnings.simplefilter("ignore", PrivacyLeakWarning)

    if "width" in args.tables:
        print(f"## sparse_sgd, {n:.0e} rows x 20 non-zeros, batch 2000, {steps} steps "
              f"(median of {args.repeats})\n")
        print(markdown_table(width_rows(n, steps, args.repeats),
                             ["design", "path", "p = 1e4 (s)", "p = 1e6 (s)", "1e6 / 1e4"],
                             floatfmt=".3f"), flush=True)
    if "click" in args.tables:
        print(f"\n## sparse_sgd against sgd, click log (p = 1e6), batch 4800 "
              f"(median of {args.repeats})\n")
        print(markdown_table(click_rows(10 if args.quick else 20, args.repeats),
                             ["path", "steps", "sparse_sgd (ms/step)", "sgd (ms/step)",
                              "sparse_sgd / sgd"], floatfmt=".3f"), flush=True)
    if "bias_reduced" in args.tables:
        print(f"\n## bias_reduced_sgd, 1e5 x 1e6 (median of {args.repeats})\n")
        print(markdown_table(bias_reduced_rows(100_000, args.repeats,
                                               args.bias_reduced_max_iter),
                             ["data", "max_iter", "fit (s)", "steps", "ms / step",
                              "CPU ms / step", "filter steps (expected)",
                              "CPU s, whole run (estimate)"],
                             floatfmt=".3f"), flush=True)
    if "quickstart" in args.tables:
        repeats = 1 if args.quick else args.repeats
        print(f"\n## examples/quickstart.py in a new process (median of {repeats})\n")
        print(markdown_table(quickstart_rows(repeats),
                             ["NUMBA_CACHE_DIR", "quickstart wall (s)",
                              "quickstart CPU (s)", "import skdp_sparse (s)",
                              "first projection mean (s)", "Numba compilations"],
                             floatfmt=".2f"), flush=True)


if __name__ == "__main__":
    main()
