"""Additive-noise and selection mechanisms.

Each mechanism states the sensitivity it assumes, for **replace-one**
neighbouring datasets (same n, one row changed), and the theorem that makes it
private. A mechanism is built either from a noise scale or from a target budget
(calibration); :meth:`event` returns the :class:`~skdp_sparse.privacy.accounting.PrivacyEvent`
that a fit records for one call.

Noise is drawn in vectorised form from a :class:`numpy.random.Generator`;
``n_draws`` repeats the release independently (used by the privacy audits).

Floating-point safety. ``value + rng.laplace(...)`` computed in doubles leaks the
low-order bits of ``value`` (Mironov 2012). With ``floating_point_safe=True`` the
Laplace and Gaussian mechanisms instead round ``value`` to a lattice ``gamma Z``
(``gamma`` a power of two fixed by public quantities) and add exactly sampled
discrete Laplace or discrete Gaussian noise in units of ``gamma``; the rounding is
paid for by a ``2^-16`` relative slack in the sensitivity, and the reported event
is exactly the guarantee of what is run. See :mod:`skdp_sparse.privacy.discrete`.
The default is safe for the Laplace mechanism (its noise grows by a relative
``2^-16``, its run time by a factor 1.3 to 1.7); the Gaussian mechanism keeps the
continuous path by default, because the discrete Gaussian is accounted by zCDP,
which needs 4 to 9% more noise than the analytic calibration for the same
(epsilon, delta), its sampler takes about 5 times as long, and the class also
serves to calibrate continuous noise drawn elsewhere.
"""

from __future__ import annotations

import math

import numpy as np

from . import discrete
from .accounting import PrivacyEvent, calibrate_scale, compose, gaussian_epsilon, zcdp_epsilon

__all__ = ["LaplaceMechanism", "GaussianMechanism", "ExponentialMechanism",
           "gaussian_sigma_for_rho"]


def _check_positive(name, value, allow_inf=False):
    value = float(value)
    if not (value > 0) or (math.isinf(value) and not allow_inf) or math.isnan(value):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return value


def _noisy(value, draw, n_draws):
    value = np.asarray(value, dtype=float)
    shape = value.shape if n_draws is None else (n_draws, *value.shape)
    return value + draw(shape)


class LaplaceMechanism:
    """Release ``f(S) + Lap(b)^d``.

    Sensitivity: ``sensitivity`` is the l1 sensitivity
    ``Delta_1 = sup ||f(S) - f(S')||_1`` over replace-one neighbours.

    Privacy: epsilon-DP with ``epsilon = Delta_1 / b`` (Dwork, McSherry, Nissim &
    Smith 2006; Dwork & Roth 2014, Thm 3.6). ``b`` is the Laplace scale (density
    proportional to ``exp(-|x| / b)``), not the standard deviation.

    With ``floating_point_safe=True`` (the default) each coordinate is rounded to a
    lattice ``gamma Z`` and receives exact discrete Laplace noise of scale ``b``
    (in units of ``gamma``, rounded up); the release is a function of an integer
    vector, so its support does not depend on ``f(S)``. The rounding can move
    neighbouring vectors apart by ``d gamma`` more in l1, and ``gamma`` is chosen
    so that this is at most ``2^-16 Delta_1``: the guarantee is
    ``epsilon = (1 + 2^-16) Delta_1 / b``, and calibration to a target epsilon
    makes ``b`` larger by that factor (:func:`discrete.laplace_epsilon`).

    Parameters
    ----------
    sensitivity : float
        l1 sensitivity of the released statistic.
    epsilon : float, optional
        Target epsilon; sets the smallest scale meeting it.
    scale : float, optional
        Laplace scale b, if given instead of epsilon.
    floating_point_safe : bool, default=True
        Lattice rounding and exact discrete noise (see above), or the textbook
        ``value + rng.laplace(0, b)`` in doubles, which is not private against an
        adversary who reads the low-order bits of the output.
    """

    def __init__(self, sensitivity, *, epsilon=None, scale=None, floating_point_safe=True):
        self.sensitivity = _check_positive("sensitivity", sensitivity)
        self.floating_point_safe = bool(floating_point_safe)
        if (epsilon is None) == (scale is None):
            raise ValueError("give exactly one of epsilon and scale")
        if epsilon is not None:
            self.epsilon = _check_positive("epsilon", epsilon, allow_inf=True)
            if math.isinf(self.epsilon):
                self.scale = 0.0
            elif self.floating_point_safe:
                self.scale = discrete.laplace_scale_for(self.sensitivity, self.epsilon)
            else:
                self.scale = self.sensitivity / self.epsilon
        else:
            self.scale = _check_positive("scale", scale)
            if self.floating_point_safe:
                self.epsilon = discrete.laplace_epsilon(self.sensitivity, self.scale)
            else:
                self.epsilon = self.sensitivity / self.scale

    def randomise(self, value, rng, n_draws=None):
        """``value + noise``; with ``n_draws``, that many independent releases stacked.

        Each release of a ``d``-coordinate ``value`` is private for the l1
        sensitivity, whatever ``d`` is (the lattice adapts to ``d``).
        """
        if self.scale == 0:
            return _noisy(value, lambda s: np.zeros(s), n_draws)
        if self.floating_point_safe:
            return discrete.release_laplace(value, self.sensitivity, self.scale, rng, n_draws)
        return _noisy(value, lambda s: rng.laplace(0.0, self.scale, size=s), n_draws)

    def event(self, count=1):
        name = "discrete_laplace" if self.floating_point_safe else "laplace"
        return PrivacyEvent.pure(self.epsilon, count=count, name=name)


