"""Lattices and guarantees of the floating-point-safe Laplace and Gaussian releases."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ...utils.random import check_generator
from ..accounting import PrivacyEvent
from ._exact import _ceil_frac, _floor_log2
from ._samplers import (
    _MAX_UNITS,
    _draw,
    _gauss_draw_setup,
    _gaussian_params,
    _laplace_draw_setup,
)

#: Relative growth of the sensitivity that rounding to the lattice may cost (eta).
SENSITIVITY_SLACK = 2.0**-16
#: The lattice step is at most 2^-LATTICE_RESOLUTION_BITS noise scales.
LATTICE_RESOLUTION_BITS = 30

_ETA = Fraction(SENSITIVITY_SLACK)


def _float_up(x):
    """The smallest double >= the rational x."""
    y = float(x)
    if Fraction(y) < x:
        y = math.nextafter(y, math.inf)
    return y


def laplace_epsilon(sensitivity, scale):
    """Epsilon the safe Laplace mechanism guarantees: ``(1 + eta) Delta_1 / b``, rounded up."""
    return _float_up((1 + _ETA) * Fraction(sensitivity) / Fraction(scale))


def laplace_scale_for(sensitivity, epsilon):
    """Smallest scale b (a double) with ``laplace_epsilon(sensitivity, b) <= epsilon``."""
    b = _float_up((1 + _ETA) * Fraction(sensitivity) / Fraction(epsilon))
    while laplace_epsilon(sensitivity, b) > epsilon:
        b = math.nextafter(b, math.inf)
    return b


def gaussian_rho(sensitivity, sigma):
    """zCDP rho the safe Gaussian mechanism guarantees: ``((1+eta) Delta_2 / sigma)^2 / 2``.

    Cached (exact rational arithmetic on two public numbers, asked again at every fit)."""
    return _gaussian_rho(sensitivity, sigma)


@functools.lru_cache(maxsize=1024)
def _gaussian_rho(sensitivity, sigma):
    return _float_up(((1 + _ETA) * Fraction(sensitivity) / Fraction(sigma)) ** 2 / 2)


def discrete_gaussian_event(sensitivity, sigma, count=1):
    """The accounted event of ``count`` safe Gaussian releases: zCDP only (no GDP claim)."""
    return PrivacyEvent("discrete_gaussian", math.nan, 0.0, gaussian_rho(sensitivity, sigma),
                        None, int(count))


class _PowerOfTwoStep:
    """The step ``gamma = 2^k`` of a lattice, and its inverse, from the plan's ``k``."""

    __slots__ = ()

    @property
    def gamma(self):
        return math.ldexp(1.0, self.k)

    @property
    def inv_gamma(self):
        return math.ldexp(1.0, -self.k)


@dataclass(frozen=True)
class LaplaceLattice(_PowerOfTwoStep):
    """How a safe Laplace release of ``dim`` coordinates is computed.

    ``gamma = 2^k``; noise of scale ``t`` lattice units; ``delta_units`` bounds the l1
    distance of neighbouring rounded vectors; ``epsilon = delta_units / t`` exactly.
    """

    k: int
    t: int
    delta_units: int

    @property
    def epsilon(self):
        return Fraction(self.delta_units, self.t)


@dataclass(frozen=True)
class GaussianLattice(_PowerOfTwoStep):
    """How a safe Gaussian release of ``dim`` coordinates is computed.

    ``gamma = 2^k``; discrete Gaussian with ``s^2 = 2^j pc / 2^f`` lattice units;
    ``delta_units`` bounds the l2 distance of neighbouring rounded vectors;
    ``rho = delta_units^2 / (2 s^2)`` exactly.
    """

    k: int
    j: int
    pc: int
    f: int
    delta_units: Fraction

    @property
    def sigma2_units(self):
        return Fraction(self.pc << self.j, 1 << self.f)

    @property
    def rho(self):
        return self.delta_units**2 / (2 * self.sigma2_units)


def _check_dim(dim):
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    return dim


@functools.lru_cache(maxsize=256)
def plan_laplace(sensitivity, scale, dim):
    """The lattice of a safe Laplace release; its epsilon is at most ``laplace_epsilon``."""
    dim = _check_dim(dim)
    delta, b = Fraction(sensitivity), Fraction(scale)
    claim = Fraction(laplace_epsilon(sensitivity, scale))
    k = _floor_log2(min(b / (1 << LATTICE_RESOLUTION_BITS), _ETA * delta / dim))
    while True:
        gamma = Fraction(2) ** k
        t = _ceil_frac(b / gamma)
        delta_units = math.floor(delta / gamma) + dim
        if Fraction(delta_units, t) <= claim:
            break
        k -= 1
    if t >= _MAX_UNITS or k < -1074:
        raise ValueError(
            f"the floating-point-safe Laplace mechanism needs dim / epsilon below about 2^39 "
            f"(dim={dim}, epsilon={float(claim):.3g}); use floating_point_safe=False"
        )
    return LaplaceLattice(k, t, delta_units)


