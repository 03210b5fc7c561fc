"""Private screening of the features that matter, and the budget of a fit's releases.

For ``p >> n`` most coordinates carry no signal, and a solver that adds noise to all
of them drowns the few that do. Screening spends a share of the budget on one
Gaussian release of the **label association** of every feature, the gradient of
the loss at the null model (``w = 0``, intercept ``b0``)::

    A_jk = sum_i r_ik xt_ij,    r_ik = -l'(y_ik, b0_k),

with ``xt_i`` the row clipped to l2 norm ``L = norm_bound``. For the logistic loss
``b0_k = logit(p_k)`` and ``r_ik = 1[y_ik = +1] - p_k`` with ``p_k`` the class rate of
problem ``k``, released first as a noisy count; ``A`` is then the difference of the
class sums, centred, the statistic that ranks features by how much the loss falls
when they enter the model (Gauss-Southwell). Other losses take ``b0 = 0`` and ``r``
clipped to the loss's derivative bound ``G``.

Sensitivity (replace-one): a row moves ``A`` by ``||r x - r' x'||_F <= 2 L D`` with
``D = sqrt(sum_k max(p_k, 1 - p_k)^2)`` (``G sqrt(K)`` for other losses), whatever the
labels; ``p`` is public once released. The class counts move by at most 1 each,
``sqrt(K)`` in l2.

The coordinates kept (``feature_selection``):

* ``"threshold"`` (``"auto"`` of the solvers that screen): those whose noisy
  association exceeds ``SCREENING_THRESHOLD`` noise standard deviations, ranked by
  ``max_k |A_jk|``; at least the first one;
* ``"sure"``: the same with the threshold that minimises Stein's unbiased estimate of
  the squared error of the soft-thresholded association (SureShrink, Donoho &
  Johnstone 1995; :func:`sure_threshold`), computed from the released association
  alone: high where few coordinates carry signal (one-hot click logs: a few frequent
  values among 10^6), low where many do;
* an integer ``k``: the ``k`` first of that ranking (all of them without noise is the
  exact top-k);
* ``"none"``: every coordinate.

The released association, soft-thresholded at the cut, is also the first gradient
of a solver that starts from the null model (:mod:`.screened_newton`). Everything
after the release is post-processing.

Budget. A fit whose releases are all Gaussian splits one budget by shares: Gaussian
mechanisms compose into one Gaussian mechanism of ratio ``mu = sqrt(sum mu_i^2)``
(Dong, Roth & Su 2019), so the ``mu`` of the analytic Gaussian that is exactly
``(epsilon, delta)``-DP is split as ``mu_i^2 = share_i mu^2``. On the
floating-point-safe path (lattice sums, discrete Gaussian noise) each release is
bounded by the continuous mechanism at a ratio larger by ``(1 + 2^-16)(1 + 2^-20)``
(``doc/proofs/pld.rst``), which its noise pays. Either way the events compose to
``(epsilon, delta)`` exactly (to the calibration's tolerance, on the private side),
by their privacy loss distributions, with the other steps of the fit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from ..optim.losses import LogisticLoss
from ..privacy.accounting import PrivacyEvent, compose, gaussian_mu
from ..privacy.discrete import SENSITIVITY_SLACK
from ..privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from ..privacy.pld import DISCRETE_GAUSSIAN_SLACK
from ..privacy.subsampling import subsampled_gaussian_event
from ..utils._ranking import top_k
from ._base import non_private_events

__all__ = [
    "CLASS_BALANCE_SHARE",
    "check_exact_units",
    "SCREENING_THRESHOLD",
    "class_balance_start",
    "gaussian_release_event",
    "release_mu",
    "plan_class_balance",
    "ScreeningPlan",
    "Screened",
    "noise_units",
    "release",
    "plan_screening",
    "screen",
    "sure_threshold",
]

#: Soft threshold of the screening, in noise standard deviations of the association:
#: a coordinate without signal passes with probability ``2 Phi(-1) = 32%`` and keeps
#: a weight whose mean square is 15% of the raw release's; a coordinate with a strong
#: signal keeps its weight with a bias of one standard deviation.
SCREENING_THRESHOLD = 1.0


#: Share of a gradient solver's (epsilon, delta) that buys the noisy class balance its
#: intercept starts from (:func:`plan_class_balance`).
CLASS_BALANCE_SHARE = 0.05


def plan_class_balance(problem, bounds, epsilon, delta, floating_point_safe, n_targets,
                       name):
    """``(mechanism, events)`` of the class-balance release that starts a logistic
    intercept at the log-odds of the noisy positive rate, or ``(None, [])`` where there
    is nothing to start (no noise, another loss, no intercept).

    The release is the vector of positive counts, one per target: replacing one row
    moves each by at most 1, so its l2 sensitivity is ``sqrt(K)``. It takes
    ``CLASS_BALANCE_SHARE`` of both epsilon and delta as a Gaussian mechanism
    calibrated to exactly that pair, and is recorded as that pair, so that it composes
    with the solver's own events under every theorem the accountant has (the privacy
    loss distribution included)."""
    if not (math.isfinite(epsilon) and isinstance(problem.loss, LogisticLoss)
            and bounds.intercept and delta > 0):
        return None, []
    eps_c, delta_c = CLASS_BALANCE_SHARE * epsilon, CLASS_BALANCE_SHARE * delta
    mechanism = GaussianMechanism(math.sqrt(n_targets), epsilon=eps_c, delta=delta_c,
                                  floating_point_safe=floating_point_safe)
    return mechanism, [PrivacyEvent.approximate(eps_c, delta_c, name=f"{name}: class balance")]


def class_balance_start(mechanism, data, rng):
    """The log-odds of each target's noisy positive rate (zeros without a mechanism)."""
    if mechanism is None:
        return np.zeros(data.n_targets)
    noisy = mechanism.randomise(data.positive_counts().astype(np.float64), rng)
    return _rates_and_log_odds(noisy, data.n_samples)[1]


