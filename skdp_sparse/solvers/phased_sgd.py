"""Phased SGD for smooth losses (Menart & Nikolov, "On the Gradient Complexity of
Private Optimization with Private Oracles", Alg. 4), near-linear time.

Phase ``r = 1..R``: one-pass projected proximal SGD from ``w_{r-1}`` over
``T_r = T / 2^r`` examples with step ``eta_r = eta / 4^r``; the average iterate plus
``N(0, sigma_r^2 I)`` starts the next phase. Each step is non-expansive (convex,
``beta``-smooth per-example loss, ``eta_r <= 2 / beta``), and a step on the replaced
example moves two runs apart by at most ``2 eta_r C2``, so a phase's output is a
Gaussian mechanism; ``sigma_r = s * 2 eta_r C2`` with ``s`` calibrated so the run is
exactly ``(epsilon, delta)``-DP:

* ``sampling="disjoint"`` (default; the single-pass phased SGD of Feldman, Koren &
  Talwar 2020): consecutive blocks of one random permutation, so each example is
  used once and the run is ``(1/s)``-GDP (on the floating-point-safe path, a discrete
  Gaussian bounded by the Gaussian of ratio ``(1 + 2^-16)(1 + 2^-20) / s``,
  ``doc/proofs/pld.rst``);
* ``sampling="with_replacement"`` (the paper's Alg. 4): each phase accounted by an
  RDP bound over how often the replaced example is drawn, phases composed in RDP.

The ``K`` one-vs-rest problems of a multiclass fit compose in one accountant.

Details: ``doc/proofs/phased_sgd.rst``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln, logsumexp

from ..optim import _sgd_kernels as K
from ..privacy import discrete
from ..privacy.accounting import RDP_ORDERS, PrivacyEvent, calibrate_scale
from ..privacy.mechanisms import GaussianMechanism
from ..privacy.pld import DISCRETE_GAUSSIAN_SLACK, GaussianPLD
from ..utils.validation import Interval, Options, validate_params
from ._base import Plan, SolverResult, non_private_events
from ._gradient import GradientBounds, GradientSolver, report, split
from ._screening import class_balance_start, plan_class_balance

__all__ = ["PhasedSGD", "phased_sgd_gradient_bound"]

_OPTIONS = {
    "max_iter": [Interval(numbers.Integral, 1, None), None],
    "n_phases": [Interval(numbers.Integral, 1, None), None],
    "learning_rate": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "radius": [Interval(numbers.Real, 0, None, closed="neither")],
    "target_accuracy": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "sampling": [Options("disjoint", "with_replacement")],
    "class_balance": ["boolean"],
    "floating_point_safe": ["boolean"],
}

#: Largest draw count of the replaced example summed exactly in a with-replacement phase.
_K_MAX = 4096


def phased_sgd_gradient_bound(n_params, delta, alpha, *, diameter=1.0, lipschitz=1.0):
    """``max(B L sqrt(d log(1/delta)) / alpha, (B L / alpha)^2)``: gradient evaluations
    phased SGD needs for excess risk ``alpha`` on smooth losses (Menart & Nikolov, Thm. 4)."""
    bl = diameter * lipschitz
    return max(bl * math.sqrt(n_params * math.log(1 / delta)) / alpha, (bl / alpha) ** 2)


def with_replacement_rdp(n, n_draws, ratio, cap):
    """RDP curve of a phase: Gaussian output whose sensitivity is ``k * Delta`` (capped).

    ``k ~ Binomial(n_draws, 1/n)`` is how often the replaced example is drawn;
    ``ratio = Delta / sigma``, ``cap = diameter / sigma``. Both outputs are
    mixtures over the same draw sequences of Gaussians whose means differ by
    ``<= min(k Delta, diameter)``, and ``exp((a-1) D_a)`` is jointly convex, so
    ``(a-1) eps(a) <= log sum_k p_k exp(a (a-1) min(k ratio, cap)^2 / 2)``.
    The sum is exact up to the count where the cap binds (or ``_K_MAX``); the
    rest is bounded with the cap and the union bound
    ``P(k > k0) <= C(n_draws, k0+1) n^-(k0+1)``.
    """
    a = RDP_ORDERS[:, None]
    k_cap = math.ceil(cap / ratio) if ratio > 0 else n_draws
    k0 = int(min(n_draws, k_cap, _K_MAX))
    k = np.arange(k0 + 1, dtype=float)[None, :]
    log_pk = (gammaln(n_draws + 1) - gammaln(k + 1) - gammaln(n_draws - k + 1)
              - k * math.log(n) + (n_draws - k) * math.log1p(-1.0 / n))
    shift = np.minimum(k * ratio, cap)
    terms = log_pk + a * (a - 1) * shift**2 / 2
    if n_draws > k0:
        log_tail = (gammaln(n_draws + 1) - gammaln(k0 + 2) - gammaln(n_draws - k0)
                    - (k0 + 1) * math.log(n))
        tail = min(log_tail, 0.0) + RDP_ORDERS * (RDP_ORDERS - 1) * cap**2 / 2
        terms = np.concatenate([terms, tail[:, None]], axis=1)
    cgf = np.maximum(logsumexp(terms, axis=1), 0.0)
    return cgf / (RDP_ORDERS - 1)


@dataclass(frozen=True, kw_only=True, eq=False)
class PhasedPlan(Plan):
    bounds: GradientBounds
    radius: float
    sampling: str
    steps: tuple
    etas: tuple
    noise_ratio: float
    floating_point_safe: bool
    verbose: int
    class_balance: object = None

    def phase_events(self, phases):
        return _phase_events(self.sampling, self.n_samples, self.steps, self.etas,
                             self.radius, self.bounds.grad_l2, self.noise_ratio, phases,
                             self.floating_point_safe)


def _phase_events(sampling, n, steps, etas, radius, grad_l2, s, phases, safe):
    if sampling == "disjoint":
        # One example sits in one phase: the run is one Gaussian mechanism (on the
        # safe path a discrete Gaussian on a lattice: its zCDP, and the Gaussian's
        # privacy loss distribution at a ratio larger by (1 + 2^-16)(1 + 2^-20)).
        if safe:
            mu = (1.0 + discrete.SENSITIVITY_SLACK) * (1.0 + DISCRETE_GAUSSIAN_SLACK) / s
            return [PrivacyEvent.from_pld(GaussianPLD("none", 1.0, 2.0 / mu, lattice=True),
                                          name="phased SGD (disjoint phases)",
                                          rho=discrete.discrete_gaussian_event(1.0, s).rho)]
        return [PrivacyEvent.gaussian(1.0 / s, name="phased SGD (disjoint phases)")]
    # ratio Delta_r / sigma_r = 1/s in every phase; cap = B / sigma_r. On the safe
    # path the lattice (planned for Delta_r <= B) adds at most a relative 2^-16 to
    # both shifts, which are integer vectors: the same bound with both scaled.
    slack = 1.0 + discrete.SENSITIVITY_SLACK if safe else 1.0
    return [PrivacyEvent.from_rdp(
        with_replacement_rdp(n, steps[r], slack / s,
                             slack * 2.0 * radius / (s * 2 * etas[r] * grad_l2)),
        name=f"phased SGD phase {r + 1}") for r in range(phases)]


class PhasedSGD(GradientSolver):
    """Phased SGD (see the module docstring). Options: ``radius`` (10, of the l2 ball
    of ``theta = (w, b)``), ``max_iter`` (the gradient budget ``T``), ``n_phases``,
    ``target_accuracy`` (``alpha``, default ``6 alpha*``), ``learning_rate`` (capped
    at ``8 / beta``), ``sampling``."""

    name = "phased_sgd"
    reads = frozenset({"max_iter", "learning_rate", "verbose"})

    def plan_with(self, problem, shape, epsilon, delta, options, bounds):
        options = {"radius": 10.0, "n_phases": None, "target_accuracy": None,
                   "sampling": "disjoint", "class_balance": False, "floating_point_safe": True,
                   **options}
        validate_params(_OPTIONS, options, f"solver {self.name!r}")
        n, _, n_targets = shape
        eps_k, delta_k = epsilon / n_targets, delta / n_targets
        private = math.isfinite(epsilon)
        radius, sampling = float(options["radius"]), options["sampling"]
        n_steps, n_phases = options["max_iter"], options["n_phases"]
        p = bounds.n_params
        diam = 2.0 * radius
        lip = bounds.grad_l2 + bounds.l2 * radius
        bl = diam * lip
        log_n_delta = math.log(n / delta_k) if delta_k > 0 else math.log(n)
        if options["target_accuracy"] is None:
            eps_ref = eps_k if private else 1.0
            log_inv = math.log(1 / delta_k) if delta_k > 0 else 1.0
            alpha = 6.0 * bl * math.sqrt(p * log_inv) / (n * eps_ref)
        else:
            alpha = float(options["target_accuracy"])
        if n_steps is None:
            n_steps = math.ceil(max(bl * math.sqrt(p * log_n_delta) / alpha, (bl / alpha) ** 2))
            n_steps = int(min(n_steps, 10**8))
        if n_phases is None:
            n_phases = max(1, math.ceil(0.5 * math.log2(max(bl / alpha, 2.0))))
        if options["learning_rate"] is None:
            eta = (diam / lip) * min(1.0 / math.sqrt(p * log_n_delta), alpha / bl)
        else:
            eta = float(options["learning_rate"])
        # Non-expansiveness of every step needs eta_1 = eta / 4 <= 2 / beta.
        eta = min(eta, 8.0 / bounds.smoothness)
        if sampling == "disjoint":
            n_steps = min(n_steps, n)
        steps = [max(1, int(round(n_steps / 2**r))) for r in range(1, n_phases + 1)]
        if sampling == "disjoint":
            # The phases take consecutive blocks of one random permutation; a block may
            # not run past the data.
            steps = [max(0, min(t, n - sum(steps[:r]))) for r, t in enumerate(steps)]
        etas = [eta / 4**r for r in range(1, n_phases + 1)]

        safe = bool(options["floating_point_safe"])

        def events_for(s):
            return _phase_events(sampling, n, steps, etas, radius, bounds.grad_l2, s, n_phases,
                                 safe)

        # "class_balance" starts a logistic intercept at the noisy log-odds of the
        # classes. Off by default: on a9a (10 seeds, epsilon 0.1, 1, 10) it changed
        # neither accuracy nor AUC beyond their spread, as each phase's noise moves the
        # intercept as much as the start does, so its 5% of the budget buys nothing.
        balance, balance_events = plan_class_balance(
            problem, bounds, epsilon, delta, safe, n_targets, self.name) \
            if options["class_balance"] else (None, [])
        if private:
            # The K one-vs-rest problems compose in one accountant.
            s = calibrate_scale(lambda s: balance_events + events_for(s) * n_targets,
                                epsilon, delta)
            events = balance_events + events_for(s) * n_targets
        else:
            s, events = 0.0, list(non_private_events()) * n_targets
        return PhasedPlan(
            solver=self.name, n_samples=n, n_features=shape[1], n_targets=n_targets,
            epsilon=epsilon, delta=delta, events=tuple(events), class_balance=balance,
            n_iter=int(sum(steps)), options=options, bounds=bounds, radius=radius,
            sampling=sampling, steps=tuple(steps), etas=tuple(etas), noise_ratio=s,
            floating_point_safe=safe, verbose=int(options.get("verbose", 0)),
        )

    def solve(self, problem, data, plan, rng):
        plan = self.replanned(problem, data, plan, plan.options)
        X = self.rows(data, plan)
        starts = class_balance_start(plan.class_balance, data, rng)
        coefs, intercepts = [], []
        for k in range(plan.n_targets):
            coef, intercept = split(plan.bounds, self._run(problem, X, data.target(k), plan,
                                                           rng, k, starts[k]))
            coefs.append(coef)
            intercepts.append(intercept)
        return SolverResult(np.array(coefs), np.array(intercepts), plan.n_iter, plan.events,
                            {"n_gradient_evaluations": plan.n_iter * plan.n_targets})

    def _run(self, problem, X, y, plan, rng, k=0, intercept_start=0.0):
        bounds = plan.bounds
        if hasattr(X, "indptr"):
            data, indices, indptr, dense = X.data, X.indices, X.indptr, np.empty((0, 0))
        else:
            data, indices, indptr = np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64)
            dense = X
        theta = np.zeros(bounds.n_params)
        if bounds.intercept:
            theta[bounds.n_features] = intercept_start
        total = 0
        disjoint = plan.sampling == "disjoint"
        perm = rng.permutation(plan.n_samples).astype(np.int64) if disjoint else None
        for r, (n_r, eta_r) in enumerate(zip(plan.steps, plan.etas, strict=True)):
            if disjoint:
                order = perm[total: total + n_r]
            else:
                order = rng.integers(0, plan.n_samples, size=n_r).astype(np.int64)
            avg = K.single_pass_sgd(data, indices, indptr, dense, not dense.size, order,
                                    theta.copy(), bounds.n_features, y, problem.loss.code,
                                    problem.loss.param, bounds.derivative_clip,
                                    bool(bounds.intercept), eta_r, bounds.l2, bounds.l1,
                                    plan.radius)
            sigma_r = plan.noise_ratio * 2.0 * eta_r * bounds.grad_l2
            if sigma_r > 0:
                release = GaussianMechanism(2.0 * eta_r * bounds.grad_l2, sigma=sigma_r,
                                            floating_point_safe=plan.floating_point_safe)
                theta = release.randomise(avg, rng)
            else:
                theta = avg
            total += n_r
            if plan.verbose:
                report(self.name, r + 1, len(plan.steps),
                       list(plan.events[:1] if plan.class_balance is not None else ())
                       + plan.phase_events(len(plan.steps)) * k + plan.phase_events(r + 1)
                       if plan.private else [], plan.delta,
                       extra=f" (phase; {n_r} steps, eta={eta_r:.3g})")
        return theta
