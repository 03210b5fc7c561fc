"""
Privacy-utility curves of the private classifiers
=================================================

Test accuracy against ``epsilon`` for every private solver of logistic
regression in ``skdp_sparse``, next to scikit-learn's non-private
:class:`~sklearn.linear_model.LogisticRegression`, on generated sparse data.

* :class:`~skdp_sparse.linear_model.DPSparseLogisticRegression` with
  ``solver="greedy_cd"`` (DP-GCD: exponential-mechanism selection and Gaussian
  updates, composed in zCDP), the same with ``selection="laplace"`` and
  ``delta=0`` (pure DP), and ``solver="cd"`` (DP-CD: randomised coordinates,
  Gaussian updates);
* :class:`~skdp_sparse.linear_model.DPOutputPerturbationClassifier`: the
  L2-regularised solution plus Gaussian noise (``delta > 0``) or Laplace noise
  (``delta = 0``, pure DP).

Each point is the mean of five fits with different noise; the bands show the
standard deviation over those fits.
"""

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from skdp_sparse.linear_model import (
    DPOutputPerturbationClassifier,
    DPSparseLogisticRegression,
)

# %%
# Data
# ----
# 20,000 rows and 2,000 features; each row has 15 non-zero entries and l2 norm
# 1, with some features much more frequent than others (a Zipf law, as for
# words). The label depends on 30 of the features. Rows of norm 1 satisfy the
# public bounds of every estimator below: entries ``|x_ij| <= 1``
# (``feature_bound=1``), ``||x_i||_2 <= 1`` (``norm_bound=1``) and at most 15
# non-zeros (``sparsity=15``).

rng = np.random.default_rng(0)
n_samples, n_features, nnz_per_row = 20_000, 2_000, 15

cols = np.minimum(rng.zipf(1.3, size=(n_samples, nnz_per_row)) - 1, n_features - 1)
vals = rng.standard_normal((n_samples, nnz_per_row))
X = sp.csr_matrix((vals.ravel(), cols.ravel(),
                   np.arange(0, n_samples * nnz_per_row + 1, nnz_per_row)),
                  shape=(n_samples, n_features))
X.sum_duplicates()
row_norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
X = sp.csr_matrix(sp.diags(1.0 / row_norms) @ X)

w = np.zeros(n_features)
w[:30] = 8 * rng.standard_normal(30)
y = (X @ w + 0.3 * rng.standard_normal(n_samples) > 0).astype(int)

X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
n_train = X_train.shape[0]
delta = 1.0 / n_train**2
print(f"{n_train} training rows, delta = 1/n^2 = {delta:.1e}, "
      f"majority class {max(y_test.mean(), 1 - y_test.mean()):.3f}")

# %%
# The estimators
# --------------
# A function of ``(epsilon, seed)`` per method. Approximate-DP methods use
# ``delta = 1/n^2``; pure-DP methods ``delta = 0``. Pure-DP output perturbation
# also gets the public ``sparsity``, which can shrink its l1 sensitivity.
# Everything else is left at its default, derived from ``n``, ``epsilon``,
# ``delta`` and the public bounds.

methods = {
    "greedy CD (zCDP)": lambda eps, seed: DPSparseLogisticRegression(classes=[0, 1],
        epsilon=eps, delta=delta, solver="greedy_cd", random_state=seed),
    "greedy CD, Laplace (pure DP)": lambda eps, seed: DPSparseLogisticRegression(classes=[0, 1],
        epsilon=eps, delta=0.0, solver="greedy_cd", selection="laplace", random_state=seed),
    "randomised CD": lambda eps, seed: DPSparseLogisticRegression(classes=[0, 1],
        epsilon=eps, delta=delta, solver="cd", random_state=seed),
    "output perturbation, Gaussian": lambda eps, seed: DPOutputPerturbationClassifier(
        classes=[0, 1], epsilon=eps, delta=delta, norm_bound=1.0, random_state=seed),
    "output perturbation, Laplace (pure DP)": lambda eps, seed: DPOutputPerturbationClassifier(
        classes=[0, 1], epsilon=eps, delta=0.0, norm_bound=1.0, sparsity=nnz_per_row,
        random_state=seed),
}

epsilons = np.geomspace(0.05, 20, 7)
seeds = range(5)
scores = {
    name: np.array([[make(eps, seed).fit(X_train, y_train).score(X_test, y_test)
                     for seed in seeds] for eps in epsilons])
    for name, make in methods.items()
}
non_private = LogisticRegression(max_iter=1000).fit(X_train, y_train).score(X_test, y_test)

# %%
# The curves
# ----------

fig, ax = plt.subplots(figsize=(9.5, 4.5))
for name, acc in scores.items():
    mean, std = acc.mean(axis=1), acc.std(axis=1)
    style = "s--" if "pure" in name else "o-"
    (line,) = ax.plot(epsilons, mean, style, label=name)
    ax.fill_between(epsilons, mean - std, mean + std, color=line.get_color(), alpha=0.15)
ax.axhline(non_private, color="black", label="LogisticRegression (not private)")
ax.axhline(max(y_test.mean(), 1 - y_test.mean()), color="grey", ls=":",
           label="majority class")
ax.set(xscale="log", xlabel="epsilon", ylabel="test accuracy",
       title=f"n = {n_train}, d = {n_features}; dashed: pure DP (delta = 0)")
ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
fig.tight_layout()
plt.show()

# %%
# Reading the curves
# ------------------
# * Pure DP costs more accuracy than approximate DP at the same epsilon. For
#   greedy CD, the epsilons of the Laplace steps add up, while Gaussian steps
#   compose in zCDP, so each of its many steps gets much less noise. Output
#   perturbation releases once; its Laplace noise is calibrated to the l1
#   sensitivity of the solution, larger than the l2 sensitivity the Gaussian
#   noise is calibrated to.
# * Output perturbation adds its noise once, to the final model, and does well
#   here. The coordinate methods spread the budget over many noisy steps;
#   greedy CD returns a sparse model, with at most as many non-zero
#   coefficients as steps.
# * Even at large epsilon the private models stay below the non-private one:
#   the defaults clip gradients to the public bounds, stop after a number of
#   steps fixed in advance, and output perturbation regularises (its ``alpha``
#   comes from a tuning rule, not from the data). Tuning these costs privacy
#   too; see :ref:`model_selection`.
