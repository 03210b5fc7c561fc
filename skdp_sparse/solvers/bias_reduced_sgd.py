"""Bias-reduced DP-SGD stopped by a privacy filter (Ghazi et al., "Differentially
Private Optimization with Sparse Gradients", Alg. 5-7).

Each step draws ``N ~ TGeom(M)``, ``M = floor(log2 n) - 1``, and estimates the
gradient by ``G = (G_B - (G_O + G_E)/2) / p_N + G_I`` with ``B`` a uniform subset of
size ``2^(N+1)``, ``O, E`` its halves and ``I`` one uniform index, each mean released
by the projection mechanism (Gaussian noise, l1-ball projection) at
``(eps/32, delta/16)``; the telescoping cancels the small-batch bias. The run stops
by the fully adaptive filter of Whitehouse et al. (2023); the steps' privacy
parameters depend on the public draws ``N_s`` only. Boosting (Alg. 7) runs K
independent runs and picks one by report-noisy-min of the clipped loss. The
accounting is in ``doc/proofs/bias_reduced_sgd.rst``.

When to use it: in the regime the paper targets, but not at sizes measured so far.
Its rate ``(s ln d)^(1/4) / sqrt(n eps)`` for s-sparse gradients beats DP-SGD's
``sqrt(d) / (n eps)`` where ``n eps < d / sqrt(s ln d)`` (d much larger than n eps). In
``benchmarks/bench_bias_reduced.py`` (synthetic logistic problems with s in {5, 20}
non-zeros a row, d from 10^4 to 10^6, n in {10^3, 10^4}, epsilon 1 and 10, on both sides
of that crossover; ``doc/benchmarks.rst``) it was the best solver by test ROC AUC in no
configuration: its AUC stayed near chance (0.48 to 0.62) where ``"screened_newton"``
(``solver="auto"``'s choice there) reached 0.52 to 0.91, and its excess empirical risk
was that of the intercept-only model it starts from, the lowest only where every other
solver did worse than the class balance. The constants, not the rate, decide at these
sizes:

* each of a step's four releases runs at ``(eps/32, delta/16)``: noise about 34 times
  that of one Gaussian release at ``(eps, delta)`` (145 against 4.2 per unit of
  sensitivity at eps = 1, delta = 10^-6, after the class-balance share);
* the filter stops after about ``2 n / ln(4/delta)`` steps (143 at n = 10^3, 1000 at
  n = 10^4, delta = 1/n^2);
* Theorem 6.7's step ``D / (nu sqrt(tau))``, with ``nu^2`` the second moment of the
  telescoped estimate (``nu`` about 1200 at n = 10^4, s = 5, eps = 1), lets the
  gradient part of the steps move the iterate by at most ``eta tau C2``, 0.08 over the
  whole run there (0.01 without a public ``sparsity``): the fit stays at its start.

With these constants the bound of Proposition 6.6 behind Theorem 6.7 (radius 1, unit
rows; ``tests/test_bias_reduced_guarantees.py`` checks it) is above the trivial ``C2 D``,
the most any point of the ball can lose, up to n of about 2 x 10^4 at d = 5, s = 2,
eps = 10 (3 x 10^5 at eps = 1), and up to about 2 x 10^6 at d = 10^4, s = 5, eps = 10
(10^7 at eps = 1). Prefer ``solver="auto"``; use this solver only beyond those sizes
(n eps from about 10^5 at d = 5 to 10^7 and more at d = 10^4), with s-sparse rows and a
public ``sparsity`` (its projection mechanism's l1 radius ``norm_bound sqrt(s)``), or to
study the paper's algorithm, whose accounting it follows.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..mean._sampled_projection import (
    sampled_discrete_projection,
    sampled_gaussian_projection,
    sampling_threshold,
)
from ..optim._lazy_iterate import LazyIterate
from ..optim.projections import project_l1_ball
from ..privacy.accounting import PrivacyEvent, compose
from ..privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from ..privacy.subsampling import wor_amplified_epsilon_delta
from ..utils.sparse_vector import SparseVector, aligned
from ..utils.validation import Interval, Options, validate_params
from ._base import Plan, SolverResult, non_private_events
from ._gradient import GradientBounds, GradientSolver, gradient_sum, penalised_step, split
from ._screening import (
    CLASS_BALANCE_SHARE,
    check_exact_units,
    class_balance_start,
    plan_class_balance,
)

__all__ = ["BiasReducedSGD"]

_OPTIONS = {
    "max_iter": [Interval(numbers.Integral, 1, None), None],
    "learning_rate": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "radius": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "filter_bound": [Options("paper", "amplified")],
    "gradient_estimator": [Options("projection", "gaussian")],
    "boosting_runs": [Interval(numbers.Integral, 0, None)],
    "loss_bound": [Interval(numbers.Real, 0, None, closed="neither")],
    "class_balance": ["boolean"],
    "floating_point_safe": ["boolean"],
}


def truncated_geometric_probs(M):
    """Truncated geometric law on {0..M}: p_k = C_M / 2^k, C_M = 1 / (2 (1 - 2^-(M+1)))."""
    c_m = 1.0 / (2.0 * (1.0 - 2.0 ** -(M + 1)))
    return c_m / 2.0 ** np.arange(M + 1)


def projection_mechanism(bounds, grad_sum, m, sigma_unit, rng, estimator, safe=False,
                         overwrite=False, scratch=None):
    """Alg. 1 of Ghazi et al. on the mean of ``m`` clipped gradients.

    Gaussian noise calibrated to the mean's replace-one l2 sensitivity
    ``2 C2 / m`` (``sigma_unit`` is the noise of sensitivity 1), then the Euclidean
    projection on the l1 ball of radius ``C1``, which holds every mean of clipped
    gradients. Where the projection's public sampling threshold exists, the release
    draws only the noise that can survive the projection
    (:func:`~skdp_sparse.mean._sampled_projection.sampled_gaussian_projection`, and its
    floating-point-safe counterpart): the same law as noise on every coordinate then the
    projection, at a cost that does not grow with the p noise values.

    ``grad_sum`` is a dense array (``overwrite`` lets the release reuse its memory) or
    a :class:`~skdp_sparse.utils.sparse_vector.SparseVector`; the release comes in the
    same form. A sparse sum is released at a cost that follows its support and the noise
    drawn, not p; ``scratch`` (p zeros, left zero) saves allocating the dense view the
    samplers read.
    """
    sparse = isinstance(grad_sum, SparseVector)
    if sparse:
        support, g = grad_sum.positions, grad_sum.values / m
    else:
        support, g = None, np.divide(grad_sum, m, out=grad_sum if overwrite else None)
    if sigma_unit > 0:
        sensitivity = 2.0 * bounds.grad_l2 / m
        sigma = sensitivity * sigma_unit
        radius = bounds.grad_l1
        t = sampling_threshold(sigma, bounds.n_params, radius) \
            if estimator == "projection" else None
        if t is not None:
            # The samplers read a dense mean: a sparse sum's entries go into scratch zeros.
            mean = g
            if sparse:
                mean = np.zeros(bounds.n_params) if scratch is None else scratch
                mean[support] = g
            try:
                if safe:
                    return sampled_discrete_projection(mean, sensitivity, sigma, radius, t, rng,
                                                       overwrite=not sparse,
                                                       support=support)[0]
                return sampled_gaussian_projection(mean, sigma, radius, t, rng,
                                                   overwrite=not sparse, support=support)[0]
            finally:
                if sparse:
                    mean[support] = 0.0
        if sparse:  # noise on every coordinate: the release is dense
            g = SparseVector(support, g, bounds.n_params).toarray()
        g = GaussianMechanism(sensitivity, sigma=sigma, floating_point_safe=safe).randomise(
            g, rng)
    if estimator == "projection":
        # Without noise a sparse sum is projected on its entries: the projection leaves
        # 0 at 0.
        g = project_l1_ball(g, bounds.grad_l1)
    if not sparse:
        return g
    return SparseVector.from_dense(g) if sigma_unit > 0 else SparseVector(support, g,
                                                                           bounds.n_params)


def bias_reduced_gradient(problem, rows, y, bounds, theta, N, probs, sigma_unit, rng,
                          estimator, safe=False):
    """Alg. 5: ``G = (G_B - (G_O + G_E)/2) / p_N + G_I`` at ``theta``, as a dense vector;
    returns (G, gradients used)."""
    iterate = LazyIterate(theta, bounds.n_features, 0.0, bounds.l2, bounds.l1)
    releases, used = _releases(problem, rows, y, bounds, iterate, N, sigma_unit, rng,
                               estimator, safe)
    positions, G = _telescoped(releases, probs[N])
    return SparseVector(positions, G, bounds.n_params).toarray(), used


def _telescoped(releases, p_n):
    """``G = (G_B - (G_O + G_E)/2) / p_N + G_I`` on the union of the releases' supports."""
    positions, (G_B, G_O, G_E, G_I) = aligned(releases)
    return positions, (G_B - 0.5 * (G_O + G_E)) / p_n + G_I


