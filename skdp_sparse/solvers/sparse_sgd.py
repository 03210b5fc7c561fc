"""Sparsity-preserving DP-SGD (DP-AdaFEST, Ghazi et al., "Sparsity-Preserving
Differentially Private Training of Large Embedding Models").

Each step (Poisson batch of rate ``q``): every example's binary map of non-zero
features, scaled to l2 norm ``<= C_c = contribution_bound``, is summed and Gaussian
noise ``z_c C_c`` is added to the count of every feature; the features whose noisy
count exceeds ``threshold`` are selected; the clipped per-example gradients are
summed with Gaussian noise ``z_g C2`` on the selected coordinates and the intercept
only; a proximal step updates the selected coordinates. Cost per step: O(batch
non-zeros + selected), never O(d): absent features are selected exactly in
distribution without being touched, and penalties act lazily in closed form.

Privacy (replace-one): per step, the counts and the gradient sums are one Gaussian
mechanism on the concatenated vector with noise multiplier
``z = (z_c^-2 + z_g^-2)^(-1/2)``, Poisson-subsampled, accounted in RDP and calibrated
so the ``T`` steps compose to ``(epsilon, delta)``; ``selection_share`` is the
share of ``1/z^2`` spent on the counts. Details: ``doc/proofs/sparse_sgd.rst``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from ..optim import _sgd_kernels as K
from ..privacy.subsampling import subsampled_gaussian_event, subsampled_noise_multiplier
from ..utils.validation import Interval, validate_params
from ._base import Plan, SolverResult, non_private_events
from ._gradient import GradientBounds, GradientSolver, checkpoints, report

__all__ = ["SparseSGD"]

_OPTIONS = {
    "max_iter": [Interval(numbers.Integral, 1, None), None],
    "batch_size": [Interval(numbers.Integral, 1, None), None],
    "learning_rate": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "selection_share": [Interval(numbers.Real, 0, 1, closed="neither")],
    "threshold": [Interval(numbers.Real, None, None), None],
    "contribution_bound": [Interval(numbers.Real, 0, None, closed="neither")],
    "average": ["boolean"],
}


@dataclass(frozen=True, kw_only=True, eq=False)
class SparseSGDPlan(Plan):
    bounds: GradientBounds
    sampling_rate: float
    noise_multiplier: float
    count_sigma: float
    grad_sigma: float
    threshold: float
    p_zero: float
    contribution_bound: float
    learning_rate: float
    average: bool
    verbose: int

    def step_events(self, count):
        """The privacy events of ``count`` steps of one problem."""
        return _step_events(self.noise_multiplier, self.sampling_rate, count)


def _step_events(z, q, count):
    return [subsampled_gaussian_event(z, q, count, sampling="poisson",
                                      name="noisy feature counts + noisy sparse gradient "
                                           "(joint)")]


class SparseSGD(GradientSolver):
    """DP-AdaFEST (see the module docstring).

    Options: ``batch_size`` (default ``max(sqrt(d ln(1/delta)), n / 100)``: the batch
    of DP-SGD's oracle-complexity analysis, large enough for frequent features to
    clear the threshold), ``max_iter`` (default two passes, at least 10 steps),
    ``selection_share`` (0.5), ``threshold`` (default ``z_c C_c Phi^-1(1 - 1/d)``:
    one absent feature passes per step on average, whatever d),
    ``contribution_bound`` (1), ``learning_rate`` (``1 / beta``), ``average``.
    """

    name = "sparse_sgd"
    use_sparsity = False

    def plan_with(self, problem, shape, epsilon, delta, options, bounds):
        options = {"selection_share": 0.5, "threshold": None, "contribution_bound": 1.0,
                   "average": True, **options}
        validate_params(_OPTIONS, options, f"solver {self.name!r}")
        n, d, n_targets = shape
        eps_k, delta_k = epsilon / n_targets, delta / n_targets
        private = math.isfinite(epsilon)
        share = float(options["selection_share"])
        c_count = float(options["contribution_bound"])
        batch = options["batch_size"]
        if batch is None:
            log_inv = math.log(1 / delta_k) if delta_k > 0 else 1.0
            batch = max(int(round(math.sqrt(d * log_inv))), math.ceil(n / 100))
        batch = int(min(max(batch, 1), n))
        q = batch / n
        n_steps = options["max_iter"]
        if n_steps is None:
            n_steps = max(10, math.ceil(2 * n / batch))
        eta = options["learning_rate"] or 1.0 / bounds.smoothness
        if eta * bounds.l2 >= 1:
            raise ValueError("learning_rate * l2 must be < 1")
        if private:
            z = subsampled_noise_multiplier(q, n_steps, "poisson", eps_k, delta_k)
            count_sigma = z / math.sqrt(share) * c_count
            grad_sigma = z / math.sqrt(1 - share) * bounds.grad_l2
        else:
            z = count_sigma = grad_sigma = 0.0
        threshold = options["threshold"]
        if threshold is None:
            threshold = count_sigma * float(norm.isf(1.0 / d)) if count_sigma > 0 else 0.0
        threshold = float(threshold)
        if count_sigma > 0:
            p_zero = float(norm.sf(threshold / count_sigma))
        else:
            p_zero = 1.0 if threshold < 0 else 0.0
        events = _step_events(z, q, n_steps) if private else list(non_private_events())
        return SparseSGDPlan(
            solver=self.name, n_samples=n, n_features=d, n_targets=n_targets,
            epsilon=epsilon, delta=delta, events=tuple(events) * n_targets, n_iter=n_steps,
            options=options,
            bounds=bounds, sampling_rate=q, noise_multiplier=z, count_sigma=count_sigma,
            grad_sigma=grad_sigma, threshold=threshold, p_zero=p_zero,
            contribution_bound=c_count, learning_rate=eta, average=bool(options["average"]),
            verbose=int(options.get("verbose", 0)),
        )

    def solve(self, problem, data, plan, rng):
        # ``trace=(rows, cols)`` (an option for tests and benchmarks) records the
        # selected coordinates and the operations of the first steps.
        trace = plan.options.get("trace")
        plan = self.replanned(problem, data, plan, plan.options)
        rows = self.rows(data, plan)
        coefs, intercepts, n_grad, traces = [], [], 0, []
        for k in range(plan.n_targets):
            coef, b, used, tr = self._run(problem, rows, data.target(k), plan, rng, trace)
            coefs.append(coef)
            intercepts.append(b)
            n_grad += used
            traces.append(tr)
        info = {"n_gradient_evaluations": n_grad}
        if trace is not None:
            info["trace"] = traces
        return SolverResult(np.array(coefs), np.array(intercepts), plan.n_iter, plan.events,
                            info)

    def _run(self, problem, X, y, plan, rng, trace):
        bounds, n_steps, d = plan.bounds, plan.n_iter, plan.n_features
        w, wsum = np.zeros(d), np.zeros(d)
        last = np.zeros(d, dtype=np.int64)
        counts, grads = np.zeros(d), np.zeros(d)
        marks = np.zeros(d, dtype=np.uint8)
        intercept = np.zeros(2)
        trace_rows, trace_cols = trace if trace is not None else (0, 1)
        selected_trace = np.zeros((trace_rows, trace_cols), dtype=np.int64)
        ops = np.zeros(n_steps, dtype=np.int64)
        t0 = n_grad = 0
        for t1 in sorted(checkpoints(n_steps, plan.verbose) | {n_steps}):
            n_grad += K.sparse_sgd_steps(
                X.data, X.indices, X.indptr, y, problem.loss.code, problem.loss.param,
                bounds.derivative_clip, bool(bounds.intercept), plan.sampling_rate, t0, t1,
                plan.learning_rate, bounds.l2, bounds.l1, plan.count_sigma, plan.grad_sigma,
                plan.threshold, plan.p_zero, plan.contribution_bound, w, wsum, last, counts,
                grads, marks, intercept, rng, selected_trace, ops)
            t0 = t1
            if plan.verbose:
                report(self.name, t1, n_steps, plan.step_events(t1) if plan.private else [],
                       plan.delta / plan.n_targets)
        K.lazy_finish(n_steps, w, wsum, last, plan.learning_rate, bounds.l2, bounds.l1)
        if plan.average:
            coef, b = wsum / n_steps, intercept[1] / n_steps
        else:
            coef, b = w.copy(), intercept[0]
        b = float(b) if bounds.intercept else 0.0
        tr = None
        if trace is not None:
            tr = {"selected": selected_trace, "ops": ops, "threshold": plan.threshold,
                  "p_zero": plan.p_zero}
        return coef, b, n_grad, tr

