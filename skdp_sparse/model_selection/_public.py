"""What the private search may use before it reads the private data: public stand-in
data of the same shape and label set, the fits on it, and how a fit is configured
and released."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import warnings

import numpy as np
import scipy.sparse as sp
from joblib import parallel_config
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.compose import ColumnTransformer
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.utils import get_tags
from sklearn.utils.validation import check_is_fitted

from ..privacy.ledger._suspension import suspended_reporting
from ..privacy.selection import events_rdp
from ..utils._warnings import warn
from ..utils.validation import nonfinite_rows_zeroed, zero_nonfinite_rows
from ._inputs import is_documents, text_columns

__all__ = ["PublicData", "inner_fits", "check_candidates", "take_rows", "n_rows",
           "same_events", "fit_events", "released", "WarningsAtCallersLine",
           "SEARCH_SET_PARAMS", "PrivateSteps"]

#: Parameters the search sets on every fit itself (a grid may not).
SEARCH_SET_PARAMS = ("epsilon", "delta", "random_state", "ledger", "classes")


class PrivateSteps:
    """Where a fit's budget goes: the estimator itself if it is private, or the
    private steps of a pipeline (column transformer, feature union, nested;
    :func:`~skdp_sparse.pipeline.private_steps`), which then share each fit's budget
    by :func:`~skdp_sparse.pipeline.split_budget`. Every other step of a pipeline must
    learn nothing from the data (``requires_fit`` false in its tags, like
    :class:`~skdp_sparse.preprocessing.BoundedScaler` or a ``FunctionTransformer``),
    or be frozen: a step that fits on the private rows without noise is not covered
    by any guarantee."""

    def __init__(self, estimator):
        from ..pipeline import check_no_step_fits_without_privacy, private_steps

        name = type(estimator).__name__
        self.paths = list(private_steps(estimator))
        if not self.paths:
            raise ValueError(
                f"{name} has no 'epsilon' parameter and holds no step that has one; the "
                "private search needs a private estimator of skdp_sparse (or a pipeline "
                "of them)")
        params = estimator.get_params(deep=True)
        # The parameters of the label set: ``classes`` of every private step that has
        # it (a classifier, and a label-scoring selector before it), all set to the one
        # public set (the same in every clone).
        self.classes_params = tuple(
            name for name in (self._param(path, "classes") for path in self.paths)
            if name in params)
        check_no_step_fits_without_privacy(estimator, self.paths, "in a private search")

    @staticmethod
    def _param(path, name):
        return f"{path}__{name}" if path else name

    def budget_params(self, estimator):
        """``(path, epsilon, delta)`` of each private step of ``estimator``."""
        params = estimator.get_params(deep=True)
        return [(path, params[self._param(path, "epsilon")], params[self._param(path, "delta")])
                for path in self.paths]

    def set_budget(self, estimator, epsilon, delta, silent=()):
        """The budget of one fit, shared equally by the private steps but those at
        ``silent``, which release nothing (their fit on public data records no event:
        a DPTfidfVectorizer with a public vocabulary and ``use_idf=False``): each of those
        is given the whole budget, which it does not spend, and the others share it."""
        from ..pipeline import split_budget

        if self.paths == [""]:
            return estimator.set_params(epsilon=epsilon, delta=delta)
        with warnings.catch_warnings():
            # Its warning of a share a step never spends: here such a step takes none.
            warnings.filterwarnings("ignore", message="split_budget: the private step")
            split_budget(estimator, epsilon, delta)  # its checks of the steps, its split
        spending = [path for path in self.paths if path not in silent]
        if len(spending) in (0, len(self.paths)):
            return estimator
        shares = {path: 1.0 if path in silent else 1.0 / len(spending) for path in self.paths}
        return estimator.set_params(**{
            self._param(path, name): value * shares[path] for path in self.paths
            for name, value in (("epsilon", epsilon), ("delta", delta))})

    def fitted_steps(self, fitted):
        """The private steps of a fitted ``estimator``, in order."""
        return [_fitted_step(fitted, path) for path in self.paths]

    def events(self, fitted):
        """The privacy events a fit recorded, private step by private step."""
        return tuple(e for step in self.fitted_steps(fitted)
                     for e in (getattr(step, "privacy_events_", None) or ()))


class _Sink(io.TextIOBase):
    def write(self, text):
        return len(text)


@contextlib.contextmanager
def inner_fits(private=False):
    """The search's own fits (on public dummy data and on the private parts) report to
    no ledger: the search records their composition once. The suspension holds in
    this thread only, so steps that would fit in parallel (a ``FeatureUnion`` with
    ``n_jobs``) run one after the other here, where it holds.

    ``private``: the fits of the runs on the private data, whose number K is not
    released; their warnings and their printed output (``verbose``) would each tell
    it, and go nowhere. The dummy fits have shown the public ones. Every fit maps a row
    that reaches it with a non-finite value to a zero row
    (:func:`~skdp_sparse.utils.validation.nonfinite_rows_zeroed`) rather than fail."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(suspended_reporting())
        stack.enter_context(nonfinite_rows_zeroed())
        stack.enter_context(parallel_config(backend="sequential"))
        if private:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            stack.enter_context(contextlib.redirect_stdout(_Sink()))
            stack.enter_context(contextlib.redirect_stderr(_Sink()))
        yield


