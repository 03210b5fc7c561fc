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

Weighted release (``weighting="uniform"``, the weighted Gaussian policy of Gopi,
Gulhane, Kulkarni, Shen, Shokouhi, Yekhanin 2020). A row with ``k <= m`` keys gives
each of them the weight ``w_k = sqrt(m / k)`` (rounded down to a multiple of
``2^-WEIGHT_BITS``, so that sums are exact) instead of 1: the squared weights of a row
sum to at most ``m``, as the counts' do, so the l2 sensitivity, and the noise, are the
same ``sqrt(2 m)``, while a key of rows with few keys gathers up to ``sqrt(m)`` per
row. The keys of one row may now carry up to ``sqrt(m)`` each, but a row with ``k``
keys has at most ``k`` of them: ``tau = max_k (w_k + sigma z_k)`` with
``P(Z > sigma z_k) <= delta_1 / k`` keeps each row's own keys with probability at
most ``delta_1`` whatever ``k``. The counts are the case ``w_k = 1``, where the
maximum is at ``k = m`` (the threshold above).

This is the Gaussian thresholding of Korolova et al. (2009) and Gopi et al. (2020),
analysed as in Desfontaines, Voss, Gipson & Mandayam (2022) for replace-one
neighbours.

Public keys (:func:`plan_public_counts`). When the set of keys is public (a vocabulary
from another corpus), no key is a key of one row: the release is the Gaussian
mechanism of the same sensitivity ``sqrt(2 m)`` on the counts of every public key
(0 included), with the whole budget and no threshold, and the safe release's lattice
is chosen for the number of public keys.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from .accounting import PrivacyEvent, gaussian_mu, zcdp_rho
from .discrete import discrete_gaussian_event, plan_gaussian
from .mechanisms import GaussianMechanism, gaussian_sigma_for_rho

__all__ = ["PartitionSelectionPlan", "plan_partition_selection", "plan_public_counts",
           "select_partitions",
           "single_row_event", "max_keys", "check_release", "row_weight", "THRESHOLD_SHARE",
           "WEIGHTINGS", "WEIGHT_BITS"]

#: Share of ``delta`` given to the keys used by one row (``delta_1``); the rest is the
#: Gaussian part's. Half: the threshold grows with ``sqrt(log(1 / delta_1))`` only.
THRESHOLD_SHARE = 0.5

#: Margin, in noise standard deviations, of the threshold of the lattice release.
_LATTICE_MARGIN = 2.0**-20

#: What a row gives each of its keys: 1 ("count"), or ``sqrt(m / k)`` to each of its
#: ``k`` keys ("uniform": rows with few keys weigh more, at the same sensitivity).
WEIGHTINGS = ("count", "uniform")

#: The weights are multiples of ``2^-WEIGHT_BITS``: their sums are exact in doubles
#: (below ``2^53`` units), so neighbouring sums differ by the rows' weights exactly.
WEIGHT_BITS = 20


@dataclass(frozen=True)
class PartitionSelectionPlan:
    """The release of a partition selection, fixed from public values.

    Attributes
    ----------
    epsilon, delta : float
        The budget the events compose to.
    max_contributions : int
        ``m``: the distinct keys a row may contribute to.
    weighting : {"count", "uniform"}
        What a row with ``k`` keys adds to each: 1, or ``sqrt(m / k)``
        (:func:`row_weight`).
    sensitivity : float
        ``sqrt(2 m)``: l2 sensitivity of the (weighted) counts of the keys common to
        both sides.
    sigma : float
        Noise standard deviation of each count (0 without noise).
    threshold : float
        ``tau``: a key is kept when its noisy count exceeds it (0.5 without noise: every
        key that occurs).
    single_row_probability : float
        Bound on the probability that a key used by one row only is kept, whatever the
        row: ``delta_1 / m`` for counts, ``delta_1`` weighted (a row with one key).
    floating_point_safe : bool
    events : tuple of PrivacyEvent
        The Gaussian release and the keys of one row (the Gaussian release alone for
        public keys).
    public_keys : int or None
        The number of keys when they are public (:func:`plan_public_counts`): every one
        is released, and the lattice is chosen for that number.
    """

    epsilon: float
    delta: float
    max_contributions: int
    weighting: str
    sensitivity: float
    sigma: float
    threshold: float
    single_row_probability: float
    floating_point_safe: bool
    events: tuple
    public_keys: int | None = None


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


