"""Discrete Gaussian noise of a lattice release revealed down a ladder of public levels.

For integer keys ``a_j`` (``j < d``) and i.i.d. discrete Gaussian noise ``Z_j`` (the law of
:func:`release_gaussian` on the same lattice), :func:`ladder_exceedances` reveals, without
drawing all d values, given levels ``u_0 > ... > u_{L-1}`` and envelope bounds ``0 <= B <=
M <= u_{L-1}``:

* ``Z_j`` itself where ``|a_j| > M`` ("direct" positions), drawn directly;
* where ``B < |a_j| <= M`` ("middle" keys, bound ``B_j = M``), the positions with ``|Z_j| >
  u_{L-1} - M`` and their ``Z_j``, at once: an exceedance process over their list chooses
  the positions, a block table (:mod:`._blocks`) the values;
* where ``|a_j| <= B`` ("small" keys, bound ``B_j = B``), level by level for ``i = 0, 1,
  ...``, those with ``v_i < |Z_j| <= v_{i-1}`` (``v_i = u_i - B``, ``v_{-1} = inf``) and
  their ``Z_j``: an exceedance process of the band given ``|Z_j| <= v_{i-1}``
  (:func:`plan_exceedance`) over all d positions (its marks elsewhere ignored) chooses
  the positions, a block table the values, from the band's law.

Off the revealed set every ``|a_j + Z_j| <= B_j + (u_i - B_j) = u_i`` after level i:
candidates are chosen on ``|Z_j|`` alone (an envelope that does not depend on ``a_j`` beyond
its class), and the exact test of ``|a_j + Z_j|`` is left to the caller, which has the
values. The levels go on until the caller's stopping rule, ``sum_U (|a_j + Z_j| - u_i)_+ >=
radius``, holds or they run out. :meth:`LadderDraw.complete` then draws, if asked, the
noise of every position not revealed from its law given what was revealed: ``|Z_j| <= v_i``
at the level reached (small keys), ``|Z_j| <= u_{L-1} - M`` (middle keys). Chaining the
conditional laws gives every ``Z_j`` its discrete Gaussian law, independently (the
argument is in ``doc/proofs/mean.rst``). The classes and bounds only set the cost: a
middle key drawn directly costs a draw, in its class a draw with probability ``P(|Z| >
u_{L-1} - M)`` only (about a fifth, for ``M`` = 0.3 and ``u_{L-1}`` = 1.56 noise scales).
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from ...utils.random import check_generator
from ..gaussian_ladder import is_seen, mark_seen, scan_position, scan_size
from ._blocks import GUIDE_BITS, block_attempt, block_fill, block_scalars, plan_blocks
from ._exact import _inversion_guide, _package
from ._kernels import HANDOFF_SLOTS, _geometric, _uniform_below
from ._process import _FB_GAP, _FB_THIN, plan_exceedance
from ._process import _G_BLOCK as _P_BLOCK
from ._process import _G_GSHIFT as _P_GSHIFT
from ._process import _G_LOW as _P_LOW
from ._process import _G_P as _P_P
from ._process import _G_SHIFT as _P_SHIFT
from ._process import _THIN as _P_THIN
from ._process import _WB as _P_WB
from ._samplers import _KernelSource

# Keys at or beyond this go to the unsampled release, where a key and its noise may need
# big integers (never for a statistic below 2^22 noise scales).
MAX_KEY = 2.0**52


# --------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------
@numba.njit(cache=True)
def _key(value, inv_gamma):
    """The lattice key ``rint(value / gamma)`` (``inv_gamma`` a power of two: exact)."""
    return np.rint(value * inv_gamma)


@numba.njit(cache=True)
def _big_positions(value, inv_gamma, bound, middle, idx, y, mid_pos, mid_key, seen, support):
    """Split the positions by their keys ``a_j``: ``(count, m, top)``.

    The j with ``|a_j| > middle`` go to ``idx[:count]`` with ``a_j`` in ``y[:count]``, the
    j with ``bound < |a_j| <= middle`` to ``mid_pos[:m]`` with ``a_j`` in ``mid_key[:m]``,
    both increasing; all of them are marked in ``seen``. ``top`` is the largest ``|a_j|``
    (infinite or NaN if some key is not finite). Only the positions of ``support`` are
    read if given (``value`` is 0 elsewhere).
    """
    k = 0
    top = 0.0
    for r in range(scan_size(value, support)):
        j = scan_position(support, r)
        a = _key(value[j], inv_gamma)
        top = max(top, abs(a)) if a == a else a
        # branch-free: the test is unpredictable on a sparse mean
        idx[k] = j
        y[k] = a
        k += abs(a) > bound
    seen[:] = 0
    count = 0
    m = 0
    for r in range(k):
        j = idx[r]
        a = y[r]
        mark_seen(seen, j)
        if abs(a) > middle:
            idx[count] = j
            y[count] = a
            count += 1
        else:
            mid_pos[m] = j
            mid_key[m] = a
            m += 1
    return count, m, top


#: A band's sum is kept exactly in two int64 parts, ``|v| >> _SPLIT_BITS`` and the bits
#: below: a double sum of the keys (each below 2^53) rounds past 2^53 in the order the
#: keys were revealed, which follows the private keys (the direct positions come first),
#: so the stopping rule could depend on more than the noisy keys. The parts stay below
#: 2^63 for up to 2^36 keys.
_SPLIT_BITS = 26
_LOW_MASK = (1 << _SPLIT_BITS) - 1


@numba.njit(cache=True, inline="always")
def _add_to_band(v, levels, band_sum, band_count):
    """``|v|`` (an integer below 2^53) added to the exact sum and the count of the band of
    levels it falls in (band h: ``levels[h] < |v| <= levels[h - 1]``; nothing below the
    last level, which never counts). ``band_sum[2 h]`` and ``band_sum[2 h + 1]`` hold the
    sum's high and low parts (``_SPLIT_BITS``)."""
    v = abs(v)
    if v > levels[levels.size - 1]:
        h = 0
        while v <= levels[h]:
            h += 1
        u = np.int64(v)
        band_sum[2 * h] += u >> _SPLIT_BITS
        band_sum[2 * h + 1] += u & _LOW_MASK
        band_count[h] += 1


