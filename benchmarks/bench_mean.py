"""DPSparseMeanEstimator: accuracy of each method, and cost next to a non-private mean.

Accuracy: l2 error of ``mean_`` against the exact mean of the clipped rows
(L = 1, l1 bound sqrt(s)), median over seeds, on

* ``generated``: n = 1,000 rows, d = 100,000 features, s = 10 nonzeros a row,
  features drawn with Zipf weights 1/(j + 5) (a few frequent features, a long
  tail, as in text), positive values, rows scaled to unit l2 norm;
* ``generated-small``: the same with n = 100, d = 20,000, s = 5, the one regime
  here where Algorithm 2 takes its compressed-sensing branch;
* ``reuters``: the 7,770 training rows of reuters_lasvm (8,315 TF-IDF features,
  already unit l2 norm, median 31 and at most 380 nonzeros a row). The public
  sparsity is s = 100 (l1 bound 10, the bound the project's SPEC uses for these
  rows); rows with a larger l1 norm (a few, 99th percentile 12.7) are clipped.

epsilon = 1, delta = 1e-6 (the pure-DP rows use delta = 0). Time columns: median
fit time and the median time of the non-private ``X.mean(axis=0)``.

Timing: at n = 100,000, d = 1,000,000, s = 20, the fit time of the default
method (projection, floating-point-safe) against the float path
(``floating_point_safe=False``) and against a non-private sparse mean plus one
``np.sort`` of d floats (the reference cost of a sort-based projection); medians of many
interleaved runs in a random order (a fixed one gives whichever step follows the
sort cold caches), with the time of the fit's two steps (clipped mean, release; the
float fit's release too) measured alone: the Gaussian projection draws only the noise
values that can survive the projection, with the law of drawing all d, whose cost
(drawing d values, projecting them) is shown next to it. The safe against the float fit
is also given in thread CPU time (robust to other processes on a shared machine), and
at n = 10,000, d = 100,000 and n = 1,000, d = 10,000.

Run: ``python benchmarks/bench_mean.py [--quick] [--timing-only] [--repeats N]``.
Data are read from ``<repository>/../shared/data`` (override with
``SKDP_DATA_DIR``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skdp_sparse import DPSparseMeanEstimator  # noqa: E402
from skdp_sparse.exceptions import PrivacyLeakWarning  # noqa: E402
from skdp_sparse.mean._release import clipped_mean, release  # noqa: E402
from skdp_sparse.optim.projections import project_l1_ball

EPSILON = 1.0
DELTA = 1e-6

METHODS = [
    ("projection (pure)", "projection", 0.0),
    ("projection", "projection", DELTA),
    ("l1_recovery", "l1_recovery", DELTA),
    ("gaussian", "gaussian", DELTA),
    ("laplace (pure)", "laplace", 0.0),
    ("auto", "auto", DELTA),
]


def data_dir() -> Path:
    env = os.environ.get("SKDP_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


def generated_rows(n, d, s, seed=0):
    """CSR rows with at most s nonzeros (Zipf-weighted features), unit l2 norm."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / (np.arange(d) + 5.0))
    cdf /= cdf[-1]
    cols = np.minimum(np.searchsorted(cdf, rng.random(n * s)), d - 1).astype(np.int32)
    X = sp.csr_matrix(
        (rng.random(n * s) + 0.5, cols, np.arange(0, n * s + 1, s)), shape=(n, d)
    )
    X.sum_duplicates()  # a repeated feature makes a row sparser, never denser
    norms = np.sqrt(np.bincount(np.repeat(np.arange(n), np.diff(X.indptr)),
                                weights=X.data**2, minlength=n))
    X.data /= np.repeat(norms, np.diff(X.indptr))
    return X


def reuters_rows():
    from sklearn.datasets import load_svmlight_file

    path = data_dir() / "reuters_lasvm.trn.bz2"
    X, _ = load_svmlight_file(str(path), n_features=8315)
    return sp.csr_matrix(X)


def timed(f, repeats):
    times = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return out, times


