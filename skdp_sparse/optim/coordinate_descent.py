"""Coordinate descent for ``(1/n) sum_i l(y_i, x_i . w + b) + psi(w)``, with the
noise hooks of private greedy (DP-GCD) and randomised (DP-CD) coordinate descent.

This module only optimises: it adds noise at the scales it is given and does no
privacy calibration. What it guarantees, and what the calibration relies on:

* coordinate ``j`` of the gradient is always computed from per-example terms
  clipped to ``[-clip[j], clip[j]]``, so replacing one example moves it by at
  most ``2 clip[j] / n``;
* each noisy quantity (a selection score or an update) gets a fresh draw from
  the Generator; no draw is reused across coordinates or updates;
* with noise on, exactly ``n_updates`` updates run, whatever the data.
"""

import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..privacy.clipping import with_summed_duplicates
from ..utils.random import check_generator
from . import _cd_kernels as K

__all__ = ["CDResult", "coordinate_descent"]

#: Number of coordinates from which ``gumbel_sampler="auto"`` uses the heap.
HEAP_MIN_COORDS = 4096

_SELECTIONS = {"greedy": K.GREEDY, "random": K.RANDOM, "cyclic": K.CYCLIC}
_SELECTION_NOISES = {"none": K.NOISE_NONE, "gumbel": K.NOISE_GUMBEL,
                     "laplace": K.NOISE_LAPLACE}
_UPDATE_NOISES = {"none": K.NOISE_NONE, "gaussian": K.NOISE_GAUSSIAN,
                  "laplace": K.NOISE_LAPLACE}

_EMPTY_F = np.empty((0, 0), order="F")
_EMPTY_DATA = np.empty(0)
_EMPTY_IDX = np.empty(0, dtype=np.int64)
_EMPTY_IDX32 = np.empty(0, dtype=np.int32)
_EMPTY_MARKS = np.empty(0, dtype=np.uint8)


@dataclass
class CDResult:
    """Output of :func:`coordinate_descent`.

    ``objective`` is the objective at the returned point, computed on the
    training data: it is not a private quantity.
    """

    coef: np.ndarray
    intercept: float
    n_iter: int
    objective: float


def _coord_array(name, value, size, *, allow_inf):
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(size, float(arr))
    if arr.shape != (size,):
        raise ValueError(f"{name} must have shape ({size},), got {arr.shape}")
    if np.isnan(arr).any() or (arr < 0).any() or (not allow_inf and np.isinf(arr).any()):
        kind = "non-negative" if name == "update_scale" else "positive"
        raise ValueError(f"{name} must hold {kind} numbers"
                         + ("" if allow_inf else " (finite)"))
    return np.ascontiguousarray(arr)


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


