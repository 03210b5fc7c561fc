"""Numba kernels of (private) coordinate descent.

One kernel, :func:`cd_run`, serves every loss, penalty, selection rule, noise
type and storage: it dispatches on integer codes, and on a ``dense`` flag for
the access to the columns and rows of X. The data travel as one tuple
``data = (Xf, csc_data, csc_indices, csc_indptr, csr_data, csr_indices,
csr_indptr)``; the members a run does not need are empty arrays, so a single
compiled specialisation covers dense and sparse inputs.

State, all updated in place so that a run can be split into chunks:

* ``w`` (n_coords,): coefficients, then the intercept if there is one;
* ``z`` (n,): margins ``X w + b``;
* ``d`` (n,): loss derivatives ``l'(y_i, z_i)``;
* ``g`` (n_coords,): clipped coordinate gradients, maintained only for greedy
  selection;
* ``work`` (3,): entries touched by incremental gradient updates since the
  last exact recomputation of ``g``; those of earlier updates (and, for the random
  and cyclic rules, the entries of the columns read and moved); the number of
  exact recomputations. The caller turns the last two into the run's passes over
  the data.

Noise is drawn inside the loops from the ``numpy.random.Generator`` passed in,
whose state advances in place: every coordinate and every update gets a fresh
draw, and a chunked run consumes the stream exactly as an unchunked one.

Exact noise (the floating-point-safe path) goes through the samplers of
:mod:`skdp_sparse.privacy.discrete` only: selection keys and updates are rounded to
their lattices (``lattice_key``), the exponential mechanism draws from the generator's
own words (``em_select``), report-noisy-max and the updates take exact discrete noise
from buffers filled ahead (``rnm_select``, ``noise_take``), and each update is a
``lattice_release``. Whatever one of them cannot finish in the kernel, the kernel
hands back before changing any state (a status code, see :func:`cd_run`), and the
caller resumes it with the finished value.
"""

import numba
import numpy as np

from ..privacy.discrete import (
    em_invalidate,
    em_select,
    em_set,
    lattice_key,
    lattice_release,
    noise_take,
    rnm_select,
)
from ..privacy.float_noise import gaussian_noise, gumbel_noise, laplace_noise

# The rows' side (margins, derivatives, clipped gradient) has its module; the engine
# and the tests reach every kernel through this one.
from ._cd_rows import (  # noqa: F401
    UNCLIPPED,
    _mark,
    apply_delta,
    clip_scalar,
    column_gradient,
    full_gradient,
    init_derivatives,
    loss_sum,
    mark_changed,
    move_coordinate,
    row_clip_ratios,
)
from .penalties import NONE, penalty_value, prox, subgrad_distance

GREEDY, RANDOM, CYCLIC = 0, 1, 2
# Selection noise codes; update noise uses GAUSSIAN = 1 and the same LAPLACE = 2.
NOISE_NONE, NOISE_GUMBEL, NOISE_LAPLACE = 0, 1, 2
NOISE_GAUSSIAN = 1
# Exact noise: the exponential mechanism and report-noisy-max on lattice keys; for
# updates, lattice releases with the exact noise of a buffer (its law is the buffer's).
NOISE_EXACT_EM, NOISE_EXACT_RNM = 3, 4
NOISE_EXACT = 3
# Status of cd_run: DONE, or what the caller must finish before resuming. MOVED: a run
# whose rows live elsewhere (``remote``) moved a coordinate, which the rows must apply.
DONE, SELECT_HANDOFF, SELECT_REFILL, SELECT_FINISH, UPDATE_REFILL, RELEASE_FINISH, MOVED = \
    range(7)
# Layout of the float64 array ``lattice`` of the exact path.
SEL_SENSITIVITY, SEL_BOUND, SEL_INV_GAMMA, UPD_BOUND, UPD_INV_GAMMA, UPD_GAMMA = range(6)
@numba.njit(cache=True, inline="always")
def _column_length(dense, data, j, n_features, n):
    """Entries of column j that a gradient or an update reads (n for the intercept and
    for dense X)."""
    if dense or j >= n_features:
        return n
    return data[3][j + 1] - data[3][j]


@numba.njit(cache=True)
def objective_value(y, z, loss_code, loss_param, w, n_features, pen_code, pen_a, pen_b):
    """``(1/n) sum_i l(y_i, z_i) + sum_{j < n_features} psi_j(w_j)``, no temporaries."""
    return loss_sum(y, z, loss_code, loss_param) / z.size + penalty_sum(
        w, n_features, pen_code, pen_a, pen_b)


