"""The rows of a fit held as row blocks of a dask array, on a cluster's workers.

Nothing about the rows is computed on the client: every method maps a function
over the blocks where they live and tree-reduces the partial sums the blocks
return (clipped gradient sums, clipped column sums, measurements). The client
only receives those sums; the solver adds noise to them through
:mod:`skdp_sparse.privacy`, once, after the reduction. The number of rows is the
sum of the dask array's chunk sizes, which are public metadata of the input.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..privacy.clipping import clip_entries, clip_entries_and_rows, clip_rows
from ..privacy.statistics import column_second_moment_sums
from ..utils.validation import canonical_sparse, data_free_errors

__all__ = ["DaskData", "DaskRows", "is_dask_array"]

#: Partial sums added by one task of the reduction tree.
_FAN_IN = 8


def is_dask_array(X):
    """Whether ``X`` is a ``dask.array.Array`` (without importing dask)."""
    return type(X).__module__.startswith("dask.array") and hasattr(X, "to_delayed")


def _import_dask():
    try:
        import dask
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ImportError("fitting a dask array needs the dask extra: "
                          "pip install 'skdp_sparse[dask]'") from exc
    return dask, da


# --------------------------------------------------------------------------
# Functions that run on the workers, one block at a time
# --------------------------------------------------------------------------
def _validated_block(X, y, n_features, targets, n_rows):
    """A block as a fit reads it: canonical float64 CSR (or a C-ordered array), finite,
    with ``n_rows`` rows (its chunk's size) and its targets (``targets(y)``, the
    estimator's own encoding) beside it. Its errors quote no value of the data."""
    with data_free_errors():
        return _checked_block(X, y, n_features, targets, n_rows)


def _checked_block(X, y, n_features, targets, n_rows):
    if sp.issparse(X):
        X = canonical_sparse(sp.csr_matrix(X))
        values = X.data
    else:
        X = np.ascontiguousarray(X, dtype=np.float64)
        values = X
    if X.ndim != 2 or X.shape[1] != n_features:
        raise ValueError(f"a block of X has shape {X.shape}, expected (m, {n_features})")
    if X.shape[0] != n_rows:
        raise ValueError(f"a block of X has {X.shape[0]} rows where its chunk says "
                         f"{n_rows}: the blocks of X do not have the sizes of its chunks")
    if not np.isfinite(values).all():
        raise ValueError("Input X contains NaN or infinity.")
    Y = None
    if targets is not None:
        y = np.asarray(y).reshape(-1)
        if y.shape[0] != X.shape[0]:
            raise ValueError("y is not chunked like the rows of X")
        # As in memory: the targets are finite once encoded (a target range would clip
        # an infinite one, and a NaN, or a None among objects, would reach the solver
        # after the budget is reserved).
        if y.dtype.kind in "fc" and not np.isfinite(y).all():
            raise ValueError("Input y contains NaN or infinity.")
        Y = np.asarray(targets(y)[0], dtype=np.float64)
        if not np.isfinite(Y).all():
            raise ValueError("Input y contains NaN or infinity (or None).")
    return X, Y


def _clipped_block(block, norm_bound, l1_bound):
    X, Y = block
    if math.isfinite(norm_bound) or math.isfinite(l1_bound):
        X = clip_rows(X, norm_bound, l1_bound)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        X.sort_indices()
        X.indices = X.indices.astype(np.int64, copy=False)
        X.indptr = X.indptr.astype(np.int64, copy=False)
    else:
        X = np.ascontiguousarray(X)
    return X, Y


def _entries_clipped_block(block, feature_bound, norm_bound):
    """:meth:`LocalData.entries_and_rows_clipped` of one block (no row clipping for an
    infinite ``norm_bound``)."""
    X, Y = block
    if math.isfinite(norm_bound):
        return clip_entries_and_rows(X, feature_bound, norm_bound), Y
    return clip_entries(X, feature_bound), Y


def _block_second_moments(X, Y, start, feature_bound, norm_bound, square_norm):
    """The block's ``column_second_moment_sums`` of its entries clipped to
    ``feature_bound``, the count of clipped rows last."""
    sums, n_clipped = column_second_moment_sums(X, norm_bound, square_norm,
                                                feature_bound=feature_bound)
    return np.append(sums, float(n_clipped))


class _GroupMargins:
    """The :class:`~skdp_sparse.optim.coordinate_descent.BlockMargins` of the blocks one
    worker holds, for the targets of problem ``k``, at ``w = 0``: kept there from step
    to step (a dask actor on a ``distributed`` cluster), so that a step sends the
    coordinate and its step and gets back the group's gradient where it changed."""

    def __init__(self, blocks, k, loss, clip, n_coords, n_total):
        from ..optim._cd_margins import BlockMargins, new_changes

        self._margins = [BlockMargins.of(X, Y[:, k], loss, clip, n_coords, n_total)
                         for X, Y in blocks]
        # Past half the coordinates the whole gradient costs no more to send than a list.
        self._changed = new_changes(n_coords, list_limit=n_coords // 2)
        self._n_coords = n_coords

    def gradient(self, coords=None):
        """The blocks' gradients added, in block order (at ``coords`` only)."""
        return _sum(*[m.g if coords is None else m.g[coords] for m in self._margins])

    def move(self, j, delta):
        """Apply ``w_j += delta`` to the blocks; returns ``(coords, values)``: the
        group's gradient at the coordinates the move changed, or ``(None, gradient)``
        where that is most of them."""
        from ..optim._cd_margins import take_changes

        for m in self._margins:
            m.move(j, delta, self._changed)
        coords = take_changes(self._changed)
        # An index array costs as much to send as the values it indexes.
        if coords is None or 2 * coords.size >= self._n_coords:
            return None, self.gradient()
        return coords, self.gradient(coords)

    def loss_sum(self):
        return np.float64(math.fsum(m.loss_sum() for m in self._margins))

    def entries_read(self, fit_intercept, full_passes):
        reads = [m.entries_read(fit_intercept, full_passes) for m in self._margins]
        return np.array([sum(r[0] for r in reads), sum(r[1] for r in reads)],
                        dtype=np.float64)


class _GroupRows:
    """The row blocks one worker holds, with their first rows' indices: kept there for
    the fit (a dask actor), so that a pass is one direct call to each worker instead of
    a task graph."""

    def __init__(self, blocks, starts):
        self._blocks = blocks
        self._starts = starts

    def row_sum(self, func, args):
        return _group_sum(self._blocks, self._starts, func, args)


def _block_sum(block, start, func, args):
    X, Y = block
    return np.asarray(func(X, Y, start, *args), dtype=np.float64)


def _group_sum(blocks, starts, func, args):
    """The sum of :func:`_block_sum` over blocks held by one worker, in one task."""
    total = _block_sum(blocks[0], starts[0], func, args)
    for block, start in zip(blocks[1:], starts[1:], strict=True):
        total += _block_sum(block, start, func, args)
    return total


def _client_futures(blocks):
    """``(client, futures)``: the ``distributed`` client and the one future of each
    persisted block, or ``(None, None)`` when the blocks are not all futures of one."""
    import sys

    if "distributed" not in sys.modules:
        return None, None
    import distributed

    try:
        client = distributed.get_client()
    except ValueError:
        return None, None
    futures = [distributed.futures_of(b) for b in blocks]
    if not all(len(f) == 1 for f in futures):
        return None, None
    return client, [f[0] for f in futures]


def _worker_groups(blocks):
    """Indices of the persisted ``blocks`` grouped by the worker holding them (one
    group per worker, in block order), or one group per block without a
    ``distributed`` client. Raises the error of the first block that failed (dask's
    local scheduler computes them in ``persist``, which raises there)."""
    client, futures = _client_futures(blocks)
    if client is None:
        return [[i] for i in range(len(blocks))]
    import distributed

    distributed.wait(futures)
    for future in futures:
        if future.status == "error":
            future.result()
    holders = client.who_has(futures)
    groups = {}
    for i, future in enumerate(futures):
        where = sorted(holders.get(future.key, ())) or [None]
        groups.setdefault(where[0], []).append(i)
    return sorted(groups.values())


def _sum(*parts):
    total = np.array(parts[0], dtype=np.float64)
    for part in parts[1:]:
        total += part
    return total


def _block_max_row_norm(block):
    X = block[0]
    sq = X.multiply(X).sum(axis=1) if sp.issparse(X) else (X * X).sum(axis=1)
    return math.sqrt(float(np.max(sq))) if X.shape[0] else 0.0


# --------------------------------------------------------------------------
# The view
# --------------------------------------------------------------------------
class DaskData:
    """A fit's rows as persisted row blocks of a dask array, and the sums solvers ask for.

    Build it with :meth:`from_arrays`. Its methods have the signatures of
    :class:`~skdp_sparse.data.LocalData`'s, so a solver written against
    :meth:`row_sum` runs unchanged on both.
    """

    def __init__(self, blocks, starts, n_samples, n_features, n_targets, sparse):
        self._blocks = list(blocks)
        self._starts = list(starts)
        self.n_samples = int(n_samples)
        self.n_features = int(n_features)
        self.n_targets = int(n_targets)
        self._sparse = bool(sparse)
        self._clipped = {}
        # Errors of the validation surface here, before the fit reserves its budget.
        self._groups = _worker_groups(self._blocks)
        self._row_holders = {}

    @property
    def is_sparse(self):
        return self._sparse

    @property
    def n_blocks(self):
        return len(self._blocks)

    @classmethod
    def from_arrays(cls, X, y=None, targets=None, n_targets=0):
        """Validate the blocks of ``X`` (and ``y``) on the workers and persist them.

        Parameters
        ----------
        X : dask.array.Array of shape (n_samples, n_features)
            Row blocks of scipy.sparse matrices or arrays; chunk sizes must be known
            (they are the public sizes of the blocks). Column chunks are merged.
        y : dask.array.Array or array-like of shape (n_samples,), optional
            Rechunked like the rows of ``X``.
        targets : callable, optional
            ``targets(y_block) -> (Y_block, facts)``: the estimator's encoding of its
            targets, applied to each block on its worker.
        n_targets : int
            Number of columns of the encoded targets.

        Raises ``ValueError`` (before anything private is released) on NaN or
        infinite values, a wrong shape, unknown chunk sizes or labels outside the
        public label set.
        """
        dask, da = _import_dask()
        if X.ndim != 2:
            raise ValueError(f"X must be a 2-d dask array, got {X.ndim} dimensions")
        if any(math.isnan(c) for c in X.chunks[0]) or math.isnan(X.shape[1]):
            raise ValueError("X has unknown chunk sizes: the block sizes are the public "
                             "number of rows; give a dask array with known chunks (a "
                             "dask DataFrame's to_dask_array(lengths=True))")
        if len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})
        n, p = (int(v) for v in X.shape)
        if n == 0:
            raise ValueError("X has no rows")
        row_chunks = tuple(int(c) for c in X.chunks[0])
        x_blocks = X.to_delayed().ravel()
        if y is None:
            y_blocks = [None] * len(x_blocks)
        else:
            if not is_dask_array(y):
                y = np.asarray(y)
            elif any(math.isnan(c) for c in y.shape):
                raise ValueError("y has unknown chunk sizes: give it with known chunks "
                                 "(a dask DataFrame's to_dask_array(lengths=True)), or "
                                 "in memory")
            if y.ndim != 1 or int(y.shape[0]) != n:
                raise ValueError(f"y must be 1-d with {n} entries like the rows of X, "
                                 f"got shape {y.shape}")
            if not is_dask_array(y):
                y = da.from_array(y, chunks=(row_chunks,))
            if tuple(y.chunks[0]) != row_chunks:
                y = y.rechunk((row_chunks,))
            y_blocks = y.to_delayed().ravel()
        validated = [dask.delayed(_validated_block)(xb, yb, p, targets, m)
                     for xb, yb, m in zip(x_blocks, y_blocks, row_chunks, strict=True)]
        validated = list(dask.persist(*validated))
        starts = np.concatenate([[0], np.cumsum(row_chunks)[:-1]]).astype(int).tolist()
        sparse = sp.issparse(getattr(X, "_meta", None))
        return cls(validated, starts, n, p, n_targets, sparse)

    # -- what solvers ask for ------------------------------------------------
    def _persisted(self, key, transform, *args):
        """``(blocks, groups)``: ``transform(block, *args)`` of every block, persisted
        where the blocks are, once per ``key``."""
        if key not in self._clipped:
            dask, _ = _import_dask()
            blocks = [dask.delayed(transform)(b, *args) for b in self._blocks]
            blocks = list(dask.persist(*blocks))
            self._clipped[key] = blocks, _worker_groups(blocks)
        return self._clipped[key]

    def _clipped_blocks(self, norm_bound, l1_bound):
        key = (float(norm_bound), float(l1_bound))
        return self._persisted(key, _clipped_block, *key)

    def _entries_clipped_blocks(self, feature_bound, norm_bound):
        b = np.asarray(feature_bound, dtype=float)
        return self._persisted(("entries", b.tobytes(), b.shape, float(norm_bound)),
                               _entries_clipped_block, b, float(norm_bound))

    def entries_clipped(self, feature_bound):
        """The blocks with every entry clipped to ``[-b_j, b_j]``, persisted where they
        live: a :class:`DaskRows` (see :meth:`LocalData.entries_clipped
        <skdp_sparse.data.LocalData.entries_clipped>`)."""
        return DaskRows(*self._entries_clipped_blocks(feature_bound, math.inf),
                        self.n_samples, self.n_features)

    def entries_and_rows_clipped(self, feature_bound, norm_bound):
        """:meth:`entries_clipped`, then every row rescaled into the l2 ball of radius
        ``norm_bound``: a :class:`DaskRows`."""
        return DaskRows(*self._entries_clipped_blocks(feature_bound, norm_bound),
                        self.n_samples, self.n_features)

    def target(self, k):
        """Problem ``k``'s targets stay with their blocks: the index ``k``, which
        :meth:`DaskRows.greedy_margins` reads them by."""
        return int(k)

    def column_second_moment_sums(self, feature_bound, norm_bound, square_norm=None):
        """``(sums, n_clipped)`` of the rows of :meth:`entries_clipped` clipped to
        ``norm_bound`` in l2: the blocks' partial sums, tree-reduced (see
        :meth:`LocalData.column_second_moment_sums
        <skdp_sparse.data.LocalData.column_second_moment_sums>`)."""
        b = np.asarray(feature_bound, dtype=float)
        total = self.row_sum(_block_second_moments, b, float(norm_bound), square_norm)
        return total[:-1], int(round(total[-1]))

    def row_sum(self, func, *args, norm_bound=None, l1_bound=math.inf):
        """The sum over blocks of ``func(rows, Y, start, *args)`` (see
        :meth:`LocalData.row_sum <skdp_sparse.data.LocalData.row_sum>`), each term
        computed on the worker holding the block, the terms tree-reduced."""
        key = None if norm_bound is None else (float(norm_bound), float(l1_bound))
        blocks, groups = (self._blocks, self._groups) if key is None \
            else self._clipped_blocks(*key)
        if key not in self._row_holders:
            # On a cluster, one actor per worker holds its blocks for the fit.
            self._row_holders[key] = _place_holders(
                blocks, groups, _GroupRows, lambda group: ([self._starts[i] for i in group],),
                local=False)[0]
        holders = self._row_holders[key]
        if holders is not None:
            # The workers' sums added in the order of the reduction below: the same total.
            return _tree_sum(_results([h.row_sum(func, args) for h in holders]))
        dask, _ = _import_dask()
        # One key holds the arguments (theta, the sampler, ...): sent once per
        # worker, not once per block.
        shared = dask.delayed(args, traverse=False)
        # One task per worker sums the blocks it holds: the tasks of a step do not
        # grow with the number of blocks.
        parts = [dask.delayed(_group_sum)([blocks[i] for i in group],
                                          [self._starts[i] for i in group], func, shared)
                 for group in groups]
        # A tree of fan-in _FAN_IN: few tasks per step, each adding a handful of
        # p-length vectors, in an order fixed by the chunking.
        while len(parts) > 1:
            parts = [dask.delayed(_sum)(*parts[i:i + _FAN_IN])
                     for i in range(0, len(parts), _FAN_IN)]
        return np.asarray(dask.compute(parts[0])[0], dtype=np.float64)

    def max_row_norm(self):
        """Largest l2 norm of a row. Not private: for runs without noise only."""
        dask, _ = _import_dask()
        norms = dask.compute(*[dask.delayed(_block_max_row_norm)(b) for b in self._blocks])
        return max(norms) if norms else 0.0


