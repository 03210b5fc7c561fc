"""Claims of the audits: the epsilon a fit's own mechanisms allow on one pair.

A fit's budget ``(epsilon, delta)`` bounds every pair of neighbouring datasets and
every mechanism it runs, through a composition theorem (zCDP or Renyi DP) whose
conversion to ``(epsilon, delta)`` is loose. On a worst-case pair, what the fit
releases is often one known mechanism: a Gaussian of a known noise ratio, which
moves by its full sensitivity, or one channel of a joint mechanism. The claim of such
an audit is the exact privacy profile of that mechanism, with its noise ratio re-derived
here from the events the fit records (public: ``privacy_events_``) and the documented
calibration, never from the noise scale the code under test passes around. A claim is
at most the fit's spend (the tests check it), and a fit that adds less noise than its
events state breaks it.

The floating-point-safe Gaussian releases are discrete Gaussians on a lattice of at
most ``2^-30`` noise scales, accounted by ``rho = ((1 + 2^-16) Delta / sigma)^2 / 2``:
a shift of at most ``(1 + 2^-16) Delta`` against noise ``sigma``. Canonne, Kamath &
Steinke (2020, Thm 7) give the exact profile of a discrete Gaussian; at ``2^30`` lattice
units per noise scale its tails are the continuous Gaussian's to about ``2^-30``, so
the profile of the Gaussian of ratio ``sqrt(2 rho)`` (:func:`gaussian_ratio`) bounds the
release to far below what an audit resolves.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from ..privacy.accounting import gaussian_epsilon
from ._halving import subsampling_of

__all__ = ["gaussian_ratio", "gaussian_claim", "greedy_claim",
           "greedy_selection_epsilon", "greedy_step_epsilon", "laplace_claim",
           "laplace_profile_epsilon", "poisson_claim",
           "poisson_mixture_epsilon", "search_claim", "sparse_sgd_claim",
           "frequent_counts_claim", "SPARSE_SGD_SELECTION_SHARE"]

#: The estimators' share of sparse_sgd's ``1 / z^2`` spent on the feature counts (their
#: default ``selection_share``, which the audits keep).
SPARSE_SGD_SELECTION_SHARE = 0.5


def _is_curvature(event):
    return event.name.startswith("curvature")


def gaussian_ratio(events):
    """``mu`` of the composition of Gaussian events: ``sqrt(sum count mu^2)``, with
    ``mu = sqrt(2 rho)`` for zCDP-only events (the discrete Gaussian)."""
    total = 0.0
    for e in events:
        if e.mu is not None:
            total += e.count * e.mu**2
        elif e.rho is not None and math.isnan(e.epsilon) and e.rdp is None:
            total += e.count * 2.0 * e.rho
        else:
            raise ValueError(f"event {e.name!r} is not a Gaussian release")
    return math.sqrt(total)


def gaussian_claim(*, skip_curvature=False):
    """Claim of a pair that moves every Gaussian release of the fit by its full
    sensitivity (and, with ``skip_curvature``, moves no curvature release): the
    profile of one Gaussian of the composed ratio."""
    def claim(fitted, delta):
        events = [e for e in fitted.privacy_events_
                  if not (skip_curvature and _is_curvature(e))]
        return gaussian_epsilon(gaussian_ratio(events), delta)
    return claim


def _profile_epsilon(excess):
    """The smallest epsilon >= 0 with ``excess(epsilon) <= 0`` (``excess`` decreasing)."""
    if excess(0.0) <= 0:
        return 0.0
    return brentq(excess, 0.0, 50.0, xtol=1e-10)


def _selection_probabilities(p, selection, eps_sel):
    """``P(j)`` on S and on S' of the greedy selection on the pair of :mod:`._registry`.

    In units of the score sensitivity, the scores are ``(1, 0, ..., 0)`` on S and ``(0, 1,
    ..., 1)`` on S' (``p`` coordinates); the selection is the exponential mechanism
    (``P(j)`` proportional to ``exp(eps_sel u_j / 2)``) or report-noisy-max with
    Laplace noise of scale ``2 / eps_sel``.
    """
    u_s = np.zeros(p)
    u_s[0] = 1.0
    u_t = 1.0 - u_s
    if selection == "exponential":
        def probabilities(u):
            w = np.exp(eps_sel * (u - u.max()) / 2)
            return w / w.sum()
    else:
        b = 2.0 / eps_sel
        z = np.linspace(-60 * b, 60 * b, 600_001)
        dz = z[1] - z[0]
        pdf = np.exp(-np.abs(z) / b) / (2 * b)

        def cdf(x):
            return np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0) / b),
                            1 - 0.5 * np.exp(-np.maximum(x, 0) / b))

        def probabilities(u):
            out = np.array([np.sum(pdf * np.prod([cdf(z + u[j] - u[k]) for k in range(p)
                                                  if k != j], axis=0)) * dz
                            for j in range(p)])
            return out / out.sum()

    return probabilities(u_s), probabilities(u_t)


def _discrete_profile_epsilon(p_s, p_t, delta):
    """Exact epsilon at ``delta`` of two laws on the same finite set, both directions."""
    def excess(first, second):
        return lambda eps: float(np.sum(np.maximum(first - math.exp(eps) * second, 0.0))) \
            - delta
    return max(_profile_epsilon(excess(p_s, p_t)), _profile_epsilon(excess(p_t, p_s)))


def greedy_selection_epsilon(p, selection, eps_sel, delta):
    """Exact epsilon at ``delta`` of the coordinate one greedy step selects on the pair
    (:func:`_selection_probabilities`): what a statistic of the selected coordinate
    alone can show."""
    p_s, p_t = _selection_probabilities(p, selection, eps_sel)
    return _discrete_profile_epsilon(p_s, p_t, delta)


def greedy_step_epsilon(p, selection, eps_sel, update, ratio, delta):
    """Exact epsilon at ``delta`` of one greedy step on the pair of :mod:`._registry`:
    the selection of :func:`_selection_probabilities`, then the selected coordinate's
    update, which moves by its full sensitivity, ``ratio`` noise scales of Gaussian
    (``update="gaussian"``) or Laplace noise. The output is the pair (coordinate,
    update); both directions.
    """
    p_s, p_t = _selection_probabilities(p, selection, eps_sel)
    x = np.linspace(-40.0 - ratio, 40.0 + ratio, 400_001)
    dx = x[1] - x[0]
    if update == "gaussian":
        f, g = norm.pdf(x), norm.pdf(x - ratio)
    else:
        f, g = 0.5 * np.exp(-np.abs(x)), 0.5 * np.exp(-np.abs(x - ratio))

    def excess(first, second):
        def at(eps):
            return float(sum(np.sum(np.maximum(a * f - math.exp(eps) * c * g, 0.0))
                             for a, c in zip(first, second, strict=True)) * dx) - delta
        return at

    return max(_profile_epsilon(excess(p_s, p_t)), _profile_epsilon(excess(p_t, p_s)))


def _greedy_events(fitted):
    sel = upd = None
    for e in fitted.privacy_events_:
        if _is_curvature(e):
            continue
        if e.count != 1:
            raise ValueError("the claim is for one greedy step")
        if e.name.startswith(("selection", "noisy max")):
            sel = e
        else:
            upd = e
    return sel, upd


def greedy_claim(p, channel="step"):
    """Claim of one greedy step on the pair of :mod:`._registry` with ``p`` features,
    which no curvature release sees, from the fit's events (the selection's epsilon,
    the update's noise ratio): ``"step"``, the whole step (:func:`greedy_step_epsilon`);
    ``"selection"``, the selected coordinate alone (:func:`greedy_selection_epsilon`),
    for a statistic that reads nothing else."""
    def claim(fitted, delta):
        sel, upd = _greedy_events(fitted)
        kind = "laplace" if "laplace" in sel.name else "exponential"
        if channel == "selection":
            return greedy_selection_epsilon(p, kind, sel.epsilon, delta)
        if kind == "laplace":
            return greedy_step_epsilon(p, kind, sel.epsilon, "laplace", upd.epsilon, delta)
        return greedy_step_epsilon(p, kind, sel.epsilon, "gaussian", gaussian_ratio([upd]),
                                   delta)
    return claim


def laplace_profile_epsilon(epsilon, delta):
    """Exact epsilon at ``delta`` of a Laplace mechanism of ratio ``epsilon`` (its shift
    over its scale): ``delta(e) = 1 - exp((e - epsilon) / 2)``. A discrete Laplace of
    scale ``t >= 2^30`` lattice units differs from it by far less than ``2^-30``."""
    return max(0.0, epsilon + 2.0 * math.log1p(-delta))


def laplace_claim(fitted, delta):
    """Claim of a pure-DP fit at ``delta > 0``, on a pair that moves its one Laplace
    release by the full sensitivity along one coordinate and that no curvature release
    sees: that release's exact profile (:func:`laplace_profile_epsilon`), composed
    (basic composition) with the pure epsilon of report-noisy-max selections."""
    releases, selections = [], 0.0
    for e in fitted.privacy_events_:
        if _is_curvature(e):
            continue
        if e.delta != 0 or math.isnan(e.epsilon):
            raise ValueError(f"event {e.name!r} is not pure DP")
        if e.name.startswith("noisy max"):
            selections += e.count * e.epsilon
        else:
            releases.append(e)
    (release,) = releases
    if release.count != 1:
        raise ValueError("the claim is for one Laplace release")
    return selections + laplace_profile_epsilon(release.epsilon, delta)


def poisson_mixture_epsilon(q, a, delta):
    """Exact epsilon at ``delta`` of ``P = (1-q) N(0,1) + q N(a,1)`` against
    ``Q = (1-q) N(0,1) + q N(-a,1)`` (the pair is symmetric, so one direction)."""
    x = np.linspace(-a - 12.0, a + 12.0, 400_001)
    dx = x[1] - x[0]
    p = (1 - q) * norm.pdf(x) + q * norm.pdf(x - a)
    r = (1 - q) * norm.pdf(x) + q * norm.pdf(x + a)

    def excess(eps):
        return float(np.sum(np.maximum(p - math.exp(eps) * r, 0.0)) * dx) - delta

    if excess(0.0) <= 0:
        return 0.0
    return brentq(excess, 0.0, 50.0, xtol=1e-10)


def poisson_claim(n_samples, batch_size):
    """Claim of one Poisson-subsampled Gaussian step on a pair whose changed row's
    clipped gradient (l2 norm ``C2``) flips sign while every other row adds nothing:
    the mixture of :func:`poisson_mixture_epsilon` with ``a = 1 / z``, ``z`` the noise
    multiplier whose curve the fit's event records (on the safe path ``z / (1 +
    2^-16)``, the lattice's slack)."""
    def claim(fitted, delta):
        (event,) = fitted.privacy_events_
        if event.count != 1:
            raise ValueError("the claim is for one step")
        q, z, sampling = subsampling_of(event, n_samples, batch_sizes=[batch_size])
        if sampling != "poisson":
            raise ValueError(f"expected a Poisson-subsampled event, got {sampling!r}")
        return poisson_mixture_epsilon(q, 1.0 / z, delta)
    return claim