@numba.njit(cache=True)
def penalty_sum(w, n_features, pen_code, pen_a, pen_b):
    """``sum_{j < n_features} psi_j(w_j)``."""
    r = 0.0
    for j in range(n_features):
        r += penalty_value(pen_code, pen_a, pen_b, w[j])
    return r


@numba.njit(cache=True, inline="always")
def _score(j, w, g, n_features, pen_code, pen_a, pen_b, score_w):
    code = pen_code if j < n_features else NONE
    return subgrad_distance(code, pen_a, pen_b, w[j], g[j]) * score_w[j]


@numba.njit(cache=True)
def max_score(w, g, n_features, pen_code, pen_a, pen_b, score_w):
    """Largest noiseless GS-s score ``dist(-g_j, d psi_j(w_j)) / sqrt(M_j)``."""
    best = 0.0
    for j in range(w.size):
        s = _score(j, w, g, n_features, pen_code, pen_a, pen_b, score_w)
        if s > best:
            best = s
    return best


@numba.njit(cache=True, inline="always")
def _select_greedy(w, g, n_features, pen_code, pen_a, pen_b, score_w, noise, scale, rng):
    """Report-noisy-max in one pass; returns ``(j, noiseless max score)``."""
    best = -np.inf
    best_j = 0
    top = 0.0
    for j in range(w.size):
        s = _score(j, w, g, n_features, pen_code, pen_a, pen_b, score_w)
        if s > top:
            top = s
        if noise == NOISE_GUMBEL:
            s += gumbel_noise(rng, scale)
        elif noise == NOISE_LAPLACE:
            s += laplace_noise(rng, scale)
        if s > best:
            best = s
            best_j = j
    return best_j, top


@numba.njit(cache=True, inline="always")
def _logaddexp(a, b):
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    if a == b:  # also keeps inf + inf away from inf - inf
        return a + np.log(2.0)
    if a > b:
        return a + np.log1p(np.exp(b - a))
    return b + np.log1p(np.exp(a - b))


# Exponential-mechanism sampler. Gumbel-max selection, argmax_j s_j + b G_j,
# draws j with probability exp(s_j / b) / sum_k exp(s_k / b); a heap of
# log-sum-exp values over the log-weights s_j / b draws from the same law in
# O(log p) and is updated in O(log p) per changed score, so one update costs
# O(touched coordinates * log p) instead of O(p). Heap node v (1 <= v < m)
# holds logaddexp of nodes 2v and 2v+1; leaf j sits at m + j (m = n_coords).
# Every node is recomputed from its children, never adjusted by differences,
# so rounding does not accumulate.


@numba.njit(cache=True)
def tree_build(tree, w, g, n_features, pen_code, pen_a, pen_b, score_w, inv_b):
    m = w.size
    for j in range(m):
        tree[m + j] = _score(j, w, g, n_features, pen_code, pen_a, pen_b, score_w) * inv_b
    for v in range(m - 1, 0, -1):
        tree[v] = _logaddexp(tree[2 * v], tree[2 * v + 1])


@numba.njit(cache=True)
def _tree_set(tree, m, j, value):
    v = m + j
    if tree[v] == value:
        return
    tree[v] = value
    v //= 2
    while v >= 1:
        new = _logaddexp(tree[2 * v], tree[2 * v + 1])
        # A node recomputed to the same value leaves every ancestor's as it was.
        if new == tree[v]:
            return
        tree[v] = new
        v //= 2


