"""What a private mean computes: the clipped mean of the rows and its release."""

from __future__ import annotations

import math

import numba
import numpy as np
import scipy.sparse as sp

from ..optim.l1_recovery import GaussianSensingMatrix, basis_pursuit
from ..optim.projections import project_l1_ball, project_l1_inplace
from ..privacy.clipping import clip_rows, row_scales_csr, with_summed_duplicates
from ..privacy.mechanisms import GaussianMechanism
from ..utils._first_use import FirstUseBudget
from ._kernels import ROW_BLOCK, clipped_mean_csr
from ._plan import MEASUREMENT_CLIP
from ._sampled_projection import (
    sampled_discrete_projection,
    sampled_gaussian_projection,
    sampling_threshold,
)

_BP_MAX_ITER = 500
_BP_TOL = 1e-4
_ROW_CHUNK_BYTES = 32 * 2**20
# A mean of fewer coordinates draws all of them: a full draw costs about 75 ns a
# coordinate with the floating-point-safe sampler (20 ms at this size, 9 ms against 3 ms
# sampled at 1e5), less than loading the sampled release's kernels into a new process
# (about 0.1 s from Numba's cache, 2.5 s of compilation on first use). Both have the
# same law; only the cost differs.
SAMPLED_RELEASE_MIN_FEATURES = 2**18

# --------------------------------------------------------------------------
# Computations
# --------------------------------------------------------------------------
def clip_to_plan(X, plan):
    """Rows clipped to the public l2 and l1 bounds (CSR or dense)."""
    if sp.issparse(X):
        X = X.tocsr()
    return clip_rows(X, plan.max_l2, plan.max_l1)


def _unsigned(a):
    """The same index array, viewed as unsigned (see ``clipped_mean_csr``)."""
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint64)


# Stored values whose clipped mean a process first takes in NumPy (about 20 ms): the
# kernel's compilation costs about 0.3 s on a new install, the quickstart's mean of
# 2 x 10^5 values a few ms in NumPy (utils._first_use).
_NUMPY_MEAN = FirstUseBudget(clipped_mean_csr, 2**21)


def clipped_mean(X, plan, n=None):
    """Mean of the rows of X after clipping them to the plan's public bounds (their
    sum divided by ``n``, by default the number of rows of ``X``).

    Sparse input is not copied (CSC is converted to CSR; a matrix with duplicate
    or unsorted entries is copied and summed): a Numba kernel computes the rows'
    norms and adds their scaled values, block by block (``clipped_mean_csr``; NumPy
    with the same bits for a process's first means).
    The rows are finite: the estimator checks them before its budget is reserved,
    in memory and in each dask block (the sparse kernel still stops on a NaN).
    """
    n = X.shape[0] if n is None else n
    if not sp.issparse(X):
        X = np.asarray(X, dtype=np.float64)
        return clip_rows(X, plan.max_l2, plan.max_l1).sum(axis=0) / n
    X = with_summed_duplicates(X.tocsr())
    if X.data.dtype != np.float64:
        X = X.astype(np.float64)
    out = np.empty(X.shape[1])
    max_l2, max_l1 = float(plan.max_l2), float(plan.max_l1)
    status = 1
    if not _NUMPY_MEAN.take(X.nnz):
        status = clipped_mean_csr(out, np.empty(ROW_BLOCK), X.data, _unsigned(X.indices),
                                  _unsigned(X.indptr), max_l2, max_l1, float(n))
    if status == 1:
        status = _clipped_mean_numpy(out, X, max_l2, max_l1, float(n))
    if status:
        raise ValueError("X is not a valid CSR matrix: an index points outside it")
    return out


def _clipped_mean_numpy(out, X, max_l2, max_l1, n):
    """``clipped_mean_csr``'s sum in NumPy: the factors from ``row_scales_csr``, the
    same products added in the same order (``np.add.at``), so the bits are the
    kernel's. For a process's first means (:data:`_NUMPY_MEAN`) and for rows the kernel
    hands back (squares that overflow, or a value that is not finite). Returns the
    kernel's status (2: an index outside the matrix)."""
    indptr, indices = X.indptr.astype(np.int64), _unsigned(X.indices)
    if indptr[0] < 0 or indptr[-1] > X.data.size or np.any(np.diff(indptr) < 0):
        return 2
    if indptr[-1] > indptr[0] and indices[indptr[0]:indptr[-1]].max() >= out.size:
        return 2
    scales, finite = row_scales_csr(X.data, X.indptr, max_l2, max_l1)
    if not finite:
        raise ValueError("Input X contains NaN or infinity.")
    rows = slice(indptr[0], indptr[-1])
    out[:] = 0.0
    np.add.at(out, indices[rows], X.data[rows] * np.repeat(scales / n, np.diff(indptr)))
    return 0


