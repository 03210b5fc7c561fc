"""Accounting of private selection: best-of-K repetitions in Renyi DP.

Papernot & Steinke (2022), "Hyperparameter Tuning with Renyi Differential
Privacy" (ICLR 2022): if one run of a randomised algorithm is
``(lambda, r(lambda))``-RDP and the number of runs ``K`` follows the truncated
negative binomial distribution ``D_{eta, gamma}``, releasing only the best run is
``(lambda, eps'(lambda))``-RDP with ``eps'`` given by :func:`selection_rdp`. The
distribution of ``K`` (its mean, the ``gamma`` for a given mean, exact sampling)
and :func:`events_rdp`, the RDP curve of a fit from the mechanism events it
records, are the other pieces. The derivation for
:class:`~skdp_sparse.model_selection.PrivateHyperparameterSearch` is in the
documentation (``doc/proofs/private_search.rst``).
"""

from __future__ import annotations

import math

import numpy as np

from .accounting import RDP_ORDERS, rdp_epsilon

__all__ = [
    "calibrate_run_epsilon",
    "events_rdp",
    "selection_rdp",
    "truncated_negative_binomial_mean",
    "truncated_negative_binomial_gamma",
    "sample_truncated_negative_binomial",
]


# --------------------------------------------------------------------------
# The truncated negative binomial distribution D_{eta, gamma}
# --------------------------------------------------------------------------
def truncated_negative_binomial_mean(eta, gamma):
    """``E[K]`` for ``K ~ D_{eta, gamma}`` (Papernot & Steinke 2022, Sec. 3).

    ``P[K = k] = (1-gamma)^k / (gamma^-eta - 1) prod_{l<k} (l + eta)/(l + 1)`` for
    ``eta != 0`` and the logarithmic ``(1-gamma)^k / (k log(1/gamma))`` for ``eta = 0``.
    """
    if eta == 0:
        return (1 / gamma - 1) / math.log(1 / gamma)
    return eta * (1 - gamma) / (gamma * (1 - gamma**eta))


def truncated_negative_binomial_gamma(eta, mean):
    """The ``gamma`` for which ``D_{eta, gamma}`` has expectation ``mean`` (> 1)."""
    if not mean > 1:
        raise ValueError(f"the expected number of repetitions must be > 1, got {mean}")
    # E[K] decreases from infinity to 1 as gamma goes from 0 to 1: bisect in log gamma.
    lo, hi = -700.0, math.log(1 - 1e-12)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if truncated_negative_binomial_mean(eta, math.exp(mid)) > mean:
            lo = mid
        else:
            hi = mid
    return math.exp(hi)


def sample_truncated_negative_binomial(eta, gamma, rng):
    """One draw of ``K ~ D_{eta, gamma}``, exactly (no truncation of the support)."""
    if eta == 0:
        return int(rng.logseries(1 - gamma))
    if eta > 0:
        # A negative binomial (failures before eta successes) conditioned on K >= 1.
        while True:
            k = int(rng.negative_binomial(eta, gamma))
            if k >= 1:
                return k
    # -1 < eta < 0: inverse CDF with the ratio P[k+1]/P[k] = (1-gamma)(k+eta)/(k+1).
    u = rng.random()
    p = (1 - gamma) * eta / (gamma**-eta - 1)
    k, cdf = 1, p
    while cdf < u and p > 0:
        p *= (1 - gamma) * (k + eta) / (k + 1)
        k += 1
        cdf += p
    return k


# --------------------------------------------------------------------------
# RDP curves
# --------------------------------------------------------------------------
def events_rdp(events, orders=RDP_ORDERS):
    """RDP curve (on ``orders``) of the composition of ``events``.

    rho-zCDP events give ``alpha rho``; RDP events their curve; pure epsilon-DP
    events also at most ``epsilon`` (Mironov 2017, Prop. 3). An (epsilon, delta)
    event with ``delta > 0`` has no RDP bound and raises ``ValueError``.
    """
    a = np.asarray(orders, dtype=float)
    total = np.zeros_like(a)
    for e in events:
        if e.count <= 0:
            continue
        if e.rdp is not None:
            if not np.array_equal(a, RDP_ORDERS):
                raise ValueError("RDP events are stored on RDP_ORDERS only")
            curve = np.asarray(e.rdp, dtype=float)
        elif e.rho is not None:
            curve = a * e.rho
            if e.delta == 0 and not math.isnan(e.epsilon):
                curve = np.minimum(curve, e.epsilon)
        elif e.delta == 0 and not math.isnan(e.epsilon):
            curve = np.minimum(a * e.epsilon**2 / 2, e.epsilon)
        else:
            raise ValueError(
                f"event {e.name!r} is only (epsilon={e.epsilon}, delta={e.delta})-DP; the "
                "private search needs estimators whose fits are described in Renyi DP "
                "(Gaussian, zCDP, RDP or pure-DP events)"
            )
        total = total + e.count * curve
    return total