def _rates_and_log_odds(noisy_counts, n_samples):
    rates = class_rates(noisy_counts, n_samples)
    return rates, np.log(rates) - np.log1p(-rates)


#: Rounds of :func:`noise_units`' search: its relative increments double from 1e-12,
#: so 60 rounds reach noise 2^48 times larger than the first guess.
_MAX_NOISE_ROUNDS = 60


def noise_units(epsilon, delta, shares, floating_point_safe, names):
    """``(units, events)``: the noise standard deviation per unit of l2 sensitivity of
    each release, and its privacy event, for a budget split by ``shares`` (summing to
    at most 1; see the module docstring). ``units`` are 0 without noise.

    The releases are Gaussian mechanisms, so together they are one Gaussian mechanism
    of ``mu^2 = sum mu_i^2`` (Dong, Roth & Su 2019): ``mu = gaussian_mu(epsilon,
    delta)`` is split as ``mu_i^2 = share_i mu^2``. On the floating-point-safe path
    each release is a lattice release with discrete Gaussian noise, bounded by the
    continuous mechanism at a ratio larger by ``(1 + 2^-16)(1 + 2^-20)``
    (:func:`~skdp_sparse.privacy.subsampling.subsampled_gaussian_event`,
    ``doc/proofs/pld.rst``); its unit pays that factor. Either way the events compose
    to ``(epsilon, delta)`` exactly, to within the last rounding, on the private side."""
    shares = [float(s) for s in shares]
    if math.isinf(epsilon):
        return [0.0] * len(shares), list(non_private_events())
    mu = gaussian_mu(float(epsilon), float(delta))
    slack = (1.0 + SENSITIVITY_SLACK) * (1.0 + DISCRETE_GAUSSIAN_SLACK) \
        if floating_point_safe else 1.0
    units = [slack / (mu * math.sqrt(share)) for share in shares]
    # The exact conversion is solved to the last bits (and lattice releases pay 2^-40
    # in epsilon): a relative 1e-12 more noise usually brings it inside. The increment
    # doubles while it does not, so that an epsilon near the lattice's own cost
    # takes a few dozen rounds, and one below it fails instead of looping.
    growth = 1e-12
    for _ in range(_MAX_NOISE_ROUNDS):
        events = [gaussian_release_event(unit, floating_point_safe, name)
                  for unit, name in zip(units, names, strict=True)]
        if compose(events, float(delta))[0] <= epsilon:
            return units, events
        units = [unit * (1.0 + growth) for unit in units]
        growth *= 2.0
    raise ValueError(
        f"epsilon={epsilon!r} is too small to calibrate: the floating-point-safe "
        "releases cost about 2^-40 of epsilon by themselves; choose a larger epsilon"
        if floating_point_safe else
        f"epsilon={epsilon!r} is too small to calibrate; choose a larger epsilon")


def check_exact_units(units, dim, *, pure=False, remedy="a larger epsilon (or delta)"):
    """Refuse, from public values and before any release, noise ``units`` (per unit of
    sensitivity) that the exact samplers cannot serve on a release of up to ``dim``
    values (:func:`~skdp_sparse.privacy.discrete.check_lattice`). The lattice's power of
    two rounds the noise over the sensitivity by up to a factor 2 whatever the
    sensitivity, so the check plans it at twice the unit."""
    from ..privacy.discrete import check_lattice

    for unit in units:
        if unit is not None and 0 < unit < math.inf:
            check_lattice(1.0, 2.0 * float(unit), dim, pure=pure, shown=unit, remedy=remedy)


