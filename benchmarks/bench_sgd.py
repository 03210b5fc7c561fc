"""Private stochastic-gradient solvers against non-private scikit-learn.

For a9a, w8a and a generated click log (one-hot features over a power-law
vocabulary of 10^6 values, 10^5 training rows), at epsilon in {0.5, 1, 4} and
delta = 1/n^2: test accuracy, ROC AUC, fit time, steps, per-example gradient
evaluations and the epsilon the returned privacy events compose to, for each
stochastic-gradient solver of :mod:`skdp_sparse.solvers` with its defaults (rows scaled to unit
l2 norm, a row-wise public transform; public bound ``norm_bound=1``), next to
scikit-learn's ``LogisticRegression``. Then the gradient evaluations each solver
needs to reach a given excess training risk, and the step time of
``sparse_sgd`` at d = 10^4 and d = 10^6 with the same rows.

``--matched``: only ``sparse_sgd`` against dense ``sgd`` with the same Poisson batch
size, steps, learning rate and ``(epsilon, delta)`` (sparse_sgd's default batch and
steps), on a click log of 2 x 10^5 training rows over 10^6 values with 20 to 40 active
fields a row, at epsilon = 1 and delta = 1/n^2: test ROC AUC (mean of ``--seeds``
seeds), the mean number of noised coordinates a step (intercept included; dense:
p + 1) and the ratio, for the default and for the settings given with
``--threshold-tails`` (threshold = tail count noise scales) and ``--shares``, and
DP-FEST with a private top-k for each k of ``--frequent`` (noised: k + 1).

    python benchmarks/bench_sgd.py [--quick] [--datasets a9a w8a clicklog]
    python benchmarks/bench_sgd.py --matched [--seeds 3]
"""

import argparse
import math
import time

import numpy as np
import scipy.sparse as sp
from _common import load_dataset, markdown_table, normalize_rows
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score

from skdp_sparse.optim.losses import LogisticLoss
from skdp_sparse.privacy.accounting import compose
from skdp_sparse.privacy.subsampling import subsampled_noise_multiplier
from skdp_sparse.solvers.phased_sgd import phased_sgd_gradient_bound
from skdp_sparse.testing.solver_api import bias_reduced_sgd, phased_sgd, sgd, sparse_sgd

LOSS = LogisticLoss()


class Data:
    def __init__(self, name, X_train, y_train, X_test, y_test):
        self.name = name
        self.X_train = normalize_rows(X_train)
        self.X_test = normalize_rows(X_test)
        self.y_train = y_train  # {0, 1}
        self.y_test = y_test
        self.y_pm = 2.0 * y_train - 1.0


def click_log(n_train=100_000, n_test=25_000, vocab=1_000_000, n_fields=10, seed=0,
              min_fields=None):
    """Click-log-like data: ``n_fields`` categorical fields, one active value each.

    Every field owns ``vocab / n_fields`` values drawn from a Zipf law (exponent
    1.1, truncated), so a few values are frequent and most are rare; the label is
    logistic in the sum of per-value effects, with a 20-25% positive rate.
    ``min_fields`` (default: all fields in every row): each row keeps a uniform
    number of fields between ``min_fields`` and ``n_fields``, chosen at random.
    """
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    per_field = vocab // n_fields
    ranks = np.arange(1, per_field + 1, dtype=float)
    probs = ranks**-1.1
    probs /= probs.sum()
    cols = np.empty((n, n_fields), dtype=np.int64)
    for f in range(n_fields):
        # Shuffle the rank -> id map so frequent values are not the lowest ids.
        ids = rng.permutation(per_field) + f * per_field
        cols[:, f] = ids[rng.choice(per_field, size=n, p=probs)]
    effects = rng.normal(0.0, 0.8, size=vocab)
    if min_fields is None:
        keep = np.ones((n, n_fields), dtype=bool)
    else:
        counts = rng.integers(min_fields, n_fields + 1, size=n)
        keep = np.argsort(rng.random((n, n_fields)), axis=1) < counts[:, None]
    margin = (effects[cols] * keep).sum(axis=1) / math.sqrt(n_fields) - 1.4
    y = (rng.random(n) < 1 / (1 + np.exp(-margin))).astype(np.int64)
    rows = np.repeat(np.arange(n), n_fields).reshape(n, n_fields)
    X = sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], cols[keep])), shape=(n, vocab))
    X.sum_duplicates()
    name = "clicklog" if min_fields is None else f"clicklog{min_fields}-{n_fields}"
    return Data(name, X[:n_train], y[:n_train], X[n_train:], y[n_train:])


