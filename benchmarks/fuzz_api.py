"""Random calls of the public API with odd input, each classified by what it did.

Every public estimator and transformer is built with random parameters (the values
its constraints name, their boundaries, and values of the wrong kind) and called
(``fit``, then the prediction and transform methods of a fitted copy) on random data
in every layout (dense, every scipy.sparse format, lists, DataFrames, odd dtypes,
NaN, duplicates, unsorted indices, ...). Each call is classified:

* ``ok``: it returned;
* ``clear_error``: a ``ValueError``/``TypeError`` (or the library's own errors) raised
  before any budget was reserved, from the library or scikit-learn's validation;
* ``bad_error``: another exception type, or one raised inside numpy, scipy or numba;
* ``error_after_reserve``: an error after the ledger reserved the budget (released:
  nothing spent, but the check came late);
* ``error_after_spend``: an error after the ledger recorded a spend;
* ``leak``: a message or warning quoting a planted value of the data;
* ``crash`` / ``timeout``: the worker died or a call ran over its time.

Usage: ``python benchmarks/fuzz_api.py --cases 2000 --out results.jsonl`` (cases run
in a child process that is restarted after a crash); ``--summary results.jsonl``
prints the counts by outcome and the distinct bad messages.
"""

from __future__ import annotations

import argparse
import collections
import json
import linecache
import os
import signal
import subprocess
import sys
import traceback
import warnings

import numpy as np

#: A value planted in the data and a label fragment: an error or warning that quotes
#: them quotes private data.
SECRET_VALUE, SECRET_LABEL = 0.7071234, "zqsecret"
OK_TYPES = ("ValueError", "TypeError", "NotFittedError", "BudgetExceededError")


# ------------------------------------------------------------------ data
def _base(rng, n, p, kind):
    X = rng.normal(size=(n, p)) * (rng.random((n, p)) < 0.5)
    X[0, 0] = SECRET_VALUE
    if kind == "regression":
        y = rng.normal(size=n)
    else:
        k = 3 if kind == "multiclass" else 2
        y = np.arange(n) % k
    return X, y


def _layout(rng, X, log):
    """``X`` in a random container, dtype and sparse oddity."""
    import scipy.sparse as sp

    fmt = rng.choice(["dense", "csr", "csr_array", "csc", "coo", "lil", "dok", "bsr",
                      "dia", "list", "dataframe", "readonly", "noncontig", "memmap"])
    log["X_format"] = str(fmt)
    dtype = rng.choice(["float64", "float64", "float32", "float16", "int64", "bool",
                        "object"], p=[0.5, 0.1, 0.1, 0.05, 0.1, 0.1, 0.05])
    log["X_dtype"] = str(dtype)
    if rng.random() < 0.1:
        X = X.copy()
        X[rng.integers(X.shape[0]), rng.integers(X.shape[1])] = rng.choice(
            [np.nan, np.inf, -np.inf])
        log["nonfinite"] = True
    if fmt in ("dense", "readonly", "noncontig", "memmap", "list", "dataframe"):
        A = X.astype(dtype) if dtype != "object" else X.astype(object)
        if fmt == "readonly":
            A = np.array(A)
            A.flags.writeable = False
        elif fmt == "noncontig":
            A = np.asfortranarray(np.repeat(A, 2, axis=1))[:, ::2]
        elif fmt == "list":
            A = A.tolist()
        elif fmt == "dataframe":
            import pandas as pd
            A = pd.DataFrame(A, columns=[f"col{j}" for j in range(A.shape[1])])
        return A
    S = sp.csr_matrix(X)
    if dtype not in ("object", "float16"):
        S = S.astype(dtype)
    oddity = rng.choice(["none", "unsorted", "duplicates", "zeros", "int32", "int64"])
    log["sparse_oddity"] = str(oddity)
    if oddity == "zeros" and S.nnz:
        S.data[rng.integers(S.nnz)] = 0
    if oddity in ("int32", "int64"):
        S.indices = S.indices.astype(oddity)
        S.indptr = S.indptr.astype(oddity)
    if oddity in ("unsorted", "duplicates") and S.nnz > 1:
        coo = S.tocoo()
        order = rng.permutation(coo.nnz)
        row, col, data = coo.row[order], coo.col[order], coo.data[order]
        if oddity == "duplicates":
            row, col, data = (np.r_[row, row[:1]], np.r_[col, col[:1]],
                              np.r_[data, data[:1]])
        S = sp.csr_matrix((data, (row, col)), shape=S.shape)
        if oddity == "unsorted":
            S = sp.csr_matrix((data[np.argsort(row, kind="stable")],
                               col[np.argsort(row, kind="stable")],
                               np.r_[0, np.cumsum(np.bincount(row, minlength=S.shape[0]))]),
                              shape=S.shape)
    if fmt == "csr_array":
        return sp.csr_array(S)
    return S if fmt == "csr" else S.asformat(str(fmt))


