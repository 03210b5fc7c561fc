"""The audits of the private mean and of the private hyperparameter search.

:mod:`skdp_sparse.testing.audits` describes them with those of :mod:`._registry`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import DPSparseMeanEstimator, PrivateHyperparameterSearch
from ._audit import Audit, register
from ._claims import gaussian_claim, laplace_claim, search_claim
from ._registry import GAUSS_DELTA, GAUSS_EPSILON, LAPLACE_CLAIM_DELTA, LAPLACE_EPSILON

__all__ = []

_ONE_GAUSSIAN = gaussian_claim()


def _mean0(fitted):
    return float(fitted.mean_[0])


def _mean_make(method, **kwargs):
    def make(epsilon, delta, seed):
        return DPSparseMeanEstimator(epsilon=epsilon, delta=delta, method=method,
                                     random_state=seed, **kwargs)
    return make


def _mean_pair(n, d=1):
    """n rows: n - 1 empty ones and e_0, which S' replaces by -e_0 (sensitivity 2/n)."""
    X = sp.lil_matrix((n, d))
    X[n - 1, 0] = 1.0
    X = sp.csr_matrix(X)
    X_prime = X.copy()
    X_prime.data = -X_prime.data
    return (X, None), (X_prime, None)


def _mean_e0_pair(n=20, d=1000):
    """n - 1 rows e_0 and a last row e_0 (S) or -e_0 (S'): coordinate 0 of the mean is
    far above the projection's threshold, so the released value carries the shift."""
    rows = np.arange(n)
    X = sp.csr_matrix((np.ones(n), (rows, np.zeros(n, dtype=int))), shape=(n, d))
    X_prime = X.copy()
    X_prime.data[-1] = -1.0
    return (X, None), (X_prime, None)


_MEAN_PAIR = ("20 rows, 19 empty and e_0, replaced by -e_0: the clipped mean moves by "
              "2L/n in l2 and l1 on one coordinate, far inside the l1 ball of the "
              "projection.")

register(Audit(
    name="mean_gaussian",
    make=_mean_make("gaussian"),
    datasets=_mean_pair(20),
    statistic=_mean0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=_ONE_GAUSSIAN,
    pair=_MEAN_PAIR, statistic_doc="mean_[0] (discrete Gaussian noise).",
))

# Both methods are held to the same Laplace claim on the same pair.
for name, make in (("mean_laplace", _mean_make("laplace")),
                   ("mean_projection_laplace", _mean_make("projection", sparsity=1))):
    register(Audit(
        name=name,
        make=make,
        datasets=_mean_pair(20),
        statistic=_mean0,
        epsilon=LAPLACE_EPSILON, delta=0.0, n_runs=1200, slow_runs=4000,
        claim=laplace_claim, claim_delta=LAPLACE_CLAIM_DELTA,
        pair=_MEAN_PAIR, statistic_doc="mean_[0] (discrete Laplace noise).",
    ))

register(Audit(
    name="mean_projection_gaussian",
    make=_mean_make("projection", sparsity=1),
    datasets=_mean_e0_pair(d=50),
    statistic=_mean0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=1000, slow_runs=3000,
    claim=_ONE_GAUSSIAN,
    pair="d = 50, 20 rows: 19 rows e_0 and e_0 -> -e_0: the mean moves by 2L/n on "
         "coordinate 0; the noisy vector's l1 norm exceeds the radius, so the projection "
         "soft-thresholds it (all d noise values drawn at this d).",
    statistic_doc="mean_[0] = noisy mean_0 minus the projection's threshold.",
))

register(Audit(
    name="mean_projection_gaussian_sampled",
    make=_mean_make("projection", sparsity=1),
    datasets=_mean_e0_pair(),
    statistic=_mean0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=_ONE_GAUSSIAN,
    pair="d = 1000, 20 rows: 19 rows e_0 and e_0 -> -e_0: the mean moves by 2L/n on "
         "coordinate 0, which stays above the soft threshold of the l1 projection; at "
         "this d the release draws only the noise values that can survive the "
         "projection (the sampled path).",
    statistic_doc="mean_[0] = noisy mean_0 minus the projection's threshold.",
))


def _l1_recovery_datasets(n=3, d=60):
    X = np.zeros((n, d))
    X[:, 0] = 1.0
    X_prime = X.copy()
    X_prime[-1, 0] = -1.0
    return (X, None), (X_prime, None)


register(Audit(
    name="mean_l1_recovery",
    make=_mean_make("l1_recovery", sparsity=1),
    datasets=_l1_recovery_datasets(),
    statistic=_mean0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=400, slow_runs=2000,
    claim=_ONE_GAUSSIAN, detects_halving=False,
    pair="d = 60, 3 rows e_0 (m = 8 measurements), the last replaced by -e_0: the "
         "clipped measurement A z_i of the changed row flips sign (its norm is about "
         "L, the clip 1.5 L is charged).",
    statistic_doc="mean_[0]: coordinate 0 of the basis-pursuit recovery (0 when the "
                  "recovery's norm exceeds 2L).",
))


# -- private hyperparameter search -------------------------------------------------
def _search_score(estimator, X, y):
    # Worst-case per-example score: reads the row only, (x_0 + 1)/2 in [0, 1].
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    return (X[:, 0] + 1.0) / 2.0


def _search_make(epsilon, delta, seed):
    return PrivateHyperparameterSearch(
        DPSparseMeanEstimator(method="gaussian", delta=delta),
        {"norm_bound": [1.0, 2.0]}, epsilon=epsilon, delta=delta, scoring=_search_score,
        score_bounds=(0.0, 1.0), validation_fraction=0.5, shuffle=False,
        expected_repetitions=1.01, refit=False, random_state=seed)


def _search_datasets(n=4):
    X = np.ones((n, 1))
    X_prime = X.copy()
    X_prime[-1, 0] = -1.0
    y = np.zeros(n)
    return (X, y), (X_prime, y)


def _best_score(fitted):
    return float(fitted.best_score_)


register(Audit(
    name="private_search",
    make=_search_make,
    datasets=_search_datasets(),
    statistic=_best_score,
    epsilon=2.0, delta=GAUSS_DELTA, n_runs=900, slow_runs=3000,
    claim=search_claim,
    pair="4 rows x = 1, validation_fraction 1/2 and shuffle=False: the last two rows "
         "are the validation part; the last is replaced by x = -1. Two candidates of "
         "DPSparseMeanEstimator (Gaussian noise), fitted on the training rows (the same "
         "on both sides), scored by (x_0 + 1)/2, which reads the row: the mean "
         "validation score moves by its full sensitivity 1/n_val. The score noise is "
         "calibrated to the fits' zCDP rho; E[K] = 1.01 keeps the runs at one but for "
         "about 1% of the searches, which the claim charges in full. (A refit on all "
         "rows adds a second channel but halves every fit's budget: the same power per "
         "run at twice the cost.)",
    statistic_doc="best_score_: the winning run's noisy score, shifted by the sensitivity "
                  "whatever the number of runs.",
))