def load(name):
    if name == "clicklog":
        return click_log()
    ds = load_dataset(name)
    return Data(name, ds.X_train, ds.y_train, ds.X_test, ds.y_test)


def training_loss(data, coef, intercept):
    z = data.X_train @ coef + intercept
    return float(np.mean(np.logaddexp(0.0, -data.y_pm * z)))


def row(data, solver, epsilon, delta, out, seconds):
    coef, intercept, steps, events, n_grad = out
    scores = data.X_test @ coef + intercept
    spent = compose(events, delta)[0] if math.isfinite(epsilon) else math.inf
    return {
        "dataset": data.name, "epsilon": epsilon, "solver": solver,
        "accuracy": accuracy_score(data.y_test, scores > 0),
        "roc_auc": roc_auc_score(data.y_test, scores),
        "fit_time_s": seconds, "steps": int(steps), "grad_evals": int(n_grad),
        "eps_spent": spent,
    }


def sklearn_row(data):
    start = time.perf_counter()
    clf = LogisticRegression(C=1.0, max_iter=2000).fit(data.X_train, data.y_train)
    seconds = time.perf_counter() - start
    scores = clf.decision_function(data.X_test)
    return {
        "dataset": data.name, "epsilon": math.inf, "solver": "sklearn LogisticRegression",
        "accuracy": accuracy_score(data.y_test, scores > 0),
        "roc_auc": roc_auc_score(data.y_test, scores), "fit_time_s": seconds,
        "steps": None, "grad_evals": None, "eps_spent": math.inf,
    }, clf


def solvers_for(data, quick):
    big = data.X_train.shape[1] > 100_000
    entries = [
        ("sgd (full batch)", sgd, {}),
        ("sgd (batch 1000)", sgd, dict(batch_size=1000, n_steps=300)),
        ("sparse_sgd", sparse_sgd, {}),
    ]
    if not big:
        # Both make O(d) dense steps; at d = 10^6 they would need minutes.
        entries.append(("phased_sgd", phased_sgd, {}))
        entries.append(("bias_reduced_sgd", bias_reduced_sgd, dict(filter_bound="amplified")))
    if quick:
        entries = [e for e in entries if e[0] != "sgd (batch 1000)"]
    return entries


def accuracy_table(datasets, epsilons, quick):
    rows = []
    for data in datasets:
        n = data.X_train.shape[0]
        delta = 1.0 / n**2
        base, _ = sklearn_row(data)
        rows.append(base)
        for epsilon in epsilons:
            for label, solver, kwargs in solvers_for(data, quick):
                start = time.perf_counter()
                out = solver(data.X_train, data.y_pm, LOSS, epsilon=epsilon, delta=delta,
                             rng=0, **kwargs)
                rows.append(row(data, label, epsilon, delta, out, time.perf_counter() - start))
                print(f"  {data.name} eps={epsilon} {label}: auc={rows[-1]['roc_auc']:.3f} "
                      f"({rows[-1]['fit_time_s']:.2f}s)", flush=True)
    return rows


def complexity_table(data, epsilon, targets, quick):
    """Smallest gradient budget with training excess risk <= target, per solver."""
    n, d = data.X_train.shape
    p = d + 1
    delta = 1.0 / n**2
    ref = LogisticRegression(C=1e4, tol=1e-10, max_iter=5000).fit(data.X_train, data.y_train)
    f_star = training_loss(data, ref.coef_.ravel(), ref.intercept_[0])
    budgets = {
        "sgd (full batch)": [(sgd, dict(n_steps=t)) for t in (5, 10, 20, 40, 80, 160, 320)],
        "sgd (batch 1000)": [(sgd, dict(batch_size=1000, n_steps=t))
                             for t in (50, 100, 200, 400, 800, 1600)],
        "sparse_sgd (batch 1000)": [(sparse_sgd, dict(batch_size=1000, n_steps=t))
                                    for t in (50, 100, 200, 400, 800, 1600)],
        "phased_sgd": [(phased_sgd, dict(n_steps=int(n * f), learning_rate=1.0))
                       for f in (0.125, 0.25, 0.5, 1.0)],
        "bias_reduced_sgd": [(bias_reduced_sgd, dict(filter_bound="amplified"))],
    }
    if quick:
        budgets = {k: v[::2] for k, v in budgets.items()}
    results = {}
    for label, runs in budgets.items():
        curve = []
        for solver, kwargs in runs:
            out = solver(data.X_train, data.y_pm, LOSS, epsilon=epsilon, delta=delta, rng=0,
                         **kwargs)
            curve.append((out[4], training_loss(data, out[0], out[1]) - f_star))
        results[label] = curve
    rows = []
    for alpha in targets:
        # The bound with phased_sgd's public constants: diameter 2 * radius = 20 and
        # Lipschitz constant C2 = sqrt(2) (unit rows, |l'| <= 1, intercept).
        bound = phased_sgd_gradient_bound(p, delta, alpha, diameter=20.0,
                                          lipschitz=math.sqrt(2.0))
        for label, curve in results.items():
            reached = [g for g, excess in curve if excess <= alpha]
            rows.append({
                "dataset": data.name, "epsilon": epsilon, "target_excess": alpha,
                "solver": label,
                "grad_evals_to_target": min(reached) if reached else None,
                "best_excess": min(e for _, e in curve),
                "phased_bound": bound,
            })
    return rows, f_star


