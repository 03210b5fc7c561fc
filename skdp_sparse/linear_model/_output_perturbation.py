"""Output perturbation estimators: certified L2-regularised ERM plus calibrated noise
(the solver and its calibration: :mod:`skdp_sparse.solvers.output_perturbation`)."""

from __future__ import annotations

from sklearn.base import ClassifierMixin, RegressorMixin

from ..optim.losses import LogisticLoss
from ..solvers import Problem
from ..solvers.output_perturbation import OPTION_CONSTRAINTS
from ..utils._warnings import warn_float_noise
from ..utils.validation import Bound, Options
from ._base import (
    COMMON_CONSTRAINTS,
    DPLinearModel,
    LinearClassifierMixin,
    LinearRegressorMixin,
    TargetRangeMixin,
)

__all__ = [
    "DPOutputPerturbation",
    "DPOutputPerturbationClassifier",
    "DPOutputPerturbationRegressor",
]

_COMMON_DOC = """
    Privacy: ``(epsilon, delta)``-DP for **replace-one** neighbouring datasets (n is
    public), for any input: rows are clipped to ``norm_bound`` (and targets to
    ``target_bound``) before use. The sensitivity bounds and the theorems behind them
    are in :mod:`skdp_sparse.solvers.output_perturbation` and the proofs page.

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
        rule of the paper's Theorem 5.1 from public values (n, d, bounds, budget),
        never below ``L / (D n)``, the weight of one row (the value at
        ``epsilon=np.inf``).
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
        Iteration budget per solver stage (no noise calibrated for an unverified
        accuracy is ever released).
    floating_point_safe : {"auto", True, False}, default="auto"
        True: round the solution to a lattice ``gamma Z`` (``gamma`` a power of two
        fixed by public values) and add exact discrete Laplace or discrete Gaussian
        noise, so the output's low-order bits carry nothing about the data
        (:ref:`security`); the rounding costs a relative ``2^-16`` of sensitivity and
        is included in the reported spend. With ``delta > 0`` the discrete Gaussian
        is accounted in zCDP, which needs a ``sigma`` 4 to 9% larger than the analytic
        calibration of ``False``. False: continuous noise added in doubles, not
        private against an adversary who reads the low-order bits (the fit emits
        :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`). ``"auto"``: True
        for both mechanisms, the extra time being small next to the solver (with
        Gaussian noise a fit took about 3% longer on a9a and 9% on reuters, with the
        same test accuracy; ``benchmarks/bench_fp_safe.py``).
    random_state : None, int or numpy.random.Generator, default=None
        None draws fresh OS entropy (use it for releases); an int is reproducible.
    ledger : PrivacyLedger, default=None
        A ledger the fit reports to besides the active ones (see
        :func:`~skdp_sparse.privacy_ledger`); it travels with the estimator through
        ``clone`` and pickling, so it reaches fits in processes an activation does not
        (those a worker starts, or a ray or dask task), and its cap holds there.
    clip_predict : bool, default=True
        Predict as the fit saw its rows: every prediction method clips new rows to
        ``norm_bound`` (and the l1 norm ``norm_bound * sqrt(sparsity)`` where the fit
        used it), as the fit clipped the training rows (``input_clipping_``). False
        predicts on the rows as given. Public bounds only: costs no privacy.
"""

_FITTED_DOC = """    alpha_ : float
        The regularisation used (computed from public values only when ``alpha=None``).
    n_iter_ : int
        Number of noisy releases (1): the solver's own iteration count depends on
        the data and is not released.
    epsilon_spent_, delta_spent_ : float
        The composed guarantee of the fit (at most ``epsilon, delta``).
    privacy_events_ : tuple of PrivacyEvent
    input_clipping_ : tuple (feature_bound, norm_bound, l1_bound)
        The public clipping the solver applied to the training rows (``None`` or
        ``inf`` where it applied none), which ``clip_predict`` applies to new rows.
    n_features_in_ : int
"""


