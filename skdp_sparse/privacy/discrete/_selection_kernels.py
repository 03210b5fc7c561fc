"""Numba kernels of the exact selections: exponential mechanism and report-noisy-max.

Callable from other ``@numba.njit`` kernels. A selection is described by one tuple of
int64 arrays, ``sel = (keys, tree, meta, params, weights, thresholds)`` (built by
:class:`~skdp_sparse.privacy.discrete._selection.ExponentialSelector`):

* ``keys[j]``: the lattice score ``k_j`` of coordinate ``j`` (``|k_j| < 2^61``);
* ``tree``: empty for the one-pass sampler, else the integer sum tree (size ``2 p``,
  leaf ``j`` at ``p + j``, node ``v`` the sum of ``2v`` and ``2v + 1``);
* ``meta = [B, rebuild]``: the tree's reference bucket and a pending-rebuild flag;
* ``params = [t, wshift, S, M, wbits, H, drop, tblock]`` and the tables ``weights``
  (``E``) and ``thresholds`` (``T``) of :func:`_selection._selection_tables`.

Law: ``P(j) = exp(k_j / t) / sum_i exp(k_i / t)``. Proof: ``doc/proofs/discrete.rst``
("Exact exponential mechanism").
"""

import numba
import numpy as np

from ._kernels import _bernoulli_exp_rational, _uniform_below, _uniform_int

_FB_SELECT = 10  # acceptance threshold tie: [kind, j, m, word, x numerator]

# Layout of ``params``.
_T, _WSHIFT, _S, _M, _WBITS, _H, _DROP, _TBLOCK = range(8)
_NOISE_CAP = np.int64(1) << 61


@numba.njit(cache=True)
def _accept(j, key, m, kref, params, thresholds, next64, state, fb):
    """Accept proposal ``j`` (bucket offset ``m``, capped at ``M``) with probability
    ``c_m exp(-x / t)``, ``x = kref - key - m 2^wshift >= 0``: 1, 0, or -1 after a
    threshold tie (state in ``fb``)."""
    x = kref - key - (m << params[_WSHIFT])
    if m > 0:
        verdict, w = _uniform_below(next64, state, thresholds[m], params[_WBITS])
        if verdict == 0:
            return 0
        if verdict < 0:
            fb[0], fb[1], fb[2], fb[3], fb[4] = _FB_SELECT, j, m, w, x
            return -1
    ok, _, _ = _bernoulli_exp_rational(next64, state, np.int64(0), np.int64(0), x,
                                       params[_T], params[_TBLOCK])
    return 1 if ok else 0


@numba.njit(cache=True)
def _offset(key, top_bucket, params):
    return min(top_bucket - (key >> params[_WSHIFT]), params[_M])


@numba.njit(cache=True)
def _top_bucket(keys, params):
    kmax = keys[0]
    for j in range(1, keys.size):
        if keys[j] > kmax:
            kmax = keys[j]
    return kmax >> params[_WSHIFT]


@numba.njit(cache=True)
def _select_scan(keys, params, weights, thresholds, next64, state, fb):
    """One pass over the keys to find the top bucket and the total proposal weight,
    then proposals found by a partial pass until one is accepted."""
    p = keys.size
    top = _top_bucket(keys, params)
    kref = ((top + 1) << params[_WSHIFT]) - 1
    total = np.int64(0)
    for j in range(p):
        total += weights[_offset(keys[j], top, params)]
    while True:
        u = _uniform_int(next64, state, total)
        acc = np.int64(0)
        j = 0
        m = 0
        for j in range(p):
            m = _offset(keys[j], top, params)
            acc += weights[m]
            if u < acc:
                break
        r = _accept(j, keys[j], m, kref, params, thresholds, next64, state, fb)
        if r != 0:
            return j if r > 0 else -1


@numba.njit(cache=True)
def tree_rebuild(keys, tree, meta, params, weights):
    """Reference bucket ``B = top bucket + H`` and every leaf and node from the keys."""
    p = keys.size
    top = _top_bucket(keys, params) + params[_H]
    meta[0] = top
    meta[1] = 0
    for j in range(p):
        tree[p + j] = weights[_offset(keys[j], top, params)]
    for v in range(p - 1, 0, -1):
        tree[v] = tree[2 * v] + tree[2 * v + 1]