@numba.njit(cache=True)
def _add_range(y, start, stop, levels, band_sum, band_count):
    """:func:`_add_to_band` of ``y[start:stop]``."""
    for r in range(start, stop):
        _add_to_band(y[r], levels, band_sum, band_count)


@numba.njit(cache=True)
def _record_range(value, inv_gamma, idx, z, y, start, stop, levels, band_sum, band_count):
    """``y[r] = a_j + z[r]`` (``j = idx[r]``; exact: both are integers below 2^53) for the
    entries ``start .. stop - 1``, added to their bands (:func:`_add_to_band`). The keys
    are gathered in a loop of their own: independent loads, which overlap."""
    for r in range(start, stop):
        y[r] = _key(value[idx[r]], inv_gamma) + np.float64(z[r])
    _add_range(y, start, stop, levels, band_sum, band_count)


@numba.njit(cache=True)
def _append_middle(mid_pos, mid_key, r, mz, n, idx, z, y, count, levels, band_sum,
                   band_count):
    """Append the ``n`` middle keys revealed (list indices ``r``, noise ``mz``) to the
    revealed entries from ``count``, with ``y = a + z``, added to their bands: the new
    count."""
    for q in range(n):
        idx[count + q] = mid_pos[r[q]]
        z[count + q] = mz[q]
        y[count + q] = mid_key[r[q]] + np.float64(mz[q])
    _add_range(y, count, count + n, levels, band_sum, band_count)
    return count + n


@numba.njit(cache=True)
def _direct_values(bparams, btable, bguide, z, y, start, stop, levels, band_sum, band_count,
                   next64, state, fb):
    """The noise ``z`` of entries ``start .. stop - 1`` from the table, added to their keys
    ``y`` and to their bands: ``stop``, or the index of a draw handed off. (The tables come
    as separate arrays: a tuple argument costs Numba's dispatch tens of microseconds.)"""
    r = block_fill((bparams, btable, bguide), z, start, stop, next64, state, fb)
    for q in range(start, r):
        y[q] += np.float64(z[q])
        _add_to_band(y[q], levels, band_sum, band_count)
    return r