def check_candidates(estimator, steps, candidates):
    """Refuse a grid whose candidates the search could not account for: one that sets
    what the search sets itself, changes which steps are private (a grid value that
    swaps in a step fitting without noise), or brings a ledger of its own (the
    search's inner fits report to no ledger; it reports to those of the estimator it
    searches)."""
    from ..privacy.ledger import ledgers_for

    name = type(estimator).__name__
    ledgers = {ledger._key for ledger in ledgers_for(estimator)}
    for cand in candidates:
        bad = sorted(key for key in cand if key.rpartition("__")[2] in SEARCH_SET_PARAMS)
        if bad:
            raise ValueError(f"param_grid may not set {bad}: the search sets the per-fit "
                             "budget, the seeds and the label set itself")
        configured = clone(estimator).set_params(**cand)
        other = PrivateSteps(configured)
        if (other.paths, other.classes_params) != (steps.paths, steps.classes_params):
            raise ValueError(f"the candidate {cand} changes which steps of {name} are "
                             "private; the grid may swap a private step for another "
                             "private one only")
        if {ledger._key for ledger in ledgers_for(configured)} - ledgers:
            raise ValueError(f"the candidate {cand} holds a ledger= of its own; give the "
                             "ledger to the searched estimator or to the search")


def _fitted_step(estimator, path):
    """The step at ``path`` (``set_params`` style) of a fitted ``estimator``: a column
    transformer fits clones of its transformers (``named_transformers_``), pipelines
    and feature unions fit theirs in place."""
    step = estimator
    for name in path.split("__") if path else ():
        fitted = getattr(step, "named_transformers_", None)
        step = fitted[name] if fitted is not None else step.get_params(deep=True)[name]
    return step


def take_rows(X, rows):
    """The rows ``rows`` of an array, sparse matrix, DataFrame, Series or list."""
    if hasattr(X, "iloc"):
        return X.iloc[rows]
    if hasattr(X, "shape"):
        return X[rows]
    return [X[i] for i in rows]


def n_rows(X):
    return X.shape[0] if hasattr(X, "shape") else len(X)