def _tree_sum(parts):
    """:func:`_sum` of ``parts`` in a tree of fan-in ``_FAN_IN``, on the client: the
    additions :meth:`DaskData.row_sum`'s reduction makes, in the same order."""
    parts = list(parts)
    while len(parts) > 1:
        parts = [_sum(*parts[i:i + _FAN_IN]) for i in range(0, len(parts), _FAN_IN)]
    return np.array(parts[0], dtype=np.float64)


def _place_holders(blocks, groups, cls, extra, local=True):
    """``(holders, remote)``: ``cls(blocks of the group, *extra(group))`` for each group
    of blocks, as an actor on the worker holding them when the blocks are futures of a
    ``distributed`` client (``remote``), else as an object here, on the blocks computed
    by dask's local scheduler (``local=False``: ``(None, False)`` instead)."""
    client, futures = _client_futures(blocks)
    if client is None:
        if not local:
            return None, False
        dask, _ = _import_dask()
        return [cls(list(dask.compute(*[blocks[i] for i in group])), *extra(group))
                for group in groups], False
    firsts = [futures[group[0]] for group in groups]
    where = client.who_has(firsts)
    # pure=False: two fits on the same blocks must not share one actor.
    holders = [client.submit(cls, [futures[i] for i in group], *extra(group), actor=True,
                             pure=False, workers=sorted(where.get(first.key, ()))[:1] or None)
               for group, first in zip(groups, firsts, strict=True)]
    return [h.result() for h in holders], True


