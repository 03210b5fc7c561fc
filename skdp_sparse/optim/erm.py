"""L2-regularised empirical risk minimisation with a certified distance to the optimum.

Solves ``min_{w in X} G(w) = (1/n) sum_i l(y_i, x_i . w) + (alpha/2) ||w||^2`` for a
convex margin loss (:mod:`skdp_sparse.optim.losses`) on dense or sparse ``X``, with
``X`` the whole space, a box ``[-R, R]^d`` or an l2 / l1 ball of radius R.

Output perturbation calibrates its noise to the sensitivity of the *exact* minimiser
``w*`` plus twice the distance between the point it releases and ``w*``. That
distance is never assumed: the solver stops only once it holds a certificate
``||w - w*||_2 <= rho / alpha`` with ``rho <= tol``, where, G being alpha-strongly
convex:

* unconstrained: ``rho = ||grad G(w)||_2`` (strong monotonicity of the gradient:
  ``alpha ||w - w*||^2 <= <grad G(w) - grad G(w*), w - w*> <= ||grad G(w)|| ||w - w*||``);
* constrained: ``rho = 2 ||g_beta(w)||_2`` with the gradient mapping
  ``g_beta(w) = beta (w - P_X(w - grad G(w) / beta))`` and ``beta`` an upper bound on the
  smoothness of G. The prox-gradient inequality
  ``G(v) - G(w+) >= <g_beta, v - w> + ||g_beta||^2 / (2 beta) + (alpha/2) ||v - w||^2``
  (Beck 2017, Thm 10.16 with strong convexity) at ``v = w*`` gives
  ``(alpha/2) ||w - w*||^2 <= ||g_beta|| ||w - w*||``; ``w`` need not be feasible.

The smoothness bound used is ``smoothness(l) ||X||_F^2 / n + alpha``
(``||X||_2^2 <= ||X||_F^2``). ``rho`` also includes a bound on the floating-point error
of the computed gradient (standard summation error bounds, ``gamma_m = m u / (1 - m u)``),
so the certificate is about the exact gradient, not its rounded value.

Privacy never depends on how the point was found, only on the certificate: any
deterministic procedure whose output is within ``tol / alpha`` of ``w*`` is fine,
including data-dependent step sizes.

When the fast solvers cannot certify the point within their budget and public
bounds on the objective at 0 and on the smoothness are given, the solver does not
fail (a failure would depend on the data): it runs accelerated projected gradient
from 0 for a number of iterations fixed by those public bounds, after which the
point is within ``tol / alpha`` of ``w*`` by the convergence theorem of the method
(:func:`guaranteed_iterations`), certificate or not.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.sparse.linalg import LinearOperator, cg
from scipy.special import expit

from ..utils._threads import single_threaded_blas
from .linf_projections import DOMAINS, linf_project_l1_ball
from .losses import HuberLoss, LogisticLoss, SquaredLoss
from .projections import project_l2_ball

__all__ = ["ERMResult", "ERMConvergenceError", "solve_l2_erm", "euclidean_project",
           "guaranteed_iterations"]

_U = np.finfo(np.float64).eps / 2  # unit roundoff

# L-BFGS-B works on length-d vectors through BLAS: one thread, except for large dense
# products, which do gain from threads.
_DENSE_THREADED_SIZE = 1_000_000


def _blas_limit(X):
    if not sp.issparse(X) and X.size > _DENSE_THREADED_SIZE:
        return contextlib.nullcontext()
    return single_threaded_blas()


class ERMConvergenceError(RuntimeError):
    """The solver could not certify ``||w - w*|| <= tol / alpha`` within its budget."""


@dataclass
class ERMResult:
    """Approximate minimiser with its certificate.

    Attributes
    ----------
    coef : ndarray of shape (d,)
    n_iter : int
        Iterations of all the solver stages together.
    residual : float
        Certified ``rho`` with ``||coef - w*||_2 <= residual / alpha`` (``<= tol``).
    objective : float
        ``G(coef)``.
    """

    coef: np.ndarray
    n_iter: int
    residual: float
    objective: float


def euclidean_project(w, domain, radius):
    """Euclidean projection onto the domain (used inside the solver only)."""
    if domain == "none":
        return w
    if domain == "box":
        return np.clip(w, -radius, radius)
    if domain == "l2":
        return project_l2_ball(w, radius)
    if domain == "l1":
        # The soft threshold solving sum (|w_j| - t)_+ = R is also the Euclidean
        # projection onto the l1 ball.
        return linf_project_l1_ball(w, radius)
    raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")


def _second_derivative(loss, y, z):
    if isinstance(loss, LogisticLoss):
        p = expit(y * z)
        return p * (1.0 - p)
    if isinstance(loss, HuberLoss):
        return (np.abs(z - y) <= loss.param).astype(np.float64)
    if isinstance(loss, SquaredLoss):
        return np.ones_like(z)
    raise TypeError(f"unsupported loss {loss!r}")


class _Problem:
    """Objective, gradient and Hessian products of one regularised GLM problem."""

    def __init__(self, X, y, loss, alpha):
        self.X = X
        self.y = np.asarray(y, dtype=np.float64)
        self.loss = loss
        self.alpha = float(alpha)
        self.n, self.d = X.shape
        self._absX = abs(X) if sp.issparse(X) else np.abs(X)
        fro2 = float(X.multiply(X).sum()) if sp.issparse(X) else float(np.sum(X * X))
        self.beta = loss.smoothness * fro2 / self.n + self.alpha
        # Each gradient coordinate sums at most n products, each margin at most d.
        m = self.n + self.d + 8
        self._gamma = 2.0 * m * _U / (1.0 - m * _U)

    def value_grad(self, w):
        z = self.X @ w
        r = self.loss.derivative(self.y, z)
        val = float(np.mean(self.loss.value(self.y, z))) + 0.5 * self.alpha * float(w @ w)
        g = self.X.T @ r / self.n + self.alpha * w
        return val, np.asarray(g).ravel(), z, r

    def hessp_operator(self, z):
        dd = _second_derivative(self.loss, self.y, z) / self.n
        X, a = self.X, self.alpha

        def mv(v):
            return X.T @ (dd * (X @ v)) + a * v

        return LinearOperator((self.d, self.d), matvec=mv, dtype=np.float64)

    def gradient_error(self, w, r):
        """Bound on ``||fl(grad G(w)) - grad G(w)||_2`` for the computed gradient."""
        aw = np.abs(w)
        t = self._absX.T @ np.abs(r) / self.n
        # Rounding in the margins moves the derivative by at most smoothness * |dz|.
        dz = self._absX @ aw
        t = t + self.loss.smoothness * (self._absX.T @ dz) / self.n
        t = np.asarray(t).ravel() + self.alpha * aw
        return self._gamma * float(np.linalg.norm(t))


def _certificate(prob, w, g, r, domain, radius):
    """``rho`` with ``||w - w*|| <= rho / alpha`` (see the module docstring)."""
    err = prob.gradient_error(w, r)
    if domain == "none":
        return float(np.linalg.norm(g)) + err
    beta = prob.beta
    gmap = beta * (w - euclidean_project(w - g / beta, domain, radius))
    # Rounding in the step and the projection, scaled by beta; P_X is 1-Lipschitz.
    r2 = radius * math.sqrt(prob.d) if domain == "box" else radius
    proj_err = 4.0 * (prob.d + 4) * _U * (np.linalg.norm(w) + np.linalg.norm(g) / beta + r2)
    return 2.0 * (float(np.linalg.norm(gmap)) + err + beta * proj_err)


def _lbfgs(prob, w0, gtol_2, max_iter, bounds=None):
    def fun(w):
        val, g, _, _ = prob.value_grad(w)
        return val, g

    gtol_inf = gtol_2 / math.sqrt(prob.d)
    res = minimize(
        fun,
        w0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": max_iter, "gtol": gtol_inf, "ftol": 1e-15, "maxcor": 20},
    )
    return res.x, int(res.nit)


def _newton_polish(prob, w, tol, max_iter):
    """Damped Newton-CG until the unconstrained certificate drops below ``tol``."""
    val, g, z, r = prob.value_grad(w)
    n_iter = 0
    for _ in range(max_iter):
        rho = _certificate(prob, w, g, r, "none", None)
        if rho <= tol:
            return w, n_iter, rho, val
        gnorm = float(np.linalg.norm(g))
        H = prob.hessp_operator(z)
        p, _ = cg(H, -g, rtol=min(0.1, math.sqrt(gnorm)), maxiter=max(50, prob.d))
        step, accepted = 1.0, False
        for _ in range(40):
            w_new = w + step * p
            v_new, g_new, z_new, r_new = prob.value_grad(w_new)
            gd = float(g @ p)
            # Close to the optimum the objective stops resolving progress; a
            # shrinking gradient norm is then the acceptance test.
            if v_new <= val + 1e-4 * step * gd or (
                v_new <= val + 1e-12 * abs(val) and np.linalg.norm(g_new) < gnorm
            ):
                accepted = True
                break
            step *= 0.5
        n_iter += 1
        if not accepted:
            break
        w, val, g, z, r = w_new, v_new, g_new, z_new, r_new
    rho = _certificate(prob, w, g, r, "none", None)
    return w, n_iter, rho, val


def _accelerated_projected_gradient(prob, w0, domain, radius, tol, max_iter):
    """FISTA for strongly convex objectives with gradient-based restarts.

    The certificate is evaluated at the extrapolated point ``y``, whose gradient the
    iteration computes anyway, and ``y`` is returned once certified.
    """
    beta, alpha = prob.beta, prob.alpha
    q = math.sqrt(alpha / beta)
    mom = (1.0 - q) / (1.0 + q)
    x = euclidean_project(w0, domain, radius)
    yv = x.copy()
    for it in range(1, max_iter + 1):
        val, g, _, r = prob.value_grad(yv)
        x_new = euclidean_project(yv - g / beta, domain, radius)
        gmap_norm = beta * float(np.linalg.norm(yv - x_new))
        if 2.0 * gmap_norm <= tol:
            rho = _certificate(prob, yv, g, r, domain, radius)
            if rho <= tol:
                return yv, it, rho, val
        step = x_new - x
        if float((yv - x_new) @ step) > 0.0:
            yv = x_new.copy()  # momentum points uphill: restart
        else:
            yv = x_new + mom * step
        x = x_new
    val, g, _, r = prob.value_grad(yv)
    return yv, max_iter, _certificate(prob, yv, g, r, domain, radius), val


def guaranteed_iterations(alpha, smoothness, objective_bound, distance):
    """Iterations of accelerated projected gradient from 0 that reach ``distance``.

    For an ``alpha``-strongly convex, ``L``-smooth objective ``G`` over a convex set
    holding 0, the constant-momentum method (step ``1/L``, momentum
    ``(1 - q)/(1 + q)``, ``q = sqrt(alpha / L)``) has ``G(x_T) - G* <= (1 - q)^T
    (G(0) - G* + alpha ||x*||^2 / 2) <= 2 (1 - q)^T G(0)`` (Nesterov 2004, Thm 2.2.3;
    Beck 2017, Thm 10.42 for the projected form; ``alpha ||x*||^2 / 2 <= G(0) - G*``
    by strong convexity and ``G* >= 0``), and ``||x_T - x*||^2 <= 2 (G(x_T) - G*) /
    alpha``. So ``T >= log(4 G(0) / (alpha distance^2)) / -log(1 - q)`` iterations
    bring ``x_T`` within ``distance`` of ``x*``. Public in its arguments when they are
    public bounds (``L`` may be any upper bound on the smoothness).
    """
    q = math.sqrt(alpha / smoothness)
    ratio = 4.0 * objective_bound / (alpha * distance**2)
    if ratio <= 1.0:
        return 1
    if q >= 1.0:
        return 1
    return int(math.ceil(math.log(ratio) / -math.log1p(-q)))


def _accelerated_gradient_fixed(prob, domain, radius, smoothness, tol, n_iter):
    """The constant-momentum method of :func:`guaranteed_iterations` from 0, for
    ``n_iter`` iterations at most; stops earlier if its point is certified."""
    beta = max(smoothness, prob.beta)
    q = math.sqrt(prob.alpha / beta)
    mom = (1.0 - q) / (1.0 + q)
    x = np.zeros(prob.d)
    yv = x.copy()
    for it in range(1, n_iter + 1):
        val, g, _, r = prob.value_grad(yv)
        x_new = euclidean_project(yv - g / beta, domain, radius)
        if 2.0 * beta * float(np.linalg.norm(yv - x_new)) <= tol:
            rho = _certificate(prob, yv, g, r, domain, radius)
            if rho <= tol:
                return yv, it, rho, val
        yv = x_new + mom * (x_new - x)
        x = x_new
    val, g, _, r = prob.value_grad(x)
    return x, n_iter, _certificate(prob, x, g, r, domain, radius), val


def solve_l2_erm(X, y, loss, alpha, *, tol, domain="none", radius=None, max_iter=1000,
                 coef_init=None, objective_bound=None, smoothness_bound=None):
    """Minimise ``(1/n) sum l(y_i, x_i . w) + (alpha/2) ||w||^2`` over the domain.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix of shape (n, d)
        CSR is fastest; no intercept is added (append a constant column for one).
    y : ndarray of shape (n,)
    loss : LogisticLoss, SquaredLoss or HuberLoss
    alpha : float, > 0
        Regularisation (strong convexity) parameter lambda.
    tol : float, > 0
        Certified accuracy in gradient units: the result satisfies
        ``||coef - w*||_2 <= tol / alpha``.
    domain : {"none", "box", "l2", "l1"}
    radius : float
        Radius of the domain (unused for ``"none"``).
    max_iter : int
        Iteration budget of each solver stage.
    coef_init : ndarray of shape (d,), optional
        Warm start.
    objective_bound, smoothness_bound : float, optional
        Public upper bounds on ``G(0)`` and on the smoothness of ``G``. Given both,
        the solver never fails: past its budget it runs the fixed, public number of
        iterations of :func:`guaranteed_iterations`, whose point is within
        ``tol / alpha`` of ``w*`` by the method's convergence theorem.

    Returns
    -------
    ERMResult

    Raises
    ------
    ERMConvergenceError
        If the certificate is not reached and no public bounds were given; then no
        noise calibrated for ``tol`` may be added to the result.
    """
    if not (alpha > 0) or not math.isfinite(alpha):
        raise ValueError(f"alpha must be a positive finite number, got {alpha!r}")
    if not (tol > 0):
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    if domain != "none" and not (radius is not None and radius > 0):
        raise ValueError(f"domain={domain!r} needs a positive radius, got {radius!r}")
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
    else:
        X = np.asarray(X, dtype=np.float64)
    with _blas_limit(X):
        return _solve(X, y, loss, alpha, tol, domain, radius, max_iter, coef_init,
                      objective_bound, smoothness_bound)


def _solve(X, y, loss, alpha, tol, domain, radius, max_iter, coef_init, objective_bound,
           smoothness_bound):
    prob = _Problem(X, y, loss, alpha)
    w0 = np.zeros(prob.d) if coef_init is None else np.asarray(coef_init, dtype=np.float64)

    # Unconstrained minimiser first: when it lies inside the domain it is the answer.
    bounds = [(-radius, radius)] * prob.d if domain == "box" else None
    w, it1 = _lbfgs(prob, w0, 0.5 * tol / (2.0 if domain != "none" else 1.0), max_iter,
                    bounds=bounds)
    n_iter = it1
    if domain in ("none", "box"):
        val, g, z, r = prob.value_grad(w)
        rho = _certificate(prob, w, g, r, domain, radius)
        if rho > tol and domain == "none":
            w, it2, rho, val = _newton_polish(prob, w, tol, max_iter)
            n_iter += it2
    else:
        w = euclidean_project(w, domain, radius)
        val, g, z, r = prob.value_grad(w)
        rho = _certificate(prob, w, g, r, domain, radius)
    if rho > tol and domain != "none":
        w, it2, rho, val = _accelerated_projected_gradient(
            prob, w, domain, radius, tol, 20 * max_iter
        )
        n_iter += it2
    if not rho <= tol and objective_bound is not None and smoothness_bound is not None:
        n_fixed = guaranteed_iterations(alpha, smoothness_bound, objective_bound, tol / alpha)
        w, it3, rho, val = _accelerated_gradient_fixed(prob, domain, radius,
                                                       smoothness_bound, tol, n_fixed)
        return ERMResult(coef=w, n_iter=int(n_iter + it3), residual=float(rho),
                         objective=float(val))
    if not rho <= tol:
        raise ERMConvergenceError(
            f"could not certify ||grad|| <= tol={tol:.3g} (reached {rho:.3g}) within "
            "the iteration budget; increase tol or max_iter"
        )
    return ERMResult(coef=w, n_iter=int(n_iter), residual=float(rho), objective=float(val))