class PublicData:
    """What the search may use before touching the private data: the grid, the per-fit
    delta, the shape and type of the data, the public label set, the part sizes, and
    the dummy fits (cached)."""

    def __init__(self, estimator, steps, candidates, fit_delta, X, y, classes, n, n_train, *,
                 refit=True):
        self.estimator = estimator
        self.steps = steps
        self.refit = refit
        self.candidates = candidates
        self.fit_delta = fit_delta
        self.n = n
        self.n_train = n_train
        self.classes = classes
        self.cache = {}
        self._X, self._y = X, y

    def dummy(self, n_rows):
        """Stand-in data of ``n_rows`` rows: same width, type and label set, no
        private values; empty strings for documents and text columns."""
        X = self._X
        if is_documents(X):
            Xd = [""] * n_rows
            if hasattr(X, "iloc"):
                Xd = type(X)(Xd, name=X.name, dtype=X.dtype)
            elif hasattr(X, "dtype"):
                Xd = np.full(n_rows, "", dtype=X.dtype)
            return Xd, self._dummy_labels(n_rows)
        n_features = X.shape[1]
        rows = np.arange(n_rows)
        cols = rows % n_features
        if sp.issparse(X):
            Xd = sp.csr_matrix((np.full(n_rows, 0.5), (rows, cols)),
                               shape=(n_rows, n_features)).asformat(X.format)
        else:
            Xd = np.zeros((n_rows, n_features))
            Xd[rows, cols] = 0.5
            if hasattr(X, "columns"):
                import pandas as pd

                Xd = pd.DataFrame(Xd, columns=X.columns)
                text = {X.columns.get_loc(c) for c in text_columns(X)}
                # Each column keeps its dtype (a selector by dtype routes the stand-in
                # columns as it routes the rows).
                for i, dtype in enumerate(X.dtypes):
                    values = [""] * n_rows if i in text else Xd.iloc[:, i]
                    Xd.isetitem(i, pd.Series(values, dtype=dtype))
        return Xd, self._dummy_labels(n_rows)

    def _dummy_labels(self, n_rows):
        y = self._y
        if y is None:
            return None
        if self.classes is not None:
            return np.resize(self.classes, n_rows)
        return np.zeros((n_rows,) + np.shape(y)[1:], dtype=float)

    def configured(self, index, epsilon, seeds=None, *, split=True):
        """A fit of candidate ``index``: the per-fit budget (shared by a pipeline's
        private steps that release something, :meth:`silent_steps`; by all of them
        without ``split``), the public label set and its randomness: ``random_state=0`` in
        every step for a fit on public data (``seeds`` None), else a generator of its
        own for each step, from a child of ``seeds``. One generator shared by two steps
        would give them the same noise wherever a composite clones its steps (a column
        transformer copies the generator with each), and the difference of their
        releases would be exact."""
        # Estimators given as grid values are cloned too (as GridSearchCV does): every
        # run fits its own copy, and the objects of the grid, which the search returns
        # in candidate_params_, never hold a fit of a run that was not selected.
        est = clone(self.estimator).set_params(
            **clone(self.candidates[index], safe=False))
        silent = self.silent_steps(index, epsilon) if split else ()
        self.steps.set_budget(est, epsilon, self.fit_delta, silent)
        if self.classes is not None:
            est.set_params(**dict.fromkeys(self.steps.classes_params, self.classes.tolist()))
        names = _random_state_params(est)
        children = [None] * len(names) if seeds is None else seeds.spawn(len(names))
        for name, child in zip(names, children, strict=True):
            est.set_params(**{name: 0 if child is None else np.random.default_rng(child)})
        return _guard_public_steps(est, self.steps.paths)

    def silent_steps(self, index, epsilon):
        """The paths of the private steps of candidate ``index`` whose fit on public
        data, with the budget ``epsilon`` split equally, records no event: found once per
        candidate, at the first budget asked (a step releases nothing by its parameters,
        not by the size of its share), not again at each budget the calibration tries.
        Each fit is then planned and checked with the budget split among the others: the
        events the search composes are those of that fit on public data, whatever the
        split."""
        key = ("silent", index)
        if len(self.steps.paths) < 2:
            return ()
        if key not in self.cache:
            Xd, yd = self.dummy(self.n_train)
            est = self.configured(index, epsilon, split=False)
            with inner_fits():
                est.fit(Xd) if yd is None else est.fit(Xd, yd)
            recorded = [getattr(step, "privacy_events_", None)
                        for step in self.steps.fitted_steps(est)]
            self.cache[key] = tuple(path for path, events in zip(self.steps.paths, recorded,
                                                                 strict=True)
                                    if events is not None and len(events) == 0)
        return self.cache[key]

    def probe(self, index, fit_epsilon, n_rows):
        """``(events, RDP curve, model)`` of candidate ``index`` fitted on ``n_rows``
        rows of public dummy data (cached)."""
        key = (index, fit_epsilon, n_rows)
        if key not in self.cache:
            Xd, yd = self.dummy(n_rows)
            est = self.configured(index, fit_epsilon)
            with inner_fits():
                est.fit(Xd) if yd is None else est.fit(Xd, yd)
            events = fit_events(est, self.steps)
            self.cache[key] = (events, events_rdp(events), est)
        return self.cache[key]

    def curves(self, fit_epsilon):
        """Worst-case RDP curves over the candidates: a search run's fit, and a refit
        (zero without refit)."""
        indices = range(len(self.candidates))
        run = np.max([self.probe(i, fit_epsilon, self.n_train)[1] for i in indices], axis=0)
        refit = np.zeros_like(run)
        if self.refit:
            refit = np.max([self.probe(i, fit_epsilon, self.n)[1] for i in indices], axis=0)
        return run, refit