class _BaseOutputPerturbation(DPLinearModel):
    """Parameters of output perturbation and its call through the registry."""

    _parameter_constraints = {**COMMON_CONSTRAINTS, **OPTION_CONSTRAINTS}

    def __init__(self, *, epsilon=1.0, delta=0.0, norm_bound=1.0, sparsity=None,
                 alpha=None, domain="none", radius=None, tol=1e-3, fit_intercept=True,
                 intercept_bound=1.0, max_iter=1000, floating_point_safe="auto",
                 random_state=None, clip_predict=True, ledger=None):
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
        self.ledger = ledger
        self.clip_predict = clip_predict

    def _check_dp_rules(self):
        if self.floating_point_safe is False:
            warn_float_noise(type(self).__name__)

    def _solver_name(self, public):
        return "output_perturbation"

    def _target_bound(self):
        return None

    def _problem(self, n_features, solver=None):
        return Problem(loss=self._loss(), fit_intercept=bool(self.fit_intercept),
                       norm_bound=float(self.norm_bound), sparsity=self.sparsity,
                       target_bound=self._target_bound())

    def _solver_options(self):
        return {"alpha": self.alpha, "domain": self.domain, "radius": self.radius,
                "tol": self.tol, "intercept_bound": self.intercept_bound,
                "max_iter": self.max_iter, "floating_point_safe": self.floating_point_safe}

    def _fitted_attributes(self, public, plan, result):
        attributes = super()._fitted_attributes(public, plan, result)
        # A calibrated decision's plan holds the solver's as ``inner``.
        attributes["alpha_"] = getattr(plan.plan, "inner", plan.plan).alpha
        return attributes


