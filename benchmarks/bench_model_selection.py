"""Private hyperparameter selection against GridSearchCV and a fixed default, on a9a.

``DPSparseLogisticRegression`` (delta = 1/n^2, a9a's public row bound
``norm_bound = sqrt(14)``) over one grid of greedy coordinate descent's steps and
gradient clip (``solver="greedy_cd"``, the solver the grid's parameters belong to),
three ways:

* ``PrivateHyperparameterSearch`` at a total epsilon of 1 for the whole search
  (Papernot & Steinke 2022), refitting the winner on all rows within that total
  (default), or keeping the winning run's model (trained on 80% of the rows);
* scikit-learn's ``GridSearchCV`` (5 folds, refit, ``n_jobs=2``) with epsilon = 1
  per fit: what a privacy ledger records for it is reported (the fits'
  composition; the exact cross-validation scores and the selection come on top
  and are not private at any epsilon);
* the estimator's defaults at epsilon = 1, without any search (and at the
  search's per-fit epsilon, to show what the selection costs);

next to a non-private ``LogisticRegression``. Accuracy is on a9a's test file,
mean and standard deviation over seeds.

    python benchmarks/bench_model_selection.py [--quick] [--seeds 5]
"""

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV

sys.path.insert(0, str(Path(__file__).resolve().parent))

from skdp_sparse.linear_model import DPSparseLogisticRegression  # noqa: E402
from skdp_sparse.model_selection import PrivateHyperparameterSearch  # noqa: E402
from skdp_sparse.privacy.ledger import privacy_ledger  # noqa: E402

GRID = {"max_iter": [30, 100, 300, 1000], "gradient_clip": [0.3, 1.0]}
EPSILON = 1.0
#: a9a is one-hot Adult: one 1 per attribute, 14 attributes.
NORM_BOUND = math.sqrt(14)


def load_a9a():
    try:
        from _common import load_dataset
    except ImportError:
        load_dataset = None
    if load_dataset is not None:
        ds = load_dataset("a9a")
        return ds.X_train, ds.y_train, ds.X_test, ds.y_test
    from sklearn.datasets import load_svmlight_file

    root = Path(os.environ.get("SKDP_DATA_DIR", Path(__file__).resolve().parents[2]
                               / "shared" / "data"))
    Xtr, ytr = load_svmlight_file(str(root / "a9a.bz2"), n_features=123)
    Xte, yte = load_svmlight_file(str(root / "a9a.t.bz2"), n_features=123)
    return Xtr.tocsr(), (ytr > 0).astype(int), Xte.tocsr(), (yte > 0).astype(int)