@numba.njit(cache=True)
def _band(params, gtab, gguide, bparams, btable, bguide, d, pos, pending, seen, idx, val,
          count, next64, state, fb):
    """One band of the ladder over positions ``0 .. d-1`` from ``pos``: ``(pos, count,
    status)``.

    Each position the process selects that is not yet in ``seen`` gets a value from the
    band's block table and is appended to ``idx``, ``val`` (and marked). ``pending >= 0``:
    a position the process already selected (after a handoff), handled first. Status 0:
    done; 1: the process handed off (``pos`` where it stood); 2: the value of position
    ``pos`` handed off.

    The process is :func:`next_exceedance` without values (its candidates by geometric
    gaps, each kept with the thinning probability), with the same handoffs, so that
    :meth:`ExceedancePlan.finish` completes them; its parameters and the table's are
    read once, outside the loop (``params``, ``gtab``, ``gguide``: the process's arrays;
    ``bparams``, ``btable``, ``bguide``: the block table's). Anything more in this loop,
    the keys' gather for one, measured it twice as slow.
    """
    wb, g_gshift, g_low = params[_P_WB], params[_P_GSHIFT], params[_P_LOW]
    g_p, g_shift, g_block, thin = params[_P_P], params[_P_SHIFT], params[_P_BLOCK], params[_P_THIN]
    scalars = block_scalars((bparams, btable, bguide))
    while True:
        if pending >= 0:
            j = pending
            pending = -1
        else:
            tie, g, lo, w, _, _ = _geometric(next64, state, gtab, gguide, wb, g_gshift, g_low,
                                             g_p, g_block)
            if tie:
                fb[0], fb[1], fb[2], fb[3] = _FB_GAP, pos, g, w
                return pos, count, 1
            j = pos + (((g << g_low) + lo) >> g_shift)
            if j >= d:
                return d, count, 0
            verdict, w = _uniform_below(next64, state, thin, wb)
            if verdict < 0:
                fb[0], fb[1], fb[2] = _FB_THIN, j, w
                return pos, count, 1
            if verdict == 0:
                pos = j + 1
                continue
        if not is_seen(seen, j):
            status = 0
            while status == 0:
                status, zj = block_attempt(scalars, next64, state, fb)
            if status == 2:
                return j, count, 2
            idx[count] = j
            val[count] = zj
            mark_seen(seen, j)
            count += 1
        pos = j + 1


# --------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------
class _Band:
    """A band's exceedance process and block table, and the arrays :func:`_band` reads of
    the process: its params (with the guide's shift), its gap table and a guide of
    ``2^GUIDE_BITS`` entries (the same draws as the process's own guide, in fewer cache
    lines)."""

    def __init__(self, proc, blocks):
        self.proc, self.blocks = proc, blocks
        params, gtab = proc.arrays[0].copy(), proc.arrays[1]
        guide, gshift = _inversion_guide(gtab, int(params[_P_WB]), GUIDE_BITS)
        params[_P_GSHIFT] = gshift
        self.gap = (params, gtab, guide)


class _Class:
    """One class of keys: its envelope bound and, level by level, its band."""

    def __init__(self, lattice, scale, levels, bound):
        self.bound = bound
        self.bands = []
        upper = None
        for u in levels:
            v = u - bound
            proc = plan_exceedance("gaussian", scale, v, True, upper)
            if proc._law_params != lattice.sigma2_units:
                raise ValueError("scale does not give the lattice's discrete Gaussian")
            self.bands.append(_Band(proc, plan_blocks(lattice.j, lattice.pc, lattice.f, v + 1,
                                                      upper)))
            upper = v

    def completion(self, lattice, level):
        """The block table of ``Z`` given ``|Z| <= v`` at ``level``."""
        return plan_blocks(lattice.j, lattice.pc, lattice.f, 0, self.bands[level].proc.u)


class LadderPlan:
    """The public tables of a ladder (:func:`plan_ladder`)."""

    def __init__(self, lattice, scale, levels, bound, middle):
        self.lattice, self.levels, self.bound, self.middle = lattice, levels, bound, middle
        self.direct = plan_blocks(lattice.j, lattice.pc, lattice.f)
        self.small = _Class(lattice, scale, levels, bound)
        # the middle keys are revealed down to the lowest level at once: one band
        self.mid = _Class(lattice, scale, levels[-1:], middle) if middle > bound else None


@functools.lru_cache(maxsize=32)
def _cached_plan(lattice, scale, levels, bound, middle, wbits):
    levels = tuple(int(u) for u in levels)
    bound = int(bound)
    middle = bound if middle is None else int(middle)
    if not 0 <= bound <= middle or any(u < middle for u in levels) or any(
            lower >= upper for lower, upper in zip(levels[1:], levels[:-1], strict=True)):
        raise ValueError("levels must decrease and stay at or above the bounds, "
                         "0 <= bound <= middle")
    return LadderPlan(lattice, scale, levels, bound, middle)


