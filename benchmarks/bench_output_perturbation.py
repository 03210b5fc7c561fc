"""Output perturbation against diffprivlib and non-private logistic regression.

On a9a and reuters, at epsilon in {0.1, 1, 10}, reports test
accuracy, ROC AUC and fit time (mean and standard deviation over seeds) of

* ``DPOutputPerturbationClassifier`` with its defaults (lambda from the paper's tuning
  rule, public values only; ``norm_bound=1``; floating-point-safe noise), with
  discrete Gaussian noise at delta = 1/n^2 and with discrete Laplace noise (pure DP,
  delta = 0, comparable to diffprivlib's guarantee);
* diffprivlib's ``LogisticRegression`` (objective perturbation, pure DP) with
  ``data_norm=1`` and its other defaults, run in its own venv (see
  ``benchmarks/diffprivlib_env.sh``; skipped with a note if missing);
* scikit-learn's ``LogisticRegression`` (not private, default ``C=1``).

Every method sees rows scaled to unit l2 norm (a per-row map, free of privacy cost).
For a9a the public ``sparsity=14`` is used: its 14 categorical attributes are one-hot
encoded, so no row has more than 14 nonzeros whatever the data. For reuters no such
schema bound exists and none is given.

Run: ``python benchmarks/bench_output_perturbation.py [--quick] [--seeds 5]
[--datasets a9a reuters]``; ``--quick`` runs one seed at epsilon = 1 only.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import load_dataset, markdown_table, normalize_rows, run_diffprivlib  # noqa: E402

from skdp_sparse.linear_model import DPOutputPerturbationClassifier  # noqa: E402

PUBLIC_SPARSITY = {"a9a": 14, "reuters": None, "w8a": None}
EPSILONS = (0.1, 1.0, 10.0)


def _evaluate(model, X, y):
    scores = model.decision_function(X)
    return accuracy_score(y, model.predict(X)), roc_auc_score(y, scores)


def _summary(method, name, eps, accs, aucs, times, extra=""):
    return {
        "dataset": name,
        "epsilon": "inf" if eps is None else f"{eps:g}",
        "method": method,
        "accuracy": f"{np.mean(accs):.3f} ± {np.std(accs):.3f}",
        "ROC AUC": f"{np.mean(aucs):.3f} ± {np.std(aucs):.3f}",
        "fit time (s)": f"{np.mean(times):.3f}",
        "notes": extra,
    }


def bench_dataset(name, seeds, epsilons=EPSILONS):
    ds = load_dataset(name)
    Xtr, Xte = normalize_rows(ds.X_train), normalize_rows(ds.X_test)
    ytr, yte = ds.y_train, ds.y_test
    n = Xtr.shape[0]
    delta = 1.0 / n**2
    rows = []

    t0 = time.perf_counter()
    ref = LogisticRegression(max_iter=1000).fit(Xtr, ytr)
    t_ref = time.perf_counter() - t0
    acc, auc = _evaluate(ref, Xte, yte)
    rows.append(_summary("scikit-learn LogisticRegression (non-private)", name, None,
                         [acc], [auc], [t_ref]))

    # Warm-up outside the timings (imports, first-call caches).
    DPOutputPerturbationClassifier(delta=delta, random_state=0).fit(Xtr[:200], ytr[:200])
    for eps in epsilons:
        for dlt, label in ((delta, "delta=1/n^2"), (0.0, "pure DP")):
            accs, aucs, times = [], [], []
            for seed in seeds:
                model = DPOutputPerturbationClassifier(
                    epsilon=eps, delta=dlt, norm_bound=1.0,
                    sparsity=PUBLIC_SPARSITY[name], random_state=seed,
                )
                t0 = time.perf_counter()
                model.fit(Xtr, ytr)
                times.append(time.perf_counter() - t0)
                acc, auc = _evaluate(model, Xte, yte)
                accs.append(acc)
                aucs.append(auc)
            rows.append(_summary("skdp_sparse DPOutputPerturbationClassifier", name, eps,
                                 accs, aucs, times, f"{label}, alpha_={model.alpha_:.2g}"))

        dpl = run_diffprivlib(ds, eps, data_norm=1.0, seeds=list(seeds))
        if dpl is not None:
            rows.append(_summary("diffprivlib LogisticRegression", name, eps,
                                 dpl["accuracies"], dpl["roc_aucs"], dpl["fit_times"],
                                 f"pure DP, diffprivlib {dpl['diffprivlib']}"))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, epsilon=1 only")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--datasets", nargs="+", default=["a9a", "reuters"])
    args = parser.parse_args(argv)
    seeds = range(1 if args.quick else args.seeds)
    epsilons = (1.0,) if args.quick else EPSILONS
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        for name in args.datasets:
            rows += bench_dataset(name, seeds, epsilons)
    print(f"Output perturbation, {len(seeds)} seed(s) per private method "
          "(mean ± std; test sets):\n")
    print(markdown_table(rows, ["dataset", "epsilon", "method", "accuracy", "ROC AUC",
                                "fit time (s)", "notes"]))


if __name__ == "__main__":
    main()