@numba.njit(cache=True)
def needs_rebuild(tree, meta, params, weights):
    """Whether the tree's reference bucket is stale: flagged, or the total proposal
    weight above the floor every leaf keeps (``E_M`` each, whatever its key) has fallen
    below ``2^(S - H - drop)``. Without the floor's share, from ``p >= 2^(S - H - drop)``
    (``2^21`` keys) the leaves at the floor alone kept the total above that, keys
    that had all fallen far below the reference were never rebuilt, and nearly every
    proposal was rejected."""
    p = tree.size // 2
    return meta[1] != 0 or tree[1] - p * weights[params[_M]] < params[_DROP]


@numba.njit(cache=True)
def _select_tree(keys, tree, meta, params, weights, thresholds, next64, state, fb):
    """Descent of the integer sum tree (O(log p)) until a proposal is accepted."""
    p = keys.size
    if needs_rebuild(tree, meta, params, weights):
        tree_rebuild(keys, tree, meta, params, weights)
    top = meta[0]
    kref = ((top + 1) << params[_WSHIFT]) - 1
    while True:
        u = _uniform_int(next64, state, tree[1])
        v = 1
        while v < p:
            left = tree[2 * v]
            if u < left:
                v = 2 * v
            else:
                u -= left
                v = 2 * v + 1
        j = v - p
        m = _offset(keys[j], top, params)
        r = _accept(j, keys[j], m, kref, params, thresholds, next64, state, fb)
        if r != 0:
            return j if r > 0 else -1


@numba.njit(cache=True)
def em_select(sel, next64, state, fb):
    """Index drawn with probability ``exp(k_j / t) / sum_i exp(k_i / t)``, or -1.

    -1 means a uniform word tied with a threshold (probability about ``2^-wbits`` per
    proposal): ``fb`` holds the state; the caller returns to Python before changing
    anything, :meth:`ExponentialSelector.finish` decides it exactly and gives the index
    or -1 (proposal rejected: select again), and the caller resumes with that.
    """
    keys, tree, meta, params, weights, thresholds = sel
    if tree.size == 0:
        return _select_scan(keys, params, weights, thresholds, next64, state, fb)
    return _select_tree(keys, tree, meta, params, weights, thresholds, next64, state, fb)


@numba.njit(cache=True)
def em_set(sel, j, key):
    """Set ``k_j = key``: O(1) for the one-pass sampler, O(log p) in the tree (a key
    above the reference bucket only flags a rebuild, done by the next selection)."""
    keys, tree, meta, params, weights, _ = sel
    keys[j] = key
    if tree.size == 0 or meta[1] != 0:
        return
    b = key >> params[_WSHIFT]
    if b > meta[0]:
        meta[1] = 1
        return
    p = keys.size
    v = p + j
    delta = weights[min(meta[0] - b, params[_M])] - tree[v]
    if delta != 0:
        while v >= 1:
            tree[v] += delta
            v >>= 1


@numba.njit(cache=True)
def rnm_select(keys, noise, pos):
    """Report-noisy-max: ``argmax_j keys[j] + noise[pos + j]``, ties to the lowest index.

    Consumes ``p`` draws of the buffer ``noise`` from ``pos[0]``. Returns -1 (nothing
    consumed) if fewer than ``p`` are left: refill and call again; -2 (nothing
    consumed) if a draw has ``|z| >= 2^61``, where the sum could leave int64: then
    :func:`_selection.finish_report_noisy_max` compares in Python integers.
    """
    p = keys.size
    i = pos[0]
    if i + p > noise.size:
        return -1
    best = np.int64(0)
    best_j = 0
    for j in range(p):
        z = noise[i + j]
        if z >= _NOISE_CAP or z <= -_NOISE_CAP:
            return -2
        v = keys[j] + z
        if j == 0 or v > best:
            best = v
            best_j = j
    pos[0] = i + p
    return best_j