def plan_ladder(lattice, scale, levels, bound, middle=None):
    """The tables of :func:`ladder_exceedances` for these public values (cached)."""
    return _cached_plan(lattice, scale, tuple(levels), bound, middle, _package()._WORD_BITS)


# --------------------------------------------------------------------------
# Draws
# --------------------------------------------------------------------------
class _Source:
    """A kernel source with its handoff record."""

    def __init__(self, rng):
        self.src = _KernelSource(check_generator(rng))
        self.fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)


def _draw_band(band, d, seen, idx, z, count, source):
    """One band of a process over ``0 .. d-1``, appended to ``idx``, ``z``: the new count."""
    src, fb = source.src, source.fb
    proc, blocks = band.proc, band.blocks
    pos, pending = 0, -1
    while True:
        with src.lock:
            pos, count, status = _band(*band.gap, *blocks.arrays, d, pos, pending, seen, idx, z,
                                       count, src.next64, src.state, fb)
        pending = -1
        if status == 0:
            return count
        if status == 1:
            pos, _ = proc.finish(fb, src, d, with_value=False)
            if pos >= d:
                return count
            pending = pos
        else:
            z[count] = blocks.finish(fb, src)
            idx[count] = pos
            seen[pos >> 6] |= np.uint64(1) << np.uint64(pos & 63)
            count += 1
            pos += 1


class _Revealed:
    """The revealed entries, their noisy keys and their running sums by band."""

    def __init__(self, value, inv_gamma, d, levels):
        index = np.int32 if d < 2**31 else np.int64
        self.value, self.inv_gamma = value, inv_gamma
        self.units = tuple(int(u) for u in levels)
        self.levels = np.array(self.units, dtype=np.float64)
        self.idx, self.z, self.y = np.empty(d, index), np.empty(d, np.int64), np.empty(d)
        self.band_sum = np.zeros(2 * (len(levels) + 1), dtype=np.int64)
        self.band_count = np.zeros(len(levels) + 1, dtype=np.int64)

    def record(self, start, stop):
        """``y = a + z`` of entries ``start .. stop - 1``, added to their bands."""
        _record_range(self.value, self.inv_gamma, self.idx, self.z, self.y, start, stop,
                      self.levels, self.band_sum, self.band_count)

    def excess(self, i):
        """``sum_U (|y_j| - u_i)_+``, exactly (a Python int: it compares exactly with a
        float radius, so the stopping rule is a function of the noisy keys alone)."""
        parts, counts = self.band_sum.tolist(), self.band_count.tolist()
        return sum((parts[2 * h] << _SPLIT_BITS) + parts[2 * h + 1]
                   - self.units[i] * counts[h] for h in range(i + 1))


