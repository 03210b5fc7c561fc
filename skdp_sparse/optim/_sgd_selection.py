"""Which coordinates a step of sparsity-preserving DP-SGD (DP-AdaFEST) updates.

The selection phases of :func:`~skdp_sparse.optim._sgd_kernels.sparse_sgd_steps`: a
feature is selected when its noisy count exceeds the threshold. The features present in
the batch have a count; the absent ones (count exactly 0) are selected in distribution
without being visited one by one. Float path: Gaussian noise, a Binomial number of
absent features and a uniform subset. Floating-point-safe path: integer count keys,
exact discrete Gaussian noise (:mod:`skdp_sparse.privacy.discrete`) and exceedance
processes. Each phase either completes or returns a request, before drawing anything
it could not finish, with its progress in the state record ``st``.
"""

import numba

from ..privacy.discrete import next_exceedance, noise_take
from ..privacy.float_noise import gaussian_noise

# Requests of sparse_sgd_steps: it stops before any draw it could not finish, the caller
# serves the request (``st[ST_NEED]`` says how much) and calls it again with the same state.
DONE, GROW_TOUCHED, GROW_SELECTED, NEED_COUNT_NOISE, NEED_GRAD_NOISE, HANDOFF = range(6)
# How the floating-point-safe path selects features (``lat[0]``): noisy counts against an
# integer threshold ``u >= 0``, the absent features by an exceedance process, or
# ``u < 0``, every absent feature drawing its noise (more than half of them pass); every
# feature (threshold -inf) or none (+inf), without noise.
SELECT_PROCESS, SELECT_DRAW, SELECT_ALL, SELECT_NONE = range(4)
# The int64 state record ``st`` of a run: its step, the phase of that step and what the
# phase has computed so far. A ``HANDOFF`` names the process (``ST_WHICH``: 0 the absent
# features', 1 the present ones') and its range ``ST_M``; the step Python finishes is
# resumed from ``ST_PENDING`` (1), ``ST_PJ`` and ``ST_PZ``.
(ST_T, _PHASE, _POS, _M, _N_TOUCHED, _N_SEL, _EXTRA, _OPS, _GB_KEY, ST_NEED, ST_PENDING,
 ST_PJ, ST_PZ, ST_N_GRAD, ST_WHICH, ST_M) = range(16)
STATE_SLOTS = 16
_BATCH, _ACCUMULATE, _PRESENT, _LIGHT, _ABSENT, _UPDATE = range(6)


@numba.njit(cache=True)
def _select_present(st, rng, touched, selected, counts, count_sigma, threshold, safe, lat,
                    count_keys, cnoise, cpos):
    """Selection among the features present in the batch (noisy count > threshold).

    ``counts``/``count_keys`` are compact: entry ``r`` belongs to feature ``touched[r]``.

    Safe path with a process for the present features (``lat[4] >= 0``): only the
    features whose count key exceeds ``lat[4]`` draw their noise here, the others are
    left to :func:`_select_light`.
    """
    n_touched = st[_N_TOUCHED]
    if selected.size < n_touched:
        st[ST_NEED] = n_touched
        return GROW_SELECTED
    mode, u, light = lat[0], lat[1], lat[4]
    noisy = mode == SELECT_PROCESS or mode == SELECT_DRAW
    if safe and noisy:
        n_draws = 0
        for r in range(n_touched):
            n_draws += count_keys[r] > light
        if cnoise.size - cpos[0] < n_draws:
            st[ST_NEED] = n_draws
            return NEED_COUNT_NOISE
    n_sel = 0
    for r in range(n_touched):
        j = touched[r]
        if not safe:
            keep = counts[r] + gaussian_noise(rng, count_sigma) > threshold
        elif noisy:
            if count_keys[r] <= light:
                continue
            _, z = noise_take(cnoise, cpos)
            # key + z > u, without overflow: keys and |u| stay below 2^62.
            keep = z > u - count_keys[r]
        else:
            keep = mode == SELECT_ALL
        if keep:
            selected[n_sel] = j
            n_sel += 1
    st[_N_SEL] = n_sel
    st[_OPS] += n_touched
    st[_EXTRA] = -1
    st[_POS] = 0
    st[_PHASE] = _LIGHT if safe and noisy and light >= 0 else _ABSENT
    return DONE


@numba.njit(cache=True, inline="always")
def _next_hit(st, proc, pos, m, with_value, next64, state, fb, which):
    """The next step of an exceedance process, or the one Python finished; ``j < 0`` after
    a handoff (recorded in ``st``)."""
    if st[ST_PENDING]:
        st[ST_PENDING] = 0
        return st[ST_PJ], st[ST_PZ]
    j, z = next_exceedance(proc, pos, m, with_value, next64, state, fb)
    if j < 0:
        st[ST_WHICH], st[ST_M] = which, m
    return j, z


