"""The stored entries of a CSR or CSC matrix, a block of whole rows or columns at a time.

Per-entry work written as NumPy expressions over all of ``X.data`` makes several
temporaries of ``nnz`` values each (gathered bounds, intermediate results, the column
of every entry), each as large as most of ``X`` itself: at 10^7 columns and 3 x 10^7
entries, a few hundred megabytes apiece. Over blocks of about :data:`BLOCK_ENTRIES`
entries the same expressions hold a few megabytes, and sums over entries taken with
``np.add.at`` in storage order add the same terms in the same order as one
``np.bincount`` over all entries, so the results are the same to the bit.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK_ENTRIES", "entry_blocks"]

#: About this many stored entries a block (a row or column with more is a block alone).
BLOCK_ENTRIES = 1 << 18


def entry_blocks(X, size=None):
    """Yield ``(entries, rows, cols)`` for consecutive blocks of whole rows (CSR) or
    whole columns (CSC) of ``X``, in storage order: ``entries`` the slice of
    ``X.data`` (and ``X.indices``) the block stores, ``rows`` and ``cols`` the row and
    column of each of its entries (one of the two a view of ``X.indices``). ``size``:
    :data:`BLOCK_ENTRIES` by default."""
    size = BLOCK_ENTRIES if size is None else size
    indptr = X.indptr
    n_major = indptr.size - 1
    start = 0
    while start < n_major:
        stop = int(np.searchsorted(indptr, indptr[start] + size, side="right")) - 1
        stop = min(max(stop, start + 1), n_major)
        entries = slice(int(indptr[start]), int(indptr[stop]))
        major = np.repeat(np.arange(start, stop), np.diff(indptr[start:stop + 1]))
        minor = X.indices[entries]
        yield (entries, major, minor) if X.format == "csr" else (entries, minor, major)
        start = stop
