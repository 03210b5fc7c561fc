"""Exact i.i.d. discrete noise drawn ahead in chunks, for kernels to consume.

Noise that does not depend on the data can be drawn before it is used: a kernel that
takes the next value of a buffer of i.i.d. draws gets exactly the law of a fresh draw,
independent of everything else. The buffer is refilled from Python (where the exact
continuation of the samplers runs), so the consuming kernel only reads integers.
"""

from __future__ import annotations

from fractions import Fraction

import numba
import numpy as np

from ...utils.random import check_generator
from ._exact import _fraction
from ._samplers import (
    _draw,
    _gauss_draw_setup,
    _gaussian_params,
    _laplace_draw_setup,
    _laplace_params,
)


def _setup(law, scale_in_units):
    if law == "laplace":
        return _laplace_draw_setup(*_laplace_params(scale_in_units))
    if law == "gaussian":
        s = _fraction(scale_in_units, "scale_in_units")
        if s < Fraction(1, 1024):
            raise ValueError("the discrete Gaussian sampler supports sigma >= 2^-10")
        return _gauss_draw_setup(*_gaussian_params(s * s))
    raise ValueError(f"law must be 'laplace' or 'gaussian', got {law!r}")


class NoiseBuffer:
    """A chunk of i.i.d. exact discrete noise and the position of the next draw.

    ``law="laplace"``: ``P(z) ∝ exp(-|z| / scale)``; ``"gaussian"``: ``P(z) ∝ exp(-z^2 /
    (2 scale^2))``, the scale in lattice units (as :func:`sample_discrete_laplace` and
    :func:`sample_discrete_gaussian`, which draw them).

    A kernel receives ``values`` and ``pos`` (int64 arrays) and takes draws with
    :func:`noise_take`; when it needs more than are left it returns to Python, which
    calls :meth:`refill` and resumes it. Draws are used in order and never twice.
    """

    def __init__(self, law, scale_in_units, rng, size=4096):
        self._setup = _setup(law, scale_in_units)
        self._rng = check_generator(rng)
        self.law = law
        self.values = np.zeros(int(size), dtype=np.int64)
        self.pos = np.array([self.values.size], dtype=np.int64)

    @property
    def available(self):
        return int(self.values.size - self.pos[0])

    def refill(self, need=0):
        """Draw fresh values behind the unused ones; at least ``need`` become available."""
        left = self.values[self.pos[0]:].copy()
        size = max(self.values.size, int(need))
        if size != self.values.size:
            self.values = np.zeros(size, dtype=np.int64)
        self.values[:left.size] = left
        self.values[left.size:] = _draw(*self._setup, self._rng, size - left.size)
        self.pos[0] = 0

    def take(self, n):
        """The next ``n`` draws (refilling as needed)."""
        if self.available < n:
            self.refill(n)
        i = int(self.pos[0])
        self.pos[0] = i + n
        return self.values[i:i + n].copy()


@numba.njit(cache=True)
def noise_take(values, pos):
    """``(True, z)`` with the next draw of a buffer, or ``(False, 0)`` if it is empty."""
    i = pos[0]
    if i >= values.size:
        return False, np.int64(0)
    pos[0] = i + 1
    return True, values[i]
