"""One privacy budget for a whole pipeline: :func:`split_budget`.

A :class:`~sklearn.pipeline.Pipeline` whose steps fit privately spends the
composition of their budgets on the training data. :func:`split_budget` lets a user
state one ``(epsilon, delta)`` and divides it among the private steps by weights:
step ``i`` gets ``epsilon w_i / sum(w)`` and ``delta w_i / sum(w)``. By basic
composition (Dwork & Roth 2014, Thm 3.16) the pipeline's fit is then
``(epsilon, delta)``-DP; the privacy ledger's tight composition of the steps' recorded
events is at most that.

A private step is an estimator with both ``epsilon`` and ``delta`` parameters (every
private estimator and transformer of the library), found anywhere inside
pipelines, column transformers and feature unions; the private steps inside a private
step (the estimator of a private search) are that step's business and are left alone,
and so are the steps inside a :class:`~sklearn.frozen.FrozenEstimator`, which fits
nothing again and spends nothing more.

:func:`split_budget` refuses a step that fits on the data without privacy (a
``StandardScaler``, an exact ``SelectKBest``; frozen, it is allowed: no guarantee
would cover it), a private step inside any other meta-estimator (one-vs-rest,
calibration, bagging fit their estimator several times, each fit spending the step's
whole share) and one object in two places (each place would fit it with the share set
last).
"""

from __future__ import annotations

import math
import numbers
import warnings

from sklearn.base import BaseEstimator, clone
from sklearn.compose import ColumnTransformer, make_column_selector
from sklearn.frozen import FrozenEstimator
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.preprocessing import FunctionTransformer, OneHotEncoder, PolynomialFeatures
from sklearn.utils import get_tags

from .preprocessing._one_hot import public_categories
from .utils.validation import check_privacy_params

__all__ = ["private_steps", "split_budget"]


def _is_private(estimator):
    if not isinstance(estimator, BaseEstimator):
        return False
    params = estimator.get_params(deep=False)
    return "epsilon" in params and "delta" in params


def private_steps(estimator):
    """The private steps of ``estimator``: a dict from their parameter path (as in
    ``set_params``; ``""`` for ``estimator`` itself) to the step, in the order of
    ``get_params``."""
    if _is_private(estimator):
        return {"": estimator}
    params = estimator.get_params(deep=True)
    position = {path: i for i, path in enumerate(params)}

    def order(path):
        # A step's place in its composite, then in its composite's composite, ...:
        # the order in which the data go through them.
        parts = path.split("__")
        return tuple(position.get("__".join(parts[: i + 1]), -1) for i in range(len(parts)))

    # A frozen step does not fit again, so it spends nothing and takes no share.
    frozen = [path for path, value in params.items() if isinstance(value, FrozenEstimator)]
    found = {}
    for path in sorted((p for p, v in params.items() if _is_private(v)), key=order):
        if any(path.startswith(outer + "__") for outer in [*found, *frozen]):
            continue  # inside a private step, or frozen
        found[path] = params[path]
    return found


#: The composites whose own fit only routes the rows to their steps, fitting each once
#: per fit of their own: what they learn is what their steps learn (a
#: ``ColumnTransformer``'s choice of columns is checked apart), and through them a
#: step's share of the budget is its whole spend.
_SINGLE_FIT_COMPOSITES = (Pipeline, FeatureUnion, ColumnTransformer)


def _learns_nothing(step):
    """Whether fitting ``step`` learns nothing from the values of the rows: its tags
    say it needs no fit, or it is one of the transformers whose fit reads only public
    parameters and the public shape (``PolynomialFeatures``; a ``OneHotEncoder`` with
    public categories that neither raises, warns nor counts, see
    :func:`~skdp_sparse.preprocessing.one_hot_bounds`)."""
    if isinstance(step, PolynomialFeatures):
        return True
    if type(step) is OneHotEncoder:
        try:
            public_categories(step)
        except ValueError:
            return False
        return True
    try:
        return not get_tags(step).requires_fit
    except Exception:  # an object scikit-learn cannot read tags from
        return False


def _checks_inverse_on_rows(step):
    """Whether ``step`` is a ``FunctionTransformer`` whose fit applies ``func`` then
    ``inverse_func`` to the rows and warns where they differ: a warning that one private
    row can set."""
    return (isinstance(step, FunctionTransformer) and bool(step.check_inverse)
            and step.func is not None and step.inverse_func is not None)


