"""Quickstart: a private mean and a private classifier on generated sparse data.

Run with ``python examples/quickstart.py``. Everything here is generated, so the
script needs no download. Each estimator states the privacy it spent.
"""

import time

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import accuracy_score, roc_auc_score
from sklearn.model_selection import train_test_split

from skdp_sparse import DPSparseLogisticRegression, DPSparseMeanEstimator


def sparse_unit_rows(n, d, s, rng):
    """n rows with s non-zeros each, l2 norm 1, popular features more frequent."""
    cols = np.minimum(rng.zipf(1.3, size=(n, s)) - 1, d - 1)
    vals = rng.exponential(size=(n, s))  # non-negative, like term weights
    X = sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(0, n * s + 1, s)), shape=(n, d))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sp.diags(1 / np.maximum(norms, 1e-12)) @ X


def main():
    rng = np.random.default_rng(0)

    # 1. Private mean of sparse rows: n = 20,000 rows, d = 100,000 features, s = 10.
    n, d, s = 20_000, 100_000, 10
    X = sparse_unit_rows(n, d, s, rng)
    exact = np.asarray(X.mean(axis=0)).ravel()
    print(f"Sparse mean estimation, n={n}, d={d}, s={s}, epsilon=1, delta=1e-6")
    for method in ("projection", "gaussian"):
        est = DPSparseMeanEstimator(epsilon=1.0, delta=1e-6, norm_bound=1.0, sparsity=s,
                                    method=method, random_state=0)
        start = time.perf_counter()
        est.fit(X)
        elapsed = time.perf_counter() - start
        err = np.linalg.norm(est.mean_ - exact)
        print(f"  {method:>10}: l2 error {err:.4f} (||mean|| = {np.linalg.norm(exact):.4f}), "
              f"spent epsilon={est.epsilon_spent_:.3f}, delta={est.delta_spent_:g}, "
              f"{elapsed * 1e3:.0f} ms")

    # 2. Private logistic regression on sparse, text-like data.
    n, d = 20_000, 2_000
    X = sparse_unit_rows(n, d, 15, rng)
    w = np.zeros(d)
    w[:30] = rng.standard_normal(30) * 8
    score = X @ w
    y = (score + 0.3 * rng.standard_normal(n) > np.median(score)).astype(int)
    X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
    delta = 1.0 / X_train.shape[0] ** 2
    clf = DPSparseLogisticRegression(classes=[0, 1], epsilon=1.0, delta=delta, feature_bound=1.0,
                                     random_state=0)
    start = time.perf_counter()
    clf.fit(X_train, y_train)
    elapsed = time.perf_counter() - start
    proba = clf.predict_proba(X_test)[:, 1]
    print(f"\nPrivate logistic regression, n={X_train.shape[0]}, d={d}, "
          f"solver={clf.solver!r} -> {clf.solver_!r}")
    print(f"  test accuracy {accuracy_score(y_test, clf.predict(X_test)):.3f}, "
          f"ROC AUC {roc_auc_score(y_test, proba):.3f} "
          f"(majority class {max(y_test.mean(), 1 - y_test.mean()):.3f})")
    print(f"  spent epsilon={clf.epsilon_spent_:.3f}, delta={clf.delta_spent_:.2e}, "
          f"{clf.n_iter_} iterations, {elapsed:.2f} s")


if __name__ == "__main__":
    main()
