"""Proximal steps that touch a few coordinates, with the penalty's decay applied lazily.

A step ``x <- prox_{eta l1}(x - eta (G + l2 w))`` whose estimate ``G`` is non-zero on a
few coordinates moves every other coefficient by the same map ``w <- S_a(c w)``
(``c = 1 - eta l2``, ``a = eta l1``, ``S_a`` soft-thresholding), whose powers have a
closed form (:func:`._sgd_kernels._lazy_decay`). :class:`LazyIterate` therefore
stores, for each coordinate, its value as of the last step that moved it (``last``)
and the sum of its iterates up to then, and brings a coordinate up to date only when a
step moves it: a step costs what it touches, and the average of the iterates comes out
of the sums at the end. A gradient that reads a coordinate computes its current value
without storing it: the rounding of the closed form depends on how the decay is split,
so storing it would leave in the released bits which coordinates the private rows of a
batch read; the steps that move a coordinate are public (a function of the releases).
The intercept (after the ``n_coef`` coefficients) is unpenalised: constant between the
steps that move it.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ._cd_kernels import clip_scalar
from ._sgd_kernels import _lazy_decay
from .losses import loss_derivative

__all__ = ["LazyIterate"]


@numba.njit(cache=True, inline="always")
def _bring_to(j, t, theta, last, total, n_coef, c, a):
    """Coordinate ``j`` brought to step ``t`` (its decay, and its iterates summed)."""
    k = t - last[j]
    if k > 0:
        x = theta[j]
        if j < n_coef:
            v, s = _lazy_decay(x, k, c, a)
        else:
            v, s = x, k * x
        theta[j] = v
        total[j] += s
        last[j] = t


@numba.njit(cache=True, inline="always")
def _value_at(j, t, theta, last, n_coef, c, a):
    """Coordinate ``j``'s value at step ``t``, the stored state left as it is."""
    x = theta[j]
    k = t - last[j]
    if k > 0 and j < n_coef:
        return _lazy_decay(x, k, c, a)[0]
    return x


@numba.njit(cache=True)
def catch_up(theta, last, total, positions, t, n_coef, c, a):
    """Bring the coordinates at ``positions`` to step ``t``."""
    for q in range(positions.size):
        _bring_to(positions[q], t, theta, last, total, n_coef, c, a)


@numba.njit(cache=True)
def lazy_prox_step(theta, last, total, positions, grad, t, n_coef, eta, l2, l1):
    """Step ``t -> t + 1`` of ``x <- prox_{eta l1}(x - eta (G + l2 w))`` with ``G`` equal
    to ``grad`` at ``positions`` and 0 elsewhere: the coordinates at ``positions`` are
    brought to ``t`` and moved; the others take the same step when next read."""
    c = 1.0 - eta * l2
    a = eta * l1
    for q in range(positions.size):
        j = positions[q]
        _bring_to(j, t, theta, last, total, n_coef, c, a)
        x = theta[j]
        g = grad[q]
        if j < n_coef:
            if l2 != 0.0:
                g = g + l2 * x
            v = x - eta * g
            if l1 != 0.0:
                r = abs(v) - a
                v = math.copysign(r, v) if r > 0.0 else 0.0
        else:
            v = x - eta * g
        theta[j] = v
        total[j] += v
        last[j] = t + 1


@numba.njit(cache=True)
def csr_lazy_gradient(data, indices, indptr, rows, theta, last, t, n_coef, c, a, y, code,
                      param, dclip, acc, mark, touched, current):
    """Sum over ``rows`` of the clipped per-example gradients at step ``t``, read from
    the coefficients' values at ``t`` (``current``, written at each column's first read)
    without changing the stored state (module docstring). Adds into ``acc`` (0 on
    entry wherever ``mark`` is 0) and lists the columns first reached in ``touched``,
    marking them. Returns (number of columns listed, sum of the clipped derivatives)."""
    b = theta[n_coef] if theta.size > n_coef else 0.0
    n_touched = 0
    total_g = 0.0
    for r in range(rows.size):
        i = rows[r]
        z = b
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            if mark[j] == 0:
                mark[j] = 1
                touched[n_touched] = j
                n_touched += 1
                current[j] = _value_at(j, t, theta, last, n_coef, c, a)
            z += data[k] * current[j]
        g = clip_scalar(loss_derivative(code, y[i], z, param), dclip)
        total_g += g
        for k in range(indptr[i], indptr[i + 1]):
            acc[indices[k]] += g * data[k]
    return n_touched, total_g


class LazyIterate:
    """The iterates ``x^0, x^1, ...`` of proximal steps of step size ``eta`` under the
    penalty ``l2/2 ||w||^2 + l1 ||w||_1`` (see the module docstring), and their sum."""

    def __init__(self, theta0, n_coef, eta, l2, l1):
        self.theta = np.array(theta0, dtype=np.float64)
        self.total = self.theta.copy()  # sum of x^0 .. x^last, coordinate by coordinate
        self.last = np.zeros(self.theta.size, dtype=np.int64)
        self.n_coef, self.eta, self.l2, self.l1 = n_coef, float(eta), float(l2), float(l1)
        self.decay = 1.0 - self.eta * self.l2
        self.shrink = self.eta * self.l1
        self.t = 0
        # Scratch of the sparse gradient sums: zero (and unmarked) between calls.
        self._acc = np.zeros(self.theta.size)
        self._mark = np.zeros(self.theta.size, dtype=np.uint8)
        self._touched = np.empty(self.theta.size, dtype=np.int64)
        self._current = np.empty(self.theta.size)

    def current(self):
        """``x^t`` (every coordinate brought to the current step)."""
        catch_up(self.theta, self.last, self.total, np.arange(self.theta.size), self.t,
                 self.n_coef, self.decay, self.shrink)
        return self.theta

    def average(self):
        """The mean of ``x^0 .. x^t``."""
        self.current()
        return self.total / (self.t + 1)

    def step(self, positions, grad):
        """``x^(t+1)`` from the estimate ``grad`` at ``positions`` (0 elsewhere)."""
        lazy_prox_step(self.theta, self.last, self.total, positions, grad, self.t,
                       self.n_coef, self.eta, self.l2, self.l1)
        self.t += 1

    def replace(self, theta):
        """``x^(t+1) = theta``, every coordinate at once (a step that moves them all)."""
        self.current()
        self.theta[:] = theta
        self.total += self.theta
        self.last[:] = self.t + 1
        self.t += 1

    def csr_gradient(self, rows, y, loss, derivative_clip, batch):
        """The sum of the clipped gradients of the CSR ``rows[batch]`` at ``x^t`` on the
        coefficients: ``(columns, values, intercept's sum)``, columns increasing."""
        n_touched, total_g = csr_lazy_gradient(
            rows.data, rows.indices, rows.indptr, batch, self.theta, self.last, self.t,
            self.n_coef, self.decay, self.shrink, y, loss.code, loss.param, derivative_clip,
            self._acc, self._mark, self._touched, self._current)
        columns = np.sort(self._touched[:n_touched])
        values = self._acc[columns]
        self._acc[columns] = 0.0
        self._mark[columns] = 0
        return columns, values, total_g