def accuracy_rows(name, X, s, seeds):
    n, d = X.shape
    _, np_times = timed(lambda: np.asarray(X.mean(axis=0)).ravel(), max(5, len(seeds)))
    rows = []
    gauss_err = proj_err = None
    for label, method, delta in METHODS:
        est = DPSparseMeanEstimator(epsilon=EPSILON, delta=delta, norm_bound=1.0,
                                    sparsity=s, method=method)
        exact = clipped_mean(X, est._plan({"n_samples": n, "n_features": d}))
        errs, times = [], []
        for seed in seeds:
            est.set_params(random_state=seed)
            t0 = time.perf_counter()
            est.fit(X)
            times.append(time.perf_counter() - t0)
            errs.append(float(np.linalg.norm(est.mean_ - exact)))
        err = float(np.median(errs))
        if label == "gaussian":
            gauss_err = err
        if label == "projection":
            proj_err = err
        rows.append({
            "dataset": f"{name} (n={n}, d={d}, s={s})",
            "method": label,
            "used": est.method_,
            "m": est.n_measurements_,
            "l2 error": err,
            "error / ||mean||": err / float(np.linalg.norm(exact)),
            "fit ms": 1e3 * float(np.median(times)),
            "non-private ms": 1e3 * float(np.median(np_times)),
        })
    return rows, proj_err / gauss_err