@functools.lru_cache(maxsize=256)
def plan_gaussian(sensitivity, sigma, dim):
    """The lattice of a safe Gaussian release; its rho is at most ``gaussian_rho``."""
    dim = _check_dim(dim)
    delta, sig = Fraction(sensitivity), Fraction(sigma)
    claim = Fraction(gaussian_rho(sensitivity, sigma))
    # A rational upper bound on sqrt(dim), within 2^-30.
    root = Fraction(math.isqrt(dim << 60) + 1, 1 << 30)
    k = _floor_log2(min(sig / (1 << LATTICE_RESOLUTION_BITS), _ETA * delta / root))
    while True:
        gamma = Fraction(2) ** k
        s = sig / gamma
        try:
            j, pc, f = _gaussian_params(s * s)
        except ValueError:
            raise ValueError(
                f"the floating-point-safe Gaussian mechanism needs sqrt(dim) * sigma / "
                f"sensitivity below about 2^39 (dim={dim}); use floating_point_safe=False"
            ) from None
        lattice = GaussianLattice(k, j, pc, f, delta / gamma + root)
        if lattice.rho <= claim:
            break
        k -= 1
    if k < -1074:
        raise ValueError("sigma is too small for a floating-point-safe release")
    return lattice


def check_lattice(sensitivity, noise, dim, *, pure=False, shown=None,
                  remedy="a larger epsilon (or delta)"):
    """Plan, from public values, the lattice of an exact release of up to ``dim`` values
    with noise ``noise`` (a Laplace scale with ``pure``, else a Gaussian sigma) for
    ``sensitivity``, and refuse one the exact samplers cannot serve by naming its remedy:
    called before a fit reserves its budget, so that no release fails after earlier
    ones have spent theirs. ``shown``: the noise per unit of sensitivity the message
    quotes (``noise / sensitivity`` by default)."""
    try:
        (plan_laplace if pure else plan_gaussian)(float(sensitivity), float(noise),
                                                  max(int(dim), 1))
    except ValueError:
        ratio = float(noise) / float(sensitivity) if shown is None else float(shown)
        raise ValueError(
            f"the budget is too small for the floating-point-safe noise: a release of "
            f"{int(dim)} values would add noise {ratio:.3g} times its sensitivity, more "
            "than the exact samplers serve (about 2^38 / sqrt(values)). Choose "
            f"{remedy}, or floating_point_safe=False") from None


def _to_lattice(value, k):
    scaled = np.atleast_1d(np.ldexp(value, -k))
    if not np.all(np.isfinite(scaled)):
        raise ValueError(
            "a floating-point-safe release needs a finite value whose ratio to the noise "
            "scale is below 2^990"
        )
    # In place: the value may be a K x p gradient matrix.
    return np.rint(scaled, out=scaled).ravel()


def _release(value, n_draws, k, setup, rng):
    value = np.asarray(value, dtype=np.float64)
    shape = value.shape if n_draws is None else (int(n_draws), *value.shape)
    a = _to_lattice(value, k)
    n = int(np.prod(shape, dtype=np.int64))
    out = np.empty(0)
    if n:
        out = _draw(*setup, check_generator(rng), n, a)
        np.ldexp(out, k, out=out)
    out = out.reshape(shape)
    return out[()] if out.ndim == 0 else out


def release_laplace(value, sensitivity, scale, rng, n_draws=None):
    """Floating-point-safe ``value + Laplace(scale)`` (one release, or ``n_draws`` stacked).

    Every coordinate is rounded to the lattice of :func:`plan_laplace` (``dim`` is the
    number of coordinates of ``value``) and receives exact discrete Laplace noise; the
    release is ``laplace_epsilon(sensitivity, scale)``-DP for l1 sensitivity
    ``sensitivity``.
    """
    value = np.asarray(value, dtype=np.float64)
    lattice = plan_laplace(float(sensitivity), float(scale), max(value.size, 1))
    return _release(value, n_draws, lattice.k, _laplace_draw_setup(lattice.t, 0), rng)