def _gradient(problem, rows, y, bounds, iterate, batch):
    """:func:`gradient_sum` over ``batch`` at the iterate's current point, sparse for CSR
    rows (the coefficients it reads brought up to date, and no more)."""
    if not hasattr(rows, "indptr"):
        dense = gradient_sum(rows, y, bounds, problem.loss, iterate.current(), batch)
        return SparseVector.full(dense)
    columns, values, total = iterate.csr_gradient(rows, y, problem.loss,
                                                  bounds.derivative_clip, batch)
    if not (np.all(np.isfinite(values)) and math.isfinite(total)):
        raise FloatingPointError("non-finite gradient")
    if bounds.intercept:
        columns = np.append(columns, bounds.n_features)
        values = np.append(values, total)
    return SparseVector(columns, values, bounds.n_params)


def _releases(problem, rows, y, bounds, iterate, N, sigma_unit, rng, estimator, safe,
              scratch=None):
    """The four released means of Alg. 5 (``G_B, G_O, G_E, G_I``, sparse vectors), and the
    gradients used."""
    n = rows.shape[0]
    half = 2**N
    batch = rng.choice(n, size=2 * half, replace=False).astype(np.int64)
    odd, even = np.sort(batch[:half]), np.sort(batch[half:])
    g_odd = _gradient(problem, rows, y, bounds, iterate, odd)
    g_even = _gradient(problem, rows, y, bounds, iterate, even)
    i = np.array([rng.integers(n)], dtype=np.int64)
    g_one = _gradient(problem, rows, y, bounds, iterate, i)
    positions, (v_odd, v_even) = aligned([g_odd, g_even])
    g_whole = SparseVector(positions, v_odd + v_even, bounds.n_params)
    releases = tuple(projection_mechanism(bounds, g, m, sigma_unit, rng, estimator, safe,
                                          scratch=scratch)
                     for g, m in ((g_whole, 2 * half), (g_odd, half), (g_even, half),
                                  (g_one, 1)))
    return releases, 2 * half + 1