def _event_key(event):
    return tuple(None if isinstance(v, float) and math.isnan(v) else v
                 for v in dataclasses.astuple(event))


def same_events(a, b):
    """Equality of event lists (``PrivacyEvent`` holds NaN, which equals nothing)."""
    return len(a) == len(b) and all(
        _event_key(x) == _event_key(y) for x, y in zip(a, b, strict=True)
    )


def fit_events(estimator, steps):
    """The events of a fit on public data; a private step that records none is not a
    private estimator of skdp_sparse (in a pipeline as on its own: its spend would go
    uncounted)."""
    for step in steps.fitted_steps(estimator):
        if getattr(step, "privacy_events_", None) is None:
            raise TypeError(
                f"{type(step).__name__} records no privacy_events_; the private search "
                "needs an estimator of skdp_sparse (DPEstimatorMixin)"
            )
    return steps.events(estimator)


class _FiniteRows(TransformerMixin, BaseEstimator):
    """A public step of a run whose output rows holding NaN or infinity become zero
    rows, and whose transform, where it raises, runs row by row, a row that raises
    giving a zero row: a public step can overflow on finite rows (``PolynomialFeatures``)
    or refuse some values (an encoder an unknown category, a vectorizer a string it
    cannot encode), and the next step or the run would fail on them, so that whether a
    run fails, and what the search releases, would depend on those rows. A map of each
    row alone: neighbours stay neighbours. Only inside the search; the released model
    holds the step itself."""

    def __init__(self, transformer):
        self.transformer = transformer

    def fit(self, X, y=None, **params):
        self.transformer.fit(X, y, **params)
        return self

    def transform(self, X):
        try:
            return _finite_rows(self.transformer.transform(X))
        except Exception:
            return _finite_rows(_row_by_row(self.transformer.transform, X))

    def fit_transform(self, X, y=None, **params):
        # A FrozenEstimator hides fit_transform (it would refit); a pipeline then fits
        # and transforms, and so must the guard in its place.
        if hasattr(self.transformer, "fit_transform"):
            try:
                return _finite_rows(self.transformer.fit_transform(X, y, **params))
            except Exception:
                pass
        return self.fit(X, y, **params).transform(X)

    def __sklearn_is_fitted__(self):
        try:
            check_is_fitted(self.transformer)
        except NotFittedError:
            return False
        return True

    def get_feature_names_out(self, input_features=None):
        return self.transformer.get_feature_names_out(input_features)

    def set_output(self, *, transform=None):
        self.transformer.set_output(transform=transform)
        return self

    def __sklearn_tags__(self):
        return get_tags(self.transformer)


def _row_by_row(transform, X):
    """``transform`` of each row of ``X`` alone, a row that raises giving a zero row of
    the others' width; raises if every row does (then no row shows the output)."""
    outputs = []
    for i in range(n_rows(X)):
        try:
            outputs.append(transform(take_rows(X, [i])))
        except Exception:
            outputs.append(None)
    template = next((out for out in outputs if out is not None), None)
    if template is None:
        return transform(X)  # raises, as every row does alone
    if sp.issparse(template):
        zero = sp.csr_matrix(template.shape, dtype=template.dtype)
        return sp.vstack([zero if out is None else out for out in outputs], format="csr")
    if hasattr(template, "iloc"):
        import pandas as pd

        zero = template.copy()
        zero.iloc[:] = 0
        return pd.concat([zero if out is None else out for out in outputs])
    template = np.asarray(template)
    zero = np.zeros_like(template) if template.dtype.kind in "biufc" else template * 0
    return np.vstack([zero if out is None else np.asarray(out) for out in outputs])


