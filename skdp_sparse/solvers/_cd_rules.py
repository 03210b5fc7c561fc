"""The public-value rules of coordinate descent: where its curvature comes from, how
many greedy steps it takes, and the constants behind them (functions of n, p, the
budget and the bounds only; :mod:`.coordinate_descent` runs them)."""

from __future__ import annotations

import math

import numpy as np

from ..privacy.accounting import zcdp_rho
from ..privacy.statistics import second_moment_noise_std

__all__ = ["CURVATURE_SHARE", "MIN_CURVATURE_RATIO", "MAX_CLIPPED_ROW_FRACTION",
           "SIGNAL_NOISE_RATIO", "NOISELESS_STEPS_PER_COORD", "LOGISTIC_INITIAL_GAP",
           "norm_share_ratio", "curvature_release_informative", "default_greedy_iterations",
           "release_noise_std", "ratio_floor"]

#: Share of the coordinate-descent budget (of its zCDP rho, or of its pure
#: epsilon) spent on the private curvature estimate of ``curvature="private"``.
#: Noise on the estimate only mis-sizes steps, while noise on the updates is the
#: utility bottleneck, so the estimate gets a small share.
CURVATURE_SHARE = 0.1
#: Smallest coordinate curvature, relative to the bound ``beta b_j^2``: caps the
#: step on rare or noisily estimated features at this many times the bound's.
MIN_CURVATURE_RATIO = 1e-3
#: With more rows than this above ``norm_bound`` (by the private count), the
#: curvature estimate is too biased to use and the bound's constants are kept; a
#: warning says so when the count passes it by three of its noise's sds.
MAX_CLIPPED_ROW_FRACTION = 0.5


#: ``curvature="auto"`` releases the curvature estimate only if the average column sum
#: of squares the bounds allow exceeds this many standard deviations of the release's
#: noise: the factor of the floor ``2 sigma / (n b_j^2)`` the estimated ratios are
#: clipped to, so below it the average coordinate's estimate would be the floor.
SIGNAL_NOISE_RATIO = 2.0
#: Greedy steps per coordinate of a run without noise (``epsilon=inf``), and the cap of
#: the private default.
NOISELESS_STEPS_PER_COORD = 200
#: ``F(0)`` of the logistic loss, the default initial gap of the step rule.
LOGISTIC_INITIAL_GAP = math.log(2.0)


def norm_share_ratio(feature_bound, norm_bound):
    """Curvature of a coordinate relative to its bound ``beta b_j^2`` when each row's
    squared norm bound is shared among the features in proportion to their bounds:
    ``r0 = min(1, L^2 / sum_j b_j^2)``.

    From public values only. The coordinates' curvatures ``beta mean_i x_ij^2`` sum to
    at most ``beta L^2`` (every row has ``sum_j x_ij^2 <= L^2``), and ``M_j = beta b_j^2
    r0`` are the largest constants proportional to ``b_j^2`` within that total. It is a
    coordinate's curvature on average over the coordinates, not a bound on each: a
    feature carrying more than its share gets too long a step.
    """
    b2 = np.square(np.asarray(feature_bound, dtype=float)).sum()
    return min(1.0, float(norm_bound) ** 2 / b2) if b2 > 0 else 1.0


def release_noise_std(n_features, feature_bound, norm_bound, epsilon, delta, pure):
    """Noise sd of the curvature release at ``CURVATURE_SHARE`` of ``(epsilon, delta)``:
    Gaussian at ``rho_c = CURVATURE_SHARE rho(epsilon, delta)`` (zCDP, ``delta > 0``),
    Laplace at ``sqrt(2 rho_c)`` beside Laplace steps, or at ``CURVATURE_SHARE epsilon``
    for pure DP; as :func:`_curvature_events` sizes it."""
    b = np.broadcast_to(np.asarray(feature_bound, dtype=float), (n_features,))
    max_entry = float(b.max()) if n_features else 1.0
    if delta > 0:
        rho_c = CURVATURE_SHARE * zcdp_rho(epsilon, delta)
        if pure:
            return second_moment_noise_std(norm_bound, max_entry,
                                           epsilon=math.sqrt(2.0 * rho_c))
        return second_moment_noise_std(norm_bound, max_entry, rho=rho_c)
    return second_moment_noise_std(norm_bound, max_entry, epsilon=CURVATURE_SHARE * epsilon)


def curvature_release_informative(n_samples, n_features, feature_bound, norm_bound,
                                  epsilon, delta, *, pure=False):
    """Whether ``curvature="auto"`` spends ``CURVATURE_SHARE`` of the budget on the
    curvature release: from public values only.

    The release adds noise of sd ``sigma_c`` (:func:`release_noise_std`) to each column
    sum ``S_j = sum_i x_ij^2``; the sums total at most ``n min(L^2, sum_j b_j^2)``, so
    the average column sum is at most ``S_bar = n min(L^2, sum_j b_j^2) / p``. The
    release is made iff ``S_bar > SIGNAL_NOISE_RATIO sigma_c``: otherwise the
    average coordinate's estimated ratio would sit at its floor ``2 sigma_c / (n b_j^2)``
    and the estimate would size steps by its noise. ``True`` without noise.
    """
    if not math.isfinite(epsilon):
        return True
    if n_features == 0:
        return False
    b = np.broadcast_to(np.asarray(feature_bound, dtype=float), (n_features,))
    average_sum = n_samples * min(float(norm_bound) ** 2, float(np.square(b).sum())) / n_features
    sigma_c = release_noise_std(n_features, b, norm_bound, epsilon, delta, pure)
    return average_sum > SIGNAL_NOISE_RATIO * sigma_c


