"""The registry of audits: one worst-case pair, statistic and claim per solver and
mechanism (see :mod:`skdp_sparse.testing.audits` for what an audit asserts)."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .. import (
    DPGreedyCDRegressor,
    DPOutputPerturbationRegressor,
    DPSparseLogisticRegression,
    DPSparseMeanEstimator,
    PrivateHyperparameterSearch,
)
from ..privacy.accounting import gaussian_epsilon
from .audits import ROW, TARGET, Audit

__all__ = ["AUDITS"]

# --------------------------------------------------------------------------
# Pairs and statistics
# --------------------------------------------------------------------------
def _greedy_pair(p):
    """Two rows of +-1 entries; the second is replaced by its opposite.

    With every per-example derivative clipped to its bound (same sign for both
    rows), the coordinate gradients are ``g = (-C, 0, ..., 0)`` on S and
    ``(0, -C, ..., -C)`` on S': every selection score moves by the full
    sensitivity ``2C/n``, coordinate 0 up and every other one down, and the update
    of any selected coordinate moves by ``2C/n`` too.
    """
    shared = np.ones(p)
    changed = -np.ones(p)
    changed[0] = 1.0
    return np.vstack([shared, changed]), np.vstack([shared, -changed])


def _greedy_statistic(fitted):
    # One step updates one coordinate: its signed value, read so that S pushes it up
    # (coordinate 0 moves up on S, every other one down on S').
    coef = np.ravel(fitted.coef_)
    return float(coef[0] - coef[1:].sum())


def _projection_statistic(fitted):
    # The output's component along (ROW, 1), the direction in which S and S' differ.
    coef = np.ravel(fitted.coef_)
    return float(coef @ ROW + np.ravel(fitted.intercept_)[0])


def _coef0(fitted):
    return float(np.ravel(fitted.coef_)[0])


def _mean0(fitted):
    return float(fitted.mean_[0])


def _pair_y(n, value=TARGET):
    """Targets of S (all ``value``) and S' (the last one negated)."""
    y = np.full(n, value)
    y_prime = y.copy()
    y_prime[-1] = -value
    return y, y_prime


# --------------------------------------------------------------------------
# The audits
# --------------------------------------------------------------------------
GAUSS_EPSILON, GAUSS_DELTA = 1.5, 0.1

AUDITS: dict[str, Audit] = {}


def _register(audit):
    AUDITS[audit.name] = audit
    return audit


# -- coordinate descent ------------------------------------------------------
def _cd_make(epsilon, delta, seed):
    return DPGreedyCDRegressor(
        epsilon=epsilon, delta=delta, solver="cd", max_iter=1, penalty=None,
        fit_intercept=False, random_state=seed)


_register(Audit(
    name="cd",
    make=_cd_make,
    datasets=tuple((np.ones((2, 1)), y) for y in _pair_y(2)),
    statistic=_coef0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=2000, slow_runs=6000,
    margin=1.3,
    pair="one feature, two rows x = 1; the last target +100 -> -100: the clipped "
         "coordinate gradient moves by the full 2C/n. Both rows have the same second "
         "moments, so the private curvature estimate (10% of the budget) has the same "
         "law on both sides.",
    statistic_doc="coef_[0] after one update: a Gaussian mechanism of the sensitivity "
                  "the noise is calibrated to.",
))


# -- noisy gradient descent --------------------------------------------------
def _sgd_make(epsilon, delta, seed):
    return DPGreedyCDRegressor(
        epsilon=epsilon, delta=delta, solver="sgd", max_iter=1, penalty=None,
        random_state=seed)


_register(Audit(
    name="sgd",
    make=_sgd_make,
    datasets=tuple((np.tile(ROW, (2, 1)), y) for y in _pair_y(2)),
    statistic=_projection_statistic,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=2000, slow_runs=6000,
    margin=1.3,
    pair="two rows at the l2 bound, targets +100; the last one -> -100: the clipped "
         "per-example gradient (x, 1) flips sign, the full 2 C2 of the noisy sum.",
    statistic_doc="coef_ . x + intercept_ after one full-batch step.",
))


# -- phased SGD --------------------------------------------------------------
def _phased_make(epsilon, delta, seed):
    return DPGreedyCDRegressor(
        epsilon=epsilon, delta=delta, solver="phased_sgd", max_iter=1, penalty=None,
        random_state=seed)


