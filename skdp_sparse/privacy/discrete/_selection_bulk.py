"""Bulk key changes of the exact exponential mechanism's sampler, for Numba kernels.

``em_set`` keeps the sum tree exact by adding a difference along one leaf's path, a
scattered O(log p) walk per key. When a kernel changes a large share of the keys at
once, rebuilding the tree from the keys (O(p), sequential) costs less: it marks the
tree stale with :func:`em_invalidate`, then stores the keys with ``em_set``, which only
writes the key while a rebuild is pending, and the next ``em_select`` rebuilds. A
rebuild sets every leaf and node from the keys as the first build does, so it changes
the envelope, never the law (``doc/proofs/discrete.rst``, "Sum tree").
"""

import numba


@numba.njit(cache=True)
def em_invalidate(sel):
    """Rebuild the tree of ``sel`` from its keys before the next selection (no-op for the
    one-pass sampler, which keeps no state)."""
    tree, meta = sel[1], sel[2]
    if tree.size > 0:
        meta[1] = 1