def _data_dependent_columns(composite):
    """The names of a ``ColumnTransformer``'s transformers whose columns are chosen by
    a callable: it runs on the rows (``make_column_selector``, which reads only the
    columns' names and types, is allowed)."""
    return [name for name, _, columns in composite.transformers
            if callable(columns) and not isinstance(columns, make_column_selector)]


def check_no_step_fits_without_privacy(estimator, paths, context):
    """Raise ``ValueError`` unless every step of ``estimator`` that learns from the
    rows is one of the private steps at ``paths`` (or inside one) or frozen. Any object
    with a ``fit`` method counts as a step, not only scikit-learn estimators; a
    composite other than a pipeline, feature union or column transformer is a step
    itself (its own fit may compute on the rows); a column transformer may not choose
    its columns with a callable that runs on the rows."""
    if list(paths) == [""]:
        return
    params = estimator.get_params(deep=True)
    steps = {path: v for path, v in params.items()
             if hasattr(v, "fit") and not isinstance(v, type)}
    steps[""] = estimator
    covered = [*paths, *(p for p, v in steps.items() if isinstance(v, FrozenEstimator))]
    name = type(estimator).__name__
    for path, step in steps.items():
        if any(path == c or path.startswith(c + "__") for c in covered if c):
            continue
        if isinstance(step, _SINGLE_FIT_COMPOSITES):
            chosen = _data_dependent_columns(step) if isinstance(step, ColumnTransformer) \
                else []
            if chosen:
                raise ValueError(
                    f"{path or name} chooses the columns of {chosen} with a callable that "
                    f"runs on the rows, without privacy; {context} give the columns by "
                    "name or index (or make_column_selector, which reads their types)")
            if isinstance(step, ColumnTransformer) and step.sparse_threshold != 0:
                # Where a block is sparse, the output is sparse iff the density of the
                # rows is below the threshold: a bit of the data in sparse_output_.
                raise ValueError(
                    f"{path or name} chooses between a sparse and a dense output from the "
                    f"density of the rows (sparse_threshold={step.sparse_threshold!r}), "
                    f"without privacy; {context} set sparse_threshold=0 (always dense)")
            continue
        if _checks_inverse_on_rows(step):
            raise ValueError(
                f"step {path or name!r} of {name} (FunctionTransformer) checks on the rows "
                "that inverse_func undoes func, and warns where it does not: one private "
                f"row can set that warning; {context} set check_inverse=False")
        if not _learns_nothing(step):
            if any(c.startswith(path + "__") if path else c for c in paths):
                # It holds a private step: "fits without privacy" would misname it.
                raise ValueError(
                    f"{path or name} ({type(step).__name__}) holds private steps, and its "
                    "own fit may compute on the rows (TransformedTargetRegressor checks "
                    "its inverse on the targets, others fit a step more than once); "
                    f"{context} private steps may sit in a Pipeline, FeatureUnion or "
                    "ColumnTransformer only")
            raise ValueError(
                f"step {path or name!r} of {name} ({type(step).__name__}) fits on the "
                f"data without privacy; {context} every step must be private, frozen or "
                "learn nothing (requires_fit false, as BoundedScaler)")


def _check_fitted_once(estimator, steps):
    """Each private step is fitted once per fit of ``estimator``, as itself: it sits in
    pipelines, column transformers and feature unions only, and no object fills two
    places (both places would fit it with the share of the last one set)."""
    params = estimator.get_params(deep=True)
    places = {}
    for path, step in steps.items():
        parts = path.split("__") if path else []
        for depth in range(len(parts)):
            outer = estimator if depth == 0 else params["__".join(parts[:depth])]
            if not isinstance(outer, _SINGLE_FIT_COMPOSITES):
                raise ValueError(
                    f"the private step {path!r} sits in {type(outer).__name__}, which may "
                    "fit it more than once (one model per class, per fold, per bag), each "
                    "fit spending the step's whole budget: split_budget divides a budget "
                    "among the steps of pipelines, column transformers and feature unions "
                    "only. Set that step's epsilon and delta yourself, for the number of "
                    "fits it makes (the privacy ledger records each).")
        if id(step) in places:
            raise ValueError(
                f"the private steps {places[id(step)]!r} and {path!r} are one object: "
                "each place fits it with its own share, and one object holds one. Use "
                "a separate instance (sklearn.base.clone) in each place.")
        places[id(step)] = path


