"""Private solvers behind one signature, and the registry estimators use.

Every solver has ``plan(problem, shape, epsilon, delta, options)`` (public values
only) and ``solve(problem, data, plan, rng)``; see :mod:`._base`. Adding a solver is
one module and one line in :data:`SOLVERS`.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..data import LocalData
from ..optim.losses import LogisticLoss, SquaredLoss
from ..utils.random import check_generator
from ..utils.validation import canonical_sparse
from ._base import Plan, Problem, Solver, SolverResult
from .bias_reduced_sgd import BiasReducedSGD
from .bounded_newton import DEFAULT_STEPS as BOUNDED_NEWTON_STEPS
from .bounded_newton import MAX_FEATURES as BOUNDED_NEWTON_MAX_FEATURES
from .bounded_newton import BoundedNewton, gram_noise_unit, gram_ridge
from .coordinate_descent import GreedyCoordinateDescent, RandomCoordinateDescent
from .output_perturbation import OutputPerturbation
from .phased_sgd import PhasedSGD
from .screened_newton import ScreenedNewton
from .sgd import NoisySGD
from .sparse_sgd import SparseSGD
from .sufficient_statistics import SufficientStatistics

__all__ = [
    "SOLVERS",
    "Plan",
    "Problem",
    "Solver",
    "SolverResult",
    "get_solver",
    "distributed_solvers",
    "resolve_solver",
    "run_solver",
    "GREEDY_MAX_COORDINATE_RATIO",
    "GREEDY_MIN_SAMPLES_PER_FEATURE",
    "coordinate_bound_ratio",
    "SPARSE_SGD_MIN_FEATURES",
    "SUFFICIENT_STATISTICS_MAX_FEATURES",
    "SUFFICIENT_STATISTICS_MIN_RATIO",
    "BOUNDED_NEWTON_MAX_RIDGE_RATIO",
    "bounded_newton_ridge_ratio",
]

#: The registry: solver name -> solver. A new solver is one module and one line here.
SOLVERS = {solver.name: solver for solver in (
    GreedyCoordinateDescent(),
    RandomCoordinateDescent(),
    NoisySGD(),
    BiasReducedSGD(),
    SparseSGD(),
    PhasedSGD(),
    OutputPerturbation(),
    ScreenedNewton(),
    SufficientStatistics(),
    BoundedNewton(),
)}

#: ``solver="auto"`` takes the greedy solver from this many examples per feature
#: per unit of epsilon on (a9a, n eps / p = 265, is above; w8a, 124, and reuters,
#: 0.9, are below: there noisy gradient descent wins, see benchmarks/bench_cd.py).
GREEDY_MIN_SAMPLES_PER_FEATURE = 200
#: ... and, for the logistic loss, only where a coordinate's bound is below this
#: fraction of the row's (:func:`coordinate_bound_ratio`). A greedy step's update on
#: coordinate j has noise in proportion to ``b_j`` on the part ``1 - s`` of the step's
#: budget left by the noisy selection (``s = 1/2``), so its sd is ``b_j / sqrt(1 - s)``
#: in the units where a full-gradient release's noise on each coordinate is ``L``: the
#: coordinate-wise solver gains over the full-gradient ones only where
#: ``max_j b_j < sqrt(1 - s) L``. One-hot rows (a9a: ``1 / sqrt(14)``) are well below;
#: unit rows of entries bounded by 1 (w8a with ``norm_bound=1``, text) are at 1, where
#: the screened Newton step measured ahead at every epsilon (w8a at epsilon 10: AUC
#: 0.955 against greedy CD's 0.896, ``benchmarks/bench_text.py``).
GREEDY_MAX_COORDINATE_RATIO = math.sqrt(0.5)
#: ``solver="auto"`` takes the sparsity-preserving SGD from this many features on
#: (losses other than the logistic), where a dense noisy gradient of length p per
#: step dominates the cost.
SPARSE_SGD_MIN_FEATURES = 100_000
#: ``solver="auto"`` takes the noisy sufficient statistics (AdaSSP) for least squares
#: without an l1 penalty from this many examples per squared dimension per unit of
#: epsilon, ``n epsilon / (p + 1)^2`` (the Gram release's noise grows with its p^2
#: entries). Measured (benchmarks/bench_sufficient_statistics.py, epsilon 1): at 826
#: to 1389 it matches greedy CD's test R^2 to 0.002 in 1/15 to 1/107 of the time; at
#: 36 (abalone) and 178 (California housing) greedy CD is ahead by 0.06 and 0.15.
SUFFICIENT_STATISTICS_MIN_RATIO = 800
#: ... and up to this many features (its cost is n p^2, its noise p^2 entries).
SUFFICIENT_STATISTICS_MAX_FEATURES = 100
#: ``solver="auto"`` takes the quadratic-bound Newton steps for the logistic loss where
#: the ridge their Gram matrix's noise requires is at most this multiple of the mean
#: eigenvalue the row bound allows (:func:`bounded_newton_ridge_ratio`): above it the
#: ridge damps the steps in most directions. Measured (benchmarks/bench_text.py, the
#: ratio in brackets): a9a at epsilon 1 (1.5) and 10 (0.18), w8a at 10 (0.57) are below
#: and the steps match or beat greedy CD and the screened Newton step; w8a at epsilon 1
#: (4.8) and a9a at 0.1 (14) are above, where the screened Newton step is ahead, and so
#: are the DP-GCD paper's problems (n = 1000, p = 100: 3.6 at epsilon 10).
BOUNDED_NEWTON_MAX_RIDGE_RATIO = 2.0


def get_solver(name):
    """The registered solver called ``name``."""
    try:
        return SOLVERS[name]
    except KeyError:
        raise ValueError(f"unknown solver {name!r}; choose one of {sorted(SOLVERS)}") from None


def distributed_solvers():
    """The names of the registered solvers that fit a dask array of row blocks (they read
    the rows only through ``data.row_sum`` and the views' other block-wise sums)."""
    return sorted(name for name, solver in SOLVERS.items()
                  if getattr(solver, "distributed", False))


def coordinate_bound_ratio(feature_bound, norm_bound, n_features):
    """``max_j b_j / L``: the largest public bound on one feature over the bound on a
    row's l2 norm, ``L = min(norm_bound, ||b||_2)`` (the entries' bounds bound the
    norm too). From public values only; 1 when there are no features."""
    if n_features < 1:
        return 1.0
    b = np.broadcast_to(np.asarray(feature_bound, dtype=float), (n_features,))
    row = min(float(norm_bound), float(np.linalg.norm(b)))
    return float(b.max()) / row if row > 0 else 1.0


def bounded_newton_ridge_ratio(n_samples, n_features, epsilon, delta, fit_intercept=True):
    """The ridge ``lambda`` of ``solver="bounded_newton"``
    (:func:`~.bounded_newton.gram_ridge`) over the mean eigenvalue ``n B^2 / d`` that
    rows of norm at most ``B`` allow the Gram matrix (its trace is at most ``n B^2``),
    ``d = p + 1`` with an intercept. The Gram release's noise is ``sigma_G = sqrt(2) B^2
    u``, so the ratio does not depend on ``B``. Public values only; 0 without noise."""
    d = n_features + int(bool(fit_intercept))
    sigma = math.sqrt(2.0) * gram_noise_unit(epsilon, delta, BOUNDED_NEWTON_STEPS)
    return gram_ridge(sigma, d) * d / max(n_samples, 1)


def resolve_solver(solver, n_samples, n_features, epsilon, *, delta=None, loss=None,
                   l1_penalty=False, feature_bound=1.0, norm_bound=math.inf, screening=False):
    """The solver ``solver="auto"`` runs, from public n, p, epsilon and bounds (and the
    kind of loss) only.

    The rule never looks at feature values, labels or non-zero counts, so the
    choice itself reveals nothing about the training data. With ``r = n epsilon / p``
    (examples per feature per unit of epsilon):

    * logistic loss: ``"bounded_newton"`` if ``epsilon`` is finite, ``delta > 0`` is
      given, there is no l1 penalty and ``bounded_newton_ridge_ratio(n, p, epsilon, delta) <=
      BOUNDED_NEWTON_MAX_RIDGE_RATIO`` (many rows for few features: a9a at epsilon >= 1,
      w8a at 10); otherwise ``"greedy_cd"`` if ``r >= GREEDY_MIN_SAMPLES_PER_FEATURE`` and
      ``coordinate_bound_ratio(feature_bound, norm_bound, p) <
      GREEDY_MAX_COORDINATE_RATIO`` (a9a at epsilon >= 1; without noise,
      ``epsilon=inf``, the bounds are not consulted), otherwise
      ``"screened_newton"``, which measured best in every other regime of
      ``benchmarks/bench_text.py`` (IMDB, SMS spam and Reuters at epsilon 1 and 10,
      a9a at 0.1, w8a at 1 and 10) and costs a few passes over the data;
    * the squared loss without an l1 penalty (``l1_penalty`` False: the estimator's
      ``alpha`` left to the solver, or an l2 penalty): ``"sufficient_statistics"``
      (AdaSSP) if ``epsilon`` is finite, ``n epsilon / (p + 1)^2 >=
      SUFFICIENT_STATISTICS_MIN_RATIO`` and ``p <= SUFFICIENT_STATISTICS_MAX_FEATURES``;
    * other losses: ``"sparse_sgd"`` if ``p >= SPARSE_SGD_MIN_FEATURES`` (per-step
      cost independent of p), ``"greedy_cd"`` if ``r >= GREEDY_MIN_SAMPLES_PER_FEATURE``,
      otherwise ``"sgd"`` (noisy full-batch gradient descent, averaged iterates).

    ``screening=True`` (an integer ``feature_selection`` or ``"sure"``, which only the
    screening solvers take) makes the logistic loss's choice ``"screened_newton"``.

    Pure DP (``delta=0``, epsilon finite) takes ``"greedy_cd"`` for every loss: the
    registered solver with a pure-DP mode (Laplace selection and updates composed by
    basic composition); every other one adds Gaussian noise.
    """
    if solver != "auto":
        return solver
    if delta == 0 and math.isfinite(epsilon):
        return "greedy_cd"
    many = n_samples * min(epsilon, 1e12) / max(n_features, 1) >= GREEDY_MIN_SAMPLES_PER_FEATURE
    if isinstance(loss, LogisticLoss):
        if screening:
            return "screened_newton"
        if math.isfinite(epsilon) and delta is not None and delta > 0 and not l1_penalty \
                and n_features <= BOUNDED_NEWTON_MAX_FEATURES \
                and bounded_newton_ridge_ratio(n_samples, n_features, epsilon, delta) \
                <= BOUNDED_NEWTON_MAX_RIDGE_RATIO:
            return "bounded_newton"
        # Without noise the bounds' argument is moot and greedy CD converges to the
        # exact optimum.
        coordinate_wise = not math.isfinite(epsilon) or coordinate_bound_ratio(
            feature_bound, norm_bound, n_features) < GREEDY_MAX_COORDINATE_RATIO
        return "greedy_cd" if many and coordinate_wise else "screened_newton"
    ssp_ratio = n_samples * min(epsilon, 1e12) / (n_features + 1) ** 2
    # Private fits only: without noise the choice keeps the exact solvers' optimum
    # on the rows as the bounds leave them (greedy CD does not clip rows to norm_bound).
    if math.isfinite(epsilon) and isinstance(loss, SquaredLoss) and not l1_penalty \
            and n_features <= SUFFICIENT_STATISTICS_MAX_FEATURES \
            and ssp_ratio >= SUFFICIENT_STATISTICS_MIN_RATIO:
        return "sufficient_statistics"
    if n_features >= SPARSE_SGD_MIN_FEATURES:
        return "sparse_sgd"
    return "greedy_cd" if many else "sgd"


def run_solver(name, X, Y, problem, *, epsilon, delta, rng=None, **options):
    """Plan and run a registered solver on arrays.

    ``X`` is validated float64 data and ``Y`` the targets, of shape (n,) or (n, K).
    For experiments and tests; estimators go through their fit sequence instead.
    """
    Y = np.asarray(Y, dtype=np.float64)
    Y = Y[:, None] if Y.ndim == 1 else Y
    solver = get_solver(name)
    options = {"max_iter": None, "batch_size": None, "learning_rate": None, "verbose": 0,
               "tol": 0.0, "selection": "exponential", "curvature": "bound", **options}
    solver.check(problem, options, epsilon, delta)
    plan = solver.plan(problem, (X.shape[0], X.shape[1], Y.shape[1]), epsilon, delta, options)
    if sp.issparse(X):
        X = canonical_sparse(X.tocsr() if X.format not in ("csr", "csc") else X)
    return solver.solve(problem, LocalData(X, Y), plan, check_generator(rng))