def sparse_sgd_claim(channel, n_features):
    """Claim of one full-batch sparse_sgd step on a pair that moves one channel only.

    The step's event is the discrete Gaussian of ``rho = ((1 + 2^-16) 2 / z)^2 / 2``, so
    ``z >= 2 / sqrt(2 rho)``. ``"gradient"``: noise ``z C2 / sqrt(1 - share)``, a flipped
    clipped gradient moves the keys by at most ``2 (1 + (d + 16) 2^-52) C2``;
    ``"counts"``: noise ``z C_c / sqrt(share)``, two rows holding one different feature
    each move the counts by ``sqrt(2) C_c``.
    """
    share = SPARSE_SGD_SELECTION_SHARE
    float_error = (n_features + 16) * 2.0**-52

    def claim(fitted, delta):
        (event,) = fitted.privacy_events_
        z = 2.0 / math.sqrt(2.0 * event.rho * event.count)
        if channel == "gradient":
            ratio = 2.0 * (1.0 + float_error) * math.sqrt(1.0 - share) / z
        else:
            ratio = math.sqrt(2.0 * share) / z
        return gaussian_epsilon(ratio, delta)
    return claim


def frequent_counts_claim(fitted, delta):
    """Claim of a DP-FEST fit (private top-k) on a pair that moves the feature counts
    only: the profile of its count release alone, the Gaussian of ratio ``sqrt(2 rho)``
    (noise ``sqrt(2) C_c unit`` against the sensitivity ``sqrt(2) C_c``)."""
    (event,) = [e for e in fitted.privacy_events_
                if e.name == "sparse_sgd: noisy feature counts (top-k)"]
    return gaussian_epsilon(gaussian_ratio([event]), delta)


