"""The fit sequence every private estimator and transformer of the library runs.

:class:`DPEstimatorMixin` owns ``fit``'s order of work, so no estimator writes its
own version of a step:

1. **parameters**: the declarative ``_parameter_constraints`` and the estimator's
   cross-parameter privacy rules (``_check_dp_rules``);
2. **data**: validated on a private copy (the caller's arrays are never
   modified); labels checked against the public label set;
3. **plan**: from public values only (n, p, the bounds, the budget): the solver,
   its iterations, its noise scales and the privacy events it will record;
4. **budget**: reserved in every ledger, and checked against its cap if it has one;
5. **solve**: the only step that reads private values beyond validation (both run
   with numpy's floating-point warnings off, since whether one fires depends on the
   values);
6. **record**: fitted attributes set together, the spend reported to the
   ledgers. A failure in 5 releases the reservation if no randomness was drawn
   and records the planned spend otherwise; either way the estimator is left
   unfitted, never half-fitted.

Subclasses implement ``_validate_fit_data``, ``_plan``, ``_solve`` and
``_fitted_attributes``; see :class:`~skdp_sparse.linear_model._base.DPLinearModel`.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .privacy.accounting import compose
from .privacy.ledger import fit_budget
from .utils.random import check_generator
from .utils.validation import (
    check_budget_pair,
    validate_params,
    warn_delta_not_below_one_over_n,
)

__all__ = ["DPEstimatorMixin"]


def _fitted_attribute_names(estimator):
    return [name for name in vars(estimator)
            if name.endswith("_") and not name.startswith("__")]


def _refuse_sample_weight(estimator, sample_weight):
    # fit names the parameter only to refuse it: scikit-learn's wrappers that find no
    # such parameter do not raise, they use the weights themselves. BaggingClassifier
    # would draw the rows of its bags with replacement or by weight (a row drawn m
    # times is m changed rows, which the noise does not cover) and seed every bag's
    # fit, keeping the seeds in estimators_; CalibratedClassifierCV would apply the
    # weights to its calibration alone. Asked for weights, they now stop here.
    if sample_weight is not None:
        raise TypeError(
            f"{type(estimator).__name__}.fit takes no sample_weight: its noise is "
            "calibrated to what one row can change, which a weight would multiply. "
            "Wrappers that pass weights, or their draws of rows as weights "
            "(BaggingClassifier), cannot fit it privately.")


class DPEstimatorMixin:
    """Mixin for estimators whose ``fit`` is differentially private.

    Attributes
    ----------
    epsilon_spent_ : float
        Composed epsilon of the fit (replace-one neighbours); ``inf`` when noise was off.
    delta_spent_ : float
        Composed delta of the fit.
    privacy_events_ : tuple of PrivacyEvent
        The mechanism calls the fit made, for audits and ledgers.
    """

    _parameter_constraints: dict = {}
    # Requested by default, so that under metadata routing too a wrapper passes the
    # weights (Bagging its draws) to fit, which refuses them, rather than using them
    # itself.
    __metadata_request__fit = {"sample_weight": True}

    # -- the sequence -------------------------------------------------------
    def _fit(self, X, y=None, sample_weight=None):
        for name in _fitted_attribute_names(self):
            delattr(self, name)
        try:
            _refuse_sample_weight(self, sample_weight)
            self._check_parameters()
            # numpy's floating-point warnings (an overflow in a row's norm, say) would
            # tell whether some private value is extreme; the steps below read private
            # values, so they stay silent (the thread's own setting, restored after).
            # A random_state that makes no generator fails here, before any budget.
            rng = check_generator(getattr(self, "random_state", None))
            with np.errstate(all="ignore"):
                data, public = self._validate_fit_data(X, y)
                warn_delta_not_below_one_over_n(
                    type(self).__name__, getattr(self, "delta", None),
                    public.get("n_samples", public.get("n")))
                plan = self._plan(public)
                with fit_budget(self, plan.epsilon, plan.delta, plan.events) as budget:
                    budget.watch(rng)
                    result = self._solve(data, plan, rng)
                    attributes = self._fitted_attributes(public, plan, result)
                    events = tuple(result.events)
                    spent = self._spend(events, plan)
                    budget.record(events, *spent)
        except BaseException:
            # A failed fit leaves the estimator unfitted (NotFittedError), not
            # with the attributes validation set (n_features_in_, classes_).
            for name in _fitted_attribute_names(self):
                delattr(self, name)
            raise
        for name, value in attributes.items():
            setattr(self, name, value)
        self.epsilon_spent_, self.delta_spent_ = spent
        self.privacy_events_ = events
        return self

    def _check_parameters(self):
        """The checks of the parameters alone, before a fit reads any data (and before
        :func:`~skdp_sparse.pipeline.split_budget` returns a pipeline)."""
        validate_params(self._parameter_constraints, self.get_params(deep=False),
                        type(self).__name__)
        budget = getattr(self, "epsilon", None), getattr(self, "delta", None)
        if all(isinstance(v, numbers.Real) for v in budget):
            check_budget_pair(*budget)
        self._check_dp_rules()

    @staticmethod
    def _spend(events, plan):
        if math.isinf(plan.epsilon):
            # Noise was switched off: nothing is private, whatever was recorded.
            return math.inf, plan.delta
        return compose(events, plan.delta)

    # -- hooks ----------------------------------------------------------------
    def _check_dp_rules(self):
        """Rules that tie several parameters together (after the constraints)."""

    def _validate_fit_data(self, X, y):
        """``(data, public)``: the private data (a view the solver reads) and the
        public facts of the fit (n, p, the label set, ...)."""
        raise NotImplementedError

    def _plan(self, public):
        """The plan of the fit from public values: has ``epsilon``, ``delta`` (the
        budget to reserve) and ``events`` (the privacy events it will record)."""
        raise NotImplementedError

    def _solve(self, data, plan, rng):
        """Run the plan on the data; return an object with ``events``."""
        raise NotImplementedError

    def _fitted_attributes(self, public, plan, result):
        """The fitted attributes, as a dict (set only once the fit succeeded)."""
        raise NotImplementedError

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
