"""Fit diffprivlib's LogisticRegression; run with the diffprivlib venv's python.

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


def main(path, args):
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
