"""A gradient solver's direction, and a decision fitted to it privately.

Noisy gradient methods rank well long before they decide well: their few, small,
noisy steps leave the scale of the coefficients and the intercept far from their
optimum (on a9a at epsilon 10, phased SGD reaches ROC AUC 0.87 and predicts the
majority class for every row). :class:`CalibratedDecision` runs such a solver on
part of the budget and spends the rest on the two histograms of
:func:`._calibration.calibrate`, which fit the slope and the intercept of the
solver's score ``x . w`` (or fall back to the privately estimated majority).

Budget. The histograms get a share of the Gaussian budget ``mu^2``,
``mu = gaussian_mu(epsilon, delta)`` (the GDP ``mu`` of one Gaussian mechanism that is
exactly ``(epsilon, delta)``-DP), split between the scale and the class histograms
as :data:`DECISION_SPLIT` says: the smallest share at which the noise of a class
histogram's cell is ``CELL_NOISE`` of an average cell's count, ``n / (2B)`` for ``B``
bins, and at most ``MAX_DECISION_SHARE`` (:func:`decision_share`). A few noisy steps
are worth more than a sharper histogram, so the share is no larger than the counts
need: ``1.2%`` on a9a at epsilon 1, ``0.02%`` at epsilon 10. Both are Gaussian
mechanisms on integer counts (l2 sensitivity ``sqrt(2K)`` for K one-vs-rest
problems), recorded with their privacy loss distribution, so they compose with the
solver's own steps in the same accountant; the solver is then planned at the
largest ``epsilon_in`` for which the whole composes to at most ``(epsilon, delta)``
(:func:`inner_epsilon`). A third release takes a quarter of the share on top: with
K > 1 classes it compares the calibrated argmax rule and the solver's own with the
most frequent class
(:data:`MULTICLASS_GAIN_SPLIT`), with two it counts the positive rows, the majority a
fit falls back on (:data:`CLASS_COUNT_SPLIT`; :func:`._calibration.calibrate`).
Everything after the releases is post-processing.

Regression (the squared loss). The score's prediction is refitted the same way: a
release of the scores' centre, the scale release of the centred scores, then one
release of the moment sums of the clipped, centred, scaled scores and the clipped
targets (:func:`._calibration.calibrate_regression`), from which least
squares gives the slope and the intercept, shrunk to the privately estimated mean of
the targets where the noise hides the slope. Its share is the smallest at which the
noise of each sum is ``MOMENT_NOISE`` of ``n`` (a mean known to 1% of the targets'
range), at most :data:`MAX_REGRESSION_SHARE` (:func:`decision_share`): below the
``n mu`` at which that suffices, a solver's own fit is mostly noise, and the refit's
fallback on the mean is what the budget is best spent on. Where even the cap leaves
each sum a noise above :data:`REFIT_NOISE_FACTOR` times that (``n mu`` below about
240), the refit seldom keeps a slope and its half of the budget was better spent on
the steps on every set measured: ``decision="auto"`` of a solver that fits its own
ridge (noisy gradient descent) then keeps that solver's prediction on the whole
budget, with the ridge its planned noise calls for
(:func:`regression_refit_informative`, :func:`~.sgd.noise_ridge`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..optim.losses import LogisticLoss, SquaredLoss
from ..privacy.accounting import PrivacyEvent, compose, gaussian_epsilon, gaussian_mu
from ._base import Plan, Solver, SolverResult
from ._calibration import (
    CALIBRATION_BINS,
    MOMENT_SENSITIVITY,
    MOMENT_SENSITIVITY_L1,
    SCALE_LEVELS,
    calibrate,
    calibrate_regression,
)
from ._screening import check_exact_units, gaussian_release_event, release_mu

__all__ = ["MAX_DECISION_SHARE", "MAX_MULTICLASS_DECISION_SHARE", "CELL_NOISE",
           "DECISION_SPLIT", "MULTICLASS_GAIN_SPLIT",
           "CLASS_COUNT_SPLIT", "MOMENT_NOISE", "MAX_REGRESSION_SHARE", "REGRESSION_SPLIT",
           "REFIT_NOISE_FACTOR", "regression_refit_informative", "keeps_own",
           "CalibratedDecision", "decision_share", "decision_share_pure", "decision_splits",
           "decision_units", "inner_epsilon"]

#: Largest share of the fit's Gaussian budget (of ``mu^2``) that buys a binary
#: decision: about what the screened Newton step gives its own two histograms (1/50 +
#: 1/8 of its rho). It binds where the rows are few against the noise, where the gain
#: tests that choose the decision (:mod:`._calibration`) need it more than the solver's
#: steps: 1/12 kept the majority for rules that ranked well (``doc/benchmarks.rst``).
MAX_DECISION_SHARE = 1 / 6
#: ... and K > 1 one-vs-rest problems' (what the screened Newton step gives them: 1/50
#: + 1/16).
MAX_MULTICLASS_DECISION_SHARE = 1 / 12
#: Noise standard deviation of a class-histogram cell, relative to an average cell's
#: count: the two parameters are fitted over ``2B`` cells, each within a tenth.
CELL_NOISE = 0.1
#: Split of that share between the scale histogram and the class histograms: the
#: scale only needs its quantile within a factor 2, the class counts fit the slope
#: and the intercept.
DECISION_SPLIT = {"scale": 0.25, "calibration": 0.75}
#: With K > 1 one-vs-rest problems, the release that compares the calibrated argmax rule
#: and the solver's own with the most frequent class (:func:`._calibration.calibrate`:
#: their correct rows and each class's rows, sensitivity 2) takes this fraction of the
#: share on top: the noise of a compared difference, ``sqrt(8) / (mu sqrt(share / 4))``,
#: is then a few cells' worth, small against the gain of a rule that learnt anything.
MULTICLASS_GAIN_SPLIT = 0.25
#: With one problem, the release of its number of positive rows (sensitivity 1), from
#: which a fit that falls back on the majority takes it, takes this fraction of the
#: share on top: its noise is then ``sqrt(3 / 2)`` of a class-histogram cell's, where
#: the histograms' class sums each add up ``CALIBRATION_BINS`` cells' noise (and their
#: clamping at 0 biases the rare class up): on 2,000 rows with 3% positives at epsilon
#: 0.1 those sums named the minority the majority in about one fit in five.
CLASS_COUNT_SPLIT = 0.25
#: Regression: noise standard deviation of each moment sum of the score and the
#: target (:func:`._calibration.calibrate_regression`) relative to ``n``, each term of
#: a sum being at most 1 in absolute value.
MOMENT_NOISE = 0.01
#: Regression: largest share of ``mu^2`` the decision takes. Where the moments' need
#: (:func:`decision_share`) exceeds it (``n mu`` below about 480), the solver's own
#: fit is mostly noise (on California housing at epsilon 0.1, ``n mu = 305``, phased
#: SGD's R^2 is -4.9 and on abalone, ``n mu = 71``, every solver's is below 0), and
#: the refit is what keeps the prediction near the mean: its slope shrinks to 0 with
#: the signal, and the mean it falls back on is only as good as the share it gets. A
#: half is where the two costs meet (the mean R^2 of five solvers at epsilon 0.1 and
#: 0.3 on the two sets, ten seeds, with the slope rule of then, no slope unless the
#: variance of u cleared twice its noise: 0.079 at a quarter, 0.147 at a half, 0.138
#: at three quarters; ``benchmarks/bench_regression_decision.py``).
MAX_REGRESSION_SHARE = 1 / 2
#: Regression: split of the share between the scores' centre, the scale histogram
#: and the moment sums.
REGRESSION_SPLIT = {"location": 0.1, "scale": 0.2, "moments": 0.7}
#: Regression: the refit is informative where, at its cap, each moment sum's noise is
#: at most this many times ``MOMENT_NOISE * n`` (``n mu`` of about 240 and more). The
#: covariance the slope is fitted on is at most ``sd(t) sd(u)``, about 0.1 on the sets
#: measured, and its noise is about the sum's over ``n``: 0.058 on diabetes at epsilon
#: 1 (``n mu = 83``), where the refit kept a slope in 3 fits of 10 and its test R^2
#: was 0.015 against 0.18 for noisy gradient descent's own prediction on the whole
#: budget. Below it noisy gradient descent with :func:`~.sgd.noise_ridge` was within
#: 0.01 of the refit's test R^2 or above it (by up to 0.2) on each of 14 cases of
#: ``n mu`` 51 to 232 (diabetes, abalone, California housing, generated sets;
#: ``benchmarks/bench_small_regression.py``); from about 300 the refit was ahead on
#: some (California at epsilon 0.1, ``n mu = 305``: by 0.05).
REFIT_NOISE_FACTOR = 2.0

_EVENT_NAMES = {"scale": "scale histogram", "calibration": "calibration histogram",
                "gain": "multiclass comparison with the majority",
                "classes": "class count", "location": "centre of the scores",
                "moments": "moments of score and target"}

_TOLERANCE = 0.001
_MAX_ROUNDS = 12


def decision_share(n_samples, n_targets, mu, regression=False):
    """The share of ``mu^2`` the histograms take: with ``s`` of it, a class histogram's
    cell has noise ``sqrt(2K) / (mu sqrt(s split))`` (sensitivity ``sqrt(2K)``); setting
    that to ``CELL_NOISE * n / (2B)`` gives
    ``s = 2K (2B)^2 / (CELL_NOISE^2 n^2 mu^2 split)``, at most
    :data:`MAX_DECISION_SHARE` (:data:`MAX_MULTICLASS_DECISION_SHARE` with K > 1).
    ``regression``: each moment sum has noise ``Delta / (mu sqrt(s split))``
    (``Delta`` = :data:`._calibration.MOMENT_SENSITIVITY`); setting that to
    ``MOMENT_NOISE * n`` gives ``s = Delta^2 / (MOMENT_NOISE^2 n^2 mu^2 split)``, at most
    :data:`MAX_REGRESSION_SHARE`."""
    if regression:
        split = REGRESSION_SPLIT["moments"]
        need = MOMENT_SENSITIVITY**2 / (MOMENT_NOISE**2 * float(n_samples) ** 2 * mu * mu
                                        * split)
        return min(MAX_REGRESSION_SHARE, need)
    split = DECISION_SPLIT["calibration"]
    cells = 2 * CALIBRATION_BINS
    need = 2.0 * n_targets * cells**2 / (CELL_NOISE**2 * float(n_samples) ** 2 * mu * mu
                                         * split)
    return min(_max_share(n_targets), need)


def regression_refit_informative(n_samples, epsilon, delta):
    """Whether a regression's refit (:func:`._calibration.calibrate_regression`) can see
    a slope, from public values only: at its largest share
    (:data:`MAX_REGRESSION_SHARE`) each moment sum's noise
    ``MOMENT_SENSITIVITY / (mu sqrt(share split))`` is at most
    :data:`REFIT_NOISE_FACTOR` ``* MOMENT_NOISE * n``. Always True without noise or
    with ``delta = 0`` (the solvers that fit their own ridge need ``delta > 0``)."""
    if not math.isfinite(epsilon) or delta == 0:
        return True
    mu = gaussian_mu(float(epsilon), float(delta))
    noise = MOMENT_SENSITIVITY / (mu * math.sqrt(MAX_REGRESSION_SHARE
                                                  * REGRESSION_SPLIT["moments"]))
    return noise <= REFIT_NOISE_FACTOR * MOMENT_NOISE * float(n_samples)


def keeps_own(solver, loss, n_samples, epsilon, delta):
    """Whether ``decision="auto"`` runs ``solver`` on its own, with its noise ridge: a
    squared loss, a solver that takes one, and a refit that would not be informative
    (:func:`regression_refit_informative`). Public values only."""
    return isinstance(loss, SquaredLoss) and getattr(solver, "takes_noise_ridge", False) \
        and not regression_refit_informative(n_samples, epsilon, delta)


def decision_splits(n_targets, regression=False, fit_intercept=True):
    """The releases of a decision and their fractions of :func:`decision_share`:
    :data:`DECISION_SPLIT`, and with ``n_targets > 1`` the multiclass comparison
    (:data:`MULTICLASS_GAIN_SPLIT`), with one problem its class count
    (:data:`CLASS_COUNT_SPLIT`); ``regression``: :data:`REGRESSION_SPLIT`. Without an
    intercept neither the comparison nor the class count is made (both set offsets), so
    neither is planned: their share stays with the solver."""
    if regression:
        return dict(REGRESSION_SPLIT)
    if not fit_intercept:
        return dict(DECISION_SPLIT)
    if n_targets > 1:
        return {**DECISION_SPLIT, "gain": MULTICLASS_GAIN_SPLIT}
    return {**DECISION_SPLIT, "classes": CLASS_COUNT_SPLIT}


def decision_share_pure(n_samples, n_targets, epsilon, regression=False):
    """With ``delta = 0``, the share of ``epsilon`` the histograms take: with ``s`` of it
    a class histogram is a Laplace release at ``s split epsilon`` of l1 sensitivity
    ``2K``, whose cell has noise ``sqrt(2) 2K / (s split epsilon)``; setting that to
    ``CELL_NOISE * n / (2B)`` gives ``s = 2 sqrt(2) K (2B) / (CELL_NOISE n epsilon
    split)``, at most :data:`MAX_DECISION_SHARE` (K > 1: see :func:`decision_share`).
    ``regression``: each moment sum has
    noise ``sqrt(2) Delta_1 / (s split epsilon)`` (``Delta_1`` =
    :data:`._calibration.MOMENT_SENSITIVITY_L1`); setting that to ``MOMENT_NOISE * n``
    gives ``s = sqrt(2) Delta_1 / (MOMENT_NOISE n epsilon split)``, at most
    :data:`MAX_REGRESSION_SHARE`."""
    if regression:
        split = REGRESSION_SPLIT["moments"]
        need = math.sqrt(2.0) * MOMENT_SENSITIVITY_L1 / (
            MOMENT_NOISE * float(n_samples) * float(epsilon) * split)
        return min(MAX_REGRESSION_SHARE, need)
    split = DECISION_SPLIT["calibration"]
    need = 2.0 * math.sqrt(2.0) * n_targets * 2 * CALIBRATION_BINS / (
        CELL_NOISE * float(n_samples) * float(epsilon) * split)
    return min(_max_share(n_targets), need)


def _max_share(n_targets):
    """The largest share a classifier's decision takes with ``n_targets`` problems."""
    return MAX_DECISION_SHARE if n_targets == 1 else MAX_MULTICLASS_DECISION_SHARE


