"""Private releases of the data statistics that set a solver's constants.

A solver's step sizes and clipping thresholds may come from public bounds or
from a private, accounted estimate; never from raw statistics of the data.
"""

import math

import numpy as np
import scipy.sparse as sp

from ..utils._entry_blocks import entry_blocks
from .mechanisms import GaussianMechanism, LaplaceMechanism, gaussian_sigma_for_rho

__all__ = ["column_second_moment_sums", "row_square_norms", "release_column_second_moments",
           "second_moment_sensitivities", "second_moment_noise_std"]


def column_second_moment_sums(X, norm_bound=np.inf, square_norm=None, *,
                              feature_bound=None):
    """``sum_i xt_ij^2`` for every column j, with ``xt_i = x_i min(1, L / ||x_i||_2)``.

    Not private: this is the statistic :func:`release_column_second_moments`
    perturbs. Rows are clipped to l2 norm ``L = norm_bound`` (no clipping for
    ``np.inf``), after every entry is clipped to ``[-b_j, b_j]`` if ``feature_bound``
    (``b``: a number or one bound per feature) is given. Sparse input (CSR or CSC) is
    read a block of whole rows or columns at a time: nothing of the size of ``X`` is
    allocated, and every sum adds its terms in the order they are stored.

    With ``square_norm = c``, each row's vector of squares ``(xt_ij^2)_j`` is rescaled
    to l2 norm ``c`` (a row of zeros adds nothing): every row then moves the sums by
    the same amount, and two rows' vectors, non-negative, differ by at most
    ``sqrt(2) c`` in l2, whatever the entries.

    Returns
    -------
    sums : ndarray of shape (n_features,)
    n_clipped : int
        Number of rows whose norm exceeds ``norm_bound``.
    """
    X = _readable(X)
    weights, n_clipped = _row_weights(X, norm_bound, feature_bound)
    if square_norm is not None:
        # The clipped row's squares are the raw ones times its weight: so is their norm.
        norms = weights * np.sqrt(_row_sums(X, feature_bound, power=4))
        weights = np.divide(weights * float(square_norm), norms, out=np.zeros_like(norms),
                            where=norms > 0)
    if not sp.issparse(X):
        squares = np.square(_clipped_dense(X, feature_bound))
        if square_norm is None and math.isinf(norm_bound):
            return np.asarray(squares.sum(axis=0), dtype=float).ravel(), 0
        return np.asarray(squares.T @ weights, dtype=float).ravel(), n_clipped
    sums = np.zeros(X.shape[1])
    for entries, rows, cols in entry_blocks(X):
        np.add.at(sums, cols, _clipped_powers(X, entries, cols, feature_bound, 2) * weights[rows])
    return sums, n_clipped


def row_square_norms(X, norm_bound=np.inf, *, feature_bound=None):
    """``||(xt_ij^2)_j||_2`` of every row, ``xt_i`` the row (its entries clipped to
    ``feature_bound`` if given) clipped to l2 norm ``norm_bound``: the norms
    :func:`column_second_moment_sums` rescales with ``square_norm``. Not private."""
    X = _readable(X)
    weights, _ = _row_weights(X, norm_bound, feature_bound)
    return weights * np.sqrt(_row_sums(X, feature_bound, power=4))


def _readable(X):
    """An array, or a CSR or CSC matrix (other formats as CSR) with each ``x_ij``'s
    duplicates summed, in doubles, so that every entry is clipped as a whole (a sum of
    duplicates in the caller's integer type could wrap)."""
    if not sp.issparse(X):
        return np.asarray(X, dtype=float)
    if X.format not in ("csr", "csc"):
        X = sp.csr_matrix(X)
    if X.has_canonical_format:
        return X
    X = X.astype(np.float64)
    X.sum_duplicates()
    return X


def _row_weights(X, norm_bound, feature_bound):
    """``(weights, n_clipped)``: each row's factor ``min(1, L / ||x_i||_2)^2`` and the
    number of rows it shrinks."""
    row_norm_sq = _row_sums(X, feature_bound, power=2)
    weights = np.ones_like(row_norm_sq)
    clipped = row_norm_sq > norm_bound**2
    weights[clipped] = norm_bound**2 / row_norm_sq[clipped]
    return weights, int(clipped.sum())


