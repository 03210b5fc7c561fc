"""
Private mean of sparse vectors: error against n and d
======================================================

:class:`~skdp_sparse.mean.DPSparseMeanEstimator` releases the mean of rows
that have at most ``s`` non-zero entries and l2 norm at most ``L``. Adding
noise to every one of the ``d`` coordinates gives an error that grows like
``sqrt(d)``; the projection mechanism (noise, then the Euclidean projection
onto the l1 ball of radius ``L sqrt(s)``, which contains every such mean) only
pays ``log d``. We measure the l2 error of both against the number of rows
``n`` and the dimension ``d``, with pure DP (Laplace noise) and approximate DP
(Gaussian noise), and compare with the rates of the theory.
"""

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp

from skdp_sparse.mean import DPSparseMeanEstimator

# %%
# Data
# ----
# Each row has ``s = 10`` non-zero entries at positions drawn from a Zipf law
# (a few features are frequent, most are rare) and l2 norm 1, so the public
# bounds ``norm_bound=1``, ``sparsity=10`` hold and clipping changes nothing:
# the error below is the privacy noise alone.

def sparse_rows(n, d, s, rng):
    cols = np.minimum(rng.zipf(1.5, size=(n, s)) - 1, d - 1)
    vals = np.abs(rng.standard_normal((n, s)))
    X = sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(0, n * s + 1, s)), shape=(n, d))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / norms) @ X)


S, EPSILON, DELTA = 10, 1.0, 1e-6
rng = np.random.default_rng(0)

# %%
# The estimators
# --------------
# ``method="projection"`` is Algorithm 1 of Ghazi et al., "Differentially
# Private Optimization with Sparse Gradients"; ``"laplace"`` and
# ``"gaussian"`` add the same kind of noise without the projection. With
# ``delta=0`` the noise is Laplace (pure DP); with ``delta > 0`` Gaussian, with
# the smallest standard deviation that meets ``(epsilon, delta)``.

methods = {
    "projection, pure DP": ("projection", 0.0),
    "Laplace noise only, pure DP": ("laplace", 0.0),
    "projection, delta=1e-6": ("projection", DELTA),
    "Gaussian noise only, delta=1e-6": ("gaussian", DELTA),
}


def errors(n, d, seeds=range(3)):
    X = sparse_rows(n, d, S, rng)
    exact = np.asarray(X.mean(axis=0)).ravel()
    out = {"||mean||": np.linalg.norm(exact)}
    for name, (method, delta) in methods.items():
        out[name] = np.mean([
            np.linalg.norm(DPSparseMeanEstimator(epsilon=EPSILON, delta=delta, norm_bound=1.0,
                                                 sparsity=S, method=method,
                                                 random_state=seed).fit(X).mean_ - exact)
            for seed in seeds])
    return out


# %%
# The rates
# ---------
# Table 1 of the paper, for ``L = 1``, up to constant factors. Pure DP:
# projection ``min(sqrt(s ln d / (eps n)), sqrt(s d) / (eps n))``, Laplace
# noise ``sqrt(s d) / (eps n)``. Approximate DP: projection
# ``min((s ln d ln(1/delta))^(1/4) / sqrt(eps n), sqrt(d ln(1/delta)) / (eps n))``,
# Gaussian noise ``sqrt(d ln(1/delta)) / (eps n)``. Constants are left out, so
# compare the slopes of the measured and the theoretical curves, not their
# heights.

def rates(n, d):
    n, en, lid = np.asarray(n, float), EPSILON * np.asarray(n, float), np.log(1 / DELTA)
    laplace = np.sqrt(S * d) / en
    gaussian = np.sqrt(d * lid) / en
    return {
        "projection, pure DP": np.minimum(np.sqrt(S * np.log(d) / en), laplace),
        "Laplace noise only, pure DP": laplace,
        "projection, delta=1e-6": np.minimum((S * np.log(d) * lid) ** 0.25 / np.sqrt(en),
                                             gaussian),
        "Gaussian noise only, delta=1e-6": gaussian,
    }


# %%
# Error against ``n`` (``d = 10^5``) and against ``d`` (``n = 10^4``)
# --------------------------------------------------------------------

ns = np.array([1_000, 3_000, 10_000, 30_000, 100_000])
ds = np.array([1_000, 10_000, 100_000, 1_000_000])
by_n = [errors(n, 100_000) for n in ns]
by_d = [errors(10_000, d) for d in ds]


fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharey=True)
panels = ((axes[0], ns, by_n, rates(ns, 100_000), "n (d = 100,000)"),
          (axes[1], ds, by_d, rates(10_000, ds), "d (n = 10,000)"))
for ax, x, results, theory, xlabel in panels:
    for color, name in zip(("C0", "C1", "C2", "C3"), methods, strict=True):
        marker = "s" if "pure" in name else "o"
        ax.plot(x, [r[name] for r in results], marker + "-", color=color, label=name)
        ax.plot(x, np.broadcast_to(theory[name], x.shape), ":", color=color)
    ax.plot(x, [r["||mean||"] for r in results], color="grey", lw=3, alpha=0.4,
            label="||mean|| (error of releasing 0)")
    ax.set(xscale="log", yscale="log", xlabel=xlabel)
axes[0].set_ylabel(f"l2 error (epsilon = {EPSILON:g})")
fig.suptitle("Measured error (solid, mean of 3 runs) and rate up to constants (dotted)")
fig.tight_layout(rect=(0, 0.14, 1, 1))
fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3,
           fontsize="small")
plt.show()

# %%
# What the plots show
# -------------------
# * Against ``n`` plain noise falls like ``1/n``. The projection falls like
#   ``1/sqrt(n)`` while the noise is large and approaches plain noise as the
#   noise becomes small, where projecting changes little (the ``min`` in the
#   rates); at ``d = 1,000`` and ``n = 10^4`` (right panel) the two coincide.
# * Against ``d`` plain noise grows like ``sqrt(d)`` and soon exceeds the norm
#   of the mean itself: such an estimate is worse than releasing zeros. The
#   projection's error barely moves from ``d = 10^4`` to ``10^6``.
# * ``method="auto"`` (the default) makes this choice from the public ``n``,
#   ``d``, ``s``, ``epsilon`` and ``delta``: with ``sparsity`` given it uses the
#   projection (or, for ``delta > 0`` and ``s`` close to ``d``, the Gaussian
#   l1 recovery of the same paper), without it plain noise.