_register(Audit(
    name="phased_sgd",
    make=_phased_make,
    datasets=tuple((ROW[None, :], y) for y in _pair_y(1)),
    statistic=_projection_statistic,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=2000, slow_runs=6000,
    margin=1.4,
    pair="one row at the l2 bound, target +100 -> -100: the single step of the single "
         "phase moves by the full 2 eta C2 the phase's noise is calibrated to.",
    statistic_doc="coef_ . x + intercept_ (the noisy phase average).",
))


# -- output perturbation -------------------------------------------------------
def _op_make(epsilon, delta, seed):
    # Huber loss with a small threshold: at the optimum the residual is beyond it, so
    # the derivative sits at its bound k and the solution moves by the full 2 k / lambda.
    return DPOutputPerturbationRegressor(
        loss="huber", huber_threshold=0.1, target_bound=1.0, alpha=1.0,
        fit_intercept=False, epsilon=epsilon, delta=delta, random_state=seed)


_OP_PAIR = ("one row x = 1 (the l2 bound), target +1 -> -1 (the target bound), Huber "
            "threshold 0.1, lambda = 1: the minimiser moves from +0.1 to -0.1, the "
            "sensitivity 2 L / (lambda n) exactly (up to the solver tolerance term).")

_register(Audit(
    name="output_perturbation_gaussian",
    make=_op_make,
    datasets=tuple((np.ones((1, 1)), y) for y in _pair_y(1, 1.0)),
    statistic=_coef0,
    epsilon=1.0, delta=0.2, n_runs=2500, slow_runs=8000,
    margin=1.25,
    pair=_OP_PAIR,
    statistic_doc="coef_[0]: the discrete Gaussian release (accounted in zCDP).",
))

_register(Audit(
    name="output_perturbation_laplace",
    make=_op_make,
    datasets=tuple((np.ones((1, 1)), y) for y in _pair_y(1, 1.0)),
    statistic=_coef0,
    epsilon=1.0, delta=0.0, n_runs=3000, slow_runs=10000, confidence=0.999,
    margin=1.25,
    pair=_OP_PAIR,
    statistic_doc="coef_[0]: the discrete Laplace release (pure DP).",
))


# -- mean estimation -----------------------------------------------------------
def _mean_pair(n, d=1):
    """n rows: n - 1 empty ones and e_0, which S' replaces by -e_0 (sensitivity 2/n)."""
    X = sp.lil_matrix((n, d))
    X[n - 1, 0] = 1.0
    X = sp.csr_matrix(X)
    X_prime = X.copy()
    X_prime.data = -X_prime.data
    return (X, None), (X_prime, None)


def _mean_make(method, **kwargs):
    def make(epsilon, delta, seed):
        return DPSparseMeanEstimator(epsilon=epsilon, delta=delta, method=method,
                                     random_state=seed, **kwargs)
    return make


_MEAN_PAIR = ("20 rows, 19 empty and e_0, replaced by -e_0: the clipped mean moves by "
              "2L/n in l2 and l1 on one coordinate, far inside the l1 ball of the "
              "projection.")

_register(Audit(
    name="mean_gaussian",
    make=_mean_make("gaussian"),
    datasets=_mean_pair(20),
    statistic=_mean0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=2000, slow_runs=6000,
    margin=1.4,
    pair=_MEAN_PAIR, statistic_doc="mean_[0].",
))

_register(Audit(
    name="mean_laplace",
    make=_mean_make("laplace"),
    datasets=_mean_pair(20),
    statistic=_mean0,
    epsilon=1.0, delta=0.0, n_runs=5000, slow_runs=12000, confidence=0.999,
    margin=1.4,
    pair=_MEAN_PAIR, statistic_doc="mean_[0] (discrete Laplace).",
))


_register(Audit(
    name="mean_projection_laplace",
    make=_mean_make("projection", sparsity=1),
    datasets=_mean_pair(20),
    statistic=_mean0,
    epsilon=1.0, delta=0.0, n_runs=5000, slow_runs=12000, confidence=0.999,
    margin=1.4,
    pair=_MEAN_PAIR, statistic_doc="mean_[0] (discrete Laplace noise).",
))


# -- greedy coordinate descent -------------------------------------------------
_GREEDY_PAIR = (
    "p = {p} features, two rows of +-1 entries, targets +100 (every per-example "
    "coordinate gradient clipped to its bound C): the second row (1, -1, ..., -1) is "
    "replaced by its opposite, so the coordinate gradients go from (-C, 0, ..., 0) "
    "to (0, -C, ..., -C)/1: every selection score moves by the full sensitivity "
    "2C/(n sqrt(M)), coordinate 0 up and all others down, and the update of "
    "coordinate 0 moves by the full 2C/n."
)
_GREEDY_STAT = ("coef_[0] after one greedy step: 0 unless coordinate 0 was selected, "
                "then its noisy update; the event {coef_[0] > t} combines the selection "
                "(more likely on S) with the update (shifted up on S).")


