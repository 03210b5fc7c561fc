"""The audits of the linear models: pairs, statistics, claims and sizes.

:mod:`._registry_mean` has those of the mean and of the private search;
:mod:`skdp_sparse.testing.audits` describes them all. The regressors audited here
run with ``decision="fitted"``: each audit claims its solver's own releases, and the
calibrated decision's releases have audits of their own (``tests/test_decision.py``,
``tests/test_regression_decision.py``).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .. import DPGreedyCDRegressor, DPOutputPerturbationRegressor, DPSparseLogisticRegression
from ..privacy.mechanisms import GaussianMechanism
from ._audit import AUDITS, Audit, register
from ._claims import (
    frequent_counts_claim,
    gaussian_claim,
    greedy_claim,
    laplace_claim,
    poisson_claim,
    sparse_sgd_claim,
)

__all__ = ["ROW", "TARGET", "GAUSS_EPSILON", "GAUSS_DELTA", "LAPLACE_EPSILON",
           "LAPLACE_CLAIM_DELTA", "pair_targets"]

#: A target far outside the public target bound (1): every per-example derivative
#: of the squared loss is clipped to its bound during a short fit.
TARGET = 100.0
#: A row at the l2 bound 1.
ROW = np.array([0.6, 0.8])

#: The budget of the audits of one Gaussian release: accounted in zCDP (the
#: floating-point-safe default), it leaves a noise ratio of about 1.15, whose exact
#: profile at delta = 0.2 is the claim (about 0.9).
GAUSS_EPSILON, GAUSS_DELTA = 1.5, 0.2
#: The budget of the audits of one Laplace release (pure DP, delta = 0) and the delta of
#: their claim: the release's exact profile at delta = 0.2 is epsilon + 2 log(0.8),
#: about 1.05, reached by events of probability about 0.2 (a pure-DP claim is reached
#: only in tails that need several times the runs).
LAPLACE_EPSILON, LAPLACE_CLAIM_DELTA = 1.5, 0.2

def _coef0(fitted):
    return float(np.ravel(fitted.coef_)[0])


def _projection_statistic(fitted):
    # The output's component along (ROW, 1), the direction in which S and S' differ.
    coef = np.ravel(fitted.coef_)
    return float(coef @ ROW + np.ravel(fitted.intercept_)[0])


def pair_targets(n, value=TARGET):
    """Targets of S (all ``value``) and S' (the last one negated)."""
    y = np.full(n, value)
    y_prime = y.copy()
    y_prime[-1] = -value
    return y, y_prime


_ONE_GAUSSIAN = gaussian_claim()

def _own_releases(epsilon, delta, seed, **params):
    """The regressor of an audit of its solver's own releases: ``decision="fitted"``,
    so that the calibrated decision's releases (audited on their own) stay out."""
    return DPGreedyCDRegressor(epsilon=epsilon, delta=delta, decision="fitted",
                               random_state=seed, **params)


def _own_releases_make(**params):
    """The ``make`` of an audit of a solver's own releases, with ``params``."""
    def make(epsilon, delta, seed):
        return _own_releases(epsilon, delta, seed, **params)
    return make


# -- coordinate descent ------------------------------------------------------
register(Audit(
    name="cd",
    make=_own_releases_make(solver="cd", max_iter=1, penalty=None, fit_intercept=False),
    datasets=tuple((np.ones((2, 1)), y) for y in pair_targets(2)),
    statistic=_coef0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=gaussian_claim(skip_curvature=True),
    pair="one feature, two rows x = 1; the last target +100 -> -100: the clipped "
         "coordinate gradient moves by the full 2C/n. Both rows have the same second "
         "moments, so the private curvature estimate (10% of the budget) has the same "
         "law on both sides: the claim is the update's discrete Gaussian alone.",
    statistic_doc="coef_[0] after one update: a Gaussian mechanism of the sensitivity "
                  "the noise is calibrated to.",
))


