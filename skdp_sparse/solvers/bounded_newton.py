"""Newton steps with the loss's public curvature bound: one noisy Gram matrix, then a
few noisy gradients.

For the logistic loss (and any loss with a bounded derivative and curvature) on
``p`` up to a few hundred features with many rows: one-hot tabular data such as a9a.
The Hessian of ``F(theta) = sum_i l(y_i, xt_i . theta) + (n l2 / 2) ||w||^2`` is at
most ``beta G + n l2 I_w`` (``beta`` the loss's smoothness, ``1/4`` for the logistic
loss; ``G = sum_i xt_i xt_i^T``, ``xt_i = (x_i, 1)`` with an intercept), so
``theta <- theta - H^-1 grad F(theta)`` with any fixed ``H`` above that bound never
increases ``F``: Boehning and Lindsay's (1988) quadratic-bound Newton method, a
majorise-minimise iteration that converges linearly to the optimum. ``G`` does not
depend on ``theta``, so it is released once; each step then releases one gradient:

1. ``G~ = G + E``, ``E`` symmetric with independent Gaussian entries of standard
   deviation ``sigma_G`` (the intercept's own entry ``n`` is public and released as is);
2. ``H = beta (G~ + lambda I) + n l2 I_w`` with ``lambda = 2 sigma_G sqrt(d) + m``: the
   noise's spectral norm is at most ``2 sigma_G sqrt(d)`` on average (the edge of
   Wigner's semicircle) and exceeds it by ``m = 2 sigma_G sqrt(ln(1 / rho))`` with
   probability at most ``rho = 0.05`` (:func:`ridge_margin`), so ``G~ + lambda I`` is
   above ``G`` and the step a majorise-minimise step with probability ``1 - rho``;
   directions the data leave flat get the ridge (the noise cannot resolve them), and
   where ``H`` has an eigenvalue below ``beta m`` its eigenvalues are raised to it;
3. ``T`` steps ``theta <- theta - H^-1 g~``, ``g~`` the sum of the per-example gradients
   (derivatives clipped to the loss's bound, rows to ``norm_bound``) plus the penalty's
   gradient, plus Gaussian noise.

``T`` (:data:`DEFAULT_STEPS`) and the Gram matrix's share (:data:`GRAM_SHARE`) are
fixed: the method's linear rate makes a few steps enough, and every further step
costs the others noise. Measured with a prototype of these steps (4 seeds) on a9a and
w8a at epsilon 1 and 10, where the method is the better one: 4 to 12 steps within 0.004
of one another in test AUC, and Gram shares of 0.15 to 0.4 within 0.003 on a9a.

Privacy (replace-one; rows of l2 norm at most ``B``, ``B^2 = norm_bound^2 + 1`` with an
intercept; derivatives in ``[-D, D]``; K one-vs-rest problems): ``G`` moves by
``||xt xt^T - xt' xt'^T||_F <= sqrt(2) B^2`` and the K gradient sums together by
``2 D B sqrt(K)``. The ``1 + T`` Gaussian releases split one budget ``mu^2`` (the Gram
matrix :data:`GRAM_SHARE`, each step an equal part of the rest), so that they compose
to ``(epsilon, delta)`` (:func:`._screening.noise_units`, on the floating-point-safe
path with the lattice's slack). Everything else is post-processing. The rows are read
only through ``data.row_sum``, so the solver fits dask arrays too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..optim._normal_equations import cholesky_lower, cholesky_solve_rows, csr_gram
from ..utils.validation import validate_params
from ._base import Plan, SolverResult
from ._gradient import GradientSolver, block_gradient_sum, checkpoints, report, split
from ._screening import noise_units, release
from .sufficient_statistics import RIDGE_FAILURE_PROBABILITY, statistic_sensitivities

__all__ = ["BoundedNewton", "DEFAULT_STEPS", "NON_PRIVATE_STEPS", "GRAM_SHARE",
           "MAX_FEATURES", "MAX_STEPS", "gram_ridge", "ridge_margin", "gram_noise_unit"]

#: Newton steps of a private run (``max_iter`` overrides).
DEFAULT_STEPS = 6
#: ... and of a run without noise, where steps cost no privacy and the iteration
#: converges linearly to the optimum.
NON_PRIVATE_STEPS = 100
#: Share of the budget (of ``mu^2``) of the Gram matrix; the steps share the rest. The
#: Gram matrix's noise only sets the ridge, which slows the steps, while a step's noise
#: moves the coefficients directly.
GRAM_SHARE = 0.25
#: Largest number of features: the run holds and factorises the ``(p + 1)^2`` matrix.
MAX_FEATURES = 2000
#: Largest ``max_iter``: the plan records one privacy event a step (their composition
#: took 5 s at 10^5 steps, and 2^31 steps exhausted the memory before any error), and
#: the linear rate needs far fewer (100 steps without noise).
MAX_STEPS = 10_000

_OPTIONS = {"floating_point_safe": ["boolean"]}


def gram_noise_unit(epsilon, delta, n_steps, floating_point_safe=False):
    """Noise standard deviation per unit of sensitivity of the Gram matrix's release,
    in a run of ``n_steps`` steps at ``(epsilon, delta)`` (0 without noise)."""
    units, _ = noise_units(epsilon, delta, _shares(n_steps), floating_point_safe,
                           _names(n_steps))
    return units[0]


def gram_ridge(sigma_gram, dimension):
    """``lambda = 2 sigma_G sqrt(d) + m``, ``m = ridge_margin(sigma_G)``: the ridge that
    keeps the noisy Gram matrix above the exact one (module docstring)."""
    return 2.0 * float(sigma_gram) * math.sqrt(dimension) + ridge_margin(sigma_gram)


def ridge_margin(sigma_gram):
    """``m = 2 sigma_G sqrt(ln(1 / rho))``, ``rho`` =
    :data:`~.sufficient_statistics.RIDGE_FAILURE_PROBABILITY`: the spectral norm of the
    noise is ``sqrt(2) sigma_G``-Lipschitz in its independent entries, so it exceeds
    its mean (at most ``2 sigma_G sqrt(d)``) by ``m`` with probability at most
    ``rho``; and the least curvature a direction gets where the noisy matrix is not
    positive definite, so that no step divides noise by a vanishing eigenvalue."""
    return 2.0 * float(sigma_gram) * math.sqrt(math.log(1.0 / RIDGE_FAILURE_PROBABILITY))


def _shares(n_steps):
    return [GRAM_SHARE] + [(1.0 - GRAM_SHARE) / n_steps] * n_steps


def _names(n_steps):
    return ["bounded_newton: X^T X"] + [f"bounded_newton: gradient {t}"
                                         for t in range(1, n_steps + 1)]


@dataclass(frozen=True, kw_only=True, eq=False)
class BoundedNewtonPlan(Plan):
    bounds: object
    gram_unit: float
    step_unit: float
    gram_sensitivity: float
    gradient_sensitivity: float
    floating_point_safe: bool
    verbose: int


def block_gram(rows, Y, start, intercept):
    """``sum_i xt_i xt_i^T`` over one block of rows (``xt_i = (x_i, 1)`` with an
    intercept), a dense ``d x d`` matrix; the blocks' terms add up to the fit's."""
    p = rows.shape[1]
    d = p + int(intercept)
    out = np.zeros((d, d))
    if hasattr(rows, "indptr"):
        csr_gram(rows, out)
    else:
        out[:p, :p] = rows.T @ rows
    if intercept:
        sums = np.asarray(rows.sum(axis=0), dtype=np.float64).ravel()
        out[p, :p] = out[:p, p] = sums
        out[p, p] = rows.shape[0]
    return out


class BoundedNewton(GradientSolver):
    """Quadratic-bound Newton steps on a noisy Gram matrix (module docstring)."""

    name = "bounded_newton"
    reads = frozenset({"max_iter", "verbose"})
    use_sparsity = False
    #: ``decision="auto"`` fits the decision privately (:mod:`.decision`): where the
    #: noise swamps the steps (w8a at epsilon 0.1: accuracy 0.917 against the majority's
    #: 0.970) it falls back on the majority; elsewhere it changes test AUC by 0.001 at
    #: most on a9a and w8a (benchmarks/bench_text.py).
    calibrated_decision = True
    #: Reads the data only through ``data.row_sum``: fits dask arrays too.
    distributed = True
    #: Regularised by the ridge its noise requires.
    default_alpha = 0.0

    def check(self, problem, options, epsilon, delta):
        super().check(problem, options, epsilon, delta)
        if problem.l1 > 0:
            raise ValueError(
                "solver='bounded_newton' fits an l2 penalty at most: use penalty='l2' or "
                "'none' (or alpha=None, which adds only the ridge its noise requires)")

    def plan_with(self, problem, shape, epsilon, delta, options, bounds):
        options = {"floating_point_safe": True, **options}
        validate_params(_OPTIONS, {k: options[k] for k in _OPTIONS}, f"solver {self.name!r}")
        n, p, n_targets = shape
        if p > MAX_FEATURES:
            raise ValueError(
                f"solver='bounded_newton' releases and factorises the (p + 1)^2 Gram "
                f"matrix and takes at most {MAX_FEATURES} features; X has {p}")
        n_steps = options.get("max_iter") or (
            DEFAULT_STEPS if math.isfinite(epsilon) else NON_PRIVATE_STEPS)
        if n_steps > MAX_STEPS:
            raise ValueError(
                f"solver='bounded_newton' takes max_iter <= {MAX_STEPS} (it records one "
                f"privacy event a step, and converges linearly); got max_iter={n_steps}")
        safe = bool(options["floating_point_safe"])
        units, events = noise_units(epsilon, delta, _shares(n_steps), safe, _names(n_steps))
        # Rows of l2 norm at most norm_bound, with the intercept's constant 1.
        row_bound = math.sqrt(bounds.norm_bound**2 + bounds.intercept)
        sens = statistic_sensitivities(row_bound, bounds.derivative_clip, n_targets)
        if not math.isfinite(epsilon):
            events = events * n_targets
        return BoundedNewtonPlan(
            solver=self.name, n_samples=n, n_features=p, n_targets=n_targets,
            epsilon=epsilon, delta=delta, events=tuple(events), n_iter=n_steps,
            options=options, bounds=bounds, gram_unit=units[0], step_unit=units[1],
            gram_sensitivity=sens["gram"], gradient_sensitivity=sens["moment"],
            floating_point_safe=safe, verbose=int(options.get("verbose", 0)))

    def solve(self, problem, data, plan, rng):
        bounds, n, K = plan.bounds, plan.n_samples, plan.n_targets
        d = bounds.n_params
        safe = plan.floating_point_safe
        gram = data.row_sum(block_gram, bool(bounds.intercept), norm_bound=bounds.norm_bound)
        upper = np.triu_indices(d)
        if bounds.intercept:
            keep = ~((upper[0] == d - 1) & (upper[1] == d - 1))
            upper = (upper[0][keep], upper[1][keep])
        noisy, sigma_gram = release(gram[upper], plan.gram_sensitivity, plan.gram_unit,
                                    safe, rng)
        gram[upper] = noisy
        gram[upper[1], upper[0]] = noisy
        hessian = problem.loss.smoothness * (gram + gram_ridge(sigma_gram, d) * np.eye(d))
        penalty = np.zeros(d)
        penalty[:bounds.n_features] = n * bounds.l2
        hessian[np.diag_indices(d)] += penalty
        solve = _symmetric_solver(hessian, problem.loss.smoothness * ridge_margin(sigma_gram))
        theta = np.zeros((K, d))
        marks = checkpoints(plan.n_iter, plan.verbose)
        for t in range(1, plan.n_iter + 1):
            grads = np.empty((K, d))
            for k in range(K):
                summed = data.row_sum(block_gradient_sum, k, bounds, problem.loss, theta[k],
                                      None, norm_bound=bounds.norm_bound)
                grads[k] = summed[:-1]
            grads, _ = release(grads, plan.gradient_sensitivity, plan.step_unit, safe, rng)
            theta = theta - solve(grads + penalty * theta)
            if t in marks:
                report(self.name, t, plan.n_iter,
                       list(plan.events[:1 + t]) if plan.private else [], plan.delta)
        coef, intercept = split(bounds, theta)
        return SolverResult(coef, intercept, plan.n_iter, plan.events,
                            {"data_passes": 1 + plan.n_iter * K})


def _symmetric_solver(matrix, least_curvature):
    """A function returning ``rhs A^-1`` for the symmetric ``A = matrix``: by its
    Cholesky factor where every eigenvalue is at least ``least_curvature`` (the noisy
    matrix above the exact one, or a penalised objective: ``A - least_curvature I``
    has a Cholesky factor too); otherwise through its eigenvalues, each raised to
    ``least_curvature`` at least (a run with noise: see :func:`ridge_margin`; positive
    definite is not enough, an eigenvalue just above 0 would divide a step's noise by
    it), or, without noise (``least_curvature = 0``), the directions of the objective
    that are flat left out, as a pseudo-inverse leaves them."""
    d = matrix.shape[0]
    flat = d * np.finfo(float).eps * max(float(np.max(np.diag(matrix), initial=0.0)), 0.0)
    floor_holds = least_curvature <= 0 or cholesky_lower(
        matrix - least_curvature * np.eye(d)) is not None
    factor = cholesky_lower(matrix) if floor_holds else None
    # Without noise a singular matrix can pass the factorisation by rounding, with a
    # pivot of the rounding's size that would send the step far along a flat direction
    # (18 of 200 random collinear cases): such pivots go to the eigenvalues' path.
    if factor is not None and (least_curvature > 0 or np.min(np.diag(factor)) ** 2 > flat):
        return lambda rhs: cholesky_solve_rows(factor, rhs)
    values, vectors = np.linalg.eigh(matrix)
    if least_curvature > 0:
        inverse = (vectors / np.maximum(values, least_curvature)) @ vectors.T
    else:
        keep = values > max(float(values[-1]), 0.0) * d * np.finfo(float).eps
        inverse = (vectors[:, keep] / values[keep]) @ vectors[:, keep].T
    return lambda rhs: rhs @ inverse
