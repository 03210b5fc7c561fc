"""Cost of floating-point-safe noise against the textbook float path.

For the Laplace and Gaussian mechanisms at d = 10^4 and 10^6 coordinates, times one
``randomise`` call of

* the float path (``floating_point_safe=False``): ``value + rng.laplace(...)`` or
  ``value + rng.normal(...)`` in doubles;
* the safe path (``floating_point_safe=True``): rounding to the lattice and exact
  discrete Laplace / discrete Gaussian noise (:mod:`skdp_sparse.privacy.discrete`).

Times are CPU seconds of the calling thread (both paths are single-threaded), the
minimum over ``--repeats`` interleaved runs, so other load on the machine inflates
them less. "first call" is a safe release at a noise scale not seen before: the
Laplace path then builds its exact inversion table (cached afterwards; the Gaussian
path always uses the same table).

Then the cost where the noise is used, on a9a and reuters (rows scaled to unit l2
norm, as in ``bench_output_perturbation.py``):

* a fit of ``DPOutputPerturbationClassifier`` (defaults, epsilon = 1) with
  ``floating_point_safe=True`` against ``False``, Gaussian noise (delta = 1/n^2) and
  Laplace noise (delta = 0). Every fit starts from empty calibration and lattice
  caches, so it pays for its own calibration (the safe Gaussian's zCDP calibration
  is dearer than the analytic one). Also the ratio of the noise scales and the test
  accuracy of each path (mean over the fits);
* a ``PrivateHyperparameterSearch`` on a9a over three values of ``alpha`` of that
  classifier (epsilon = 1, delta = 1/n^2), with floating-point-safe score noise
  against ``rng.normal`` (the fits inside are the classifier's default in both):
  the search's CPU time and the part of it spent drawing the score noise.

Fit times are CPU seconds, the minimum over ``2 * repeats + 1`` interleaved fits per
path; ``repeats`` searches per path.

Run: ``python benchmarks/bench_fp_safe.py [--quick] [--repeats 7] [--datasets a9a
reuters]``; ``--quick`` sets ``--repeats 3``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import load_dataset, markdown_table, normalize_rows  # noqa: E402

from skdp_sparse.linear_model import DPOutputPerturbationClassifier  # noqa: E402
from skdp_sparse.model_selection import PrivateHyperparameterSearch  # noqa: E402
from skdp_sparse.model_selection import _search as search_module  # noqa: E402
from skdp_sparse.privacy import discrete  # noqa: E402
from skdp_sparse.privacy.mechanisms import GaussianMechanism, LaplaceMechanism  # noqa: E402
from skdp_sparse.solvers import output_perturbation as op  # noqa: E402

PUBLIC_SPARSITY = {"a9a": 14, "reuters": None}


def _mechanisms(safe, sensitivity=1.0):
    return {
        "Laplace": LaplaceMechanism(sensitivity, epsilon=1.0, floating_point_safe=safe),
        "Gaussian": GaussianMechanism(sensitivity, epsilon=1.0, delta=1e-6,
                                      floating_point_safe=safe),
    }


def _cpu_time(mech, value, rng):
    start = time.process_time()
    mech.randomise(value, rng)
    return time.process_time() - start


def _clear_calibration_caches():
    op._gaussian_sigma.cache_clear()
    discrete.plan_gaussian.cache_clear()
    discrete.plan_laplace.cache_clear()


def _timed_fit(make, X, y):
    _clear_calibration_caches()
    model = make()
    start = time.process_time()
    model.fit(X, y)
    return time.process_time() - start, model


def estimator_rows(datasets, repeats):
    rows = []
    for name in datasets:
        ds = load_dataset(name)
        X, y = normalize_rows(ds.X_train), ds.y_train
        X_test, y_test = normalize_rows(ds.X_test), ds.y_test
        n = X.shape[0]
        for noise, delta in (("Gaussian", 1.0 / n**2), ("Laplace", 0.0)):
            if noise == "Laplace" and name != "a9a":
                continue

            def make(safe, seed, delta=delta, name=name):
                return lambda: DPOutputPerturbationClassifier(
                    epsilon=1.0, delta=delta, sparsity=PUBLIC_SPARSITY[name],
                    floating_point_safe=safe, random_state=seed)

            for safe in (False, True):  # compile and load the kernels
                make(safe, 0)().fit(X[:200], y[:200])
            times = {False: [], True: []}
            accs = {False: [], True: []}
            for seed in range(2 * repeats + 1):
                for safe in (False, True):
                    t, model = _timed_fit(make(safe, seed), X, y)
                    times[safe].append(t)
                    accs[safe].append(model.score(X_test, y_test))
            # The same fit through the function, for the noise scale it used.
            info = {safe: op.fit_output_perturbation(
                X, 2.0 * y - 1, "logistic", epsilon=1.0, delta=delta, norm_bound=1.0,
                sparsity=PUBLIC_SPARSITY[name], rng=0, floating_point_safe=safe,
                return_info=True)[2] for safe in (False, True)}
            t_float, t_safe = min(times[False]), min(times[True])
            rows.append({
                "case": f"output perturbation fit, {noise}", "data": f"{name} ({n} x "
                f"{X.shape[1]})", "float path (ms)": 1e3 * t_float,
                "safe path (ms)": 1e3 * t_safe, "safe / float": t_safe / t_float,
                "noise scale safe / float": info[True]["noise_scale"]
                / info[False]["noise_scale"],
                "accuracy float": np.mean(accs[False]), "accuracy safe": np.mean(accs[True]),
            })
    return rows


class _TimedScoreNoise(GaussianMechanism):
    """The search's score mechanism, adding the CPU time of each release to ``spent``."""

    spent = 0.0

    def randomise(self, value, rng, n_draws=None):
        start = time.process_time()
        out = super().randomise(value, rng, n_draws)
        type(self).spent += time.process_time() - start
        return out


