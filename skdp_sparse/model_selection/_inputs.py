"""What the private search takes as ``X``, checked before any budget: numbers, strings
(text columns, raw documents), and the private steps that may take text."""

from __future__ import annotations

import scipy.sparse as sp
from sklearn.base import clone
from sklearn.utils import get_tags

from ..utils.validation import checked_array

__all__ = ["search_rows", "is_documents", "text_columns"]


#: What the search takes, and why: the message of every refused ``X``.
_WHAT_THE_SEARCH_TAKES = (
    "The private search takes a 2-d array or sparse matrix of numbers, a DataFrame whose "
    "columns hold numbers or strings, or raw documents (a 1-d sequence of str): it first "
    "fits every candidate on public stand-in data of the same type and shape (zeros, "
    "empty strings), which it makes from these types alone. Turn other values into "
    "numbers or strings before the search")


#: Parts of scikit-learn's messages on an ``X`` of a type or shape the search does not take.
_TYPE_ERRORS = ("not a number", "Expected 2D array", "bytes/strings", "Found array with dim")


def search_rows(X, estimator, steps, candidates):
    """``X`` checked as the search needs it, before any budget: at least 4 rows, and
    numbers that are finite or strings (a missing value in a text column is refused as
    NaN is in a numeric one: whether a run fails must not depend on the rows). Returns
    what the fits get: ``X`` itself, or the checked array of a list of numbers.

    The search fits every candidate on public stand-in data of the type of ``X``
    (:meth:`~._public.PublicData.dummy`) before it reads ``X``; the steps that
    featurise text or categories must learn nothing from the rows (frozen, or a
    ``OneHotEncoder`` with public categories), and a private step of ``steps`` that
    takes text must plan its fit from its parameters
    (:func:`_refuse_private_text_steps`)."""
    documents = is_documents(X)
    text = text_columns(X) if not documents and hasattr(X, "columns") else []
    if documents or text:
        _refuse_private_text_steps(estimator, steps, candidates)
    if documents:
        _check_strings(X, "X")
        if len(X) < 4:
            raise ValueError(f"X holds {len(X)} documents; the private search needs 4 "
                             "or more")
        return X
    if text:
        numeric = [i for i, c in enumerate(X.columns) if c not in text]
        if numeric:
            _numeric_rows(X.iloc[:, numeric])
        elif len(X) < 4:
            raise ValueError(f"X has {len(X)} rows; the private search needs 4 or more")
        for column in text:
            _check_strings(X[column], f"column {column!r} of X")
        return X
    checked = _numeric_rows(X)
    return X if hasattr(X, "shape") else checked


def _numeric_rows(X):
    try:
        return checked_array(X, accept_sparse=True, dtype="numeric", ensure_all_finite=True,
                             ensure_min_samples=4, ensure_min_features=1, input_name="X")
    except ValueError as exc:
        # The errors of a type or a shape the search does not take; the others (NaN,
        # too few rows) say what is wrong with a type it takes.
        if not any(text in str(exc) for text in _TYPE_ERRORS):
            raise
        raise ValueError(f"{_WHAT_THE_SEARCH_TAKES}; here: {exc}") from None


def _refuse_private_text_steps(estimator, steps, candidates):
    """A private step that takes text is taken where what its fit releases and the
    width of its output are functions of its parameters (its ``_planned_from_parameters``
    says so: a DPTfidfVectorizer with a public vocabulary); one that learns them from the
    text (a vocabulary chosen privately) would learn them from the stand-in data's empty
    strings, and the releases of the steps after it depend on that width. Checked in
    every candidate: a grid value may set the step or its vocabulary."""
    for cand in candidates:
        configured = clone(estimator).set_params(**cand)
        params = {**configured.get_params(deep=True), "": configured}
        for path, step in ((path, params[path]) for path in steps.paths):
            planned = getattr(step, "_planned_from_parameters", lambda: False)()
            if not get_tags(step).input_tags.string or planned is True:
                continue
            grid = {k: v for k, v in cand.items()
                    if not path or k == path or path.startswith(k + "__")
                    or k.startswith(path + "__")}
            raise ValueError(
                f"{type(step).__name__} {path!r}"
                + (f" (as the candidate {grid} sets it)" if grid else "")
                + " learns from the text it is given, but the private search first fits "
                "every candidate on public stand-in data, whose documents and text columns "
                "are empty strings. Give it a public vocabulary (vocabulary=..., not drawn "
                "from these documents), fit it beforehand (privately, with a budget of its "
                "own) and pass it wrapped in sklearn.frozen.FrozenEstimator, or use a step "
                "that learns nothing (HashingVectorizer)")


def is_documents(X):
    """Whether ``X`` is a 1-d list, tuple, array or Series whose first entry is a str
    (its type, like a column's, is public)."""
    if isinstance(X, list | tuple):
        return len(X) > 0 and isinstance(X[0], str)
    if getattr(X, "ndim", None) == 1 and not sp.issparse(X) and len(X) > 0:
        return isinstance(X.iloc[0] if hasattr(X, "iloc") else X[0], str)
    return False


def text_columns(frame):
    """The columns of a DataFrame whose dtype is text (object or string); a column of
    another non-numeric dtype (categorical, dates) is refused."""
    from pandas.api import types

    text = []
    for column, dtype in frame.dtypes.items():
        if types.is_numeric_dtype(dtype) or types.is_bool_dtype(dtype):
            continue
        if not (types.is_object_dtype(dtype) or types.is_string_dtype(dtype)):
            raise ValueError(f"{_WHAT_THE_SEARCH_TAKES}; column {column!r} has dtype "
                             f"{dtype}")
        text.append(column)
    return text


def _check_strings(values, where):
    # The check reads every value, as the finiteness check of numbers does: a value
    # that is not a str would fail some fits and not others, after the budget.
    if not all(isinstance(v, str) for v in values):
        raise ValueError(f"{_WHAT_THE_SEARCH_TAKES}; {where} holds a value that is not a "
                         "str (a missing value, say; it is not shown)")
