"""Numba kernels of the stochastic-gradient solvers.

The kernels only compute; the privacy calibration lives in :mod:`skdp_sparse.solvers`.
Guarantees the calibration relies on:

* every per-example derivative ``l'(y_i, z_i)`` is clipped to ``[-dclip, dclip]``
  before it multiplies the (already norm-clipped) row, so one example's gradient
  term is bounded in l2 by ``dclip * sqrt(||x_i||^2 + 1)``;
* every noisy quantity gets a fresh draw from the ``numpy.random.Generator``
  passed in (Numba advances its state in place); no draw is reused.
"""

import math

import numba
import numpy as np

from ..privacy.discrete import lattice_release, noise_take
from ..privacy.float_noise import gaussian_noise
from ._cd_kernels import clip_scalar
from ._prefetch import prefetch as _prefetch
from ._sgd_selection import (
    _ABSENT,
    _ACCUMULATE,
    _BATCH,
    _GB_KEY,
    _LIGHT,
    _M,
    _N_SEL,
    _N_TOUCHED,
    _OPS,
    _PHASE,
    _PRESENT,
    DONE,
    GROW_TOUCHED,
    NEED_GRAD_NOISE,
    ST_N_GRAD,
    ST_NEED,
    ST_T,
    _select_absent_float,
    _select_absent_safe,
    _select_light,
    _select_present,
)
from .losses import loss_derivative


@numba.njit(cache=True, inline="always")
def _clipped_derivative(code, y, z, param, dclip):
    return clip_scalar(loss_derivative(code, y, z, param), dclip)


@numba.njit(cache=True)
def csr_batch_gradient(data, indices, indptr, rows, w, b, y, code, param, dclip, grad):
    """Sum over ``rows`` of the clipped per-example gradients, into ``grad`` (zeroed here).

    Returns the sum of the clipped derivatives (the intercept's gradient sum).
    Cost O(d + nnz of the rows).
    """
    grad[:] = 0.0
    total = 0.0
    for r in range(rows.size):
        i = rows[r]
        z = b
        for k in range(indptr[i], indptr[i + 1]):
            z += data[k] * w[indices[k]]
        g = _clipped_derivative(code, y[i], z, param, dclip)
        total += g
        for k in range(indptr[i], indptr[i + 1]):
            grad[indices[k]] += g * data[k]
    return total


# ---------------------------------------------------------------------------
# Phased SGD: one-pass projected proximal SGD on a sequence of examples
# ---------------------------------------------------------------------------
@numba.njit(cache=True)
def _prox_project(theta, n_coef, step_l1, radius):
    """Soft-threshold the coefficients (not the intercept), then project on the l2 ball."""
    if step_l1 > 0:
        for j in range(n_coef):
            v = theta[j]
            if v > step_l1:
                theta[j] = v - step_l1
            elif v < -step_l1:
                theta[j] = v + step_l1
            else:
                theta[j] = 0.0
    if np.isfinite(radius):
        sq = 0.0
        for j in range(theta.size):
            sq += theta[j] * theta[j]
        if sq > radius * radius:
            s = radius / math.sqrt(sq)
            for j in range(theta.size):
                theta[j] *= s


@numba.njit(cache=True)
def single_pass_sgd(data, indices, indptr, dense, is_sparse, order, theta, n_coef, y, code,
                    param, dclip, fit_intercept, eta, l2, l1, radius):
    """Projected proximal SGD, one example of ``order`` per step; returns the average iterate.

    Each step maps ``theta`` through ``prox_{eta l1}(theta - eta (grad_i + l2 theta))``
    and the projection on the l2 ball of ``radius``: for a convex, beta-smooth
    per-example loss and ``eta <= 2 / beta`` this map is non-expansive, which
    is what bounds the sensitivity of the average in phased SGD.
    ``theta`` holds the ``n_coef`` coefficients, then the intercept if fitted.
    Cost O(d + nnz(row)) per step.
    """
    avg = np.zeros(theta.size)
    for t in range(order.size):
        i = order[t]
        z = theta[n_coef] if fit_intercept else 0.0
        if is_sparse:
            for k in range(indptr[i], indptr[i + 1]):
                z += data[k] * theta[indices[k]]
        else:
            for j in range(n_coef):
                z += dense[i, j] * theta[j]
        g = _clipped_derivative(code, y[i], z, param, dclip)
        if l2 > 0:
            shrink = 1.0 - eta * l2
            for j in range(n_coef):
                theta[j] *= shrink
        if is_sparse:
            for k in range(indptr[i], indptr[i + 1]):
                theta[indices[k]] -= eta * g * data[k]
        else:
            for j in range(n_coef):
                theta[j] -= eta * g * dense[i, j]
        if fit_intercept:
            theta[n_coef] -= eta * g
        _prox_project(theta, n_coef, eta * l1, radius)
        for j in range(theta.size):
            avg[j] += theta[j]
    if order.size > 0:
        avg /= order.size
    return avg