def bias_reduced_step(problem, rows, y, bounds, iterate, N, probs, sigma_unit, rng,
                      estimator, eta, radius, safe=False, scratch=None):
    """One step of Alg. 6 on a :class:`~skdp_sparse.optim._lazy_iterate.LazyIterate` of
    step size ``eta``: the estimate of Alg. 5, then ``theta <- Pi(prox(theta - eta (G +
    l2 w)))`` (``Pi`` the l2 ball of ``radius``, None: none), the iterate's sum (hence
    the average) kept up to date. Without a ball the step touches the estimate's support
    only. Returns the gradients used."""
    releases, used = _releases(problem, rows, y, bounds, iterate, N, sigma_unit, rng,
                               estimator, safe, scratch)
    positions, G = _telescoped(releases, probs[N])
    if radius is None:
        iterate.step(positions, G)
    else:
        dense = SparseVector(positions, G, bounds.n_params).toarray()
        iterate.replace(penalised_step(bounds, iterate.current(), dense, eta, radius))
    return used


class PrivacyFilter:
    """The fully adaptive (epsilon, delta) filter of Whitehouse, Ramdas, Rogers & Wu (2023).

    Steps with predictable privacy parameters ``(eps_s, delta_s)`` compose to
    ``(eps_F, delta' + delta'')`` as long as
    ``sqrt(2 ln(1/delta') sum eps_s^2) + (1/2) sum eps_s^2 <= eps_F`` and
    ``sum delta_s <= delta''`` (Ghazi et al., Thm. A.4).
    """

    def __init__(self, eps_f, delta_prime, delta_second):
        self.eps_f = eps_f
        self.log_inv = math.log(1.0 / delta_prime)
        self.delta_second = delta_second
        self.sq = 0.0
        self.dl = 0.0

    def add(self, eps_s, delta_s):
        self.sq += eps_s**2
        self.dl += delta_s

    def within(self):
        return (math.sqrt(2 * self.log_inv * self.sq) + 0.5 * self.sq <= self.eps_f
                and self.dl <= self.delta_second)


