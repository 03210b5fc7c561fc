"""Output perturbation with l_inf projection (Ghazi, Guzmán, Kamath, Kumar & Manurangsi,
"Differentially Private Optimization with Sparse Gradients", Section 5, Algorithm 3).

Fit the L2-regularised ERM ``theta = argmin_{theta in X} (1/n) sum_i l(y_i, a_i . theta)
+ (lambda/2) ||theta||^2`` to a certified accuracy, add Gaussian (``delta > 0``) or
Laplace (``delta = 0``) noise calibrated to its sensitivity, and return the point of
the domain ``X`` closest to the noisy vector in the **l_inf** norm.

Data model (all bounds are public hyperparameters, never read from the data)
---------------------------------------------------------------------------------
* Every row ``x_i`` is clipped to l2 norm ``norm_bound = L_x`` (and, for pure DP with a
  public ``sparsity = s``, to l1 norm ``L_x sqrt(s)``, which every row with at most s
  nonzeros already satisfies), so the bounds below hold for any input.
* The intercept is an extra feature of constant public value ``b = intercept_bound``:
  ``a_i = (x_i, b)`` and ``intercept = b * theta_d``. It is regularised and constrained
  like every other coordinate (strong convexity needs it), so the augmented rows have
  ``||a_i||_2 <= A_2 = sqrt(L_x^2 + b^2)`` and ``||a_i||_1 <= A_1 = L_x sqrt(s) + b``
  (``sqrt(d)`` in place of ``sqrt(s)`` without ``sparsity``).
* Regression targets are clipped to ``[-T, T]``, ``T = target_bound``.
* Neighbouring datasets: **replace-one** (n is public).

Constants. ``D_l`` bounds ``|dl/dz|`` where it is needed, ``lambda`` is ``alpha``:

* logistic: ``D_l = 1``; Huber with threshold k: ``D_l = min(k, A_2 W + T)``; squared:
  ``D_l = A_2 W + T``. For the squared loss the derivative is unbounded, but the
  constrained or unconstrained minimiser satisfies ``(lambda/2)||theta*||^2 <= G(theta*)
  <= G(0) <= T^2/2``, so ``||theta*||_2 <= W = min(T / sqrt(lambda), R_2(X))`` with
  ``R_2(X)`` the l2 radius of the domain, and ``|a . theta* - y| <= A_2 W + T`` at every
  minimiser the proofs below evaluate the derivative at. No bounded domain is needed.
* Lipschitz constant ``L = D_l A_2``; smoothness ``H = l''_max A_2^2`` with
  ``l''_max = 1/4`` (logistic) or 1 (squared, Huber).
* Solver tolerance: the solver certifies ``||theta - theta*||_2 <= g / lambda`` with
  ``g = tol * L / n`` (:func:`skdp_sparse.optim.erm.solve_l2_erm`), so the tolerance
  term ``2g/lambda`` is the fraction ``tol`` of the exact-minimiser sensitivity.

Sensitivities of the released ``theta`` (replace-one)
-----------------------------------------------------
* l2 (approximate DP): ``Delta_2 = 2 L / (lambda n) + 2 g / lambda``. For exact
  minimisers of S and S' (``theta``, ``theta'``), lambda-strong convexity and the
  optimality conditions give ``lambda ||theta - theta'||^2 <= (1/n) <grad l(z_k; theta')
  - grad l(z'_k; theta'), theta - theta'>`` so ``||theta - theta'|| <= 2L/(lambda n)``
  (Chaudhuri, Monteleoni & Sarwate 2011, Cor. 8; Bousquet & Elisseeff 2002); this holds
  for constrained minimisers too. The paper's proof quotes ``4L/(lambda n)``; its
  noise (``sigma^2 = 8 L^2 ln(1.25/delta)/(lambda eps n)^2``) corresponds to ``2L/(lambda n)``.
  The released point is within ``g/lambda`` of each exact minimiser: ``+ 2g/lambda``.
* l1 (pure DP, unconstrained domain): the paper's proof of Theorem 5.1 written for a
  GLM. With ``theta = -(1/lambda) grad F_S(theta)`` (needs ``X = R^d``)::

      lambda n ||theta - theta'||_1
        <= sum_{i != k} |l'(a_i.theta) - l'(a_i.theta')| ||a_i||_1
           + ||l'(a_k.theta) a_k - l'(a'_k.theta') a'_k||_1
        <= (n-1) l''_max A_2 A_1 ||theta - theta'||_2 + 2 D_l A_1,
      ||theta - theta'||_1 <= (2 D_l A_1 / (lambda n)) (1 + H (n-1) / (lambda n)),

  using ``|a.(theta - theta')| <= A_2 ||theta - theta'||_2`` and the l2 bound above. For
  rows with at most s nonzeros and ``||x||_2 <= L_x``, ``D_l A_1 <= sqrt(s+1) L``, so this
  is at most the paper's ``(2 sqrt(2s') L/(lambda n))(2H/lambda + 1)`` with ``s' = s + 1``
  (the intercept feature; ``L_x sqrt(s) + b <= sqrt(s+1) A_2``): a GLM's gradient
  difference on one row lies on that row's support (s, not 2s, coordinates) and the
  l2 sensitivity is ``2L/(lambda n)``, not ``4L/(lambda n)``. Every vector of R^d also
  has ``||v||_1 <= sqrt(d) ||v||_2``, so the bound used is
  ``Delta_1 = min(that, sqrt(d) 2L/(lambda n)) + sqrt(d) 2g/lambda``.

Mechanisms: Gaussian with ``Delta_2`` and analytic calibration (Balle & Wang 2018,
Thm 8), or Laplace with scale ``Delta_1 / epsilon`` (Dwork et al. 2006); on the
floating-point-safe path (the default, below) their discrete counterparts. The l_inf
projection is post-processing.

Floating-point safety (``floating_point_safe``). Adding a double drawn by
``rng.normal`` or ``rng.laplace`` to the double ``theta`` leaks the low-order bits of
``theta`` (Mironov 2012). The safe path rounds ``theta`` to a lattice ``gamma Z`` fixed
by public values (the sensitivity, the noise scale and ``K d``) and adds exact discrete
Laplace or discrete Gaussian noise (:mod:`skdp_sparse.privacy.discrete`); every release
is a multiple of ``gamma``. The rounding is paid for by a relative ``2^-16`` on the
sensitivity, and the discrete Gaussian is accounted in zCDP (``rho`` per release, K
releases adding up), so for a given ``(epsilon, delta)`` its ``sigma`` is 4 to 9%
larger than the analytic calibration's. ``"auto"`` (the default) takes the safe path
for both mechanisms: the vector is released once, so the exact sampler costs little
next to the solver. Measured with Gaussian noise at epsilon = 1, delta = 1/n^2
(``benchmarks/bench_fp_safe.py``): a fit takes about 3% longer on a9a (32561 x 123)
and 8 to 9% longer on reuters (7770 x 8315) when it calibrates its noise afresh (2%
and 4% when a fit with the same public values has cached the calibration), with the
same test accuracy.

Several problems on the same rows (one-vs-rest): replacing a row changes all K
solutions, each by at most the bounds above. Laplace: each release gets
``epsilon / K`` (basic composition; the concatenation has l1 sensitivity
``K Delta_1``, so nothing tighter exists). Gaussian: the K releases are calibrated
jointly so that their exact composition (K Gaussian mechanisms of ratio ``mu`` compose
to one of ratio ``sqrt(K) mu``, Dong, Roth & Su 2019; K discrete Gaussian releases of
``rho`` each are ``K rho``-zCDP) meets ``(epsilon, delta)``; this needs less noise
than running each at ``(epsilon/K, delta/K)``, which is also valid. The safe path
rounds the K x d release on one lattice planned for ``K d`` coordinates, finer than a
single row needs, so each row keeps its own guarantee.

Default lambda (``alpha=None``): the tuning rules of Theorem 5.1 (empirical risk),
with confidence ``beta = 0.05``, ``s`` the public sparsity plus the intercept (d
without ``sparsity``), evaluated at the per-release budget (``epsilon/K`` for Laplace,
``epsilon/sqrt(K)`` for Gaussian, ``delta/K``), from public values only::

    delta > 0: lambda = (L/D) (s ln(1/delta) ln(d/beta))^(1/4) / sqrt(eps n)
    delta = 0: lambda = (L^2 H s ln(d/beta) / (D^2 eps n))^(1/3)
    no noise:  lambda = (L/D) sqrt(ln(n) ln(1/beta) / n)   (stability term of Thm 5.6)

Theorem 5.6's approximate-DP rule adds that stability term under the square root; it
comes from a worst-case generalisation bound and dominates for epsilon above about 1,
where it over-regularises, so the empirical-risk rule is the default.

``D`` bounds the norm of the comparator: the l2 radius of a bounded domain, else
``radius`` if given, else ``ln(n) / A_2`` (a comparator whose margins on rows at the
norm bound reach ``ln n``, beyond which a logistic loss term changes by less than
``1/n``). For the squared loss, ``L`` in the rule is taken at ``W = D``.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_array, check_is_fitted

from .._validation import (
    check_bound,
    check_floating_point_safe,
    check_privacy_params,
    validate_sparse_data,
)
from ..base import DPEstimatorMixin
from ..optim.erm import solve_l2_erm
from ..optim.linf_projections import DOMAINS, linf_project
from ..optim.losses import HuberLoss, LogisticLoss, SquaredLoss
from ..privacy import discrete
from ..privacy._random import check_generator
from ..privacy.accounting import PrivacyAccountant, compose
from ..privacy.clipping import clip_rows
from ..privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from ..utils._labels import encode_labels

__all__ = [
    "DPOutputPerturbation",
    "DPOutputPerturbationClassifier",
    "DPOutputPerturbationRegressor",
    "fit_output_perturbation",
    "output_perturbation_bounds",
    "default_alpha",
]

_CONFIDENCE_BETA = 0.05


# ---------------------------------------------------------------------------
# Public constants of a fit
# ---------------------------------------------------------------------------
def _make_loss(loss, huber_threshold=1.0):
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
    means no intercept. See the module docstring for every formula and its proof.

    Returns
    -------
    dict with keys ``row_l2`` (A_2), ``row_l1`` (A_1), ``derivative_bound`` (D_l),
    ``lipschitz`` (L), ``smoothness`` (H), ``tol_abs`` (g), ``l2_sensitivity``,
    ``l1_sensitivity``, ``l1_sensitivity_sparse``, ``l1_sensitivity_dense``.
    """
    loss = _make_loss(loss)
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

    ``d`` and ``s`` count the intercept if there is one. ``epsilon = inf`` (no noise)
    uses the stability term of Theorem 5.6, ``(L/D) sqrt(ln(n) ln(1/beta) / n)``.
    """
    L, H, D = lipschitz, smoothness, comparator_norm
    if math.isinf(epsilon):
        return L / D * math.sqrt(math.log(max(n, 3)) * math.log(1 / beta) / n)
    if delta > 0:
        return L / D * (s * math.log(1 / delta) * math.log(d / beta)) ** 0.25 / math.sqrt(
            epsilon * n
        )
    return (L**2 * H * s * math.log(d / beta) / (D**2 * epsilon * n)) ** (1 / 3)


# ---------------------------------------------------------------------------
# The fit
# ---------------------------------------------------------------------------
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
    while compose([_gaussian_event(sensitivity, sigma, count, safe)], delta)[0] > epsilon:
        sigma = math.nextafter(sigma, math.inf)
    return sigma


def _gaussian_event(sensitivity, sigma, count, safe):
    return GaussianMechanism(sensitivity, sigma=sigma, floating_point_safe=safe).event(count)


def _resolve_floating_point_safe(value):
    """The noise path of a fit. ``"auto"`` is safe for both mechanisms: the release is
    one vector, so even the discrete Gaussian's slower sampler and zCDP calibration
    cost under 10% of a fit on a9a or reuters (module docstring)."""
    return True if value == "auto" else bool(value)


def _check_params(epsilon, delta, norm_bound, intercept_bound, fit_intercept, sparsity,
                  domain, radius, tol, alpha, target_bound, loss, max_iter,
                  floating_point_safe="auto"):
    epsilon, delta = check_privacy_params(epsilon, delta)
    check_floating_point_safe(floating_point_safe)
    norm_bound = check_bound("norm_bound", norm_bound)
    intercept_bound = check_bound("intercept_bound", intercept_bound) if fit_intercept else None
    if sparsity is not None and (
        isinstance(sparsity, bool) or not isinstance(sparsity, numbers.Integral) or sparsity < 1
    ):
        raise ValueError(f"sparsity must be None or a positive int, got {sparsity!r}")
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    if domain != "none":
        radius = check_bound("radius", radius)
    elif radius is not None:
        radius = check_bound("radius", radius)
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not (0 < tol < math.inf):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    if alpha is not None:
        alpha = check_bound("alpha", alpha)
    if isinstance(loss, SquaredLoss | HuberLoss):
        target_bound = check_bound("target_bound", target_bound)
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive int, got {max_iter!r}")
    pure = delta == 0 and math.isfinite(epsilon)
    if pure and domain != "none":
        raise ValueError(
            "pure DP (delta=0) output perturbation needs the unconstrained domain "
            "(domain='none'): its l1 sensitivity uses theta = -grad F(theta)/lambda; "
            "set delta > 0 for a constrained domain"
        )
    if pure and not math.isfinite(loss.smoothness):
        raise ValueError("pure DP (delta=0) output perturbation needs a smooth loss")
    return (epsilon, delta, norm_bound, intercept_bound, radius, float(tol), alpha,
            target_bound)


def fit_output_perturbation(
    X, y, loss, *, alpha=None, epsilon, delta, norm_bound, domain="none", radius=None,
    tol=1e-3, rng=None, accountant=None, fit_intercept=True, intercept_bound=1.0,
    sparsity=None, target_bound=None, max_iter=1000, floating_point_safe="auto",
    return_info=False,
):
    """Differentially private L2-regularised GLM by output perturbation (Algorithm 3).

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
        CSR/CSC stay sparse; other sparse formats are converted to CSR.
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
        Public l2 bound L_x on the rows; rows are clipped to it.
    domain : {"none", "box", "l2", "l1"}
        The feasible set of the augmented parameter ``(coef, intercept / b)``: R^d,
        ``[-radius, radius]^d`` or the l2 / l1 ball of that radius.
    radius : float or None
        Radius of the domain; with ``domain="none"`` an optional bound on the
        comparator norm used by the default ``alpha``.
    tol : float
        Relative solver tolerance; the sensitivity grows by this fraction.
    rng : None, int or Generator
    accountant : PrivacyAccountant or None
        Receives the call's privacy events (a new one if None).
    fit_intercept : bool
    intercept_bound : float
        Public value b of the constant feature that carries the intercept.
    sparsity : int or None
        Public bound s on nonzeros per row; with ``delta = 0`` rows are also clipped
        to l1 norm ``norm_bound * sqrt(s)``.
    target_bound : float or None
        Public bound T on ``|y|`` (squared and Huber losses); targets are clipped.
    max_iter : int
    floating_point_safe : {"auto", True, False}
        Lattice rounding and exact discrete noise (True), or noise drawn in doubles
        (False, not private against an adversary who reads the low-order bits of the
        output). ``"auto"``: safe, for both mechanisms (see the module docstring).
    return_info : bool
        Also return a dict with ``alpha``, the sensitivities, the noise scale, the
        noise path (``floating_point_safe``, ``granularity``: the lattice step of the
        safe path, None otherwise), ``n_iter`` and the accountant.

    Returns
    -------
    coef : ndarray of shape (n_features,) or (K, n_features)
    intercept : float or ndarray of shape (K,)
    info : dict, if ``return_info``
    """
    loss = _make_loss(loss)
    (epsilon, delta, norm_bound, intercept_bound, radius, tol, alpha,
     target_bound) = _check_params(epsilon, delta, norm_bound, intercept_bound,
                                   fit_intercept, sparsity, domain, radius, tol, alpha,
                                   target_bound, loss, max_iter, floating_point_safe)
    X = check_array(X, accept_sparse=("csr", "csc"), dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    single = y.ndim == 1
    Y = y[:, None] if single else y
    if Y.ndim != 2 or Y.shape[0] != X.shape[0]:
        raise ValueError(f"y must have shape ({X.shape[0]},) or ({X.shape[0]}, K)")
    if not np.all(np.isfinite(Y)):
        raise ValueError("y contains NaN or infinity")
    if isinstance(loss, LogisticLoss) and not np.all(np.abs(Y) == 1):
        raise ValueError("the logistic loss takes labels in {-1, +1}")
    n, d = X.shape
    K = Y.shape[1]
    pure = delta == 0
    rng = check_generator(rng)
    accountant = PrivacyAccountant() if accountant is None else accountant

    # Clipping makes every sensitivity hold whatever the input.
    max_l1 = norm_bound * math.sqrt(sparsity) if (pure and sparsity is not None) else np.inf
    Xc = clip_rows(X, norm_bound, max_l1)
    if sp.issparse(Xc):
        Xc = sp.csr_matrix(Xc)
    if target_bound is not None:
        Y = np.clip(Y, -target_bound, target_bound)
    if intercept_bound is not None:
        col = np.full((n, 1), intercept_bound)
        Xc = sp.hstack([Xc, sp.csr_matrix(col)], format="csr") if sp.issparse(Xc) \
            else np.hstack([Xc, col])
    d_aug = Xc.shape[1]

    # Per-release budget, used only by the default alpha.
    eps_rule = epsilon / K if pure else epsilon / math.sqrt(K)
    if alpha is None:
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
        alpha = default_alpha(
            n=n, d=d_aug, s=s_rule, lipschitz=dl_rule * row_l2,
            smoothness=loss.smoothness * row_l2**2, epsilon=eps_rule,
            delta=delta / K, comparator_norm=D,
        )
    bounds = output_perturbation_bounds(
        loss, n=n, d=d, alpha=alpha, norm_bound=norm_bound,
        intercept_bound=intercept_bound, sparsity=sparsity if pure else None,
        target_bound=target_bound, domain=domain, radius=radius, tol=tol,
    )

    # The mechanism depends on public values only; it is built, and a safe path's
    # lattice planned, before the data are used, so an infeasible request fails early.
    safe = _resolve_floating_point_safe(floating_point_safe)
    if pure:
        mech = LaplaceMechanism(bounds["l1_sensitivity"], epsilon=epsilon / K,
                                floating_point_safe=safe)
        noise_scale = mech.scale
    else:
        sigma = _gaussian_sigma(bounds["l2_sensitivity"], K, epsilon, delta, safe)
        if sigma == 0:  # epsilon = inf: recorded as an infinite spend
            mech = GaussianMechanism(bounds["l2_sensitivity"], epsilon=epsilon, delta=delta,
                                     floating_point_safe=safe)
        else:
            mech = GaussianMechanism(bounds["l2_sensitivity"], sigma=sigma,
                                     floating_point_safe=safe)
        noise_scale = sigma
    granularity = None
    if safe and noise_scale > 0:
        plan = discrete.plan_laplace if pure else discrete.plan_gaussian
        granularity = plan(mech.sensitivity, noise_scale, K * d_aug).gamma

    thetas = np.empty((K, d_aug))
    n_iter = np.empty(K, dtype=int)
    for k in range(K):
        res = solve_l2_erm(Xc, Y[:, k], loss, alpha, tol=bounds["tol_abs"], domain=domain,
                           radius=radius, max_iter=max_iter)
        thetas[k] = res.coef
        n_iter[k] = res.n_iter

    accountant.record(mech.event(count=K))
    noisy = mech.randomise(thetas, rng)
    released = np.vstack([linf_project(row, domain, radius) for row in noisy])

    if intercept_bound is not None:
        coef, intercept = released[:, :d], intercept_bound * released[:, d]
    else:
        coef, intercept = released, np.zeros(K)
    if single:
        coef, intercept = coef[0], float(intercept[0])
    if not return_info:
        return coef, intercept
    info = dict(bounds)
    info.update(
        alpha=float(alpha), noise="laplace" if pure else "gaussian",
        noise_scale=float(noise_scale), floating_point_safe=safe, granularity=granularity,
        n_iter=n_iter, accountant=accountant, n_releases=K,
    )
    return coef, intercept, info


# ---------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------
_COMMON_DOC = """
    Privacy: ``(epsilon, delta)``-DP for **replace-one** neighbouring datasets (n is
    public), for any input: rows are clipped to ``norm_bound`` (and targets to
    ``target_bound``) before use. The sensitivity bounds and the theorems behind them
    are in :mod:`skdp_sparse.linear_model._output_perturbation`.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget of the fit; ``np.inf`` adds no noise.
    delta : float, default=0.0
        ``0``: pure DP with Laplace noise (needs ``domain="none"``); ``> 0``: Gaussian
        noise (see ``floating_point_safe`` for its calibration). A common choice is
        ``1 / n_samples**2``.
    norm_bound : float, default=1.0
        Public bound L_x on the l2 norm of rows; larger rows are scaled down to it.
    sparsity : int or None, default=None
        Public bound s on the nonzeros per row. With ``delta=0`` rows are also
        clipped to l1 norm ``norm_bound * sqrt(s)`` and the sparse l1 sensitivity
        applies; it also enters the default ``alpha``.
    alpha : float or None, default=None
        Regularisation lambda of ``(1/n) sum l + (lambda/2) ||w||^2``. None: the tuning
        rule of the paper's Theorem 5.1 from public values (n, d, bounds, budget).
    domain : {"none", "box", "l2", "l1"}, default="none"
        Feasible set of the parameter ``(coef_, intercept_ / intercept_bound)``: the whole
        space, the box ``[-radius, radius]^d``, or the l2 / l1 ball of that radius. The
        ERM is solved on it and the noisy solution is projected back onto it in the
        l_inf norm.
    radius : float or None, default=None
        Radius of a bounded domain (required then). With ``domain="none"``, an optional
        bound on the norm of a good parameter, used only by the default ``alpha``.
    tol : float, default=1e-3
        Relative solver tolerance: the solver stops once it certifies
        ``||grad|| <= tol * L / n``, which adds the fraction ``tol`` to the sensitivity.
    fit_intercept : bool, default=True
        Fit an intercept as the coefficient of an extra feature of constant value
        ``intercept_bound`` (so it is regularised and clipped like the others).
    intercept_bound : float, default=1.0
        Public value of that constant feature.
    max_iter : int, default=1000
        Iteration budget per solver stage; the fit raises if the certificate is not
        reached (no noise calibrated for an unverified accuracy is ever released).
    floating_point_safe : {"auto", True, False}, default="auto"
        True: round the solution to a lattice ``gamma Z`` (``gamma`` a power of two
        fixed by public values) and add exact discrete Laplace or discrete Gaussian
        noise, so the output's low-order bits carry nothing about the data
        (:ref:`security`); the rounding costs a relative ``2^-16`` of sensitivity and
        is included in the reported spend. With ``delta > 0`` the discrete Gaussian
        is accounted in zCDP, which needs a ``sigma`` 4 to 9% larger than the analytic
        calibration of ``False``. False: continuous noise added in doubles, not
        private against an adversary who reads the low-order bits. ``"auto"``: True
        for both mechanisms, the extra time being small next to the solver (with
        Gaussian noise a fit took about 3% longer on a9a and 9% on reuters, with the
        same test accuracy; ``benchmarks/bench_fp_safe.py``).
    random_state : None, int or numpy.random.Generator, default=None
        None draws fresh OS entropy (use it for releases); an int is reproducible.