def gaussian_release_event(unit, floating_point_safe, name):
    """The event of a Gaussian release with noise ``unit`` per unit of l2 sensitivity:
    the full-batch step of per-example bound 1/2 and multiplier ``2 unit``."""
    event = subsampled_gaussian_event(2.0 * unit, 1.0, floating_point_safe=floating_point_safe)
    return dataclasses.replace(event, name=name)


def release_mu(event):
    """``Delta / sigma`` of the release an event of :func:`gaussian_release_event`
    records: its own ``mu``, or on the floating-point-safe path that of its privacy
    loss distribution (multiplier ``2 unit``)."""
    return event.mu if event.mu is not None else 2.0 / event.pld.noise_multiplier


def release(value, sensitivity, unit, floating_point_safe, rng):
    """``value`` plus Gaussian noise of ``sensitivity * unit`` (rounded up until the
    release is at least as private as its planned event, that of sensitivity 1 and
    noise ``unit``); the value itself without noise (``unit = 0``)."""
    value = np.asarray(value, dtype=np.float64)
    if unit == 0:
        return value.copy(), 0.0
    planned = GaussianMechanism(1.0, sigma=unit, floating_point_safe=floating_point_safe)
    sigma = float(sensitivity) * unit
    while True:
        mechanism = GaussianMechanism(sensitivity, sigma=sigma,
                                      floating_point_safe=floating_point_safe)
        if mechanism.rho <= planned.rho:
            break
        sigma = math.nextafter(sigma, math.inf)
    return mechanism.randomise(value, rng), sigma


def release_pure(value, sensitivity, unit, floating_point_safe, rng):
    """``value`` plus Laplace noise of scale ``sensitivity * unit`` for an l1
    ``sensitivity``: ``1 / unit``-DP (on the floating-point-safe path the scale of the
    exact discrete release that meets it); returns the noisy value and the noise's
    standard deviation."""
    mechanism = LaplaceMechanism(sensitivity, epsilon=1.0 / unit,
                                 floating_point_safe=floating_point_safe)
    return mechanism.randomise(np.asarray(value, dtype=np.float64), rng), \
        math.sqrt(2.0) * mechanism.scale


@dataclass(frozen=True)
class ScreeningPlan:
    """What the screening of a fit will release and keep (public values only).

    ``mode`` is ``"threshold"``, ``"sure"``, ``"top_k"`` or ``"none"``; ``k`` the number kept by
    ``"top_k"``; ``count_unit`` and ``association_unit`` the noise per unit of
    sensitivity of the class counts (None: no count, ``b0 = 0``) and of the
    association (see :func:`noise_units`).
    """

    mode: str
    k: int | None
    threshold: float
    count_unit: float | None
    association_unit: float
    floating_point_safe: bool


def plan_screening(feature_selection, n_features, *, count_unit, association_unit,
                   floating_point_safe, default="threshold"):
    """The :class:`ScreeningPlan` of a ``feature_selection`` setting (``"auto"`` is
    ``default``)."""
    mode = default if feature_selection == "auto" else feature_selection
    k = None
    if not isinstance(mode, str):
        k, mode = min(int(mode), int(n_features)), "top_k"
    if mode not in ("threshold", "sure", "top_k", "none"):
        raise ValueError(f"unknown feature selection {feature_selection!r}")
    return ScreeningPlan(mode, k, SCREENING_THRESHOLD, count_unit, association_unit,
                         bool(floating_point_safe))


@dataclass(frozen=True, eq=False)
class Screened:
    """The outcome of a screening (all of it public: releases and their post-processing).

    Attributes
    ----------
    columns : int ndarray
        The coordinates kept, sorted.
    association : ndarray of shape (n_features, K)
        The noisy association of every feature.
    weights : ndarray of shape (len(columns), K)
        The association of the kept coordinates soft-thresholded at the cut ``cut``
        (plus ``extra_threshold``).
    rates : ndarray of shape (K,) or None
        The noisy class rates (logistic loss with intercept).
    offsets : ndarray of shape (K,)
        The null model's intercepts ``b0``.
    sigma : float
        Noise standard deviation of each association entry.
    cut : float
        The threshold the weights were shrunk by.
    """

    columns: np.ndarray
    association: np.ndarray
    weights: np.ndarray
    rates: np.ndarray | None
    offsets: np.ndarray
    sigma: float
    cut: float


