"""Private regression on raw tabular features bounded by public ranges.

Pipelines ``BoundedScaler -> DPGreedyCDRegressor`` (and ``DPStandardScaler ->
DPGreedyCDRegressor``) at a total epsilon of 1 (``delta = 1/n^2``), against ordinary
least squares (scikit-learn's ``LinearRegression``, not private) on two regression
data sets in their own units:

* ``california``: California housing (20,640 block groups of the 1990 census,
  8 features, target the median house value in units of 100,000 USD);
* ``abalone``: LIBSVM's abalone_scale (4,177 abalones, 8 features scaled to
  [-1, 1] by LIBSVM, target the number of rings).

Every range below is public: it comes from the documentation of the data or from
what the features mean, never from their values (see ``RANGES``). The target's
range goes to the regressor as ``target_bounds``; the scaler's output bounds, from
its parameters alone, as ``feature_bound`` and ``norm_bound``.

Split: 70% train, 30% test (``train_test_split(random_state=0)``); R^2 on the test
part, mean and standard deviation over 5 seeds of the private fits (the
non-private rows are deterministic). Rows:

* ``LinearRegression (raw)``: least squares on the raw features, not private;
* ``BoundedScaler + LinearRegression``: least squares on the clipped, rescaled
  features (what clipping to the ranges costs, without noise);
* ``BoundedScaler + DPGreedyCD, eps=inf``: the private pipeline with its noise off
  (what the l1 penalty and the greedy solver cost);
* ``BoundedScaler + DPGreedyCD, eps=1``: the private pipeline, epsilon 1;
* ``BoundedScaler + AdaSSP, eps=1`` (and ``eps=inf``): the same regressor with
  ``solver="sufficient_statistics"`` (noisy ``X^T X`` and ``X^T y``, adaptive ridge);
* ``DPStandardScaler (eps=0.5) + DPGreedyCD (eps=0.5)``: a private
  standardisation (output clipped to [-3, 3]) and the regressor, epsilon 0.5 each;
* ``diffprivlib ...``: diffprivlib 0.6.6's ``LinearRegression`` with the same public
  ranges as ``bounds_X`` and ``bounds_y`` (epsilon 1), and its pipeline
  ``StandardScaler(bounds) (eps=0.5) + LinearRegression (eps=0.5)``, whose
  ``bounds_X`` are the public ranges mapped by the scaler's released mean and
  standard deviation; run in diffprivlib's own venv
  (``benchmarks/diffprivlib_env.sh``; skipped with a note if it is missing).

Run: ``python benchmarks/bench_preprocessing.py [--quick] [--seeds N]``. Data are
read from ``<repository>/../shared/data`` (override with ``SKDP_DATA_DIR``).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_svmlight_file
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import data_dir, diffprivlib_python, markdown_table  # noqa: E402

from skdp_sparse.linear_model import DPGreedyCDRegressor  # noqa: E402
from skdp_sparse.preprocessing import BoundedScaler, DPStandardScaler  # noqa: E402

EPSILON = 1.0


def delta_for(n_samples):
    """The benchmark's delta, ``1 / n^2`` for ``n`` training rows."""
    return 1.0 / n_samples**2

