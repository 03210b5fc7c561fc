"""One diagonal Newton step from the null model on privately screened features.

For logistic regression with ``p >> n`` (text: hashed n-grams, tf-idf), where noisy
gradient descent cannot take enough steps for the noise it adds on every coordinate.
The run is a handful of Gaussian releases, each with a fixed share of the budget
(:data:`SHARES`), and post-processing:

1. the class counts, giving the rates ``p_k`` and the null model's intercept
   ``b0_k = logit(p_k)`` (only with an intercept);
2. the label association ``A = sum_i (1[y_i = +1] - p) xt_i`` of every feature
   (:mod:`._screening`), which is ``-n`` times the gradient at the null model; its
   coordinates are screened (``feature_selection``) and soft-thresholded at the cut
   plus ``n alpha_1`` (the proximal step of the l1 part of the penalty);
3. the curvature ``M_j = sum_i xh_ij^2`` of the kept coordinates, ``xh_i`` the row
   with entries clipped to ``feature_bound``, then clipped to ``L``, and its vector of
   squares ``v_i = (xh_ij^2)_j`` rescaled to the l2 norm ``nu`` of a typical row:
   ``nu`` is the upper edge of the dyadic level of the median of ``||v_i||_2``, from a
   histogram of those norms on the levels ``m L 2^-j``, ``m = min(max_j b_j, L)``
   (sensitivity ``sqrt(2)``, as the score scale of :mod:`._calibration`). Every row then
   moves the sums by ``nu`` and two rows' non-negative vectors differ by at most
   ``sqrt(2) nu``: the sensitivity is that of a typical row, not ``sqrt(2) m L``, that
   of a row with one entry of ``m``. On IMDB (hashed n-grams, unit rows) the median
   norm is 0.22, and the noise at the worst case's sensitivity was above the
   curvature of all but 73 of the 262,144 features. Without noise nothing is
   rescaled: ``M_j`` is the exact curvature;
4. the step ``w_j = soft(A_j) / (max(p (1 - p) max(M_j, sigma_M), sigma_A L / T) + n
   alpha_2)``: the Newton step of the penalised loss with the Hessian's diagonal at
   the null model. Each curvature is floored at its own noise standard deviation
   ``sigma_M`` (a coordinate whose curvature the release cannot see is not divided by
   noise), and each denominator at ``sigma_A L / T``, with ``sigma_A`` the
   association's noise and ``T = PRIOR_SCALE``: the association's noise then moves no
   coefficient by more than ``T / L`` in standard deviation, so that a rare feature,
   whose association is mostly noise and whose curvature is small, is not amplified
   past the scale a logistic coefficient has (the weakly informative prior of Gelman,
   Jakulin, Pittau & Su 2008 puts its scale at 2.5);
5. the decision (scale and intercept) from two histograms of the scores ``x_i . w``
   (:mod:`._calibration`), falling back to the intercept alone, the privately
   estimated majority, where the direction does not beat it; with K > 1 classes, a
   seventh release (the argmax rule's correct training rows and each class's rows,
   sensitivity ``sqrt(3)``) keeps the rule only where it beats the most frequent class.

Privacy (replace-one): six Gaussian mechanisms with the sensitivities above
(``sqrt(K)``, ``2 L D``, ``sqrt(2)``, ``sqrt(2) nu``, ``sqrt(2K)``, ``sqrt(2K)``; and
``sqrt(3)`` for the multiclass comparison; ``nu`` is public once its histogram is
released), composed
exactly as one Gaussian mechanism (on the floating-point-safe path with the
lattice's slack) so that they spend exactly ``(epsilon, delta)``
(:func:`._screening.noise_units`). One-vs-rest problems share the releases (their
sensitivities account for all K at once).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..optim.losses import LogisticLoss
from ..privacy.statistics import row_square_norms
from ..utils.validation import Interval, Options, validate_params
from ._base import Plan, Solver, SolverResult
from ._calibration import SCALE_LEVELS, _scale_from_counts, _scale_levels, calibrate
from ._screening import (
    check_exact_units,
    noise_units,
    null_curvature,
    plan_screening,
    release,
    screen,
)

__all__ = ["ScreenedNewton", "SHARES", "MULTICLASS_CALIBRATION_SHARE",
           "MULTICLASS_GAIN_SHARE", "CURVATURE_QUANTILE",
           "PRIOR_SCALE", "newton_shares"]

#: Shares of the budget (of ``mu^2``, the squared Gaussian ratio) of the six releases.
#: The association sets both which coordinates are kept and their weights, so its noise
#: dominates the error of the step and it gets three quarters; the curvature only
#: rescales the weights and is floored at its own noise (one eighth); the class rate
#: only needs relative precision (1/25) and the three histograms fix one norm, one
#: slope and one intercept from counts (1/50, 1/50 and 1/8). The class histograms'
#: eighth (a sixteenth before) halves the variance of the gain tests that choose the
#: decision (:mod:`._calibration`) for 6% more variance on the association: on a few
#: hundred rows at epsilon 1 the tests' noise, not the direction, decided whether a
#: rule that ranks well was kept (``doc/benchmarks.rst``).
SHARES = {"count": 1 / 25, "association": 3 / 4, "square_norm": 1 / 50,
          "curvature": 1 / 8, "scale": 1 / 50, "calibration": 1 / 8}
#: With K > 1 classes, the class histograms' share in place of the one in
#: :data:`SHARES`: their decision is the argmax of K calibrations, which the multiclass
#: comparison checks.
MULTICLASS_CALIBRATION_SHARE = 1 / 16
#: Quantile of the rows' norms of squares that the curvature's rows are rescaled to:
#: the median, so that the typical row keeps its weight.
CURVATURE_QUANTILE = 0.5
#: ``T``: the largest standard deviation, in units of ``1 / L``, that the
#: association's noise may give a coefficient (module docstring, step 4).
PRIOR_SCALE = 2.5
#: With K > 1 classes, the share of the comparison of the argmax rule with the most
#: frequent class (:func:`._calibration.calibrate`): a quarter of the class histograms'.
MULTICLASS_GAIN_SHARE = MULTICLASS_CALIBRATION_SHARE / 4

_EVENT_NAMES = {"count": "class counts", "association": "label association",
                "square_norm": "curvature norm", "curvature": "curvature", "scale": "score scale",
                "calibration": "score calibration", "gain": "multiclass comparison"}

_OPTIONS = {
    "feature_selection": [Options("auto", "none", "threshold", "sure"),
                          Interval(numbers.Integral, 1, None)],
    "feature_selection_share": [Interval(numbers.Real, 0, 1, closed="neither"), None],
    "floating_point_safe": ["boolean"],
}


def newton_shares(fit_intercept=True, association_share=None, n_targets=1):
    """The budget shares of a run (summing to 1): :data:`SHARES` without the count when
    there is no intercept, with :data:`MULTICLASS_CALIBRATION_SHARE` for the class
    histograms of ``n_targets > 1`` classes and :data:`MULTICLASS_GAIN_SHARE` for their
    comparison with an intercept, and with the association's share set to
    ``association_share`` if given (the others scaled to fill the rest)."""
    shares = {k: v for k, v in SHARES.items() if fit_intercept or k != "count"}
    if n_targets > 1:
        shares["calibration"] = MULTICLASS_CALIBRATION_SHARE
    if fit_intercept and n_targets > 1:
        shares["gain"] = MULTICLASS_GAIN_SHARE
    if association_share is None:
        total = sum(shares.values())
        return {k: v / total for k, v in shares.items()}
    rest = sum(v for k, v in shares.items() if k != "association")
    return {k: (association_share if k == "association" else (1 - association_share) * v / rest)
            for k, v in shares.items()}


@dataclass(frozen=True, kw_only=True, eq=False)
class NewtonPlan(Plan):
    shares: dict
    units: dict
    screening: object
    square_norm_bound: float
    fit_intercept: bool
    floating_point_safe: bool


class ScreenedNewton(Solver):
    """Private screening and one diagonal Newton step (see the module docstring)."""

    name = "screened_newton"
    reads = frozenset({"feature_selection_share"})
    screens = True
    #: The ``feature_selection`` rules it takes besides an integer, "auto" and "none".
    screening_rules = frozenset({"threshold", "sure"})
    #: Penalty strength of the estimators' ``alpha=None``: none, the soft threshold at
    #: the association's noise and the curvature's ridge at its own noise regularise.
    default_alpha = 0.0

    def check(self, problem, options, epsilon, delta):
        if not isinstance(problem.loss, LogisticLoss):
            raise ValueError("solver='screened_newton' fits the logistic loss only")
        if math.isfinite(epsilon) and delta == 0:
            raise ValueError("solver='screened_newton' adds Gaussian noise and needs delta > 0")

    def plan(self, problem, shape, epsilon, delta, options):
        options = {"feature_selection": "auto", "feature_selection_share": None,
                   "floating_point_safe": True, **options}
        validate_params(_OPTIONS, {k: options[k] for k in _OPTIONS}, f"solver {self.name!r}")
        n, p, n_targets = shape
        safe = bool(options["floating_point_safe"])
        fit_intercept = bool(problem.fit_intercept)
        shares = newton_shares(fit_intercept, options["feature_selection_share"], n_targets)
        names = [f"{self.name}: {_EVENT_NAMES[k]}" for k in shares]
        units, events = noise_units(epsilon, delta, list(shares.values()), safe, names)
        units = dict(zip(shares, units, strict=True))
        if safe:
            # The largest releases: the association (p values a problem) and the
            # decision's scale counts (SCALE_LEVELS a problem).
            check_exact_units(units.values(), max(p, SCALE_LEVELS) * n_targets,
                              remedy="a larger epsilon, delta or feature_selection_share "
                                     "(the screening's share)")
        screening = plan_screening(
            options["feature_selection"], p, count_unit=units.get("count"),
            association_unit=units["association"], floating_point_safe=safe)
        L = float(problem.norm_bound)
        m = min(float(np.max(problem.feature_bound)), L)
        return NewtonPlan(
            solver=self.name, n_samples=n, n_features=p, n_targets=n_targets,
            epsilon=epsilon, delta=delta, events=tuple(events), n_iter=1, options=options,
            shares=shares, units=units, screening=screening,
            square_norm_bound=m * L, fit_intercept=fit_intercept,
            floating_point_safe=safe)

    def solve(self, problem, data, plan, rng):
        n, p, K = plan.n_samples, plan.n_features, plan.n_targets
        screened = screen(problem, data, plan.screening, rng,
                          extra_threshold=n * problem.l1)
        S = screened.columns
        L = float(problem.norm_bound)
        square_norm = _release_square_norm(problem, data, plan, rng)
        sums = data.column_second_moment_sums(problem.feature_bound, L, square_norm)[0]
        # Without noise (square_norm None) the sums are the exact curvature.
        sensitivity = math.sqrt(2.0) * (square_norm or 0.0)
        curvature, sigma_m = release(sums[S], sensitivity, plan.units["curvature"],
                                     plan.floating_point_safe, rng)
        hessian = np.outer(np.maximum(curvature, sigma_m), null_curvature(problem, screened))
        floor = screened.sigma * L / PRIOR_SCALE
        directions = screened.weights / (np.maximum(hessian, floor) + n * problem.l2)
        coef_S, intercept, used = calibrate(
            data, S, directions, norm_bound=problem.norm_bound, offsets=screened.offsets,
            scale_unit=plan.units["scale"], calibration_unit=plan.units["calibration"],
            floating_point_safe=plan.floating_point_safe, rng=rng,
            fit_intercept=plan.fit_intercept, gain_unit=plan.units.get("gain"),
            prior_offsets=plan.fit_intercept)
        coef = np.zeros((K, p))
        coef[:, S] = coef_S.T
        info = {"n_selected": int(S.size), "directions_used": used,
                "association": screened.association, "association_noise": screened.sigma}
        return SolverResult(coef, intercept, 1, plan.events, info)


def _square_norm_counts(rows, Y, start, feature_bound, norm_bound, bound):
    """Counts of the rows' ``||v_i||_2`` on the dyadic levels below ``bound`` (a term of
    :meth:`~skdp_sparse.data.LocalData.row_sum`: one count per row)."""
    norms = row_square_norms(rows, norm_bound, feature_bound=feature_bound)
    return np.bincount(_scale_levels(norms, bound), minlength=SCALE_LEVELS).astype(np.float64)


def _release_square_norm(problem, data, plan, rng):
    """``nu``: the upper edge of the level of the median of the rows' norms of squares,
    from their noisy histogram (module docstring, step 3); None without noise (the
    curvature is exact)."""
    unit = plan.units["square_norm"]
    if unit == 0:
        return None
    bound = plan.square_norm_bound
    counts = data.row_sum(_square_norm_counts, problem.feature_bound,
                          float(problem.norm_bound), bound)
    # One row moves one count from one level to another: l2 sensitivity sqrt(2).
    noisy, _ = release(counts, math.sqrt(2.0), unit, plan.floating_point_safe, rng)
    return _scale_from_counts(noisy, bound, data.n_samples, CURVATURE_QUANTILE)
