"""The audit object and how it runs: fits, seeds, the claim and the fit with half the noise.

:mod:`skdp_sparse.testing.audits` describes the audits and their sizes; the pairs and
statistics are in :mod:`._registry` (linear models) and :mod:`._registry_mean` (the
mean and the private search).
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ._halving import halved_noise_epsilon
from .bounds import epsilon_lower_bound_cp

__all__ = ["AUDITS", "Audit", "audit_seeds", "claim_delta", "claim_epsilon", "default_jobs",
           "fit_runner",
           "fitted_on", "halved_epsilon", "register", "run_audit"]


@dataclass(frozen=True, eq=False)
class Audit:
    """One audit: an estimator, a worst-case pair, a statistic and a claim.

    Attributes
    ----------
    name : str
    make : callable ``(epsilon, delta, seed) -> estimator``
        A fresh, unfitted estimator.
    datasets : ((X, y), (X', y'))
        The neighbouring pair ``S, S'`` (``y`` may be None).
    statistic : callable ``fitted estimator -> float``
    epsilon, delta : float
        The budget the estimator is fitted with (its ``epsilon`` and ``delta``).
    n_runs : int
        Runs per dataset of the fast audit.
    slow_runs : int
        Runs per dataset of the slow audit (several seed sets).
    confidence : float
        Confidence of the Clopper-Pearson bound.
    pair, statistic_doc : str
        What the pair is and why it is the worst case; what the statistic reads.
    claim : callable ``(fitted estimator, delta) -> float``, optional
        The epsilon at ``delta`` (the bound's delta, :func:`claim_delta`) that the
        fit's own recorded mechanisms allow on this pair (see :mod:`._claims`); the
        audit's bound is compared with it. Default: ``epsilon`` itself, the fit's
        whole budget.
    claim_delta : float, optional
        The delta of the claim and of the bound, where it differs from the fit's
        (a pure-DP fit, ``delta = 0``, claimed at the delta where its profile is
        audited with few runs).
    halved : callable ``() -> float``, optional
        The epsilon of the fit with half the noise, where the events of a fit cannot
        be halved one by one; default :func:`halved_noise_epsilon`.
    margin : float
        The fast audit of the fit with half the noise must give a bound of at least
        ``margin`` times the claim.
    slow_margin : float
        The same for the slow audit (``slow_runs`` runs a side).
    detects_halving : bool
        False where no audit can see half the noise (the accounting is that loose):
        only the honest side is checked.
    """

    name: str
    make: Callable
    datasets: tuple
    statistic: Callable
    epsilon: float
    delta: float
    n_runs: int
    slow_runs: int
    confidence: float = 0.99
    pair: str = ""
    statistic_doc: str = ""
    claim: Callable | None = field(default=None, compare=False)
    claim_delta: float | None = None
    halved: Callable | None = field(default=None, compare=False)
    margin: float = 1.3
    slow_margin: float = 1.3
    detects_halving: bool = True


#: Every audit by name; filled by :mod:`._registry` and :mod:`._registry_mean`.
AUDITS: dict[str, Audit] = {}


def register(audit):
    """Add ``audit`` to :data:`AUDITS` (names are unique)."""
    if audit.name in AUDITS:
        raise ValueError(f"an audit called {audit.name!r} exists already")
    AUDITS[audit.name] = audit
    return audit


# --------------------------------------------------------------------------
# Runners
# --------------------------------------------------------------------------
def _fit(estimator, X, y):
    with warnings.catch_warnings():
        # Audits fit on tiny, worst-case data: warnings about it are expected.
        warnings.simplefilter("ignore")
        return estimator.fit(X) if y is None else estimator.fit(X, y)


def fitted_on(audit, epsilon, side=0, seed=0):
    """The estimator of ``audit`` fitted at ``epsilon`` on ``S`` (side 0) or ``S'``."""
    X, y = audit.datasets[side]
    return _fit(audit.make(epsilon, audit.delta, int(seed)), X, y)


def _fit_statistics(audit, epsilon, side, seeds):
    out = np.empty(len(seeds))
    for i, seed in enumerate(seeds):
        out[i] = audit.statistic(fitted_on(audit, epsilon, side, seed))
    return out


def default_jobs():
    """Processes of :func:`fit_runner`: ``SKDP_AUDIT_JOBS`` (default 1)."""
    return max(1, int(os.environ.get("SKDP_AUDIT_JOBS", "1")))


def fit_runner(audit, n_jobs=None):
    """``run(epsilon, side, seeds)``: the statistic of one ``fit`` per seed on ``S`` (side
    0) or ``S'`` (side 1), the estimator built by ``audit.make(epsilon, audit.delta, seed)``.

    With ``n_jobs > 1`` (default :func:`default_jobs`) the seeds are split over that
    many processes; the statistics do not depend on it.
    """
    n_jobs = default_jobs() if n_jobs is None else int(n_jobs)

    def run(epsilon, side, seeds):
        if n_jobs == 1 or len(seeds) < 2 * n_jobs:
            return _fit_statistics(audit, epsilon, side, seeds)
        from joblib import Parallel, delayed

        chunks = np.array_split(np.asarray(seeds), n_jobs)
        parts = Parallel(n_jobs=n_jobs)(
            delayed(_fit_statistics)(audit, epsilon, side, chunk) for chunk in chunks)
        return np.concatenate(parts)

    return run


def audit_seeds(seed_set, side, n_runs):
    """Distinct fit seeds for one seed set and one side of the pair."""
    return np.random.SeedSequence([int(seed_set), int(side)]).generate_state(
        n_runs, dtype=np.uint32)


# --------------------------------------------------------------------------
# The claim and the fit with half the noise
# --------------------------------------------------------------------------
def _registered(audit):
    return AUDITS.get(audit.name) is audit


def claim_delta(audit):
    """The delta of ``audit``'s claim and bound: ``claim_delta``, or the fit's ``delta``."""
    return float(audit.delta if audit.claim_delta is None else audit.claim_delta)


def _claim(audit):
    if audit.claim is None:
        if audit.claim_delta is not None:
            raise ValueError(f"{audit.name}: a claim at another delta needs a claim function")
        return float(audit.epsilon)
    return float(audit.claim(fitted_on(audit, audit.epsilon), claim_delta(audit)))


def _halved(audit):
    if audit.halved is not None:
        return float(audit.halved())
    X, y = audit.datasets[0]
    return float(halved_noise_epsilon(audit.make(audit.epsilon, audit.delta, 0), X, y))


@functools.cache
def _cached(kind, name):
    return (_claim if kind == "claim" else _halved)(AUDITS[name])


def claim_epsilon(audit):
    """The epsilon (at :func:`claim_delta`) the audit's bound is held to: ``audit.claim``
    of the fit at ``audit.epsilon`` on ``S``, or ``audit.epsilon``."""
    return _cached("claim", audit.name) if _registered(audit) else _claim(audit)


def halved_epsilon(audit):
    """The epsilon at which ``audit``'s estimator adds half the noise of the claim's fit."""
    return _cached("halved", audit.name) if _registered(audit) else _halved(audit)


def run_audit(audit, noise="honest", *, n_runs=None, seed_set=0, runner=None,
              epsilon=None, return_samples=False):
    """Lower bound on epsilon at :func:`claim_delta` from ``n_runs`` fits on each dataset.

    Parameters
    ----------
    audit : Audit
    noise : {"honest", "halved"}
        Fit at ``audit.epsilon``, or at the epsilon of half the noise.
    n_runs : int, optional
        Runs per dataset (default ``audit.n_runs``).
    seed_set : int
        Selects the fit seeds (:func:`audit_seeds`) and the split of the bound.
    runner : callable, optional
        ``run(epsilon, side, seeds) -> statistics``; default :func:`fit_runner`.
    epsilon : float, optional
        Fit at this epsilon instead (the bound is still for the claim's delta).

    Returns
    -------
    AuditResult (and the two samples with ``return_samples``); compare its
    ``epsilon_lb`` with :func:`claim_epsilon`.
    """
    if noise not in ("honest", "halved"):
        raise ValueError(f"noise must be 'honest' or 'halved', got {noise!r}")
    n_runs = audit.n_runs if n_runs is None else int(n_runs)
    runner = fit_runner(audit) if runner is None else runner
    if epsilon is None:
        epsilon = audit.epsilon if noise == "honest" else halved_epsilon(audit)
    variant = 0 if noise == "honest" else 1
    s = runner(epsilon, 0, audit_seeds(2 * seed_set + variant, 0, n_runs))
    s_prime = runner(epsilon, 1, audit_seeds(2 * seed_set + variant, 1, n_runs))
    result = epsilon_lower_bound_cp(s, s_prime, delta=claim_delta(audit),
                                    confidence=audit.confidence, rng=seed_set)
    if return_samples:
        return result, s, s_prime
    return result