def _results(calls):
    """The answers of calls made to the workers' actors, or a ``RuntimeError`` that
    says a worker (and the part of the fit's state it held) was lost."""
    try:
        return [c.result() for c in calls]
    except OSError as exc:
        raise RuntimeError(
            "a worker holding blocks of the fit (and their state) was lost during the "
            "fit; the fit cannot go on from another state: fit again") from exc


class DaskRows:
    """Clipped row blocks of a fit, persisted on the workers that hold them: what
    :func:`~skdp_sparse.optim.coordinate_descent.coordinate_descent` runs on in place of
    an in-memory matrix (the greedy rule only)."""

    def __init__(self, blocks, groups, n_samples, n_features):
        self._blocks = list(blocks)
        self._groups = list(groups)
        self.n_samples = int(n_samples)
        self.n_features = int(n_features)

    def greedy_margins(self, y, loss, clip, n_coords):
        """The state of a greedy run on the blocks, for the targets of problem ``y`` (the
        index :meth:`DaskData.target` gives): see
        :class:`~skdp_sparse.optim.coordinate_descent.Margins`."""
        return _DaskMargins(self, int(y), loss, np.asarray(clip, dtype=np.float64),
                            int(n_coords))


class _DaskMargins:
    """The blocks' :class:`~skdp_sparse.optim.coordinate_descent.BlockMargins`, one
    :class:`_GroupMargins` per worker, kept where the blocks are. Each update is one
    call to every worker, sent directly (no task graph): the coordinate and its step
    go out, and each worker's gradient comes back where the step changed it. The
    client keeps each worker's last gradient and adds them in the order of
    :func:`_tree_sum`: the sum is the one a reduction of the whole vectors gives."""

    def __init__(self, rows, k, loss, clip, n_coords):
        args = (k, loss, clip, n_coords, rows.n_samples)
        self._holders, self._remote = _place_holders(rows._blocks, rows._groups, _GroupMargins,
                                                     lambda group: args)
        self._parts = np.array(self._all("gradient"), dtype=np.float64)
        self.gradient = _tree_sum(self._parts)

    def _all(self, method, *args):
        calls = [getattr(h, method)(*args) for h in self._holders]
        return _results(calls) if self._remote else calls

    def move(self, j, delta):
        # The step is sent as values: a few bytes per worker.
        answers = self._all("move", int(j), float(delta))
        for part, (coords, values) in zip(self._parts, answers, strict=True):
            part[slice(None) if coords is None else coords] = values
        if any(coords is None for coords, _ in answers):
            self.gradient[:] = _tree_sum(self._parts)
            return None
        coords = np.unique(np.concatenate([c for c, _ in answers]))
        self.gradient[coords] = _tree_sum(self._parts[:, coords])
        return coords

    def loss_sum(self):
        return float(_tree_sum(self._all("loss_sum")))

    def entries_read(self, fit_intercept, full_passes=True):
        entries, pass_size = _tree_sum(self._all("entries_read", bool(fit_intercept),
                                                 bool(full_passes)))
        return int(entries), int(pass_size)