#: Public ranges: (feature names, lower, upper, target range, where they come from).
RANGES = {
    "california": {
        "file": "california_housing.svm.bz2",
        "features": ["MedInc", "HouseAge", "AveRooms", "AveBedrms", "Population",
                     "AveOccup", "Latitude", "Longitude"],
        "lower": [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 32.0, -125.0],
        "upper": [15.0, 52.0, 10.0, 3.0, 5000.0, 6.0, 42.0, -114.0],
        "target": (0.0, 5.0),
        "sources": {
            "MedInc": "median income of the block group in 10,000 USD; the distributed "
                      "data top-code it at 15 (150,000 USD), as its documentation "
                      "(and every textbook use of the data) states",
            "HouseAge": "median age of the houses in years, top-coded at 52 in the "
                        "distributed data (same documentation)",
            "AveRooms": "rooms per household: at least 1; averages above 10 rooms per "
                        "household over a block group are outliers (holiday homes), "
                        "clipped by choice",
            "AveBedrms": "bedrooms per household: 0 to 3, the same reasoning",
            "Population": "people in the block group: the Census Bureau draws block "
                          "groups of 600 to 3,000 people; 5,000 leaves room",
            "AveOccup": "people per household: at least 1; California's average in "
                        "1990 was 2.8, block-group averages above 6 are outliers",
            "Latitude": "California lies between 32.5 and 42 degrees north",
            "Longitude": "and between 114.1 and 124.4 degrees west",
            "target": "median house value in 100,000 USD, top-coded at 500,001 USD in "
                      "the distributed data",
        },
    },
    "abalone": {
        "file": "abalone_scale.bz2",
        "features": ["Sex", "Length", "Diameter", "Height", "Whole weight",
                     "Shucked weight", "Viscera weight", "Shell weight"],
        "lower": [-1.0] * 8,
        "upper": [1.0] * 8,
        "target": (0.0, 30.0),
        "sources": {
            "features": "LIBSVM's abalone_scale is scaled to [-1, 1] feature by feature "
                        "(the data set's documented construction)",
            "target": "rings (age - 1.5 years); the UCI documentation gives 1 to 29, "
                      "rounded out to 0 to 30",
        },
    },
}


def load(name):
    spec = RANGES[name]
    X, y = load_svmlight_file(str(data_dir() / spec["file"]),
                              n_features=len(spec["features"]))
    return np.asarray(X.toarray()), np.asarray(y, dtype=float)


def pipelines(name, n_features, n_samples):
    spec = RANGES[name]
    delta = delta_for(n_samples)
    bounds = (np.array(spec["lower"]), np.array(spec["upper"]))
    target = spec["target"]
    bounded = BoundedScaler(bounds=bounds, feature_range=(-1.0, 1.0))
    fb, nb = bounded.output_bounds()

    def dp_bounded(epsilon, seed, solver="greedy_cd"):
        return make_pipeline(
            BoundedScaler(bounds=bounds, feature_range=(-1.0, 1.0)),
            DPGreedyCDRegressor(epsilon=epsilon, delta=delta, feature_bound=fb,
                                norm_bound=nb, target_bounds=target, solver=solver,
                                random_state=seed))

    def dp_standard(epsilon, seed):
        scaler = DPStandardScaler(bounds=bounds, epsilon=epsilon / 2, clip_output=3.0,
                                  random_state=seed)
        sfb, snb = scaler.output_bounds(n_features)
        return make_pipeline(scaler, DPGreedyCDRegressor(
            epsilon=epsilon / 2, delta=delta, feature_bound=sfb, norm_bound=snb,
            target_bounds=target, random_state=seed))

    return [
        ("LinearRegression (raw)", False, lambda seed: LinearRegression()),
        ("BoundedScaler + LinearRegression", False,
         lambda seed: make_pipeline(BoundedScaler(bounds=bounds), LinearRegression())),
        ("BoundedScaler + DPGreedyCD, eps=inf", False,
         lambda seed: dp_bounded(math.inf, seed)),
        (f"BoundedScaler + DPGreedyCD, eps={EPSILON:g}", True,
         lambda seed: dp_bounded(EPSILON, seed)),
        ("BoundedScaler + AdaSSP, eps=inf", False,
         lambda seed: dp_bounded(math.inf, seed, "sufficient_statistics")),
        (f"BoundedScaler + AdaSSP, eps={EPSILON:g}", True,
         lambda seed: dp_bounded(EPSILON, seed, "sufficient_statistics")),
        (f"DPStandardScaler (eps={EPSILON / 2:g}) + DPGreedyCD (eps={EPSILON / 2:g})",
         True, lambda seed: dp_standard(EPSILON, seed)),
    ]