def _greedy_make(selection, curvature, p):
    def make(epsilon, delta, seed):
        return DPGreedyCDRegressor(
            epsilon=epsilon, delta=delta, solver="greedy_cd", selection=selection,
            curvature=curvature, max_iter=1, penalty=None, fit_intercept=False,
            # The rows' l2 norm is sqrt(p); a hair above it so that no row is clipped.
            norm_bound=math.sqrt(p) * (1 + 1e-9), random_state=seed)
    return make


def _greedy_datasets(p):
    X, X_prime = _greedy_pair(p)
    y = np.full(2, TARGET)
    return (X, y), (X_prime, y)


_register(Audit(
    name="greedy_cd_exponential",
    make=_greedy_make("exponential", "bound", 3),
    datasets=_greedy_datasets(3),
    statistic=_coef0,
    epsilon=1.0, delta=0.2, n_runs=2500, slow_runs=8000,
    margin=1.3,
    pair=_GREEDY_PAIR.format(p=3), statistic_doc=_GREEDY_STAT,
))

_register(Audit(
    name="greedy_cd_exponential_private_curvature",
    make=_greedy_make("exponential", "private", 3),
    datasets=_greedy_datasets(3),
    statistic=_coef0,
    epsilon=1.0, delta=0.2, n_runs=3000, slow_runs=10000,
    margin=1.0,
    pair=_GREEDY_PAIR.format(p=3) + " Both datasets have the same column second "
         "moments (entries +-1), so the curvature release has the same law on both.",
    statistic_doc=_GREEDY_STAT,
))


def _greedy_logistic_make(epsilon, delta, seed):
    # |l'| = 1/2 at the start point w = 0: gradient_clip = 1/2 puts every per-example
    # coordinate gradient at its bound (an explicit clip keeps the bounds' curvature).
    return DPSparseLogisticRegression(
        epsilon=epsilon, delta=delta, solver="greedy_cd", selection="laplace",
        curvature="bound", gradient_clip=0.5, max_iter=1, penalty=None,
        fit_intercept=False, classes=[-1, 1], random_state=seed)


def _greedy_logistic_datasets(p):
    X, X_prime = _greedy_pair(p)
    y = np.ones(2)
    return (X, y), (X_prime, y)


_register(Audit(
    name="greedy_cd_laplace",
    make=_greedy_logistic_make,
    datasets=_greedy_logistic_datasets(4),
    statistic=_coef0,
    epsilon=1.5, delta=0.0, n_runs=5000, slow_runs=20000, confidence=0.999,
    margin=1.15,
    pair=_GREEDY_PAIR.format(p=4).replace("targets +100", "labels +1, gradient_clip 1/2")
    + " (DPSparseLogisticRegression: at w = 0 the clipped logistic derivative is 1/2.)",
    statistic_doc=_GREEDY_STAT,
))

_register(Audit(
    name="greedy_cd_laplace_private_curvature",
    make=_greedy_make("laplace", "private", 4),
    datasets=_greedy_datasets(4),
    statistic=_coef0,
    epsilon=1.5, delta=0.0, n_runs=8000, slow_runs=20000, confidence=0.999,
    margin=1.05, slow_margin=1.2,
    pair=_GREEDY_PAIR.format(p=4) + " Same column second moments on both sides.",
    statistic_doc=_GREEDY_STAT,
))


# -- noisy gradient descent with Poisson subsampling ----------------------------
def _sgd_poisson_make(epsilon, delta, seed):
    return DPGreedyCDRegressor(
        epsilon=epsilon, delta=delta, solver="sgd", batch_size=99, max_iter=1,
        penalty=None, fit_intercept=False, random_state=seed)


def _sgd_poisson_datasets(n=100):
    X = np.zeros((n, 2))
    X[-1] = ROW
    y = np.zeros(n)
    y[-1] = TARGET
    y_prime = y.copy()
    y_prime[-1] = -TARGET
    return (X, y), (X, y_prime)


