"""The rows' side of a coordinate-descent run as objects: :class:`BlockMargins` holds a
block of rows and its state for the kernels of ``_cd_rows``; :class:`Margins` is what
the engine asks of row blocks held elsewhere."""

import numpy as np
import scipy.sparse as sp

from ..privacy.clipping import with_summed_duplicates
from . import _cd_kernels as K

__all__ = ["BlockMargins", "Margins", "new_changes", "take_changes"]

_EMPTY_F = np.empty((0, 0), order="F")
_EMPTY_DATA = np.empty(0)
_EMPTY_IDX = np.empty(0, dtype=np.int64)
_EMPTY_IDX32 = np.empty(0, dtype=np.int32)
_EMPTY_MARKS = np.empty(0, dtype=np.uint8)
# The kernels' data tuple of a run whose rows are held elsewhere (int32 indices, the
# in-memory runs' usual type, so no other specialisation compiles).
_NO_ROWS = (_EMPTY_F, _EMPTY_DATA, _EMPTY_IDX32, _EMPTY_IDX32, _EMPTY_DATA, _EMPTY_IDX32,
            _EMPTY_IDX32)


def _prepare_data(X, need_rows):
    """The ``data`` tuple of the kernels; sparse X is never densified."""
    if sp.issparse(X):
        X = X.astype(np.float64, copy=False)
        csc = with_summed_duplicates(X.tocsc() if X.format != "csc" else X)
        # One index type for all index arrays keeps the number of compiled
        # specialisations at two; int32 whenever it fits saves memory.
        fits = max(csc.nnz, *csc.shape) < np.iinfo(np.int32).max
        itype = np.int32 if fits else np.int64
        empty = _EMPTY_IDX32 if fits else _EMPTY_IDX
        if need_rows:
            csr = with_summed_duplicates(X.tocsr() if X.format != "csr" else X)
            rows = (np.ascontiguousarray(csr.data), csr.indices.astype(itype, copy=False),
                    csr.indptr.astype(itype, copy=False))
        else:
            rows = (_EMPTY_DATA, empty, empty)
        data = (_EMPTY_F, np.ascontiguousarray(csc.data),
                csc.indices.astype(itype, copy=False),
                csc.indptr.astype(itype, copy=False)) + rows
        return False, data, csc.nnz
    Xf = np.asfortranarray(X, dtype=np.float64)
    if Xf.ndim != 2:
        raise ValueError(f"X must be 2-dimensional, got shape {Xf.shape}")
    e = _EMPTY_IDX32
    data = (Xf, _EMPTY_DATA, e, e, _EMPTY_DATA, e, e)
    return True, data, Xf.size


