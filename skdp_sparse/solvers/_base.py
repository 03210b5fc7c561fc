"""What every private solver takes and returns.

A solver is two functions behind one signature:

* ``plan(problem, shape, epsilon, delta, options) -> Plan``, from public values
  only: the iterations, the noise scales and the privacy events the run will
  record, calibrated so that they compose to at most ``(epsilon, delta)``;
* ``solve(problem, data, plan, rng) -> SolverResult``: the run on a data view
  (:mod:`skdp_sparse.data`), the only code that reads private values.

Estimators build the :class:`Problem` from their hyperparameters, look the solver
up in the registry (:mod:`skdp_sparse.solvers`) and never calibrate noise
themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..optim.losses import Loss
from ..optim.penalties import NoPenalty, Penalty
from ..privacy.accounting import PrivacyEvent

__all__ = ["Problem", "Plan", "SolverResult", "Solver", "non_private_events"]


@dataclass(frozen=True, eq=False)
class Problem:
    """The objective of a fit and its public bounds.

    ``min over (w, b) of (1/n) sum_i loss(y_i, x_i w + b) + penalty(w)``.

    Attributes
    ----------
    loss, penalty
        Objects of :mod:`skdp_sparse.optim.losses` and :mod:`~skdp_sparse.optim.penalties`;
        the intercept ``b`` is never penalised.
    fit_intercept : bool
    feature_bound : float or ndarray of shape (n_features,)
        Public bound on ``|x_ij|`` (coordinate solvers clip entries to it).
    norm_bound : float
        Public bound on the l2 norm of a row (gradient solvers, output perturbation
        and the curvature estimate clip rows to it).
    sparsity : int or None
        Public bound on the non-zeros of a row (rows are also clipped to l1 norm
        ``norm_bound * sqrt(sparsity)`` where a solver uses it).
    target_bound : float or None
        Public scale of ``|y|``: the clip of per-example derivatives of a loss with an
        unbounded derivative (squared loss).
    gradient_clip : float, ndarray or None
        Per-coordinate clip ``C_j`` of per-example coordinate gradients (coordinate
        solvers); None derives it from the loss and the bounds.
    """

    loss: Loss
    penalty: Penalty = field(default_factory=NoPenalty)
    fit_intercept: bool = True
    feature_bound: float | np.ndarray = 1.0
    norm_bound: float = 1.0
    sparsity: int | None = None
    target_bound: float | None = None
    gradient_clip: float | np.ndarray | None = None

    @property
    def l1(self):
        """Strength of the l1 term of the penalty, ``l1 ||w||_1``."""
        return float(self.penalty.a)

    @property
    def l2(self):
        """Strength of the l2 term of the penalty, ``(l2 / 2) ||w||^2``."""
        return float(self.penalty.b)

    @property
    def derivative_clip(self):
        """Public bound the per-example derivative ``l'(y, z)`` is clipped to."""
        if math.isfinite(self.loss.derivative_bound):
            return float(self.loss.derivative_bound)
        return None if self.target_bound is None else float(self.target_bound)


@dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
    """A solver run fixed from public values, before any private value is read.

    Solvers extend it with their own settings (noise scales, step sizes, ...).

    Attributes
    ----------
    solver : str
    n_samples, n_features, n_targets : int
        ``n_targets`` one-vs-rest problems share the budget.
    epsilon, delta : float
        The budget the plan was calibrated to (reserved in the ledgers).
    events : tuple of PrivacyEvent
        What the run records; they compose to at most ``(epsilon, delta)``.
    n_iter : int
        Iterations (steps, updates or passes) of the run, a public number.
    options : dict
        The solver settings the plan was made from.
    """

    solver: str
    n_samples: int
    n_features: int
    n_targets: int
    epsilon: float
    delta: float
    events: tuple
    n_iter: int
    options: dict = field(default_factory=dict)

    @property
    def private(self):
        return math.isfinite(self.epsilon)


@dataclass(eq=False)
class SolverResult:
    """The output of a run: one row of coefficients per target problem.

    ``info`` holds what a solver reports beyond the coefficients; an estimator exposes
    none of it unless its docs say so. ``info["data_passes"]``, where a solver counts
    it, is the number of passes over X the run made (entries read, in units of one
    pass): a measure of work for the cost model of ``benchmarks/bench_speed.py``, not a
    private quantity.
    """

    coef: np.ndarray
    intercept: np.ndarray
    n_iter: int
    events: tuple
    info: dict = field(default_factory=dict)


class Solver:
    """A private solver: ``name``, ``check``, ``plan`` and ``solve``.

    ``options`` is a mapping of the estimator's solver settings (``max_iter``,
    ``batch_size``, ``learning_rate``, ``selection``, ``curvature``, ``tol``,
    ``verbose``, ...); a solver reads the ones it uses, and names those an estimator's
    parameter can set in ``reads`` (``"gradient_clip"`` for the problem's
    per-example coordinate clip; ``"verbose"`` if it prints progress), so that a
    parameter set for another solver can be pointed out.
    """

    name = ""
    reads = frozenset()

    def check(self, problem, options, epsilon, delta):
        """Raise ``ValueError`` if the solver cannot run the problem privately
        (a rule on public values only, such as ``delta > 0`` for Gaussian noise)."""

    def plan(self, problem, shape, epsilon, delta, options):
        raise NotImplementedError

    def solve(self, problem, data, plan, rng):
        raise NotImplementedError

    def input_clipping(self, problem, plan):
        """``(feature_bound, norm_bound, l1_bound)``: the public clipping the run applies
        to every row before it reads it (entries to ``[-b_j, b_j]`` unless
        ``feature_bound`` is None, then rows into the l2 and l1 balls; ``inf`` for
        none). Estimators apply the same to the rows they predict on. Default: none."""
        return None, math.inf, math.inf


def non_private_events():
    """The event a run without noise (``epsilon=inf``) records."""
    return (PrivacyEvent.approximate(math.inf, 0.0, name="non-private (epsilon=inf)"),)