def _nonfinite(X):
    """Whether the container holds NaN or infinity (casts to int or bool make NaN
    finite: only what the estimator receives counts)."""
    import scipy.sparse as sp

    if sp.issparse(X):
        return not np.isfinite(X.tocoo().data.astype(float)).all()
    try:
        return not np.isfinite(np.asarray(getattr(X, "values", X), dtype=float)).all()
    except (TypeError, ValueError):
        return False


def _rows(X):
    return X.shape[0] if hasattr(X, "shape") and len(X.shape) == 2 else len(X)


def _targets(rng, y, kind, log):
    mode = rng.choice(["plain", "plain", "strings", "floats", "single", "2d", "short",
                       "none", "object", "column"])
    log["y_mode"] = str(mode)
    if mode == "strings" and kind != "regression":
        return np.array([f"{SECRET_LABEL}{v}" for v in y])
    if mode == "floats":
        return y.astype(float) + (0.5 if kind != "regression" else 0.0)
    if mode == "single":
        return np.zeros_like(y)
    if mode == "2d":
        return np.column_stack([y, y])
    if mode == "short":
        return y[:-1]
    if mode == "none":
        return None
    if mode == "object":
        return y.astype(object)
    if mode == "column":
        return y.reshape(-1, 1)
    return y


# ------------------------------------------------------------------ parameters
GENERIC = [0, -1, 1, 2, 0.5, 1e-300, 1e300, np.inf, -np.inf, np.nan, None, True, "x",
           [1.0, 2.0], np.float32(1.0), np.int64(3)]


def _choices(constraint, rng):
    from skdp_sparse.utils.validation import Bound, Interval, Options

    if isinstance(constraint, Options):
        return list(constraint.values)
    if isinstance(constraint, Interval):
        vals = [v for v in (constraint.left, constraint.right) if v is not None]
        vals += [v + d for v in vals for d in (1, -1, 1e-9)]
        return vals + ([np.inf] if constraint.inf else []) + [1, 3, 10]
    if isinstance(constraint, Bound):
        return [1e-100, 1e100, 0.5, 2.0, np.inf]
    if constraint is None:
        return [None]
    if constraint == "boolean":
        return [True, False]
    if constraint == "random_state":
        return [None, 0, np.random.default_rng(0), np.random.RandomState(0)]
    return []


def _mutate(est, rng, log):
    params = est.get_params(deep=False)
    constraints = getattr(est, "_parameter_constraints", {})
    names = [n for n in params if n not in ("ledger", "estimator", "param_grid")]
    for name in rng.choice(names, size=min(len(names), rng.integers(0, 4)), replace=False):
        pool = [c for con in constraints.get(name, []) for c in _choices(con, rng)]
        value = (pool[rng.integers(len(pool))] if pool and rng.random() < 0.7
                 else GENERIC[rng.integers(len(GENERIC))])
        params[str(name)] = value
        log.setdefault("params", {})[str(name)] = repr(value)
    return est.set_params(**params)