def _finite_rows(Xt):
    """``Xt`` with the rows that hold NaN or infinity in a numeric entry set to zero."""
    if hasattr(Xt, "iloc"):  # a DataFrame (set_output): its index and columns kept
        from pandas.api import types

        bad = np.zeros(len(Xt), dtype=bool)
        numeric = [i for i, dtype in enumerate(Xt.dtypes)
                   if types.is_numeric_dtype(dtype) and not types.is_bool_dtype(dtype)]
        for i in numeric:
            values = Xt.iloc[:, i].to_numpy(dtype=np.float64, na_value=np.nan)
            bad |= ~np.isfinite(values)
        if bad.any():
            Xt = Xt.copy()
            for i in numeric:
                column = Xt.iloc[:, i].copy()
                column[bad] = 0
                Xt.isetitem(i, column)
        return Xt
    if sp.issparse(Xt):
        return zero_nonfinite_rows(Xt if Xt.format in ("csr", "csc") else Xt.tocsr())
    if isinstance(Xt, np.ndarray) and Xt.dtype.kind in "fc":
        return zero_nonfinite_rows(np.asarray(Xt))
    return Xt


def _guard_public_steps(estimator, private_paths, path=""):
    """Wrap in :class:`_FiniteRows` every step of ``estimator``'s composites that
    feeds another step and holds no private step; the private steps map such rows
    themselves (:func:`~skdp_sparse.utils.validation.nonfinite_rows_zeroed`)."""

    def public(sub):
        return not any(p == sub or p.startswith(sub + "__") for p in private_paths)

    def guard(name, step, feeds):
        sub = f"{path}__{name}" if path else name
        if isinstance(step, str) or step is None:
            return step
        _guard_public_steps(step, private_paths, sub)
        if feeds and public(sub) and hasattr(step, "transform"):
            return _FiniteRows(step)
        return step

    if isinstance(estimator, Pipeline):
        last = len(estimator.steps) - 1
        estimator.steps = [(name, guard(name, step, i < last or bool(path)))
                           for i, (name, step) in enumerate(estimator.steps)]
    elif isinstance(estimator, ColumnTransformer):
        estimator.transformers = [(name, guard(name, step, True), cols)
                                  for name, step, cols in estimator.transformers]
        estimator.remainder = guard("remainder", estimator.remainder, True)
    elif isinstance(estimator, FeatureUnion):
        estimator.transformer_list = [(name, guard(name, step, True))
                                      for name, step in estimator.transformer_list]
    return estimator


def _unguard(estimator):
    """``estimator`` with every :class:`_FiniteRows` replaced by the step it wraps, also
    among the fitted clones a column transformer keeps."""
    def inner(step):
        return _unguard(step.transformer if isinstance(step, _FiniteRows) else step)

    if isinstance(estimator, Pipeline):
        estimator.steps = [(name, inner(step)) for name, step in estimator.steps]
    elif isinstance(estimator, ColumnTransformer):
        estimator.transformers = [(n, inner(t), c) for n, t, c in estimator.transformers]
        estimator.remainder = inner(estimator.remainder)
        if hasattr(estimator, "transformers_"):
            estimator.transformers_ = [(n, inner(t), c)
                                       for n, t, c in estimator.transformers_]
    elif isinstance(estimator, FeatureUnion):
        estimator.transformer_list = [(n, inner(t)) for n, t in estimator.transformer_list]
    return estimator


def _random_state_params(estimator):
    """Every ``random_state`` parameter of ``estimator`` and of its steps."""
    return [name for name in estimator.get_params(deep=True)
            if name == "random_state" or name.endswith("__random_state")]


def released(estimator):
    """The estimator as released: without the generator its noise came from (whose
    state, even advanced, can be rewound to regenerate that noise), in any step, also
    in the fitted clones a column transformer keeps beside its parameters; its public
    steps as given (not guarded, :class:`_FiniteRows`)."""
    _unguard(estimator)
    for name in _random_state_params(estimator):
        estimator.set_params(**{name: None})
    for outer in [estimator, *estimator.get_params(deep=True).values()]:
        for _, fitted, _ in getattr(outer, "transformers_", ()):
            if hasattr(fitted, "get_params"):
                released(fitted)
    return estimator


class WarningsAtCallersLine:
    """Warnings of the public dummy fits, once each and attributed to the caller's line:
    the dummy fits run many times, from inside the library. (A class, not a
    generator: the frames of ``contextlib`` would stop the walk to the caller.)"""

    def __enter__(self):
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc_info):
        self._catcher.__exit__(*exc_info)
        seen = set()
        for record in self._caught:
            key = (record.category, str(record.message))
            if key not in seen:
                seen.add(key)
                warn(str(record.message), record.category)
        return False