def selection_rdp(run_rdp, eta, gamma, orders=RDP_ORDERS):
    """RDP curve of best-of-K repetitions of a run with RDP curve ``run_rdp``.

    Papernot & Steinke (2022), Thm 2, with ``lambda_hat`` minimised over
    ``orders`` and the limit ``lambda_hat = 1``, where the ``eps_hat`` term vanishes.
    """
    a = np.asarray(orders, dtype=float)
    r = np.asarray(run_rdp, dtype=float)
    log_inv_gamma = math.log(1 / gamma)
    hat_terms = (1 + eta) * ((1 - 1 / a) * r + log_inv_gamma / a)
    hat = min(float(np.min(hat_terms)), (1 + eta) * log_inv_gamma)
    log_mean = math.log(truncated_negative_binomial_mean(eta, gamma))
    return r + hat + log_mean / (a - 1)


def calibrate_run_epsilon(curves, epsilon, delta, eta, gamma, rtol=0.01, max_evals=30):
    """Largest per-run epsilon whose best-of-K total is at most ``epsilon``.

    ``curves(x)`` returns the RDP curves ``(run, refit)`` of one run and of a refit
    (zeros without) when every fit gets the budget ``x``. Returns ``(x, total, run,
    total curve)`` for the largest ``x`` found whose total is in
    ``[epsilon (1 - rtol), epsilon]`` (or the largest feasible one after
    ``max_evals`` evaluations). Every candidate value is checked exactly; between
    checks, a model guides the search: the total as a function of a factor ``c`` on
    the curves is cheap to invert, and the curves grow like ``x ** s`` (``s`` near 2
    for Gaussian noise at small epsilon, re-estimated from the checks).
    """
    def total(run, refit, c=1.0):
        return rdp_epsilon(selection_rdp(c * run, eta, gamma) + c * refit, delta)

    def factor_for_target(run, refit):
        target = epsilon * (1 - rtol / 2)
        lo_c, hi_c = 1e-8, 1e8
        for _ in range(100):
            mid = math.sqrt(lo_c * hi_c)
            if total(run, refit, mid) > target:
                hi_c = mid
            else:
                lo_c = mid
            if hi_c / lo_c < 1 + 1e-4:
                break
        return lo_c

    lo = hi = None  # (fit_eps, total, run, selection curve + refit): feasible, infeasible
    x, s, previous = epsilon / 2, 2.0, None
    for _ in range(max_evals):
        run, refit = curves(x)
        t = total(run, refit)
        point = (x, t, run, selection_rdp(run, eta, gamma) + refit)
        if t <= epsilon:
            if lo is None or x > lo[0]:
                lo = point
            if t >= epsilon * (1 - rtol):
                break
        elif hi is None or x < hi[0]:
            hi = point
        if lo is not None and hi is not None and hi[0] / lo[0] < 1 + 1e-9:
            break
        if previous is not None and previous[0] != x:
            growth = np.mean(np.log(np.maximum(run, 1e-300)
                                    / np.maximum(previous[1], 1e-300)))
            if np.isfinite(growth) and growth != 0:
                s = float(np.clip(growth / math.log(x / previous[0]), 0.25, 4.0))
        previous = (x, run)
        if not np.any(run > 0):
            x *= 16
            continue
        x_next = x * factor_for_target(run, refit) ** (1 / s)
        if lo is not None and hi is not None and not (lo[0] < x_next < hi[0]):
            x_next = math.sqrt(lo[0] * hi[0])
        if not 1e-12 < x_next < 1e12:
            break
        x = x_next
    if lo is None:
        raise ValueError(
            f"no per-fit budget meets the total (epsilon={epsilon}, delta={delta}): the "
            "selection overhead alone exceeds it; raise epsilon or delta, or lower "
            "expected_repetitions"
        )
    return lo