_register(Audit(
    name="sgd_poisson",
    make=_sgd_poisson_make,
    datasets=_sgd_poisson_datasets(),
    statistic=_projection_statistic,
    epsilon=1.5, delta=0.2, n_runs=1800, slow_runs=6000,
    margin=1.0,
    pair="100 rows, 99 of them zero (no gradient), the last at the l2 bound with target "
         "+100 -> -100; Poisson rate q = 99/100: when the row is in the batch (almost "
         "always) the noisy sum moves by the full 2 C2. At this rate the accounting "
         "is set by the unsubsampled Renyi bound at the orders that matter, so the audit "
         "checks the Poisson path's noise against the claim; at small rates the "
         "amplification is visible only in tails beyond a few thousand runs.",
    statistic_doc="coef_ . x after one step (no intercept).",
))


# -- sparsity-preserving SGD -----------------------------------------------------
def _sparse_make(epsilon, delta, seed, fit_intercept=True):
    return DPGreedyCDRegressor(
        epsilon=epsilon, delta=delta, solver="sparse_sgd", batch_size=2, max_iter=1,
        penalty=None, fit_intercept=fit_intercept, random_state=seed)


def _sparse_gradient_datasets():
    X = sp.csr_matrix(np.ones((2, 1)))
    return tuple((X, y) for y in _pair_y(2))


def _sparse_gradient_statistic(fitted):
    return float(fitted.coef_[0] + fitted.intercept_)


_register(Audit(
    name="sparse_sgd_gradient",
    make=_sparse_make,
    datasets=_sparse_gradient_datasets(),
    statistic=_sparse_gradient_statistic,
    epsilon=1.0, delta=0.2, n_runs=3000, slow_runs=10000,
    margin=1.1,
    pair="one feature (d = 1: the default threshold is -inf, the feature is selected at "
         "every step), two rows x = 1, full batch; the last target +100 -> -100 flips "
         "the clipped gradient (x, 1): the noisy sum moves by the full 2 C2. The noisy "
         "counts carry half of the budget and nothing of the pair.",
    statistic_doc="coef_[0] + intercept_ after one step.",
))


def _sparse_selection_make(epsilon, delta, seed):
    return _sparse_make(epsilon, delta, seed, fit_intercept=False)


def _sparse_selection_datasets():
    y = np.full(1, TARGET)
    return ((sp.csr_matrix(np.array([[1.0, 0.0]])), y),
            (sp.csr_matrix(np.array([[0.0, 1.0]])), y))


def _difference_statistic(fitted):
    return float(fitted.coef_[0] - fitted.coef_[1])


_register(Audit(
    name="sparse_sgd_selection",
    make=_sparse_selection_make,
    datasets=_sparse_selection_datasets(),
    statistic=_difference_statistic,
    epsilon=1.0, delta=0.1, n_runs=2000, slow_runs=8000, detects_halving=False,
    pair="two features (default threshold 0), one row holding feature 0, replaced by a "
         "row holding feature 1 (target +100): each count moves by 1 and the gradient "
         "of each feature by the full clip, but a feature's count is released only "
         "through whether it passes the threshold.",
    statistic_doc="coef_[0] - coef_[1]: a selected feature gets a noisy update, an "
                  "unselected one stays 0.",
))


# -- bias-reduced SGD --------------------------------------------------------------
def _bias_reduced_make(epsilon, delta, seed):
    # The privacy filter stops a private run; without noise a step count is needed.
    return DPGreedyCDRegressor(
        epsilon=epsilon, delta=delta, solver="bias_reduced_sgd", penalty=None,
        max_iter=None if math.isfinite(epsilon) else 1, random_state=seed)


def _bias_reduced_halved():
    # The documented calibration (Ghazi et al., Alg. 5-6; skdp_sparse.optim.sgd):
    # every projection mechanism has the Gaussian noise of (epsilon/32, delta/16).
    # Its events are (epsilon, delta) pairs of the privacy filter, which carry no noise
    # scale; half the noise is the epsilon' at which that Gaussian's ratio doubles
    # (the filter then allows the same single step on two rows).
    audit = AUDITS["bias_reduced_sgd"]
    delta0 = audit.delta / 16
    mu = _gaussian_mu(audit.epsilon / 32, delta0)
    return 32 * gaussian_epsilon(2 * mu, delta0)


def _gaussian_mu(epsilon, delta):
    lo, hi = 1e-6, 1.0
    while gaussian_epsilon(hi, delta) < epsilon:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gaussian_epsilon(mid, delta) < epsilon:
            lo = mid
        else:
            hi = mid
    return lo