# -- noisy gradient descent --------------------------------------------------
register(Audit(
    name="sgd",
    make=_own_releases_make(solver="sgd", max_iter=1, penalty=None),
    datasets=tuple((np.tile(ROW, (2, 1)), y) for y in pair_targets(2)),
    statistic=_projection_statistic,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=_ONE_GAUSSIAN,
    pair="two rows at the l2 bound, targets +100; the last one -> -100: the clipped "
         "per-example gradient (x, 1) flips sign, the full 2 C2 of the noisy sum.",
    statistic_doc="coef_ . x + intercept_ after one full-batch step.",
))


# The regressor's default decision at small n mu keeps noisy gradient descent's own fit
# with the noise ridge (solvers.decision.keeps_own): a plan of its own (the ridge in the
# penalty, the smoothness and so the step size), reached only through decision="auto".
register(Audit(
    name="sgd_noise_ridge",
    make=lambda epsilon, delta, seed: DPGreedyCDRegressor(
        epsilon=epsilon, delta=delta, solver="sgd", max_iter=3, penalty=None,
        decision="auto", random_state=seed),
    datasets=tuple((np.tile(ROW, (2, 1)), y) for y in pair_targets(2)),
    statistic=_projection_statistic,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=_ONE_GAUSSIAN,
    pair="the pair of the sgd audit: each of the three full-batch steps' clipped "
         "gradient sums moves by the full 2 C2 (the iterates' ridge term is public "
         "post-processing of the earlier steps).",
    statistic_doc="coef_ . x + intercept_ of the averaged iterate after three steps "
                  "with the noise ridge.",
))


