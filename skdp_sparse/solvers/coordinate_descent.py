"""Private coordinate descent: greedy (DP-GCD, Mangold et al. 2023) and randomised
(DP-CD, Mangold et al. 2022).

Sensitivities (replace-one, n public): entries are clipped to the public feature
bounds ``|x_ij| <= b_j`` and per-example coordinate gradients to ``[-C_j, C_j]``,
so a coordinate gradient moves by at most ``2 C_j / n``; coordinate ``j`` of the
objective is ``M_j = beta b_j^2``-smooth. The accounting of each variant and of
the private curvature estimate is in ``doc/proofs/coordinate_descent.rst``.

With ``floating_point_safe`` (the default) every noisy quantity is drawn exactly
(:mod:`skdp_sparse.privacy.discrete`): the selection by the exact exponential
mechanism or report-noisy-max with discrete Laplace noise on lattice keys of the
scores, the update as a lattice release with discrete Gaussian or discrete Laplace
noise; the events are those samplers' guarantees. ``floating_point_safe=False`` keeps
the float path (Gumbel-max or Laplace report-noisy-max, continuous noise).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..optim.coordinate_descent import coordinate_descent, exact_noise_lattices
from ..optim.losses import LogisticLoss
from ..privacy.accounting import PrivacyEvent, calibrate_scale
from ..privacy.discrete import gaussian_rho, laplace_epsilon, selection_scale_for
from ..privacy.statistics import release_column_second_moments
from ..utils._warnings import warn
from ._base import Plan, Solver, SolverResult
from ._cd_rules import (
    CURVATURE_SHARE,
    MAX_CLIPPED_ROW_FRACTION,
    MIN_CURVATURE_RATIO,
    NOISELESS_STEPS_PER_COORD,
    SIGNAL_NOISE_RATIO,
    curvature_release_informative,
    default_greedy_iterations,
    norm_share_ratio,
    ratio_floor,
    release_noise_std,
)

__all__ = ["GreedyCoordinateDescent", "RandomCoordinateDescent",
           "default_greedy_iterations", "curvature_release_informative", "norm_share_ratio",
           "CURVATURE_SHARE", "MIN_CURVATURE_RATIO", "SIGNAL_NOISE_RATIO"]

# Share of each greedy step's zCDP budget spent on the selection; the rest goes
# to the coordinate update. With equal rho the selection's Gumbel noise and the
# update's Gaussian noise have about the same size on the gradient scale.
_SELECTION_SHARE = 0.5


@dataclass(frozen=True, kw_only=True, eq=False)
class CoordinateDescentPlan(Plan):
    """Noise scales and public constants of a coordinate-descent run.

    ``smoothness`` and ``clip`` are the bounds' ``M_j`` and ``C_j`` (the intercept
    last), already scaled by :func:`norm_share_ratio` when ``curvature_source`` is
    ``"norm_share"``; the run rescales them by the curvature estimate when ``curvature``
    (``curvature_source == "estimate"``, which spends budget only when private).
    ``scale`` is the noise multiplier: the update of coordinate j has noise of scale
    ``scale * 2 C_j / n``.
    """

    smoothness: np.ndarray
    clip: np.ndarray
    scale: float
    pure: bool
    curvature: bool
    curvature_source: str
    tol: float
    verbose: int
    floating_point_safe: bool


class _CoordinateDescent(Solver):
    """The calibration and the run shared by the greedy and randomised rules."""

    reads = frozenset({"max_iter", "curvature", "gradient_clip", "verbose"})

    selection = ""

    def check(self, problem, options, epsilon, delta):
        if math.isfinite(epsilon) and delta == 0 and not self._pure(options):
            raise ValueError(self._needs_delta)

    def _pure(self, options):
        return False

    def _n_updates(self, n_samples, n_coords, epsilon, delta, max_iter, **public):
        """Updates per problem; ``public`` holds the rule's other public inputs
        (``n_problems``, ``pure``, ``score_ratio``, ``initial_gap``, ``budget_share``)."""
        raise NotImplementedError

    def _events(self, scale, n_updates, n_problems, pure, curvature, delta, safe):
        raise NotImplementedError

    def _bound_constants(self, problem, n_features):
        """Per-coordinate smoothness M_j and clip C_j from public values only; the
        intercept is the coordinate of a constant feature equal to 1."""
        b = np.broadcast_to(np.asarray(problem.feature_bound, dtype=float), (n_features,))
        if problem.fit_intercept:
            b = np.append(b, 1.0)
        smoothness = problem.loss.smoothness * b**2
        # A bounded-derivative loss never exceeds |l'| b_j, so that is the default
        # clip; the squared loss takes the public target scale instead.
        clip = problem.derivative_clip * b
        if problem.gradient_clip is not None:
            clip[:n_features] = problem.gradient_clip
        return smoothness, clip

    @staticmethod
    def _curvature_source(problem, mode, n_samples, n_features, epsilon, delta, pure):
        """Where ``M_j`` and the default ``C_j`` come from, by a rule on public values:
        ``"estimate"`` (the noisy release, or the exact moments without noise),
        ``"norm_share"`` (:func:`norm_share_ratio`, no budget) or ``"bound"``."""
        private = math.isfinite(epsilon)
        if mode == "bound" or (problem.gradient_clip is not None and private):
            # Larger steps on rare features pay off only with clips shrunk to match
            # (C_j ~ sqrt(M_j)); an explicit gradient_clip fixes C_j, so the bounds'
            # curvature is kept and no budget is spent on an estimate.
            return "bound"
        if mode == "private" or not private or curvature_release_informative(
                n_samples, n_features, problem.feature_bound, problem.norm_bound,
                epsilon, delta, pure=pure):
            return "estimate"
        b = np.broadcast_to(np.asarray(problem.feature_bound, dtype=float), (n_features,))
        return "norm_share" if norm_share_ratio(b, problem.norm_bound) < 1.0 else "bound"

    def plan(self, problem, shape, epsilon, delta, options):
        n_samples, n_features, n_targets = shape
        n_coords = n_features + int(problem.fit_intercept)
        smoothness, clip = self._bound_constants(problem, n_features)
        pure = self._pure(options)
        private = math.isfinite(epsilon)
        source = self._curvature_source(problem, options["curvature"], n_samples,
                                        n_features, epsilon, delta, pure)
        if source == "norm_share":
            b = np.broadcast_to(np.asarray(problem.feature_bound, dtype=float),
                                (n_features,))
            ratio = norm_share_ratio(b, problem.norm_bound)
            # The intercept's feature is the constant 1: its curvature is known.
            smoothness[:n_features] *= ratio
            clip[:n_features] *= math.sqrt(ratio)
        curvature = source == "estimate"
        if curvature and private and not math.isfinite(release_noise_std(
                n_features, problem.feature_bound, problem.norm_bound, epsilon, delta, pure)):
            raise ValueError("norm_bound and feature_bound are too large for the private "
                             "curvature estimate (its sensitivity overflows); pass "
                             "curvature='bound'")
        n_updates = self._n_updates(
            n_samples, n_coords, epsilon, delta, options["max_iter"], n_problems=n_targets,
            pure=pure, score_ratio=float(np.max(clip / np.sqrt(smoothness))),
            initial_gap=_initial_gap(problem),
            budget_share=1.0 - CURVATURE_SHARE if curvature and private else 1.0)
        safe = bool(options.get("floating_point_safe", True))
        if private:
            scale, events = _calibration(type(self), n_updates, n_targets, pure, curvature,
                                         float(delta), safe, float(epsilon))
        else:
            scale, events = 0.0, ()
        plan = CoordinateDescentPlan(
            solver=self.name, n_samples=n_samples, n_features=n_features,
            n_targets=n_targets, epsilon=epsilon, delta=delta, events=events,
            n_iter=n_updates, smoothness=smoothness, clip=clip, scale=scale, pure=pure,
            curvature=curvature, curvature_source=source, tol=float(options["tol"]),
            verbose=int(options["verbose"]), floating_point_safe=safe,
        )
        self._check_exact_noise(problem, plan)
        return plan

    def _check_exact_noise(self, problem, plan):
        """Plan the exact noise's lattices now, so that a limit of the exact samplers
        (the l1 strength far above the clips, say) fails before any budget is spent.

        With the curvature estimate the run's constants are only known after its
        release; the check takes every ratio at its public floor, where the value
        bounds of the lattices are largest (:func:`exact_noise_lattices`)."""
        if not (plan.private and plan.floating_point_safe):
            return
        smoothness, clip = plan.smoothness, plan.clip
        if plan.curvature:
            b2 = np.broadcast_to(np.asarray(problem.feature_bound, dtype=float),
                                 (plan.n_features,)) ** 2
            noise_std = release_noise_std(plan.n_features, problem.feature_bound,
                                           problem.norm_bound, plan.epsilon, plan.delta,
                                           plan.pure)
            ratios = np.minimum(ratio_floor(plan.n_samples, b2, noise_std), 1.0)
            if problem.fit_intercept:
                ratios = np.append(ratios, 1.0)
            smoothness, clip = smoothness * ratios, clip * np.sqrt(ratios)
        noise = self._noise(plan, smoothness, 2.0 * clip / plan.n_samples)
        try:
            exact_noise_lattices(clip, 1.0 / np.sqrt(smoothness), problem.penalty, **noise)
        except ValueError as exc:
            raise ValueError(
                f"solver={self.name!r}: the floating-point-safe noise cannot serve these "
                f"public values ({exc}); most often the l1 strength is far above the "
                "per-example gradient clips (feature_bound times the loss's derivative "
                "bound): raise feature_bound, lower alpha, or set floating_point_safe=False"
            ) from None

    def _curvature_ratios(self, problem, data, plan, rng):
        """Coordinate curvature relative to its bound, ``r_j ~ mean_i x_ij^2 / b_j^2``.

        In a private run, a noisy release of the second moments of the rows clipped
        to ``norm_bound`` (:func:`release_column_second_moments`, with the plan's
        last event); without noise, the exact second moments. Clipped to
        ``[max(MIN_CURVATURE_RATIO, 2 noise_std), 1]``: the upper end is the bound
        itself, the lower end keeps noise from inflating steps.
        """
        n_samples, n_features = plan.n_samples, plan.n_features
        b2 = np.broadcast_to(np.asarray(problem.feature_bound, dtype=float),
                             (n_features,)) ** 2
        if not plan.private:
            sums = data.column_second_moment_sums(problem.feature_bound, np.inf)[0]
            noise_std = 0.0
        else:
            norm_bound = float(problem.norm_bound)
            statistic = data.column_second_moment_sums(problem.feature_bound, norm_bound)
            event = plan.events[-1]
            if event.mu is not None:
                kwargs = dict(mu=event.mu)
            elif math.isnan(event.epsilon):
                kwargs = dict(rho=event.rho)
            else:
                kwargs = dict(epsilon=event.epsilon,
                              floating_point_safe=plan.floating_point_safe)
            sums, n_clipped, noise_std = release_column_second_moments(
                statistic, norm_bound=norm_bound, max_entry=float(np.sqrt(b2.max())),
                rng=rng, **kwargs,
            )
            # Decided on the private release only, so the fallback leaks nothing. The
            # warning needs a count three noise sds past the threshold: at small n the
            # noise alone passes it, and would blame a bound that holds.
            threshold = MAX_CLIPPED_ROW_FRACTION * n_samples
            if n_clipped > threshold:
                if n_clipped > threshold + 3.0 * noise_std:
                    warn(
                        f"norm_bound={norm_bound:g} is below the l2 norm of most rows (by "
                        "a private count), so the private curvature estimate would be "
                        "biased low; the fit uses the feature bounds' curvature instead "
                        "(curvature='bound'). Set norm_bound to a public bound on the row "
                        "norms to use the estimate.",
                    )
                return np.ones(n_features + int(problem.fit_intercept))
        floor = ratio_floor(n_samples, b2, noise_std)
        ratios = np.clip(sums / (n_samples * b2), np.minimum(floor, 1.0), 1.0)
        if problem.fit_intercept:
            ratios = np.append(ratios, 1.0)
        return ratios

    def _noise(self, plan, smoothness, sensitivity):
        """The engine's noise arguments (selection and update noise, their scales and,
        for exact noise, the sensitivities)."""
        raise NotImplementedError

    def input_clipping(self, problem, plan):
        # The run reads entries clipped to feature_bound, and rows clipped to
        # norm_bound too when its curvature takes each feature's share of that norm.
        norm = float(problem.norm_bound) if plan.curvature_source == "norm_share" else math.inf
        return problem.feature_bound, norm, math.inf

    def solve(self, problem, data, plan, rng):
        smoothness, clip = plan.smoothness, plan.clip
        if plan.curvature:
            ratios = self._curvature_ratios(problem, data, plan, rng)
            smoothness = smoothness * ratios
            # C_j proportional to sqrt(M_j) (Mangold et al. 2022): every coordinate's
            # noisy step then has the same signal-to-noise scale. Without noise the
            # clip is left alone, so that the objective is unchanged.
            if plan.private:
                clip = clip * np.sqrt(ratios)
        sensitivity = 2.0 * clip / plan.n_samples
        noise = self._noise(plan, smoothness, sensitivity) if plan.private else {}
        if plan.curvature_source == "norm_share":
            # The norm-share constants assume sum_j x_ij^2 <= L^2: rows are clipped to
            # norm_bound (as the gradient solvers do), so that it holds on the data run.
            X = data.entries_and_rows_clipped(problem.feature_bound, problem.norm_bound)
        else:
            X = data.entries_clipped(problem.feature_bound)
        coefs, intercepts, n_iters, passes = [], [], [], 0.0
        for k in range(plan.n_targets):
            if plan.verbose and plan.n_targets > 1:
                print(f"[{self.name}] problem {k + 1}/{plan.n_targets}")
            res = coordinate_descent(
                X, data.target(k), problem.loss, problem.penalty,
                fit_intercept=problem.fit_intercept, clip=clip, smoothness=smoothness,
                n_updates=plan.n_iter, selection=self.selection, rng=rng,
                tol=0.0 if plan.private else plan.tol, verbose=plan.verbose,
                verbose_tag=f"[{self.name}] ", **noise,
            )
            coefs.append(res.coef)
            intercepts.append(res.intercept)
            n_iters.append(res.n_iter)
            passes += res.data_passes
        # The passes over X the run made: for benchmarks, never a fitted attribute (how
        # many rows the chosen columns hold depends on the data).
        return SolverResult(np.array(coefs), np.array(intercepts), int(max(n_iters)),
                            plan.events, {"data_passes": passes})


class GreedyCoordinateDescent(_CoordinateDescent):
    """DP-GCD: each step selects the coordinate of largest noisy GS-s score
    ``dist(g_j, -d psi_j(w_j)) / sqrt(M_j)`` and updates it with noise.

    ``selection="exponential"``: exponential mechanism with ``_SELECTION_SHARE`` of
    each step's zCDP budget and a Gaussian update, all composed in zCDP (needs
    ``delta > 0``); exact on lattice keys with a discrete Gaussian update by default,
    Gumbel-max and a continuous update with ``floating_point_safe=False``.
    ``selection="laplace"``: report-noisy-max with (discrete) Laplace noise and a
    (discrete) Laplace update, each ``eps0``-DP (pure DP possible).
    """

    name = "greedy_cd"
    reads = _CoordinateDescent.reads | {"selection"}
    selection = "greedy"
    #: Reads the data through the view's clipped rows, targets and second-moment sums,
    #: which a dask view answers with row blocks that keep their margins where they
    #: live: fits dask arrays too.
    distributed = True
    _needs_delta = ("selection='exponential' composes in zCDP and needs delta > 0; "
                    "use selection='laplace' for pure DP")

    def _pure(self, options):
        return options["selection"] == "laplace"

    def _n_updates(self, n_samples, n_coords, epsilon, delta, max_iter, **public):
        if max_iter is not None:
            return max_iter
        return default_greedy_iterations(n_samples, n_coords, epsilon, delta, **public)

    def _events(self, scale, n_updates, n_problems, pure, curvature, delta, safe):
        k = n_updates * n_problems
        if pure and safe:
            # Report-noisy-max and the update are each calibrated to the same epsilon.
            eps0 = laplace_epsilon(1.0, scale)
            events = [PrivacyEvent.pure(eps0, count=k, name="noisy max (discrete laplace)"),
                      PrivacyEvent.pure(eps0, count=k, name="update (discrete laplace)")]
        elif pure:
            eps0 = 1.0 / scale
            events = [PrivacyEvent.pure(eps0, count=k, name="noisy max (laplace)"),
                      PrivacyEvent.pure(eps0, count=k, name="update (laplace)")]
        elif safe:
            rho = gaussian_rho(1.0, scale)
            events = [PrivacyEvent.exponential(_selection_epsilon_for(rho), count=k,
                                               name="selection (exact exponential)"),
                      PrivacyEvent.zcdp(rho, count=k, name="update (discrete gaussian)")]
        else:
            mu = 1.0 / scale
            events = [PrivacyEvent.exponential(_selection_epsilon(mu), count=k,
                                               name="selection"),
                      PrivacyEvent.gaussian(mu, count=k, name="update")]
        return events + _curvature_events(events, pure, curvature, delta, safe)

    def _noise(self, plan, smoothness, sensitivity):
        delta_u = float(np.max(sensitivity / np.sqrt(smoothness)))
        if plan.floating_point_safe:
            sensitivity = _exact_sensitivity(sensitivity)
            # The engine weighs scores by 1 / sqrt(M_j) computed as here.
            delta_u = float(np.max(np.nextafter(sensitivity * (1.0 / np.sqrt(smoothness)),
                                                np.inf)))
            # The selection's nominal scale meets the plan's epsilon exactly, on the
            # lattice of the scores (sensitivity delta_u) that the engine plans.
            if plan.pure:
                eps_sel, noise, update = laplace_epsilon(1.0, plan.scale), \
                    "discrete_laplace", "discrete_laplace"
            else:
                eps_sel = _selection_epsilon_for(gaussian_rho(1.0, plan.scale))
                noise, update = "exponential", "discrete_gaussian"
            return dict(selection_noise=noise,
                        selection_scale=selection_scale_for(delta_u, eps_sel),
                        selection_sensitivity=delta_u, update_noise=update,
                        update_scale=plan.scale, update_sensitivity=sensitivity)
        if plan.pure:
            # Update: Laplace with b_j = Delta_j / eps0. Selection: report-noisy-max
            # on scores of sensitivity Delta_u with Laplace(2 Delta_u / eps0),
            # eps0-DP for arbitrary (non-monotone) scores.
            return dict(selection_noise="laplace", selection_scale=2 * delta_u * plan.scale,
                        update_noise="laplace", update_scale=sensitivity * plan.scale)
        mu = 1.0 / plan.scale
        # Gumbel-max: argmax eps u / (2 Delta_u) + G == argmax u + (2 Delta_u / eps) G.
        return dict(selection_noise="gumbel",
                    selection_scale=2 * delta_u / _selection_epsilon(mu),
                    update_noise="gaussian", update_scale=sensitivity / mu)


class RandomCoordinateDescent(_CoordinateDescent):
    """DP-CD: a coordinate drawn uniformly at random, a Gaussian update. Safe path
    (default): discrete Gaussian lattice releases, composed in zCDP; float path: the
    updates compose exactly as one Gaussian mechanism (GDP)."""

    name = "cd"
    selection = "random"
    #: ``decision="auto"`` fits its decision privately (:mod:`.decision`): its
    #: intercept, one noisy coordinate among many, decided below the majority class
    #: on imbalanced data (Reuters, w8a at epsilon 0.1 to 10).
    calibrated_decision = True
    _needs_delta = "solver='cd' adds Gaussian noise and needs delta > 0"

    def _n_updates(self, n_samples, n_coords, epsilon, delta, max_iter, **public):
        if max_iter is not None:
            return max_iter * n_coords
        if not math.isfinite(epsilon):
            return NOISELESS_STEPS_PER_COORD * n_coords
        # A few passes; more passes split the budget over more noisy updates.
        return 5 * n_coords

    def _events(self, scale, n_updates, n_problems, pure, curvature, delta, safe):
        k = n_updates * n_problems
        if safe:
            events = [PrivacyEvent.zcdp(gaussian_rho(1.0, scale), count=k,
                                        name="cd update (discrete gaussian)")]
        else:
            events = [PrivacyEvent.gaussian(1.0 / scale, count=k, name="cd update")]
        return events + _curvature_events(events, pure, curvature, delta, safe)

    def _noise(self, plan, smoothness, sensitivity):
        if plan.floating_point_safe:
            return dict(update_noise="discrete_gaussian", update_scale=plan.scale,
                        update_sensitivity=_exact_sensitivity(sensitivity))
        return dict(update_noise="gaussian", update_scale=sensitivity * plan.scale)


def _initial_gap(problem):
    """Public bound ``F0`` on ``F(0) - F*``: the loss at margin 0 of an example at the
    bounds (``ln 2`` for the logistic loss; ``l(target_bound, 0)`` for the regression
    losses, 1 standing in for a missing ``target_bound``). The penalty is 0 at ``w = 0``
    and ``F* >= 0``."""
    y = 1.0 if isinstance(problem.loss, LogisticLoss) or problem.target_bound is None \
        else float(problem.target_bound)
    return float(np.asarray(problem.loss.value(np.array([y]), np.array([0.0]))).ravel()[0])


def _selection_epsilon(mu):
    """Exponential-mechanism epsilon with ``_SELECTION_SHARE`` of a step's zCDP rho:
    ``eps^2 / 8 = share / (1 - share) * mu^2 / 2``."""
    return math.sqrt(8 * _SELECTION_SHARE / (1 - _SELECTION_SHARE) * mu**2 / 2)


def _exact_sensitivity(sensitivity):
    """``2 C_j / n`` rounded up: the double above the rounded quotient is above the exact
    one, so the lattices' sensitivity bounds the exact change of ``g_j``."""
    return np.nextafter(sensitivity, np.inf)