class BlockMargins:
    """The rows' side of a coordinate-descent run on a block of its rows: the kernels'
    data, the margins ``z = X w + b``, the loss derivatives ``d``, and for greedy
    selection the block's share of the clipped gradient, ``g_j = (1/n) sum_i clip(l'_i
    x_ij, C_j)`` summed over the block's rows with ``n`` the fit's number of rows.

    A run on rows in memory is one block of all rows, whose arrays the kernel updates
    in its own loop. Row blocks held elsewhere keep one each where they live (see
    :class:`Margins`): the blocks' ``g`` add up to the fit's gradient, and every update
    is applied to each block by :meth:`move`, the kernel the in-memory loop runs.

    Build it with :meth:`of` (from a matrix), or from :func:`_prepare_data`'s output.
    """

    def __init__(self, dense, data, nnz, y, loss, clip, n_coords, n_total, *, greedy=True):
        self.dense, self.data, self.nnz = dense, data, int(nnz)
        self.y = y
        n = y.size
        self.n_features = int(data[0].shape[1]) if dense else int(data[3].size - 1)
        self.n_total = int(n_total)
        self.loss_code, self.loss_param = loss.code, loss.param
        self.clip = clip
        self.z = np.zeros(n)
        self.d = np.empty(n)
        K.init_derivatives(y, self.z, self.d, loss.code, loss.param)
        self.g = np.zeros(n_coords if greedy else 0)
        if greedy and n_coords:
            K.full_gradient(dense, data, self.n_features, self.d, clip, self.g, self.n_total)
        self.row_ratio = np.empty(n if greedy else 0)
        if self.row_ratio.size:
            K.row_clip_ratios(dense, data, clip, self.row_ratio)
        self.work = np.zeros(3, dtype=np.int64)
        # The incremental work after which the block's gradient is recomputed exactly.
        self.refresh_work = np.int64(8 * (self.nnz + n + n_coords))

    @classmethod
    def of(cls, X, y, loss, clip, n_coords, n_total):
        """The block of rows ``X`` (any matrix :func:`coordinate_descent` takes) with
        targets ``y``, for greedy selection."""
        dense, data, nnz = _prepare_data(X, need_rows=True)
        return cls(dense, data, nnz, np.ascontiguousarray(y, dtype=np.float64), loss, clip,
                   n_coords, n_total)

    def move(self, j, delta, changed=None):
        """Apply ``w_j += delta`` to the block's margins and gradient; returns ``g``.

        ``changed``: a pair ``(dirty, marked)`` (see :func:`new_changes`) that records
        the coordinates whose ``g`` entry the move changed (a negative count: all)."""
        dense_rows = self.z.size if self.dense else 0
        K.move_coordinate(
            self.dense, self.data, int(j), float(delta), self.n_features, self.y,
            self.loss_code, self.loss_param, self.z, self.d, self.g, self.clip,
            self.row_ratio, True, self.work, self.refresh_work, np.empty(dense_rows),
            np.empty(dense_rows, dtype=np.int64),
            (_EMPTY_IDX, _EMPTY_MARKS) if changed is None else changed, self.n_total,
        )
        return self.g

    def loss_sum(self):
        """``sum_i l(y_i, z_i)`` over the block's rows."""
        return float(K.loss_sum(self.y, self.z, self.loss_code, self.loss_param))

    def entries_read(self, fit_intercept, full_passes=True):
        """``(entries, pass_size)``: the entries of X the block's updates read and the
        entries of one pass over the block (each non-zero, and each row for the
        intercept); ``full_passes``: whether the gradient was computed in full at the
        start and at each recomputation."""
        pass_size = max(self.nnz + self.z.size * bool(fit_intercept), 1)
        work = self.work
        return int(work[0] + work[1] + (work[2] + 1) * pass_size * bool(full_passes)), \
            pass_size

    def __sizeof__(self):
        # What a scheduler moving the block would copy: its data and state arrays.
        arrays = [a for a in self.data if isinstance(a, np.ndarray)]
        arrays += [self.y, self.z, self.d, self.g, self.row_ratio, self.clip]
        return object.__sizeof__(self) + sum(a.nbytes for a in arrays)


def new_changes(n_coords, list_limit=None):
    """The zeroed pair ``(dirty, marked)`` in which moves record the coordinates whose
    gradient they changed: ``dirty[0]`` counts those listed in ``dirty[1 : 1 +
    n_coords]`` (negative: all of them), ``marked`` keeps a coordinate from being listed
    twice.

    The last slot of ``dirty`` holds ``list_limit``: past that many listed coordinates a
    move stops listing and records "all of them" instead, since its consumer would
    treat a longer list as a change of everything anyway. By default the limit is the
    selection's: from ``m / (log2(m) + 1)`` changed scores on, one O(m) rebuild of its
    sampler costs less than O(log m) path updates, one per listed score."""
    if list_limit is None:
        list_limit = n_coords / (np.log2(max(n_coords, 1)) + 1.0)
    dirty = np.zeros(2 + n_coords, dtype=np.int64)
    dirty[-1] = int(list_limit)
    return dirty, np.zeros(n_coords, dtype=np.uint8)


def take_changes(changed):
    """The coordinates ``changed`` records (``None`` for all of them); resets it."""
    dirty, marked = changed
    count = int(dirty[0])
    if count < 0:
        marked[:] = 0
        dirty[0] = 0
        return None
    listed = dirty[1:1 + count].copy()
    marked[listed] = 0
    dirty[0] = 0
    return listed


class Margins:
    """What :func:`coordinate_descent` asks of rows held elsewhere, as row blocks each
    kept as a :class:`BlockMargins` where it lives: an ``X`` with ``n_samples``,
    ``n_features`` and ``greedy_margins(y, loss, clip, n_coords)``, which returns an
    object with:

    * ``gradient``: the blocks' ``g`` summed, a float64 array kept current in place;
    * ``move(j, delta)``: have every block apply ``w_j += delta`` and update
      ``gradient``; returns the coordinates whose entry may have changed (an int64
      array), or ``None`` when any may have;
    * ``loss_sum()`` and ``entries_read(fit_intercept, full_passes)``: the blocks'
      :meth:`BlockMargins.loss_sum` and :meth:`BlockMargins.entries_read`, added.

    Only the summed gradient comes back: the run adds the selection's and the update's
    noise to it exactly as to an in-memory run's gradient.
    """