def _learning_rate(bounds, probs, sigma_unit, estimator, radius, tau):
    """Step ``D / (nu sqrt(tau))`` of Ghazi et al. (Thm. 6.7), from public quantities,
    at most ``1 / l2``.

    ``nu^2`` bounds the oracle's second moment: the noiseless parts of
    ``G_B - (G_O + G_E)/2`` cancel (the means lie in the l1 ball, where the
    projection is the identity), leaving noise of second moment
    ``3 p sigma_B^2`` (at most ``(2 C1)^2`` after projection), weighted by
    ``1 / p_N``; ``G_I`` adds at most ``C2^2 + p sigma_1^2`` (``C1^2`` projected).
    ``D = 2 radius`` (radius 1 when not given); ``tau`` is the expected number of steps.
    """
    p, c2, c1 = bounds.n_params, bounds.grad_l2, bounds.grad_l1
    nu2 = 0.0
    for k, p_k in enumerate(probs):
        sigma_b = 2.0 * c2 * sigma_unit / 2 ** (k + 1)
        a_k = 3.0 * p * sigma_b**2
        if estimator == "projection":
            a_k = min(a_k, 4.0 * c1**2)
        nu2 += 2.0 * a_k / p_k
    g_i = c2**2 + p * (2.0 * c2 * sigma_unit) ** 2
    if estimator == "projection":
        g_i = min(g_i, c1**2)
    nu2 += 2.0 * g_i
    eta = 2.0 * (radius or 1.0) / (math.sqrt(nu2) * math.sqrt(tau))
    # The theorem's step ignores the l2 penalty, whose decay multiplies the weights by
    # 1 - eta l2 each step: past 2 / l2 they diverge (alpha = 500: coefficients of 1e301
    # without noise). At most 1 / l2, the decay never flips their sign.
    return min(eta, 1.0 / bounds.l2) if bounds.l2 > 0 else eta


def step_privacy(N, n, epsilon, delta, filter_bound):
    """(eps_s, delta_s) of one step of Alg. 6 with batch parameter ``N``; each
    projection mechanism runs at (eps/32, delta/16)."""
    eps0, delta0 = epsilon / 32.0, delta / 16.0
    q = 2.0 ** (N + 1) / n
    e3, d3 = wor_amplified_epsilon_delta(3 * eps0, 3 * delta0, q)
    e1, d1 = wor_amplified_epsilon_delta(eps0, delta0, 1.0 / n)
    eps_s, delta_s = e3 + e1, d3 + d1
    if filter_bound == "paper":
        c = (3.0 * 2.0 ** (N + 1) + 1.0) / (16.0 * n)
        # The paper's eps c_s rests on e^x - 1 <= 2x, true for x <= 1.25 only; the
        # max keeps the rule valid for every epsilon and equal to it below that.
        eps_s, delta_s = max(epsilon * c, eps_s), max(delta * c, delta_s)
    return eps_s, delta_s


@dataclass(frozen=True, kw_only=True, eq=False)
class BiasReducedPlan(Plan):
    bounds: GradientBounds
    run_epsilon: float
    run_delta: float
    n_runs: int
    max_steps: int | None
    learning_rate: float | None
    radius: float | None
    filter_bound: str
    estimator: str
    loss_bound: float
    floating_point_safe: bool
    verbose: int
    class_balance: object = None
    class_balance_events: tuple = ()