"""

_FITTED_DOC = """    alpha_ : float
        The regularisation used (computed from public values only when ``alpha=None``).
    epsilon_spent_, delta_spent_ : float
        The composed guarantee of the fit (at most ``epsilon, delta``).
    privacy_events_ : tuple of PrivacyEvent
    n_features_in_ : int
"""


class _BaseOutputPerturbation(DPEstimatorMixin, BaseEstimator):
    """Parameters, validation and the call to :func:`fit_output_perturbation`."""

    def __init__(self, *, epsilon=1.0, delta=0.0, norm_bound=1.0, sparsity=None,
                 alpha=None, domain="none", radius=None, tol=1e-3, fit_intercept=True,
                 intercept_bound=1.0, max_iter=1000, floating_point_safe="auto",
                 random_state=None):
        self.epsilon = epsilon
        self.delta = delta
        self.norm_bound = norm_bound
        self.sparsity = sparsity
        self.alpha = alpha
        self.domain = domain
        self.radius = radius
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.intercept_bound = intercept_bound
        self.max_iter = max_iter
        self.floating_point_safe = floating_point_safe
        self.random_state = random_state

    def _loss(self):
        raise NotImplementedError

    def _target_bound(self):
        return None

    def _check_all_params(self, y):
        """Every hyperparameter check, before the data are looked at."""
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        _check_params(self.epsilon, self.delta, self.norm_bound, self.intercept_bound,
                      self.fit_intercept, self.sparsity, self.domain, self.radius, self.tol,
                      self.alpha, self._target_bound(), self._loss(), self.max_iter,
                      self.floating_point_safe)

    def _fit_core(self, X, Y):
        self._check_budget(float(self.epsilon), float(self.delta))
        accountant = PrivacyAccountant()
        coef, intercept, info = fit_output_perturbation(
            X, Y, self._loss(), alpha=self.alpha, epsilon=self.epsilon, delta=self.delta,
            norm_bound=self.norm_bound, domain=self.domain, radius=self.radius,
            tol=self.tol, rng=check_generator(self.random_state), accountant=accountant,
            fit_intercept=self.fit_intercept, intercept_bound=self.intercept_bound,
            sparsity=self.sparsity, target_bound=self._target_bound(),
            max_iter=self.max_iter, floating_point_safe=self.floating_point_safe,
            return_info=True,
        )
        self.alpha_ = info["alpha"]
        # The solver's iteration count depends on the data and is not covered by the
        # guarantee, so it is not kept as a fitted attribute.
        self._record_spend(accountant, float(self.delta))
        return coef, intercept


class DPOutputPerturbationClassifier(ClassifierMixin, _BaseOutputPerturbation):
    __doc__ = (
        """Differentially private logistic regression by output perturbation.

    Solves the L2-regularised logistic regression to a certified accuracy, adds
    noise calibrated to its sensitivity and projects the result onto ``domain`` in
    the l_inf norm (Ghazi et al., Algorithm 3, Theorems 5.1 and 5.6). Binary problems
    fit one model; with K > 2 classes, K one-vs-rest models share the budget: with
    ``delta=0`` each gets ``epsilon / K`` (basic composition), with ``delta > 0`` their
    Gaussian noise is calibrated jointly so the exact composition meets
    ``(epsilon, delta)`` (less noise than ``(epsilon/K, delta/K)`` each).

    Design: one class per task type (this classifier and
    :class:`DPOutputPerturbationRegressor`) sharing ``_BaseOutputPerturbation``, so
    each has fixed scikit-learn tags and a ``loss``-independent estimator type, which
    keeps ``clone``, meta-estimators and ``check_estimator`` sound.
    ``DPOutputPerturbation`` is this classifier under its short name.

    Accepts CSR/CSC matrices without densifying them.
