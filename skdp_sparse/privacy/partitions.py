"""Private partition selection: which keys (terms, categories) to release at all.

Each row (document) contributes to at most ``m`` distinct keys, a public number
(``max_contributions``); the count ``c_t`` of key ``t`` is the number of rows that
contain it. The release adds Gaussian noise of standard deviation ``sigma`` to the
count of every key that occurs at least once, and keeps the keys whose noisy count
exceeds a threshold ``tau``, with their noisy counts.

Privacy (replace-one neighbours ``S, S'``, the row ``x`` replaced by ``x'``; the proof
is in ``doc/proofs/partition_selection.rst``). Let ``V`` be the keys that occur in both
``S`` and ``S'``. On ``V`` the release is the Gaussian mechanism on the count vector,
whose l2 sensitivity is ``sqrt(2 m)`` (at most ``m`` counts fall by one and ``m`` rise
by one), followed by the threshold (post-processing). The keys outside ``V`` are keys
of ``x`` (or ``x'``) used by that row only: at most ``m`` of them, each with count 1 on
its side, each kept with probability at most ``q = P(1 + Z > tau)``, independently of
``V``. Their release is ``(log(1 / (1 - delta_1)), delta_1)``-indistinguishable from
keeping none, with ``delta_1 = m q``; composed with the Gaussian part (whose zCDP or GDP
event the fit records) the whole release is private. ``tau`` is set from
``delta_1``: ``tau = 1 + sigma z`` with ``z = Phi^{-1}(1 - delta_1 / m)`` for Gaussian
noise in doubles, and the sub-Gaussian bound ``z = sqrt(2 ln(m / delta_1))`` of the
discrete Gaussian (Canonne, Kamath & Steinke 2020, Cor. 9) plus a margin of
``2^-20`` for the lattice rounding on the floating-point-safe path. A key used by one
row is therefore kept with probability at most ``delta_1 / m <= delta``.

This is the Gaussian thresholding of Korolova et al. (2009) and Gopi et al. (2020),
analysed as in Desfontaines, Voss, Gipson & Mandayam (2022) for replace-one
neighbours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from .accounting import PrivacyEvent, gaussian_mu, zcdp_rho
from .discrete import discrete_gaussian_event, plan_gaussian
from .mechanisms import GaussianMechanism, gaussian_sigma_for_rho

__all__ = ["PartitionSelectionPlan", "plan_partition_selection", "select_partitions",
           "single_row_event", "max_keys", "check_release", "THRESHOLD_SHARE"]

#: Share of ``delta`` given to the keys used by one row (``delta_1``); the rest is the
#: Gaussian part's. Half: the threshold grows with ``sqrt(log(1 / delta_1))`` only.
THRESHOLD_SHARE = 0.5

#: Margin, in noise standard deviations, of the threshold of the lattice release.
_LATTICE_MARGIN = 2.0**-20


@dataclass(frozen=True)
class PartitionSelectionPlan:
    """The release of a partition selection, fixed from public values.

    Attributes
    ----------
    epsilon, delta : float
        The budget the events compose to.
    max_contributions : int
        ``m``: the distinct keys a row may contribute to.
    sensitivity : float
        ``sqrt(2 m)``: l2 sensitivity of the counts of the keys common to both sides.
    sigma : float
        Noise standard deviation of each count (0 without noise).
    threshold : float
        ``tau``: a key is kept when its noisy count exceeds it (0.5 without noise: every
        key that occurs).
    single_row_probability : float
        Bound on the probability that a key used by one row only is kept
        (``delta_1 / m``).
    floating_point_safe : bool
    events : tuple of PrivacyEvent
        The Gaussian release and the keys of one row.
    """

    epsilon: float
    delta: float
    max_contributions: int
    sensitivity: float
    sigma: float
    threshold: float
    single_row_probability: float
    floating_point_safe: bool
    events: tuple


def _gaussian_part(epsilon, delta, sensitivity, safe):
    """``(sigma, event)``: the smallest noise whose release of l2 sensitivity
    ``sensitivity`` composes with nothing else to ``(epsilon, delta)``."""
    if safe:
        rho = zcdp_rho(epsilon, delta)
        sigma = gaussian_sigma_for_rho(sensitivity, rho)
        return sigma, discrete_gaussian_event(sensitivity, sigma)
    sigma = sensitivity / gaussian_mu(epsilon, delta)
    while gaussian_mu(epsilon, delta) < sensitivity / sigma:
        sigma = math.nextafter(sigma, math.inf)
    return sigma, PrivacyEvent.gaussian(sensitivity / sigma)


def single_row_event(delta_1):
    """The event of the keys used by one row: ``(log(1 / (1 - delta_1)), delta_1)``."""
    return PrivacyEvent.approximate(-math.log1p(-delta_1), delta_1,
                                    name="partition selection: keys of one row")


def plan_partition_selection(epsilon, delta, max_contributions, *,
                             floating_point_safe=True, threshold_share=THRESHOLD_SHARE):
    """The :class:`PartitionSelectionPlan` of a budget (``0 < delta < 1``; ``epsilon``
    may be ``inf``: no noise, every key that occurs is kept)."""
    epsilon, delta = float(epsilon), float(delta)
    m = int(max_contributions)
    if m < 1:
        raise ValueError(f"max_contributions must be at least 1, got {max_contributions!r}")
    sensitivity = float(np.nextafter(math.sqrt(2.0 * m), np.inf))
    safe = bool(floating_point_safe)
    if math.isinf(epsilon):
        event = PrivacyEvent.approximate(math.inf, 0.0, name="non-private (epsilon=inf)")
        return PartitionSelectionPlan(epsilon, delta, m, sensitivity, 0.0, 0.5, 1.0, safe,
                                      (event,))
    if not 0 < delta < 1:
        raise ValueError("partition selection needs 0 < delta < 1 (a key used by one row "
                         f"is kept with probability at most delta); got delta={delta!r}")
    delta_1 = float(threshold_share) * delta
    event_1 = single_row_event(delta_1)
    sigma, event = _gaussian_part(epsilon - event_1.epsilon, delta - delta_1, sensitivity,
                                  safe)
    per_key = delta_1 / m
    if safe:
        z = math.sqrt(2.0 * math.log(1.0 / per_key)) + _LATTICE_MARGIN
    else:
        z = float(norm.isf(per_key))
    event = PrivacyEvent(f"partition selection: counts ({event.name})", event.epsilon,
                         event.delta, event.rho, event.mu, event.count, event.rdp)
    return PartitionSelectionPlan(epsilon, delta, m, sensitivity, sigma, 1.0 + sigma * z,
                                  per_key, safe, (event, event_1))


def max_keys(plan, n_rows):
    """The public bound on the number of keys: each of ``n_rows`` rows uses at most
    ``plan.max_contributions``."""
    return max(int(n_rows) * plan.max_contributions, 1)


def check_release(plan, n_rows):
    """Raise now, from public values, if the safe release of :func:`select_partitions`
    cannot be made for ``n_rows`` rows."""
    if plan.sigma > 0 and plan.floating_point_safe:
        plan_gaussian(plan.sensitivity, plan.sigma, max_keys(plan, n_rows))


def select_partitions(counts, plan, rng, *, n_rows):
    """``(kept, noisy)``: the indices of the keys kept (increasing) and their noisy
    counts, from the exact ``counts`` of ``n_rows`` rows (each key at least once, each
    row contributing to at most ``plan.max_contributions`` keys).

    How many keys occur is private: the safe release's lattice is chosen for the
    public bound :func:`max_keys`, never for ``counts.size``."""
    counts = np.asarray(counts, dtype=np.float64)
    if plan.sigma == 0:
        noisy = counts.copy()
    else:
        mechanism = GaussianMechanism(plan.sensitivity, sigma=plan.sigma,
                                      floating_point_safe=plan.floating_point_safe)
        noisy = (mechanism.randomise(counts, rng, dim=max_keys(plan, n_rows))
                 if counts.size else counts.copy())
    kept = np.flatnonzero(noisy > plan.threshold)
    return kept, noisy[kept]
