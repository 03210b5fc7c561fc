"""Separable penalties ``psi(w) = sum_j psi_j(w_j)`` for coordinate descent.

Each penalty is a small object with a vectorised :meth:`value` and an integer
``code`` plus two parameters ``(a, b)`` that the Numba kernels dispatch on
through :func:`prox` and :func:`subgrad_distance`, so one kernel serves every
penalty. Every penalty here is an elastic net in disguise,
``psi_j(w) = a |w| + (b / 2) w^2``, which keeps the two Numba functions small;
the code still selects the branch, so a penalty of another shape only needs a
new code.

The intercept is never penalised: the kernels use :data:`NONE` for it.
"""

import numbers

import numba
import numpy as np

__all__ = [
    "Penalty",
    "NoPenalty",
    "L2",
    "L1",
    "ElasticNet",
    "prox",
    "subgrad_distance",
    "penalty_value",
]

NONE, L2_CODE, L1_CODE, ENET_CODE = 0, 1, 2, 3


@numba.njit(cache=True, inline="always")
def prox(code, a, b, w_j, step):
    """``argmin_u (u - w_j)^2 / 2 + step * psi_j(u)``."""
    if code == NONE:
        return w_j
    t = step * a
    if w_j > t:
        u = w_j - t
    elif w_j < -t:
        u = w_j + t
    else:
        return 0.0
    return u / (1.0 + step * b)


@numba.njit(cache=True, inline="always")
def subgrad_distance(code, a, b, w_j, g_j):
    """``min_{xi in d psi_j(w_j)} |g_j + xi|``: zero exactly at a coordinate optimum."""
    if code == NONE:
        return abs(g_j)
    if w_j > 0.0:
        return abs(g_j + a + b * w_j)
    if w_j < 0.0:
        return abs(g_j - a + b * w_j)
    # At 0 the subdifferential is [-a, a]: only the excess of |g_j| over a counts.
    return max(abs(g_j) - a, 0.0)


@numba.njit(cache=True, inline="always")
def penalty_value(code, a, b, w_j):
    """``psi_j(w_j)`` of one coordinate."""
    if code == NONE:
        return 0.0
    return a * abs(w_j) + 0.5 * b * w_j * w_j


def _check_nonneg(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    value = float(value)
    if not (0.0 <= value < np.inf):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


class Penalty:
    code = NONE
    a = 0.0
    b = 0.0

    def value(self, w):
        """``sum_j psi_j(w_j)`` (pass the coefficients only, never the intercept)."""
        w = np.asarray(w, dtype=float)
        return float(self.a * np.abs(w).sum() + 0.5 * self.b * np.dot(w.ravel(), w.ravel()))

    def __eq__(self, other):
        return type(self) is type(other) and (self.a, self.b) == (other.a, other.b)

    def __hash__(self):
        return hash((type(self).__name__, self.a, self.b))


class NoPenalty(Penalty):
    """``psi = 0``."""

    code = NONE

    def value(self, w):
        return 0.0

    def __repr__(self):
        return "NoPenalty()"


class L2(Penalty):
    """``psi(w) = (alpha / 2) ||w||_2^2``."""

    code = L2_CODE

    def __init__(self, alpha):
        self.alpha = _check_nonneg("alpha", alpha)
        self.b = self.alpha

    def __repr__(self):
        return f"L2(alpha={self.alpha})"


class L1(Penalty):
    """``psi(w) = alpha ||w||_1``."""

    code = L1_CODE

    def __init__(self, alpha):
        self.alpha = _check_nonneg("alpha", alpha)
        self.a = self.alpha

    def __repr__(self):
        return f"L1(alpha={self.alpha})"


class ElasticNet(Penalty):
    """scikit-learn's convention:
    ``psi(w) = alpha * l1_ratio ||w||_1 + alpha * (1 - l1_ratio) / 2 ||w||_2^2``."""

    code = ENET_CODE

    def __init__(self, alpha, l1_ratio=0.5):
        self.alpha = _check_nonneg("alpha", alpha)
        l1_ratio = _check_nonneg("l1_ratio", l1_ratio)
        if l1_ratio > 1.0:
            raise ValueError(f"l1_ratio must be in [0, 1], got {l1_ratio!r}")
        self.l1_ratio = l1_ratio
        self.a = self.alpha * l1_ratio
        self.b = self.alpha * (1.0 - l1_ratio)

    @classmethod
    def from_strengths(cls, l1, l2):
        """The penalty ``l1 ||w||_1 + (l2 / 2) ||w||^2`` with these exact strengths."""
        l1, l2 = _check_nonneg("l1", l1), _check_nonneg("l2", l2)
        if l1 == 0 and l2 == 0:
            return NoPenalty()
        if l2 == 0:
            return L1(l1)
        if l1 == 0:
            return L2(l2)
        penalty = cls(l1 + l2, l1 / (l1 + l2))
        penalty.a, penalty.b = l1, l2
        return penalty

    def __repr__(self):
        return f"ElasticNet(alpha={self.alpha}, l1_ratio={self.l1_ratio})"
