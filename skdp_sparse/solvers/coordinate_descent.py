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

from ..optim.coordinate_descent import coordinate_descent
from ..privacy.accounting import PrivacyEvent, calibrate_scale
from ..privacy.discrete import gaussian_rho, laplace_epsilon, selection_scale_for
from ..privacy.statistics import release_column_second_moments
from ..utils._warnings import warn
from ._base import Plan, Solver, SolverResult

__all__ = ["GreedyCoordinateDescent", "RandomCoordinateDescent",
           "default_greedy_iterations", "CURVATURE_SHARE", "MIN_CURVATURE_RATIO"]

# Share of each greedy step's zCDP budget spent on the selection; the rest goes
# to the coordinate update. With equal rho the selection's Gumbel noise and the
# update's Gaussian noise have about the same size on the gradient scale.
_SELECTION_SHARE = 0.5

#: Share of the coordinate-descent budget (of its zCDP rho, or of its pure
#: epsilon) spent on the private curvature estimate of ``curvature="private"``.
#: Noise on the estimate only mis-sizes steps, while noise on the updates is the
#: utility bottleneck, so the estimate gets a small share.
CURVATURE_SHARE = 0.1
#: Smallest coordinate curvature, relative to the bound ``beta b_j^2``: caps the
#: step on rare or noisily estimated features at this many times the bound's.
MIN_CURVATURE_RATIO = 1e-3
#: With more rows than this above ``norm_bound`` (by the private count), the
#: curvature estimate is too biased to use and the bound's constants are kept.
MAX_CLIPPED_ROW_FRACTION = 0.5


def default_greedy_iterations(n_samples, epsilon, delta):
    """Number of DP-GCD steps from the public n, epsilon, delta.

    The convex utility bound of DP-GCD (Mangold et al. 2023, Thm 4.3) balances
    optimisation error ~ 1/T against privacy error ~ T^{1/2} sqrt(log(1/delta))/(n eps)
    per step, which is minimised at ``T ~ (n eps / sqrt(log(1/delta)))^{2/3}``.
    """
    log_term = math.log(1 / delta) if delta > 0 else 1.0
    return max(1, int(round((n_samples * epsilon / math.sqrt(log_term)) ** (2 / 3))))


@dataclass(frozen=True, kw_only=True, eq=False)
class CoordinateDescentPlan(Plan):
    """Noise scales and public constants of a coordinate-descent run.

    ``smoothness`` and ``clip`` are the bounds' ``M_j`` and ``C_j`` (the intercept
    last); the run rescales them by the curvature estimate when ``curvature``.
    ``scale`` is the noise multiplier: the update of coordinate j has noise of scale
    ``scale * 2 C_j / n``.
    """

    smoothness: np.ndarray
    clip: np.ndarray
    scale: float
    pure: bool
    curvature: bool
    tol: float
    verbose: int
    floating_point_safe: bool


