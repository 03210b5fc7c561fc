"""Private logistic regression on sparse data: every solver of the registry."""

from __future__ import annotations

import math

from sklearn.base import ClassifierMixin

from ..optim.losses import LogisticLoss
from ..solvers import SOLVERS
from ..utils.validation import Options
from ._base import SOLVER_CONSTRAINTS, DPMultiSolverModel, LinearClassifierMixin

__all__ = ["DPSparseLogisticRegression", "MULTINOMIAL_SOLVER"]

#: The solver ``solver="auto"`` runs for more than two classes (``multi_class`` "auto"
#: or "multinomial", epsilon finite, ``delta > 0``): noisy gradient descent on the
#: multinomial loss, whose one release per step has the noise of a single binary
#: problem where the K one-vs-rest releases need ``sqrt(K / 2)`` times more
#: (:mod:`skdp_sparse.solvers._multinomial`; measured in benchmarks/bench_multiclass.py).
MULTINOMIAL_SOLVER = "sgd"


class DPSparseLogisticRegression(LinearClassifierMixin, ClassifierMixin, DPMultiSolverModel):
    """Logistic regression trained with differential privacy on sparse data.

    Minimises ``(1/n) sum_i log(1 + exp(-y_i (x_i . w + b))) + psi(w)`` by private
    greedy coordinate descent (``solver="greedy_cd"``, DP-GCD), private randomised
    coordinate descent (``solver="cd"``, DP-CD), a stochastic-gradient solver
    (``"sgd"``, ``"bias_reduced_sgd"``, ``"sparse_sgd"``, ``"phased_sgd"``), output
    perturbation, or private feature screening with one diagonal Newton step
    (``"screened_newton"``, for ``p >> n`` such as text); ``solver="auto"`` chooses
    from public n, p, epsilon and bounds (:func:`~skdp_sparse.solvers.resolve_solver`;
    for more than two classes, ``"sgd"`` on the multinomial loss, see ``multi_class``).
    More than two classes are fitted as one multinomial problem (``solver="sgd"``) or as
    K one-vs-rest problems, and the whole fit, all classes together, meets
    ``(epsilon, delta)``: the coordinate-descent solvers, the screened Newton step,
    ``"sgd"``, ``"sparse_sgd"`` and ``"phased_sgd"`` calibrate the K one-vs-rest fits
    jointly in one accountant, ``"bias_reduced_sgd"`` and output perturbation give each
    ``(epsilon/K, delta/K)``. ``"bias_reduced_sgd"`` is for n
    epsilon well beyond 10^5 with s-sparse rows: up to that its noisy steps barely move
    it from the class balance it starts at (the best solver by test AUC in no
    configuration of ``benchmarks/bench_bias_reduced.py``, its AUC at most 0.62;
    :mod:`skdp_sparse.solvers.bias_reduced_sgd` says why).

    Privacy
    -------
    (epsilon, delta)-DP for replace-one neighbouring datasets. The logistic loss
    has ``|l'| <= 1``, so after clipping entries to ``feature_bound`` every
    per-example coordinate gradient lies in ``[-b_j, b_j]``; ``gradient_clip``
    may clip tighter. See :class:`DPGreedyCDRegressor` for the mechanisms and
    their composition; the labels are part of the private data.

    Parameters
    ----------
    epsilon, delta, penalty, l1_ratio, feature_bound, norm_bound, sparsity,
    gradient_clip, fit_intercept, solver, selection, curvature, max_iter, batch_size,
    learning_rate, tol, random_state, verbose, floating_point_safe, feature_selection,
    feature_selection_share, clip_predict, selection_threshold, selection_share,
    contribution_bound, frequent_features, ledger
        As in :class:`~skdp_sparse.linear_model.DPGreedyCDRegressor` (``clip_predict``
        applies to ``decision_function``, ``predict`` and ``predict_proba``).
    alpha : float, default=None
        Penalty strength; ``None`` is 1e-4 (``output_perturbation``: the theorem's rule;
        ``screened_newton``: 0, its noise's soft threshold and ridge regularise it).
    decision : {"auto", "calibrated", "fitted"}, default="auto"
        How the fitted score becomes a decision. ``"calibrated"`` runs the solver on
        part of the budget and fits the scale of its coefficients and its intercept
        from two private histograms of the training scores
        (:mod:`skdp_sparse.solvers.decision`: the smallest share of the Gaussian
        budget ``mu^2`` at which a histogram cell's noise is a tenth of an average
        cell's count, at most 1/12, composed with the solver's steps in one
        accountant), falling back to the privately estimated majority class where the
        fitted rule does not beat it;
        ``"fitted"`` keeps the solver's own coefficients and intercept. ``"auto"`` is
        ``"calibrated"`` for ``"sgd"``, ``"sparse_sgd"``, ``"phased_sgd"``, ``"cd"`` and
        ``"output_perturbation"`` with noise (their few noisy steps, or their one noisy
        release, rank well long before their scale and intercept are right; with
        ``delta=0`` the histograms are Laplace releases at their share of epsilon) and
        ``"fitted"`` otherwise (greedy coordinate descent
        fits its intercept, the screened Newton step calibrates its own decision).
        Without noise every fit keeps its own decision.
    multi_class : {"auto", "ovr", "multinomial"}, default="auto"
        How more than two classes are fitted (two classes are always one binary
        problem). ``"multinomial"``: one softmax problem over the ``K x p`` coefficients
        by noisy gradient descent (``solver="sgd"``; ``solver="auto"`` runs it), whose
        per-step release of the whole gradient matrix has l2 sensitivity
        ``2 sqrt(2) sqrt(L^2 + 1)`` whatever K, where the K one-vs-rest releases need
        ``sqrt(K / 2)`` times the noise for the same budget
        (:mod:`skdp_sparse.solvers._multinomial`); it keeps its own decision (the
        argmax of the scores; ``predict_proba`` is their softmax), so
        ``decision="calibrated"`` is refused, as are ``feature_selection=k`` and the
        other solvers (before any budget is spent). ``"ovr"``: K one-vs-rest problems.
        ``"auto"``: multinomial where the solver fits it, and ``solver="auto"`` then
        takes ``"sgd"`` when epsilon is finite and ``delta > 0`` (without noise, or
        with ``delta=0``, the registry's rule and one-vs-rest); one-vs-rest with
        ``decision="calibrated"``, an integer ``feature_selection`` or ``"sure"``. Measured
        (``benchmarks/bench_multiclass.py``, test accuracy at epsilon 1 and 10): digits
        (10 classes) 0.294 and 0.870 against the one-vs-rest defaults' 0.098 and 0.756;
        a synthetic 5-class set 0.766 and 0.793 against greedy CD's 0.771 and 0.792.
    classes : array-like of labels, default=None
        The public label set. ``classes_`` is its sorted copy whatever labels the
        training data hold (a class absent from them is still learnt, from its
        absence), and a label outside it raises ``ValueError`` before any privacy
        budget is spent. ``None`` reads the label set from ``y``, which the
        guarantee does not cover (one row with a rare label changes ``classes_``
        and the shape of ``coef_``), and emits
        :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    solver_ : str
    multi_class_ : {"ovr", "multinomial"}
        The fit's kind (public: from ``multi_class``, the solver and the label set).
    n_iter_ : int
    screening_scores_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Only after a fit that screened features: the noisy label association of
        every feature (the released statistic the screening ranks; zero-mean noise of
        a known standard deviation, see :mod:`skdp_sparse.solvers._screening`).
    epsilon_spent_, delta_spent_ : float
    privacy_events_ : tuple of PrivacyEvent
    input_clipping_ : tuple (feature_bound, norm_bound, l1_bound)
        The public clipping the solver applied to the training rows (``None`` or
        ``inf`` where it applied none), which ``clip_predict`` applies to new rows.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from skdp_sparse import DPSparseLogisticRegression
    >>> X = sp.random(1000, 30, density=0.2, format="csr", random_state=0)
    >>> y = (X[:, 0].toarray().ravel() > 0.1).astype(int)
    >>> clf = DPSparseLogisticRegression(epsilon=1.0, classes=[0, 1],
    ...                                  random_state=0).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
    """

    _parameter_constraints = {**SOLVER_CONSTRAINTS, "classes": ["array-like", None],
                              # "sure" cuts the logistic loss's label association.
                              "feature_selection": [
                                  Options("auto", "none", "sure"),
                                  *SOLVER_CONSTRAINTS["feature_selection"][1:]],
                              "decision": [Options("auto", "calibrated", "fitted")],
                              "multi_class": [Options("auto", "ovr", "multinomial")]}
    _default_alpha = 1e-4

    def __init__(self, *, epsilon=1.0, delta=1e-6, penalty="l1", alpha=None, l1_ratio=0.5,
                 feature_bound=1.0, norm_bound=1.0, sparsity=None, gradient_clip=None,
                 fit_intercept=True, solver="auto", selection="auto",
                 curvature="auto", max_iter=None, batch_size=None, learning_rate=None,
                 tol=1e-7, classes=None, random_state=None, verbose=0,
                 floating_point_safe="auto", feature_selection="auto",
                 feature_selection_share=None, clip_predict=True,
                 selection_threshold=None, selection_share=0.5, contribution_bound=1.0,
                 frequent_features=None, decision="auto", multi_class="auto", ledger=None):
        self.epsilon = epsilon
        self.delta = delta
        self.penalty = penalty
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.feature_bound = feature_bound
        self.norm_bound = norm_bound
        self.sparsity = sparsity
        self.gradient_clip = gradient_clip
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.selection = selection
        self.curvature = curvature
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.tol = tol
        self.classes = classes
        self.random_state = random_state
        self.ledger = ledger
        self.verbose = verbose
        self.floating_point_safe = floating_point_safe
        self.feature_selection = feature_selection
        self.clip_predict = clip_predict
        self.feature_selection_share = feature_selection_share
        self.selection_threshold = selection_threshold
        self.selection_share = selection_share
        self.contribution_bound = contribution_bound
        self.frequent_features = frequent_features
        self.decision = decision
        self.multi_class = multi_class

    def _loss(self):
        return LogisticLoss()

    def _ovr_settings(self, n_features):
        # Settings that exist for one-vs-rest problems only (public values): under
        # multi_class="auto" they keep the fit one-vs-rest, as before the multinomial loss.
        # A screening rule ("sure", or k below p) is one: the multinomial solver takes none.
        k = getattr(self, "feature_selection", "auto")
        screens = isinstance(k, str) and k not in ("auto", "none") \
            or not isinstance(k, str) and k < n_features
        return self.decision == "calibrated" and math.isfinite(float(self.epsilon)) or screens

    def _wants_multinomial(self, public):
        # More than two classes, and multi_class asks for the multinomial loss or lets
        # the settings choose it (before the solver is known).
        if len(public["classes"]) <= 2 or self.multi_class == "ovr":
            return False
        return self.multi_class == "multinomial" or not self._ovr_settings(
            public["n_features"])

    def _multinomial(self, solver, public):
        if not self._wants_multinomial(public):
            return False
        if not getattr(solver, "multinomial", False):
            if self.multi_class == "auto":
                return False
            supported = sorted(n for n, s in SOLVERS.items() if getattr(s, "multinomial", False))
            raise ValueError(f"solver={solver.name!r} fits one-vs-rest problems only: "
                             f"multi_class='multinomial' runs with solver in {supported}")
        if self.decision == "calibrated" and math.isfinite(float(self.epsilon)):
            raise ValueError("decision='calibrated' calibrates one-vs-rest scores: with "
                             "multi_class='multinomial' use decision='auto' or 'fitted'")
        return True

    def _solver_name(self, public):
        # For more than two classes: the solver of the multinomial loss when it is asked
        # for, and the private default (Gaussian noise: delta > 0); otherwise, and
        # without noise (greedy CD converges to the exact one-vs-rest optimum), the
        # registry's rule.
        if self.solver == "auto" and self._wants_multinomial(public) and (
                self.multi_class == "multinomial"
                or float(self.delta) > 0 and math.isfinite(float(self.epsilon))):
            return MULTINOMIAL_SOLVER
        return super()._solver_name(public)

    def _fitted_attributes(self, public, plan, result):
        attributes = super()._fitted_attributes(public, plan, result)
        attributes["multi_class_"] = "multinomial" if getattr(plan.plan, "multinomial", False) \
            else "ovr"
        return attributes

    def fit(self, X, y, sample_weight=None):
        """Fit privately on ``X`` (dense or sparse) and labels ``y``; ``sample_weight``
        is refused unless None (a ``TypeError``)."""
        return self._fit(X, y, sample_weight)