class BiasReducedSGD(GradientSolver):
    """Bias-reduced DP-SGD with a privacy filter, optionally boosted (Alg. 7); the module
    docstring says when to use it."""

    name = "bias_reduced_sgd"
    reads = frozenset({"max_iter", "learning_rate", "verbose"})
    #: Its budget is a privacy filter's, spent as the run goes (its plan records no
    #: events up front); its intercept starts at the noisy class balance instead.
    calibrated_decision = False
    adaptive_budget = True

    def plan_with(self, problem, shape, epsilon, delta, options, bounds):
        options = {"radius": None, "filter_bound": "paper", "gradient_estimator": "projection",
                   "boosting_runs": 0, "loss_bound": 1.0, "class_balance": True,
                   "floating_point_safe": True, **options}
        validate_params(_OPTIONS, options, f"solver {self.name!r}")
        self.check_weight_decay(bounds, options)
        n, _, n_targets = shape
        private = math.isfinite(epsilon)
        if n < 2:
            # A step samples 2^(N+1) >= 2 rows without replacement, noise or not.
            raise ValueError(f"solver {self.name!r} samples batches of at least 2 rows: "
                             "it needs n_samples >= 2")
        if not private and options["max_iter"] is None:
            raise ValueError("with epsilon=np.inf there is no privacy filter: give max_iter")
        runs = options["boosting_runs"]
        # A logistic intercept starts at the noisy log-odds of the classes, bought with
        # CLASS_BALANCE_SHARE of (epsilon, delta); the runs share the rest.
        safe = bool(options["floating_point_safe"])
        balance, balance_events = plan_class_balance(
            problem, bounds, epsilon, delta, safe, n_targets, self.name) \
            if options["class_balance"] else (None, [])
        share = 1 - CLASS_BALANCE_SHARE if balance is not None else 1.0
        eps_k, delta_k = share * epsilon / n_targets, share * delta / n_targets
        # Boosting gives each of its K runs and the selection (eps/(K+1), delta/(K+1)).
        run_epsilon = eps_k / (runs + 1) if runs else eps_k
        run_delta = delta_k / (runs + 1) if runs else delta_k
        if private and safe:
            # The unit of every projection mechanism of a run (see _run); its lattice was
            # planned at the first release, after the class balance had spent its share.
            check_exact_units([GaussianMechanism(
                1.0, epsilon=run_epsilon / 32.0, delta=run_delta / 16.0,
                floating_point_safe=True).sigma], bounds.n_params)
        return BiasReducedPlan(
            solver=self.name, n_samples=n, n_features=shape[1], n_targets=n_targets,
            epsilon=epsilon, delta=delta, events=(), n_iter=options["max_iter"] or 0,
            options=options, bounds=bounds, run_epsilon=run_epsilon, run_delta=run_delta,
            n_runs=runs, max_steps=options["max_iter"], learning_rate=options["learning_rate"],
            radius=options["radius"], filter_bound=options["filter_bound"],
            estimator=options["gradient_estimator"], loss_bound=options["loss_bound"],
            floating_point_safe=safe, class_balance=balance,
            class_balance_events=tuple(balance_events), verbose=int(options.get("verbose", 0)),
        )

    def solve(self, problem, data, plan, rng):
        plan = self.replanned(problem, data, plan, plan.options)
        rows = self.rows(data, plan)
        starts = class_balance_start(plan.class_balance, data, rng)
        coefs, intercepts, steps, n_grad = [], [], 0, 0
        events = list(plan.class_balance_events)
        for k in range(plan.n_targets):
            theta, k_steps, k_events, used = self._target(problem, rows, data.target(k), plan,
                                                          rng, starts[k])
            coef, intercept = split(plan.bounds, theta)
            coefs.append(coef)
            intercepts.append(intercept)
            events.extend(k_events)
            steps = max(steps, k_steps)
            n_grad += used
        return SolverResult(np.array(coefs), np.array(intercepts), steps, tuple(events),
                            {"n_gradient_evaluations": n_grad})

    def _target(self, problem, rows, y, plan, rng, start=0.0):
        if plan.n_runs == 0:
            return self._run(problem, rows, y, plan, rng, self.name, start)
        candidates, events, total_steps, total_grad = [], [], 0, 0
        for k in range(plan.n_runs):
            theta, steps, ev, used = self._run(problem, rows, y, plan, rng,
                                               f"{self.name} run {k + 1}", start)
            candidates.append(theta)
            events.extend(ev)
            total_steps += steps
            total_grad += used
        scores = np.array([_clipped_loss(problem, rows, y, plan.bounds, th, plan.loss_bound)
                           for th in candidates])
        if plan.private:
            # The scores move in arbitrary directions between neighbours: the
            # report-noisy-min of scores of sensitivity loss_bound / n takes a Laplace
            # scale of twice that over epsilon (twice the paper's, valid only for
            # monotone scores).
            selection = LaplaceMechanism(2.0 * plan.loss_bound / plan.n_samples,
                                         epsilon=plan.run_epsilon,
                                         floating_point_safe=plan.floating_point_safe)
            scores = selection.randomise(scores, rng)
            events.append(PrivacyEvent.pure(selection.epsilon,
                                            name="report-noisy-min (laplace)"))
        best = int(np.argmin(scores))
        return candidates[best], total_steps, events, total_grad

    def _run(self, problem, rows, y, plan, rng, tag, start=0.0):
        bounds, n = plan.bounds, plan.n_samples
        M = max(int(math.floor(math.log2(n))) - 1, 0)
        probs = truncated_geometric_probs(M)
        if not plan.private:
            return self._noiseless_run(problem, rows, y, plan, rng, probs)
        epsilon, delta = plan.run_epsilon, plan.run_delta
        # Each projection mechanism of Alg. 5 runs at (eps/32, delta/16): Alg. 6 calls
        # the oracle with (eps/8, delta/4) and Alg. 5 gives each call a quarter.
        safe = plan.floating_point_safe
        sigma_unit = GaussianMechanism(1.0, epsilon=epsilon / 32.0, delta=delta / 16.0,
                                       floating_point_safe=safe).sigma
        eps_last, delta_last = step_privacy(M, n, epsilon, delta, plan.filter_bound)
        if plan.filter_bound == "paper":
            filt = PrivacyFilter(epsilon / 2.0, delta / 4.0, delta / 4.0)
            eps_f, delta_f = epsilon / 2.0, delta / 2.0
        else:
            eps_f, delta_f = epsilon - eps_last, delta - delta_last
            filt = PrivacyFilter(eps_f, delta_f / 2.0, delta_f / 2.0)
        eta = plan.learning_rate
        if eta is None:
            # Expected number of steps the filter allows: the sum of eps_s^2 it admits
            # over the mean eps_s^2 per step (and the same for the deltas).
            params = np.array([step_privacy(k, n, epsilon, delta, plan.filter_bound)
                               for k in range(M + 1)])
            mean_sq = float(probs @ params[:, 0] ** 2)
            mean_delta = float(probs @ params[:, 1])
            tau = min(filt.eps_f**2 / (2 * filt.log_inv * mean_sq),
                      filt.delta_second / mean_delta)
            eta = _learning_rate(bounds, probs, sigma_unit, plan.estimator, plan.radius,
                                 max(tau, 1.0))
        theta = np.zeros(bounds.n_params)
        if bounds.intercept:
            theta[bounds.n_features] = start
        iterate = LazyIterate(theta, bounds.n_features, eta, bounds.l2, bounds.l1)
        scratch = np.zeros(bounds.n_params)
        n_grad = t = 0
        stopped_by_filter = False
        while True:
            if not filt.within():
                stopped_by_filter = True
                break
            if plan.max_steps is not None and t >= plan.max_steps:
                break
            N = int(rng.choice(M + 1, p=probs))
            n_grad += bias_reduced_step(problem, rows, y, bounds, iterate, N, probs,
                                        sigma_unit, rng, plan.estimator, eta, plan.radius,
                                        safe, scratch)
            filt.add(*step_privacy(N, n, epsilon, delta, plan.filter_bound))
            t += 1
            if plan.verbose and (t & (t - 1)) == 0:
                print(f"[{tag}] step {t}  N={N}  filter: sqrt-term+drift="
                      f"{math.sqrt(2 * filt.log_inv * filt.sq) + 0.5 * filt.sq:.4g} "
                      f"<= {filt.eps_f:.4g}?  sum delta_s={filt.dl:.3g}")
        events = [PrivacyEvent.approximate(eps_f, delta_f,
                                           name="bias-reduced SGD: filtered steps")]
        if stopped_by_filter:
            # Steps 0..t-2 passed the filter; the last one overshoots by at most one
            # step, whose parameters are bounded by those of the largest batch (N = M).
            events.append(PrivacyEvent.approximate(
                eps_last, delta_last, name="bias-reduced SGD: last step (worst case)"))
        if plan.verbose:
            print(f"[{tag}] stopped after {t} steps; privacy spent: epsilon="
                  f"{compose(events, delta)[0]:.4g} (delta={delta:.3g})")
        return iterate.average(), t, events, n_grad

    def _noiseless_run(self, problem, rows, y, plan, rng, probs):
        bounds = plan.bounds
        eta = plan.learning_rate or _learning_rate(bounds, probs, 0.0, plan.estimator,
                                                   plan.radius, float(plan.max_steps))
        iterate = LazyIterate(np.zeros(bounds.n_params), bounds.n_features, eta, bounds.l2,
                              bounds.l1)
        n_grad = 0
        for _ in range(plan.max_steps):
            N = int(rng.choice(probs.size, p=probs))
            n_grad += bias_reduced_step(problem, rows, y, bounds, iterate, N, probs, 0.0, rng,
                                        plan.estimator, eta, plan.radius)
        return iterate.average(), plan.max_steps, list(non_private_events()), n_grad


def _clipped_loss(problem, rows, y, bounds, theta, loss_bound):
    w = theta[: bounds.n_features]
    b = theta[bounds.n_features] if bounds.intercept else 0.0
    z = np.asarray(rows @ w).ravel() + b
    return float(np.mean(np.minimum(problem.loss.value(y, z), loss_bound)))
