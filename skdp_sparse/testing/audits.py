"""Statistical privacy audits of every estimator, through its public ``fit``.

Each :class:`Audit` names a worst-case pair of replace-one neighbouring datasets
``(S, S')``, a scalar statistic of the fitted estimator, and a claim
``(epsilon, delta)`` at which the audit has power. :func:`run_audit` fits the
estimator ``n_runs`` times on each dataset (fresh seeds) and turns threshold
tests on the statistic into a Clopper-Pearson lower bound on epsilon
(:func:`~skdp_sparse.testing.bounds.epsilon_lower_bound_cp`, which picks the threshold by
its own Clopper-Pearson bound on half of the runs):

* ``noise="honest"``: the estimator fitted at the claim. The bound must stay at or
  below the claim; a bound above it is a privacy bug (up to the audit's
  confidence).
* ``noise="halved"``: the same estimator fitted at the epsilon at which its own
  calibration adds exactly half the noise (:func:`halved_noise_epsilon`), audited
  against the original claim. The bound must exceed the claim by a clear margin:
  this is what shows that the audit can see a noise scale that is off by two.

The runs go through a *runner* ``run(epsilon, side, seeds) -> statistics``
(:func:`fit_runner` by default: one ``fit`` per seed), so that a faster entry
point can replace it without touching the audits.

Sizing. The claims sit where a threshold test on a few thousand runs can reach
them. For Gaussian mechanisms that means a large delta (0.1 or 0.2): there,
halving the noise moves the privacy profile far above the claim at event
probabilities a few thousand runs resolve, while at delta = 1e-5 the same
halving shows only in tails that need millions of runs (a Gaussian calibrated
exactly to (2, 1e-3) gives, with half its noise, a median bound of 1.25 times
the claim from 4000 runs a side, and 1.0 at the 1% quantile). Mechanisms
accounted in zCDP or Renyi DP sit at (1, 0.2): the conversion of a Renyi curve
to (epsilon, delta) is loosest at large delta (a Gaussian of ratio 0.86 is
(0.43, 0.2)-DP exactly but (0.87, 0.2)-DP by the conversion), so the claim there
leaves the honest fit far below it; pure-DP mechanisms sit at delta = 0.

The table gives, for the fast audit, the bound as a multiple of the claim: the
median and the 99% quantile of the honest fit, the 1% quantile and the median
of the fit with half the noise, over 300 replays of the audit on random subsets
of a pool of five times ``n_runs`` real fits per side
(:mod:`skdp_sparse.testing.design`), and the margin the test asserts::

    audit                                     claim       N    honest        halved     margin
                                                               q50   q99    q01   q50
    cd                                        (1.5, 0.1)  2000 0.52  0.69   1.50  1.79   1.3
    sgd                                       (1.5, 0.1)  2000 0.60  0.78   1.55  1.88   1.3
    phased_sgd                                (1.5, 0.1)  2000 0.63  0.89   1.60  1.89   1.4
    output_perturbation_gaussian              (1, 0.2)    2500 0.23  0.37   1.36  1.66   1.25
    output_perturbation_laplace               (1, 0)      3000 0.71  0.83   1.36  1.58   1.25
    mean_gaussian                             (1.5, 0.1)  2000 0.63  0.78   1.58  1.84   1.4
    mean_laplace                              (1, 0)      5000 0.76  0.84   1.56  1.69   1.4
    mean_projection_gaussian                  (1.5, 0.1)  2000 0.60  0.75   1.49  1.80   1.3
    mean_projection_laplace                   (1, 0)      5000 0.76  0.84   1.56  1.69   1.4
    mean_projection_gaussian_sampled          (1.5, 0.1)  2000 0.62  0.76   1.54  1.82   1.35
    greedy_cd_exponential                     (1, 0.2)    2500 0.00  0.06   1.43  1.74   1.3
    greedy_cd_exponential_private_curvature   (1, 0.2)    3000 0.00  0.03   1.18  1.44   1.0
    greedy_cd_laplace                         (1.5, 0)    5000 0.63  0.75   1.29  1.45   1.15
    greedy_cd_laplace_private_curvature       (1.5, 0)    8000 0.58  0.66   1.17  1.33   1.0
    sgd_poisson                               (1.5, 0.2)  1800 0.25  0.37   1.23  1.47   1.0
    sparse_sgd_gradient                       (1, 0.2)    3000 0.16  0.30   1.22  1.50   1.1
    private_search                            (1, 0.2)    2500 0.10  0.22   1.20  1.47   1.05
    sparse_sgd_selection  (honest only)       (1, 0.1)    2000 0.00  0.00  (0.25  0.42)
    bias_reduced_sgd      (honest only)       (1.5, 0.1)  1000 0.00  0.00  (0.00  0.00)
    mean_l1_recovery      (honest only)       (1.5, 0.1)   200

(pools of 3-4 times ``n_runs`` for sgd_poisson, private_search and
greedy_cd_laplace_private_curvature.) The audits below 1.3 at the 1% quantile
are limited by the accounting, not by the audit: the private-curvature variants
spend 10% of the budget on a release the pair cannot move; the pure-DP greedy
step's selection, report-noisy-max with Laplace noise, shows at most about
0.8 epsilon_0 on a pair with few coordinates; sparse_sgd's noisy counts take
half the budget and are released one bit per feature; the Poisson, search and
zCDP claims pay the Renyi conversion. Their slow versions (``slow_runs``) reach
the 1.3 margin (1.2 for greedy_cd_laplace_private_curvature).

Not detectable at any affordable size, so audited on the honest side only
(with a positive control without noise): a bias-reduced SGD run (only G_I, one
drawn example, reaches the output, under the noise of four releases each
charged (epsilon/32, delta/16), and the filter stops after one step: half the
noise still gives a bound of 0); sparse_sgd's feature selection alone (one bit
per feature, sensitivity sqrt(2) C_c where 2 C_c is charged: half the noise
gives 0.42 times the claim); l1_recovery (a row's measurement has norm about
L where 1.5 L is charged, and the basis-pursuit recovery, zeroed when its norm
exceeds 2L, hides most of what remains).
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

__all__ = ["Audit", "AUDITS", "fit_runner", "run_audit", "audit_seeds", "halved_epsilon"]

#: A target far outside the public target bound (1): every per-example derivative
#: of the squared loss is clipped to its bound during a short fit.
TARGET = 100.0
#: A row at the l2 bound 1.
ROW = np.array([0.6, 0.8])


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
        The claim.
    n_runs : int
        Runs per dataset of the fast audit.
    slow_runs : int
        Runs per dataset of the slow audit (several seed sets).
    confidence : float
        Confidence of the Clopper-Pearson bound.
    pair, statistic_doc : str
        What the pair is and why it is the worst case; what the statistic reads.
    halved : callable ``() -> float``, optional
        The epsilon of the fit with half the noise, where the events of a fit cannot
        be halved one by one; default :func:`halved_noise_epsilon`.
    margin : float
        The fast audit of the fit with half the noise must give a bound of at least
        ``margin * epsilon``.
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
    halved: Callable | None = field(default=None, compare=False)
    margin: float = 1.3
    slow_margin: float = 1.3
    detects_halving: bool = True


# --------------------------------------------------------------------------
# Runners
# --------------------------------------------------------------------------
def _fit_statistics(audit, epsilon, side, seeds):
    X, y = audit.datasets[side]
    out = np.empty(len(seeds))
    with warnings.catch_warnings():
        # Audits fit on tiny, worst-case data: warnings about it are expected.
        warnings.simplefilter("ignore")
        for i, seed in enumerate(seeds):
            est = audit.make(epsilon, audit.delta, int(seed))
            est.fit(X) if y is None else est.fit(X, y)
            out[i] = audit.statistic(est)
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


@functools.cache
def _halved_epsilon_cached(name):
    audit = AUDITS[name]
    if audit.halved is not None:
        return float(audit.halved())
    X, y = audit.datasets[0]
    return float(halved_noise_epsilon(audit.make(audit.epsilon, audit.delta, 0), X, y))


def halved_epsilon(audit):
    """The epsilon at which ``audit``'s estimator adds half the noise of the claim's fit."""
    if AUDITS.get(audit.name) is audit:
        return _halved_epsilon_cached(audit.name)
    if audit.halved is not None:
        return float(audit.halved())
    X, y = audit.datasets[0]
    return float(halved_noise_epsilon(audit.make(audit.epsilon, audit.delta, 0), X, y))


def run_audit(audit, noise="honest", *, n_runs=None, seed_set=0, runner=None,
              epsilon=None, return_samples=False):
    """Lower bound on epsilon at ``audit.delta`` from ``n_runs`` fits on each dataset.

    Parameters
    ----------
    audit : Audit
    noise : {"honest", "halved"}
        Fit at the claim, or at the epsilon of half the noise.
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
    AuditResult (and the two samples with ``return_samples``)
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
    result = epsilon_lower_bound_cp(s, s_prime, delta=audit.delta,
                                 confidence=audit.confidence, rng=seed_set)
    if return_samples:
        return result, s, s_prime
    return result


from ._registry import AUDITS  # noqa: E402  (the registry builds on Audit above)
