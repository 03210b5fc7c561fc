"""Additive-noise and selection mechanisms.

Each mechanism states the sensitivity it assumes, for **replace-one**
neighbouring datasets (same n, one row changed), and the theorem that makes it
private. A mechanism is built either from a noise scale or from a target budget
(calibration); :meth:`event` returns the :class:`~skdp_sparse.privacy.accounting.PrivacyEvent`
that a fit records for one call.

Noise is drawn in vectorised form from a :class:`numpy.random.Generator`;
``n_draws`` repeats the release independently (used by the privacy audits).
"""

from __future__ import annotations

import math

import numpy as np

from .accounting import PrivacyEvent, calibrate_scale, gaussian_epsilon

__all__ = ["LaplaceMechanism", "GaussianMechanism", "ExponentialMechanism"]


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

    Parameters
    ----------
    sensitivity : float
        l1 sensitivity of the released statistic.
    epsilon : float, optional
        Target epsilon; sets ``scale = sensitivity / epsilon``.
    scale : float, optional
        Laplace scale b, if given instead of epsilon.
    """

    def __init__(self, sensitivity, *, epsilon=None, scale=None):
        self.sensitivity = _check_positive("sensitivity", sensitivity)
        if (epsilon is None) == (scale is None):
            raise ValueError("give exactly one of epsilon and scale")
        if epsilon is not None:
            self.epsilon = _check_positive("epsilon", epsilon, allow_inf=True)
            self.scale = self.sensitivity / self.epsilon
        else:
            self.scale = _check_positive("scale", scale)
            self.epsilon = self.sensitivity / self.scale

    def randomise(self, value, rng, n_draws=None):
        """``value + noise``; with ``n_draws``, that many independent releases stacked."""
        if self.scale == 0:
            return _noisy(value, lambda s: np.zeros(s), n_draws)
        return _noisy(value, lambda s: rng.laplace(0.0, self.scale, size=s), n_draws)

    def event(self, count=1):
        return PrivacyEvent.pure(self.epsilon, count=count, name="laplace")


class GaussianMechanism:
    """Release ``f(S) + N(0, sigma^2 I)``.

    Sensitivity: ``sensitivity`` is the l2 sensitivity
    ``Delta_2 = sup ||f(S) - f(S')||_2`` over replace-one neighbours.

    Privacy: with ``mu = Delta_2 / sigma`` it is (epsilon, delta)-DP exactly when
    ``delta >= Phi(mu/2 - epsilon/mu) - e^epsilon Phi(-mu/2 - epsilon/mu)``
    (analytic Gaussian mechanism, Balle & Wang 2018, Thm 8), valid for every
    epsilon > 0; it is also ``mu^2/2``-zCDP (Bun & Steinke 2016, Prop. 1.6) and
    mu-GDP (Dong, Roth & Su 2019), which the accountant uses to compose it.

    Parameters
    ----------
    sensitivity : float
        l2 sensitivity of the released statistic.
    epsilon, delta : float, optional
        Target budget; sigma is the smallest value meeting it (analytic calibration).
    sigma : float, optional
        Noise standard deviation, if given instead of (epsilon, delta).
    """

    def __init__(self, sensitivity, *, epsilon=None, delta=None, sigma=None):
        self.sensitivity = _check_positive("sensitivity", sensitivity)
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
            else:
                self.sigma = self.sensitivity * calibrate_scale(
                    lambda s: [PrivacyEvent.gaussian(1.0 / s)], epsilon, delta
                )

    @property
    def mu(self):
        return math.inf if self.sigma == 0 else self.sensitivity / self.sigma

    def epsilon_at(self, delta):
        """Epsilon of one release at the given delta."""
        return gaussian_epsilon(self.mu, delta)

    def randomise(self, value, rng, n_draws=None):
        """``value + noise``; with ``n_draws``, that many independent releases stacked."""
        if self.sigma == 0:
            return _noisy(value, lambda s: np.zeros(s), n_draws)
        return _noisy(value, lambda s: rng.normal(0.0, self.sigma, size=s), n_draws)

    def event(self, count=1):
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
