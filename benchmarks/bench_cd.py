"""Private linear classifiers against non-private scikit-learn and diffprivlib.

For each dataset and epsilon (delta = 1/n^2): test accuracy, ROC AUC, relative
excess training objective ``(F(w) - F*) / F*`` of the l1-regularised logistic
objective against its non-private optimum, and fit time, for
``DPSparseLogisticRegression`` with its default settings (a user sets only
epsilon, delta and the public bounds: ``norm_bound`` from
``_common.PUBLIC_NORM_BOUNDS``, the feature bound left at 1) — ``solver="auto"`` and the
coordinate-descent and gradient solvers it chooses from — next to scikit-learn's
``LogisticRegression`` and diffprivlib's ``LogisticRegression`` (objective
perturbation, in its own venv, see ``diffprivlib_env.sh``).

    python benchmarks/bench_cd.py [--quick] [--datasets a9a reuters w8a]
"""

import argparse
import time

import numpy as np
from _common import (
    DATASETS,
    PUBLIC_NORM_BOUNDS,
    load_dataset,
    markdown_table,
    run_diffprivlib,
)
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score

from skdp_sparse import DPSparseLogisticRegression
from skdp_sparse.solvers.bounded_newton import MAX_FEATURES as NEWTON_MAX_FEATURES


def objective(X, y01, coef, intercept, alpha):
    z = X @ coef + intercept
    y = 2.0 * y01 - 1.0
    return float(np.mean(np.logaddexp(0.0, -y * z)) + alpha * np.abs(coef).sum())


def metrics(model, ds, fit_time):
    scores = model.decision_function(ds.X_test)
    return {
        "accuracy": accuracy_score(ds.y_test, model.predict(ds.X_test)),
        "roc_auc": roc_auc_score(ds.y_test, scores),
        "fit_time": fit_time,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, epsilon=1 only")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--no-diffprivlib", action="store_true")
    args = parser.parse_args()
    epsilons = [1.0] if args.quick else [0.1, 1.0, 10.0]
    seeds = range(1 if args.quick else args.seeds)
    rows = []
    for name in args.datasets:
        ds = load_dataset(name)
        n = ds.X_train.shape[0]
        delta = 1.0 / n**2
        bounds = {"norm_bound": PUBLIC_NORM_BOUNDS[name]} if name in PUBLIC_NORM_BOUNDS else {}
        alpha = DPSparseLogisticRegression._default_alpha
        start = time.perf_counter()
        ref = LogisticRegression(C=1 / (n * alpha), l1_ratio=1.0, solver="saga", tol=1e-6,
                                 max_iter=5000).fit(ds.X_train, ds.y_train)
        ref_time = time.perf_counter() - start
        f_star = objective(ds.X_train, ds.y_train, ref.coef_.ravel(), ref.intercept_[0], alpha)
        start = time.perf_counter()
        plain = LogisticRegression(max_iter=2000).fit(ds.X_train, ds.y_train)
        plain_time = time.perf_counter() - start
        rows.append({"dataset": name, "epsilon": "inf", "method": "sklearn LogisticRegression",
                     **metrics(plain, ds, plain_time), "time_ratio": 1.0})
        rows.append({"dataset": name, "epsilon": "inf", "method": "sklearn l1 (F*)",
                     **metrics(ref, ds, ref_time), "excess_obj": 0.0,
                     "time_ratio": ref_time / plain_time})
        for eps in epsilons:
            for solver in ("auto", "bounded_newton", "greedy_cd", "cd", "sgd"):
                if solver == "bounded_newton" and ds.X_train.shape[1] > NEWTON_MAX_FEATURES:
                    continue
                runs = []
                for seed in seeds:
                    # The label set is public ({0, 1} for every set here).
                    clf = DPSparseLogisticRegression(epsilon=eps, delta=delta, solver=solver,
                                                     classes=[0, 1], random_state=seed,
                                                     **bounds)
                    start = time.perf_counter()
                    clf.fit(ds.X_train, ds.y_train)
                    t = time.perf_counter() - start
                    m = metrics(clf, ds, t)
                    f = objective(ds.X_train, ds.y_train, clf.coef_.ravel(), clf.intercept_[0],
                                  alpha)
                    m["excess_obj"] = (f - f_star) / f_star
                    m["n_iter"] = clf.n_iter_
                    resolved = clf.solver_
                    runs.append(m)
                row = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
                row["n_iter"] = int(row["n_iter"])
                row["time_ratio"] = row["fit_time"] / plain_time
                label = f"skdp auto -> {resolved}" if solver == "auto" else f"skdp {solver}"
                rows.append({"dataset": name, "epsilon": eps, "method": label, **row})
            if not args.no_diffprivlib:
                # diffprivlib gets unit-normalised rows and data_norm=1 (its best set-up;
                # a row-wise map costs no privacy).
                res = run_diffprivlib(ds, eps, data_norm=1.0, seeds=list(seeds))
                if res is not None:
                    rows.append({"dataset": name, "epsilon": eps,
                                 "method": "diffprivlib (dense)",
                                 "accuracy": res["accuracy"], "roc_auc": res["roc_auc"],
                                 "fit_time": res["fit_time"],
                                 "time_ratio": res["fit_time"] / plain_time})
        print(markdown_table([r for r in rows if r["dataset"] == name],
                             ["dataset", "epsilon", "method", "accuracy", "roc_auc",
                              "excess_obj", "fit_time", "time_ratio", "n_iter"]), flush=True)
        print()


if __name__ == "__main__":
    main()
