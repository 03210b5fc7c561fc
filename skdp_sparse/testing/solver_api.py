"""The stochastic-gradient solvers called on arrays, for tests and benchmarks.

Each function builds the :class:`~skdp_sparse.solvers.Problem`, plans the registry
solver and runs it, and returns ``(coef, intercept, n_steps, events,
n_gradient_evaluations)`` for one target vector.
"""

import math

import numpy as np
import scipy.sparse as sp

from skdp_sparse.optim.losses import LogisticLoss, Loss
from skdp_sparse.optim.penalties import ElasticNet
from skdp_sparse.solvers import Problem, run_solver
from skdp_sparse.utils.validation import check_privacy_params

__all__ = ["make_problem", "sgd", "sparse_sgd", "phased_sgd", "bias_reduced_sgd"]


def make_problem(loss, *, l2=0.0, l1=0.0, max_row_norm=1.0, sparsity=None,
                 derivative_clip=None, fit_intercept=True, epsilon=1.0):
    """The :class:`~skdp_sparse.solvers.Problem` of a loss, penalty strengths and the
    bounds (``max_row_norm`` is the problem's ``norm_bound``; ``derivative_clip`` its
    ``target_bound``)."""
    if not isinstance(loss, Loss):
        raise ValueError(f"loss must be a loss object of skdp_sparse.optim.losses, got {loss!r}")
    if not (isinstance(max_row_norm, int | float) and max_row_norm > 0) or (
            math.isinf(max_row_norm) and math.isfinite(epsilon)):
        raise ValueError(f"max_row_norm must be a positive number, got {max_row_norm!r}")
    if derivative_clip is not None and not derivative_clip > 0:
        raise ValueError(f"derivative_clip must be a positive number, got {derivative_clip!r}")
    return Problem(loss=loss, penalty=ElasticNet.from_strengths(l1, l2),
                   fit_intercept=fit_intercept, norm_bound=max_row_norm, sparsity=sparsity,
                   target_bound=derivative_clip)


def _run(name, X, y, loss, *, l2=0.0, l1=0.0, max_row_norm=1.0, sparsity=None,
         derivative_clip=None, fit_intercept=True, epsilon=1.0, delta=1e-6, rng=None,
         **options):
    epsilon, delta = check_privacy_params(epsilon, delta)
    problem = make_problem(loss, l2=l2, l1=l1, max_row_norm=max_row_norm, sparsity=sparsity,
                           derivative_clip=derivative_clip, fit_intercept=fit_intercept,
                           epsilon=epsilon)
    X = X.astype(np.float64) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    if not np.all(np.isfinite(X.data if sp.issparse(X) else X)):
        raise ValueError("X contains NaN or infinity")
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
    if isinstance(loss, LogisticLoss) and not np.all(np.abs(y) == 1):
        raise ValueError("the logistic loss takes labels y in {-1, +1}")
    result = run_solver(name, X, y, problem, epsilon=epsilon, delta=delta, rng=rng, **options)
    out = (result.coef[0], float(result.intercept[0]), result.n_iter, list(result.events),
           result.info["n_gradient_evaluations"])
    if "trace" in result.info:
        out += (result.info["trace"][0],)
    return out


def sgd(X, y, loss, *, n_steps=None, **kw):
    """Solver ``"sgd"``; see :class:`~skdp_sparse.solvers.sgd.NoisySGD`."""
    return _run("sgd", X, y, loss, max_iter=n_steps, **kw)


def sparse_sgd(X, y, loss, *, n_steps=None, _trace=None, **kw):
    """Solver ``"sparse_sgd"``; ``_trace=(rows, cols)`` appends its trace."""
    if _trace is not None:
        kw["trace"] = _trace
    return _run("sparse_sgd", X, y, loss, max_iter=n_steps, **kw)


def phased_sgd(X, y, loss, *, n_steps=None, **kw):
    """Solver ``"phased_sgd"``; see :class:`~skdp_sparse.solvers.phased_sgd.PhasedSGD`."""
    return _run("phased_sgd", X, y, loss, max_iter=n_steps, **kw)


def bias_reduced_sgd(X, y, loss, *, max_steps=None, **kw):
    """Solver ``"bias_reduced_sgd"``, stopped by its filter or ``max_steps``."""
    return _run("bias_reduced_sgd", X, y, loss, max_iter=max_steps, **kw)
