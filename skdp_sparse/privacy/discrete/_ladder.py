"""Discrete Gaussian noise of a lattice release revealed down a ladder of public levels.

For integer keys ``a_j`` (``j < d``) and i.i.d. discrete Gaussian noise ``Z_j`` (the law of
:func:`release_gaussian` on the same lattice), :func:`ladder_exceedances` reveals, without
drawing all d values:

* ``Z_j`` itself where ``|a_j| > B`` ("big" positions), drawn directly;
* level by level, for ``i = 0, 1, ...`` and the other positions, those with
  ``v_i < |Z_j| <= v_{i-1}`` (``v_i = u_i - B``, ``v_{-1} = inf``) and their ``Z_j``: an
  exceedance process of the band given ``|Z_j| <= v_{i-1}`` (:func:`plan_exceedance`)
  chooses the positions, a block table (:mod:`._blocks`) the values, from the band's law.
  Off the revealed set every ``|a_j + Z_j| <= B + v_i = u_i``: candidates are chosen on
  ``|Z_j|`` alone (an envelope that does not depend on ``a_j``), and the exact test of
  ``|a_j + Z_j|`` is left to the caller, which has the values;

until the caller's stopping rule, ``sum_U (|a_j + Z_j| - u_i)_+ >= radius``, holds or the
levels run out. :meth:`LadderDraw.complete` then draws, if asked, the noise of every
position not revealed from its law given the bands: ``|Z_j| <= v_i`` at the level reached.
Chaining the conditional laws gives every ``Z_j`` its discrete Gaussian law, independently
(the argument is in ``doc/proofs/mean.rst``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ...utils.random import check_generator
from ..gaussian_ladder import _is_seen, _mark_seen
from ._blocks import block_attempt, block_fill, block_scalars, plan_blocks
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


@numba.njit(cache=True)
def _key(value, inv_gamma):
    """The lattice key ``rint(value / gamma)`` (``inv_gamma`` a power of two: exact)."""
    return np.rint(value * inv_gamma)


@numba.njit(cache=True)
def _big_positions(value, inv_gamma, bound, idx, y, seen):
    """Every j with ``|a_j| > bound``, increasing, into ``idx`` (marked in ``seen``) with
    ``a_j`` into ``y``, and the largest ``|a_j|`` (infinite or NaN if some key is not
    finite)."""
    k = 0
    top = 0.0
    for j in range(value.size):
        a = _key(value[j], inv_gamma)
        top = max(top, abs(a)) if a == a else a
        # branch-free: the test is unpredictable on a sparse mean
        idx[k] = j
        y[k] = a
        k += abs(a) > bound
    seen[:] = 0
    for r in range(k):
        _mark_seen(seen, idx[r])
    return k, top


@numba.njit(cache=True, inline="always")
def _add_to_band(v, levels, band_sum, band_count):
    """``|v|`` added to the sum and count of the band of levels it falls in (band h:
    ``levels[h] < |v| <= levels[h - 1]``; nothing below the last level, which never
    counts)."""
    v = abs(v)
    if v > levels[levels.size - 1]:
        h = 0
        while v <= levels[h]:
            h += 1
        band_sum[h] += v
        band_count[h] += 1.0


@numba.njit(cache=True)
def _record_range(value, inv_gamma, idx, z, y, start, stop, levels, band_sum, band_count):
    """``y[r] = a_j + z[r]`` (``j = idx[r]``; exact: both are integers below 2^53) for the
    entries ``start .. stop - 1``, added to their bands (:func:`_add_to_band`)."""
    for r in range(start, stop):
        y[r] = _key(value[idx[r]], inv_gamma) + np.float64(z[r])
    for r in range(start, stop):
        _add_to_band(y[r], levels, band_sum, band_count)


@numba.njit(cache=True)
def _big_values(blocks, z, y, start, stop, levels, band_sum, band_count, next64, state, fb):
    """The noise ``z`` of entries ``start .. stop - 1`` from the table, added to their keys
    ``y`` and to their bands: ``stop``, or the index of a draw handed off."""
    scalars = block_scalars(blocks)
    r = start
    while r < stop:
        status, zr = block_attempt(scalars, next64, state, fb)
        if status == 1:
            z[r] = zr
            r += 1
        elif status == 2:
            break
    for q in range(start, r):
        y[q] += np.float64(z[q])
        _add_to_band(y[q], levels, band_sum, band_count)
    return r


@numba.njit(cache=True)
def _band(proc, blocks, d, pos, pending, seen, idx, val, count, next64, state, fb):
    """One band of the ladder from position ``pos``: ``(pos, count, status)``.

    Each position the process selects that is not yet in ``seen`` gets a value from the
    band's block table and is appended. ``pending >= 0``: a
    position the process already selected (after a handoff), handled first. Status 0:
    done; 1: the process handed off (``pos`` where it stood); 2: the value of position
    ``pos`` handed off.

    The process is :func:`next_exceedance` without values (its candidates by geometric
    gaps, each kept with the thinning probability), with the same handoffs, so that
    :meth:`ExceedancePlan.finish` completes them; its parameters and the table's are
    read once, outside the loop.
    """
    params, gtab, gguide, _, _ = proc
    wb, g_gshift, g_low = params[_P_WB], params[_P_GSHIFT], params[_P_LOW]
    g_p, g_shift, g_block, thin = params[_P_P], params[_P_SHIFT], params[_P_BLOCK], params[_P_THIN]
    scalars = block_scalars(blocks)
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
        if not _is_seen(seen, j):
            status = 0
            while status == 0:
                status, zj = block_attempt(scalars, next64, state, fb)
            if status == 2:
                return j, count, 2
            idx[count] = j
            val[count] = zj
            _mark_seen(seen, j)
            count += 1
        pos = j + 1


class _Source:
    """A kernel source with its handoff record."""

    def __init__(self, rng):
        self.src = _KernelSource(check_generator(rng))
        self.fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)


def _draw_values(blocks, out, start, stop, source):
    src, fb = source.src, source.fb
    i = start
    while i < stop:
        with src.lock:
            i = block_fill(blocks.arrays, out, i, stop, src.next64, src.state, fb)
        if i < stop:
            out[i] = blocks.finish(fb, src)
            i += 1


class _Revealed:
    """The revealed entries and their running sums by band, as the kernels fill them."""

    def __init__(self, value, inv_gamma, d, levels):
        index = np.int32 if d < 2**31 else np.int64
        self.value, self.inv_gamma = value, inv_gamma
        self.idx, self.z, self.y = np.empty(d, index), np.empty(d, np.int64), np.empty(d)
        self.levels = np.array(levels, dtype=np.float64)
        self.band_sum = np.zeros(len(levels) + 1)
        self.band_count = np.zeros(len(levels) + 1)

    def record(self, start, stop):
        _record_range(self.value, self.inv_gamma, self.idx, self.z, self.y, start, stop,
                      self.levels, self.band_sum, self.band_count)

    def excess(self, i):
        """``sum_U (|y_j| - u_i)_+``."""
        return float(np.sum(self.band_sum[:i + 1] - self.levels[i] * self.band_count[:i + 1]))


def _draw_big(blocks, rev, count, source):
    src, fb = source.src, source.fb
    r = 0
    while r < count:
        with src.lock:
            r = _big_values(blocks.arrays, rev.z, rev.y, r, count, rev.levels, rev.band_sum,
                            rev.band_count, src.next64, src.state, fb)
        if r < count:
            rev.z[r] = blocks.finish(fb, src)
            rev.record(r, r + 1)
            r += 1


def _draw_band(proc, blocks, d, seen, rev, count, source):
    src, fb = source.src, source.fb
    pos, pending = 0, -1
    while True:
        with src.lock:
            pos, count, status = _band(proc.arrays, blocks.arrays, d, pos, pending, seen,
                                       rev.idx, rev.z, count, src.next64, src.state, fb)
        pending = -1
        if status == 0:
            return count
        if status == 1:
            pos, _ = proc.finish(fb, src, d, with_value=False)
            if pos >= d:
                return count
            pending = pos
        else:
            rev.z[count] = blocks.finish(fb, src)
            rev.idx[count] = pos
            seen[pos >> 6] |= np.uint64(1) << np.uint64(pos & 63)
            count += 1
            pos += 1


class LadderDraw:
    """What :func:`ladder_exceedances` revealed: ``idx[:count]``, the noise ``z`` there
    (the big positions first, increasing, then each band's, increasing) and the noisy
    keys ``y = a + z`` (doubles, exact), the level reached and whether the stopping rule
    held there."""

    def __init__(self, lattice, levels, bound, idx, z, y, seen, size, level, found, source):
        self._lattice, self.levels, self.bound, self._size = lattice, levels, bound, size
        self.idx, self.z, self.y, self._seen = idx, z, y, seen
        self.level, self.found = level, found
        self._source = source

    def complete(self):
        """``(positions, noise)`` of every position not revealed: the noise given
        ``|Z_j| <= v`` at the level reached (``v = levels[level] - bound``), drawn exactly."""
        drawn = np.unpackbits(self._seen.view(np.uint8), bitorder="little")[:self._size]
        rest = np.flatnonzero(drawn == 0)
        lat = self._lattice
        blocks = plan_blocks(lat.j, lat.pc, lat.f, 0, self.levels[self.level] - self.bound)
        noise = np.empty(rest.size, dtype=np.int64)
        _draw_values(blocks, noise, 0, rest.size, self._source)
        return rest, noise


def ladder_exceedances(value, lattice, scale, levels, bound, radius, rng):
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
        Decreasing levels ``u_0 > u_1 > ...``, in lattice units, all ``>= bound``.
    bound : int
        ``B >= 0``: positions with ``|a_j| > B`` are drawn directly.
    radius : float
        The stopping rule: ``sum_U (|a_j + Z_j| - u_i)_+ >= radius`` (lattice units).
    rng : numpy.random.Generator

    Returns
    -------
    LadderDraw, or None when some key reaches ``2^52`` (the caller then releases
    every coordinate).
    """
    value = np.ascontiguousarray(value, dtype=np.float64)
    d = value.size
    levels = [int(u) for u in levels]
    if any(u < bound for u in levels) or any(np.diff(levels) >= 0):
        raise ValueError("levels must decrease and stay at or above the bound")
    if not -1022 <= lattice.k <= 1023:
        return None
    inv_gamma = math.ldexp(1.0, -lattice.k)
    rev = _Revealed(value, inv_gamma, d, levels)
    seen = np.empty(-(-d // 64), np.uint64)
    count, top = _big_positions(value, inv_gamma, float(bound), rev.idx, rev.y, seen)
    if not top < MAX_KEY:
        return None
    source = _Source(rng)
    _draw_big(plan_blocks(lattice.j, lattice.pc, lattice.f), rev, count, source)
    upper = None
    level, found = len(levels) - 1, False
    for i, u in enumerate(levels):
        v = u - bound
        proc = plan_exceedance("gaussian", scale, v, True, upper)
        if proc._law_params != lattice.sigma2_units:
            raise ValueError("scale does not give the lattice's discrete Gaussian")
        blocks = plan_blocks(lattice.j, lattice.pc, lattice.f, v + 1, upper)
        start = count
        count = _draw_band(proc, blocks, d, seen, rev, count, source)
        rev.record(start, count)
        if rev.excess(i) >= radius:
            level, found = i, True
            break
        upper = v
    return LadderDraw(lattice, levels, bound, rev.idx[:count], rev.z[:count], rev.y[:count],
                      seen, d, level, found, source)