# -- phased SGD --------------------------------------------------------------
register(Audit(
    name="phased_sgd",
    make=_own_releases_make(solver="phased_sgd", max_iter=1, penalty=None),
    datasets=tuple((ROW[None, :], y) for y in pair_targets(1)),
    statistic=_projection_statistic,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=_ONE_GAUSSIAN,
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
_OP_DATA = tuple((np.ones((1, 1)), y) for y in pair_targets(1, 1.0))

register(Audit(
    name="output_perturbation_gaussian",
    make=_op_make,
    datasets=_OP_DATA,
    statistic=_coef0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=_ONE_GAUSSIAN,
    pair=_OP_PAIR,
    statistic_doc="coef_[0]: the discrete Gaussian release.",
))

register(Audit(
    name="output_perturbation_laplace",
    make=_op_make,
    datasets=_OP_DATA,
    statistic=_coef0,
    epsilon=LAPLACE_EPSILON, delta=0.0, n_runs=1200, slow_runs=4000,
    claim=laplace_claim, claim_delta=LAPLACE_CLAIM_DELTA,
    pair=_OP_PAIR,
    statistic_doc="coef_[0]: the discrete Laplace release (pure DP).",
))


# -- greedy coordinate descent -------------------------------------------------
# A greedy step releases two things: the selected coordinate and its update. Each
# has its own audit, whose statistic reads it alone and whose claim is its exact
# profile (so that half the noise of either one shows), and the whole step is
# audited with the private curvature estimate.
_GREEDY_PAIR = (
    "p = {p} features, two rows of +-1 entries, targets +100 (every per-example "
    "coordinate gradient clipped to its bound C): the second row (1, -1, ..., -1) is "
    "replaced by its opposite, so the coordinate gradients go from (-C, 0, ..., 0) "
    "to (0, -C, ..., -C): every selection score moves by the full sensitivity "
    "2C/(n sqrt(M)), coordinate 0 up and all others down, and the update of any "
    "selected coordinate moves by the full 2C/n."
)
_UPDATE_PAIR = (
    "one feature, two rows x = 1, targets +100; the second row -> x = -1: the clipped "
    "coordinate gradient moves by the full 2C/n, and the selection (of the only "
    "coordinate) releases nothing."
)
_LOGISTIC = (" (DPSparseLogisticRegression, labels +1, gradient_clip 1/2: at w = 0 the "
             "clipped logistic derivative is 1/2.)")
_SELECTION_STAT = ("+1 if coordinate 0 was selected (coef_[0] != 0), -1 otherwise. The "
                   "claim is the exact profile of the selected coordinate, from the "
                   "selection's epsilon in the fit's events.")
_UPDATE_STAT = ("coef_[0] after one step: the update, whose claim is its exact profile "
                "(the noise ratio of the fit's update event).")
_STEP_STAT = ("coef_[0] after one greedy step: 0 unless coordinate 0 was selected, "
              "then its noisy update; the event {coef_[0] > t} combines the selection "
              "(more likely on S) with the update (shifted up on S). The claim is the "
              "exact profile of the whole step on the pair (the coordinate and its "
              "update), from the fit's events.")
_SAME_MOMENTS = (" Both datasets have the same column second moments (entries +-1), so "
                 "the curvature release has the same law on both and the claim leaves "
                 "it out (the rescaled clips and curvatures leave the scores, in units "
                 "of their sensitivity, and the update's ratio as they are).")


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


def _greedy_make(selection, curvature, p):
    def make(epsilon, delta, seed):
        return _own_releases(
            epsilon, delta, seed,
            solver="greedy_cd", selection=selection,
            curvature=curvature, max_iter=1, penalty=None, fit_intercept=False,
            # The rows' l2 norm is sqrt(p); a hair above it so that no row is clipped.
            norm_bound=math.sqrt(p) * (1 + 1e-9))
    return make


def _greedy_logistic_make(epsilon, delta, seed):
    # |l'| = 1/2 at the start point w = 0: gradient_clip = 1/2 puts every per-example
    # coordinate gradient at its bound (an explicit clip keeps the bounds' curvature).
    return DPSparseLogisticRegression(
        epsilon=epsilon, delta=delta, solver="greedy_cd", selection="laplace",
        curvature="bound", gradient_clip=0.5, max_iter=1, penalty=None,
        fit_intercept=False, classes=[-1, 1], random_state=seed)


def _greedy_datasets(p, y=TARGET):
    X, X_prime = _greedy_pair(p)
    y = np.full(2, y)
    return (X, y), (X_prime, y)


def _selected_first(fitted):
    return 1.0 if np.ravel(fitted.coef_)[0] != 0 else -1.0


register(Audit(
    name="greedy_cd_exponential",
    make=_greedy_make("exponential", "bound", 3),
    datasets=_greedy_datasets(3),
    statistic=_selected_first,
    epsilon=2.0, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=greedy_claim(3, "selection"),
    pair=_GREEDY_PAIR.format(p=3),
    statistic_doc=_SELECTION_STAT,
))

register(Audit(
    name="greedy_cd_exponential_update",
    make=_greedy_make("exponential", "bound", 1),
    datasets=_greedy_datasets(1),
    statistic=_coef0,
    epsilon=2.5, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=greedy_claim(1),
    pair=_UPDATE_PAIR,
    statistic_doc=_UPDATE_STAT,
))

register(Audit(
    name="greedy_cd_exponential_private_curvature",
    make=_greedy_make("exponential", "private", 3),
    datasets=_greedy_datasets(3),
    statistic=_coef0,
    epsilon=GAUSS_EPSILON, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=greedy_claim(3),
    pair=_GREEDY_PAIR.format(p=3) + _SAME_MOMENTS,
    statistic_doc=_STEP_STAT,
))

register(Audit(
    name="greedy_cd_laplace",
    make=_greedy_logistic_make,
    datasets=_greedy_datasets(4, 1.0),
    statistic=_selected_first,
    epsilon=3.5, delta=0.0, n_runs=1000, slow_runs=3000,
    claim=greedy_claim(4, "selection"), claim_delta=LAPLACE_CLAIM_DELTA,
    pair=_GREEDY_PAIR.format(p=4).replace("targets +100", "labels +1") + _LOGISTIC,
    statistic_doc=_SELECTION_STAT,
))

register(Audit(
    name="greedy_cd_laplace_update",
    make=_greedy_logistic_make,
    datasets=_greedy_datasets(1, 1.0),
    statistic=_coef0,
    epsilon=3.0, delta=0.0, n_runs=1200, slow_runs=4000,
    claim=greedy_claim(1), claim_delta=LAPLACE_CLAIM_DELTA,
    pair=_UPDATE_PAIR.replace("targets +100", "labels +1") + _LOGISTIC,
    statistic_doc=_UPDATE_STAT,
))

register(Audit(
    name="greedy_cd_laplace_private_curvature",
    make=_greedy_make("laplace", "private", 4),
    datasets=_greedy_datasets(4),
    statistic=_coef0,
    epsilon=2.5, delta=0.0, n_runs=1800, slow_runs=6000,
    claim=greedy_claim(4), claim_delta=LAPLACE_CLAIM_DELTA,
    pair=_GREEDY_PAIR.format(p=4) + _SAME_MOMENTS,
    statistic_doc=_STEP_STAT,
))


# -- noisy gradient descent with Poisson subsampling ----------------------------
_POISSON_N, _POISSON_BATCH = 100, 99


def _sgd_poisson_datasets(n=_POISSON_N):
    X = np.zeros((n, 2))
    X[-1] = ROW
    y = np.zeros(n)
    y[-1] = TARGET
    y_prime = y.copy()
    y_prime[-1] = -TARGET
    return (X, y), (X, y_prime)


register(Audit(
    name="sgd_poisson",
    make=_own_releases_make(solver="sgd", batch_size=_POISSON_BATCH, max_iter=1, penalty=None,
                            fit_intercept=False),
    datasets=_sgd_poisson_datasets(),
    statistic=_projection_statistic,
    epsilon=2.0, delta=GAUSS_DELTA, n_runs=1400, slow_runs=3000,
    claim=poisson_claim(_POISSON_N, _POISSON_BATCH),
    pair="100 rows, 99 of them zero (no gradient), the last at the l2 bound with target "
         "+100 -> -100; Poisson rate q = 99/100: the noisy sum is N(0) with probability "
         "1 - q and moves by +-C2 otherwise. The claim is the exact profile of that "
         "mixture at the noise multiplier of the fit's RDP event.",
    statistic_doc="coef_ . x after one step (no intercept).",
))


# -- sparsity-preserving SGD -----------------------------------------------------
def _sparse_gradient_statistic(fitted):
    return float(fitted.coef_[0] + fitted.intercept_)


register(Audit(
    name="sparse_sgd_gradient",
    make=_own_releases_make(solver="sparse_sgd", batch_size=2, max_iter=1, penalty=None,
                            fit_intercept=True),
    datasets=tuple((sp.csr_matrix(np.ones((2, 1))), y) for y in pair_targets(2)),
    statistic=_sparse_gradient_statistic,
    epsilon=2.5, delta=GAUSS_DELTA, n_runs=800, slow_runs=3000,
    claim=sparse_sgd_claim("gradient", 1),
    pair="one feature (d = 1: the default threshold is -inf, the feature is selected at "
         "every step), two rows x = 1, full batch; the last target +100 -> -100 flips "
         "the clipped gradient (x, 1): the noisy sum moves by the full 2 C2. The "
         "counts do not move: the claim is the gradient channel alone.",
    statistic_doc="coef_[0] + intercept_ after one step.",
))

_SELECTION_D = 6


def _sparse_selection_datasets(d=_SELECTION_D):
    # Target 0: at w = 0 the squared loss's derivative is 0, so the gradient sums are
    # the same on both sides and only the counts move.
    y = np.zeros(1)
    rows = [np.zeros((1, d)) for _ in range(2)]
    rows[0][0, 0] = rows[1][0, 1] = 1.0
    return tuple((sp.csr_matrix(r), y) for r in rows)


def _selection_statistic(fitted):
    coef = fitted.coef_
    return float(coef[0] != 0) - float(coef[1] != 0)


register(Audit(
    name="sparse_sgd_selection",
    make=_own_releases_make(solver="sparse_sgd", batch_size=1, max_iter=1, penalty=None,
                            fit_intercept=False),
    datasets=_sparse_selection_datasets(),
    statistic=_selection_statistic,
    epsilon=4.0, delta=GAUSS_DELTA, n_runs=1600, slow_runs=5000,
    claim=sparse_sgd_claim("counts", _SELECTION_D),
    pair=f"d = {_SELECTION_D} features (the default threshold, B = 1 absent feature "
         "selected per step on average, sits about one count noise scale up), one "
         "row holding feature 0 with target 0, replaced by a row holding feature 1: "
         "the counts move by sqrt(2) C_c, the gradients (0 at w = 0) not at all. The "
         "claim is the count channel's Gaussian: sqrt(2) C_c against z C_c / "
         "sqrt(share).",
    statistic_doc="[coef_[0] != 0] - [coef_[1] != 0]: a selected feature gets a noisy "
                  "update, an unselected one stays 0; the statistic reads the two "
                  "released bits.",
))


register(Audit(
    name="sparse_sgd_frequent",
    make=_own_releases_make(solver="sparse_sgd", frequent_features=1, batch_size=1,
                            max_iter=1, penalty=None, fit_intercept=False),
    datasets=_sparse_selection_datasets(2),
    statistic=_selection_statistic,
    epsilon=4.0, delta=GAUSS_DELTA, n_runs=1600, slow_runs=5000,
    claim=frequent_counts_claim,
    pair="DP-FEST, the top-1 of d = 2 noisy feature counts (a quarter of the budget), "
         "then one full-batch step on it: one row holding feature 0 with target 0, "
         "replaced by a row holding feature 1: the counts move by sqrt(2) C_c, the "
         "gradient (0 at w = 0) not at all. The claim is the count release's Gaussian.",
    statistic_doc="[coef_[0] != 0] - [coef_[1] != 0]: which feature the top-1 kept (it "
                  "gets a noisy update, the other stays 0).",
))


# -- bias-reduced SGD --------------------------------------------------------------
def _bias_reduced_make(epsilon, delta, seed):
    # The privacy filter stops a private run; without noise a step count is needed.
    return _own_releases(
        epsilon, delta, seed,
        solver="bias_reduced_sgd", penalty=None,
        max_iter=None if math.isfinite(epsilon) else 1)


def _spent(fitted, delta):
    # The filter stops the run below its budget: the claim is what it spent.
    return float(fitted.epsilon_spent_)


def _bias_reduced_halved():
    # The documented calibration (Ghazi et al., Alg. 5-6; solvers.bias_reduced_sgd):
    # every projection mechanism has the Gaussian noise of (epsilon/32, delta/16). Its
    # events are (epsilon, delta) pairs of the privacy filter, which carry no noise
    # scale; half the noise is the epsilon' whose per-mechanism calibration gives half
    # that sigma (the filter then allows the same single step on two rows).
    audit = AUDITS["bias_reduced_sgd"]
    eps0, delta0 = audit.epsilon / 32, audit.delta / 16
    sigma = GaussianMechanism(1.0, epsilon=eps0, delta=delta0, floating_point_safe=True).sigma
    halved = GaussianMechanism(1.0, sigma=sigma / 2, floating_point_safe=True)
    return 32 * halved.epsilon_at(delta0)


register(Audit(
    name="bias_reduced_sgd",
    make=_bias_reduced_make,
    datasets=tuple((np.tile(ROW, (2, 1)), y) for y in pair_targets(2)),
    statistic=_projection_statistic,
    epsilon=1.5, delta=0.1, n_runs=600, slow_runs=3000,
    claim=_spent, detects_halving=False, halved=_bias_reduced_halved,
    pair="two rows at the l2 bound, targets +100 -> -100 on the last: a run draws "
         "N = 0 (n = 2), releases G = (G_B - (G_O + G_E)/2) + G_I in which the gradients "
         "of B, O and E cancel, and the filter stops it after one step.",
    statistic_doc="coef_ . x + intercept_ of the averaged iterate.",
))
