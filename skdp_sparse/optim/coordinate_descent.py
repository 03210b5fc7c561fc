"""Coordinate descent for ``(1/n) sum_i l(y_i, x_i . w + b) + psi(w)``, with the
noise hooks of private greedy (DP-GCD) and randomised (DP-CD) coordinate descent.

This module only optimises: it adds noise at the scales it is given and does no
privacy calibration. What it guarantees, and what the calibration relies on:

* coordinate ``j`` of the gradient is always computed from per-example terms
  clipped to ``[-clip[j], clip[j]]``, so replacing one example moves it by at
  most ``2 clip[j] / n``;
* each noisy quantity (a selection score or an update) gets a fresh draw from
  the Generator; no draw is reused across coordinates or updates;
* with noise on, exactly ``n_updates`` updates run, whatever the data;
* with exact noise (``"exponential"``, ``"discrete_laplace"``, ``"discrete_gaussian"``)
  every random outcome is decided by the exact samplers of
  :mod:`skdp_sparse.privacy.discrete` on lattice-rounded values, and each release's
  guarantee is the sampler's for the sensitivities it is given
  (``doc/proofs/coordinate_descent.rst``).
"""

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..privacy.discrete import (
    HANDOFF_SLOTS,
    ExponentialSelector,
    NoiseBuffer,
    finish_report_noisy_max,
    kernel_source,
    plan_selection,
    plan_unit_gaussian,
    plan_unit_laplace,
)
from ..utils.random import check_generator
from . import _cd_kernels as K
from ._cd_margins import (
    _EMPTY_DATA,
    _EMPTY_IDX,
    _EMPTY_MARKS,
    _NO_ROWS,
    BlockMargins,
    Margins,
    _prepare_data,
    new_changes,
)

__all__ = ["BlockMargins", "CDResult", "ExactNoiseLattices", "Margins", "coordinate_descent",
           "exact_noise_lattices"]

#: Number of coordinates from which ``gumbel_sampler="auto"`` uses the heap.
HEAP_MIN_COORDS = 4096

_SELECTIONS = {"greedy": K.GREEDY, "random": K.RANDOM, "cyclic": K.CYCLIC}
_SELECTION_NOISES = {"none": K.NOISE_NONE, "gumbel": K.NOISE_GUMBEL,
                     "laplace": K.NOISE_LAPLACE, "exponential": K.NOISE_EXACT_EM,
                     "discrete_laplace": K.NOISE_EXACT_RNM}
_UPDATE_NOISES = {"none": K.NOISE_NONE, "gaussian": K.NOISE_GAUSSIAN,
                  "laplace": K.NOISE_LAPLACE, "discrete_gaussian": K.NOISE_EXACT,
                  "discrete_laplace": K.NOISE_EXACT}
#: Draws of exact update noise, or of report-noisy-max noise per coordinate, that a
#: buffer holds at most.
BUFFER_DRAWS = 4096

@dataclass
class CDResult:
    """Output of :func:`coordinate_descent`.

    ``objective`` is the objective at the returned point, computed on the
    training data, and ``data_passes`` the entries of X the run read, in passes over
    X (each non-zero, and each row for the intercept): neither is a private quantity.
    """

    coef: np.ndarray
    intercept: float
    n_iter: int
    objective: float
    data_passes: float = 0.0


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


@dataclass
class ExactNoiseLattices:
    """The lattices of a run's exact noise (None where that noise is not exact)."""

    selection: object = None
    selection_sensitivity: float = 0.0
    update: object = None
    update_sensitivity: np.ndarray | None = None


def exact_noise_lattices(clip, score_w, penalty, *, selection_noise="none",
                         selection_scale=0.0, selection_sensitivity=None,
                         update_noise="none", update_scale=None, update_sensitivity=None):
    """Plan the lattices of a run's exact noise (arguments as :func:`coordinate_descent`,
    ``score_w = 1 / sqrt(smoothness)``).

    A function of public values: raises ``ValueError`` when the exact samplers cannot
    serve them. Every limit grows with the value bounds ``max_j (clip_j + a) score_w_j /
    Delta_u`` and ``max_j clip_j / Delta_j``, so a solver that checks its plan with
    constants giving bounds at least as large as the run's knows the run passes.
    """
    out = ExactNoiseLattices()
    n_coords = len(clip)
    if selection_noise in ("exponential", "discrete_laplace"):
        sens = _positive("selection_sensitivity", selection_sensitivity)
        bound = float(np.max((clip + float(penalty.a)) * score_w)) / sens
        out.selection = plan_selection(sens, selection_scale, bound)
        out.selection_sensitivity = sens
    if update_noise in ("discrete_gaussian", "discrete_laplace"):
        sensitivity = _coord_array("update_sensitivity", update_sensitivity, n_coords,
                                   allow_inf=False)
        if (sensitivity == 0).any():
            raise ValueError("update_sensitivity must hold positive numbers")
        multiplier = _positive("update_scale", update_scale)
        plan = plan_unit_gaussian if update_noise == "discrete_gaussian" \
            else plan_unit_laplace
        out.update = plan(multiplier, float(np.max(clip / sensitivity)))
        out.update_sensitivity = sensitivity
    return out


