"""What the stochastic-gradient solvers share: the public bounds of a per-example
gradient, the clipped gradient sum, the proximal step and progress reports.

Rows are clipped to l2 norm ``L = norm_bound`` (and, given ``sparsity = s``, to l1
norm ``L sqrt(s)``); per-example derivatives ``l'(y_i, z_i)`` to ``[-G, G]``. The
per-example gradient ``l'_i (x_i, 1)`` then has l2 norm ``<= C2 = G sqrt(L^2 + 1)``
and l1 norm ``<= C1 = G (L sqrt(s) + 1)`` (``sqrt(d)`` for ``sqrt(s)`` without a
sparsity bound; no ``+ 1`` without intercept), whatever the data; a sum of them
moves by at most ``2 C2`` in l2 when one example is replaced.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..optim import _sgd_kernels as K
from ..privacy.accounting import compose
from ..utils.validation import MIN_BOUND
from ._base import Solver

__all__ = ["GradientBounds", "gradient_bounds", "GradientSolver", "gradient_sum",
           "block_gradient_sum", "local_batch",
           "penalised_step", "split", "report", "checkpoints"]


@dataclass(frozen=True)
class GradientBounds:
    """Public constants of one problem's per-example gradients.

    ``grad_l2`` (C2) and ``grad_l1`` (C1) bound a per-example gradient over
    ``theta = (w, b)``; ``smoothness`` (beta) is the smoothness of one clipped
    example's loss plus the l2 penalty.
    """

    derivative_clip: float
    norm_bound: float
    l1_bound: float
    intercept: int
    n_features: int
    grad_l2: float
    grad_l1: float
    smoothness: float
    l2: float
    l1: float

    @property
    def n_params(self):
        """Length of ``theta = (w, b)``."""
        return self.n_features + self.intercept

    def with_row_norm(self, row_norm, loss):
        """The same bounds for rows known to have l2 norm at most ``row_norm``."""
        return dataclasses.replace(
            self, norm_bound=row_norm,
            grad_l2=self.derivative_clip * math.sqrt(row_norm**2 + self.intercept),
            smoothness=loss.smoothness * (row_norm**2 + self.intercept) + self.l2)


def gradient_bounds(problem, n_features, *, private, use_sparsity=True):
    """:class:`GradientBounds` of ``problem`` from public values (see the module
    docstring). ``use_sparsity=False`` ignores the sparsity bound."""
    loss = problem.loss
    derivative_clip = problem.derivative_clip
    if derivative_clip is None:
        if private:
            raise ValueError(
                f"{loss!r} has an unbounded derivative: give a public bound on |y| "
                "(target_bound) to clip the per-example derivative to"
            )
        derivative_clip = math.inf
    norm_bound = float(problem.norm_bound)
    sparsity = problem.sparsity if use_sparsity else None
    s_eff = n_features if sparsity is None else min(sparsity, n_features)
    row_l1 = norm_bound * math.sqrt(s_eff)
    fi = int(bool(problem.fit_intercept))
    return GradientBounds(
        derivative_clip=float(derivative_clip), norm_bound=norm_bound,
        l1_bound=row_l1 if sparsity is not None else math.inf, intercept=fi,
        n_features=n_features,
        grad_l2=derivative_clip * math.sqrt(norm_bound**2 + fi),
        grad_l1=derivative_clip * (row_l1 + fi),
        smoothness=loss.smoothness * (norm_bound**2 + fi) + problem.l2,
        l2=problem.l2, l1=problem.l1,
    )


#: Largest ``learning_rate`` times the smoothness ``beta`` of one example's loss at the
#: public bounds. Gradient descent converges below ``2 / beta``; far above, iterates grow
#: geometrically, and the margins of rows with large entries of both signs can
#: overflow to ``inf - inf``. Up to this ratio they stay finite for every valid input.
MAX_STEP_OVER_SMOOTHNESS = 1e6


class GradientSolver(Solver):
    """A solver whose plan depends on :class:`GradientBounds`.

    Without noise (``epsilon=inf``) a run is not private and may read the data:
    its step size uses the largest actual row norm instead of ``norm_bound``, so
    :meth:`solve` plans again with those bounds (:meth:`bounds_for`).
    """

    use_sparsity = True
    #: Whether ``decision="auto"`` fits the decision of the run's score privately
    #: (:mod:`.decision`): a few noisy steps rank well long before they decide well.
    calibrated_decision = True

    def check(self, problem, options, epsilon, delta):
        if math.isfinite(epsilon) and delta == 0:
            raise ValueError(f"solver={self.name!r} adds Gaussian noise and needs delta > 0")

    def plan(self, problem, shape, epsilon, delta, options):
        bounds = gradient_bounds(problem, shape[1], private=math.isfinite(epsilon),
                                 use_sparsity=self.use_sparsity)
        rate = options.get("learning_rate")
        if rate is not None and rate * bounds.smoothness > MAX_STEP_OVER_SMOOTHNESS:
            # Public values only: beyond it the iterates can overflow, and whether a
            # margin then becomes inf - inf would depend on the rows.
            raise ValueError(
                f"learning_rate={rate:g} is above {MAX_STEP_OVER_SMOOTHNESS:g} / beta = "
                f"{MAX_STEP_OVER_SMOOTHNESS / bounds.smoothness:g}, where beta = "
                f"{bounds.smoothness:g} is the smoothness of one example's loss at the "
                "bounds; steps above 2 / beta do not converge even without noise")
        return self.plan_with(problem, shape, epsilon, delta, options, bounds)

    def plan_with(self, problem, shape, epsilon, delta, options, bounds):
        raise NotImplementedError

    @staticmethod
    def check_weight_decay(bounds, options):
        """Refuse, from public values, a ``learning_rate`` whose l2 penalty makes the
        weights diverge (for a run without a ball of ``radius``)."""
        rate = options["learning_rate"]
        if rate is not None and options["radius"] is None and rate * bounds.l2 > 2:
            # Each step multiplies the weights by 1 - rate * l2, so they grow
            # geometrically until a margin or the weights overflow, at a step that
            # depends on the rows, after the budget is spent.
            raise ValueError(
                f"learning_rate={rate:g} times the l2 penalty {bounds.l2:g} is above 2: "
                "each step multiplies the weights by |1 - learning_rate * l2| > 1 and "
                "they diverge whatever the data; lower learning_rate or give a radius")

    def input_clipping(self, problem, plan):
        if getattr(plan, "screening", None) is not None:
            # The run clips the rows restricted to the screened columns, which are
            # known only after the release: no clipping of whole rows matches it.
            return None, math.inf, math.inf
        return None, float(plan.bounds.norm_bound), float(plan.bounds.l1_bound)

    def rows(self, data, plan):
        """The rows the run reads, clipped to the plan's balls (a run without noise
        plans with the largest row norm, which clips nothing more)."""
        return data.rows_clipped(plan.bounds.norm_bound, plan.bounds.l1_bound)

    def replanned(self, problem, data, plan, options):
        """The plan a run uses: ``plan`` itself when private; without noise, the plan
        for the actual largest row norm (if below the bound)."""
        if plan.private:
            return plan
        # at least MIN_BOUND, the floor of every clipping bound (clip_rows refuses less):
        # rows below it are inside either way
        row_norm = min(plan.bounds.norm_bound, max(data.max_row_norm() or 1.0, MIN_BOUND))
        bounds = plan.bounds.with_row_norm(row_norm, problem.loss)
        shape = (plan.n_samples, plan.n_features, plan.n_targets)
        return self.plan_with(problem, shape, plan.epsilon, plan.delta, options, bounds)


def gradient_sum(rows, y, bounds, loss, theta, batch):
    """Sum over ``batch`` (None: all rows) of the clipped per-example gradients,
    a vector of length ``bounds.n_params``."""
    d = bounds.n_features
    w = theta[:d]
    b = theta[d] if bounds.intercept else 0.0
    out = np.empty(bounds.n_params)
    if hasattr(rows, "indptr"):
        if batch is None:
            batch = np.arange(rows.shape[0], dtype=np.int64)
        grad = out[:d]
        total = K.csr_batch_gradient(rows.data, rows.indices, rows.indptr, batch, w, b, y,
                                     loss.code, loss.param, bounds.derivative_clip, grad)
        if not np.all(np.isfinite(grad)):
            raise FloatingPointError("non-finite gradient")
    else:
        Xb = rows if batch is None else rows[batch]
        yb = y if batch is None else y[batch]
        g = np.clip(loss.derivative(yb, Xb @ w + b), -bounds.derivative_clip,
                    bounds.derivative_clip)
        out[:d] = Xb.T @ g
        total = float(g.sum())
    if bounds.intercept:
        out[d] = total
    return out


def block_gradient_sum(rows, Y, start, k, bounds, loss, theta, batch):
    """:func:`gradient_sum` of problem ``k`` over the rows of one block that are in the
    batch, followed by the number of rows summed: a vector of length
    ``bounds.n_params + 1``.

    The block holds rows ``start, ...`` of the fit; ``batch`` is None (every row),
    sorted row indices of the fit, or a sampler with ``rows(start, stop)``
    (:class:`~skdp_sparse.privacy.row_sampling.PoissonRows`) that draws the block's
    own rows. A view calls it on each block (``data.row_sum``) and adds the results.
    """
    local = local_batch(rows.shape[0], start, batch)
    count = rows.shape[0] if local is None else local.size
    y = np.ascontiguousarray(Y[:, k])
    out = np.empty(bounds.n_params + 1)
    out[:-1] = gradient_sum(rows, y, bounds, loss, theta, local)
    out[-1] = count
    return out


def local_batch(n_rows, start, batch):
    """The indices, within a block of ``n_rows`` rows starting at row ``start`` of the
    fit, of the rows in ``batch`` (None: every row, returned as None)."""
    if batch is None:
        return None
    stop = start + n_rows
    if isinstance(batch, np.ndarray):
        lo, hi = np.searchsorted(batch, [start, stop])
        return batch[lo:hi] - start
    return batch.rows(start, stop)


def penalised_step(bounds, theta, grad, eta, radius):
    """``theta <- Pi(prox_{eta l1}(theta - eta (grad + l2 w)))``; the intercept is
    unpenalised and ``Pi`` projects on the l2 ball of ``radius`` (None: no ball).
    ``theta`` is one problem's ``(w, b)`` or a matrix of them, one per row (the
    multinomial loss; the ball is then the Frobenius norm's). Returns a new array;
    ``theta`` and ``grad`` are left unchanged."""
    d = bounds.n_features
    # In place on one new array and one buffer: with K x p parameters (p = 10^7, the
    # multinomial loss) every temporary of the plain expressions is hundreds of MB.
    # The operations and their order are those of
    # sign(w) * max(|w| - eta l1, 0) on w = theta - eta (grad + l2 w), so the results
    # are the same bits (IEEE addition and multiplication commute).
    theta_new = np.array(grad, dtype=np.float64, copy=True)
    if bounds.l2:
        shift = np.multiply(theta[..., :d], bounds.l2)
        theta_new[..., :d] += shift
        del shift
    theta_new *= eta
    np.subtract(theta, theta_new, out=theta_new)
    if bounds.l1:
        w = theta_new[..., :d]
        shrunk = np.abs(w)
        shrunk -= eta * bounds.l1
        np.maximum(shrunk, 0.0, out=shrunk)
        np.sign(w, out=w)
        w *= shrunk
        del shrunk
    theta = theta_new
    if radius is not None:
        nrm = np.linalg.norm(theta)
        if nrm > radius:
            theta *= radius / nrm
    return theta


def split(bounds, theta):
    """``(coef, intercept)`` of ``theta = (w, b)`` (of each row of a matrix of them:
    arrays of coefficients and intercepts)."""
    coef = np.array(theta[..., : bounds.n_features], dtype=np.float64)
    if theta.ndim > 1:
        intercept = np.array(theta[:, bounds.n_features]) if bounds.intercept \
            else np.zeros(theta.shape[0])
        return coef, intercept
    intercept = float(theta[bounds.n_features]) if bounds.intercept else 0.0
    return coef, intercept


def report(tag, t, total, events_so_far, delta, extra=""):
    """Progress line of ``verbose`` runs: public quantities only (the step count and
    the privacy spent so far)."""
    eps = compose(events_so_far, delta)[0] if events_so_far else 0.0
    print(f"[{tag}] step {t}/{total}{extra}  privacy spent: epsilon={eps:.4g} "
          f"(delta={delta:.3g})")


def checkpoints(total, verbose):
    """The steps after which a ``verbose`` run reports (about 10, or 100 at verbose >= 2)."""
    if not verbose or total <= 0:
        return set()
    every = max(1, total // (10 if verbose < 2 else 100))
    return set(range(every, total + 1, every)) | {1, total}
