"""Losses of generalised linear models, ``l(y, z)`` with margin ``z = x . w + b``.

Each loss is a small object with vectorised NumPy methods (objective values,
gradients) and an integer ``code`` that the Numba kernels dispatch on through
:func:`loss_derivative` and :func:`loss_value`, so one kernel serves every loss.

Public constants used by the privacy calibration:

* ``derivative_bound``: ``sup |dl/dz|`` (``inf`` if unbounded). Then the per-example
  gradient coordinate is bounded by ``derivative_bound * |x_ij|``.
* ``smoothness``: ``sup |d^2 l / dz^2|``, so coordinate j of the average loss is
  ``smoothness * max_i x_ij^2``-smooth.

Labels: the logistic loss takes ``y`` in {-1, +1}.
"""

import numba
import numpy as np
from scipy.special import expit

__all__ = ["Loss", "LogisticLoss", "SquaredLoss", "HuberLoss", "loss_value", "loss_derivative"]

LOGISTIC, SQUARED, HUBER = 0, 1, 2


@numba.njit(cache=True, inline="always")
def loss_value(code, y, z, param):
    """Loss of one example; ``param`` is the Huber threshold (unused otherwise)."""
    if code == LOGISTIC:
        t = -y * z
        return t + np.log1p(np.exp(-t)) if t > 0 else np.log1p(np.exp(t))
    r = z - y
    if code == SQUARED:
        return 0.5 * r * r
    a = abs(r)
    return 0.5 * r * r if a <= param else param * (a - 0.5 * param)


@numba.njit(cache=True, inline="always")
def loss_derivative(code, y, z, param):
    """``dl/dz`` of one example."""
    if code == LOGISTIC:
        t = y * z
        # exp(-|t|) never overflows; the select (not a branch on the sign of t, which
        # the rows of a column take at random) gives the same bits as
        # -y e^-t / (1 + e^-t) for t > 0 and -y / (1 + e^t) otherwise.
        e = np.exp(-abs(t))
        return -y * (e if t > 0 else 1.0) / (1.0 + e)
    r = z - y
    if code == SQUARED:
        return r
    if r > param:
        return param
    if r < -param:
        return -param
    return r


class Loss:
    code = -1
    param = 0.0
    derivative_bound = np.inf
    smoothness = 1.0

    def __eq__(self, other):
        return type(self) is type(other) and self.param == other.param

    def __hash__(self):
        return hash((type(self).__name__, self.param))

    def __repr__(self):
        return f"{type(self).__name__}()"


class LogisticLoss(Loss):
    """``l(y, z) = log(1 + exp(-y z))``, y in {-1, +1}; ``|l'| <= 1``, ``l'' <= 1/4``."""

    code = LOGISTIC
    derivative_bound = 1.0
    smoothness = 0.25

    def value(self, y, z):
        return np.logaddexp(0.0, -y * z)

    def derivative(self, y, z):
        return -y * expit(-y * z)


class SquaredLoss(Loss):
    """``l(y, z) = (z - y)^2 / 2``; derivative unbounded (clipping required), ``l'' = 1``."""

    code = SQUARED
    smoothness = 1.0

    def value(self, y, z):
        return 0.5 * (z - y) ** 2

    def derivative(self, y, z):
        return z - y


class HuberLoss(Loss):
    """Huber loss with threshold ``threshold``: quadratic for ``|z - y| <= threshold``.

    ``|l'| <= threshold``, ``l'' <= 1``.
    """

    code = HUBER
    smoothness = 1.0

    def __init__(self, threshold=1.0):
        if not threshold > 0:
            raise ValueError(f"the Huber threshold must be > 0, got {threshold}")
        self.param = float(threshold)
        self.derivative_bound = float(threshold)

    def value(self, y, z):
        a = np.abs(z - y)
        return np.where(a <= self.param, 0.5 * a**2, self.param * (a - 0.5 * self.param))

    def derivative(self, y, z):
        return np.clip(z - y, -self.param, self.param)

    def __repr__(self):
        return f"HuberLoss(threshold={self.param})"

