"""What the private linear models share: targets, the solver call, prediction.

An estimator here turns its hyperparameters into a
:class:`~skdp_sparse.solvers.Problem` and solver options, and leaves the rest of the
fit sequence (:class:`~skdp_sparse.base.DPEstimatorMixin`) and all privacy
calibration (:mod:`skdp_sparse.solvers`) to the shared code.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy.special import log_expit, logsumexp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ..base import DPEstimatorMixin
from ..data import DaskData, LocalData, is_dask_array
from ..optim.losses import HuberLoss, LogisticLoss, SquaredLoss
from ..optim.penalties import L1, L2, ElasticNet, NoPenalty
from ..privacy.clipping import clip_entries, clip_rows
from ..solvers import SOLVERS, distributed_solvers, get_solver
from ..solvers.decision import CalibratedDecision, keeps_own
from ..utils._labels import encode_labels
from ..utils._warnings import warn, warn_float_noise
from ..utils.validation import (
    DELTA,
    EPSILON,
    MAX_BOUND,
    MIN_BOUND,
    Bound,
    Interval,
    Options,
    validate_fit_data,
    validate_predict_data,
)
from ._scores import linear_scores

__all__ = ["DPLinearModel", "LinearClassifierMixin", "LinearRegressorMixin", "TargetRangeMixin",
           "make_penalty", "clip_like_fit"]


def clip_like_fit(X, clipping):
    """``X`` with the clipping ``(feature_bound, norm_bound, l1_bound)`` a fit applied to
    its rows (:meth:`~skdp_sparse.solvers.Solver.input_clipping`): a new matrix, or
    ``X`` itself when the fit clipped nothing."""
    feature_bound, norm_bound, l1_bound = clipping
    if feature_bound is not None:
        X = clip_entries(X, feature_bound)
    if math.isfinite(norm_bound) or math.isfinite(l1_bound):
        X = clip_rows(X, norm_bound, l1_bound)
    return X


def make_penalty(penalty, alpha, l1_ratio):
    """The penalty object of a ``penalty`` name and its strength."""
    if penalty is None or penalty == "none" or alpha == 0:
        return NoPenalty()
    if penalty == "l1":
        return L1(alpha)
    if penalty == "l2":
        return L2(alpha)
    return ElasticNet(alpha, l1_ratio)


@dataclass(frozen=True, eq=False)
class LinearFitPlan:
    """A linear model's fit: the problem, the registry solver and its plan."""

    problem: object
    solver: object
    plan: object

    @property
    def epsilon(self):
        return self.plan.epsilon

    @property
    def delta(self):
        return self.plan.delta

    @property
    def events(self):
        return self.plan.events


#: Constraints common to every linear model.
COMMON_CONSTRAINTS = {
    "epsilon": EPSILON,
    "delta": DELTA,
    "norm_bound": [Bound()],
    "sparsity": [Interval(numbers.Integral, 1, None), None],
    "fit_intercept": ["boolean"],
    "random_state": ["random_state"],
    "clip_predict": ["boolean"],
}

#: Constraints of the estimators that offer every solver.
SOLVER_CONSTRAINTS = {
    **COMMON_CONSTRAINTS,
    "penalty": [Options("l1", "l2", "elasticnet", "none"), None],
    "alpha": [Interval(numbers.Real, 0, None), None],
    "l1_ratio": [Interval(numbers.Real, 0, 1)],
    "feature_bound": [Bound(per_feature=True)],
    "gradient_clip": [Bound(per_feature=True, inf=True), None],
    "solver": [Options("auto", *SOLVERS)],
    "selection": [Options("auto", "exponential", "laplace")],
    "curvature": [Options("auto", "private", "bound")],
    "max_iter": [Interval(numbers.Integral, 1, None), None],
    "batch_size": [Interval(numbers.Integral, 1, None), None],
    "learning_rate": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "tol": [Interval(numbers.Real, 0, None)],
    "verbose": [Interval(numbers.Integral, 0, None), "boolean"],
    "floating_point_safe": [Options("auto", True, False)],
    "feature_selection": [Options("auto", "none"), Interval(numbers.Integral, 1, None)],
    "feature_selection_share": [Interval(numbers.Real, 0, 1, closed="neither"), None],
    "selection_threshold": [Interval(numbers.Real, None, None), None],
    "selection_share": [Interval(numbers.Real, 0, 1, closed="neither")],
    "contribution_bound": [Bound()],
    "frequent_features": [Interval(numbers.Integral, 1, None), "array-like", None],
}