@numba.njit(cache=True)
def _tree_update(tree, w, g, n_features, pen_code, pen_a, pen_b, score_w, inv_b, flags):
    """:func:`tree_build`'s tree, to the bit, from a tree that was consistent: only the
    nodes above a leaf whose value changed are recomputed, each once (every node is a
    function of its children's values, so the others would come out the same). Scores
    that stay put (an l1 penalty holds every ``|g_j| <= a`` at 0) leave whole subtrees
    untouched. ``flags``: ``m`` zeros, zeroed again on return. Returns how many nodes
    were recomputed."""
    m = w.size
    moved = 0
    for k in range(m):
        value = _score(k, w, g, n_features, pen_code, pen_a, pen_b, score_w) * inv_b
        # Without a branch: which leaves changed is as good as random.
        change = value != tree[m + k]
        tree[m + k] = value
        flags[k] = change
        moved += change
    if moved == 0 or m == 1:
        flags[:] = 0
        return 0
    if 4 * moved > m:
        # Most nodes lie above some changed leaf: tests per node would cost more than
        # they spare.
        for v in range(m - 1, 0, -1):
            tree[v] = _logaddexp(tree[2 * v], tree[2 * v + 1])
        flags[:] = 0
        return m - 1
    # flags[k] for leaf k; internal node v's flag goes to up[v].
    up = np.zeros(m, dtype=np.uint8)
    done = 0
    for v in range(m - 1, 0, -1):
        c = 2 * v
        left = flags[c - m] if c >= m else up[c]
        right = flags[c + 1 - m] if c + 1 >= m else up[c + 1]
        if left | right:
            new = _logaddexp(tree[c], tree[c + 1])
            done += 1
            if new != tree[v]:
                tree[v] = new
                up[v] = 1
    flags[:] = 0
    return done


@numba.njit(cache=True)
def tree_sample(tree, m, rng):
    v = 1
    while v < m:
        left = tree[2 * v]
        right = tree[2 * v + 1]
        if left == right:
            p_left = 0.5
        elif left > right:
            p_left = 1.0 / (1.0 + np.exp(right - left))
        else:
            e = np.exp(left - right)
            p_left = e / (1.0 + e)
        v = 2 * v if rng.random() < p_left else 2 * v + 1
    return v - m


@numba.njit(cache=True)
def _tree_refresh(tree, changed, w, g, n_features, pen_code, pen_a, pen_b, score_w, inv_b):
    dirty, marked = changed
    m = w.size
    count = dirty[0]
    # Past about m / log2(m) changed leaves a full O(m) rebuild is cheaper
    # than one O(log m) path per leaf.
    if count < 0 or count * (np.log2(m) + 1.0) > m:
        if count < 0:
            marked[:] = 0
        for r in range(count):
            marked[dirty[1 + r]] = 0
        _tree_update(tree, w, g, n_features, pen_code, pen_a, pen_b, score_w, inv_b,
                     marked)
    else:
        for r in range(count):
            k = dirty[1 + r]
            marked[k] = 0
            value = _score(k, w, g, n_features, pen_code, pen_a, pen_b, score_w) * inv_b
            _tree_set(tree, m, k, value)
    dirty[0] = 0


@numba.njit(cache=True, inline="always")
def _key(k, w, g, n_features, pen_code, pen_a, pen_b, score_w, lattice):
    """Lattice key of coordinate k's score, normalised by the selection sensitivity."""
    s = _score(k, w, g, n_features, pen_code, pen_a, pen_b, score_w)
    return lattice_key(s, lattice[SEL_SENSITIVITY], lattice[SEL_BOUND],
                       lattice[SEL_INV_GAMMA])


@numba.njit(cache=True)
def selection_keys(w, g, n_features, pen_code, pen_a, pen_b, score_w, lattice, keys):
    """Every coordinate's key, into ``keys`` (the start of an exact greedy run)."""
    for k in range(w.size):
        keys[k] = _key(k, w, g, n_features, pen_code, pen_a, pen_b, score_w, lattice)


@numba.njit(cache=True)
def _refresh_keys(sel, em, changed, w, g, n_features, pen_code, pen_a, pen_b, score_w,
                  lattice):
    """Recompute the keys of the coordinates listed in ``changed`` (all of them on a
    negative count, or when nothing is tracked). The exponential mechanism's sampler
    learns them through ``em_set`` (the tree updates its sums); report-noisy-max only
    reads the keys."""
    dirty, marked = changed
    tracked = dirty.size > 0
    count = dirty[0] if tracked else -1
    n = w.size if count < 0 else count
    # Past about p / log2(p) changed keys, one O(p) rebuild of the tree costs less than
    # their O(log p) scattered path updates (the heap's rule in _tree_refresh). A refresh
    # of every key stores the keys directly below, so it always leaves the tree to be
    # rebuilt: by the rule alone, a single key (p = 1) would be stored under a stale
    # tree, whose envelope no longer covers it, and the next selection rejects for ever.
    bulk = not em or count < 0 or n * (np.log2(w.size) + 1.0) > w.size
    if em and bulk:
        em_invalidate(sel)
    keys = sel[0]
    # A stale tree (and the scan, which keeps none) only stores a key, as em_set would:
    # a call of em_set per key, passing the selection's arrays, cost 20 times the key
    # itself on a refresh of every key.
    if count < 0:
        if tracked:
            marked[:] = 0
            dirty[0] = 0
        for k in range(n):
            keys[k] = _key(k, w, g, n_features, pen_code, pen_a, pen_b, score_w, lattice)
        return
    for r in range(n):
        k = dirty[1 + r]
        marked[k] = 0
        key = _key(k, w, g, n_features, pen_code, pen_a, pen_b, score_w, lattice)
        if bulk:
            keys[k] = key
        else:
            em_set(sel, k, key)
    dirty[0] = 0