def split_budget(estimator, epsilon, delta=0.0, *, weights=None):
    """Divide one budget among the private steps of ``estimator``, in place.

    Parameters
    ----------
    estimator : estimator
        A private estimator, or a pipeline (or column transformer, feature union,
        nested) holding private steps.
    epsilon : float
        The pipeline's epsilon, > 0.
    delta : float, default=0.0
        The pipeline's delta. Steps that add Gaussian noise need a share > 0.
    weights : dict or sequence of positive numbers, optional
        The weight of each private step: a dict from the step's path (see
        :func:`private_steps`; for a step of a pipeline, its name) to its weight, or
        one weight per private step in their order. Default: equal weights.

    Returns
    -------
    estimator
        The same object, with the ``epsilon`` and ``delta`` of each private step set.
        Each step's parameters are then checked as its fit would check them before
        reading any data (a step that needs ``delta > 0`` given none of it, a missing
        public bound): a pipeline fits its steps in turn, so an error of a later step's
        parameters would otherwise come after an earlier step had spent its share.
        A step that releases nothing with its parameters (a ``DPTfidfVectorizer`` with a
        public vocabulary and ``use_idf=False``) keeps its share, unspent, so that a
        later ``set_params(use_idf=True)`` stays within the budget; a ``UserWarning``
        says how much, which ``weights`` can give to the other steps.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from skdp_sparse import DPSparseLogisticRegression
    >>> from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
    >>> from skdp_sparse.pipeline import split_budget
    >>> model = make_pipeline(DPTfidfVectorizer(), DPSparseLogisticRegression())
    >>> model = split_budget(model, 1.0, 1e-6, weights={"dptfidfvectorizer": 1,
    ...                                                  "dpsparselogisticregression": 3})
    >>> model[0].epsilon, model[1].epsilon
    (0.25, 0.75)
    """
    epsilon, delta = check_privacy_params(epsilon, delta)
    if math.isinf(epsilon):
        raise ValueError("split_budget divides a finite epsilon; set epsilon=np.inf on "
                         "each step to fit without noise")
    steps = private_steps(estimator)
    if not steps:
        raise ValueError(f"{type(estimator).__name__} has no private step (no step with "
                         "epsilon and delta parameters)")
    _check_fitted_once(estimator, steps)
    check_no_step_fits_without_privacy(
        estimator, steps, f"for the budget of {type(estimator).__name__} to cover its fit,")
    if weights is None:
        weights = {path: 1.0 for path in steps}
    elif isinstance(weights, dict):
        unknown = sorted(set(weights) - set(steps))
        missing = sorted(set(steps) - set(weights))
        if unknown or missing:
            raise ValueError(f"weights must name every private step exactly: the private "
                             f"steps are {list(steps)}; unknown {unknown}, missing {missing}")
    else:
        if isinstance(weights, str | bytes) or not hasattr(weights, "__iter__"):
            # A number failed in list() ("'int' object is not iterable"), and a string
            # was taken as one weight a character.
            raise ValueError(f"weights must be a dict from private step to weight or a "
                             f"sequence of one weight per private step {list(steps)}, got "
                             f"{weights!r}")
        weights = list(weights)
        if len(weights) != len(steps):
            raise ValueError(f"{len(weights)} weights for {len(steps)} private steps "
                             f"{list(steps)}")
        weights = dict(zip(steps, weights, strict=True))
    for path, w in weights.items():
        if (not isinstance(w, numbers.Real) or isinstance(w, bool) or not math.isfinite(w)
                or w <= 0):
            raise ValueError(f"the weight of {path or 'the estimator'} must be a positive "
                             f"number, got {w!r}")
    total = float(sum(weights.values()))
    params = {}
    for path in steps:
        share = weights[path] / total
        prefix = f"{path}__" if path else ""
        params[f"{prefix}epsilon"] = epsilon * share
        params[f"{prefix}delta"] = delta * share
    # Checked on a copy, so that a refused split leaves the estimator as it was.
    for path, step in private_steps(clone(estimator).set_params(**params)).items():
        check = getattr(step, "_check_parameters", None)
        if check is None:
            continue
        try:
            check()
        except ValueError as exc:
            raise ValueError(f"split_budget: the step {path or type(step).__name__!r} with "
                             f"its share of the budget: {exc}") from None
    idle = [path for path, step in steps.items()
            if getattr(step, "_releases_nothing", lambda: False)()]
    if idle and len(idle) < len(steps):
        # Kept in the split: a later set_params that makes such a step release would
        # otherwise spend outside the budget.
        warnings.warn(
            f"split_budget: the private step(s) {idle} release nothing with their "
            f"parameters (a public vocabulary without idf), so their share of epsilon "
            f"({epsilon * sum(weights[p] for p in idle) / total:.3g}) is never spent; "
            "give them a small weight (weights=...) to leave it to the other steps",
            UserWarning, stacklevel=2)
    return estimator.set_params(**params)
