"""
Fit time against the number of features
=======================================

Sparse data can have millions of columns while each row has a few non-zeros.
This example times the private classifiers on 20,000 rows with 20 non-zeros
each, for 1,000 to 1,000,000 features, next to scikit-learn's non-private
:class:`~sklearn.linear_model.LogisticRegression` (lbfgs). No estimator
densifies the data.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

from skdp_sparse.linear_model import DPOutputPerturbationClassifier, DPSparseLogisticRegression

# %%
# Data
# ----
# Rows of l2 norm 1 with 20 non-zeros at uniformly random positions, so the
# number of stored entries is the same for every ``d``.

def make_data(n, d, nnz_per_row, rng):
    cols = rng.integers(0, d, size=(n, nnz_per_row))
    vals = rng.standard_normal((n, nnz_per_row))
    X = sp.csr_matrix((vals.ravel(), cols.ravel(),
                       np.arange(0, n * nnz_per_row + 1, nnz_per_row)), shape=(n, d))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X)
    y = (X @ rng.standard_normal(d) > 0).astype(int)
    return X, y


rng = np.random.default_rng(0)
n_samples = 20_000
delta = 1.0 / n_samples**2

# %%
# Estimators and timing
# ---------------------
# All at ``epsilon = 1``, ``delta = 1/n^2``, with their defaults. The
# coordinate-descent kernels are compiled by Numba on first use (the compiled
# code is then cached on disk), so one small fit of each comes first and is
# not timed. Each time is the best of two fits.

estimators = {
    "DPSparseLogisticRegression, greedy CD": lambda: DPSparseLogisticRegression(classes=[0, 1],
        epsilon=1.0, delta=delta, solver="greedy_cd", random_state=0),
    "DPSparseLogisticRegression, randomised CD": lambda: DPSparseLogisticRegression(classes=[0, 1],
        epsilon=1.0, delta=delta, solver="cd", random_state=0),
    "DPOutputPerturbationClassifier": lambda: DPOutputPerturbationClassifier(classes=[0, 1],
        epsilon=1.0, delta=delta, random_state=0),
    "LogisticRegression (not private)": lambda: LogisticRegression(max_iter=1000),
}

X_small, y_small = make_data(500, 100, 5, rng)
for make in estimators.values():
    make().fit(X_small, y_small)


def best_time(make, X, y, repeats=2):
    times = []
    for _ in range(repeats):
        est = make()
        start = time.perf_counter()
        est.fit(X, y)
        times.append(time.perf_counter() - start)
    return min(times), est


n_features_grid = [1_000, 10_000, 100_000, 1_000_000]
timings = {name: [] for name in estimators}
for d in n_features_grid:
    X, y = make_data(n_samples, d, 20, rng)
    for name, make in estimators.items():
        seconds, est = best_time(make, X, y)
        timings[name].append(seconds)
    print(f"d = {d:>9,}: " + ", ".join(f"{name.split(',')[-1].strip()} {t[-1]:.2f} s"
                                        for name, t in timings.items()))

# %%

fig, ax = plt.subplots(figsize=(6.4, 4.2))
for name, seconds in timings.items():
    ax.plot(n_features_grid, seconds, "o-", label=name)
ax.set(xscale="log", yscale="log", xlabel="number of features d",
       ylabel="fit time (s, best of 2)",
       title=f"n = {n_samples:,}, 20 non-zeros per row, epsilon = 1")
ax.legend(fontsize="small")
fig.tight_layout()
plt.show()

# %%
# What sets the cost
# ------------------
# * Greedy CD runs a number of steps fixed by ``n``, ``epsilon`` and ``delta``
#   (a few hundred here). Each step draws the coordinate from the exponential
#   mechanism: by a pass over all ``d`` scores below 4,096 coordinates, above
#   from a log-sum-exp tree in which only the scores that changed are updated
#   (``O(log d)`` each). The update then touches the rows that hold the chosen
#   column and the gradients of their coordinates; the gradient is never
#   recomputed from scratch.
# * Randomised CD makes five passes over the coordinates by default; an update
#   reads the rows of one column, so a pass costs about the number of stored
#   entries plus ``O(1)`` per coordinate.
# * Output perturbation solves one regularised problem to a certified
#   accuracy with L-BFGS (and Newton steps when L-BFGS stops short of the
#   certificate), each iteration a pass over the stored entries plus ``O(d)``
#   work, then adds noise to all ``d`` coefficients.