def default_greedy_iterations(n_samples, n_coords, epsilon, delta, *, n_problems=1,
                              pure=False, score_ratio=2.0, initial_gap=LOGISTIC_INITIAL_GAP,
                              budget_share=1.0):
    """Number of DP-GCD steps from public values: the largest ``T`` whose steps can all
    make progress against their own noise, ``T s(T)^2 ln(2p)^2 / 2 <= F0``.

    In the scaled coordinates ``u_j = sqrt(M_j) w_j`` every coordinate is 1-smooth and a
    step on j lowers F by about ``G_j^2 / 2`` (``G_j = g_j / sqrt(M_j)``), less half the
    update noise's variance. The noisy selection among ``p`` coordinates, with noise of
    scale ``s`` on the scores ``|G_j|``, can pass over coordinates up to about ``s
    ln(2p)`` better than the one it takes (the largest of ``p`` standard Gumbel draws
    has median ``ln p + 0.37``). So a step is reliably useful while the largest scaled
    gradient exceeds ``s ln(2p)``, and then gains at least about ``s^2 ln(2p)^2 / 2``.
    The gains of all steps add up to at most ``F(0) - F* <= F0`` (``initial_gap``: the
    loss at ``w = 0``, where the penalty vanishes; ``ln 2`` for the logistic loss), so at
    most the ``T`` with ``T s(T)^2 ln(2p)^2 / 2 <= F0`` can all be useful.

    ``s(T)`` is the selection's noise scale at ``T`` steps per problem and ``K =
    n_problems`` problems, on scores of sensitivity ``Delta_u = 2 score_ratio / n``
    (``score_ratio = max_j C_j / sqrt(M_j)``: 2 for the logistic loss, whose clips are
    proportional to ``sqrt(M_j)``):

    * ``delta > 0``, steps composed in zCDP at ``rho = budget_share rho(epsilon,
      delta)`` (:func:`~skdp_sparse.privacy.accounting.zcdp_rho`): the exponential
      mechanism with half of each step's ``rho / (T K)`` has Gumbel scale ``Delta_u
      sqrt(T K / rho)`` (``c = 1``); report-noisy-max with ``Lap(2 Delta_u /
      epsilon_0)``, ``T K epsilon_0^2 = rho``, has ``s^2 = 4 Delta_u^2 T K / rho`` (``c
      = 4``). Then ``T = sqrt(2 F0 rho / (c K)) / (Delta_u ln(2p))``;
    * ``delta = 0``, basic composition of ``2 T K`` Laplace releases at ``epsilon_0 =
      budget_share epsilon / (2 T K)``: ``s = 2 Delta_u / epsilon_0``, so ``T = (F0
      eps^2 / (8 Delta_u^2 K^2 ln(2p)^2))^{1/3}``.

    DP-GCD's utility bound for convex losses (Mangold et al. 2023) balances the
    optimisation term ``R_{M,1}^2 / T`` against the noise term ``R_{M,1} s(T) log p``,
    which gives ``T = (n eps R_{M,1} sqrt(M_min) / (L_max sqrt(log(1/delta))))^{2/3}``
    up to constants and logarithms; ``R_{M,1}``, the distance from the start to the
    solutions in the norm ``sum_j sqrt(M_j) |w_j|``, is a property of the unknown
    solution. The rule keeps the same noise ``s(T)`` (with ``n``, ``epsilon``,
    ``delta``, the smoothness constants and the clips) and the same ``log p`` of the
    noisy max, and puts the public bound ``F0`` on the initial gap in place of
    ``R_{M,1}``. The result is clipped to ``[1, NOISELESS_STEPS_PER_COORD * n_coords]``.
    """
    cap = NOISELESS_STEPS_PER_COORD * max(int(n_coords), 1)
    if not math.isfinite(epsilon):
        return cap
    log_term = math.log(2.0 * max(int(n_coords), 1))
    delta_u = 2.0 * float(score_ratio) / n_samples
    k = max(int(n_problems), 1)
    if delta > 0:
        rho = budget_share * zcdp_rho(epsilon, delta)
        c = 4.0 if pure else 1.0
        steps = math.sqrt(2.0 * initial_gap * rho / (c * k)) / (delta_u * log_term)
    else:
        eps = budget_share * epsilon
        steps = (initial_gap * eps**2 / (8.0 * delta_u**2 * k**2 * log_term**2)) ** (1 / 3)
    return int(max(1, min(cap, math.floor(steps))))


def ratio_floor(n_samples, b2, noise_std):
    """Smallest curvature ratio a coordinate keeps: ``MIN_CURVATURE_RATIO``, or twice the
    release's noise over the bound's sum of squares where that is larger."""
    return np.maximum(MIN_CURVATURE_RATIO, 2 * noise_std / (n_samples * b2))