def _estimators():
    import skdp_sparse as sk
    from skdp_sparse.feature_selection import DPSelectKBest

    def search(**kw):
        base = sk.DPSparseLogisticRegression(solver="greedy_cd", max_iter=2,
                                             classes=kw.pop("classes", None))
        return sk.PrivateHyperparameterSearch(base, {"alpha": [1e-3, 1e-2]}, **kw)

    return {
        "logistic": (lambda **kw: sk.DPSparseLogisticRegression(**kw), "binary"),
        "logistic_mc": (lambda **kw: sk.DPSparseLogisticRegression(**kw), "multiclass"),
        "greedy_cd_reg": (lambda **kw: sk.DPGreedyCDRegressor(**kw), "regression"),
        "op_clf": (lambda **kw: sk.DPOutputPerturbationClassifier(**kw), "binary"),
        "op_reg": (lambda **kw: sk.DPOutputPerturbationRegressor(**kw), "regression"),
        "mean": (lambda **kw: sk.DPSparseMeanEstimator(**kw), "unsupervised"),
        "standard": (lambda **kw: sk.DPStandardScaler(bounds=(-2.0, 2.0), **kw),
                     "unsupervised"),
        "bounded": (lambda **kw: sk.BoundedScaler(bounds=(-2.0, 2.0)), "unsupervised"),
        "kbest": (lambda **kw: DPSelectKBest(k=2, **kw), "binary"),
        "search": (search, "binary"),
    }


# ------------------------------------------------------------------ one case
def _ledger_kinds(ledger):
    with open(ledger.path) as f:
        return [json.loads(line).get("kind") for line in f if line.strip()]


def _quotes_secret(text):
    return SECRET_LABEL in text or "7071234" in text or "0.70712" in text


def _where(exc):
    """Where ``exc`` was raised, and whether by a ``raise`` statement (an implicit
    error, a ``TypeError`` of an operation, says nothing of the parameter)."""
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return "", True
    last = tb[-1]
    # A raise statement spans lines: the traceback may point at its message's line.
    source = "".join(linecache.getline(last.filename, k)
                     for k in range(max(last.lineno - 4, 1), last.lineno + 1))
    return (f"{last.filename.split('site-packages/')[-1]}:{last.lineno}",
            "raise" in source or "validation" in last.filename)