class GaussianMechanism:
    """Release ``f(S) + N(0, sigma^2 I)``.

    Sensitivity: ``sensitivity`` is the l2 sensitivity
    ``Delta_2 = sup ||f(S) - f(S')||_2`` over replace-one neighbours.

    Privacy: with ``mu = Delta_2 / sigma`` it is (epsilon, delta)-DP exactly when
    ``delta >= Phi(mu/2 - epsilon/mu) - e^epsilon Phi(-mu/2 - epsilon/mu)``
    (analytic Gaussian mechanism, Balle & Wang 2018, Thm 8), valid for every
    epsilon > 0; it is also ``mu^2/2``-zCDP (Bun & Steinke 2016, Prop. 1.6) and
    mu-GDP (Dong, Roth & Su 2019), which the accountant uses to compose it.

    With ``floating_point_safe=True`` each coordinate is rounded to a lattice
    ``gamma Z`` and receives exact discrete Gaussian noise with variance parameter
    ``sigma^2`` (in units of ``gamma``, rounded up). The discrete Gaussian is
    ``||a - a'||_2^2 / (2 sigma^2)``-zCDP on integer vectors (Canonne, Kamath &
    Steinke 2020), but not exactly mu-GDP, so the event carries ``rho`` only:
    ``rho = ((1 + 2^-16) Delta_2 / sigma)^2 / 2``, the ``2^-16`` paying for the
    rounding (:func:`discrete.gaussian_rho`). Calibration to (epsilon, delta)
    then goes through the zCDP conversion and needs 4 to 9% more noise than the
    analytic calibration.

    Parameters
    ----------
    sensitivity : float
        l2 sensitivity of the released statistic.
    epsilon, delta : float, optional
        Target budget; sigma is the smallest value meeting it (analytic
        calibration, or the zCDP conversion of the safe path).
    sigma : float, optional
        Noise standard deviation, if given instead of (epsilon, delta).
    floating_point_safe : bool, default=False
        Lattice rounding and exact discrete Gaussian noise (see above), or
        ``value + rng.normal(0, sigma)`` in doubles, which is not private against
        an adversary who reads the low-order bits of the output.
    """

    def __init__(self, sensitivity, *, epsilon=None, delta=None, sigma=None,
                 floating_point_safe=False):
        self.sensitivity = _check_positive("sensitivity", sensitivity)
        self.floating_point_safe = bool(floating_point_safe)
        if sigma is not None:
            if epsilon is not None or delta is not None:
                raise ValueError("give either sigma or (epsilon, delta), not both")
            self.sigma = _check_positive("sigma", sigma)
        else:
            if epsilon is None or delta is None:
                raise ValueError("give sigma or both epsilon and delta")
            epsilon = _check_positive("epsilon", epsilon, allow_inf=True)
            if not (0 < delta < 1):
                raise ValueError(f"the Gaussian mechanism needs 0 < delta < 1, got {delta}")
            if math.isinf(epsilon):
                self.sigma = 0.0
            elif self.floating_point_safe:
                self.sigma = self.sensitivity * calibrate_scale(
                    lambda s: [discrete.discrete_gaussian_event(1.0, s)], epsilon, delta
                )
                # Rescaling by the sensitivity rounds; step up until the real event fits.
                while compose([self.event()], delta)[0] > epsilon:
                    self.sigma = math.nextafter(self.sigma, math.inf)
            else:
                self.sigma = self.sensitivity * calibrate_scale(
                    lambda s: [PrivacyEvent.gaussian(1.0 / s)], epsilon, delta
                )

    @property
    def mu(self):
        """``Delta_2 / sigma`` of the continuous mechanism; None on the safe path."""
        if self.floating_point_safe:
            return None
        return math.inf if self.sigma == 0 else self.sensitivity / self.sigma

    @property
    def rho(self):
        """zCDP parameter of one release."""
        if self.sigma == 0:
            return math.inf
        if self.floating_point_safe:
            return discrete.gaussian_rho(self.sensitivity, self.sigma)
        return 0.5 * self.mu**2

    def epsilon_at(self, delta):
        """Epsilon of one release at the given delta."""
        if self.floating_point_safe:
            return zcdp_epsilon(self.rho, delta)
        return gaussian_epsilon(self.mu, delta)

    def randomise(self, value, rng, n_draws=None, dim=None):
        """``value + noise``; with ``n_draws``, that many independent releases stacked.
        ``dim``: a public bound on the size of ``value`` when the size is private; the
        safe path's lattice is chosen from it (:func:`discrete.release_gaussian`)."""
        if self.sigma == 0:
            return _noisy(value, lambda s: np.zeros(s), n_draws)
        if self.floating_point_safe:
            return discrete.release_gaussian(value, self.sensitivity, self.sigma, rng, n_draws,
                                             dim=dim)
        return _noisy(value, lambda s: rng.normal(0.0, self.sigma, size=s), n_draws)

    def clip(self, released, low, high):
        """A release clipped to the public range ``[low, high]`` (post-processing: a
        noisy score can leave the range its statistic lies in). On the safe path the
        ends are the lattice points just inside the range, so the result stays on the
        release's lattice."""
        if self.floating_point_safe and self.sigma > 0:
            step = float(discrete.plan_gaussian(self.sensitivity, self.sigma, 1).gamma)
            low, high = math.ceil(low / step) * step, math.floor(high / step) * step
        return min(max(float(released), low), high)

    def event(self, count=1):
        if self.floating_point_safe:
            if self.sigma == 0:
                return PrivacyEvent("discrete_gaussian", math.nan, 0.0, math.inf, None,
                                    int(count))
            return discrete.discrete_gaussian_event(self.sensitivity, self.sigma, count)
        return PrivacyEvent.gaussian(self.mu, count=count)


