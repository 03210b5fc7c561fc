"""Fit diffprivlib's LogisticRegression (or, with ``"task": "regression"``, its
LinearRegression pipelines); run with the diffprivlib venv's python.

Usage: ``python _diffprivlib_runner.py DATA.npz '{"epsilon": 1.0, "data_norm": 1.0,
"seeds": [0], "params": {...}}'``. ``DATA.npz`` holds the CSR parts of the train and
test matrices and the {0, 1} labels (written by ``_common.run_diffprivlib``). Prints
one JSON line: accuracy, ROC AUC and fit time (means and per-seed lists).

diffprivlib clips rows with ``np.linalg.norm``, so it gets dense arrays; the
densification is done before the timer starts.
"""

import json
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp


def regression(path, args):
    """``"task": "regression"``: ``DATA.npz`` holds dense ``X_train``, ``X_test``,
    ``y_train``, ``y_test``; ``args`` the public ``lower``, ``upper`` (per feature) and
    ``target`` range. Prints test R^2 per seed of ``LinearRegression(bounds_X,
    bounds_y)`` at ``epsilon`` and of ``StandardScaler(bounds)`` at ``epsilon / 2``
    followed by ``LinearRegression`` at ``epsilon / 2``, whose ``bounds_X`` are the
    public ranges mapped by the scaler's released mean and standard deviation."""
    import diffprivlib
    import sklearn
    from diffprivlib.models import LinearRegression, StandardScaler
    from sklearn.metrics import r2_score

    f = np.load(path)
    Xtr, Xte, ytr, yte = f["X_train"], f["X_test"], f["y_train"], f["y_test"]
    lower, upper = np.asarray(args["lower"]), np.asarray(args["upper"])
    bounds_y = tuple(args["target"])
    eps = float(args["epsilon"])
    out = {"linear": [], "pipeline": [], "diffprivlib": diffprivlib.__version__,
           "sklearn": sklearn.__version__}
    for seed in args.get("seeds", [0]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lr = LinearRegression(epsilon=eps, bounds_X=(lower, upper), bounds_y=bounds_y,
                                  random_state=seed).fit(Xtr, ytr)
            out["linear"].append(float(r2_score(yte, lr.predict(Xte))))
            scaler = StandardScaler(epsilon=eps / 2, bounds=(lower, upper),
                                    random_state=seed).fit(Xtr)
            scaled = np.sort(np.vstack([scaler.transform(lower[None, :]),
                                        scaler.transform(upper[None, :])]), axis=0)
            lr2 = LinearRegression(epsilon=eps / 2, bounds_X=(scaled[0], scaled[1]),
                                   bounds_y=bounds_y, random_state=seed)
            lr2.fit(scaler.transform(Xtr), ytr)
            out["pipeline"].append(float(r2_score(yte, lr2.predict(scaler.transform(Xte)))))
    print(json.dumps(out))


def main(path, args):
    if args.get("task") == "regression":
        return regression(path, args)
    import diffprivlib
    import sklearn
    from diffprivlib.models import LogisticRegression
    from sklearn.metrics import accuracy_score, roc_auc_score

    f = np.load(path)
    Xtr = sp.csr_matrix((f["tr_data"], f["tr_indices"], f["tr_indptr"]),
                        shape=tuple(f["shape_tr"])).toarray()
    Xte = sp.csr_matrix((f["te_data"], f["te_indices"], f["te_indptr"]),
                        shape=tuple(f["shape_te"])).toarray()
    ytr, yte = f["y_train"], f["y_test"]
    accs, aucs, times = [], [], []
    for seed in args.get("seeds", [0]):
        clf = LogisticRegression(epsilon=args["epsilon"], data_norm=args["data_norm"],
                                 random_state=seed, **args.get("params", {}))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            clf.fit(Xtr, ytr)
            times.append(time.perf_counter() - t0)
        accs.append(float(accuracy_score(yte, clf.predict(Xte))))
        aucs.append(float(roc_auc_score(yte, clf.predict_proba(Xte)[:, 1])))
    out = {
        "accuracy": float(np.mean(accs)), "roc_auc": float(np.mean(aucs)),
        "fit_time": float(np.mean(times)), "accuracies": accs, "roc_aucs": aucs,
        "fit_times": times, "diffprivlib": diffprivlib.__version__,
        "sklearn": sklearn.__version__,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], json.loads(sys.argv[2]))