def step_time_table(quick):
    """sparse_sgd step time at d = 10^4 and d = 10^6 with the very same rows.

    Both runs use one count threshold (the default for d = 10^6), so they select
    the same present features; the operation counts are the kernel's own tally.
    """
    rng = np.random.default_rng(0)
    n, fields = 50_000, 10
    cols = rng.zipf(1.3, size=(n, fields)) % 1000 + np.arange(fields) * 1000
    X = sp.csr_matrix((np.ones(n * fields), (np.repeat(np.arange(n), fields), cols.ravel())),
                      shape=(n, 10_000))
    X.sum_duplicates()
    X = normalize_rows(X)
    y = np.where(rng.random(n) < 0.3, 1.0, -1.0)
    steps = (50, 250) if quick else (100, 600)
    common = dict(epsilon=1.0, delta=1.0 / n**2, batch_size=1000)
    big = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(n, 1_000_000))
    # The noise, hence the default threshold, depends on the number of steps.
    thresholds = {t: sparse_sgd(big, y, LOSS, n_steps=t, rng=0, _trace=(0, 1),
                                **common)[-1]["threshold"] for t in steps}
    mats = {d: sp.csr_matrix((X.data, X.indices, X.indptr), shape=(n, d))
            for d in (10_000, 1_000_000)}
    best = {(d, t): math.inf for d in mats for t in steps}
    ops = {}
    # Interleave the runs so that both dimensions see the same machine load.
    for _ in range(3 if quick else 5):
        for t in steps:
            for d, Xd in mats.items():
                start = time.perf_counter()
                *_, info = sparse_sgd(Xd, y, LOSS, n_steps=t, rng=0, threshold=thresholds[t],
                                      _trace=(0, 1), **common)
                best[d, t] = min(best[d, t], time.perf_counter() - start)
                ops[d] = float(info["ops"].mean())
    rows = []
    for d in mats:
        per_step = (best[d, steps[1]] - best[d, steps[0]]) / (steps[1] - steps[0])
        rows.append({"d": d, "batch_nnz": 1000 * fields, "step_time_ms": 1e3 * per_step,
                     "ops_per_step": ops[d],
                     f"fit_time_s({steps[1]} steps)": best[d, steps[1]]})
    rows.append({"d": "ratio 10^6 / 10^4",
                 "step_time_ms": rows[1]["step_time_ms"] / rows[0]["step_time_ms"],
                 "ops_per_step": rows[1]["ops_per_step"] / rows[0]["ops_per_step"]})
    return rows