def decision_units(epsilon, delta, floating_point_safe, n_samples, n_targets,
                   regression=False, fit_intercept=True):
    """``(units, events)``: the noise per unit of l2 sensitivity of each release of
    :func:`decision_splits`, and their events (each the Gaussian mechanism with ``mu``
    of ``sqrt(share * split) * gaussian_mu(epsilon, delta)``, :func:`decision_share`,
    with its privacy loss distribution; on the floating-point-safe path that of the
    lattice release, :func:`~skdp_sparse.privacy.subsampling.subsampled_gaussian_event`).
    With ``delta = 0``: the Laplace scale per unit of l1 sensitivity of each release,
    ``1 / (share * split * epsilon)`` (:func:`decision_share_pure`), and their pure
    events. ``regression``: the releases of the squared loss's decision."""
    if delta == 0:
        # Pure DP: Laplace releases, each at its part of epsilon (basic composition);
        # the unit is the Laplace scale per unit of l1 sensitivity.
        share = decision_share_pure(n_samples, n_targets, epsilon, regression)
        units, events = {}, []
        for name, split in decision_splits(n_targets, regression, fit_intercept).items():
            part = float(epsilon) * share * split
            units[name] = 1.0 / part
            events.append(PrivacyEvent.pure(part, name=f"decision: {_EVENT_NAMES[name]}"))
        return units, events
    mu = gaussian_mu(float(epsilon), float(delta))
    share = decision_share(n_samples, n_targets, mu, regression)
    units, events = {}, []
    for name, split in decision_splits(n_targets, regression, fit_intercept).items():
        unit = 1.0 / (mu * math.sqrt(share * split))
        units[name] = unit
        # Noise per unit of l2 sensitivity: a histogram count moves by 1 in two cells
        # (sqrt(2) per problem), the multiclass counts by 2, the class count by
        # 1; the release scales the unit by the sensitivity.
        events.append(gaussian_release_event(unit, floating_point_safe,
                                             f"decision: {_EVENT_NAMES[name]}"))
    return units, events