def timed_cpu(f):
    """Wall and thread CPU time of one call (the CPU time leaves out the moments another
    process held the core, which a shared machine has many of)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    f()
    return time.perf_counter() - t0, time.thread_time() - c0


def _estimators(s):
    est = DPSparseMeanEstimator(epsilon=EPSILON, delta=DELTA, sparsity=s, random_state=0)
    flt = DPSparseMeanEstimator(epsilon=EPSILON, delta=DELTA, sparsity=s, random_state=0,
                                floating_point_safe=False)
    return est, flt


def timing(n, d, s, repeats, order="random"):
    X = generated_rows(n, d, s, seed=1)
    x = np.random.default_rng(2).normal(size=d)
    est, flt = _estimators(s)
    t0 = time.perf_counter()
    est.fit(X)  # compile and warm up; the first fit also builds the public tables
    first = time.perf_counter() - t0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        flt.fit(X)
    steps = {
        "fit": lambda: est.fit(X),
        "float fit": lambda: flt.fit(X),
        "mean": lambda: np.asarray(X.mean(axis=0)).ravel(),
        "sort": lambda: np.sort(x),
    }
    times = {k: [] for k in steps}
    cpu = {k: [] for k in steps}
    shuffle = np.random.default_rng(4)
    # Interleaved, so a busy moment of the machine hits all three alike. The order
    # changes at random from one repeat to the next: whichever runs right after the
    # sort finds X evicted from the caches, and whichever runs right after the fit
    # finds it loaded, so a fixed order (the "fixed" option: fit, mean, sort) favours
    # the mean over the fit. Medians.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        for _ in range(repeats):
            names = list(steps) if order == "fixed" else shuffle.permutation(list(steps))
            for k in names:
                wall, c = timed_cpu(steps[k])
                times[k].append(wall)
                cpu[k].append(c)
    fit_t, mean_t, sort_t = times["fit"], times["mean"], times["sort"]
    ref = float(np.median(mean_t) + np.median(sort_t))
    # where a fit's time goes: the clipped mean and the release the fit runs on it (and
    # the float fit's release), next to the three steps of the unsampled release (all d
    # noise values drawn)
    plan = est._plan({"n_samples": n, "n_features": d})
    fplan = flt._plan({"n_samples": n, "n_features": d})
    rng = np.random.default_rng(3)
    mean = clipped_mean(X, plan)
    clip_t, release_t, frelease_t, noise_t, proj_t = [], [], [], [], []
    noisy = mean + plan.mechanism.randomise(np.zeros(d), rng)
    for _ in range(repeats):
        clip_t += timed(lambda: clipped_mean(X, plan), 1)[1]
        release_t += timed(lambda: release(mean, plan, rng), 1)[1]
        frelease_t += timed(lambda: release(mean, fplan, rng), 1)[1]
        noise_t += timed(lambda: plan.mechanism.randomise(np.zeros(d), rng), 1)[1]
        proj_t += timed(lambda: project_l1_ball(noisy, plan.radius), 1)[1]

    def med(v):
        return 1e3 * float(np.median(v))

    return {
        "size": f"n={n}, d={d}, s={s}, nnz={X.nnz}",
        "method": est.method_,
        "repeats": repeats,
        "order": order,
        "first fit ms": 1e3 * first,
        "fit ms": med(fit_t),
        "float fit ms": med(times["float fit"]),
        "non-private mean ms": med(mean_t),
        "sort ms": med(sort_t),
        "clipped mean ms": med(clip_t),
        "fit's release ms": med(release_t),
        "float fit's release ms": med(frelease_t),
        "d noise values ms": med(noise_t),
        "full projection ms": med(proj_t),
        "ratio fit / (mean + sort)": float(np.median(fit_t)) / ref,
        "ratio float fit / (mean + sort)": float(np.median(times["float fit"])) / ref,
        "ratio fit / float fit": float(np.median(fit_t) / np.median(times["float fit"])),
        "same, CPU time": float(np.median(cpu["fit"]) / np.median(cpu["float fit"])),
    }


def safe_against_float(n, d, s, repeats):
    """The default (floating-point-safe) fit against the float fit at one size: medians of
    interleaved fits in a random order, wall and thread CPU time."""
    X = generated_rows(n, d, s, seed=1)
    est, flt = _estimators(s)
    steps = {"fit": lambda: est.fit(X), "float fit": lambda: flt.fit(X)}
    wall = {k: [] for k in steps}
    cpu = {k: [] for k in steps}
    shuffle = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        for f in steps.values():
            f()
        for _ in range(repeats):
            for k in shuffle.permutation(list(steps)):
                w, c = timed_cpu(steps[k])
                wall[k].append(w)
                cpu[k].append(c)
    fit, flo = np.median(wall["fit"]), np.median(wall["float fit"])
    return {
        "size": f"n={n}, d={d}, s={s}",
        "repeats": repeats,
        "fit ms": 1e3 * float(fit),
        "float fit ms": 1e3 * float(flo),
        "ratio fit / float fit": float(fit / flo),
        "same, CPU time": float(np.median(cpu["fit"]) / np.median(cpu["float fit"])),
    }


def markdown(rows, columns):
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    out += ["| " + " | ".join(fmt(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(out)


def accuracy(seeds):
    rows, ratios = [], {}
    for name, X, s in [
        ("generated", generated_rows(1000, 100_000, 10), 10),
        ("generated-small", generated_rows(100, 20_000, 5), 5),
        ("reuters", reuters_rows(), 100),
    ]:
        r, ratios[name] = accuracy_rows(name, X, s, seeds)
        rows += r
    print(f"## Accuracy (epsilon={EPSILON}, delta={DELTA}; median over {len(seeds)} seeds)\n")
    print(markdown(rows, ["dataset", "method", "used", "m", "l2 error", "error / ||mean||",
                          "fit ms", "non-private ms"]))
    print()
    for name, ratio in ratios.items():
        print(f"- {name}: projection error / gaussian error = {ratio:.4f}")
    target = ratios["generated"] <= 0.1
    print(f"- target projection <= 0.1 x gaussian on generated data: "
          f"{'met' if target else 'NOT met'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, smaller timing size")
    parser.add_argument("--timing-only", action="store_true",
                        help="only the cost of a fit against the non-private baseline")
    parser.add_argument("--repeats", type=int, default=None,
                        help="repeats of the timing (default 101, 11 with --quick)")
    args = parser.parse_args(argv)
    seeds = range(3) if args.quick else range(20)

    if not args.timing_only:
        accuracy(seeds)
    size = (10_000, 100_000, 20) if args.quick else (100_000, 1_000_000, 20)
    repeats = args.repeats or (11 if args.quick else 101)
    t = timing(*size, repeats=repeats)
    print("\n## Cost of a fit against a non-private mean plus one sort of d floats\n")
    print(markdown([t], list(t)))
    print(f"\n- target ratio <= 1: {'met' if t['ratio fit / (mean + sort)'] <= 1 else 'NOT met'}")
    safe = t["ratio fit / float fit"]
    print(f"- target safe fit <= 1.3 x float fit: {'met' if safe <= 1.3 else 'NOT met'}")
    smaller = [(1000, 10_000, 10)] if args.quick else [(10_000, 100_000, 20), (1000, 10_000, 10)]
    rows = [safe_against_float(*size, repeats=4 * repeats) for size in smaller]
    print("\n## The safe fit against the float fit at smaller sizes\n")
    print(markdown(rows, list(rows[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
