"""The multinomial (softmax) logistic loss of K classes, for the gradient solvers.

One row's loss is ``-log softmax(W x + b)_y`` and its gradient with respect to the
``K x (p + 1)`` matrix ``theta = (W, b)`` is ``(softmax(m) - e_y) (x, 1)^T``. Since
``||softmax(m) - e_y||_2^2 = (1 - s_y)^2 + sum_{k != y} s_k^2 <= 2 (1 - s_y)^2 <= 2``,
its Frobenius norm is at most ``C2 = sqrt(2) sqrt(L^2 + 1)`` for rows clipped to l2
norm ``L``, whatever K is: a sum of them moves by at most ``2 C2`` when one example is
replaced, one release of the whole matrix per step (one-vs-rest releases K sums of
``2 sqrt(L^2 + 1)`` each, ``sqrt(K / 2)`` times the noise for the same budget). The
Hessian of the softmax loss in the margins is below ``I / 2`` (Boehning 1992), so
one example's loss is ``(L^2 + 1) / 2``-smooth in ``theta``.

The targets are the estimator's one-vs-rest columns (``+1`` for the row's class,
``-1`` elsewhere), so every data view, local or on dask blocks, hands them over as
it does to the one-vs-rest problems.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ._gradient import local_batch

__all__ = ["multinomial_bounds", "block_multinomial_gradient_sum"]


def multinomial_bounds(bounds):
    """The :class:`~._gradient.GradientBounds` of the multinomial loss on the rows
    ``bounds`` clips to (its norm, l1 bound, intercept and penalty): the constants of
    one row's gradient over a whole ``K x (p + 1)`` matrix (module docstring)."""
    row_sq = bounds.norm_bound**2 + bounds.intercept
    row_l1 = bounds.l1_bound if math.isfinite(bounds.l1_bound) \
        else bounds.norm_bound * math.sqrt(bounds.n_features)
    return dataclasses.replace(
        bounds, derivative_clip=math.sqrt(2.0), grad_l2=math.sqrt(2.0 * row_sq),
        # ||softmax(m) - e_y||_1 <= 2.
        grad_l1=2.0 * (row_l1 + bounds.intercept), smoothness=0.5 * row_sq + bounds.l2)


def multinomial_gradient_sum(rows, Y, bounds, theta, out=None):
    """Sum over ``rows`` of the multinomial gradients at ``theta`` (K x n_params),
    flattened, written into ``out`` if given (a vector of ``theta.size``). Sparse rows
    stay sparse: only ``rows @ W^T`` (n x K) and ``rows^T r_k`` (p, one class at a
    time) are formed."""
    d = bounds.n_features
    margins = np.asarray(rows @ theta[:, :d].T)
    if bounds.intercept:
        margins = margins + theta[:, d]
    margins = margins - margins.max(axis=1, keepdims=True)
    prob = np.exp(margins)
    prob /= prob.sum(axis=1, keepdims=True)
    residual = prob - (Y > 0)
    out = np.empty(theta.size) if out is None else out
    grad = out.reshape(theta.shape)
    for k in range(theta.shape[0]):
        # One class at a time (the same sums, in the same order, as rows^T R): the
        # product of all K is a p x K matrix beside the result, 400 MB at p = 10^7, K = 5.
        grad[k, :d] = rows.T @ np.ascontiguousarray(residual[:, k])
    if bounds.intercept:
        grad[:, d] = residual.sum(axis=0)
    if not np.all(np.isfinite(out)):
        raise FloatingPointError("non-finite gradient")
    return out


def block_multinomial_gradient_sum(rows, Y, start, bounds, theta, batch):
    """:func:`multinomial_gradient_sum` over the rows of one block that are in the
    batch, followed by the number of rows summed (as
    :func:`~._gradient.block_gradient_sum`, whose batch conventions it shares)."""
    local = local_batch(rows.shape[0], start, batch)
    if local is not None:
        rows, Y = rows[local], Y[local]
    out = np.empty(theta.size + 1)
    multinomial_gradient_sum(rows, np.asarray(Y), bounds, theta, out=out[:-1])
    out[-1] = rows.shape[0]
    return out