def coordinate_descent(
    X, y, loss, penalty, *, fit_intercept, clip, smoothness, n_updates,
    selection="greedy", selection_noise="none", selection_scale=0.0,
    update_noise="none", update_scale=None, rng=None, tol=0.0, verbose=0,
    objective_every=0, gumbel_sampler="auto",
):
    """Proximal coordinate descent with optional noisy selection and updates.

    Minimises ``F(w, b) = (1/n) sum_i l(y_i, x_i . w + b) + psi(w)`` from
    ``w = 0, b = 0``. Coordinates ``0..p-1`` are the features; with
    ``fit_intercept`` coordinate ``p`` is the (unpenalised) intercept, so
    ``n_coords = p + fit_intercept``.

    Each update:

    1. the coordinate gradient uses per-example clipping,
       ``g_j = (1/n) sum_i clip(l'(y_i, z_i) x_ij, [-clip[j], clip[j]])``;
    2. coordinate choice: ``"greedy"`` takes
       ``argmax_j score_j + selection_scale * N_j`` with the GS-s score
       ``score_j = min_{xi in d psi_j(w_j)} |g_j + xi| / sqrt(smoothness[j])``
       and ``N_j`` standard Gumbel (``-log E``, E standard exponential) or
       standard Laplace, drawn afresh for every coordinate and update
       (``"none"``: plain argmax, first index on ties); ``"random"`` draws j
       uniformly; ``"cyclic"`` takes ``j = t mod n_coords``. The last two
       ignore the selection noise;
    3. ``w_j <- prox_{psi_j / M_j}(w_j - (g_j + eta_j) / M_j)`` with
       ``M_j = smoothness[j]`` and ``eta_j = update_scale[j] * N`` with ``N``
       standard normal (``"gaussian"``) or standard Laplace, fresh each update.

    Parameters
    ----------
    X : {ndarray, scipy.sparse matrix} of shape (n, p)
        Sparse input stays sparse (a CSC copy is made, and a CSR one for
        greedy selection); memory is O(nnz + n + p).
    y : array of shape (n,)
        Targets; {-1, +1} for the logistic loss.
    loss : loss object of :mod:`skdp_sparse.optim.losses`
    penalty : penalty object of :mod:`skdp_sparse.optim.penalties`
    fit_intercept : bool
    clip, smoothness : float or array of shape (n_coords,)
        Per-coordinate clipping thresholds (``inf`` allowed: no clipping) and
        smoothness constants (step ``1 / smoothness[j]``; positive, finite).
    n_updates : int
        Number of coordinate updates (not epochs).
    selection : {"greedy", "random", "cyclic"}
    selection_noise : {"none", "gumbel", "laplace"}
    selection_scale : float >= 0
    update_noise : {"none", "gaussian", "laplace"}
    update_scale : float or array of shape (n_coords,), optional
        Required when ``update_noise != "none"``.
    rng : numpy.random.Generator, int or None
        Source of all noise, advanced in place; ``None`` uses fresh OS entropy.
    tol : float
        Only with both noises ``"none"``: stop once the largest noiseless score
        is below ``tol`` (greedy: checked before every update; random/cyclic:
        every ``n_coords`` updates). Ignored under noise, where a data-dependent
        stopping time would leak.
    verbose : int
        If > 0, print the update count about ten times per run (every
        ``objective_every`` updates if that is set); a run without noise also
        prints its largest score (and the objective with ``objective_every``).
        A noisy run prints nothing computed from the data.
    objective_every : int
        If > 0 and ``verbose``, report every that many updates.
    gumbel_sampler : {"auto", "heap", "pass"}
        How greedy selection with Gumbel noise (and ``selection_scale > 0``)
        draws its coordinate. ``"pass"`` adds ``selection_scale * (-log E_j)``
        to every score and takes the argmax, O(n_coords) per update.
        ``"heap"`` samples j with probability proportional to
        ``exp(score_j / selection_scale)`` -- the same law, so the same privacy
        guarantee -- from a log-sum-exp heap updated only where scores
        changed: O(touched coordinates * log n_coords) per update. The two
        consume the random stream differently. ``"auto"`` takes the heap from
        ``HEAP_MIN_COORDS`` coordinates on: below, one row touches a large share
        of the coordinates and the plain pass is faster.

    Returns
    -------
    CDResult
        ``coef`` (p,), ``intercept`` (0.0 without intercept), ``n_iter``
        (updates run), ``objective`` (final objective on the training data).
    """
    if selection not in _SELECTIONS:
        raise ValueError(f"selection must be one of {sorted(_SELECTIONS)}, got {selection!r}")
    if selection_noise not in _SELECTION_NOISES:
        raise ValueError(f"selection_noise must be one of {sorted(_SELECTION_NOISES)}, "
                         f"got {selection_noise!r}")
    if update_noise not in _UPDATE_NOISES:
        raise ValueError(f"update_noise must be one of {sorted(_UPDATE_NOISES)}, "
                         f"got {update_noise!r}")
    if gumbel_sampler not in ("auto", "heap", "pass"):
        raise ValueError(
            f"gumbel_sampler must be 'auto', 'heap' or 'pass', got {gumbel_sampler!r}"
        )
    if isinstance(n_updates, bool) or not isinstance(n_updates, numbers.Integral) \
            or n_updates < 0:
        raise ValueError(f"n_updates must be a non-negative int, got {n_updates!r}")
    n_updates = int(n_updates)
    selection_scale = float(selection_scale)
    if not (0.0 <= selection_scale < np.inf):
        raise ValueError(f"selection_scale must be finite and >= 0, got {selection_scale}")

    greedy = selection == "greedy"
    dense, data, nnz = _prepare_data(X, need_rows=greedy)
    n, p = data[0].shape if dense else X.shape
    y = np.ascontiguousarray(y, dtype=np.float64)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},), got {y.shape}")
    if n == 0:
        raise ValueError("X has no rows")
    fit_intercept = bool(fit_intercept)
    n_coords = p + fit_intercept

    clip = _coord_array("clip", clip, n_coords, allow_inf=True)
    if (clip == 0).any():
        raise ValueError("clip must hold positive numbers")
    smoothness = _coord_array("smoothness", smoothness, n_coords, allow_inf=False)
    if (smoothness == 0).any():
        raise ValueError("smoothness must hold positive numbers")
    if update_noise == "none":
        update_scale = np.zeros(n_coords)
    elif update_scale is None:
        raise ValueError(f"update_noise={update_noise!r} needs update_scale")
    else:
        update_scale = _coord_array("update_scale", update_scale, n_coords,
                                    allow_inf=False)
    rng = check_generator(rng)
    noiseless = selection_noise == "none" and update_noise == "none"
    check_tol = bool(noiseless and tol > 0)

    score_w = np.sqrt(smoothness)
    np.divide(1.0, score_w, out=score_w)
    w = np.zeros(n_coords)
    z = np.zeros(n)
    d = np.empty(n)
    K.init_derivatives(y, z, d, loss.code, loss.param)
    g = np.zeros(n_coords if greedy else 0)
    if greedy and n_coords:
        K.full_gradient(dense, data, p, d, clip, g)
    work = np.zeros(1, dtype=np.int64)
    use_tree = (greedy and selection_noise == "gumbel" and selection_scale > 0
                and n_coords > 0
                and (gumbel_sampler == "heap"
                     or (gumbel_sampler == "auto" and n_coords >= HEAP_MIN_COORDS)))
    if use_tree:
        tree = np.empty(2 * n_coords)
        K.tree_build(tree, w, g, p, penalty.code, float(penalty.a), float(penalty.b),
                     score_w, 1.0 / selection_scale)
        # Scores so large against the noise scale that exp(score / scale)
        # overflows leave the heap's law undefined; the pass has no such limit.
        use_tree = bool(np.isfinite(tree[1]))
    if use_tree:
        changed = (np.zeros(1 + n_coords, dtype=np.int64),
                   np.zeros(n_coords, dtype=np.uint8))
    else:
        tree = _EMPTY_DATA
        changed = (_EMPTY_IDX, _EMPTY_MARKS)
    refresh_work = np.int64(8 * (nnz + n + n_coords))

    def objective():
        return float(K.objective_value(y, z, loss.code, loss.param, w, p, penalty.code,
                                       float(penalty.a), float(penalty.b)))

    if verbose and objective_every > 0:
        chunk = int(objective_every)
    elif verbose:
        chunk = max(1, -(-n_updates // 10))
    else:
        chunk = max(1, n_updates)

    t = 0
    while t < n_updates and n_coords > 0:
        steps = min(chunk, n_updates - t)
        done, top, stopped = K.cd_run(
            dense, data, y, p, loss.code, loss.param, penalty.code,
            float(penalty.a), float(penalty.b), clip, smoothness, score_w, update_scale,
            _SELECTIONS[selection], _SELECTION_NOISES[selection_noise],
            selection_scale, _UPDATE_NOISES[update_noise], rng, check_tol,
            float(tol), t, steps, w, z, d, g, work, refresh_work, tree, changed,
        )
        t += done
        if verbose:
            msg = f"update {t}/{n_updates}"
            if noiseless:
                # Only a run without noise may show statistics of the data.
                if greedy:
                    gk = g
                else:
                    gk = np.empty(n_coords)
                    K.full_gradient(dense, data, p, d, clip, gk)
                top = K.max_score(w, gk, p, penalty.code, float(penalty.a),
                                  float(penalty.b), score_w)
                msg += f": max score {top:.6e}"
                if objective_every > 0:
                    msg += f", objective {objective():.10e}"
            print(msg)
        if stopped:
            break

    return CDResult(
        coef=w[:p],
        intercept=float(w[p]) if fit_intercept else 0.0,
        n_iter=t,
        objective=objective(),
    )