def _p_one_run(eta, gamma):
    """``P[K = 1]`` for ``K ~ D_{eta, gamma}`` (Papernot & Steinke 2022, Sec. 3)."""
    if eta == 0:
        return (1.0 - gamma) / math.log(1.0 / gamma)
    return (1.0 - gamma) * eta / (gamma**-eta - 1.0)


def search_claim(fitted, delta):
    """Claim of a search whose pair moves the validation score only (every fit sees the
    same training rows), by its full sensitivity ``Delta``.

    The score noise is calibrated to the smallest RDP slope of one run, the fits'
    ``rho`` (zCDP fits), so ``sigma >= (1 + 2^-16) Delta / sqrt(2 rho)``. With one run
    (probability ``p_1`` from the public ``gamma_``, ``eta_``) the release is the
    Gaussian of ratio ``sqrt(2 rho)``; other numbers of runs are charged in full:
    ``(epsilon_G, delta)`` with ``p_1 delta_G + (1 - p_1) = delta``.
    """
    rho = 0.0
    for e in fitted.best_estimator_.privacy_events_:
        if e.rho is None or e.rdp is not None:
            raise ValueError(f"event {e.name!r} is not a zCDP release")
        rho += e.count * e.rho
    p1 = _p_one_run(float(fitted.eta_), float(fitted.gamma_))
    delta_one = (delta - (1.0 - p1)) / p1
    if not delta_one > 0:
        raise ValueError(f"P[K > 1] = {1 - p1:.3g} leaves nothing of delta = {delta}")
    return gaussian_epsilon(math.sqrt(2.0 * rho), delta_one)