"""
        + _COMMON_DOC
        + """    classes : array-like of labels, default=None
        The public label set; ``classes_`` is its sorted copy whatever labels the
        training data hold, and a label outside it raises ``ValueError`` before any
        budget is spent. ``None`` reads it from ``y`` (not covered by the guarantee;
        emits :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
"""
        + _FITTED_DOC
    )

    def __init__(self, *, epsilon=1.0, delta=0.0, norm_bound=1.0, sparsity=None,
                 alpha=None, domain="none", radius=None, tol=1e-3, fit_intercept=True,
                 intercept_bound=1.0, max_iter=1000, floating_point_safe="auto",
                 classes=None, random_state=None):
        super().__init__(epsilon=epsilon, delta=delta, norm_bound=norm_bound,
                         sparsity=sparsity, alpha=alpha, domain=domain, radius=radius,
                         tol=tol, fit_intercept=fit_intercept,
                         intercept_bound=intercept_bound, max_iter=max_iter,
                         floating_point_safe=floating_point_safe,
                         random_state=random_state)
        self.classes = classes

    def _loss(self):
        return LogisticLoss()

    def fit(self, X, y):
        """Fit on ``X`` (dense or sparse) and labels ``y``."""
        self._check_all_params(y)
        X, y = validate_sparse_data(self, X, y)
        classes, codes = encode_labels(y, self.classes, type(self).__name__)
        self.classes_ = classes
        if classes.size == 2:
            Y = np.where(codes == 1, 1.0, -1.0)[:, None]
        else:
            Y = np.where(codes[:, None] == np.arange(classes.size)[None, :], 1.0, -1.0)
        coef, intercept = self._fit_core(X, Y)
        self.coef_ = np.atleast_2d(coef)
        self.intercept_ = np.atleast_1d(np.asarray(intercept, dtype=float))
        return self

    def decision_function(self, X):
        """``X @ coef_.T + intercept_``; shape (n_samples,) for two classes."""
        check_is_fitted(self)
        X = validate_sparse_data(self, X, reset=False)
        scores = np.asarray(X @ self.coef_.T) + self.intercept_
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict(self, X):
        """The class of the largest score (of positive score for two classes)."""
        scores = self.decision_function(X)
        idx = (scores > 0).astype(int) if scores.ndim == 1 else np.argmax(scores, axis=1)
        return self.classes_[idx]

    def predict_proba(self, X):
        """Sigmoid of the decision function; one-vs-rest scores normalised to sum to 1."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1.0 - p, p])
        p = expit(scores)
        return p / p.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        return np.log(self.predict_proba(X))


class DPOutputPerturbationRegressor(RegressorMixin, _BaseOutputPerturbation):
    __doc__ = (
        """Differentially private L2-regularised linear regression by output perturbation.

    Squared or Huber loss; targets are clipped to ``[-target_bound, target_bound]``.
    For the squared loss the Lipschitz constant is taken on the ball
    ``||theta|| <= min(target_bound / sqrt(alpha), l2 radius of the domain)`` that contains
    every minimiser, so no bounded domain is required (see the module docstring).
"""
        + _COMMON_DOC
        + """    loss : {"squared", "huber"}, default="squared"
    huber_threshold : float, default=1.0
        Threshold of the Huber loss (quadratic for residuals below it).
    target_bound : float, default=1.0
        Public bound on ``|y|``; scale targets so that it is meaningful.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
"""
        + _FITTED_DOC
    )

    def __init__(self, *, loss="squared", huber_threshold=1.0, target_bound=1.0,
                 epsilon=1.0, delta=0.0, norm_bound=1.0, sparsity=None, alpha=None,
                 domain="none", radius=None, tol=1e-3, fit_intercept=True,
                 intercept_bound=1.0, max_iter=1000, floating_point_safe="auto",
                 random_state=None):
        super().__init__(epsilon=epsilon, delta=delta, norm_bound=norm_bound,
                         sparsity=sparsity, alpha=alpha, domain=domain, radius=radius,
                         tol=tol, fit_intercept=fit_intercept,
                         intercept_bound=intercept_bound, max_iter=max_iter,
                         floating_point_safe=floating_point_safe,
                         random_state=random_state)
        self.loss = loss
        self.huber_threshold = huber_threshold
        self.target_bound = target_bound

    def _loss(self):
        if self.loss not in ("squared", "huber"):
            raise ValueError(f"loss must be 'squared' or 'huber', got {self.loss!r}")
        if self.loss == "huber":
            return HuberLoss(check_bound("huber_threshold", self.huber_threshold))
        return SquaredLoss()

    def _target_bound(self):
        return self.target_bound

    def fit(self, X, y):
        """Fit on ``X`` (dense or sparse) and real targets ``y``."""
        self._check_all_params(y)
        X, y = validate_sparse_data(self, X, y, y_numeric=True)
        coef, intercept = self._fit_core(X, y)
        self.coef_ = coef
        self.intercept_ = intercept
        return self

    def predict(self, X):
        """``X @ coef_ + intercept_``."""
        check_is_fitted(self)
        X = validate_sparse_data(self, X, reset=False)
        return np.asarray(X @ self.coef_).ravel() + self.intercept_


# The short name is the classifier (logistic loss, the paper's main use); an alias,
# not a subclass, so clone() and repr() name one class.
DPOutputPerturbation = DPOutputPerturbationClassifier