def _selection_epsilon_for(rho):
    """Exponential-mechanism epsilon with ``_SELECTION_SHARE`` of a step's zCDP budget,
    the update's being ``rho``: ``eps^2 / 8 = share / (1 - share) * rho``."""
    return math.sqrt(8 * _SELECTION_SHARE / (1 - _SELECTION_SHARE) * rho)


@functools.lru_cache(maxsize=256)
def _calibration(solver_type, n_updates, n_problems, pure, curvature, delta, safe, epsilon):
    """The noise multiplier whose events compose to ``(epsilon, delta)``, and the events.

    A function of public values, cached because its bisection costs more than a small
    fit.
    """
    solver = solver_type()

    def events(scale):
        return solver._events(scale, n_updates, n_problems, pure, curvature, delta, safe)

    scale = calibrate_scale(events, epsilon, delta)
    return scale, tuple(events(scale))


def _curvature_events(events, pure, curvature, delta, safe):
    """The curvature estimate's event, sized to ``CURVATURE_SHARE`` of the total in
    the measure the accountant composes it in: rho (zCDP) whenever ``delta > 0``,
    epsilon for pure DP (``delta = 0``, basic composition); empty without an
    estimate. The release is Laplace alongside Laplace steps, Gaussian otherwise
    (discrete on the floating-point-safe path, accounted by its rho)."""
    if not curvature:
        return []
    ratio = CURVATURE_SHARE / (1 - CURVATURE_SHARE)
    if pure and delta == 0:
        eps_c = ratio * sum(e.epsilon * e.count for e in events)
        return [PrivacyEvent.pure(eps_c, name="curvature (laplace)")]
    rho_c = ratio * sum(e.rho * e.count for e in events)
    if pure:
        # A pure eps-DP release is eps^2/2-zCDP: the same share of rho.
        return [PrivacyEvent.pure(math.sqrt(2 * rho_c), name="curvature (laplace)")]
    if safe:
        return [PrivacyEvent.zcdp(rho_c, name="curvature (discrete gaussian)")]
    return [PrivacyEvent.gaussian(math.sqrt(2 * rho_c), name="curvature")]