def search_rows(repeats):
    """The private search on a9a with each score-noise path: the whole search's CPU time
    and the part spent drawing score noise. The runs' candidates differ between paths
    (the samplers consume the random stream differently), so the search times vary
    with the candidates drawn; the score-noise time is the cost of the path itself."""
    ds = load_dataset("a9a")
    X, y = normalize_rows(ds.X_train), ds.y_train
    n = X.shape[0]
    base = DPOutputPerturbationClassifier(delta=1.0 / n**2, sparsity=PUBLIC_SPARSITY["a9a"])
    grid = {"alpha": [1e-4, 1e-3, 1e-2]}
    stats = {False: [], True: []}
    original = search_module.GaussianMechanism
    search_module.GaussianMechanism = _TimedScoreNoise
    try:
        for seed in range(repeats):
            for safe in (False, True):
                search = PrivateHyperparameterSearch(base, grid, epsilon=1.0, delta=1.0 / n**2,
                                                     floating_point_safe=safe,
                                                     random_state=seed)
                _TimedScoreNoise.spent = 0.0
                start = time.process_time()
                search.fit(X, y)
                total = time.process_time() - start
                # The first release plans the lattice, so the set-up is counted too.
                stats[safe].append((total, _TimedScoreNoise.spent))
    finally:
        search_module.GaussianMechanism = original
    rows = []
    for safe in (False, True):
        total, noise = (np.array(v) for v in zip(*stats[safe], strict=True))
        rows.append({
            "score noise": "safe (discrete Gaussian)" if safe else "float (rng.normal)",
            "search (ms, median)": 1e3 * float(np.median(total)),
            "score noise (ms per search)": 1e3 * float(np.mean(noise)),
            "share of the search": float(np.mean(noise / total)),
        })
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dims", type=int, nargs="+", default=[10**4, 10**6])
    parser.add_argument("--datasets", nargs="*", default=["a9a", "reuters"],
                        help="data sets of the estimator-level rows (none: skip them)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 3

    rng = np.random.default_rng(0)
    float_mechs, safe_mechs = _mechanisms(False), _mechanisms(True)
    # Compile the kernels (cached on disk after the first run) before timing.
    for mech in safe_mechs.values():
        mech.randomise(np.zeros(8), rng)

    rows = []
    for d in args.dims:
        value = np.random.default_rng(1).normal(size=d)
        for mech in (*float_mechs.values(), *safe_mechs.values()):
            mech.randomise(value, rng)  # first touch of arrays this large
        for name in ("Laplace", "Gaussian"):
            # A sensitivity not used before, so the safe path meets a new noise scale.
            fresh = _mechanisms(True, sensitivity=1.0 + d * 1e-9 + (name == "Gaussian"))[name]
            first = _cpu_time(fresh, value, rng)
            times = {"float": [], "safe": []}
            for _ in range(args.repeats):
                for path, mechs in (("float", float_mechs), ("safe", safe_mechs)):
                    times[path].append(_cpu_time(mechs[name], value, rng))
            t_float, t_safe = min(times["float"]), min(times["safe"])
            rows.append({
                "mechanism": name, "d": f"{d:.0e}",
                "float path (ms)": 1e3 * t_float, "safe path (ms)": 1e3 * t_safe,
                "safe / float": t_safe / t_float, "safe, first call (ms)": 1e3 * first,
                "ns per coordinate (safe)": 1e9 * t_safe / d,
            })
    columns = ["mechanism", "d", "float path (ms)", "safe path (ms)", "safe / float",
               "safe, first call (ms)", "ns per coordinate (safe)"]
    print("One release of the mechanism:\n")
    print(markdown_table(rows, columns, floatfmt=".2f"))

    if args.datasets:
        rows = estimator_rows(args.datasets, args.repeats)
        columns = ["case", "data", "float path (ms)", "safe path (ms)", "safe / float",
                   "noise scale safe / float", "accuracy float", "accuracy safe"]
        print("\nWhole fits (epsilon = 1):\n")
        print(markdown_table(rows, columns, floatfmt=".3f"))
    if "a9a" in args.datasets:
        rows = search_rows(args.repeats)
        columns = ["score noise", "search (ms, median)", "score noise (ms per search)",
                   "share of the search"]
        print("\nPrivate search on a9a (3 candidates, epsilon = 1, delta = 1/n^2):\n")
        print(markdown_table(rows, columns, floatfmt=".4f"))


if __name__ == "__main__":
    main()