def release_gaussian(value, sensitivity, sigma, rng, n_draws=None, dim=None):
    """Floating-point-safe ``value + N(0, sigma^2)`` (one release, or ``n_draws`` stacked).

    Every coordinate is rounded to the lattice of :func:`plan_gaussian` and receives
    exact discrete Gaussian noise; the release is ``gaussian_rho(sensitivity,
    sigma)``-zCDP for l2 sensitivity ``sensitivity``. The lattice depends on the
    number of coordinates: ``dim``, a public bound on it, where the size of ``value``
    is itself private (the keys of a partition selection); ``value.size`` otherwise.
    """
    value = np.asarray(value, dtype=np.float64)
    if dim is None:
        dim = value.size
    elif value.size > dim:
        raise ValueError(f"a release of {value.size} coordinates under a bound of {dim}")
    lattice = plan_gaussian(float(sensitivity), float(sigma), max(int(dim), 1))
    setup = _gauss_draw_setup(lattice.j, lattice.pc, lattice.f)
    return _release(value, n_draws, lattice.k, setup, rng)


# --------------------------------------------------------------------------
# One lattice for coordinates of different sensitivities
# --------------------------------------------------------------------------
_DIVISION_SLACK = Fraction(1, 1 << 52)


@dataclass(frozen=True)
class UnitNoiseLattice(_PowerOfTwoStep):
    """Noise for statistics normalised to sensitivity 1.

    Coordinate ``j`` of a statistic with sensitivity ``Delta_j`` (the sensitivities may
    differ, the noise multiplier ``scale`` is common) is released as ``Delta_j gamma
    fl(a_j + Z)`` with the key ``a_j = rint(clip(g_j / Delta_j, -Y, Y) / gamma)``
    (``lattice_key``, ``lattice_release`` in kernels) and ``Z`` a draw of the one law
    :meth:`buffer` serves every coordinate. Neighbouring keys differ by at most
    ``delta_units = floor((1 + 2^-52 Y) / gamma) + 1`` (the division rounds once), so
    each release is ``epsilon = D / t``-DP (Laplace) or ``rho = D^2 / (2 s^2)``-zCDP
    (Gaussian).
    """

    law: str
    k: int
    delta_units: int
    value_bound: float
    scale_units: Fraction  # t (Laplace) or s (Gaussian), in lattice units

    @property
    def sigma2_units(self):
        j, pc, f = _gaussian_params(self.scale_units**2)
        return Fraction(pc << j, 1 << f)

    @property
    def epsilon(self):
        if self.law != "laplace":
            raise AttributeError("a Gaussian lattice has rho, not epsilon")
        return Fraction(self.delta_units) / self.scale_units

    @property
    def rho(self):
        if self.law != "gaussian":
            raise AttributeError("a Laplace lattice has epsilon, not rho")
        return Fraction(self.delta_units**2) / (2 * self.sigma2_units)

    def buffer(self, rng, size=4096):
        """A :class:`NoiseBuffer` of this lattice's noise."""
        from ._buffer import NoiseBuffer

        return NoiseBuffer(self.law, self.scale_units, rng, size)


@functools.lru_cache(maxsize=256)
def _plan_unit(law, scale, value_bound):
    b, y = Fraction(scale), Fraction(value_bound)
    if not (b > 0 and y > 0):
        raise ValueError("scale and value_bound must be positive")
    div = y * _DIVISION_SLACK
    if div >= _ETA / 2:
        raise ValueError(f"value_bound must be below 2^35, got {value_bound!r}")
    if law == "laplace":
        claim = Fraction(laplace_epsilon(1.0, scale))
    else:
        claim = Fraction(gaussian_rho(1.0, scale))
    k = _floor_log2(min(b / (1 << LATTICE_RESOLUTION_BITS), _ETA - div))
    while True:
        gamma = Fraction(2) ** k
        d_units = math.floor((1 + div) / gamma) + 1
        if law == "laplace":
            units = Fraction(_ceil_frac(b / gamma))
            met = Fraction(d_units) / units <= claim
        else:
            units = b / gamma
            j, pc, f = _gaussian_params(units**2)
            met = Fraction(d_units**2) / (2 * Fraction(pc << j, 1 << f)) <= claim
        if met:
            break
        k -= 1
    if units >= _MAX_UNITS or y / gamma >= 1 << 53:
        raise ValueError("the noise scale or the keys exceed the lattice's 2^53 units")
    return UnitNoiseLattice(law, k, d_units, float(value_bound), units)


def plan_unit_laplace(scale, value_bound):
    """Lattice of per-coordinate Laplace releases with noise ``scale`` sensitivities.

    Each release is ``laplace_epsilon(1, scale)``-DP for its coordinate;
    ``value_bound`` bounds ``|g_j| / Delta_j`` (clipped to it), below 2^35.
    """
    return _plan_unit("laplace", float(scale), float(value_bound))


def plan_unit_gaussian(sigma, value_bound):
    """Lattice of per-coordinate Gaussian releases with noise ``sigma`` sensitivities.

    Each release is ``gaussian_rho(1, sigma)``-zCDP for its coordinate.
    """
    return _plan_unit("gaussian", float(sigma), float(value_bound))
