"""Exact discrete Laplace and discrete Gaussian samplers: parameters and the draw loop."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ...utils.random import check_generator
from ._exact import (
    _dyadic_up,
    _floor_log2,
    _fraction,
    _geometric_spec,
    _package,
    _PyBits,
)
from ._kernels import _noise_kernel

_MAX_UNITS = 1 << 56  # largest Laplace scale / Gaussian s in lattice units


class _KernelSource:
    """A Generator as the kernels use it.

    ``next64`` and ``state`` are its bit generator's ``next_uint64`` and state address
    (kernels draw its words in place); hold ``lock`` around a kernel call so no other
    thread draws meanwhile; ``bits`` gives exact Python bits of the same stream to the
    continuations.
    """

    def __init__(self, rng):
        bitgen = rng.bit_generator
        self._iface = bitgen.ctypes  # keeps the ctypes objects alive
        self.lock = bitgen.lock
        self.next64 = self._iface.next_uint64
        self.state = self._iface.state_address
        self.bits = _PyBits(rng)


def kernel_source(rng):
    """What a kernel needs to draw from ``rng`` in place: an object with ``next64`` and
    ``state`` (pass both to the kernel), ``lock`` (hold it around the call) and ``bits``
    (give it to a sampler's ``finish`` after a handoff)."""
    return _KernelSource(check_generator(rng))


def fill_with_handoffs(out, start, stop, src, fill, finish):
    """``out[start:stop]`` drawn by a kernel: ``fill(i)`` runs it from ``i`` (under the
    source's lock) and returns where it stopped; there it handed a draw back, which
    ``finish(i)`` completes exactly before the kernel resumes after it."""
    i = start
    while i < stop:
        with src.lock:
            i = fill(i)
        if i < stop:
            out[i] = finish(i)
            i += 1
    return out


def _exact_bits(source):
    """Exact Python bits from a kernel source, a ``_PyBits`` or a Generator."""
    if isinstance(source, _PyBits):
        return source
    if isinstance(source, _KernelSource):
        return source.bits
    return _PyBits(check_generator(source))


def _draw(spec, gauss, rng, n, a=None):
    """``n`` draws of a kernel: the noise (int64), or ``fl(a + noise)`` when ``a`` is given.

    Draws the kernel hands back are finished exactly in Python, from the same
    generator, before the kernel resumes.
    """
    if a is None:
        a, out, out_int = np.empty(0), np.empty(0), np.empty(n, dtype=np.int64)
    else:
        out, out_int = np.empty(n), np.empty(0, dtype=np.int64)
    # The Gaussian's proposal is the Laplace of scale 2^j (spec.p, no shift); pc = 0
    # makes the kernel's draws Laplace.
    j, pc, f = (0, 0, 0) if gauss is None else gauss
    head = tuple(np.int64(x) for x in (spec.p, spec.shift, j, pc, f))
    args = head + spec.kernel_args()
    bitgen = rng.bit_generator
    iface = bitgen.ctypes
    src = _PyBits(rng)
    fb = np.zeros(4, dtype=np.int64)
    i = 0
    while i < n:
        # The kernel advances the generator's own state through its C interface; the
        # lock keeps other threads from drawing from it meanwhile.
        with bitgen.lock:
            i = _noise_kernel(a, out, out_int, i, *args, iface.next_uint64, iface.state_address, fb)
        if i < n:
            z = _package()._finish_noise(fb, spec, gauss, src)
            if a.size == 0:
                out_int[i] = _to_int64(z)
            else:
                # Python's int -> float conversion rounds to nearest, ties to even.
                out[i] = float(int(a[i % a.size]) + z)
            i += 1
    return out_int if a.size == 0 else out


def _to_int64(z):
    if not -(1 << 63) <= z < 1 << 63:
        raise OverflowError("a noise value exceeded the int64 range")
    return z


def _laplace_params(scale):
    """(p, g) with the sampled scale p / 2^g: ``scale`` if exact in 40 bits, else just above."""
    s = _fraction(scale, "scale_in_units")
    p, g = _dyadic_up(s, max(0, 40 - _floor_log2(s)))
    if p >= _MAX_UNITS:
        raise ValueError(f"scale_in_units must be below 2^56, got {scale!r}")
    return p, g


def _gaussian_params(sigma2):
    """(j, pc, f) with ``s^2 = 2^j pc / 2^f >= sigma2`` and every kernel quantity in 62 bits."""
    s2 = Fraction(sigma2)
    # j = round(log2 s), so the proposal scale 2^j is within sqrt(2) of s.
    j = max(0, _floor_log2(2 * s2) // 2)
    c = s2 / (1 << j)
    pc, f = _dyadic_up(c, max(0, 40 - _floor_log2(c)))
    if pc >= 1 << 61 or f + j + 1 > 61 or j > 56:
        raise ValueError(
            "the discrete Gaussian sampler supports 2^-10 <= sigma <= 2^56 lattice units"
        )
    return j, pc, f


def discrete_laplace_scale(scale_in_units):
    """The scale, as a Fraction, that :func:`sample_discrete_laplace` samples with.

    It is ``scale_in_units`` itself when that is an integer or a dyadic rational with at
    most 40 significant bits (every float in ``[1, 2^40]`` with a short mantissa,
    every integer below 2^56); otherwise it is rounded up by a relative amount below
    ``2^-40``.
    """
    p, g = _laplace_params(scale_in_units)
    return Fraction(p, 1 << g)


def discrete_gaussian_sigma2(sigma_in_units):
    """The variance parameter ``s^2`` (a Fraction) :func:`sample_discrete_gaussian` uses.

    ``s^2 >= sigma_in_units^2``, equal to it when it is a dyadic rational that fits
    in 40 significant bits, else larger by a relative amount below ``2^-40``.
    """
    s = _fraction(sigma_in_units, "sigma_in_units")
    j, pc, f = _gaussian_params(s * s)
    return Fraction(pc << j, 1 << f)


def _laplace_draw_setup(p, shift):
    return _geometric_spec(p, shift), None


def _gauss_draw_setup(j, pc, f):
    return _geometric_spec(1 << j, 0), (j, pc, f)


def sample_discrete_laplace(scale_in_units, size, rng):
    """Independent integers with ``P(z) ∝ exp(-|z| / scale_in_units)``, exactly.

    CKS 2020, Algorithm 2, restructured for speed and computed in 63-bit integer
    arithmetic (proof: ``doc/proofs/discrete.rst``).

    Parameters
    ----------
    scale_in_units : int, float or Fraction
        Scale ``t > 0`` of the law, below 2^56; see :func:`discrete_laplace_scale`
        for the exact value used (``t`` itself for integers and short dyadic rationals).
    size : int or tuple of int
    rng : numpy.random.Generator, int or None
        Source of the bits; a Generator advances in place.

    Returns
    -------
    ndarray of int64
    """
    spec, gauss = _laplace_draw_setup(*_laplace_params(scale_in_units))
    n = int(np.prod(size, dtype=np.int64))
    return _draw(spec, gauss, check_generator(rng), n).reshape(size)


def sample_discrete_gaussian(sigma_in_units, size, rng):
    """Independent integers with ``P(z) ∝ exp(-z^2 / (2 s^2))``, exactly.

    CKS 2020, Algorithm 3, with a discrete Laplace proposal of power-of-two scale,
    computed in 63-bit integer arithmetic (proof: ``doc/proofs/discrete.rst``). The variance
    parameter is ``s^2 = sigma_in_units^2`` up to :func:`discrete_gaussian_sigma2`'s
    rounding (upwards, relative below 2^-40; none for integers and short dyadic
    rationals); the variance of the law is slightly below ``s^2`` for small ``s``.

    Parameters
    ----------
    sigma_in_units : int, float or Fraction
        ``2^-10 <= sigma <= 2^56``.
    size : int or tuple of int
    rng : numpy.random.Generator, int or None

    Returns
    -------
    ndarray of int64
    """
    s = _fraction(sigma_in_units, "sigma_in_units")
    if s < Fraction(1, 1024):
        raise ValueError("the discrete Gaussian sampler supports sigma >= 2^-10")
    spec, gauss = _gauss_draw_setup(*_gaussian_params(s * s))
    n = int(np.prod(size, dtype=np.int64))
    return _draw(spec, gauss, check_generator(rng), n).reshape(size)
