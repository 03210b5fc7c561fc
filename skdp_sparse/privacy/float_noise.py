"""Continuous noise in doubles, for compiled loops on the opt-out path.

These are the samplers of ``floating_point_safe=False``: textbook draws in double
precision, which the estimators flag with a ``PrivacyLeakWarning`` (a double's
rounding can reveal the value it was added to; see the security notes). The
default path draws exact integer noise through :mod:`skdp_sparse.privacy.discrete`.
Kept here so that every draw of noise, safe or not, lives in :mod:`skdp_sparse.privacy`;
the kernels of :mod:`skdp_sparse.optim` inline them.
"""

import numba
import numpy as np

__all__ = ["gaussian_noise", "laplace_noise", "gumbel_noise"]


@numba.njit(cache=True, inline="always")
def gaussian_noise(rng, scale):
    """One draw of ``N(0, scale^2)``."""
    return scale * rng.standard_normal()


@numba.njit(cache=True, inline="always")
def laplace_noise(rng, scale):
    """One draw of the Laplace law of scale ``scale``."""
    return scale * rng.laplace(0.0, 1.0)


@numba.njit(cache=True, inline="always")
def gumbel_noise(rng, scale):
    """One draw of ``scale`` times a standard Gumbel (the exponential mechanism by
    Gumbel-max: the argmax of ``score + gumbel_noise`` follows ``exp(score / scale)``)."""
    return -scale * np.log(rng.standard_exponential())