class DPOutputPerturbationClassifier(LinearClassifierMixin, ClassifierMixin,
                                     _BaseOutputPerturbation):
    __doc__ = (
        """Differentially private logistic regression by output perturbation.

    Solves the L2-regularised logistic regression to a certified accuracy, adds
    noise calibrated to its sensitivity and projects the result onto ``domain`` in
    the l_inf norm (Ghazi et al., Algorithm 3, Theorems 5.1 and 5.6). Binary problems
    fit one model; with K > 2 classes, K one-vs-rest models share the budget: with
    ``delta=0`` each gets ``epsilon / K`` (basic composition), with ``delta > 0`` their
    Gaussian noise is calibrated jointly so the exact composition meets
    ``(epsilon, delta)`` (less noise than ``(epsilon/K, delta/K)`` each).

    ``DPOutputPerturbation`` is this classifier under its short name.

    Accepts CSR/CSC matrices without densifying them.
"""
        + _COMMON_DOC
        + """    classes : array-like of labels, default=None
        The public label set; ``classes_`` is its sorted copy whatever labels the
        training data hold, and a label outside it raises ``ValueError`` before any
        budget is spent. ``None`` reads it from ``y`` (not covered by the guarantee;
        emits :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`).
    decision : {"auto", "calibrated", "fitted"}, default="auto"
        How the noisy coefficients become a decision. ``"auto"`` (``"calibrated"``)
        fits their scale and the intercept from private histograms of the training
        scores and falls back to the privately estimated majority class where the
        fitted rule does not beat it (:mod:`skdp_sparse.solvers.decision`: Laplace
        releases at a share of epsilon with ``delta=0``, Gaussian ones composed with
        the output's noise otherwise); the noise of a release over many features can
        point its coefficients anywhere, and the histograms see that. The decision
        rescales the released coefficients, which may then leave ``domain``.
        ``"fitted"`` keeps the noisy coefficients and intercept. Without noise the fit
        keeps its own.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
"""
        + _FITTED_DOC
    )

    _parameter_constraints = {**_BaseOutputPerturbation._parameter_constraints,
                              "classes": ["array-like", None],
                              "decision": [Options("auto", "calibrated", "fitted")]}

    def __init__(self, *, epsilon=1.0, delta=0.0, norm_bound=1.0, sparsity=None,
                 alpha=None, domain="none", radius=None, tol=1e-3, fit_intercept=True,
                 intercept_bound=1.0, max_iter=1000, floating_point_safe="auto",
                 classes=None, random_state=None, clip_predict=True, ledger=None,
                 decision="auto"):
        super().__init__(epsilon=epsilon, delta=delta, norm_bound=norm_bound,
                         sparsity=sparsity, alpha=alpha, domain=domain, radius=radius,
                         tol=tol, fit_intercept=fit_intercept,
                         intercept_bound=intercept_bound, max_iter=max_iter,
                         floating_point_safe=floating_point_safe,
                         random_state=random_state, clip_predict=clip_predict,
                         ledger=ledger)
        self.classes = classes
        self.decision = decision

    def _loss(self):
        return LogisticLoss()

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (dense or sparse) and labels ``y``; ``sample_weight`` is refused
        unless None (a ``TypeError``)."""
        return self._fit(X, y, sample_weight)


class DPOutputPerturbationRegressor(TargetRangeMixin, LinearRegressorMixin, RegressorMixin,
                                    _BaseOutputPerturbation):
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
    target_bound : float, default=None
        Public bound on ``|y|`` (``None`` is 1); scale targets so that it is meaningful,
        or give ``target_bounds`` instead. A value given is also the range ``predict``
        clips to (with ``clip_predict``), as for ``target_bounds=(-T, T)``.
    target_bounds : pair (low, high), default=None
        Public range of the targets in their own units: ``y`` is clipped to it and
        mapped to ``[-1, 1]`` by ``(y - c) / h`` (``c`` the centre, ``h`` the
        half-width) inside ``fit``, the model is fitted with ``target_bound = 1`` (the
        sensitivities follow from the range) and ``coef_`` and ``intercept_`` are
        mapped back, so ``predict`` returns the targets' units. ``alpha`` and
        ``huber_threshold`` apply to the mapped targets. Never take the range from the
        training targets.
    decision : {"auto", "calibrated", "fitted"}, default="auto"
        How the noisy coefficients become a prediction (squared loss). ``"calibrated"``
        refits the slope and the intercept of their score by least squares on one
        private release of moment sums of the clipped, centred, scaled scores and the clipped
        targets, falling back on the private mean of the targets where the noise hides
        the slope (:mod:`skdp_sparse.solvers.decision`: Laplace releases at a share of
        epsilon with ``delta=0``, Gaussian ones composed with the output's noise
        otherwise; the smallest share at which each sum's noise is 1% of ``n``, at most
        a half: below ``n epsilon`` of about 2,000 with ``delta=0`` the noisy
        coefficients are mostly noise, and the refit's fallback on the mean is what
        the budget buys). ``"auto"``: ``"calibrated"``, except for the Huber loss,
        where it is ``"fitted"`` (the noisy coefficients and intercept).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
"""
        + _FITTED_DOC
    )

    _parameter_constraints = {**_BaseOutputPerturbation._parameter_constraints,
                              "loss": [Options("squared", "huber")],
                              "huber_threshold": [Bound()], "target_bound": [Bound(), None],
                              "target_bounds": ["no_validation"],
                              "decision": [Options("auto", "calibrated", "fitted")]}

    def __init__(self, *, loss="squared", huber_threshold=1.0, target_bound=None,
                 target_bounds=None, epsilon=1.0, delta=0.0, norm_bound=1.0, sparsity=None,
                 alpha=None, domain="none", radius=None, tol=1e-3, fit_intercept=True,
                 intercept_bound=1.0, max_iter=1000, floating_point_safe="auto",
                 random_state=None, clip_predict=True, ledger=None, decision="auto"):
        super().__init__(epsilon=epsilon, delta=delta, norm_bound=norm_bound,
                         sparsity=sparsity, alpha=alpha, domain=domain, radius=radius,
                         tol=tol, fit_intercept=fit_intercept,
                         intercept_bound=intercept_bound, max_iter=max_iter,
                         floating_point_safe=floating_point_safe,
                         random_state=random_state, clip_predict=clip_predict,
                         ledger=ledger)
        self.loss = loss
        self.huber_threshold = huber_threshold
        self.target_bound = target_bound
        self.target_bounds = target_bounds
        self.decision = decision


# The short name is the classifier (logistic loss, the paper's main use); an alias,
# not a subclass, so clone() and repr() name one class.
DPOutputPerturbation = DPOutputPerturbationClassifier