def summary(values):
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.4f} ± {values.std():.4f}" if values.size > 1 \
        else f"{values.mean():.4f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    seeds = range(1 if args.quick else args.seeds)

    Xtr, ytr, Xte, yte = load_a9a()
    n = Xtr.shape[0]
    delta = 1.0 / n**2
    n_candidates = int(np.prod([len(v) for v in GRID.values()]))
    print(f"a9a: {n} training rows, {Xtr.shape[1]} features, delta = 1/n^2 = {delta:.2e}; "
          f"grid {GRID} ({n_candidates} candidates)\n")
    def cls(**params):
        # a9a's labels are public: 0 and 1.
        return DPSparseLogisticRegression(classes=[0, 1], norm_bound=NORM_BOUND, **params)

    rows = []

    # 1. Private selection: total (epsilon, delta) for everything released.
    for refit in (True, False):
        accs, times, picks, fit_eps, spent = [], [], [], [], []
        for seed in seeds:
            search = PrivateHyperparameterSearch(cls(delta=delta, solver="greedy_cd"), GRID,
                                                 epsilon=EPSILON,
                                                 delta=delta, refit=refit, random_state=seed)
            start = time.perf_counter()
            with privacy_ledger() as ledger:
                search.fit(Xtr, ytr)
            times.append(time.perf_counter() - start)
            accs.append(search.score(Xte, yte))
            picks.append(search.best_params_)
            fit_eps.append(search.fit_epsilon_)
            spent.append(ledger.spent()[0])
            assert len(ledger) == 1  # one record for the whole search
        if refit:
            search_fit_eps = float(np.mean(fit_eps))
        rows.append({
            "method": "PrivateHyperparameterSearch" + ("" if refit else ", refit=False"),
            "accuracy": summary(accs),
            "eps per fit": f"{np.mean(fit_eps):.3f}",
            "ledger total (basic)": f"{np.mean(spent):.3f}",
            "ledger total (tight)": f"{np.mean(spent):.3f}",
            "private": "yes",
            "time (s)": f"{np.mean(times):.1f}",
            "selected": "; ".join(f"{p['max_iter']}/{p['gradient_clip']}" for p in picks),
        })

    # 2. Plain GridSearchCV at epsilon = 1 per fit, watched by a ledger.
    accs, times, picks = [], [], []
    for i, seed in enumerate(seeds):
        search = GridSearchCV(cls(epsilon=EPSILON, delta=delta, solver="greedy_cd",
                                  random_state=seed), GRID, cv=5, n_jobs=2)
        start = time.perf_counter()
        with privacy_ledger() as ledger:
            search.fit(Xtr, ytr)
        times.append(time.perf_counter() - start)
        accs.append(search.score(Xte, yte))
        picks.append(search.best_params_)
        if i == 0:
            n_fits = len(ledger)
            basic = ledger.spent(composition="basic")
            tight = ledger.spent()
            tight_at_delta = ledger.spent(delta=delta)
    rows.append({
        "method": f"GridSearchCV (cv=5), eps=1 per fit: {n_fits} fits",
        "accuracy": summary(accs),
        "eps per fit": f"{EPSILON:.3f}",
        "ledger total (basic)": f"{basic[0]:.1f} (delta {basic[1]:.1e})",
        "ledger total (tight)": f"{tight[0]:.2f} (delta {tight[1]:.1e}); "
                                f"{tight_at_delta[0]:.2f} (delta {delta:.1e})",
        "private": "no (exact CV scores)",
        "time (s)": f"{np.mean(times):.1f}",
        "selected": "; ".join(f"{p['max_iter']}/{p['gradient_clip']}" for p in picks),
    })

    # 3. Defaults, no search.
    for eps, label in ((EPSILON, "default, eps=1"),
                       (search_fit_eps, "default, eps = per-fit eps of the search")):
        accs, times = [], []
        for seed in seeds:
            clf = cls(epsilon=eps, delta=delta, random_state=seed)
            start = time.perf_counter()
            clf.fit(Xtr, ytr)
            times.append(time.perf_counter() - start)
            accs.append(clf.score(Xte, yte))
        rows.append({"method": f"DPSparseLogisticRegression {label}",
                     "accuracy": summary(accs), "eps per fit": f"{eps:.3f}",
                     "ledger total (basic)": f"{clf.epsilon_spent_:.3f}",
                     "ledger total (tight)": f"{clf.epsilon_spent_:.3f}", "private": "yes",
                     "time (s)": f"{np.mean(times):.1f}", "selected": "-"})

    start = time.perf_counter()
    ref = LogisticRegression(max_iter=2000).fit(Xtr, ytr)
    rows.append({"method": "LogisticRegression (not private)",
                 "accuracy": f"{ref.score(Xte, yte):.4f}", "eps per fit": "inf",
                 "ledger total (basic)": "-", "ledger total (tight)": "-", "private": "no",
                 "time (s)": f"{time.perf_counter() - start:.1f}", "selected": "-"})

    print("selected: max_iter/gradient_clip of each seed's search\n")
    columns = ["method", "accuracy", "eps per fit", "ledger total (basic)",
               "ledger total (tight)", "private", "time (s)", "selected"]
    try:
        from _common import markdown_table
    except ImportError:
        markdown_table = None
    if markdown_table is not None:
        print(markdown_table(rows, columns))
    else:
        for r in rows:
            print(" | ".join(str(r[c]) for c in columns))


if __name__ == "__main__":
    main()
