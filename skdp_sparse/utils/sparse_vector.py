"""A vector of length ``size`` given by its non-zero entries.

The solvers whose steps touch a few coordinates of a long vector (a gradient over a
small batch of sparse rows, the release of its noisy mean after an l1-ball projection)
pass these instead of dense arrays, so that a step costs what it touches and not the
vector's length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SparseVector", "aligned"]


@dataclass(frozen=True)
class SparseVector:
    """``values`` at ``positions`` (distinct), 0 elsewhere, in a vector of length ``size``."""

    positions: np.ndarray
    values: np.ndarray
    size: int

    @classmethod
    def from_dense(cls, x):
        """The non-zero entries of ``x``, in increasing order."""
        positions = np.flatnonzero(x)
        return cls(positions, x[positions], x.size)

    @classmethod
    def full(cls, x):
        """Every entry of ``x`` (zeros included), as a sparse vector."""
        return cls(np.arange(x.size), np.asarray(x, dtype=np.float64), x.size)

    def toarray(self):
        out = np.zeros(self.size)
        out[self.positions] = self.values
        return out


def aligned(vectors):
    """The union of the positions of ``vectors`` (increasing), and each vector's values
    on it (0 where it has no entry)."""
    union = np.unique(np.concatenate([v.positions for v in vectors]))
    columns = []
    for v in vectors:
        on_union = np.zeros(union.size)
        on_union[np.searchsorted(union, v.positions)] = v.values
        columns.append(on_union)
    return union, columns