def diffprivlib_rows(name, X_tr, X_te, y_tr, y_te, seeds):
    """diffprivlib's regression and its scaler pipeline with the same public ranges,
    in its own venv; [] with a note if the venv is missing."""
    python = diffprivlib_python()
    if not python.exists():
        print(f"note: diffprivlib venv not found at {python.parent.parent}; build it with "
              "`bash benchmarks/diffprivlib_env.sh` (skipping diffprivlib)")
        return []
    spec = RANGES[name]
    args = {"task": "regression", "epsilon": EPSILON, "lower": spec["lower"],
            "upper": spec["upper"], "target": list(spec["target"]), "seeds": list(seeds)}
    with tempfile.TemporaryDirectory(prefix="skdp_dpl_") as tmp:
        path = Path(tmp) / "data.npz"
        np.savez(path, X_train=X_tr, X_test=X_te, y_train=y_tr, y_test=y_te)
        proc = subprocess.run([str(python), str(Path(__file__).parent / "_diffprivlib_runner.py"),
                               str(path), json.dumps(args)],
                              capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        print(f"note: diffprivlib runner failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return []
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    version = out["diffprivlib"]
    labels = {"linear": f"diffprivlib {version} LinearRegression (bounds), eps={EPSILON:g}",
              "pipeline": f"diffprivlib {version} StandardScaler (eps={EPSILON / 2:g}) + "
                          f"LinearRegression (eps={EPSILON / 2:g})"}
    return [{"data": name, "model": labels[key],
             "R^2": f"{np.mean(out[key]):.3g} ± {np.std(out[key]):.3g}",
             "epsilon spent": f"{EPSILON:.3f}", "fit time (s)": None}
            for key in ("linear", "pipeline")]


def run(name, seeds):
    X, y = load(name)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0)
    rows = []
    for label, private, make in pipelines(name, X.shape[1], X_tr.shape[0]):
        scores, times, spent = [], [], []
        for seed in (seeds if private else seeds[:1]):
            model = make(seed)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(X_tr, y_tr)
            times.append(time.perf_counter() - start)
            scores.append(model.score(X_te, y_te))
            spent.append(sum(getattr(step, "epsilon_spent_", 0.0)
                             for _, step in getattr(model, "steps", [])))
        rows.append({
            "data": name, "model": label,
            "R^2": f"{np.mean(scores):.3f} ± {np.std(scores):.3f}",
            "epsilon spent": "-" if not private else f"{np.mean(spent):.3f}",
            "fit time (s)": float(np.median(times)),
        })
    rows += diffprivlib_rows(name, X_tr, X_te, y_tr, y_te, seeds)
    return rows, X_tr.shape


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--datasets", nargs="*", default=list(RANGES))
    args = parser.parse_args(argv)
    seeds = list(range(2 if args.quick else args.seeds))
    print(f"# Private regression on bounded tabular features (epsilon {EPSILON:g}, "
          f"delta 1/n^2; R^2 on a 30% test split, {len(seeds)} seeds)\n")
    all_rows = []
    for name in args.datasets:
        rows, shape = run(name, seeds)
        print(f"{name}: {shape[0]} training rows, {shape[1]} features", flush=True)
        all_rows += rows
    print()
    print(markdown_table(all_rows, ["data", "model", "R^2", "epsilon spent",
                                    "fit time (s)"]))
    print("\nPublic ranges and where they come from:\n")
    for name in args.datasets:
        spec = RANGES[name]
        for key, text in spec["sources"].items():
            if key in spec["features"]:
                j = spec["features"].index(key)
                rng = f"[{spec['lower'][j]:g}, {spec['upper'][j]:g}]"
            elif key == "target":
                rng = f"[{spec['target'][0]:g}, {spec['target'][1]:g}]"
            else:
                rng = f"[{min(spec['lower']):g}, {max(spec['upper']):g}]"
            print(f"* {name} {key} {rng}: {text}")


if __name__ == "__main__":
    main()
