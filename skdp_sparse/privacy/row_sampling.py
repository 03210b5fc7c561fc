"""Poisson sampling of rows that any split of the rows into blocks reproduces.

A step of minibatch DP-SGD keeps each row independently with probability ``q``
(Poisson sampling, the sampling its accounting assumes). When the rows live in
blocks on other machines, each block draws its own rows' coins, and a task that
is retried must draw the same ones. :class:`PoissonRows` makes the coin of row
``i`` at a step a function of the step's key and of ``i`` only: the ``i``-th
output of a Philox counter-based generator (Salmon et al. 2011) keyed by the
step. A block of rows ``[start, stop)`` jumps to output ``start`` and reads its
coins, so every chunking of the rows, and every retry, selects the same rows as
one pass over all of them.

The keys come from the fit's ``SeedSequence``, one spawned child per step
(:func:`step_samplers`), so no two steps share coins and a step's coins are
independent of the noise, which the client draws from its own generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["PoissonRows", "step_samplers"]

# Philox4x64 yields four 64-bit outputs per counter value.
_OUTPUTS_PER_COUNTER = 4
_TWO_53 = 2.0**53


@dataclass(frozen=True)
class PoissonRows:
    """The rows one step keeps: row ``i`` iff its uniform coin is below ``rate``
    (``rate`` rounded down to a multiple of ``2^-53``).

    Parameters
    ----------
    rate : float
        Sampling rate ``q`` in (0, 1].
    key : tuple of two int
        The step's Philox key (from :func:`step_samplers`).
    """

    rate: float
    key: tuple

    def rows(self, start, stop):
        """Indices in ``[0, stop - start)`` of the kept rows among rows
        ``start, ..., stop - 1`` (int64, increasing)."""
        count = stop - start
        if count <= 0:
            return np.empty(0, dtype=np.int64)
        bits = np.random.Philox(key=np.array(self.key, dtype=np.uint64))
        skip = start % _OUTPUTS_PER_COUNTER
        bits.advance(start // _OUTPUTS_PER_COUNTER)
        raw = bits.random_raw(skip + count)[skip:]
        # Row kept iff its 53 high bits, a uniform integer below 2^53, are below
        # floor(q 2^53): the kept rate is q rounded down to a multiple of 2^-53, never
        # above the q the accountant amplifies by.
        return np.flatnonzero((raw >> np.uint64(11)) < self._threshold).astype(np.int64)

    @property
    def _threshold(self):
        return np.uint64(math.floor(self.rate * _TWO_53))


def step_samplers(rate, n_steps, rng):
    """One :class:`PoissonRows` per step, keyed by children of a ``SeedSequence``
    drawn from ``rng`` (one draw from ``rng`` in all)."""
    root = np.random.SeedSequence(int(rng.integers(2**63 - 1)))
    return [PoissonRows(float(rate), tuple(int(v) for v in child.generate_state(2, np.uint64)))
            for child in root.spawn(n_steps)]