@numba.njit(cache=True)
def refresh_selection(j, w, g, n_features, pen_code, pen_a, pen_b, score_w, tree, changed,
                      inv_b, sel_noise, sel, lattice):
    """The selection's side of an update of coordinate j: the heap's leaves or the exact
    selection's keys of the coordinates ``changed`` lists (all of them on a negative
    count), and j's."""
    if changed[0].size > 0:
        _mark(changed, j)
    if tree.size > 0:
        _tree_refresh(tree, changed, w, g, n_features, pen_code, pen_a, pen_b, score_w,
                      inv_b)
    elif sel_noise == NOISE_EXACT_EM or sel_noise == NOISE_EXACT_RNM:
        _refresh_keys(sel, sel_noise == NOISE_EXACT_EM, changed, w, g, n_features,
                      pen_code, pen_a, pen_b, score_w, lattice)


@numba.njit(cache=True)
def cd_run(
    dense, data, y, n_features, loss_code, loss_param, pen_code, pen_a, pen_b,
    clip, row_ratio, smoothness, score_w, update_scale, selection, sel_noise, sel_scale,
    upd_noise, rng, check_tol, tol, t_start, n_steps, w, z, d, g, work, refresh_work,
    tree, changed, exact, next64, state, fb, forced_j, forced_g, n_total=-1, remote=False,
):
    """Run up to ``n_steps`` coordinate updates, numbered from ``t_start``.

    Returns ``(updates run, last noiseless max score or -1, stopped on tol, status,
    pending coordinate)``. ``smoothness[j] = M_j`` and ``score_w[j] = 1 / sqrt(M_j)``;
    ``row_ratio`` is :func:`row_clip_ratios` of X for greedy selection (read by nothing
    else).
    A non-empty ``tree`` (built by :func:`tree_build`) switches greedy Gumbel
    selection to the log-sum-exp heap sampler; otherwise selection is one pass over
    all scores. ``changed`` is the pair of ``new_changes(n_coords)`` whenever the heap or
    exact greedy selection needs the coordinates whose scores changed; a pair of empty
    arrays otherwise.

    Exact noise: ``exact = (sel, sel_noise, sel_pos, upd_noise, upd_pos, lattice)``.
    ``sel`` is the selection's array tuple (``ExponentialSelector.arrays``; for
    report-noisy-max only ``sel[0]``, the keys, is used), ``sel_noise`` / ``upd_noise``
    with their positions are noise buffers, ``lattice`` holds the lattice constants
    (``SEL_*``, ``UPD_*``), and ``update_scale[j]`` is then coordinate j's sensitivity,
    the unit its release is scaled by. ``next64``, ``state``: the generator's words;
    ``fb``: the handoff record. The status says what stopped a run early, at the
    first update not run, before anything of it changed: ``SELECT_HANDOFF`` (finish
    the selection from ``fb``), ``SELECT_REFILL`` / ``UPDATE_REFILL`` (refill that
    buffer), ``SELECT_FINISH`` (report-noisy-max in big integers), ``RELEASE_FINISH``
    (the release of key ``fb[0]`` plus noise ``fb[1]`` in big integers, for the pending
    coordinate). The caller resumes with ``forced_j`` (the coordinate, or -1 to
    select) and ``forced_g`` (the released gradient, or NaN to draw its noise), which
    apply to the first update only; the pending coordinate of ``UPDATE_REFILL`` is the
    ``forced_j`` it was given.

    ``remote`` (greedy selection only): the rows are held elsewhere, so X, ``y``, ``z``
    and ``d`` are empty and ``g`` is the rows' gradient as last reported. An update that
    moves its coordinate sets ``w[j]`` and returns at once with status ``MOVED`` and j
    pending: the caller has the rows apply the move (:func:`move_coordinate`), sets
    ``g`` to their new gradient and refreshes the selection
    (:func:`refresh_selection`) before resuming. ``n_total``: see
    :func:`column_gradient`.
    """
    n_coords = w.size
    n = z.size
    d_old_buf = np.empty(n if dense else 0)
    rows_buf = np.empty(n if dense else 0, dtype=np.int64)
    greedy = selection == GREEDY
    # Random and cyclic rules keep no gradient vector, so the tolerance test
    # recomputes one, once per pass over the coordinates (the cost of a pass).
    g_check = np.empty(n_coords if (check_tol and not greedy) else 0)
    use_tree = tree.size > 0
    inv_b = 1.0 / sel_scale if use_tree else 0.0
    sel, sel_values, sel_pos, upd_values, upd_pos, lattice = exact
    last_max = -1.0
    done = 0
    for it in range(n_steps):
        t = t_start + it
        j = forced_j if it == 0 else -1
        given = it == 0 and not np.isnan(forced_g)
        # Checked before anything is drawn, so that a refill leaves the step intact.
        if upd_noise == NOISE_EXACT and not given and upd_pos[0] >= upd_values.size:
            return done, last_max, False, UPDATE_REFILL, j
        if j >= 0:
            pass
        elif use_tree:
            j = tree_sample(tree, n_coords, rng)
        elif sel_noise == NOISE_EXACT_EM:
            j = em_select(sel, next64, state, fb)
            if j < 0:
                return done, last_max, False, SELECT_HANDOFF, -1
        elif sel_noise == NOISE_EXACT_RNM:
            j = rnm_select(sel[0], sel_values, sel_pos)
            if j < 0:
                return done, last_max, False, SELECT_REFILL if j == -1 else SELECT_FINISH, -1
        elif greedy:
            j, top = _select_greedy(
                w, g, n_features, pen_code, pen_a, pen_b, score_w,
                sel_noise, sel_scale, rng,
            )
            last_max = top
            if check_tol and top < tol:
                return done, last_max, True, DONE, -1
        else:
            if check_tol and t % n_coords == 0:
                full_gradient(dense, data, n_features, d, clip, g_check, n_total)
                last_max = max_score(w, g_check, n_features, pen_code, pen_a, pen_b,
                                     score_w)
                if last_max < tol:
                    return done, last_max, True, DONE, -1
            if selection == RANDOM:
                j = rng.integers(0, n_coords)
            else:
                j = t % n_coords
        if greedy:
            gj = g[j]
        else:
            gj = column_gradient(dense, data, j, n_features, d, clip, n_total)
            # The column is read here and once more if the update moves it.
            work[1] += _column_length(dense, data, j, n_features, n)
        if given:
            gj = forced_g
        elif upd_noise == NOISE_GAUSSIAN:
            gj += gaussian_noise(rng, update_scale[j])
        elif upd_noise == NOISE_LAPLACE:
            gj += laplace_noise(rng, update_scale[j])
        elif upd_noise == NOISE_EXACT:
            key = lattice_key(gj, update_scale[j], lattice[UPD_BOUND], lattice[UPD_INV_GAMMA])
            _, noise = noise_take(upd_values, upd_pos)
            ok, gj = lattice_release(key, noise, update_scale[j] * lattice[UPD_GAMMA])
            if not ok:
                fb[0], fb[1] = key, noise
                return done, last_max, False, RELEASE_FINISH, j
        code = pen_code if j < n_features else NONE
        old = w[j]
        step = 1.0 / smoothness[j]
        new = prox(code, pen_a, pen_b, old - gj * step, step)
        if new != old:
            w[j] = new
            if remote:
                return done + 1, last_max, False, MOVED, j
            if not greedy:
                work[1] += _column_length(dense, data, j, n_features, n)
            move_coordinate(
                dense, data, j, new - old, n_features, y, loss_code, loss_param, z, d, g,
                clip, row_ratio, greedy, work, refresh_work, d_old_buf, rows_buf, changed,
                n_total,
            )
            refresh_selection(j, w, g, n_features, pen_code, pen_a, pen_b, score_w, tree,
                              changed, inv_b, sel_noise, sel, lattice)
        done += 1
    return done, last_max, False, DONE, -1