def _row_sums(X, feature_bound, power):
    """``sum_j x_ij^power`` of every row (``power`` 2 or 4), entries clipped first."""
    if not sp.issparse(X):
        return np.sum(np.square(_clipped_dense(X, feature_bound)) ** (power // 2), axis=1)
    sums = np.zeros(X.shape[0])
    for entries, rows, cols in entry_blocks(X):
        np.add.at(sums, rows, _clipped_powers(X, entries, cols, feature_bound, power))
    return sums


def _clipped_powers(X, entries, cols, feature_bound, power):
    """The stored entries ``entries`` of ``X`` (in columns ``cols``), clipped to
    ``feature_bound`` if given, to the power 2 or 4."""
    x = X.data[entries].astype(np.float64)
    if feature_bound is not None:
        b = np.asarray(feature_bound, dtype=float)
        bound = b[cols] if b.ndim else b
        np.clip(x, -bound, bound, out=x)
    np.square(x, out=x)
    return np.square(x, out=x) if power == 4 else x


def _clipped_dense(X, feature_bound):
    if feature_bound is None:
        return X
    b = np.asarray(feature_bound, dtype=float)
    return np.clip(X, -b, b)


def second_moment_sensitivities(norm_bound, max_entry):
    """``(Delta_1, Delta_2)`` of the released vector of :func:`release_column_second_moments`:
    ``2 L^2 + 1`` and ``sqrt(2 m^2 L^2 + 1)`` with ``m = min(max_entry, L)`` (derived
    there)."""
    m = min(float(max_entry), float(norm_bound))
    return 2.0 * norm_bound**2 + 1.0, math.sqrt(2.0 * m**2 * norm_bound**2 + 1.0)


def second_moment_noise_std(norm_bound, max_entry, *, rho=None, epsilon=None):
    """Standard deviation of the noise :func:`release_column_second_moments` adds to each
    output at a budget of ``rho`` (Gaussian, ``sigma = Delta_2 / sqrt(2 rho)``) or
    ``epsilon`` (Laplace, ``sqrt(2) Delta_1 / epsilon``), before the floating-point-safe
    path's relative slack of about ``2^-16``. A function of public values: it sizes the
    release before any data is read."""
    if (rho is None) == (epsilon is None):
        raise ValueError("give exactly one of rho and epsilon")
    delta_1, delta_2 = second_moment_sensitivities(norm_bound, max_entry)
    if rho is not None:
        return delta_2 / math.sqrt(2.0 * rho)
    return math.sqrt(2.0) * delta_1 / epsilon


def release_column_second_moments(statistic, *, norm_bound, max_entry, rng, mu=None,
                                  epsilon=None, rho=None, floating_point_safe=True):
    """Noisy ``(sums, n_clipped) = column_second_moment_sums(X, norm_bound)``, in one release.

    The released vector is ``(sums_1, ..., sums_p, n_clipped)`` plus Gaussian
    (``mu``) or Laplace (``epsilon``) noise of the same scale on every entry.

    Sensitivity (replace-one): a row contributes ``v_i = (xt_ij^2)_j``, a
    non-negative vector with ``||v_i||_1 = ||xt_i||_2^2 <= L^2`` and, since
    every entry is at most ``m^2 = min(max_entry, L)^2``,
    ``||v_i||_2^2 <= m^2 ||v_i||_1 <= m^2 L^2``. Replacing a row changes the
    sums by ``v - v'``; for non-negative vectors ``||v - v'||_2^2 <= ||v||_2^2 +
    ||v'||_2^2 <= 2 m^2 L^2``, and ``||v - v'||_1 <= 2 L^2``. The count of
    clipped rows changes by at most 1. So ``Delta_2 = sqrt(2 m^2 L^2 + 1)`` and
    ``Delta_1 = 2 L^2 + 1``.

    Privacy, whichever budget is given: ``mu``-GDP with ``sigma = Delta_2 / mu``
    (:class:`GaussianMechanism`, noise in doubles); ``rho``-zCDP with the
    floating-point-safe discrete Gaussian whose ``sigma`` is the smallest that meets
    ``rho`` with the rounding's slack; or epsilon-DP with Laplace scale
    ``Delta_1 / epsilon`` (:class:`LaplaceMechanism`, safe unless
    ``floating_point_safe=False``). ``max_entry`` must be a public bound on ``|x_ij|``
    that holds for every entry (clip entries to it first).

    Returns
    -------
    sums : ndarray of shape (n_features,)
        The noisy sums (may be negative).
    n_clipped : float
        The noisy number of rows above ``norm_bound``.
    noise_std : float
        Standard deviation of the noise of each output.
    """
    if sum(b is not None for b in (mu, epsilon, rho)) != 1:
        raise ValueError("give exactly one of mu, rho and epsilon")
    if not (norm_bound > 0 and math.isfinite(norm_bound)):
        raise ValueError(f"norm_bound must be positive and finite, got {norm_bound!r}")
    sums, n_clipped = statistic
    value = np.append(np.asarray(sums, dtype=float), float(n_clipped))
    delta_1, sensitivity = second_moment_sensitivities(norm_bound, max_entry)
    if epsilon is None:
        if mu is not None:
            mechanism = GaussianMechanism(sensitivity, sigma=sensitivity / mu)
        else:
            sigma = gaussian_sigma_for_rho(sensitivity, rho)
            mechanism = GaussianMechanism(sensitivity, sigma=sigma, floating_point_safe=True)
        noisy, noise_std = mechanism.randomise(value, rng), mechanism.sigma
    else:
        mechanism = LaplaceMechanism(delta_1, epsilon=epsilon,
                                     floating_point_safe=floating_point_safe)
        noisy, noise_std = mechanism.randomise(value, rng), math.sqrt(2.0) * mechanism.scale
    return noisy[:-1], float(noisy[-1]), noise_std