# ---------------------------------------------------------------------------
# Sparsity-preserving DP-SGD (DP-AdaFEST): lazy penalties, O(batch) per step
# ---------------------------------------------------------------------------
@numba.njit(cache=True, inline="always")
def _expm1_excess(x):
    """``expm1(x) - x``, without the cancellation of the difference near 0
    (its Taylor series there)."""
    if abs(x) > 0.25:
        return math.expm1(x) - x
    term = x
    total = 0.0
    for j in range(2, 22):
        term *= x / j
        total += term
    return total


@numba.njit(cache=True, inline="always")
def _log1p_excess(q, log_c):
    """``-(q + log1p(-q)) = q^2/2 + q^3/3 + ...`` for ``q < 1`` (``log_c = log(1 - q)``),
    without the cancellation of the sum near 0 (its series there)."""
    if abs(q) >= 0.25:
        return -(q + log_c)
    power = q
    total = 0.0
    for j in range(2, 42):
        power *= q
        total += power / j
    return total


@numba.njit(cache=True)
def _lazy_decay(x, k, c, a):
    """Value after ``k`` gradient-free steps ``x <- S_a(c x)``, and the sum of the k values.

    ``c = 1 - eta l2``, ``a = eta l1 >= 0``; ``S_a`` is soft-thresholding. For ``c >= 0``
    the sign of ``x`` is kept until it hits 0 (:func:`_decay_magnitude`). For ``c < 0``
    (``eta l2 > 1``, which bias-reduced SGD's step size can reach) each step flips the
    sign, and two steps are one step ``S_{a (1 - c)}(c^2 x)`` (if the first leaves 0 the
    second does too): the even iterates from ``x`` and the odd ones from ``x_1`` follow
    the form with ``c^2``.
    """
    if k <= 0 or x == 0.0:
        return x, 0.0
    if c >= 0.0:
        return _decay_magnitude(x, k, c, 1.0 - c, a)
    x1 = c * x
    x1 = math.copysign(max(abs(x1) - a, 0.0), x1)
    # 1 - c^2 as (1 - c)(1 + c): its relative precision where c^2 is near 1
    c2, q2, a2 = c * c, (1.0 - c) * (1.0 + c), a * (1.0 - c)
    even, even_sum = _decay_magnitude(x, k // 2, c2, q2, a2)
    odd, odd_sum = _decay_magnitude(x1, (k - 1) // 2, c2, q2, a2)
    return (even if k % 2 == 0 else odd), even_sum + x1 + odd_sum


@numba.njit(cache=True, inline="always")
def _decay_magnitude(x, k, c, q, a):
    """:func:`_lazy_decay` for ``c >= 0`` (``q = 1 - c``, given by the caller at its
    precision).

    With ``L = log(c)`` and ``G(i) = sum_{r<i} c^r = -expm1(i L) / q``, ``|x_i| = c^i |x|
    - a G(i)`` (``|x| - i a`` when ``c = 1``) while it is positive, and the sign of ``x``
    is kept until it hits 0. The forms with ``A = a / q`` (``c^i (|x| + A) - A``) and
    ``(1 - c^i) / (1 - c)`` cancel when ``q`` is small: at ``q = 1e-9`` the sum of the
    iterates was 5% off; these keep every term's relative precision
    (``_expm1_excess``, ``_log1p_excess``). ``L`` is ``log1p(-q)`` from ``q`` where
    ``c >= 1/2``, ``log(c)`` below, where ``1 - q`` would round away ``c``'s low bits.
    """
    if k <= 0 or x == 0.0:
        return x, 0.0
    sgn = 1.0 if x > 0 else -1.0
    ax = abs(x)
    if c == 0.0:
        return 0.0, 0.0
    if c == 1.0:
        if a == 0.0:
            return x, k * x
        # Positive while ax - i a > 0, i.e. for i < ax / a (compared as a double: the
        # ratio may pass every integer).
        bound = ax / a
        m = k if not bound <= k else math.ceil(bound) - 1
        if m < 0:
            m = 0
        total = m * ax - a * m * (m + 1) / 2.0
        value = ax - k * a if k <= m else 0.0
        return sgn * max(value, 0.0), sgn * max(total, 0.0)
    log_c = math.log1p(-q) if c >= 0.5 else math.log(c)
    # Positive while c^i ax > a G(i), i.e. for i < log1p(ax q / a) / -log(c) (always
    # when c > 1 and ax q / a <= -1: the bound is then infinite or NaN).
    m = k
    if a > 0.0:
        bound = math.log1p(ax * q / a) / -log_c
        if bound <= k:
            m = max(math.ceil(bound) - 1, 0)
    geometric_m = -math.expm1(m * log_c) / q
    # H(m) = sum_{i<=m} G(i) = (m - G(m) + q G(m)) / q, with m - G(m) in terms that do
    # not cancel: m + expm1(m L) / q = (E(m L) - m F(q)) / q.
    summed = (_expm1_excess(m * log_c) - m * _log1p_excess(q, log_c)) / (q * q) + geometric_m
    total = ax * c * geometric_m - a * summed
    value = 0.0
    if k <= m:
        value = math.exp(k * log_c) * ax + a * math.expm1(k * log_c) / q
    return sgn * max(value, 0.0), sgn * max(total, 0.0)


#: What a step of sparse DP-SGD reads of every feature of its batch: the coefficient
#: ``w``, lazily up to date, and ``slot``: 1 + the feature's position among those the
#: step touched, -1 if the step selected it while absent from the batch, 0 otherwise.
#: 16 bytes: the features' states fill cache lines with nothing else.
FEATURE_STATE = np.dtype([("w", np.float64), ("slot", np.int64)], align=True)
#: What only a non-zero coefficient needs: the step ``last`` its ``w`` is current as of,
#: and the sum ``total`` of its iterates up to that step.
FEATURE_HISTORY = np.dtype([("total", np.float64), ("last", np.int64)], align=True)


@numba.njit(cache=True, inline="always")
def _value_at(j, t, feat, hist, c, a):
    """Feature j's coefficient at step t, its stored state left as it is."""
    x = feat[j].w
    if x != 0.0:
        k = t - hist[j].last
        if k > 0:
            return _lazy_decay(x, k, c, a)[0]
    return x


@numba.njit(cache=True, inline="always")
def _catch_up(j, t, feat, hist, c, a):
    """Bring feature j to step t. A zero coefficient stays zero under the penalties, so
    it needs neither the decay nor a new stamp, and its history is not read. Only the
    steps that select j, and the end of the run, do this (``_accumulate``)."""
    x = feat[j].w
    if x != 0.0:
        k = t - hist[j].last
        if k > 0:
            v, s = _lazy_decay(x, k, c, a)
            feat[j].w = v
            hist[j].total += s
            hist[j].last = t


@numba.njit(cache=True)
def _poisson_batch(rng, n, q, batch, row_mark):
    """Poisson subsample: a Binomial(n, q) size, then that many distinct uniform rows.

    Exact in distribution (given its size, a Poisson sample is a uniform subset);
    expected O(size) work for size <= n / 2, else the complement is drawn.
    """
    m = rng.binomial(n, q)
    if m <= n // 2:
        got = 0
        while got < m:
            i = rng.integers(0, n)
            if row_mark[i] == 0:
                row_mark[i] = 1
                batch[got] = i
                got += 1
        for r in range(m):
            row_mark[batch[r]] = 0
        return m
    # Mark the n - m excluded rows, keep the others.
    excl = n - m
    got = 0
    while got < excl:
        i = rng.integers(0, n)
        if row_mark[i] == 0:
            row_mark[i] = 1
            got += 1
    got = 0
    for i in range(n):
        if row_mark[i] == 0:
            batch[got] = i
            got += 1
        else:
            row_mark[i] = 0
    return m


@numba.njit(cache=True)
def _draw_batch(st, rng, n, q, batch, row_mark, indptr, n_features):
    """The step's Poisson batch, and the room its features need (``st[ST_NEED]``)."""
    m = _poisson_batch(rng, n, q, batch, row_mark)
    nnz = 0
    for r in range(m):
        i = batch[r]
        nnz += indptr[i + 1] - indptr[i]
    st[_M] = m
    st[ST_N_GRAD] += m
    st[_OPS] = m + nnz
    st[ST_NEED] = min(n_features, nnz)
    st[_PHASE] = _ACCUMULATE


@numba.njit(cache=True)
def _accumulate(st, t, data, indices, indptr, y, code, param, dclip, batch, feat, hist, c, a,
                fit_intercept, intercept, contribution_bound, touched, counts, grads, safe,
                keys, count_keys, grad_keys, current):
    """Margins at the current point, then contribution counts and gradient sums on the
    batch's features, one row at a time (a row's features are still in cache for its
    sums).

    The features are numbered in the order the batch first touches them (``touched``,
    ``feat[j].slot`` 1 + that number) and their sums kept in compact arrays in that
    order, so the sums stay in cache whatever n_features. A margin reads a feature's
    coefficient at step ``t - 1`` from ``current`` (its value computed at the feature's
    first read in the step) and leaves the stored state as it is: the rounding of the
    closed-form decay depends on how it is split, so bringing the coefficients a batch
    reads up to date would leave in the released bits which features the private rows
    of the batch hold. The stored state changes only on the steps that select a
    feature, which are released.
    Safe path: every example's terms become integer keys rounded towards zero, ``keys[0]``
    and ``keys[1]`` being ``(1 - 2^-50) / gamma`` of the count and gradient lattices, so
    an example's key vector is no longer than its terms over gamma and the sums are exact.
    """
    n_touched = 0
    gb = 0.0
    gb_key = np.int64(0)
    b = intercept[0]
    m = st[_M]
    for r in range(m):
        i = batch[r]
        if r + 1 < m:
            # The next row's features are fetched while this row is computed: at large
            # n_features each is a cache miss, and the misses then overlap.
            nxt = batch[r + 1]
            for k in range(indptr[nxt], indptr[nxt + 1]):
                _prefetch(feat, indices[k])
        # The margin at the current point, the row's features listed at their first read.
        z = b if fit_intercept else 0.0
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            pos = feat[j].slot - 1
            if pos < 0:
                pos = n_touched
                touched[pos] = j
                n_touched += 1
                feat[j].slot = n_touched
                current[pos] = _value_at(j, t - 1, feat, hist, c, a)
                if safe:
                    count_keys[pos] = 0
                    grad_keys[pos] = 0
                else:
                    counts[pos] = 0.0
                    grads[pos] = 0.0
            z += data[k] * current[pos]
        g = _clipped_derivative(code, y[i], z, param, dclip)
        if safe:
            gb_key += np.int64(g * keys[1])
        else:
            gb += g
        nnz = indptr[i + 1] - indptr[i]
        if nnz == 0:
            continue
        weight = min(1.0, contribution_bound / math.sqrt(nnz))
        count_key = np.int64(weight * keys[0])
        for k in range(indptr[i], indptr[i + 1]):
            pos = feat[indices[k]].slot - 1
            if safe:
                count_keys[pos] += count_key
                grad_keys[pos] += np.int64(g * data[k] * keys[1])
            else:
                counts[pos] += weight
                grads[pos] += g * data[k]
    intercept[2] = gb
    st[_GB_KEY] = gb_key
    st[_N_TOUCHED] = n_touched
    # Each entry is read twice: for its margin and for its sums.
    st[_OPS] += st[_OPS] - st[_M]
    st[_PHASE] = _PRESENT


@numba.njit(cache=True, inline="always")
def _released(key_sum, z, unit):
    """``unit * fl(key_sum + z)``: a function of the noisy integer alone."""
    ok, v = lattice_release(key_sum, z, unit)
    if not ok:
        # Unreachable while the plan keeps key sums below 2^52 (the integer sum is then
        # formed exactly); kept so a broken plan fails loudly instead of releasing.
        raise OverflowError("a key sum exceeded the lattice's range")
    return v


@numba.njit(cache=True)
def _update(st, t, rng, feat, hist, c, a, eta, denom, fit_intercept, intercept, grad_sigma,
            touched, selected, counts, grads, safe, keys, count_keys, grad_keys, gnoise, gpos,
            selected_trace, ops):
    """Noisy proximal step on the selected coordinates and the intercept; end of step t."""
    n_sel = st[_N_SEL]
    if safe and gnoise.size - gpos[0] < n_sel + 1:
        st[ST_NEED] = n_sel + 1
        return NEED_GRAD_NOISE
    for r in range(n_sel):
        j = selected[r]
        _catch_up(j, t - 1, feat, hist, c, a)
        # A selected feature absent from the batch (slot -1) has a zero sum.
        s = feat[j].slot - 1
        if safe:
            _, z = noise_take(gnoise, gpos)
            gj = _released(grad_keys[s] if s >= 0 else 0, z, keys[2]) / denom
        else:
            gj = ((grads[s] if s >= 0 else 0.0) + gaussian_noise(rng, grad_sigma)) / denom
        v = c * feat[j].w - eta * gj
        if v > a:
            v -= a
        elif v < -a:
            v += a
        else:
            v = 0.0
        feat[j].w = v
        hist[j].total += v
        hist[j].last = t
    st[_OPS] += n_sel
    b = intercept[0]
    if fit_intercept:
        if safe:
            _, z = noise_take(gnoise, gpos)
            b -= eta * _released(st[_GB_KEY], z, keys[2]) / denom
        else:
            b -= eta * (intercept[2] + gaussian_noise(rng, grad_sigma)) / denom
    intercept[0] = b
    intercept[1] += b
    row = t - 1
    if row < selected_trace.shape[0]:
        selected_trace[row, 0] = n_sel
        for r in range(min(n_sel, selected_trace.shape[1] - 1)):
            selected_trace[row, r + 1] = selected[r]
    # Unmark the features this step touched or selected (the compact sums are reset
    # when the next step touches their slot).
    for r in range(st[_N_TOUCHED]):
        feat[touched[r]].slot = 0
    for r in range(n_sel):
        feat[selected[r]].slot = 0
    if row < ops.size:
        ops[row] = st[_OPS]
    st[ST_T] = t
    st[_PHASE] = _BATCH
    return DONE


@numba.njit(cache=True)
def sparse_sgd_steps(data, indices, indptr, y, code, param, dclip, fit_intercept, q, t_end,
                     eta, l2, l1, count_sigma, grad_sigma, threshold, p_zero_pass,
                     contribution_bound, feat, hist, intercept, counts, grads,
                     batch, row_mark, touched, selected, st, rng, selected_trace, ops,
                     safe, lat, keys, count_keys, grad_keys, cnoise, cpos, gnoise, gpos, proc,
                     lproc, next64, state, fb, current):
    """DP-AdaFEST from step ``st[ST_T] + 1`` to ``t_end``, in place on the state arrays.

    Returns ``DONE``, or a request (``GROW_TOUCHED``/``GROW_SELECTED``: a larger
    ``touched``/``selected``; ``NEED_COUNT_NOISE``/``NEED_GRAD_NOISE``: at least
    ``st[ST_NEED]`` values in a noise buffer; ``HANDOFF``: an exceedance step to finish
    in Python) made before anything it cannot complete is drawn; the caller serves it
    and calls again with the same arguments.

    State: ``feat`` and ``hist``, one :data:`FEATURE_STATE` and one
    :data:`FEATURE_HISTORY` record per feature (zero at the start; ``slot`` is zero again
    on return); ``intercept = [b, sum of b iterates, scratch]``,
    ``st`` (int64, ``STATE_SLOTS``, zero at the start); ``counts``/``grads`` (float path)
    or ``count_keys``/``grad_keys`` (safe path), and ``current`` (the coefficients the
    margins read, :func:`_accumulate`), are compact scratch at least as long as
    ``touched``; ``batch``, ``row_mark`` (zero): scratch of length n_samples. ``feat`` and
    ``hist`` are the only arrays of length n_features: a step reads or writes one record
    of ``feat`` per entry of its batch and per selected feature, one of ``hist`` per
    non-zero coefficient among them, and scans neither.

    Per step, with a Poisson batch B of rate q:

    1. noisy counts: each example's indicator of its non-zero features is scaled to l2
       norm <= ``contribution_bound`` and summed; noise is added to every one of the
       n_features counts, and the features whose noisy count exceeds ``threshold`` are
       selected. The ``n_features - k`` features absent from the batch (count exactly 0)
       are selected exactly in distribution without touching them one by one.
       Float path (``safe`` False): Gaussian noise ``count_sigma``; Binomial(n_features -
       k, ``p_zero_pass``) absent features pass and, given that number, the passing set
       is a uniform subset. Safe path: integer count keys (see :func:`_accumulate`),
       discrete Gaussian noise from the buffer ``cnoise``/``cpos`` and the threshold
       ``lat[1]`` in lattice units; the present features with small keys by
       :func:`_select_light` (process ``lproc``), the absent ones by
       :func:`_select_absent_safe` (process ``proc``);
    2. noisy gradient: the clipped per-example gradients are summed and noise is added on
       the selected coordinates and the intercept only (the noise the other coordinates
       would get is never looked at, so the release is a post-processing of the
       full-noise one). Float: Gaussian ``grad_sigma``; safe: the exact key sums plus
       discrete Gaussian noise from ``gnoise``/``gpos``, released as ``keys[2] * fl(sum +
       z)`` (``keys[2]`` the lattice step);
    3. update ``w_S <- prox(w_S - eta (g_S / (q n) + l2 w_S))``; the other coordinates
       decay under the penalty lazily, in closed form on next access.

    ``ops[t - 1]`` counts the elementary operations of step t (row entries, selection
    candidates, sampling draws); none is proportional to n_features unless the threshold
    selects more than half of the absent features on average. ``selected_trace[t - 1]``
    receives the number of selected coordinates and then their indices, as far as it
    has room. ``st[ST_N_GRAD]`` counts the per-example gradients computed.
    """
    n = indptr.size - 1
    n_features = feat.shape[0]
    c = 1.0 - eta * l2
    a = eta * l1
    denom = q * n
    while st[ST_T] < t_end:
        t = st[ST_T] + 1
        if st[_PHASE] == _BATCH:
            _draw_batch(st, rng, n, q, batch, row_mark, indptr, n_features)
        if st[_PHASE] == _ACCUMULATE:
            sums = min(count_keys.size if safe else counts.size, current.size)
            if touched.size < st[ST_NEED] or sums < st[ST_NEED]:
                return GROW_TOUCHED
            _accumulate(st, t, data, indices, indptr, y, code, param, dclip, batch, feat,
                        hist, c, a, fit_intercept, intercept, contribution_bound, touched, counts,
                        grads, safe, keys, count_keys, grad_keys, current)
        if st[_PHASE] == _PRESENT:
            request = _select_present(st, rng, touched, selected, counts, count_sigma,
                                      threshold, safe, lat, count_keys, cnoise, cpos)
            if request != DONE:
                return request
        if st[_PHASE] == _LIGHT:
            request = _select_light(st, touched, selected, lat, count_keys, lproc, next64,
                                    state, fb)
            if request != DONE:
                return request
        if st[_PHASE] == _ABSENT:
            if safe:
                request = _select_absent_safe(st, n_features, feat, selected, lat,
                                              cnoise, cpos, proc, next64, state, fb)
            else:
                request = _select_absent_float(st, rng, n_features, p_zero_pass, feat,
                                               selected)
            if request != DONE:
                return request
        request = _update(st, t, rng, feat, hist, c, a, eta, denom, fit_intercept,
                          intercept, grad_sigma, touched, selected, counts, grads,
                          safe, keys, count_keys, grad_keys, gnoise, gpos, selected_trace,
                          ops)
        if request != DONE:
            return request
    return DONE


@numba.njit(cache=True)
def lazy_finish(t, feat, hist, eta, l2, l1):
    """Bring every feature to step ``t`` (one O(n_features) pass at the end of a fit)."""
    c = 1.0 - eta * l2
    a = eta * l1
    for j in range(feat.shape[0]):
        _catch_up(j, t, feat, hist, c, a)