class _CoordinateDescent(Solver):
    """The calibration and the run shared by the greedy and randomised rules."""

    selection = ""

    def check(self, problem, options, epsilon, delta):
        if math.isfinite(epsilon) and delta == 0 and not self._pure(options):
            raise ValueError(self._needs_delta)

    def _pure(self, options):
        return False

    def _n_updates(self, n_samples, n_coords, epsilon, delta, max_iter):
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

    def plan(self, problem, shape, epsilon, delta, options):
        n_samples, n_features, n_targets = shape
        n_coords = n_features + int(problem.fit_intercept)
        smoothness, clip = self._bound_constants(problem, n_features)
        n_updates = self._n_updates(n_samples, n_coords, epsilon, delta, options["max_iter"])
        pure = self._pure(options)
        private = math.isfinite(epsilon)
        # Larger steps on rare features pay off only with clips shrunk to match
        # (C_j ~ sqrt(M_j)); an explicit gradient_clip fixes C_j, so the bounds'
        # curvature is kept and no budget is spent on an estimate.
        curvature = options["curvature"] == "private" and (
            problem.gradient_clip is None or not private)
        safe = bool(options.get("floating_point_safe", True))
        if private:
            scale, events = _calibration(type(self), n_updates, n_targets, pure, curvature,
                                         float(delta), safe, float(epsilon))
        else:
            scale, events = 0.0, ()
        return CoordinateDescentPlan(
            solver=self.name, n_samples=n_samples, n_features=n_features,
            n_targets=n_targets, epsilon=epsilon, delta=delta, events=events,
            n_iter=n_updates, smoothness=smoothness, clip=clip, scale=scale, pure=pure,
            curvature=curvature, tol=float(options["tol"]), verbose=int(options["verbose"]),
            floating_point_safe=safe,
        )

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
            event = plan.events[-1]
            norm_bound = float(problem.norm_bound)
            if event.mu is not None:
                kwargs = dict(mu=event.mu)
            elif math.isnan(event.epsilon):
                kwargs = dict(rho=event.rho)
            else:
                kwargs = dict(epsilon=event.epsilon,
                              floating_point_safe=plan.floating_point_safe)
            statistic = data.column_second_moment_sums(problem.feature_bound, norm_bound)
            sums, n_clipped, noise_std = release_column_second_moments(
                statistic, norm_bound=norm_bound, max_entry=float(np.sqrt(b2.max())),
                rng=rng, **kwargs,
            )
            if n_clipped > MAX_CLIPPED_ROW_FRACTION * n_samples:
                # Decided on the private release only, so the fallback leaks nothing.
                warn(
                    f"norm_bound={norm_bound:g} is below the l2 norm of most rows (by a "
                    "private count), so the private curvature estimate would be biased "
                    "low; the fit uses the feature bounds' curvature instead "
                    "(curvature='bound'). Set norm_bound to a public bound on the row "
                    "norms to use the estimate.",
                )
                return np.ones(n_features + int(problem.fit_intercept))
        floor = np.maximum(MIN_CURVATURE_RATIO, 2 * noise_std / (n_samples * b2))
        ratios = np.clip(sums / (n_samples * b2), np.minimum(floor, 1.0), 1.0)
        if problem.fit_intercept:
            ratios = np.append(ratios, 1.0)
        return ratios

    def _noise(self, plan, smoothness, sensitivity):
        """The engine's noise arguments (selection and update noise, their scales and,
        for exact noise, the sensitivities)."""
        raise NotImplementedError

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
        X = data.entries_clipped(problem.feature_bound)
        coefs, intercepts, n_iters = [], [], []
        for k in range(plan.n_targets):
            if plan.verbose and plan.n_targets > 1:
                print(f"[{self.name}] problem {k + 1}/{plan.n_targets}")
            res = coordinate_descent(
                X, data.target(k), problem.loss, problem.penalty,
                fit_intercept=problem.fit_intercept, clip=clip, smoothness=smoothness,
                n_updates=plan.n_iter, selection=self.selection, rng=rng,
                tol=0.0 if plan.private else plan.tol, verbose=plan.verbose, **noise,
            )
            coefs.append(res.coef)
            intercepts.append(res.intercept)
            n_iters.append(res.n_iter)
        return SolverResult(np.array(coefs), np.array(intercepts), int(max(n_iters)),
                            plan.events)


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
    selection = "greedy"
    _needs_delta = ("selection='exponential' composes in zCDP and needs delta > 0; "
                    "use selection='laplace' for pure DP")

    def _pure(self, options):
        return options["selection"] == "laplace"

    def _n_updates(self, n_samples, n_coords, epsilon, delta, max_iter):
        if max_iter is not None:
            return max_iter
        if not math.isfinite(epsilon):
            return 200 * n_coords
        return default_greedy_iterations(n_samples, epsilon, delta)

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
    _needs_delta = "solver='cd' adds Gaussian noise and needs delta > 0"

    def _n_updates(self, n_samples, n_coords, epsilon, delta, max_iter):
        if max_iter is not None:
            return max_iter * n_coords
        if not math.isfinite(epsilon):
            return 200 * n_coords
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