def matched_table(seeds, tails, shares, steps=None, frequent=(), fields=(20, 40)):
    """sparse_sgd against dense sgd with the same batches, steps and budget."""
    data = click_log(n_train=200_000, n_test=50_000, n_fields=fields[1],
                     min_fields=fields[0] if fields[0] < fields[1] else None)
    n, d = data.X_train.shape
    delta, epsilon = 1.0 / n**2, 1.0
    base = sparse_sgd(data.X_train, data.y_pm, LOSS, epsilon=epsilon, delta=delta, rng=0,
                      n_steps=steps, _trace=(1, 1))
    steps = base[2]
    # sparse_sgd's default batch (its docstring's rule).
    batch = max(int(round(math.sqrt(d * math.log(1 / delta)))), math.ceil(n / 100))
    common = dict(epsilon=epsilon, delta=delta, batch_size=batch, n_steps=steps)

    def auc(out):
        return roc_auc_score(data.y_test, data.X_test @ out[0] + out[1])

    dense = [auc(sgd(data.X_train, data.y_pm, LOSS, rng=s, **common)) for s in seeds]
    rows = [{"dataset": data.name, "solver": "sgd (dense)", "threshold_tail": None,
             "selection_share": None,
             "roc_auc": float(np.mean(dense)), "auc_gap": 0.0, "noised_per_step": d + 1,
             "fewer_noised": 1.0}]
    settings = [({}, "default")] + [
        (dict(threshold=t, selection_share=sh), t) for sh in shares for t in tails] + [
        (dict(frequent_features=k), f"DP-FEST top-{k}") for k in frequent]
    for options, label in settings:
        aucs, noised = [], []
        for s in seeds:
            kw = dict(options)
            if "threshold" in kw:
                kw["threshold"] = kw["threshold"] * _count_sigma(n, d, steps, batch, delta,
                                                                 epsilon, kw["selection_share"])
            if "frequent_features" in kw:
                out = sparse_sgd(data.X_train, data.y_pm, LOSS, rng=s, **common, **kw)
                noised.append(kw["frequent_features"] + 1)
            else:
                out = sparse_sgd(data.X_train, data.y_pm, LOSS, rng=s, _trace=(steps, 1),
                                 **common, **kw)
                noised.append(out[-1]["selected"][:, 0].mean() + 1)
            aucs.append(auc(out))
        rows.append({"dataset": data.name, "solver": "sparse_sgd", "threshold_tail": label,
                     "selection_share": options.get("selection_share", "default"),
                     "roc_auc": float(np.mean(aucs)),
                     "auc_gap": float(np.mean(dense) - np.mean(aucs)),
                     "noised_per_step": float(np.mean(noised)),
                     "fewer_noised": (d + 1) / float(np.mean(noised))})
        print(f"  {rows[-1]}", flush=True)
    return rows


def _count_sigma(n, d, steps, batch, delta, epsilon, share):
    z = subsampled_noise_multiplier(batch / n, steps, "poisson", epsilon, delta, True)
    return z / math.sqrt(share)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller budgets")
    parser.add_argument("--datasets", nargs="+", default=["a9a", "w8a", "clicklog"])
    parser.add_argument("--matched", action="store_true",
                        help="sparse_sgd against dense sgd with matched batches and steps")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--threshold-tails", type=float, nargs="*", default=[])
    parser.add_argument("--shares", type=float, nargs="*", default=[0.5])
    parser.add_argument("--frequent", type=int, nargs="*", default=[],
                        help="DP-FEST rows: k of a private top-k of the feature counts")
    parser.add_argument("--fields", type=int, nargs=2, default=[20, 40],
                        metavar=("MIN", "MAX"), help="active fields a row (click log)")
    args = parser.parse_args()
    if args.matched:
        rows = matched_table(range(args.seeds), args.threshold_tails, args.shares,
                             args.steps, args.frequent, tuple(args.fields))
        print(markdown_table(rows, list(rows[0]), floatfmt=".4g"))
        return
    epsilons = [0.5, 1.0, 4.0]

    # Compile the Numba kernels before timing anything.
    X = sp.random(64, 8, density=0.5, format="csr", random_state=0)
    y = np.where(np.arange(64) % 2 == 0, 1.0, -1.0)
    for solver in (sgd, sparse_sgd, phased_sgd):
        solver(X, y, LOSS, epsilon=1.0, delta=1e-6, rng=0)

    datasets = [load(name) for name in args.datasets]
    print("## Accuracy, ROC AUC and fit time (delta = 1/n^2)\n", flush=True)
    rows = accuracy_table(datasets, epsilons, args.quick)
    print(markdown_table(rows, ["dataset", "epsilon", "solver", "accuracy", "roc_auc",
                                "fit_time_s", "steps", "grad_evals", "eps_spent"]))

    print("\n## Gradient evaluations to reach a training excess risk (epsilon = 1)\n")
    for data in datasets:
        if data.name == "clicklog":
            continue
        comp, f_star = complexity_table(data, 1.0, (0.1, 0.05, 0.02), args.quick)
        print(f"{data.name}: non-private training loss F* = {f_star:.4f}")
        print(markdown_table(comp, ["dataset", "target_excess", "solver",
                                    "grad_evals_to_target", "best_excess",
                                    "phased_bound"], floatfmt=".4g"))
        print()

    print("## sparse_sgd step time: same rows, d = 10^4 vs d = 10^6\n")
    st = step_time_table(args.quick)
    print(markdown_table(st, list(dict.fromkeys(k for r in st for k in r)), floatfmt=".3f"))


if __name__ == "__main__":
    main()
