"""Statistical privacy audits: empirical lower bounds on epsilon.

Run a randomised algorithm many times on each dataset of a neighbouring pair,
reduce every output to a scalar statistic, and test threshold events
``{statistic > t}``. If the algorithm is (epsilon, delta)-DP then for every
event ``E`` and both orders of the pair, ``P[E | S] <= e^epsilon P[E | S'] + delta``,
so ``log((P[E|S] - delta) / P[E|S'])`` is a lower bound on epsilon. Replacing
the probabilities by one-sided Clopper-Pearson bounds makes it a lower bound
that holds with the stated confidence (Jagielski, Ullman & Oprea 2020).

The threshold and the direction of the test are chosen on one half of the
runs and the bound is computed on the other half, so choosing them does not
bias the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

__all__ = ["clopper_pearson", "epsilon_lower_bound", "split_halves", "AuditResult"]


def clopper_pearson(k, n, alpha):
    """Two one-sided ``1 - alpha`` Clopper-Pearson bounds ``(lower, upper)`` of k/n."""
    k = np.asarray(k, dtype=float)
    lower = np.where(k > 0, beta.ppf(alpha, k, n - k + 1), 0.0)
    upper = np.where(k < n, beta.ppf(1 - alpha, k + 1, n - k), 1.0)
    return lower, upper


@dataclass
class AuditResult:
    """Outcome of an audit: ``epsilon_lb`` holds with probability ``confidence``."""

    epsilon_lb: float
    threshold: float
    direction: str
    p_lower: float
    q_upper: float
    n_runs: int
    confidence: float


def split_halves(stat_s, stat_s_prime, rng):
    """The runs of each side in an order drawn from ``rng`` (an int seeds it), split into
    a selection half and an evaluation half: ``(a_sel, a_eval), (b_sel, b_eval)``."""
    rng = np.random.default_rng(rng)
    a = np.asarray(stat_s, dtype=float).ravel()
    b = np.asarray(stat_s_prime, dtype=float).ravel()
    a = a[rng.permutation(a.size)]
    b = b[rng.permutation(b.size)]
    return np.array_split(a, 2), np.array_split(b, 2)


def _epsilon_estimates(a_sorted, b_sorted, thresholds, delta):
    """Point estimates log((P[a > t] - delta) / P[b > t]) for every threshold."""
    pa = 1.0 - np.searchsorted(a_sorted, thresholds, side="right") / a_sorted.size
    pb = 1.0 - np.searchsorted(b_sorted, thresholds, side="right") / b_sorted.size
    # Smooth the denominator so tail thresholds with few hits are not favoured.
    pb = np.maximum(pb, 5.0 / b_sorted.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.maximum(pa - delta, 0.0) / pb)


def epsilon_lower_bound(stat_s, stat_s_prime, delta=0.0, confidence=0.95, rng=0):
    """Clopper-Pearson lower bound on epsilon from two samples of a scalar statistic.

    Parameters
    ----------
    stat_s, stat_s_prime : array-like of shape (n_runs,)
        The statistic of independent runs on datasets S and S'.
    delta : float
        The delta the algorithm claims; the bound is on epsilon at that delta.
    confidence : float
        Probability with which the returned bound holds (over the runs).
    rng : int or Generator
        Used only to split the runs into a selection half and an evaluation half.

    Returns
    -------
    AuditResult
    """
    (a_sel, a_eval), (b_sel, b_eval) = split_halves(stat_s, stat_s_prime, rng)

    best = (-np.inf, 0.0, "S>S'")
    candidates = np.unique(np.concatenate([a_sel, b_sel]))
    if candidates.size > 2000:
        candidates = np.quantile(candidates, np.linspace(0, 1, 2001))
    # Events {x > t} favouring S, and {x <= t} (i.e. {-x > -t}) favouring S', in both orders.
    for name, x, y, sign in (
        ("S>S'", a_sel, b_sel, 1.0),
        ("S'>S", b_sel, a_sel, 1.0),
        ("S>S' (lower tail)", a_sel, b_sel, -1.0),
        ("S'>S (lower tail)", b_sel, a_sel, -1.0),
    ):
        est = _epsilon_estimates(np.sort(sign * x), np.sort(sign * y), sign * candidates, delta)
        i = int(np.nanargmax(np.where(np.isfinite(est), est, -np.inf)))
        if est[i] > best[0]:
            best = (est[i], float(candidates[i]), name)

    _, t, direction = best
    first, second = (a_eval, b_eval) if direction.startswith("S>") else (b_eval, a_eval)
    sign = -1.0 if "lower" in direction else 1.0
    k_first = int(np.sum(sign * first > sign * t))
    k_second = int(np.sum(sign * second > sign * t))
    alpha = (1 - confidence) / 2
    p_lo, _ = clopper_pearson(k_first, first.size, alpha)
    _, q_hi = clopper_pearson(k_second, second.size, alpha)
    p_lo, q_hi = float(p_lo), float(q_hi)
    eps_lb = math.log((p_lo - delta) / q_hi) if p_lo > delta and q_hi > 0 else 0.0
    return AuditResult(
        max(eps_lb, 0.0), t, direction, p_lo, q_hi, np.size(stat_s) + np.size(stat_s_prime),
        confidence
    )