def row_weight(plan, n_keys):
    """What a row with ``n_keys`` keys (``1 <= n_keys <= m``) adds to each of them, in
    units of ``2^-WEIGHT_BITS``: ``2^WEIGHT_BITS`` for counts, ``floor(2^WEIGHT_BITS
    sqrt(m / n_keys))`` weighted, computed in integers so that ``n_keys`` times its
    square is at most ``m 4^WEIGHT_BITS`` exactly (the sensitivity's premise)."""
    k = int(n_keys)
    if not 1 <= k <= plan.max_contributions:
        raise ValueError(f"a row has 1 to {plan.max_contributions} keys, got {n_keys!r}")
    if plan.weighting == "count":
        return 1 << WEIGHT_BITS
    return math.isqrt((plan.max_contributions << (2 * WEIGHT_BITS)) // k)


def _tail_z(per_key, safe):
    """``z`` with ``P(Z > sigma z) <= per_key`` (an array): the sub-Gaussian bound of the
    discrete Gaussian (Canonne, Kamath & Steinke 2020, Cor. 9) with the lattice margin,
    or the Gaussian quantile."""
    if safe:
        return np.sqrt(2.0 * np.log(1.0 / per_key)) + _LATTICE_MARGIN
    return norm.isf(per_key)


def _threshold(plan, delta_1):
    """``max_k (w_k + sigma z_k)``, ``P(Z > sigma z_k) <= delta_1 / k``, ``w_k`` the
    weight of a row with ``k`` keys: such a row keeps one of its own keys with
    probability at most ``delta_1``. For counts (``w_k = 1``) the maximum is at
    ``k = m``."""
    m, safe = plan.max_contributions, plan.floating_point_safe
    if plan.weighting == "count":
        per_key = delta_1 / m
        z = (math.sqrt(2.0 * math.log(1.0 / per_key)) + _LATTICE_MARGIN if safe
             else float(norm.isf(per_key)))
        return 1.0 + plan.sigma * z
    k = np.arange(1, m + 1)
    # The weights released, exactly (multiples of 2^-WEIGHT_BITS).
    weight = np.array([row_weight(plan, j) for j in k], dtype=np.float64) / 2.0**WEIGHT_BITS
    return float(np.max(weight + plan.sigma * _tail_z(delta_1 / k, safe)))


def _non_private():
    return PrivacyEvent.approximate(math.inf, 0.0, name="non-private (epsilon=inf)")


def _public_values(epsilon, delta, max_contributions, weighting, floating_point_safe):
    """``(epsilon, delta, m, sensitivity, safe)``, checked: the l2 sensitivity
    ``sqrt(2 m)`` of the (weighted) counts, rounded up."""
    m = int(max_contributions)
    if m < 1:
        raise ValueError(f"max_contributions must be at least 1, got {max_contributions!r}")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    sensitivity = float(np.nextafter(math.sqrt(2.0 * m), np.inf))
    return float(epsilon), float(delta), m, sensitivity, bool(floating_point_safe)


def plan_partition_selection(epsilon, delta, max_contributions, *,
                             floating_point_safe=True, threshold_share=THRESHOLD_SHARE,
                             weighting="count"):
    """The :class:`PartitionSelectionPlan` of a budget (``0 < delta < 1``; ``epsilon``
    may be ``inf``: no noise, every key that occurs is kept). ``weighting`` is one of
    :data:`WEIGHTINGS`."""
    epsilon, delta, m, sensitivity, safe = _public_values(
        epsilon, delta, max_contributions, weighting, floating_point_safe)
    if math.isinf(epsilon):
        # Every weight is at least 1: a threshold of 0.5 keeps every key that occurs.
        return PartitionSelectionPlan(epsilon, delta, m, weighting, sensitivity, 0.0, 0.5,
                                      1.0, safe, (_non_private(),))
    if not 0 < delta < 1:
        raise ValueError("partition selection needs 0 < delta < 1 (a key used by one row "
                         f"is kept with probability at most delta); got delta={delta!r}")
    delta_1 = float(threshold_share) * delta
    event_1 = single_row_event(delta_1)
    sigma, event = _gaussian_part(epsilon - event_1.epsilon, delta - delta_1, sensitivity,
                                  safe)
    per_key = delta_1 / m if weighting == "count" else delta_1
    event = PrivacyEvent(f"partition selection: counts ({event.name})", event.epsilon,
                         event.delta, event.rho, event.mu, event.count, event.rdp)
    plan = PartitionSelectionPlan(epsilon, delta, m, weighting, sensitivity, sigma, math.nan,
                                  per_key, safe, (event, event_1))
    return dataclasses.replace(plan, threshold=_threshold(plan, delta_1))


def plan_public_counts(epsilon, delta, max_contributions, n_keys, *,
                       floating_point_safe=True, weighting="count"):
    """The plan of the noisy counts of ``n_keys`` public keys: every key released, 0
    counts included, no threshold (a public key is no key of one row), the Gaussian
    mechanism of l2 sensitivity ``sqrt(2 m)`` with the whole ``(epsilon, delta)``
    (``0 < delta < 1``; ``epsilon = inf``: exact counts). :func:`select_partitions`
    makes the release."""
    epsilon, delta, m, sensitivity, safe = _public_values(
        epsilon, delta, max_contributions, weighting, floating_point_safe)
    n_keys = int(n_keys)
    if n_keys < 1:
        raise ValueError(f"a public set of keys has at least one key, got {n_keys!r}")
    if math.isinf(epsilon):
        return PartitionSelectionPlan(epsilon, delta, m, weighting, sensitivity, 0.0,
                                      -math.inf, 0.0, safe, (_non_private(),), n_keys)
    if not 0 < delta < 1:
        raise ValueError("the Gaussian release of the counts needs 0 < delta < 1; got "
                         f"delta={delta!r}")
    sigma, event = _gaussian_part(epsilon, delta, sensitivity, safe)
    event = PrivacyEvent(f"public keys: counts ({event.name})", event.epsilon, event.delta,
                         event.rho, event.mu, event.count, event.rdp)
    return PartitionSelectionPlan(epsilon, delta, m, weighting, sensitivity, sigma,
                                  -math.inf, 0.0, safe, (event,), n_keys)


def max_keys(plan, n_rows):
    """The public bound on the number of keys: the number of public keys, or each of
    ``n_rows`` rows using at most ``plan.max_contributions``."""
    if plan.public_keys is not None:
        return plan.public_keys
    return max(int(n_rows) * plan.max_contributions, 1)


def check_release(plan, n_rows):
    """Raise now, from public values, if the release of :func:`select_partitions` cannot
    be made for ``n_rows`` rows: weighted sums that could exceed ``2^53`` units (no
    longer exact in doubles), or a safe release without a lattice."""
    if int(n_rows) * row_weight(plan, 1) >= 2**53:
        raise ValueError(
            f"partition selection of {n_rows} rows with max_contributions="
            f"{plan.max_contributions} and weighting={plan.weighting!r}: a key's sum could "
            "exceed 2^53 units of 2^-20 and would not be exact; split the rows or count "
            "(weighting='count', DPTfidfVectorizer's vocabulary_weighting='count')")
    if plan.sigma > 0 and plan.floating_point_safe:
        plan_gaussian(plan.sensitivity, plan.sigma, max_keys(plan, n_rows))


def select_partitions(counts, plan, rng, *, n_rows):
    """``(kept, noisy)``: the indices of the keys kept (increasing) and their noisy
    counts, from the exact ``counts`` of ``n_rows`` rows (each key at least once, or
    every public key of a :func:`plan_public_counts` plan, each row contributing to at
    most ``plan.max_contributions`` keys, the weights of :func:`row_weight` times
    ``2^-WEIGHT_BITS``).

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