@numba.njit(cache=True)
def _select_light(st, touched, selected, lat, count_keys, lproc, next64, state, fb):
    """The present features whose count key is at most ``A = lat[4]``: the exceedance
    process of ``Z > u - A`` over their positions in ``touched``, each candidate kept when
    its value given the exceedance is above ``u - key``. A feature passes with probability
    ``P(Z > u - key)``, as with its own draw, at a cost of about ``k P(Z > u - A)``."""
    u, light = lat[1], lat[4]
    n_touched = st[_N_TOUCHED]
    n_sel = st[_N_SEL]
    pos = st[_POS]
    while True:
        r, z = _next_hit(st, lproc, pos, n_touched, True, next64, state, fb, 1)
        if r < 0:
            st[_POS], st[_N_SEL] = pos, n_sel
            return HANDOFF
        st[_OPS] += 1
        if r >= n_touched:
            break
        if count_keys[r] <= light and z > u - count_keys[r]:
            selected[n_sel] = touched[r]
            n_sel += 1
        pos = r + 1
    st[_N_SEL] = n_sel
    st[_POS] = 0
    st[_PHASE] = _ABSENT
    return DONE


@numba.njit(cache=True)
def _select_absent_float(st, rng, n_features, p_zero_pass, feat, selected):
    """The features absent from the batch: Binomial(d - k, p0) of them, a uniform subset
    (each marked ``feat[j].slot = -1``)."""
    n_sel = st[_N_SEL]
    if st[_EXTRA] < 0:
        n_absent = n_features - st[_N_TOUCHED]
        st[_EXTRA] = rng.binomial(n_absent, p_zero_pass) if n_absent > 0 else 0
    extra = st[_EXTRA]
    if selected.size < n_sel + extra:
        st[ST_NEED] = n_sel + extra
        return GROW_SELECTED
    added = 0
    ops = 0
    while added < extra:
        j = rng.integers(0, n_features)
        ops += 1
        if feat[j].slot == 0:
            feat[j].slot = -1
            selected[n_sel] = j
            n_sel += 1
            added += 1
    st[_N_SEL] = n_sel
    st[_OPS] += ops
    st[_PHASE] = _UPDATE
    return DONE


@numba.njit(cache=True)
def _select_absent_safe(st, n_features, feat, selected, lat, cnoise, cpos, proc, next64,
                        state, fb):
    """The features absent from the batch (exact count 0): each passes independently with
    probability ``P(Z > u)``. ``u >= 0``: the exceedance process of ``Z > u0`` over all
    ``d`` positions, ``u0 = lat[2] <= u``, keeping the absent positions (and, when ``u0 <
    u``, those whose value given the exceedance is above ``u``); work about ``d P(Z >
    u0)`` candidates. ``u < 0``: one draw per absent feature."""
    mode, u, with_value = lat[0], lat[1], lat[3] != 0
    n_sel = st[_N_SEL]
    pos = st[_POS]
    if mode == SELECT_PROCESS:
        while True:
            if n_sel == selected.size:
                st[_POS], st[_N_SEL], st[ST_NEED] = pos, n_sel, n_sel + 1
                return GROW_SELECTED
            j, z = _next_hit(st, proc, pos, n_features, with_value, next64, state, fb, 0)
            if j < 0:
                st[_POS], st[_N_SEL] = pos, n_sel
                return HANDOFF
            st[_OPS] += 1
            if j >= n_features:
                break
            if feat[j].slot == 0 and (not with_value or z > u):
                feat[j].slot = -1
                selected[n_sel] = j
                n_sel += 1
            pos = j + 1
    elif mode != SELECT_NONE:
        for j in range(pos, n_features):
            if feat[j].slot != 0:
                continue
            if n_sel == selected.size:
                st[_POS], st[_N_SEL], st[ST_NEED] = j, n_sel, n_sel + 1
                return GROW_SELECTED
            if mode == SELECT_DRAW:
                ok, z = noise_take(cnoise, cpos)
                if not ok:
                    st[_POS], st[_N_SEL] = j, n_sel
                    st[ST_NEED] = min(n_features - j, 1 << 20)
                    return NEED_COUNT_NOISE
                if z <= u:
                    continue
            feat[j].slot = -1
            selected[n_sel] = j
            n_sel += 1
        st[_OPS] += n_features - pos
    st[_N_SEL] = n_sel
    st[_PHASE] = _UPDATE
    return DONE