class ExponentialMechanism:
    """Select an index ``j`` with probability proportional to ``exp(epsilon u_j / (2 Delta))``.

    Sensitivity: every score ``u_j(S)`` changes by at most ``Delta``
    (``sensitivity``) between replace-one neighbours; scores need not be monotone.

    Privacy: epsilon-DP (McSherry & Talwar 2007, Thm 6); having range bounded
    by epsilon it is also epsilon^2/8-zCDP (Cesar & Rogers 2021, Lemma 3.2).
    Sampling uses the Gumbel-max trick: ``argmax_j epsilon u_j / (2 Delta) + G_j``
    with iid standard Gumbel ``G_j`` has exactly that distribution.
    """

    def __init__(self, sensitivity, *, epsilon):
        self.sensitivity = _check_positive("sensitivity", sensitivity)
        self.epsilon = _check_positive("epsilon", epsilon, allow_inf=True)

    def select(self, scores, rng, n_draws=None):
        """Index of the selected score (an array of ``n_draws`` indices if given)."""
        scores = np.asarray(scores, dtype=float)
        if math.isinf(self.epsilon):
            best = int(np.argmax(scores))
            return best if n_draws is None else np.full(n_draws, best)
        logits = scores * (self.epsilon / (2 * self.sensitivity))
        shape = scores.shape if n_draws is None else (n_draws, *scores.shape)
        return np.argmax(logits + rng.gumbel(size=shape), axis=-1)

    def event(self, count=1):
        return PrivacyEvent.exponential(self.epsilon, count=count)


def gaussian_sigma_for_rho(sensitivity, rho, floating_point_safe=True):
    """Smallest ``sigma`` whose Gaussian release of l2 sensitivity ``sensitivity`` is
    ``rho``-zCDP (on the floating-point-safe path, the rounding's slack included)."""
    slack = 1 + discrete.SENSITIVITY_SLACK if floating_point_safe else 1.0
    sigma = slack * sensitivity / math.sqrt(2.0 * rho)
    # The square root rounds: step up until the guarantee holds.
    while GaussianMechanism(sensitivity, sigma=sigma,
                            floating_point_safe=floating_point_safe).rho > rho:
        sigma = math.nextafter(sigma, math.inf)
    return sigma