class _Middle:
    """The middle keys (their positions and keys, in increasing order) and which of them
    were revealed (a bitmap over their list)."""

    def __init__(self, pos, key, m):
        self.pos, self.key, self.m = pos[:m], key[:m], m
        self.seen = np.zeros(-(-max(m, 1) // 64), np.uint64)
        # list indices revealed by one band, in the index type of the revealed positions
        # (one compiled band kernel serves both)
        self.r = np.empty(m, np.int32 if m < 2**31 else np.int64)
        self.z = np.empty(m, np.int64)


def _draw_direct(blocks, rev, count, source):
    src, fb = source.src, source.fb
    r = 0
    while r < count:
        with src.lock:
            r = _direct_values(*blocks.arrays, rev.z, rev.y, r, count, rev.levels,
                               rev.band_sum, rev.band_count, src.next64, src.state, fb)
        if r < count:
            rev.z[r] = blocks.finish(fb, src)
            rev.record(r, r + 1)
            r += 1


def _draw_middle_band(band, mid, rev, count, source):
    """The middle keys' band, appended to the revealed entries: the new count."""
    n = _draw_band(band, mid.m, mid.seen, mid.r, mid.z, 0, source)
    return _append_middle(mid.pos, mid.key, mid.r, mid.z, n, rev.idx, rev.z, rev.y, count,
                          rev.levels, rev.band_sum, rev.band_count)


class LadderDraw:
    """What :func:`ladder_exceedances` revealed: ``idx[:count]``, the noise ``z`` there
    (the direct positions first, increasing, then each band's) and the noisy keys ``y = a +
    z`` (doubles, exact), the level reached and whether the stopping rule held there."""

    def __init__(self, plan, idx, z, y, seen, mid, size, level, found, source):
        self._plan, self.levels, self.bound = plan, list(plan.levels), plan.bound
        self.middle, self._size = plan.middle, size
        self.idx, self.z, self.y, self._seen, self._mid = idx, z, y, seen, mid
        self.level, self.found = level, found
        self._source = source

    def complete(self):
        """``(positions, noise)`` of every position not revealed: the noise given
        ``|Z_j| <= v`` at the level reached (``v = levels[level] - B_j``, ``B_j`` the bound
        of j's class), drawn exactly."""
        plan, lat = self._plan, self._plan.lattice
        drawn = np.unpackbits(self._seen.view(np.uint8), bitorder="little")[:self._size]
        rest = np.flatnonzero(drawn == 0)
        noise = np.empty(rest.size, dtype=np.int64)
        plan.small.completion(lat, self.level).fill(noise, 0, rest.size, self._source.src,
                                                    self._source.fb)
        if plan.mid is None or self._mid.m == 0:
            return rest, noise
        mid = self._mid
        hidden = np.unpackbits(mid.seen.view(np.uint8), bitorder="little")[:mid.m] == 0
        mrest = mid.pos[hidden]
        mnoise = np.empty(mrest.size, dtype=np.int64)
        plan.mid.completion(lat, 0).fill(mnoise, 0, mrest.size, self._source.src,
                                         self._source.fb)
        return np.concatenate([rest, mrest]), np.concatenate([noise, mnoise])


def ladder_exceedances(value, lattice, scale, levels, bound, radius, rng, middle=None,
                       support=None):
    """Reveal the noise of a discrete Gaussian release of ``value`` down public levels.

    Parameters
    ----------
    value : ndarray of float64
        The statistic; its keys ``a_j = rint(value_j / gamma)`` are those of
        :func:`release_gaussian` on ``lattice``.
    lattice : GaussianLattice
        The lattice of the release (``gamma = 2^k``, ``s^2``); ``scale`` is ``s`` as its plan
        computed it (a Fraction whose square gives the same ``s^2``; checked).
    levels : sequence of int
        Decreasing levels ``u_0 > u_1 > ...``, in lattice units, all ``>= middle``.
    bound : int
        ``B >= 0``: the envelope bound of the small keys, ``|a_j| <= B``.
    radius : float
        The stopping rule: ``sum_U (|a_j + Z_j| - u_i)_+ >= radius`` (lattice units).
    rng : numpy.random.Generator
    middle : int or None
        ``M >= B``: the envelope bound of the middle keys, ``B < |a_j| <= M``; positions
        with ``|a_j| > M`` are drawn directly. None: ``M = B`` (no middle class).
    support : ndarray of int or None
        The increasing positions outside which ``value`` is 0, if known: the keys are then
        read there only (the bands never scan), so the cost follows the support and the
        noise drawn, not d.

    Returns
    -------
    LadderDraw, or None when some key reaches ``2^52`` (the caller then releases
    every coordinate).
    """
    value = np.ascontiguousarray(value, dtype=np.float64)
    d = value.size
    plan = plan_ladder(lattice, scale, levels, bound, middle)
    if not -1022 <= lattice.k <= 1023:
        return None
    inv_gamma = lattice.inv_gamma
    rev = _Revealed(value, inv_gamma, d, plan.levels)
    seen = np.empty(-(-d // 64), np.uint64)
    index = rev.idx.dtype
    if support is not None:
        support = np.ascontiguousarray(support, dtype=np.int64)
    n_mid = (d if support is None else support.size) if plan.mid else 0
    mid_pos, mid_key = np.empty(n_mid, index), np.empty(n_mid)
    count, m, top = _big_positions(value, inv_gamma, float(plan.bound), float(plan.middle),
                                   rev.idx, rev.y, mid_pos, mid_key, seen, support)
    if not top < MAX_KEY:
        return None
    mid = _Middle(mid_pos, mid_key, m)
    source = _Source(rng)
    _draw_direct(plan.direct, rev, count, source)
    if m:
        count = _draw_middle_band(plan.mid.bands[0], mid, rev, count, source)
    level, found = len(plan.levels) - 1, False
    for i in range(len(plan.levels)):
        start = count
        count = _draw_band(plan.small.bands[i], d, seen, rev.idx, rev.z, count, source)
        rev.record(start, count)
        if rev.excess(i) >= radius:
            level, found = i, True
            break
    return LadderDraw(plan, rev.idx[:count], rev.z[:count], rev.y[:count], seen, mid, d, level,
                      found, source)