class DPLinearModel(DPEstimatorMixin, BaseEstimator):
    """The fit hooks of a private linear model (one solver call for all targets).

    Subclasses provide ``_solver_name(public)``, ``_problem(n_features, solver)``,
    ``_solver_options()``, ``_targets(y)`` and ``_linear_attributes(public, result)``.
    """

    _y_numeric = False

    def _targets(self, y):
        """``(Y, public)``: the (n, K) targets of the K problems and public facts."""
        raise NotImplementedError

    def _public_label_probe(self):
        """Labels that stand for the public label set when the targets are not read on
        the client (a dask fit): ``_targets`` of them gives the public facts."""
        return np.zeros(1)

    def _validate_dask_data(self, X, y):
        """The fit's view of a dask array: blocks validated and encoded on the
        workers; the public facts from the public label set, never from ``y``."""
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, "
                             "but the target y is None.")
        probe, facts = self._targets(self._public_label_probe())
        data = DaskData.from_arrays(X, y, targets=self._targets, n_targets=probe.shape[1])
        self.n_features_in_ = data.n_features
        public = {"n_samples": data.n_samples, "n_features": data.n_features,
                  "n_targets": data.n_targets, "distributed": True, **facts}
        return data, public

    def _validate_fit_data(self, X, y):
        if is_dask_array(X):
            return self._validate_dask_data(X, y)
        X, y = validate_fit_data(self, X, y, y_required=True, y_numeric=self._y_numeric)
        Y, facts = self._targets(y)
        n, p = X.shape
        public = {"n_samples": n, "n_features": p, "n_targets": Y.shape[1], **facts}
        return LocalData(X, Y), public

    def _warn_unused_parameters(self, solver, multinomial=False, n_samples=None):
        """Warn of parameters ``solver`` does not read (none to check here)."""

    def _multinomial(self, solver, public):  # one multinomial problem? (public values)
        return False

    def _plan(self, public):
        name = self._solver_name(public)
        epsilon, delta = float(self.epsilon), float(self.delta)
        solver = get_solver(name)
        multinomial = self._multinomial(solver, public)
        self._warn_unused_parameters(solver, multinomial, public["n_samples"])
        solver = self._with_decision(solver, epsilon, multinomial)
        problem = self._problem(public["n_features"], solver)
        options = {**self._solver_options(), "multi_class": "multinomial"} if multinomial \
            else self._solver_options()
        solver.check(problem, options, epsilon, delta)
        rule = getattr(self, "feature_selection", "auto")
        takers = sorted(n for n, s in SOLVERS.items() if getattr(s, "screens", False) and (
            not isinstance(rule, str) or rule in getattr(s, "screening_rules", ())))
        if rule not in ("auto", "none") and name not in takers:
            raise ValueError(f"solver={name!r} does not screen features by "
                             f"feature_selection={rule!r}: it takes 'auto' or 'none' "
                             f"(solvers that take it: {takers})")
        if getattr(self, "frequent_features", None) is not None and name != "sparse_sgd":
            raise ValueError(f"solver={name!r} does not take frequent_features (DP-FEST "
                             "runs with solver='sparse_sgd')")
        if public.get("distributed"):
            _check_distributed(name, solver, options, "solver" in self.get_params())
        shape = (public["n_samples"], public["n_features"], public["n_targets"])
        return LinearFitPlan(problem, solver, solver.plan(problem, shape, epsilon, delta,
                                                          options))

    def _solve(self, data, plan, rng):
        return plan.solver.solve(plan.problem, data, plan.plan, rng)

    def _with_decision(self, solver, epsilon, multinomial=False):
        """The solver the fit runs: the registry's, or, as the ``decision`` parameter
        says, a wrapper of it that fits the decision of its score privately
        (:class:`~skdp_sparse.solvers.decision.CalibratedDecision`; logistic, squared loss)."""
        if not self._calibrates(solver, epsilon, getattr(self, "decision", "fitted"),
                                multinomial):
            return solver
        if type(self._loss()) not in (LogisticLoss, SquaredLoss):
            raise ValueError("decision='calibrated' fits the logistic and the squared "
                             "loss; with loss='huber' use decision='auto' or 'fitted'")
        if getattr(solver, "adaptive_budget", False):
            # A privacy filter spends as the run goes: nothing to plan the releases
            # against.
            raise ValueError(f"decision='calibrated' does not apply to solver={solver.name!r}"
                             "; use decision='auto' or 'fitted'")
        return CalibratedDecision(solver, auto=getattr(self, "decision", "fitted") == "auto")

    def _calibrates(self, solver, epsilon, decision, multinomial=False):
        """Whether the fit under ``decision`` fits its decision privately (public values
        only; :meth:`_with_decision` refuses what it cannot run; never multinomial)."""
        if not math.isfinite(epsilon) or decision == "fitted" or multinomial:
            return False
        if decision == "auto":
            return type(self._loss()) in (LogisticLoss, SquaredLoss) \
                and getattr(solver, "calibrated_decision", False)
        return True

    def _fitted_attributes(self, public, plan, result):
        attributes = self._linear_attributes(public, result)
        attributes["n_iter_"] = int(result.n_iter)
        # Public: the bounds the estimator was given, as the solver applied them.
        attributes["input_clipping_"] = plan.solver.input_clipping(plan.problem, plan.plan)
        return attributes

    def _decision(self, X):
        check_is_fitted(self)
        X = validate_predict_data(self, X)
        if getattr(self, "clip_predict", True):
            # Predict as the fit saw its rows: a row outside the public bounds is
            # clipped as a training row was, so it cannot reach a score the fitted
            # model never had to answer for.
            X = clip_like_fit(X, self.input_clipping_)
        return linear_scores(X, self.coef_) + self.intercept_