class _ExactNoise:
    """The samplers, noise buffers and lattices of one run's exact noise.

    Value bounds (public, from the run's constants): an update key is ``g_j /
    Delta_j`` with ``|g_j| <= clip_j``, so ``Y = max_j clip_j / Delta_j`` (``n / 2``
    for ``Delta_j = 2 clip_j / n``); a selection key is ``u_j / Delta_u`` with ``u_j =
    dist(-g_j, d psi_j(w_j)) / sqrt(M_j) <= (clip_j + a) / sqrt(M_j)`` (``a`` the l1
    strength; an l2 part can exceed it only far from the coordinate's optimum, and such
    a score is clipped to the bound, a change of the score that its sensitivity
    survives).
    """

    def __init__(self, *, n_coords, n_updates, clip, score_w, penalty, w, g, n_features,
                 selection_noise, selection_scale, selection_sensitivity, update_noise,
                 update_scale, update_sensitivity, sampler, rng):
        self.rng = rng
        self.n_coords = n_coords
        lattice = np.zeros(6)
        empty = np.empty(0, dtype=np.int64)
        self.selector = None
        self.sel = (empty,) * 6
        self.sel_buffer = None
        lattices = exact_noise_lattices(
            clip, score_w, penalty, selection_noise=selection_noise,
            selection_scale=selection_scale, selection_sensitivity=selection_sensitivity,
            update_noise=update_noise, update_scale=update_scale,
            update_sensitivity=update_sensitivity)
        if lattices.selection is not None:
            lat = lattices.selection
            lattice[K.SEL_SENSITIVITY] = lattices.selection_sensitivity
            lattice[K.SEL_BOUND] = lat.value_bound
            lattice[K.SEL_INV_GAMMA] = lat.inv_gamma
            keys = np.empty(n_coords, dtype=np.int64)
            K.selection_keys(w, g, n_features, penalty.code, float(penalty.a),
                             float(penalty.b), score_w, lattice, keys)
            if selection_noise == "exponential":
                dynamic = {"heap": True, "pass": False}.get(sampler)
                self.selector = ExponentialSelector(keys, lat.t, dynamic=dynamic)
                self.sel = self.selector.arrays
            else:
                self.sel = (keys,) + (empty,) * 5
                size = n_coords * max(1, min(n_updates, BUFFER_DRAWS // n_coords))
                self.sel_buffer = NoiseBuffer("laplace", lat.t, rng, size=size)
        self.upd_buffer = None
        self.sensitivity = np.zeros(n_coords)
        if lattices.update is not None:
            lat = lattices.update
            self.sensitivity = lattices.update_sensitivity
            lattice[K.UPD_BOUND] = lat.value_bound
            lattice[K.UPD_INV_GAMMA] = lat.inv_gamma
            lattice[K.UPD_GAMMA] = lat.gamma
            self.upd_buffer = lat.buffer(rng, max(1, min(n_updates, BUFFER_DRAWS)))
        self.lattice = lattice
        self.fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)

    def arrays(self):
        """The kernel's ``exact`` tuple (rebuilt per call: a refill may reallocate)."""
        empty = np.empty(0, dtype=np.int64)
        sb = self.sel_buffer
        ub = self.upd_buffer
        return (self.sel, empty if sb is None else sb.values,
                empty if sb is None else sb.pos, empty if ub is None else ub.values,
                empty if ub is None else ub.pos, self.lattice)

    def resume(self, status, pending, src):
        """Finish what the kernel handed back: ``(forced_j, forced_g)`` to resume with."""
        if status == K.SELECT_HANDOFF:
            return self.selector.finish(self.fb, src), math.nan
        if status == K.SELECT_REFILL:
            self.sel_buffer.refill(self.n_coords)
            return -1, math.nan
        if status == K.SELECT_FINISH:
            buf = self.sel_buffer
            return finish_report_noisy_max(self.sel[0], buf.values, buf.pos), math.nan
        if status == K.UPDATE_REFILL:
            self.upd_buffer.refill()
            return pending, math.nan
        if status == K.RELEASE_FINISH:
            # The exact integer key + noise, rounded once to a double, as in the kernel.
            unit = self.sensitivity[pending] * self.lattice[K.UPD_GAMMA]
            return pending, float(int(self.fb[0]) + int(self.fb[1])) * unit
        raise RuntimeError(f"unknown kernel status {status}")


def _positive(name, value):
    value = float(value)
    if not (0.0 < value < np.inf):
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return value


def coordinate_descent(
    X, y, loss, penalty, *, fit_intercept, clip, smoothness, n_updates,
    selection="greedy", selection_noise="none", selection_scale=0.0,
    update_noise="none", update_scale=None, rng=None, tol=0.0, verbose=0,
    objective_every=0, gumbel_sampler="auto", selection_sensitivity=None,
    update_sensitivity=None, verbose_tag="",
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

    Exact noise, for a floating-point-safe run: the greedy scores are rounded to the
    lattice of :func:`~skdp_sparse.privacy.discrete.plan_selection` (sensitivity
    ``selection_sensitivity``, nominal scale ``selection_scale``), and
    ``"exponential"`` draws j exactly with probability proportional to
    ``exp(key_j / t)`` (the law of Gumbel-max on the keys), ``"discrete_laplace"``
    takes report-noisy-max with exact discrete Laplace noise. The update
    ``"discrete_gaussian"`` / ``"discrete_laplace"`` releases ``g_j`` on the unit
    lattice of :func:`~skdp_sparse.privacy.discrete.plan_unit_gaussian` /
    ``plan_unit_laplace`` with noise multiplier ``update_scale`` (a number): noise of
    scale ``update_scale * update_sensitivity[j]`` on coordinate j.

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
    selection_noise : {"none", "gumbel", "laplace", "exponential", "discrete_laplace"}
        The last two: exact, greedy selection only, ``selection_sensitivity`` required.
    selection_scale : float >= 0
    update_noise : {"none", "gaussian", "laplace", "discrete_gaussian", "discrete_laplace"}
        The last two: exact, ``update_sensitivity`` and a finite ``clip`` required.
    update_scale : float or array of shape (n_coords,), optional
        Required when ``update_noise != "none"``; for exact noise the multiplier.
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
    verbose_tag : str
        Printed before each progress line (the solver's ``"[name] "``), as the
        gradient solvers' lines start.
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
        of the coordinates and the plain pass is faster. For the exact
        ``"exponential"`` selection, ``"heap"`` and ``"pass"`` pick the sampler's
        dynamic sum tree and its one-pass scan (same law); ``"auto"`` lets it choose.
    selection_sensitivity : float, optional
        How much one score may move between neighbouring data sets.
    update_sensitivity : float or array of shape (n_coords,), optional
        How much ``g_j`` may move between neighbouring data sets.

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
    # Rows held elsewhere (row blocks on a cluster's workers) keep their margins and
    # gradient terms where they are; the run here sees only the summed gradient.
    remote = hasattr(X, "greedy_margins")
    if remote:
        if not greedy:
            raise ValueError("rows held elsewhere need greedy selection: the random and "
                             "cyclic rules read one column per update")
        n, p = int(X.n_samples), int(X.n_features)
    else:
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
    exact_sel = _SELECTION_NOISES[selection_noise] >= K.NOISE_EXACT_EM
    exact_upd = _UPDATE_NOISES[update_noise] == K.NOISE_EXACT
    if exact_sel and not greedy:
        raise ValueError(f"selection_noise={selection_noise!r} needs greedy selection")
    if (exact_sel or exact_upd) and not np.isfinite(clip).all():
        raise ValueError("exact noise needs a finite clip")
    if update_noise == "none":
        update_scale = np.zeros(n_coords)
    elif update_scale is None:
        raise ValueError(f"update_noise={update_noise!r} needs update_scale")
    elif not exact_upd:
        update_scale = _coord_array("update_scale", update_scale, n_coords,
                                    allow_inf=False)
    rng = check_generator(rng)
    noiseless = selection_noise == "none" and update_noise == "none"
    check_tol = bool(noiseless and tol > 0)

    score_w = np.sqrt(smoothness)
    np.divide(1.0, score_w, out=score_w)
    w = np.zeros(n_coords)
    if remote:
        rows = X.greedy_margins(y, loss, clip, n_coords)
        g = rows.gradient  # kept current by rows.move
        dense, data, y, z, d, row_ratio = False, _NO_ROWS, _EMPTY_DATA, _EMPTY_DATA, \
            _EMPTY_DATA, _EMPTY_DATA
        work, refresh_work = np.zeros(3, dtype=np.int64), np.int64(0)
    else:
        rows = BlockMargins(dense, data, nnz, y, loss, clip, n_coords, n, greedy=greedy)
        z, d, g, row_ratio = rows.z, rows.d, rows.g, rows.row_ratio
        work, refresh_work = rows.work, rows.refresh_work
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
        changed = new_changes(n_coords)
    else:
        tree = _EMPTY_DATA
        changed = (_EMPTY_IDX, _EMPTY_MARKS)
    exact = _ExactNoise(
        n_coords=n_coords, n_updates=n_updates, clip=clip, score_w=score_w,
        penalty=penalty, w=w, g=g, n_features=p, selection_noise=selection_noise,
        selection_scale=selection_scale, selection_sensitivity=selection_sensitivity,
        update_noise=update_noise, update_scale=update_scale,
        update_sensitivity=update_sensitivity, sampler=gumbel_sampler, rng=rng,
    ) if n_coords else None
    if exact_upd:
        # The kernel scales each release by its coordinate's sensitivity.
        update_scale = exact.sensitivity if n_coords else np.zeros(0)
    if exact_sel and exact.selector is not None and exact.selector.dynamic:
        # Only the tree needs to know which scores changed; the scan and
        # report-noisy-max read every key anyway, and recomputing them all costs less
        # than recording the coordinates each changed row touches.
        changed = new_changes(n_coords)
    src = kernel_source(rng)
    inv_b = 1.0 / selection_scale if use_tree else 0.0

    def objective():
        if remote:
            return float(rows.loss_sum()) / n + float(
                K.penalty_sum(w, p, penalty.code, float(penalty.a), float(penalty.b)))
        return float(K.objective_value(y, z, loss.code, loss.param, w, p, penalty.code,
                                       float(penalty.a), float(penalty.b)))

    if verbose and objective_every > 0:
        chunk = int(objective_every)
    elif verbose:
        chunk = max(1, -(-n_updates // 10))
    else:
        chunk = max(1, n_updates)

    t = 0
    forced_j, forced_g = -1, math.nan
    while t < n_updates and n_coords > 0:
        mark = min(n_updates, (t // chunk + 1) * chunk)
        if remote:
            w_before = w.copy()
        # The kernel draws the generator's words directly: no other thread may draw
        # from it meanwhile.
        with src.lock:
            done, top, stopped, status, pending = K.cd_run(
                dense, data, y, p, loss.code, loss.param, penalty.code,
                float(penalty.a), float(penalty.b), clip, row_ratio, smoothness, score_w,
                update_scale, _SELECTIONS[selection], _SELECTION_NOISES[selection_noise],
                selection_scale, _UPDATE_NOISES[update_noise], rng, check_tol,
                float(tol), t, 1 if remote else mark - t, w, z, d, g, work, refresh_work,
                tree, changed, exact.arrays(), src.next64, src.state, exact.fb, forced_j,
                forced_g, n, remote,
            )
        t += done
        forced_j, forced_g = -1, math.nan
        if status == K.MOVED:
            moved = rows.move(pending, w[pending] - w_before[pending])
            if changed[0].size:
                if moved is None:
                    changed[0][0] = -1
                else:
                    K.mark_changed(changed, moved)
            K.refresh_selection(pending, w, g, p, penalty.code, float(penalty.a),
                                float(penalty.b), score_w, tree, changed, inv_b,
                                _SELECTION_NOISES[selection_noise], exact.sel, exact.lattice)
        elif status != K.DONE:
            forced_j, forced_g = exact.resume(status, pending, src)
            continue
        if t < mark and not stopped:
            continue
        if verbose:
            msg = f"{verbose_tag}update {t}/{n_updates}"
            if noiseless:
                # Only a run without noise may show statistics of the data.
                if greedy:
                    gk = g
                else:
                    gk = np.empty(n_coords)
                    K.full_gradient(dense, data, p, d, clip, gk, n)
                top = K.max_score(w, gk, p, penalty.code, float(penalty.a),
                                  float(penalty.b), score_w)
                msg += f": max score {top:.6e}"
                if objective_every > 0:
                    msg += f", objective {objective():.10e}"
            print(msg)
        if stopped:
            break

    # One pass reads every entry and, for the intercept, every row; the greedy rule
    # also computed the whole gradient once at the start and at each recomputation.
    entries, pass_size = rows.entries_read(fit_intercept, greedy and n_coords > 0)
    return CDResult(
        coef=w[:p],
        intercept=float(w[p]) if fit_intercept else 0.0,
        n_iter=t,
        objective=objective(),
        data_passes=float(entries) / pass_size,
    )
