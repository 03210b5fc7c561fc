"""Output perturbation with l_inf projection (Ghazi, Guzmán, Kamath, Kumar & Manurangsi,
"Differentially Private Optimization with Sparse Gradients", Section 5, Algorithm 3).

Solve the L2-regularised ERM to a certified accuracy, add Gaussian (``delta > 0``)
or Laplace (``delta = 0``) noise calibrated to its replace-one sensitivity
(l2: ``2 L / (lambda n) + 2 g / lambda``; l1: the GLM form of the paper's Thm 5.1,
never above ``sqrt(d)`` times the l2 bound), and return the point of the domain
closest to the noisy vector in the l_inf norm. Rows are clipped to ``norm_bound``
(and targets to ``target_bound``), so the bounds hold for any input. The
constants, proofs and the default ``lambda`` are in
``doc/proofs/output_perturbation.rst``.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..data import LocalData
from ..optim.erm import solve_l2_erm
from ..optim.linf_projections import DOMAINS, linf_project
from ..optim.losses import HuberLoss, LogisticLoss, SquaredLoss
from ..privacy import discrete
from ..privacy.accounting import compose
from ..privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from ..utils.random import check_generator
from ..utils.validation import (
    Bound,
    Interval,
    Options,
    check_privacy_params,
    checked_array,
    data_free_errors,
    validate_params,
)
from ._base import Plan, Problem, Solver, SolverResult

__all__ = [
    "OutputPerturbation",
    "fit_output_perturbation",
    "output_perturbation_bounds",
    "default_alpha",
    "OPTION_CONSTRAINTS",
]

_CONFIDENCE_BETA = 0.05

#: Constraints of the solver's options (also the estimators' parameters).
OPTION_CONSTRAINTS = {
    "alpha": [Bound(), None],
    "domain": [Options(*DOMAINS)],
    "radius": [Bound(), None],
    "tol": [Interval(numbers.Real, 0, None, closed="neither")],
    "intercept_bound": [Bound()],
    "max_iter": [Interval(numbers.Integral, 1, None)],
    "floating_point_safe": [Options("auto", True, False)],
}


def make_loss(loss, huber_threshold=1.0):
    """A loss object from its name (or the object itself)."""
    if isinstance(loss, LogisticLoss | SquaredLoss | HuberLoss):
        return loss
    if loss == "logistic":
        return LogisticLoss()
    if loss == "squared":
        return SquaredLoss()
    if loss == "huber":
        return HuberLoss(huber_threshold)
    raise ValueError(f"loss must be 'logistic', 'squared' or 'huber', got {loss!r}")


def _domain_l2_radius(domain, radius, d):
    if domain == "none":
        return math.inf
    if domain == "box":
        return radius * math.sqrt(d)
    return radius  # the l1 ball lies inside the l2 ball of the same radius


def _derivative_bound(loss, row_l2, alpha, target_bound, w_bound):
    """``D_l``: bound on |dl/dz| at every minimiser the sensitivity proofs evaluate."""
    if isinstance(loss, LogisticLoss):
        return loss.derivative_bound
    w = min(target_bound / math.sqrt(alpha), w_bound)
    residual = row_l2 * w + target_bound
    return min(loss.derivative_bound, residual)


def output_perturbation_bounds(
    loss, *, n, d, alpha, norm_bound, intercept_bound=None, sparsity=None,
    target_bound=None, domain="none", radius=None, tol=1e-3,
):
    """Lipschitz and smoothness constants, solver tolerance and sensitivities of a fit.

    ``d`` is the number of features without the intercept; ``intercept_bound=None``
    means no intercept. Formulas and proofs: ``doc/proofs/output_perturbation.rst``.

    Returns
    -------
    dict with keys ``row_l2`` (A_2), ``row_l1`` (A_1), ``derivative_bound`` (D_l),
    ``lipschitz`` (L), ``smoothness`` (H), ``tol_abs`` (g), ``l2_sensitivity``,
    ``l1_sensitivity``, ``l1_sensitivity_sparse``, ``l1_sensitivity_dense``.
    """
    loss = make_loss(loss)
    b = 0.0 if intercept_bound is None else float(intercept_bound)
    d_aug = d + (intercept_bound is not None)
    s = d if sparsity is None else min(int(sparsity), d)
    row_l2 = math.hypot(norm_bound, b)
    row_l1 = norm_bound * math.sqrt(s) + b
    w_bound = _domain_l2_radius(domain, radius, d_aug)
    tb = 0.0 if target_bound is None else float(target_bound)
    dl = _derivative_bound(loss, row_l2, alpha, tb, w_bound)
    lip = dl * row_l2
    smooth = loss.smoothness * row_l2**2
    g = tol * lip / n
    exact_l2 = 2.0 * lip / (alpha * n)
    l2 = exact_l2 + 2.0 * g / alpha
    sparse_l1 = 2.0 * dl * row_l1 / (alpha * n) * (1.0 + smooth * (n - 1) / (alpha * n))
    dense_l1 = math.sqrt(d_aug) * exact_l2
    l1 = min(sparse_l1, dense_l1) + math.sqrt(d_aug) * 2.0 * g / alpha
    return {
        "row_l2": row_l2,
        "row_l1": row_l1,
        "derivative_bound": dl,
        "lipschitz": lip,
        "smoothness": smooth,
        "tol_abs": g,
        "l2_sensitivity": l2,
        "l1_sensitivity": l1,
        "l1_sensitivity_sparse": sparse_l1,
        "l1_sensitivity_dense": dense_l1,
    }


def default_alpha(*, n, d, s, lipschitz, smoothness, epsilon, delta, comparator_norm,
                  beta=_CONFIDENCE_BETA):
    """Regularisation from the tuning rules of Theorem 5.1 of Ghazi et al.; public inputs only.

    ``d`` and ``s`` count the intercept if there is one. The rules balance the bias
    ``lambda D^2`` against the noise and tend to 0 as ``epsilon`` grows, so they are
    floored at ``L / (D n)``, where the penalty's pull at the comparator, ``lambda D``,
    equals the gradient one row can add, ``L / n``: the fit never regularises more than
    one row weighs (that floor is also the value at ``epsilon = inf``, no noise). The
    floor makes ``lambda`` non-increasing in ``epsilon``; at finite budgets it only binds
    from ``epsilon`` of order ``n``.
    """
    L, H, D = lipschitz, smoothness, comparator_norm
    one_row = L / (D * n)
    if math.isinf(epsilon):
        return one_row
    if delta > 0:
        rule = L / D * (s * math.log(1 / delta) * math.log(d / beta)) ** 0.25 / math.sqrt(
            epsilon * n
        )
    else:
        rule = (L**2 * H * s * math.log(d / beta) / (D**2 * epsilon * n)) ** (1 / 3)
    return max(rule, one_row)


@functools.lru_cache(maxsize=256)
def _gaussian_sigma(sensitivity, count, epsilon, delta, safe):
    """Smallest sigma whose ``count`` releases of l2 sensitivity ``sensitivity`` compose
    to at most ``(epsilon, delta)``: analytic calibration (``safe=False``) or the zCDP
    calibration of the discrete Gaussian (``safe=True``, rounding slack included).

    ``count`` releases compose exactly like one release of sensitivity
    ``sqrt(count) * sensitivity``; ``sqrt`` rounds, so the composed event is checked
    and sigma stepped up until it fits. A function of public values, cached because
    its bisection costs more than a small fit.
    """
    sigma = GaussianMechanism(math.sqrt(count) * sensitivity, epsilon=epsilon, delta=delta,
                              floating_point_safe=safe).sigma
    if sigma == 0:
        return sigma
    while compose([GaussianMechanism(sensitivity, sigma=sigma, floating_point_safe=safe)
                   .event(count)], delta)[0] > epsilon:
        sigma = math.nextafter(sigma, math.inf)
    return sigma


def _objective_at_zero(loss, target_bound):
    """Public bound on the objective at 0, ``(1/n) sum_i l(y_i, 0)``, with targets
    clipped to ``target_bound`` (labels +-1 for the logistic loss)."""
    if isinstance(loss, LogisticLoss):
        return math.log(2.0)
    t = float(target_bound)
    if isinstance(loss, HuberLoss) and t > loss.param:
        return loss.param * (t - 0.5 * loss.param)
    return 0.5 * t * t


def _resolve_floating_point_safe(value):
    """``"auto"`` is safe for both mechanisms: the release is one vector, so even the
    discrete Gaussian's slower sampler and zCDP calibration cost little next to the
    solver."""
    return True if value == "auto" else bool(value)


def _check_representable(strength, sensitivity, **public):
    """Refuse public values whose penalty strength or sensitivity is not a positive
    finite double (a norm_bound of 1e100 makes the default strength's L^2 H overflow to
    an infinite strength and a zero sensitivity): the mechanism would refuse it with a
    message naming none of the parameters that caused it."""
    if 0 < strength < math.inf and 0 < sensitivity < math.inf:
        return
    what = (f"penalty strength {strength!r}" if not 0 < strength < math.inf
            else f"sensitivity {sensitivity!r}")
    given = ", ".join(f"{k}={v!r}" for k, v in public.items() if v is not None)
    raise ValueError(f"solver 'output_perturbation': the public values {given} give a "
                     f"{what}, which is not a positive finite number in doubles; bring the "
                     "bounds and alpha closer to 1 (rescale the features so that their "
                     "norm_bound is about 1)")


@dataclass(frozen=True, kw_only=True, eq=False)
class OutputPerturbationPlan(Plan):
    alpha: float
    bounds: dict
    mechanism: object
    noise_scale: float
    floating_point_safe: bool
    granularity: float | None
    intercept_bound: float | None
    domain: str
    radius: float | None
    max_iter: int
    l1_clip: float
    objective_bound: float


class OutputPerturbation(Solver):
    """Output perturbation (Algorithm 3): certified ERM plus calibrated noise.

    Options: ``alpha`` (None: the theorem's rule from public values), ``domain``,
    ``radius``, ``tol``, ``intercept_bound``, ``max_iter``, ``floating_point_safe``.
    ``problem.penalty`` is ignored: the objective is always ``(alpha/2) ||theta||^2``
    over ``theta = (w, intercept / intercept_bound)``.
    """

    name = "output_perturbation"
    #: ``decision="auto"`` fits its decision privately (:mod:`.decision`): at epsilon 1
    #: its one release over 262,144 hashed SMS features pointed the coefficients at
    #: random (accuracy 0.53 against the majority's 0.87).
    calibrated_decision = True

    def check(self, problem, options, epsilon, delta):
        options = {**_DEFAULTS, **options}
        validate_params(OPTION_CONSTRAINTS, options, f"solver {self.name!r}")
        if options["domain"] != "none" and options["radius"] is None:
            raise ValueError(f"domain={options['domain']!r} needs a radius")
        pure = delta == 0 and math.isfinite(epsilon)
        if pure and options["domain"] != "none":
            raise ValueError(
                "pure DP (delta=0) output perturbation needs the unconstrained domain "
                "(domain='none'): its l1 sensitivity uses theta = -grad F(theta)/lambda; "
                "set delta > 0 for a constrained domain"
            )
        if pure and not math.isfinite(problem.loss.smoothness):
            raise ValueError("pure DP (delta=0) output perturbation needs a smooth loss")
        if not isinstance(problem.loss, LogisticLoss) and problem.target_bound is None:
            raise ValueError(f"{problem.loss!r} needs a public target_bound")

    def plan(self, problem, shape, epsilon, delta, options):
        options = {**_DEFAULTS, **options}
        self.check(problem, options, epsilon, delta)
        n, d, K = shape
        loss = problem.loss
        norm_bound = float(problem.norm_bound)
        intercept_bound = float(options["intercept_bound"]) if problem.fit_intercept else None
        domain, radius, tol = options["domain"], options["radius"], float(options["tol"])
        sparsity, target_bound = problem.sparsity, problem.target_bound
        if target_bound is not None and isinstance(loss, LogisticLoss):
            target_bound = None
        pure = delta == 0
        d_aug = d + (intercept_bound is not None)
        alpha = options["alpha"]
        if alpha is None:
            alpha = self._default_alpha(loss, n, d, d_aug, K, epsilon, delta, norm_bound,
                                        intercept_bound, domain, radius, sparsity,
                                        target_bound)
        bounds = output_perturbation_bounds(
            loss, n=n, d=d, alpha=alpha, norm_bound=norm_bound,
            intercept_bound=intercept_bound, sparsity=sparsity if pure else None,
            target_bound=target_bound, domain=domain, radius=radius, tol=tol,
        )
        _check_representable(alpha, bounds["l1_sensitivity" if pure else "l2_sensitivity"],
                             norm_bound=norm_bound, intercept_bound=intercept_bound,
                             target_bound=target_bound, alpha=options["alpha"], radius=radius)
        # The mechanism depends on public values only; it is built, and a safe path's
        # lattice planned, before the data are read, so an infeasible request fails early.
        safe = _resolve_floating_point_safe(options["floating_point_safe"])
        if pure:
            mech = LaplaceMechanism(bounds["l1_sensitivity"], epsilon=epsilon / K,
                                    floating_point_safe=safe)
            noise_scale = mech.scale
        else:
            sigma = _gaussian_sigma(bounds["l2_sensitivity"], K, epsilon, delta, safe)
            if sigma == 0:  # epsilon = inf: recorded as an infinite spend
                mech = GaussianMechanism(bounds["l2_sensitivity"], epsilon=epsilon,
                                         delta=delta, floating_point_safe=safe)
            else:
                mech = GaussianMechanism(bounds["l2_sensitivity"], sigma=sigma,
                                         floating_point_safe=safe)
            noise_scale = sigma
        granularity = None
        if safe and noise_scale > 0:
            lattice = discrete.plan_laplace if pure else discrete.plan_gaussian
            granularity = lattice(mech.sensitivity, noise_scale, K * d_aug).gamma
        l1_clip = norm_bound * math.sqrt(sparsity) if (pure and sparsity is not None) \
            else math.inf
        return OutputPerturbationPlan(
            solver=self.name, n_samples=n, n_features=d, n_targets=K, epsilon=epsilon,
            delta=delta, events=(mech.event(count=K),), n_iter=1, options=options,
            alpha=float(alpha), bounds=bounds, mechanism=mech, noise_scale=float(noise_scale),
            floating_point_safe=safe, granularity=granularity,
            intercept_bound=intercept_bound, domain=domain, radius=radius,
            max_iter=int(options["max_iter"]), l1_clip=l1_clip,
            objective_bound=_objective_at_zero(loss, target_bound),
        )

    @staticmethod
    def _default_alpha(loss, n, d, d_aug, K, epsilon, delta, norm_bound, intercept_bound,
                       domain, radius, sparsity, target_bound):
        # Evaluated at the per-release budget: epsilon/K for Laplace, epsilon/sqrt(K)
        # for Gaussian noise (the releases compose), delta/K.
        pure = delta == 0
        eps_rule = epsilon / K if pure else epsilon / math.sqrt(K)
        b = 0.0 if intercept_bound is None else intercept_bound
        row_l2 = math.hypot(norm_bound, b)
        if radius is not None or domain != "none":
            D = _domain_l2_radius(domain, radius, d_aug) if domain != "none" else radius
        else:
            D = math.log(max(n, 3)) / row_l2
        tb = 0.0 if target_bound is None else target_bound
        dl_rule = (loss.derivative_bound if isinstance(loss, LogisticLoss)
                   else min(loss.derivative_bound, row_l2 * D + tb))
        s_rule = d_aug if sparsity is None else min(sparsity, d) + (intercept_bound is not None)
        return default_alpha(
            n=n, d=d_aug, s=s_rule, lipschitz=dl_rule * row_l2,
            smoothness=loss.smoothness * row_l2**2, epsilon=eps_rule,
            delta=delta / K, comparator_norm=D,
        )

    def input_clipping(self, problem, plan):
        return None, float(problem.norm_bound), float(plan.l1_clip)

    def solve(self, problem, data, plan, rng):
        n, d, K = plan.n_samples, plan.n_features, plan.n_targets
        Xc = data.rows_clipped(float(problem.norm_bound), plan.l1_clip)
        Y = data.Y
        if problem.target_bound is not None and not isinstance(problem.loss, LogisticLoss):
            Y = np.clip(Y, -problem.target_bound, problem.target_bound)
        if plan.intercept_bound is not None:
            col = np.full((n, 1), plan.intercept_bound)
            Xc = sp.hstack([Xc, sp.csr_matrix(col)], format="csr") if sp.issparse(Xc) \
                else np.hstack([Xc, col])
        thetas = np.empty((K, Xc.shape[1]))
        n_iter = np.empty(K, dtype=int)
        for k in range(K):
            # The public bounds make the solver fall back on a fixed, public number of
            # iterations instead of failing (a failure would depend on the data).
            res = solve_l2_erm(Xc, Y[:, k], problem.loss, plan.alpha,
                               tol=plan.bounds["tol_abs"], domain=plan.domain,
                               radius=plan.radius, max_iter=plan.max_iter,
                               objective_bound=plan.objective_bound,
                               smoothness_bound=plan.bounds["smoothness"] + plan.alpha)
            thetas[k] = res.coef
            n_iter[k] = res.n_iter
        noisy = plan.mechanism.randomise(thetas, rng)
        released = np.vstack([linf_project(row, plan.domain, plan.radius) for row in noisy])
        if plan.intercept_bound is not None:
            coef, intercept = released[:, :d], plan.intercept_bound * released[:, d]
        else:
            coef, intercept = released, np.zeros(K)
        # The solver's iteration count depends on the data and is kept out of the
        # public result; its one release is the public count.
        return SolverResult(coef, intercept, 1, plan.events, {"solver_iterations": n_iter})


_DEFAULTS = {"alpha": None, "domain": "none", "radius": None, "tol": 1e-3,
             "intercept_bound": 1.0, "max_iter": 1000, "floating_point_safe": "auto"}


def fit_output_perturbation(
    X, y, loss, *, alpha=None, epsilon, delta, norm_bound, domain="none", radius=None,
    tol=1e-3, rng=None, accountant=None, fit_intercept=True, intercept_bound=1.0,
    sparsity=None, target_bound=None, max_iter=1000, floating_point_safe="auto",
    return_info=False,
):
    """Differentially private L2-regularised GLM by output perturbation, on arrays.

    A convenience entry to :class:`OutputPerturbation` (the calibration lives there).

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,) or (n_samples, K)
        Targets; labels in {-1, +1} for the logistic loss. A 2-d ``y`` fits K
        problems on the same rows (one-vs-rest) under one joint budget.
    loss : {"logistic", "squared", "huber"} or a loss object
    alpha : float or None
        Regularisation lambda; None uses :func:`default_alpha` (public values only).
    epsilon, delta : float
        Budget of the whole call. ``delta = 0``: Laplace (pure DP, needs
        ``domain="none"``); ``delta > 0``: Gaussian. ``epsilon = np.inf`` adds no noise.
    norm_bound : float
        Public l2 bound on the rows; rows are clipped to it.
    domain : {"none", "box", "l2", "l1"}
        The feasible set of the augmented parameter ``(coef, intercept / b)``.
    radius : float or None
    tol : float
        Relative solver tolerance; the sensitivity grows by this fraction.
    rng : None, int or Generator
    accountant : PrivacyAccountant or None
        Receives the call's privacy events.
    fit_intercept : bool
    intercept_bound : float
        Public value b of the constant feature that carries the intercept.
    sparsity : int or None
        Public bound s on non-zeros per row; with ``delta = 0`` rows are also clipped
        to l1 norm ``norm_bound * sqrt(s)``.
    target_bound : float or None
        Public bound T on ``|y|`` (squared and Huber losses); targets are clipped.
    max_iter : int
    floating_point_safe : {"auto", True, False}
    return_info : bool
        Also return a dict with ``alpha``, the sensitivities, the noise scale, the
        noise path (``floating_point_safe``, ``granularity``) and the accountant: the
        public values of the release. (The optimiser's iteration count is not in it: it
        depends on the rows, and the release does not cover it.)

    Returns
    -------
    coef : ndarray of shape (n_features,) or (K, n_features)
    intercept : float or ndarray of shape (K,)
    info : dict, if ``return_info``
    """
    from ..privacy.accounting import PrivacyAccountant
    from ..utils.validation import check_bound

    loss = make_loss(loss)
    epsilon, delta = check_privacy_params(epsilon, delta)
    norm_bound = check_bound("norm_bound", norm_bound)
    if sparsity is not None and (isinstance(sparsity, bool)
                                 or not isinstance(sparsity, numbers.Integral) or sparsity < 1):
        raise ValueError(f"sparsity must be None or a positive int, got {sparsity!r}")
    if isinstance(loss, SquaredLoss | HuberLoss):
        target_bound = check_bound("target_bound", target_bound)
    X = checked_array(X, accept_sparse=("csr", "csc"), dtype=np.float64)
    with data_free_errors():
        y = np.asarray(y, dtype=np.float64)
    single = y.ndim == 1
    Y = y[:, None] if single else y
    if Y.ndim != 2 or Y.shape[0] != X.shape[0]:
        raise ValueError(f"y must have shape ({X.shape[0]},) or ({X.shape[0]}, K)")
    if not np.all(np.isfinite(Y)):
        raise ValueError("y contains NaN or infinity")
    if isinstance(loss, LogisticLoss) and not np.all(np.abs(Y) == 1):
        raise ValueError("the logistic loss takes labels in {-1, +1}")
    problem = Problem(loss=loss, fit_intercept=fit_intercept, norm_bound=norm_bound,
                      sparsity=sparsity, target_bound=target_bound)
    options = dict(alpha=alpha, domain=domain, radius=radius, tol=tol,
                   intercept_bound=intercept_bound, max_iter=max_iter,
                   floating_point_safe=floating_point_safe)
    solver = OutputPerturbation()
    plan = solver.plan(problem, (X.shape[0], X.shape[1], Y.shape[1]), epsilon, delta,
                       options)
    result = solver.solve(problem, LocalData(X, Y), plan, check_generator(rng))
    accountant = PrivacyAccountant() if accountant is None else accountant
    for event in result.events:
        accountant.record(event)
    coef, intercept = result.coef, result.intercept
    if single:
        coef, intercept = coef[0], float(intercept[0])
    if not return_info:
        return coef, intercept
    info = dict(plan.bounds)
    info.update(
        alpha=plan.alpha, noise="laplace" if delta == 0 else "gaussian",
        noise_scale=plan.noise_scale, floating_point_safe=plan.floating_point_safe,
        granularity=plan.granularity, accountant=accountant, n_releases=Y.shape[1],
    )
    return coef, intercept, info
