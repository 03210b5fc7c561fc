"""Minibatch DP-SGD; with the full batch, noisy gradient descent.

Each step draws a batch (Poisson with rate ``q = batch_size / n``, or a uniform
subset of ``batch_size`` rows with ``sampling="without_replacement"``; all rows
when ``batch_size >= n``), sums the clipped per-example gradients, adds
``N(0, (z C2)^2 I)`` and divides by the expected batch size. With
``gradient_estimator="projection"`` the noisy mean is then projected on the l1
ball of radius ``C1`` (the projection mechanism of Ghazi et al., post-processing).
The step is ``theta <- Pi(prox_{eta l1}(theta - eta (g + l2 w)))``; the averaged
iterate is returned (the last one with ``average=False``).

Privacy (replace-one): the noisy sum has l2 sensitivity ``2 C2``. Full batch: the
``T`` Gaussian mechanisms compose exactly (GDP, Dong, Roth & Su 2019); subsampled
batches (Poisson, or a fixed size without replacement): the privacy loss distribution
of the subsampled Gaussian, composed by FFT (``doc/proofs/pld.rst``), with the RDP
bounds of Mironov, Talwar & Zhang (2019) and Wang, Balle & Kasiviswanathan (2019) as
the accountant's other candidates. ``z`` is the smallest multiplier whose steps, over
the ``K`` one-vs-rest problems together, compose to ``(epsilon, delta)``. With
``floating_point_safe`` (the default) each noisy sum is a lattice release with
exact discrete Gaussian noise, accounted as
:func:`~skdp_sparse.privacy.subsampling.subsampled_gaussian_event` states.

Multinomial loss (``multi_class="multinomial"`` with K > 2 classes,
:mod:`._multinomial`): each step releases one noisy sum of the per-example gradients
over the ``K x (p + 1)`` matrix, of l2 sensitivity ``2 C2`` with ``C2 = sqrt(2)
sqrt(L^2 + 1)``, so the steps are calibrated as one problem's instead of K's; the step
is the same proximal step on every row of the matrix, and the intercepts are returned
centred (the softmax does not see a common shift).

``feature_selection=k`` (an integer below p) screens first (:mod:`._screening`): the
class counts (logistic loss with intercept, share ``SGD_COUNT_SHARE`` of the Gaussian
budget ``mu^2``) and the label association (``feature_selection_share``, default
``SGD_SCREENING_SHARE``) are released, the ``k`` coordinates of largest association
kept, and the run starts from the null model's intercept on them; the steps' noise
multiplier is calibrated so that the screening's events and the steps' compose to
``(epsilon, delta)``. One-vs-rest problems share the screening and are calibrated
jointly.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..optim.losses import LogisticLoss
from ..optim.projections import project_l1_ball
from ..privacy.accounting import calibrate_scale, gaussian_mu
from ..privacy.mechanisms import GaussianMechanism
from ..privacy.row_sampling import step_samplers
from ..privacy.subsampling import subsampled_gaussian_event, subsampled_noise_multiplier
from ..utils.validation import Interval, Options, validate_params
from ._base import Plan, SolverResult, non_private_events
from ._gradient import (
    GradientBounds,
    GradientSolver,
    block_gradient_sum,
    checkpoints,
    gradient_bounds,
    penalised_step,
    report,
    split,
)
from ._multinomial import block_multinomial_gradient_sum, multinomial_bounds
from ._screening import noise_units, plan_screening, screen

__all__ = ["NoisySGD", "default_noisy_gd_steps", "noise_ridge", "SGD_SCREENING_SHARE",
           "SGD_COUNT_SHARE"]

#: Share of the budget (of ``mu^2``) that a screening run of ``sgd`` spends on
#: the label association (the class count takes :data:`SGD_COUNT_SHARE` more).
SGD_SCREENING_SHARE = 1 / 4
#: Share of the class count, which starts the intercept at the null model's.
SGD_COUNT_SHARE = 1 / 25


def default_noisy_gd_steps(n_samples, n_params, epsilon, delta, *, smoothness, grad_bound,
                           scale=1.0):
    """Number of steps of full-batch noisy gradient descent from public quantities.

    Averaged noisy GD with step ``1/beta`` on a ``beta``-smooth convex objective
    has excess risk about ``beta R^2 / (2T) + p sigma_T^2 / (2 beta)``, where the
    per-step noise on the mean gradient is ``sigma_T = 2 C2 sqrt(T) / (n mu)``
    when ``T`` Gaussian steps compose to ``mu``-GDP (the ``(epsilon, delta)``
    budget). The two terms balance at ``T = beta R n mu / (2 C2 sqrt(p))``, with
    ``R = scale`` a public guess of the solution's norm. Clipped to [5, 1000].
    """
    mu = gaussian_mu(epsilon, delta)
    t = smoothness * scale * n_samples * mu / (2.0 * grad_bound * math.sqrt(n_params))
    return int(min(1000, max(5, round(t))))


def noise_ridge(n_samples, n_params, epsilon, delta, *, grad_bound, scale=1.0):
    """The l2 strength that the planned noise of full-batch noisy gradient descent
    calls for, from public quantities: ``2 C2 sqrt(d) / (R n mu)``.

    Averaged over its ``T`` steps the noise on the mean gradient has standard
    deviation ``2 C2 / (n mu)`` on each of the ``d`` coordinates whatever ``T`` is
    (each step's is ``2 C2 sqrt(T) / (n mu)``), so the averaged iterate solves the
    normal equations with a noisy right-hand side of norm about ``2 C2 sqrt(d) / (n mu)``;
    against a solution of norm ``R = scale`` (the public guess of
    :func:`default_noisy_gd_steps`) that is the ridge of a Gaussian prior on the
    solution, which keeps the prediction from following the noise where the rows are
    few against it. The regressor's default decision takes it below the ``n mu`` at
    which a refit of the prediction can see its slope
    (:func:`~.decision.regression_refit_informative`)."""
    mu = gaussian_mu(epsilon, delta)
    return 2.0 * grad_bound * math.sqrt(n_params) / (scale * n_samples * mu)


@dataclass(frozen=True, kw_only=True, eq=False)
class SGDPlan(Plan):
    bounds: GradientBounds
    batch_size: int
    sampling_rate: float
    sampling: str
    noise_multiplier: float
    learning_rate: float
    estimator: str
    radius: float | None
    average: object
    floating_point_safe: bool
    verbose: int
    screening: object = None
    start: object = None
    #: One multinomial problem over the K classes instead of K one-vs-rest ones.
    multinomial: bool = False

    @property
    def full_batch(self):
        return self.batch_size == self.n_samples

    def step_events(self, count):
        """The privacy events of ``count`` steps of one problem."""
        return _step_events(self.noise_multiplier, self.sampling_rate, self.sampling, count,
                            self.floating_point_safe)


def _step_events(z, q, sampling, count, floating_point_safe):
    name = "noisy gradient" if q == 1 else f"subsampled noisy gradient ({sampling})"
    return [subsampled_gaussian_event(z, q, count, sampling=sampling, name=name,
                                      floating_point_safe=floating_point_safe)]


_OPTIONS = {
    "max_iter": [Interval(numbers.Integral, 1, None), None],
    "batch_size": [Interval(numbers.Integral, 1, None), None],
    "learning_rate": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "radius": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "sampling": [Options("poisson", "without_replacement")],
    "gradient_estimator": [Options("auto", "gaussian", "projection")],
    "average": [Options(True, False, "tail")],
    "floating_point_safe": ["boolean"],
    "feature_selection": [Options("auto", "none"), Interval(numbers.Integral, 1, None)],
    "feature_selection_share": [Interval(numbers.Real, 0, 1, closed="neither"), None],
    "multi_class": [Options("ovr", "multinomial")],
    "noise_ridge": ["boolean"],
}


def _resolve_estimator(gradient_estimator, bounds, n, epsilon, delta, sparsity):
    if gradient_estimator != "auto":
        return gradient_estimator
    if sparsity is None or not math.isfinite(epsilon):
        return "gaussian"
    # The regime of Ghazi et al. (Lemma 6.4): d >~ n eps sqrt(s ln(d/s) / ln(1/delta)),
    # where projecting the noise on the l1 ball shrinks it more than the signal.
    p = bounds.n_params
    s = min(sparsity + bounds.intercept, p)
    threshold = n * epsilon * math.sqrt(s * math.log(max(p / s, math.e)) / math.log(1 / delta))
    return "projection" if p >= threshold else "gaussian"


class NoisySGD(GradientSolver):
    """DP-SGD and noisy gradient descent (see the module docstring)."""

    name = "sgd"
    reads = frozenset({"max_iter", "batch_size", "learning_rate", "feature_selection_share",
                       "verbose"})
    screens = True
    #: Reads the data only through ``data.row_sum``: fits dask arrays too.
    distributed = True
    #: Fits the multinomial loss of K > 2 classes (``multi_class="multinomial"``).
    multinomial = True
    #: Takes :func:`noise_ridge` (option ``noise_ridge``): a regressor's default decision
    #: keeps this solver's own prediction where a refit would not be informative.
    takes_noise_ridge = True

    def plan_with(self, problem, shape, epsilon, delta, options, bounds):
        options = {"sampling": "poisson", "gradient_estimator": "auto", "radius": None,
                   "average": True, "floating_point_safe": True, "feature_selection": "none",
                   "feature_selection_share": None, "multi_class": "ovr",
                   "noise_ridge": False, **options}
        validate_params(_OPTIONS, options, f"solver {self.name!r}")
        if options["noise_ridge"] and math.isfinite(epsilon):
            # Public: added to the penalty's l2 term (and the smoothness the step size
            # and the step count read) before anything is planned from them.
            ridge = noise_ridge(shape[0], bounds.n_params, epsilon, delta,
                                grad_bound=bounds.grad_l2)
            bounds = dataclasses.replace(bounds, l2=bounds.l2 + ridge,
                                         smoothness=bounds.smoothness + ridge)
        self.check_weight_decay(bounds, options)
        n, p, n_targets = shape
        # "auto" does not screen: noisy gradient descent is limited by its few steps on
        # an ill-conditioned objective, not by the noise's dimension (measured on IMDB,
        # benchmarks/bench_text.py); an integer k keeps the k first coordinates.
        k = options["feature_selection"]
        multinomial = options["multi_class"] == "multinomial" and n_targets > 1
        if not isinstance(k, str) and k < p:
            if multinomial:
                raise ValueError("solver='sgd' screens features for one-vs-rest problems "
                                 "only: with multi_class='multinomial' use "
                                 "feature_selection='auto' or 'none'")
            return self._plan_screened(problem, shape, epsilon, delta, options, int(k))
        # A step releases one gradient sum of the multinomial problem's K x (p + 1)
        # matrix (_multinomial: sensitivity independent of K), or K sums, one per
        # one-vs-rest problem.
        releases = 1 if multinomial else n_targets
        if multinomial:
            bounds = multinomial_bounds(bounds)
        # The heuristics below (steps, estimator) read one release's share of the
        # budget; the noise is calibrated for the releases together.
        eps_k, delta_k = epsilon / releases, delta / releases
        n_params = bounds.n_params * (n_targets if multinomial else 1)
        batch = n if options["batch_size"] is None else min(options["batch_size"], n)
        private = math.isfinite(epsilon)
        radius = options["radius"]
        n_steps = options["max_iter"]
        if n_steps is None:
            if private:
                # The guess of the solution's norm (without a ball): one problem's, or
                # sqrt(K) times it for the K rows of the multinomial solution (about 3x the steps on
                # digits, K = 10: accuracy 0.82 -> 0.86 at epsilon 10, see
                # benchmarks/bench_multiclass.py).
                scale = radius or (math.sqrt(n_targets) if multinomial else 1.0)
                n_steps = default_noisy_gd_steps(n, n_params, eps_k, delta_k,
                                                 smoothness=bounds.smoothness,
                                                 grad_bound=bounds.grad_l2, scale=scale)
            else:
                n_steps = 200
            if batch < n:
                n_steps = max(n_steps, math.ceil(n / batch))
        q = batch / n
        safe = bool(options["floating_point_safe"])
        if private:
            z = subsampled_noise_multiplier(q, n_steps * releases, options["sampling"],
                                            epsilon, delta, safe)
            events = _step_events(z, q, options["sampling"], n_steps, safe) * releases
        else:
            z, events = 0.0, list(non_private_events()) * n_targets
        return SGDPlan(
            solver=self.name, n_samples=n, n_features=shape[1], n_targets=n_targets,
            epsilon=epsilon, delta=delta, events=tuple(events), n_iter=n_steps,
            options=options, bounds=bounds,
            batch_size=batch, sampling_rate=q, sampling=options["sampling"],
            noise_multiplier=z,
            learning_rate=options["learning_rate"] or 1.0 / bounds.smoothness,
            estimator=_resolve_estimator(options["gradient_estimator"], bounds, n, eps_k,
                                         delta_k, problem.sparsity),
            radius=radius, average=options["average"], floating_point_safe=safe,
            verbose=int(options.get("verbose", 0)), multinomial=multinomial,
        )

    def _plan_screened(self, problem, shape, epsilon, delta, options, k):
        """The plan of a run that screens ``k`` coordinates first (module docstring of
        :mod:`._screening`): the screening's releases take their shares of the budget
        and the steps' noise is calibrated so that all of it composes to
        ``(epsilon, delta)``."""
        n, p, n_targets = shape
        safe = bool(options["floating_point_safe"])
        counted = bool(problem.fit_intercept) and isinstance(problem.loss, LogisticLoss)
        shares = [SGD_COUNT_SHARE] if counted else []
        shares.append(options["feature_selection_share"] or SGD_SCREENING_SHARE)
        names = (["sgd: class counts"] if counted else []) + ["sgd: label association"]
        units, screen_events = noise_units(epsilon, delta, shares, safe, names)
        screening = plan_screening(k, p, count_unit=units[0] if counted else None,
                                   association_unit=units[-1], floating_point_safe=safe)
        inner = {**options, "feature_selection": "none", "floating_point_safe": safe}
        sub = gradient_bounds(problem, k, private=math.isfinite(epsilon),
                              use_sparsity=self.use_sparsity)
        plan = self.plan_with(problem, (n, k, n_targets), epsilon, delta, inner, sub)
        if plan.private:
            z = calibrate_scale(
                lambda z: screen_events + _step_events(z, plan.sampling_rate, plan.sampling,
                                                       plan.n_iter, safe) * n_targets,
                epsilon, delta)
            events = tuple(screen_events) + tuple(
                _step_events(z, plan.sampling_rate, plan.sampling, plan.n_iter, safe)
                * n_targets)
            plan = dataclasses.replace(plan, noise_multiplier=z, events=events)
        return dataclasses.replace(plan, n_features=p, options=options, screening=screening)

    def solve(self, problem, data, plan, rng):
        if plan.screening is not None:
            return self._solve_screened(problem, data, plan, rng)
        start = plan.start
        plan = dataclasses.replace(self.replanned(problem, data, plan, plan.options),
                                   start=start)
        if plan.multinomial:
            theta, n_grad = self._run(problem, data, plan, rng)
            coef, intercept = split(plan.bounds, theta)
            # The softmax is unchanged by a shift of every intercept: the centred ones
            # (post-processing), as scikit-learn's multinomial fit reports them.
            return SolverResult(coef, intercept - intercept.mean(), plan.n_iter,
                                plan.events, {"n_gradient_evaluations": n_grad})
        coefs, intercepts, n_grad = [], [], 0
        for k in range(plan.n_targets):
            b0 = 0.0 if start is None else float(start[k])
            theta, used = self._run(problem, data, plan, rng, k, b0)
            coef, intercept = split(plan.bounds, theta)
            coefs.append(coef)
            intercepts.append(intercept)
            n_grad += used
        return SolverResult(np.array(coefs), np.array(intercepts), plan.n_iter, plan.events,
                            {"n_gradient_evaluations": n_grad})

    def _solve_screened(self, problem, data, plan, rng):
        screened = screen(problem, data, plan.screening, rng)
        S = screened.columns
        sub = data.restricted(S)
        inner = dataclasses.replace(plan, n_features=S.size, screening=None,
                                    start=screened.offsets,
                                    options={**plan.options, "feature_selection": "none"})
        result = self.solve(problem, sub, inner, rng)
        coef = np.zeros((plan.n_targets, plan.n_features))
        coef[:, S] = result.coef
        result.info.update(n_selected=int(S.size), association=screened.association)
        return SolverResult(coef, result.intercept, plan.n_iter, plan.events, result.info)

    def _run(self, problem, data, plan, rng, k=0, b0=0.0):
        """One problem's steps (one-vs-rest problem ``k``, or the multinomial one over
        a matrix of K rows of ``(w, b)``). The view sums the clipped gradients (over
        its blocks, where the rows live); the noise is added here, once per step."""
        bounds, n = plan.bounds, plan.n_samples
        sigma = plan.noise_multiplier * bounds.grad_l2
        # The lattice of the safe path is planned for one example's bound C2, the
        # shift of an added or removed example (see subsampled_gaussian_event).
        noise = GaussianMechanism(bounds.grad_l2, sigma=sigma,
                                  floating_point_safe=plan.floating_point_safe) \
            if sigma > 0 else None
        marks = checkpoints(plan.n_iter, plan.verbose)
        # 'tail' averages the iterates of the second half of the run (suffix averaging).
        first = plan.n_iter // 2 + 1 if plan.average == "tail" else 1
        theta = np.zeros((plan.n_targets, bounds.n_params) if plan.multinomial
                         else bounds.n_params)
        if bounds.intercept:
            # The null model's intercept when a screening released the class rate.
            theta[..., -1] = b0
        avg = np.zeros_like(theta)
        n_grad = 0
        poisson = not plan.full_batch and plan.sampling == "poisson"
        # Each step's Poisson sample is drawn where the rows are, from a key of its
        # own, so a retried block draws the same rows whatever the chunking.
        samplers = step_samplers(plan.sampling_rate, plan.n_iter, rng) if poisson else None
        for t in range(1, plan.n_iter + 1):
            if plan.full_batch:
                batch, denom = None, float(n)
            elif poisson:
                batch, denom = samplers[t - 1], plan.sampling_rate * n
            else:
                batch = np.sort(rng.choice(n, size=plan.batch_size, replace=False))
                batch, denom = batch.astype(np.int64), plan.sampling_rate * n
            if plan.multinomial:
                summed = data.row_sum(block_multinomial_gradient_sum, bounds, theta, batch,
                                      norm_bound=bounds.norm_bound, l1_bound=bounds.l1_bound)
            else:
                summed = data.row_sum(block_gradient_sum, k, bounds, problem.loss, theta,
                                      batch, norm_bound=bounds.norm_bound,
                                      l1_bound=bounds.l1_bound)
            g, used = summed[:-1], int(summed[-1])
            # Neither the sum nor the step's gradient is kept past its use: with K x p
            # parameters each is hundreds of MB, and the next step's sum would be
            # computed beside them.
            del summed
            n_grad += used
            if noise is not None:
                g = noise.randomise(g, rng)
            g /= denom
            if plan.estimator == "projection":
                g = project_l1_ball(g, bounds.grad_l1)
            theta = penalised_step(bounds, theta, g.reshape(theta.shape), plan.learning_rate,
                                   plan.radius)
            del g
            if t >= first:
                avg += (theta - avg) / (t - first + 1)
            if t in marks:
                report(self.name, t, plan.n_iter,
                       plan.step_events(k * plan.n_iter + t) if plan.private else [],
                       plan.delta)
        return (avg if plan.average else theta), n_grad