def class_rates(counts, n_samples):
    """Class rates from (noisy) counts, kept inside ``[1/(2n), 1 - 1/(2n)]``."""
    lo = 0.5 / n_samples
    return np.clip(np.asarray(counts, dtype=float) / n_samples, lo, 1.0 - lo)


def null_residuals(problem, Y, rates):
    """``(R, D)``: the negative per-example derivatives at the null model, shape (n, K),
    and the bound ``D`` on the l2 norm of a row of ``R``'s possible values."""
    Y = np.asarray(Y, dtype=np.float64)
    if isinstance(problem.loss, LogisticLoss):
        p = np.full(Y.shape[1], 0.5) if rates is None else np.asarray(rates, dtype=float)
        R = (np.clip(Y, -1.0, 1.0) + 1.0) / 2.0 - p
        return R, float(np.sqrt(np.sum(np.maximum(p, 1.0 - p) ** 2)))
    bound = problem.derivative_clip
    if bound is None:
        raise ValueError(f"{problem.loss!r} has an unbounded derivative: give target_bound")
    R = -np.clip(problem.loss.derivative(Y, 0.0), -bound, bound)
    return R, float(bound) * math.sqrt(Y.shape[1])


def screen(problem, data, plan, rng, *, extra_threshold=0.0):
    """Run a :class:`ScreeningPlan` on a data view: the noisy class counts (logistic
    loss with intercept), the noisy association, the coordinates kept and their
    shrunk weights (soft threshold at the cut plus ``extra_threshold``, e.g. the l1
    penalty's ``n alpha``)."""
    n, p = data.n_samples, data.n_features
    logistic = isinstance(problem.loss, LogisticLoss)
    rates, offsets = None, np.zeros(data.n_targets)
    if logistic and plan.count_unit is not None:
        counts = data.positive_counts().astype(np.float64)
        noisy, _ = release(counts, math.sqrt(counts.size), plan.count_unit,
                           plan.floating_point_safe, rng)
        rates, offsets = _rates_and_log_odds(noisy, n)
    R, D = null_residuals(problem, data.Y, rates)
    L = float(problem.norm_bound)
    association, sigma = release(data.weighted_column_sums(L, R), 2.0 * L * D,
                                 plan.association_unit, plan.floating_point_safe, rng)
    score = np.max(np.abs(association), axis=1)
    if plan.mode == "none" or p == 0:
        columns, cut = np.arange(p), 0.0
    elif plan.mode == "top_k":
        columns = top_k(score, plan.k)
        # The (k+1)-th highest score, the first one left out.
        cut = float(-np.partition(-score, plan.k)[plan.k]) if plan.k < p else 0.0
    else:
        level = plan.threshold
        if plan.mode == "sure" and sigma > 0:
            level = sure_threshold(np.ravel(association) / sigma)
        cut = level * sigma
        columns = np.flatnonzero(score > cut)
        if columns.size == 0:
            columns = np.array([int(np.argmax(score))])
    shrink = cut + float(extra_threshold)
    kept = association[columns]
    weights = np.sign(kept) * np.maximum(np.abs(kept) - shrink, 0.0)
    return Screened(columns.astype(np.int64), association, weights, rates, offsets, sigma,
                    shrink)


def sure_threshold(z):
    """The soft threshold ``t`` of unit-variance Gaussian observations ``z`` that
    minimises Stein's unbiased estimate of the squared error of ``soft(z, t)`` as an
    estimate of their means: ``SURE(t) = p - 2 #{|z_j| <= t} + sum_j min(z_j^2, t^2)``,
    minimised over ``t >= 0`` (Donoho & Johnstone 1995). It increases between the
    ``|z_j|``, so the minimum is at 0 or at one of them; 0 wins where every
    observation is large (``SURE(0) = p``), and leaving it out would zero the smallest
    one whatever its size (the only one when p = 1). A function of ``z`` alone: on a
    released vector, post-processing."""
    a = np.sort(np.abs(np.asarray(z, dtype=np.float64).ravel()))
    if a.size == 0:
        return 0.0
    kept_below = np.arange(1, a.size + 1)
    risk = a.size - 2.0 * kept_below + np.cumsum(a * a) + (a.size - kept_below) * a * a
    best = int(np.argmin(risk))
    return float(a[best]) if risk[best] < a.size else 0.0


def null_curvature(problem, screened):
    """Second derivative of the loss at the null model, per problem (``p (1 - p)`` for
    the logistic loss at ``b0 = logit(p)``, the loss's smoothness otherwise)."""
    if isinstance(problem.loss, LogisticLoss):
        s = expit(screened.offsets)
        return s * (1.0 - s)
    return np.full(screened.offsets.shape, float(problem.loss.smoothness))
