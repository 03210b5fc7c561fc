"""Fits on dask arrays against the same fits in memory, and a fit beyond memory.

Part 1 (overhead): rows with ``--nnz`` nonzeros and features ``--features`` wide,
``--rows`` of them, generated block by block; each fit runs in memory (one
process, the rows vstacked) and on a ``LocalCluster`` of ``--workers`` worker
processes (one thread each) for each number of blocks in ``--blocks``, on the same
rows. Times are medians of ``--repeats`` runs made side by side; the ratio is dask
over in memory. The dask time includes validating and persisting the blocks on the
workers (the rows themselves are generated and persisted on the workers first,
as a user's data would be).

``--only`` keeps the fits of part 1 whose name starts with the words given (``greedy``
for the ``greedy_cd`` rows); ``--gcd-steps`` sets greedy_cd's steps (0: its default).

Part 2 (large): ``--big-rows`` x ``--big-features`` generated on workers with a
memory limit of ``--memory-limit`` each, fitted with the mean, ``sgd`` and
``greedy_cd`` (``--big-gcd-steps`` steps); the fit's time and the time per pass
over the rows (the mean is one pass, each sgd step one pass; for greedy_cd, whose
step reads the rows of one column, the time per step, its setup included), and the
peak resident memory of each worker, next to the same fit in one process where it
fits. ``--skip-overhead`` runs part 2 alone.

    python benchmarks/bench_dask.py [--quick] [--skip-overhead]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import statistics
import time

import dask
import dask.array as da
import distributed
import numpy as np
import scipy.sparse as sp

from skdp_sparse import DPSparseLogisticRegression, DPSparseMeanEstimator


def make_block(seed, m, p, k):
    """``m`` rows of ``k`` nonzeros (uniform columns, normal values) and labels from a
    fixed sparse model; the same for a given seed, wherever it is generated."""
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, p, size=m * k)
    vals = rng.normal(size=m * k) / np.sqrt(k)
    X = sp.csr_matrix((vals, cols, np.arange(0, m * k + 1, k)), shape=(m, p))
    X.sum_duplicates()
    truth = np.random.default_rng(12345)
    support = truth.integers(0, p, size=200)
    w = np.zeros(p)
    w[support] = truth.normal(size=200) * 3
    y = (X @ w + 0.3 * rng.normal(size=m) > 0).astype(np.int64)
    return X, y


def _x(pair):
    return pair[0]


def _y(pair):
    return pair[1]


def dask_rows(n, p, k, blocks, seed=0):
    """``(X, y)`` dask arrays of ``blocks`` row blocks, generated on the workers."""
    sizes = [n // blocks + (b < n % blocks) for b in range(blocks)]
    pairs = [dask.delayed(make_block)(seed + b, m, p, k) for b, m in enumerate(sizes)]
    meta = sp.csr_matrix((0, p))
    X = da.concatenate([da.from_delayed(dask.delayed(_x)(q), shape=(m, p), dtype=np.float64,
                                        meta=meta) for q, m in zip(pairs, sizes, strict=True)])
    y = da.concatenate([da.from_delayed(dask.delayed(_y)(q), shape=(m,), dtype=np.int64)
                        for q, m in zip(pairs, sizes, strict=True)])
    return X, y, sizes


def local_rows(n, p, k, blocks, seed=0):
    sizes = [n // blocks + (b < n % blocks) for b in range(blocks)]
    parts = [make_block(seed + b, m, p, k) for b, m in enumerate(sizes)]
    return sp.vstack([q[0] for q in parts], format="csr"), np.concatenate([q[1] for q in parts])


def fits(n, k, sgd_steps, gcd_steps=50):
    """The timed fits: name -> (estimator factory, needs y, passes over the rows)."""
    delta = 1.0 / n**2
    return {
        "mean (projection)": (lambda: DPSparseMeanEstimator(
            epsilon=1.0, delta=delta, sparsity=k, method="projection", random_state=0),
            False, 1),
        f"sgd full batch ({sgd_steps} steps)": (lambda: DPSparseLogisticRegression(
            solver="sgd", epsilon=1.0, delta=delta, classes=[0, 1], max_iter=sgd_steps,
            random_state=0), True, sgd_steps),
        f"sgd Poisson q=0.1 ({sgd_steps} steps)": (lambda: DPSparseLogisticRegression(
            solver="sgd", epsilon=1.0, delta=delta, classes=[0, 1], max_iter=sgd_steps,
            batch_size=n // 10, random_state=0), True, sgd_steps),
        # A greedy step reads only the rows of one column, so its fit is not counted
        # in passes (the large part times it per step); norm_bound above the rows'
        # norms makes curvature="auto" release the second moments, one more pass on
        # the blocks.
        # The l2 penalty: under the default l1 one at this epsilon the prox keeps
        # nearly every noisy step at 0, and a step that moves nothing costs no round
        # trip, which would time the setup alone.
        f"greedy_cd ({gcd_steps or 'default'} steps)": (lambda: DPSparseLogisticRegression(
            solver="greedy_cd", epsilon=1.0, delta=delta, classes=[0, 1], penalty="l2",
            max_iter=gcd_steps or None, norm_bound=2.0, random_state=0), True, None),
    }


def _selected(table, only):
    return {name: fit for name, fit in table.items()
            if not only or any(name.startswith(word) for word in only)}


def timed(fit):
    start = time.perf_counter()
    fit()
    return time.perf_counter() - start


def markdown(rows, header):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def overhead(args):
    n, p, k = args.rows, args.features, args.nnz
    table = []
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1,
                                  processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        for blocks in args.blocks:
            X, y = local_rows(n, p, k, blocks)
            Xd, yd, _ = dask_rows(n, p, k, blocks)
            Xd, yd = client.persist([Xd, yd])
            distributed.wait([Xd, yd])
            for name, (make, supervised, _) in _selected(
                    fits(n, k, args.sgd_steps, args.gcd_steps), args.only).items():
                data_local = (X, y) if supervised else (X,)
                data_dask = (Xd, yd) if supervised else (Xd,)
                # Warm up both (Numba compilation in this process and the workers).
                make().fit(*data_local)
                make().fit(*data_dask)
                local, remote = [], []
                for _ in range(args.repeats):  # side by side
                    local.append(timed(lambda m=make, d=data_local: m().fit(*d)))
                    remote.append(timed(lambda m=make, d=data_dask: m().fit(*d)))
                t_local, t_dask = statistics.median(local), statistics.median(remote)
                table.append([name, f"{n:.0e}", f"{p:.0e}", blocks, args.workers,
                              f"{t_local:.2f}", f"{t_dask:.2f}", f"{t_dask / t_local:.2f}"])
                print(table[-1], flush=True)
            del Xd, yd
            client.cancel(list(client.futures))
    return markdown(table, ["fit", "rows", "features", "blocks", "workers",
                            "in memory (s)", "dask (s)", "ratio"])


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _large_fits(args, n):
    """The fits of part 2: name -> (factory, needs y, passes or None for greedy_cd)."""
    table = fits(n, args.nnz, args.big_sgd_steps, args.big_gcd_steps)
    return {name: fit for name, fit in table.items() if "Poisson" not in name}


def _time_per_unit(make, data, passes):
    """``(time per pass or per step, unit, fit time)``: greedy_cd (``passes`` None)
    per step of its fitted ``n_iter_``, after a warm-up fit."""
    make().fit(*data)  # warm-up: Numba compiles (in the workers too)
    start = time.perf_counter()
    model = make().fit(*data)
    elapsed = time.perf_counter() - start
    if passes is None:
        return elapsed / max(int(model.n_iter_), 1), "step", elapsed
    return elapsed / passes, "pass", elapsed


def _in_memory_large(args, queue):
    n, p, k = args.big_rows, args.big_features, args.nnz
    X, y = local_rows(n, p, k, args.big_blocks)
    out = {}
    for name, (make, supervised, passes) in _large_fits(args, n).items():
        data = (X, y) if supervised else (X,)
        out[name] = _time_per_unit(make, data, passes)
    out["peak"] = _peak_mib()
    queue.put(out)


def large(args):
    n, p, k = args.big_rows, args.big_features, args.nnz
    table = []
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1,
                                  processes=True, dashboard_address=None,
                                  memory_limit=args.memory_limit) as cluster, \
            distributed.Client(cluster) as client:
        Xd, yd, _ = dask_rows(n, p, k, args.big_blocks)
        Xd, yd = client.persist([Xd, yd])
        distributed.wait([Xd, yd])
        for name, (make, supervised, passes) in _large_fits(args, n).items():
            data = (Xd, yd) if supervised else (Xd,)
            per_unit, unit, elapsed = _time_per_unit(make, data, passes)
            peaks = client.run(_peak_mib)
            table.append([name, f"{n:.0e}", f"{p:.0e}", args.big_blocks, args.workers,
                          "dask", f"{elapsed:.1f}", f"{per_unit:.3f} a {unit}",
                          f"{max(peaks.values()):.0f}"])
            print(table[-1], flush=True)
    if not args.skip_in_memory:
        queue = multiprocessing.get_context("spawn").Queue()
        proc = multiprocessing.get_context("spawn").Process(target=_in_memory_large,
                                                            args=(args, queue))
        proc.start()
        got = queue.get()
        proc.join()
        for name, timing in got.items():
            if name != "peak":
                per_unit, unit, elapsed = timing
                table.append([name, f"{n:.0e}", f"{p:.0e}", "-", 1, "in memory",
                              f"{elapsed:.1f}", f"{per_unit:.3f} a {unit}",
                              f"{got['peak']:.0f}"])
    return markdown(table, ["fit", "rows", "features", "blocks", "workers", "where",
                            "fit (s)", "time per pass or step (s)",
                            "peak memory per process (MiB)"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--features", type=int, default=50_000)
    parser.add_argument("--nnz", type=int, default=20)
    parser.add_argument("--blocks", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sgd-steps", type=int, default=10)
    parser.add_argument("--gcd-steps", type=int, default=50,
                        help="steps of greedy_cd; 0: its default from epsilon and n")
    parser.add_argument("--only", nargs="+",
                        help="part 1: only the fits whose name starts with these")
    parser.add_argument("--big-rows", type=int, default=4_000_000)
    parser.add_argument("--big-features", type=int, default=1_000_000)
    parser.add_argument("--big-blocks", type=int, default=16)
    parser.add_argument("--big-sgd-steps", type=int, default=3)
    parser.add_argument("--big-gcd-steps", type=int, default=20)
    parser.add_argument("--memory-limit", default="3GiB")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-in-memory", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.features, args.blocks, args.repeats = 20_000, 5_000, [2, 8], 1
        args.big_rows, args.big_features, args.big_blocks = 200_000, 100_000, 4
    if not args.skip_overhead:
        print(overhead(args), flush=True)
    if not args.skip_large:
        print(large(args), flush=True)


if __name__ == "__main__":
    main()