def inner_epsilon(plan_at, epsilon, delta, extra_events):
    """``(epsilon_in, plan)``: the largest budget (to relative ``0.1%``) at which the
    solver's plan ``plan_at(epsilon_in)``, composed with ``extra_events``, stays within
    ``(epsilon, delta)``, and that plan. The first guess removes the extra events' share
    of ``mu^2``; a few secant steps on ``log epsilon_in`` correct it for solvers whose
    steps are not exactly Gaussian (subsampled ones)."""
    extra_mu2 = 0.0
    for event in extra_events:
        extra_mu2 += release_mu(event) ** 2 * event.count
    mu = gaussian_mu(float(epsilon), float(delta))
    remaining = max(mu * mu - extra_mu2, 1e-300)
    guess = gaussian_epsilon(math.sqrt(remaining), delta)
    if guess <= 0.0:
        # With epsilon small against delta the remaining ratio is (0, delta)-DP on its
        # own; the solver's plan still needs a positive epsilon: start from its share.
        guess = epsilon * remaining / (mu * mu)

    def total(eps_in):
        if not eps_in >= epsilon * 1e-12:
            raise ValueError(
                f"epsilon={epsilon!r} at delta={delta!r} leaves the solver no budget once "
                "the decision's releases are paid for; choose a larger epsilon or delta, "
                "or decision='fitted' (the solver's own)")
        plan = plan_at(eps_in)
        return compose(list(plan.events) + list(extra_events), delta)[0], plan

    best = None
    points = []
    eps_in = min(guess, epsilon)
    for _ in range(_MAX_ROUNDS):
        spent, plan = total(eps_in)
        if spent <= epsilon and (best is None or eps_in > best[0]):
            best = (eps_in, plan)
            if spent >= epsilon * (1.0 - _TOLERANCE):
                break
        points.append((math.log(eps_in), math.log(spent)))
        if len(points) >= 2 and points[-1][1] != points[-2][1]:
            (x0, y0), (x1, y1) = points[-2], points[-1]
            x = x1 + (math.log(epsilon * (1.0 - _TOLERANCE / 2)) - y1) * (x1 - x0) / (y1 - y0)
        else:
            x = math.log(eps_in) + math.log(epsilon * (1.0 - _TOLERANCE / 2)) - math.log(spent)
        eps_in = min(math.exp(x), epsilon)
    while best is None:
        # No round landed inside the budget: halve until one does (at extreme budgets).
        eps_in /= 2.0
        spent, plan = total(eps_in)
        if spent <= epsilon:
            best = (eps_in, plan)
    return best


