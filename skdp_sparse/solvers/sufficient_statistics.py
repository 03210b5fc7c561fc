"""Low-dimensional least squares from noisy sufficient statistics: AdaSSP.

Wang (2018), "Revisiting differentially private linear regression: optimal and
adaptive prediction & estimation in unbounded domain" (Algorithm 2, AdaSSP). For
the squared loss with ``p`` up to a few hundred features the whole fit is three
Gaussian releases and a linear solve:

1. the smallest eigenvalue ``lambda_min`` of the Gram matrix ``G = sum_i xt_i xt_i^T``;
2. ``G`` itself (its upper triangle, mirrored);
3. the moment ``m = sum_i xt_i y_i``;

then ``theta = (G~ + (lambda + n l2) I)^-1 m~`` with the adaptive ridge::

    lambda_min~ = max(lambda_min + noise - sigma_e z_rho, 0)
    lambda      = max(sigma_G sqrt(d ln(2 d^2 / rho)) - lambda_min~, 0)

(``z_rho`` the standard normal's upper ``rho`` quantile, ``rho`` =
:data:`RIDGE_FAILURE_PROBABILITY`, ``d`` the dimension with the intercept): with
probability ``1 - 2 rho`` the ridge is just large enough to keep ``G~ + lambda I``
positive definite (Wang's Lemma on the spectral norm of the Gram noise), so a
well-conditioned problem gets no ridge and an ill-conditioned one gets what the
noise requires. ``l2`` is the estimator's own ``penalty="l2"`` strength (the
objective's ``(1/n) sum (y - x w)^2 / 2 + l2 ||w||^2 / 2``).

Rows ``xt_i``: entries clipped to ``feature_bound`` then rows to ``norm_bound`` in
l2, so ``||xt_i|| <= B = min(norm_bound, ||feature_bound||_2)``; with an intercept the
constant feature 1 is appended (``B^2 + 1``; its Gram entry ``n`` is public and
released as is). Targets clipped to ``[-T, T]``, ``T = target_bound``.

Privacy (replace-one, ``B`` including the intercept): ``lambda_min`` moves by at most
``B^2`` (Weyl), ``G`` by ``||x x^T - x' x'^T||_F <= sqrt(2) B^2``, ``m`` by
``2 B T sqrt(K)`` for ``K`` targets. The three releases split one Gaussian budget
``mu^2`` by :data:`SHARES` (on the floating-point-safe path, discrete Gaussian noise
with the lattice's slack), so that they compose to ``(epsilon, delta)``
(:func:`._screening.noise_units`; ``doc/proofs/sufficient_statistics.rst``).
Everything after the releases is post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.stats import norm

from ..optim.losses import SquaredLoss
from ..utils.validation import validate_params
from ._base import Plan, Solver, SolverResult
from ._gradient import report
from ._screening import noise_units, release

__all__ = ["SufficientStatistics", "SHARES", "RIDGE_FAILURE_PROBABILITY", "adaptive_ridge",
           "statistic_sensitivities"]

#: Shares of the budget (of ``mu^2``) of the three releases. The eigenvalue
#: only sets the ridge, to within its noise, and gets a tenth; the Gram matrix and
#: the moment share the rest equally (Wang 2018 splits epsilon in thirds).
SHARES = {"eigenvalue": 0.1, "gram": 0.45, "moment": 0.45}
#: Failure probability ``rho`` of the adaptive ridge's two high-probability bounds.
RIDGE_FAILURE_PROBABILITY = 0.05

_EVENT_NAMES = {"eigenvalue": "smallest eigenvalue of X^T X", "gram": "X^T X",
                "moment": "X^T y"}

_OPTIONS = {"floating_point_safe": ["boolean"]}


def statistic_sensitivities(row_bound, target_bound, n_targets=1):
    """l2 sensitivities (replace-one) of the three releases for rows of l2 norm at most
    ``row_bound`` (the intercept's constant included) and targets in
    ``[-target_bound, target_bound]``: ``{"eigenvalue", "gram", "moment"}``."""
    b2 = float(row_bound) ** 2
    return {"eigenvalue": b2, "gram": math.sqrt(2.0) * b2,
            "moment": 2.0 * float(row_bound) * float(target_bound) * math.sqrt(n_targets)}


def adaptive_ridge(noisy_eigenvalue, sigma_eigenvalue, sigma_gram, dimension,
                   failure_probability=RIDGE_FAILURE_PROBABILITY):
    """The ridge ``lambda`` of AdaSSP (module docstring) from the released eigenvalue and
    the noise standard deviations; 0 without noise."""
    if sigma_gram == 0 and sigma_eigenvalue == 0:
        return 0.0
    rho = float(failure_probability)
    lower = max(noisy_eigenvalue - sigma_eigenvalue * norm.isf(rho), 0.0)
    spectral = sigma_gram * math.sqrt(dimension * math.log(2.0 * dimension**2 / rho))
    return max(spectral - lower, 0.0)


@dataclass(frozen=True, kw_only=True, eq=False)
class SufficientStatisticsPlan(Plan):
    units: dict
    sensitivities: dict
    row_bound: float
    target_bound: float
    fit_intercept: bool
    floating_point_safe: bool


def _feature_row_bound(problem, n_features):
    """``B = min(norm_bound, ||feature_bound||_2)`` over the features (no intercept)."""
    bound = np.broadcast_to(np.asarray(problem.feature_bound, dtype=float), (n_features,))
    return min(float(problem.norm_bound), float(np.linalg.norm(bound)))


class SufficientStatistics(Solver):
    """AdaSSP: noisy ``X^T X`` and ``X^T y`` and an adaptive ridge (module docstring)."""

    name = "sufficient_statistics"
    reads = frozenset({"verbose"})
    #: Penalty strength of the estimators' ``alpha=None``: none, the adaptive ridge
    #: regularises as much as the noise requires.
    default_alpha = 0.0

    def check(self, problem, options, epsilon, delta):
        if not isinstance(problem.loss, SquaredLoss):
            raise ValueError("solver='sufficient_statistics' fits the squared loss only")
        if problem.l1 > 0:
            raise ValueError(
                "solver='sufficient_statistics' solves least squares with an l2 penalty at "
                "most: use penalty='l2' or 'none' (or alpha=None, which adds only the "
                "adaptive ridge)")
        if math.isfinite(epsilon) and delta == 0:
            raise ValueError(
                "solver='sufficient_statistics' adds Gaussian noise and needs delta > 0")

    def plan(self, problem, shape, epsilon, delta, options):
        options = {"floating_point_safe": True, **options}
        validate_params(_OPTIONS, {k: options[k] for k in _OPTIONS}, f"solver {self.name!r}")
        n, p, n_targets = shape
        safe = bool(options["floating_point_safe"])
        names = [f"{self.name}: {_EVENT_NAMES[k]}" for k in SHARES]
        units, events = noise_units(epsilon, delta, list(SHARES.values()), safe, names)
        fit_intercept = bool(problem.fit_intercept)
        b = _feature_row_bound(problem, p)
        row_bound = math.sqrt(b * b + 1.0) if fit_intercept else b
        target_bound = 1.0 if problem.target_bound is None else float(problem.target_bound)
        return SufficientStatisticsPlan(
            solver=self.name, n_samples=n, n_features=p, n_targets=n_targets,
            epsilon=epsilon, delta=delta, events=tuple(events), n_iter=1, options=options,
            units=dict(zip(SHARES, units, strict=True)),
            sensitivities=statistic_sensitivities(row_bound, target_bound, n_targets),
            row_bound=row_bound, target_bound=target_bound, fit_intercept=fit_intercept,
            floating_point_safe=safe)

    def input_clipping(self, problem, plan):
        return problem.feature_bound, float(problem.norm_bound), math.inf

    def solve(self, problem, data, plan, rng):
        n, p, K = plan.n_samples, plan.n_features, plan.n_targets
        gram, moment = _statistics(problem, data, plan)
        d = gram.shape[0]
        upper = np.triu_indices(d)
        if plan.fit_intercept:
            # The intercept's own entry is n, a public number: released as is.
            keep = ~((upper[0] == d - 1) & (upper[1] == d - 1))
            upper = (upper[0][keep], upper[1][keep])
        units, sens, safe = plan.units, plan.sensitivities, plan.floating_point_safe
        eigenvalue = float(np.linalg.eigvalsh(gram)[0])
        noisy_eigenvalue, sigma_e = release(np.array([eigenvalue]), sens["eigenvalue"],
                                            units["eigenvalue"], safe, rng)
        noisy_upper, sigma_g = release(gram[upper], sens["gram"], units["gram"], safe, rng)
        noisy_moment, _ = release(moment, sens["moment"], units["moment"], safe, rng)
        noisy_gram = gram.copy()
        noisy_gram[upper] = noisy_upper
        noisy_gram[upper[1], upper[0]] = noisy_upper
        ridge = adaptive_ridge(float(noisy_eigenvalue[0]), sigma_e, sigma_g, d)
        system = noisy_gram + ridge * np.eye(d)
        system[np.arange(p), np.arange(p)] += n * problem.l2
        theta = _solve_symmetric(system, noisy_moment)
        if plan.options.get("verbose"):
            # Public: the plan's releases and their spend, never the ridge or the data.
            report(self.name, 1, 1, list(plan.events) if plan.private else [], plan.delta,
                   f" (smallest eigenvalue, X^T X and X^T y in dimension {d})")
        coef = np.ascontiguousarray(theta[:p].T).reshape(K, p)
        intercept = theta[p] if plan.fit_intercept else np.zeros(K)
        return SolverResult(coef, np.asarray(intercept, dtype=float).reshape(K), 1,
                            plan.events, {"ridge": ridge})


def _statistics(problem, data, plan):
    """The exact ``(G, m)`` of the clipped rows (and the constant 1 with an intercept)."""
    X = data.entries_and_rows_clipped(problem.feature_bound, problem.norm_bound)
    Y = np.clip(np.asarray(data.Y, dtype=np.float64), -plan.target_bound, plan.target_bound)
    if sp.issparse(X):
        gram = np.asarray((X.T @ X).toarray(), dtype=np.float64)
        moment = np.asarray(X.T @ Y, dtype=np.float64)
        sums = np.asarray(X.sum(axis=0), dtype=np.float64).ravel()
    else:
        X = np.asarray(X, dtype=np.float64)
        gram, moment, sums = X.T @ X, X.T @ Y, X.sum(axis=0)
    if not plan.fit_intercept:
        return gram, moment
    p = gram.shape[0]
    full = np.empty((p + 1, p + 1))
    full[:p, :p] = gram
    full[p, :p] = full[:p, p] = sums
    full[p, p] = float(plan.n_samples)
    return full, np.vstack([moment, Y.sum(axis=0)[None, :]])


def _solve_symmetric(system, rhs):
    """``system^-1 rhs``; the least-squares solution when the system is singular (the
    noisy Gram matrix plus the ridge fails to be positive definite with probability
    at most ``2 rho``, or the data span fewer than ``d`` directions)."""
    try:
        with np.errstate(all="raise"):
            solution = np.linalg.solve(system, rhs)
        if np.all(np.isfinite(solution)):
            return solution
    except (np.linalg.LinAlgError, FloatingPointError):
        pass
    return np.linalg.lstsq(system, rhs, rcond=None)[0]