def block_clipped_mean(X, Y, start, plan, n):
    """One row block's share of the clipped mean of ``n`` rows (``data.row_sum``)."""
    return clipped_mean(X, plan, n)


def block_measurement_sum(X, Y, start, plan, A):
    """One row block's sum of clipped measurements ``clip(A z_i)`` (``data.row_sum``)."""
    Xc = clip_to_plan(X, plan)
    return clipped_measurement_sum(Xc, A, MEASUREMENT_CLIP * plan.max_l2)


def check_finite(values):
    if not np.isfinite(values).all():
        raise ValueError("Input X contains NaN or infinity.")


@numba.njit(cache=True)
def _project_rows_inplace(Z, radius):
    for i in range(Z.shape[0]):
        project_l1_inplace(Z[i], radius)


def perturb(mean, plan, rng, n_draws=None):
    """Algorithm 1 (or a plain baseline) on a clipped mean: ``(released, noisy - mean)``.

    With ``n_draws`` the release is repeated independently, stacked on the first
    axis: the privacy audits run exactly this code.
    """
    mean = np.asarray(mean, dtype=np.float64)
    # The mechanism sees the mean itself: a floating-point-safe mechanism must
    # round the value to its lattice before adding noise, so the noise is
    # never added here in doubles. ``noise`` is only reported, for tests.
    noisy = plan.mechanism.randomise(mean, rng, n_draws=n_draws)
    noise = noisy - mean
    if math.isfinite(plan.radius):
        if noisy.ndim == 1:
            noisy = project_l1_ball(noisy, plan.radius)
        else:
            noisy = np.ascontiguousarray(noisy)
            _project_rows_inplace(noisy, float(plan.radius))
    return noisy, noise


def release(mean, plan, rng, overwrite=False):
    """The fit's release of a clipped mean: ``perturb``'s law, without its noise.

    The Gaussian projection of at least ``SAMPLED_RELEASE_MIN_FEATURES`` coordinates goes
    through ``sampled_gaussian_projection`` (continuous noise) or
    ``sampled_discrete_projection`` (floating-point-safe noise) where its public threshold
    exists; everything else through ``perturb``.
    ``overwrite`` lets the release reuse ``mean``'s memory.
    """
    mech = plan.mechanism
    if (isinstance(mech, GaussianMechanism) and mech.sigma > 0
            and math.isfinite(plan.radius)):
        mean = np.asarray(mean, dtype=np.float64)
        if mean.ndim == 1 and mean.size >= SAMPLED_RELEASE_MIN_FEATURES:
            t = sampling_threshold(mech.sigma, mean.size, plan.radius)
            if t is not None:
                mean = np.ascontiguousarray(mean)
                if mech.floating_point_safe:
                    return sampled_discrete_projection(
                        mean, mech.sensitivity, mech.sigma, plan.radius, t, rng,
                        overwrite=overwrite)[0]
                return sampled_gaussian_projection(
                    mean, mech.sigma, plan.radius, t, rng, overwrite=overwrite)[0]
    return perturb(mean, plan, rng)[0]


def clipped_measurement_mean(Xc, A, max_norm):
    """``(1/n) sum_i clip(A z_i, max_norm)``, measuring the rows chunk by chunk."""
    return clipped_measurement_sum(Xc, A, max_norm) / Xc.shape[0]


def clipped_measurement_sum(Xc, A, max_norm):
    """``sum_i clip(A z_i, max_norm)``, measuring the rows chunk by chunk."""
    n = Xc.shape[0]
    chunk = max(1, _ROW_CHUNK_BYTES // (8 * A.m))
    total = np.zeros(A.m)
    for start in range(0, n, chunk):
        Y = A.apply_rows(Xc[start:start + chunk])
        norms = np.linalg.norm(Y, axis=1)
        scales = np.minimum(1.0, max_norm / np.maximum(norms, 1e-300))
        total += scales @ Y
    return total


def l1_recovery(data, plan, rng):
    """Compressed-sensing branch of Algorithm 2 with clipped measurements, on a data
    view (the measurements are summed where the rows are)."""
    d = data.n_features
    # A is drawn independently of the data; only its seed is kept.
    A = GaussianSensingMatrix(plan.n_measurements, d, int(rng.integers(2**63 - 1)))
    b = data.row_sum(block_measurement_sum, plan, A) / data.n_samples
    b = plan.mechanism.randomise(b, rng)
    z = basis_pursuit(A, b, max_iter=_BP_MAX_ITER, tol=_BP_TOL)
    if not np.linalg.norm(z) <= 2 * plan.max_l2:
        return np.zeros(d)
    return z