def _check_distributed(name, solver, options, choosable):
    k = options.get("feature_selection", "none")
    if k not in ("auto", "none"):
        raise ValueError(f"feature_selection={k!r} is not supported on a dask array: "
                         "use feature_selection='auto' or 'none'")
    supported = distributed_solvers()
    if not getattr(solver, "distributed", False):
        hint = " (pass solver=... explicitly)" if choosable else \
            "; fit an estimator that takes one of them, or compute the array first"
        raise ValueError(f"solver={name!r} cannot fit a dask array; the solvers that can "
                         f"are {supported}{hint}")


def _by_blocks(columns, dtype=None):
    """Decorator of a prediction method: on a dask array of rows, the method applied to
    each row block, lazily (a dask array back, one output row per input row).
    ``columns(self)``: the width of the output, None for one value a row; ``dtype(self)``:
    its type (float by default). Predicting reads the released model and the rows a
    user predicts on, nothing of the training data."""
    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, X):
            if not is_dask_array(X):
                return method(self, X)
            check_is_fitted(self)
            if X.ndim != 2:
                raise ValueError(f"X must be a 2-d dask array, got {X.ndim} dimensions")
            if len(X.chunks[1]) > 1:
                X = X.rechunk({1: -1})
            width = columns(self)
            kind = np.dtype(np.float64 if dtype is None else dtype(self))
            blocks = functools.partial(method, self)
            if width is None:
                return X.map_blocks(blocks, drop_axis=1, dtype=kind,
                                    meta=np.empty((0,), dtype=kind))
            return X.map_blocks(blocks, chunks=(X.chunks[0], (width,)), dtype=kind,
                                meta=np.empty((0, 0), dtype=kind))
        return wrapper
    return decorate


def _score_columns(self):
    return None if np.shape(self.coef_)[0] == 1 else np.shape(self.coef_)[0]


def _class_columns(self):
    return len(self.classes_)