def _classify(call, ledger, before):
    """Run ``call()``; return ``(outcome, detail)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            call()
            exc = None
        except Exception as e:  # classify every failure
            exc = e
    texts = [str(w.message) for w in caught]
    kinds = _ledger_kinds(ledger)[before:] if ledger is not None else []
    detail = {"warnings": sorted({t[:160] for t in texts})}
    if exc is not None:
        name = type(exc).__name__
        where, raised = _where(exc)
        detail.update(exc=name, msg=str(exc)[:400], where=where)
        texts.append(str(exc))
    leak = any(_quotes_secret(t) for t in texts)
    if exc is None:
        return ("leak" if leak else "ok"), detail
    if isinstance(exc, TimeoutError):
        return "timeout", detail
    if "fit" in kinds:
        return "error_after_spend", detail
    if "reserve" in kinds:
        return "error_after_reserve", detail
    if leak:
        return "leak", detail
    internal = any(m in where for m in ("numba", "numpy/", "scipy/")) or \
        "numba" in type(exc).__module__
    if name not in OK_TYPES or internal or not raised:
        return "bad_error", detail
    return "clear_error", detail


def _alarm(signum, frame):
    raise TimeoutError("case ran over its time")


def run_case(seed):
    import scipy.sparse as sp

    from skdp_sparse import PrivacyLedger

    rng = np.random.default_rng(seed)
    ests = _estimators()
    name = sorted(ests)[rng.integers(len(ests))]
    make, kind = ests[name]
    log = {"seed": seed, "estimator": name}
    big = rng.random() < 0.05
    n = int(rng.choice([1, 2, 5, 40, 40, 120]))
    p = 10**6 if big else int(rng.choice([1, 3, 8]))
    if big:
        X0 = sp.random(n, p, density=3 / p, format="csr", random_state=seed)
        X0.data[:] = SECRET_VALUE
        y0 = _base(rng, n, 1, kind)[1]
        X = X0 if rng.random() < 0.5 else X0.tocoo()
        log.update(X_format="big_" + X.format)
    else:
        X0, y0 = _base(rng, n, p, kind)
        X = _layout(rng, X0, log)
        # Casts to int or bool make NaN finite: only what the estimator receives counts.
        log["nonfinite"] = _nonfinite(X)
    log.update(n=n, p=p)
    y = _targets(rng, y0, kind, log) if kind != "unsupervised" else None
    kw = {}
    if kind in ("binary", "multiclass") and name != "search" or name == "kbest":
        choice = rng.choice(["none", "exact", "missing", "extra"])
        log["classes"] = str(choice)
        labels = np.unique(np.asarray(y0))
        kw["classes"] = {"none": None, "exact": list(labels), "missing": list(labels[:1]),
                         "extra": list(labels) + [99]}[choice]
    ledger = PrivacyLedger()
    kw["ledger"] = ledger
    est = make(**kw)
    if name == "standard":
        est.set_params(random_state=0)
    est = _mutate(est, rng, log)
    if rng.random() < 0.3 and "random_state" in est.get_params(deep=False):
        est.set_params(random_state=0)
    args = (X,) if kind == "unsupervised" else (X, y)
    results = []
    before = len(_ledger_kinds(ledger))
    outcome, detail = _classify(lambda: est.fit(*args), ledger, before)
    results.append({**log, "call": "fit", "outcome": outcome, **detail})
    if outcome == "ok":
        spent = getattr(est, "epsilon_spent_", None)
        eps = est.get_params(deep=False).get("epsilon")
        if spent is not None and isinstance(eps, float | int) and spent > eps * (1 + 1e-9):
            results.append({**log, "call": "fit", "outcome": "overspend",
                            "msg": f"{spent} > {eps}"})
        if log.get("nonfinite"):
            results.append({**log, "call": "fit", "outcome": "accepted_nonfinite"})
        for method in ("predict", "predict_proba", "decision_function", "transform",
                       "score", "inverse_transform"):
            if not hasattr(est, method):
                continue
            variant = rng.choice(["same", "other_width", "other_layout", "one_row",
                                  "nan", "list", "1d"])
            Xp = X0
            if variant == "other_width":
                Xp = np.hstack([X0.toarray() if sp.issparse(X0) else X0,
                                np.ones((X0.shape[0], 1))])
            elif variant == "other_layout":
                Xp = X0.toarray() if sp.issparse(X0) else sp.csc_matrix(X0)
            elif variant == "one_row":
                Xp = X0[:1]
            elif variant == "nan":
                Xp = (X0.toarray() if sp.issparse(X0) else X0).copy()
                Xp[0, 0] = np.nan
            elif variant == "list":
                Xp = (X0.toarray() if sp.issparse(X0) else X0).tolist()
            elif variant == "1d":
                Xp = (X0.toarray() if sp.issparse(X0) else X0)[0]
            # Score against labels of the fit's kind: strings against fitted string
            # classes would make scikit-learn quote both label sets (public classes_).
            yp = y if y is not None and np.ndim(y) == 1 and len(y) == n else y0
            margs = (Xp, yp[:_rows(Xp)]) if method == "score" else (Xp,)
            o, d = _classify(lambda m=method, a=margs: getattr(est, m)(*a), None, 0)
            results.append({**log, "call": method, "variant": str(variant), "outcome": o,
                            **d})
    return results


# ------------------------------------------------------------------ sweep
#: Valid extremes of every kind of parameter, beyond the boundaries of its constraint.
EXTREMES = [1e-100, 1e-12, 1e12, 1e100, 2**31]


def sweep_cases():
    """Every (estimator, solver, parameter, value) with the value at an extreme of
    its constraint, on valid data: the estimators' parameter boundaries, one at a
    time, crossed with every solver of the models that offer one."""
    from skdp_sparse.solvers import SOLVERS

    cases = []
    for name, (make, _kind) in sorted(_estimators().items()):
        est = make()
        constraints = getattr(est, "_parameter_constraints", {})
        solvers = list(SOLVERS) if "solver" in est.get_params(deep=False) else [None]
        for solver in solvers:
            for param in sorted(constraints):
                if param in ("solver", "ledger", "classes"):
                    continue
                values = [c for con in constraints[param] for c in _choices(con, None)]
                if any(isinstance(con, object) and type(con).__name__ in
                       ("Bound", "Interval") for con in constraints[param]):
                    values += EXTREMES
                for value in values:
                    cases.append((name, solver, param, value))
    return cases


def run_sweep_case(index):
    import scipy.sparse as sp

    from skdp_sparse import PrivacyLedger

    name, solver, param, value = sweep_cases()[index]
    make, kind = _estimators()[name]
    rng = np.random.default_rng(index)
    X0, y = _base(rng, 40, 8, kind)
    X = sp.csr_matrix(X0)
    kw = {"ledger": PrivacyLedger()}
    if kind in ("binary", "multiclass") and name != "search":
        kw["classes"] = list(np.unique(y))
    est = make(**kw)
    if solver is not None:
        est.set_params(solver=solver)
    if "random_state" in est.get_params(deep=False):
        est.set_params(random_state=0)
    log = {"seed": index, "estimator": name, "solver": solver,
           "params": {param: repr(value)}}
    try:
        est.set_params(**{param: value})
    except Exception as exc:  # set_params refusing is a clear error too
        return [{**log, "call": "set_params", "outcome": "clear_error", "exc":
                 type(exc).__name__, "msg": str(exc)[:300]}]
    args = (X,) if kind == "unsupervised" else (X, y)
    ledger = kw["ledger"]
    outcome, detail = _classify(lambda: est.fit(*args), ledger, len(_ledger_kinds(ledger)))
    rows = [{**log, "call": "fit", "outcome": outcome, **detail}]
    if outcome == "ok":
        for method in ("predict", "predict_proba", "transform"):
            if hasattr(est, method):
                o, d = _classify(lambda m=method: getattr(est, m)(X), None, 0)
                out = None if o != "ok" else getattr(est, method)(X)
                if o == "ok" and not np.all(np.isfinite(
                        out.toarray() if sp.issparse(out) else np.asarray(out, float))):
                    o = "nonfinite_output"
                rows.append({**log, "call": method, "outcome": o, **d})
    return rows


# ------------------------------------------------------------------ driver
def worker(start, stop, out, sweep=False):
    signal.signal(signal.SIGALRM, _alarm)
    run = run_sweep_case if sweep else run_case
    with open(out, "a") as f:
        for seed in range(start, stop):
            f.write(json.dumps({"start": seed}) + "\n")
            f.flush()
            signal.alarm(int(os.environ.get("FUZZ_TIMEOUT", 60)))
            try:
                rows = run(seed)
            except Exception as exc:  # a failure of the harness itself
                rows = [{"seed": seed, "call": "harness", "outcome": "harness_error",
                         "msg": repr(exc)[:300], "tb": traceback.format_exc()[-800:]}]
            finally:
                signal.alarm(0)
            for row in rows:
                f.write(json.dumps(row, default=str) + "\n")
            f.flush()


def drive(cases, out, first=0, sweep=False):
    seed = first
    while seed < first + cases:
        proc = subprocess.run([sys.executable, __file__, "--worker", str(seed),
                               str(first + cases), out] + (["--sweep"] if sweep else []),
                              check=False)
        if proc.returncode == 0:
            break
        started = [json.loads(line)["start"] for line in open(out) if '"start"' in line]
        last = started[-1]
        with open(out, "a") as f:
            f.write(json.dumps({"seed": last, "call": "?", "outcome": "crash",
                                "msg": f"exit code {proc.returncode}"}) + "\n")
        seed = last + 1


def summary(path):
    rows = [json.loads(line) for line in open(path) if '"outcome"' in line]
    print(collections.Counter(r["outcome"] for r in rows))
    groups = collections.defaultdict(list)
    for r in rows:
        if r["outcome"] not in ("ok", "clear_error"):
            key = (r["outcome"], r.get("estimator"), r.get("call"), r.get("exc"),
                   (r.get("msg") or "")[:90], r.get("where"))
            groups[key].append(r["seed"])
    for key, seeds in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(len(seeds), key, seeds[:5])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--out", default="fuzz_api.jsonl")
    parser.add_argument("--summary")
    parser.add_argument("--worker", nargs=3)
    parser.add_argument("--sweep", action="store_true",
                        help="every parameter at its extremes, crossed with the solvers")
    args = parser.parse_args()
    if args.worker:
        worker(int(args.worker[0]), int(args.worker[1]), args.worker[2], args.sweep)
    elif args.summary:
        summary(args.summary)
    else:
        if os.path.exists(args.out):
            os.remove(args.out)
        cases = len(sweep_cases()) if args.sweep else args.cases
        drive(cases, args.out, args.first, args.sweep)
        summary(args.out)