_register(Audit(
    name="bias_reduced_sgd",
    make=_bias_reduced_make,
    datasets=tuple((np.tile(ROW, (2, 1)), y) for y in _pair_y(2)),
    statistic=_projection_statistic,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=1000, slow_runs=5000,
    detects_halving=False, halved=_bias_reduced_halved,
    pair="two rows at the l2 bound, targets +100 -> -100 on the last: a run draws "
         "N = 0 (n = 2), releases G = (G_B - (G_O + G_E)/2) + G_I in which the gradients "
         "of B, O and E cancel, and the filter stops it after one step.",
    statistic_doc="coef_ . x + intercept_ of the averaged iterate.",
))


# -- sampled Gaussian projection (large d) and l1 recovery --------------------------
def _mean_sampled_datasets(n=20, d=1000):
    """n - 1 rows e_0 and a last row e_0 (S) or -e_0 (S'): coordinate 0 of the mean is
    far above the projection's threshold, so the released value carries the shift."""
    rows = np.arange(n)
    X = sp.csr_matrix((np.ones(n), (rows, np.zeros(n, dtype=int))), shape=(n, d))
    X_prime = X.copy()
    X_prime.data[-1] = -1.0
    return (X, None), (X_prime, None)


_register(Audit(
    name="mean_projection_gaussian",
    make=_mean_make("projection", sparsity=1),
    datasets=_mean_sampled_datasets(d=50),
    statistic=_mean0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=2000, slow_runs=6000,
    margin=1.3,
    pair="d = 50, 20 rows: 19 rows e_0 and e_0 -> -e_0: the mean moves by 2L/n on "
         "coordinate 0; the noisy vector's l1 norm exceeds the radius, so the projection "
         "soft-thresholds it (all d noise values drawn at this d).",
    statistic_doc="mean_[0] = noisy mean_0 minus the projection's threshold.",
))

_register(Audit(
    name="mean_projection_gaussian_sampled",
    make=_mean_make("projection", sparsity=1),
    datasets=_mean_sampled_datasets(),
    statistic=_mean0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=2000, slow_runs=6000,
    margin=1.35,
    pair="d = 1000, 20 rows: 19 rows e_0 and e_0 -> -e_0: the mean moves by 2L/n on "
         "coordinate 0, which stays above the soft threshold of the l1 projection; at "
         "this d the release draws only the noise values that can survive the "
         "projection (the sampled path).",
    statistic_doc="mean_[0] = noisy mean_0 minus the projection's threshold.",
))


def _l1_recovery_datasets(n=5, d=500):
    X = np.zeros((n, d))
    X[:, 0] = 1.0
    X_prime = X.copy()
    X_prime[-1, 0] = -1.0
    return (X, None), (X_prime, None)


_register(Audit(
    name="mean_l1_recovery",
    make=_mean_make("l1_recovery", sparsity=1),
    datasets=_l1_recovery_datasets(),
    statistic=_mean0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=200, slow_runs=1000,
    detects_halving=False,
    pair="d = 500, 5 rows e_0, the last replaced by -e_0: the clipped measurement "
         "A z_i of the changed row flips sign (its norm is about L, the clip 1.5 L is "
         "charged).",
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
        score_bounds=(0.0, 1.0), shuffle=False, expected_repetitions=1.05, refit=False,
        random_state=seed)


def _search_datasets(n=5):
    X = np.ones((n, 1))
    X_prime = X.copy()
    X_prime[-1, 0] = -1.0
    y = np.zeros(n)
    return (X, y), (X_prime, y)


def _best_score(fitted):
    return float(fitted.best_score_)


_register(Audit(
    name="private_search",
    make=_search_make,
    datasets=_search_datasets(),
    statistic=_best_score,
    epsilon=1.0, delta=0.2, n_runs=2500, slow_runs=8000,
    margin=1.05,
    pair="5 rows x = 1; the last, the only validation row (shuffle=False), is replaced "
         "by x = -1. Two candidates of DPSparseMeanEstimator (Gaussian noise), fitted "
         "on the training rows (the same on both sides), scored by (x_0 + 1)/2, which "
         "reads the row: the mean validation score moves by its full sensitivity "
         "1/n_val. The score noise is calibrated from the fits' Renyi curve (its rho is "
         "the fits' smallest RDP slope), so halving the fits' noise halves it too; "
         "E[K] = 1.05 keeps the selection overhead small. (A refit on all rows adds a "
         "second channel but halves every fit's budget: the same power per run at "
         "twice the cost.)",
    statistic_doc="best_score_: the winning run's noisy score, shifted by the sensitivity "
                  "whatever the number of runs.",
))