@dataclass(frozen=True, kw_only=True, eq=False)
class DecisionPlan(Plan):
    inner: Plan
    units: dict
    decision_events: tuple
    floating_point_safe: bool


class CalibratedDecision(Solver):
    """``inner`` on part of the budget, then its decision fitted privately (module
    docstring). Logistic and squared loss; runs that add no noise are ``inner``'s
    own. ``auto``: the estimator's ``decision="auto"``, under which a regression whose
    refit would not be informative (:func:`regression_refit_informative`) is
    ``inner``'s own on the whole budget, with its noise ridge where it has one."""

    def __init__(self, inner, auto=False):
        self.inner = inner
        self.name = inner.name
        self.auto = bool(auto)

    def __getattr__(self, attribute):
        # What the estimator reads of a registry solver (default_alpha, screens,
        # distributed, ...) is the inner solver's.
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def check(self, problem, options, epsilon, delta):
        # With delta = 0 the inner solver refuses unless it has a pure-DP mode; the
        # decision's releases are then Laplace.
        self.inner.check(problem, options, epsilon, delta)
        if type(problem.loss) not in (LogisticLoss, SquaredLoss):
            raise ValueError("a calibrated decision fits the logistic or the squared loss")

    def plan(self, problem, shape, epsilon, delta, options):
        if not math.isfinite(epsilon):
            return self.inner.plan(problem, shape, epsilon, delta, options)
        if self.auto and keeps_own(self.inner, problem.loss, shape[0], epsilon, delta):
            return self.inner.plan(problem, shape, epsilon, delta,
                                   {**options, "noise_ridge": True})
        safe = bool(options.get("floating_point_safe", True))
        units, events = decision_units(epsilon, delta, safe, shape[0], shape[2],
                                       regression=_regression(problem),
                                       fit_intercept=problem.fit_intercept)
        if safe:
            # The largest release is the scale's counts, SCALE_LEVELS per problem.
            check_exact_units(units.values(), SCALE_LEVELS * shape[2], pure=delta == 0)
        if delta == 0:
            # Pure DP composes by adding epsilons: the solver gets what the releases
            # leave.
            spent = sum(event.epsilon * event.count for event in events)
            inner = self.inner.plan(problem, shape, epsilon - spent, delta, options)
        else:
            _, inner = inner_epsilon(
                lambda e: self.inner.plan(problem, shape, e, delta, options), epsilon,
                delta, events)
        return DecisionPlan(
            solver=self.name, n_samples=inner.n_samples, n_features=inner.n_features,
            n_targets=inner.n_targets, epsilon=epsilon, delta=delta,
            events=tuple(inner.events) + tuple(events), n_iter=inner.n_iter,
            options=inner.options, inner=inner, units=units, decision_events=tuple(events),
            floating_point_safe=safe)

    def input_clipping(self, problem, plan):
        return self.inner.input_clipping(problem, getattr(plan, "inner", plan))

    def solve(self, problem, data, plan, rng):
        if not isinstance(plan, DecisionPlan):
            return self.inner.solve(problem, data, plan, rng)
        result = self.inner.solve(problem, data, plan.inner, rng)
        coef = np.asarray(result.coef, dtype=np.float64)
        columns = np.flatnonzero(np.any(coef != 0, axis=0))
        _, norm_bound, l1_bound = self.inner.input_clipping(problem, plan.inner)
        clipped = math.isfinite(norm_bound) or math.isfinite(l1_bound)
        common = dict(
            norm_bound=norm_bound if math.isfinite(norm_bound) else problem.norm_bound,
            scale_unit=plan.units["scale"], floating_point_safe=plan.floating_point_safe,
            rng=rng, fit_intercept=bool(problem.fit_intercept),
            rows_bound=(norm_bound, l1_bound) if clipped else None, pure=plan.delta == 0)
        if _regression(problem):
            coef_S, intercept, used = calibrate_regression(
                data, columns, coef[:, columns].T,
                target_bound=1.0 if problem.target_bound is None else problem.target_bound,
                location_unit=plan.units["location"], moment_unit=plan.units["moments"],
                **common)
        else:
            coef_S, intercept, used = calibrate(
                data, columns, coef[:, columns].T,
                offsets=np.asarray(result.intercept, dtype=np.float64),
                calibration_unit=plan.units["calibration"], gain_unit=plan.units.get("gain"),
                class_count_unit=plan.units.get("classes"), **common)
        calibrated = np.zeros_like(coef)
        calibrated[:, columns] = coef_S.T
        info = {**result.info, "decision_used": used}
        return SolverResult(calibrated, intercept, result.n_iter,
                            tuple(result.events) + plan.decision_events, info)


def _regression(problem):
    """Whether the decision is that of a regression (the squared loss)."""
    return isinstance(problem.loss, SquaredLoss)
