"""The positions of the k highest of many scores, without sorting them all."""

from __future__ import annotations

import numpy as np

__all__ = ["top_k"]


def top_k(scores, k):
    """The sorted positions of the ``k`` highest ``scores``, ties to the lower position:
    ``np.sort(np.argsort(-scores, kind="stable")[:k])`` by a partition instead of a
    sort of every score (2 to 4 s at 10^7 scores)."""
    if k >= scores.size:
        return np.arange(scores.size)
    if k <= 0:
        return np.arange(0)
    # The k-th highest score; every score above it is kept, and as many of the scores
    # equal to it as fill k, the lowest positions first.
    kth = -np.partition(-scores, k - 1)[k - 1]
    above = np.flatnonzero(scores > kth)
    ties = np.flatnonzero(scores == kth)[: k - above.size]
    return np.sort(np.concatenate([above, ties]))