class LinearClassifierMixin:
    """One-vs-rest targets from the public label set, and class predictions."""

    def _public_label_probe(self):
        if self.classes is None:
            raise ValueError(
                f"{type(self).__name__} fits a dask array only with its public label "
                "set: pass classes=[...] (reading the labels from y is not private)")
        return np.asarray(self.classes)

    def _targets(self, y):
        classes, codes = encode_labels(y, self.classes, type(self).__name__)
        positives = [1] if classes.size == 2 else range(classes.size)
        Y = np.column_stack([np.where(codes == k, 1.0, -1.0) for k in positives])
        return Y, {"classes": classes}

    def _linear_attributes(self, public, result):
        return {"coef_": np.asarray(result.coef), "intercept_": np.asarray(result.intercept),
                "classes_": public["classes"]}

    @_by_blocks(_score_columns)
    def decision_function(self, X):
        """Signed distance to the separating hyperplane(s); shape (n_samples,) for
        two classes. A dask array of rows gives a dask array, block by block."""
        scores = np.asarray(self._decision(X))
        return scores.ravel() if scores.shape[1] == 1 else scores

    @_by_blocks(_class_columns)
    def predict_proba(self, X):
        """Class probabilities: the sigmoid of the score (for more than two classes,
        the sigmoids of the one-vs-rest scores normalised, or the softmax of the
        multinomial scores)."""
        return np.exp(self.predict_log_proba(X))

    @_by_blocks(_class_columns)
    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`, computed in log space so that rows whose
        sigmoids all underflow keep finite probabilities."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return np.column_stack([log_expit(-scores), log_expit(scores)])
        log_p = scores if getattr(self, "multi_class_", "ovr") == "multinomial" \
            else log_expit(scores)
        return log_p - logsumexp(log_p, axis=1, keepdims=True)

    @_by_blocks(lambda self: None, lambda self: self.classes_.dtype)
    def predict(self, X):
        """Predicted class labels."""
        scores = self.decision_function(X)
        idx = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[idx]


class LinearRegressorMixin:
    """Real targets (squared or Huber loss, clipped to ``target_bound``) and
    predictions ``X @ coef_ + intercept_``."""

    _y_numeric = True

    def _loss(self):
        if self.loss == "huber":
            return HuberLoss(float(self.huber_threshold))
        return SquaredLoss()

    def _target_bound(self):
        return float(self.target_bound)

    def _targets(self, y):
        return np.asarray(y, dtype=float).reshape(-1, 1), {}

    def _linear_attributes(self, public, result):
        return {"coef_": np.asarray(result.coef[0]), "intercept_": float(result.intercept[0])}

    def fit(self, X, y, sample_weight=None):
        """Fit privately on ``X`` and real targets ``y``; ``sample_weight`` is refused."""
        return self._fit(X, y, sample_weight)

    @_by_blocks(lambda self: None)
    def predict(self, X):
        """Predicted targets ``X @ coef_ + intercept_``."""
        return np.asarray(self._decision(X)).ravel()


class TargetRangeMixin:
    """``target_bounds=(low, high)``: targets in a public range, mapped to ``[-1, 1]``
    inside ``fit`` (``(y - c) / h`` with centre ``c`` and half-width ``h``), fitted with
    ``target_bound = 1``, and coefficients mapped back so that predictions are in the
    targets' units. Put before :class:`LinearRegressorMixin` in the bases."""

    def _target_range(self):
        """``(c, h)``: centre and half-width of ``target_bounds``, or None."""
        if self.target_bounds is None:
            return None
        pair = self.target_bounds
        if isinstance(pair, np.ndarray) and pair.ndim == 1:
            pair = pair.tolist()
        ok = (isinstance(pair, tuple | list) and len(pair) == 2
              and all(isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_)
                      and abs(v) <= MAX_BOUND for v in pair)
              and MIN_BOUND <= (float(pair[1]) - float(pair[0])) / 2)
        if not ok:
            # Within the range of every other bound (MIN_BOUND, MAX_BOUND), so that
            # the map to [-1, 1] and back stays finite and non-zero.
            raise ValueError(f"{type(self).__name__}: target_bounds must be a pair (low, "
                             f"high) of finite numbers with low < high, |low|, |high| <= "
                             f"{MAX_BOUND:g} and (high - low) / 2 >= {MIN_BOUND:g}, got "
                             f"{self.target_bounds!r}")
        low, high = float(pair[0]), float(pair[1])
        return (low + high) / 2, (high - low) / 2

    def _check_dp_rules(self):
        if self.target_bounds is not None and self.target_bound is not None:
            raise ValueError(
                f"{type(self).__name__}: give target_bound (a symmetric bound on |y|) or "
                "target_bounds (the range of y), not both")
        self._target_range()
        super()._check_dp_rules()

    def _target_bound(self):
        if self.target_bounds is not None or self.target_bound is None:
            return 1.0
        return float(self.target_bound)

    def _targets(self, y):
        Y, facts = super()._targets(y)
        target_range = self._target_range()
        if target_range is not None:
            c, h = target_range
            Y = np.clip((Y - c) / h, -1.0, 1.0)
        return Y, facts

    def _linear_attributes(self, public, result):
        attributes = super()._linear_attributes(public, result)
        target_range = self._target_range()
        if target_range is not None:
            c, h = target_range
            attributes["coef_"] = attributes["coef_"] * h
            attributes["intercept_"] = attributes["intercept_"] * h + c
        return attributes

    def _prediction_range(self):
        """``(low, high)``: the public range of the targets the user stated, either
        spelling (``target_bounds``, or ``(-T, T)`` for ``target_bound=T``), or None.
        The default ``target_bound=None`` states no range: it only sets a scale."""
        target_range = self._target_range()
        if target_range is not None:
            c, h = target_range
            return c - h, c + h
        if self.target_bound is not None:
            return -float(self.target_bound), float(self.target_bound)
        return None

    @_by_blocks(lambda self: None)
    def predict(self, X):
        """Predicted targets ``X @ coef_ + intercept_``; with ``target_bounds`` or
        ``target_bound`` and ``clip_predict``, clipped to that public range (for a
        target in the range, a prediction moved into it is never further off)."""
        y = super().predict(X)
        prediction_range = self._prediction_range()
        if prediction_range is not None and getattr(self, "clip_predict", True):
            y = np.clip(y, *prediction_range)
        return y


#: The linear models' parameters that set one solver's options, and the option
#: (:attr:`~skdp_sparse.solvers.Solver.reads`).
_SOLVER_PARAMETERS = {
    "max_iter": "max_iter", "batch_size": "batch_size", "learning_rate": "learning_rate",
    "selection_threshold": "threshold", "selection_share": "selection_share",
    "contribution_bound": "contribution_bound",
    "feature_selection_share": "feature_selection_share", "curvature": "curvature",
    "selection": "selection", "gradient_clip": "gradient_clip", "verbose": "verbose",
}


def _is_default(value, default):
    if value is default:
        return True
    try:
        return bool(np.all(np.asarray(value) == np.asarray(default)))
    except (TypeError, ValueError):
        return False


class DPMultiSolverModel(DPLinearModel):
    """A linear model offering every registered solver (``solver="auto"`` resolved
    from public n, p and epsilon), with the parameters of
    :class:`~skdp_sparse.linear_model.DPGreedyCDRegressor`."""

    _parameter_constraints = SOLVER_CONSTRAINTS
    _default_alpha = 1e-3

    def _warn_unused_parameters(self, solver, multinomial=False, n_samples=None):
        """Warn of parameters set away from their defaults that the solver running
        (``solver_``, a function of public values) does not read: set for another
        solver, or for ``solver="auto"``'s other choices; and a ``decision`` that is
        the one ``"auto"`` takes for this run. Public values only."""
        defaults = inspect.signature(type(self).__init__).parameters
        unused = [param for param, option in _SOLVER_PARAMETERS.items()
                  if param in defaults and option not in solver.reads
                  and not _is_default(getattr(self, param), defaults[param].default)]
        # A decision that is the one "auto" takes for this run changes nothing (greedy
        # CD keeps its own decision; without noise nothing is calibrated).
        epsilon = float(self.epsilon)
        if "decision" in defaults and self.decision != defaults["decision"].default \
                and self._calibrates(solver, epsilon, self.decision, multinomial) \
                == self._calibrates(solver, epsilon, defaults["decision"].default,
                                    multinomial) and not (n_samples and keeps_own(
                    solver, self._loss(), n_samples, epsilon, float(self.delta))):
            unused.append("decision")
        if unused:
            warn(f"{type(self).__name__}: solver {solver.name!r} does not use "
                 f"{', '.join(unused)} (set for other solvers): no effect on this fit")

    def _check_dp_rules(self):
        if self.solver == "output_perturbation" and self.penalty != "l2":
            raise ValueError(
                "solver='output_perturbation' solves the L2-regularised problem: "
                "set penalty='l2' (alpha=None picks the theorem's default strength)"
            )
        clip = self.gradient_clip
        if clip is not None and np.isfinite(float(self.epsilon)) \
                and not np.all(np.isfinite(np.asarray(clip, dtype=float))):
            raise ValueError("gradient_clip must be finite when epsilon is finite")
        if self.floating_point_safe is False:
            warn_float_noise(type(self).__name__)

    def _solver_name(self, public):
        from ..solvers import resolve_solver
        from ..utils.validation import check_bound

        # Only an explicit l1 or elastic-net strength (not alpha=None) rules out l2-only solvers.
        l1_penalty = self.alpha is not None and self.alpha > 0 \
            and self.penalty in ("l1", "elasticnet")
        return resolve_solver(self.solver, public["n_samples"], public["n_features"],
                              float(self.epsilon), delta=float(self.delta), loss=self._loss(),
                              l1_penalty=l1_penalty, feature_bound=check_bound(
                                  "feature_bound", self.feature_bound, size=public["n_features"]),
                              norm_bound=float(self.norm_bound),
                              screening=self.feature_selection not in ("auto", "none"))

    def _selection(self):
        """``selection="auto"``: Laplace report-noisy-max where the fit is pure DP
        (``delta=0``, epsilon finite), the exponential mechanism (composed in zCDP)
        otherwise."""
        if self.selection != "auto":
            return self.selection
        pure = float(self.delta) == 0 and math.isfinite(float(self.epsilon))
        return "laplace" if pure else "exponential"

    def _target_bound(self):
        return None

    def _problem(self, n_features, solver=None):
        from ..solvers import Problem
        from ..utils.validation import check_bound

        alpha = self.alpha
        if alpha is None:
            # The solver's own default if it has one (screened_newton regularises by
            # its noise and takes 0), else the estimator's.
            alpha = getattr(solver, "default_alpha", None)
            alpha = self._default_alpha if alpha is None else alpha
        return Problem(
            loss=self._loss(), penalty=make_penalty(self.penalty, alpha, self.l1_ratio),
            fit_intercept=bool(self.fit_intercept),
            feature_bound=check_bound("feature_bound", self.feature_bound, size=n_features),
            norm_bound=float(self.norm_bound), sparsity=self.sparsity,
            target_bound=self._target_bound(),
            gradient_clip=check_bound("gradient_clip", self.gradient_clip, allow_none=True,
                                      allow_inf=True, size=n_features),
        )

    def _solver_options(self):
        safe = self.floating_point_safe is not False
        if self.solver == "output_perturbation":
            # The fixed settings of output perturbation under this estimator; its
            # penalty strength is ``alpha`` (None: the theorem's rule).
            return {"alpha": self.alpha, "tol": 1e-3, "intercept_bound": 1.0,
                    "floating_point_safe": safe}
        return {
            "floating_point_safe": safe,
            "feature_selection": self.feature_selection,
            "feature_selection_share": self.feature_selection_share,
            "threshold": self.selection_threshold, "selection_share": self.selection_share,
            "contribution_bound": self.contribution_bound,
            "frequent_features": self.frequent_features,
            "max_iter": self.max_iter, "batch_size": self.batch_size,
            "learning_rate": self.learning_rate, "selection": self._selection(),
            "curvature": self.curvature, "tol": self.tol, "verbose": int(self.verbose),
            # Averaging the iterates only serves to average out the noise; without
            # noise the last iterate converges to the optimum much faster.
            "average": bool(np.isfinite(float(self.epsilon))),
        }

    def _fitted_attributes(self, public, plan, result):
        attributes = super()._fitted_attributes(public, plan, result)
        attributes["solver_"] = plan.solver.name
        if "association" in result.info:
            # The screening's release (public): one row per one-vs-rest problem.
            attributes["screening_scores_"] = np.asarray(result.info["association"]).T
        return attributes
