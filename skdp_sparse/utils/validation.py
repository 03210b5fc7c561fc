"""Validation of hyperparameters and data, shared by every estimator.

Hyperparameters are declared, scikit-learn style, in a class attribute
``_parameter_constraints`` mapping each name to a list of accepted forms; one
function, :func:`validate_params`, checks them all and raises a ``ValueError``
naming the parameter. Rules that tie several parameters together and are
specific to differential privacy (a Gaussian solver needs ``delta > 0``, output
perturbation needs ``penalty="l2"``) live in each estimator's ``_check_dp_rules``.
Everything here runs before any private computation.

Booleans are never accepted as numbers (``True`` is not ``1``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import numbers
import re

import numpy as np
import scipy.sparse as sp
from scipy.stats import norm
from sklearn.utils.validation import check_array, validate_data

from ._warnings import warn

__all__ = [
    "MAX_EPSILON",
    "check_sparse_structure",
    "MIN_BOUND",
    "MAX_BOUND",
    "MIN_RATIO_OVER_DELTA_ALONE",
    "Interval",
    "Options",
    "Bound",
    "validate_params",
    "check_privacy_params",
    "check_budget_pair",
    "smallest_epsilon",
    "warn_delta_not_below_one_over_n",
    "check_bound",
    "canonical_sparse",
    "validate_fit_data",
    "nonfinite_rows_zeroed",
    "validate_predict_data",
    "data_free_errors",
    "validate_rows",
    "validate_output_rows",
    "checked_array",
]

#: Largest finite epsilon a fit accepts. Beyond it no noise calibration of the
#: library is exact (noise scales fall below the resolution of doubles relative
#: to the statistics), so larger budgets are refused; ``np.inf`` fits without noise.
MAX_EPSILON = 1000.0


#: A finite epsilon is refused where delta alone already buys almost the noise it asks
#: for: when the ratio ``mu(epsilon, delta)`` of the Gaussian mechanism that is
#: ``(epsilon, delta)``-DP is below this multiple of ``mu(0, delta)``, the ratio at
#: which a Gaussian mechanism is ``(0, delta)``-DP. A fit splits its ratio among its
#: releases, and near ``mu(0, delta)`` the splits reach shares that are ``(0, delta)``-DP
#: on their own, with no epsilon left to calibrate them by (the plans then failed with
#: a zero epsilon); from this multiple on every solver plans (checked at 1.02 times the
#: floor for deltas from 1e-8 to 0.3). The pairs refused have delta far above the
#: ``1 / n`` that privacy needs, or epsilon below about ``2.5 delta``
#: (:func:`smallest_epsilon`).
MIN_RATIO_OVER_DELTA_ALONE = 2.0


#: Range of a finite public bound. Sensitivities multiply up to three bounds (a row
#: norm squared times a target bound), which must stay finite and non-zero in doubles;
#: bounds outside are refused with the parameter's name instead of overflowing later.
MIN_BOUND, MAX_BOUND = 1e-100, 1e100


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


class Interval:
    """Numbers of a type (``numbers.Real`` or ``numbers.Integral``) in a range.

    ``closed`` is ``"both"``, ``"left"``, ``"right"`` or ``"neither"``; ``None``
    bounds are open. ``inf`` admits ``np.inf`` as well whatever the upper bound.
    """

    def __init__(self, kind, left, right, *, closed="both", inf=False):
        self.kind, self.left, self.right, self.closed, self.inf = kind, left, right, closed, inf

    def accepts(self, value):
        if not (_is_int(value) if self.kind is numbers.Integral else _is_real(value)):
            return False
        if math.isnan(value):
            return False
        if math.isinf(value):
            return self.inf and value > 0
        lo_ok = self.left is None or (
            value >= self.left if self.closed in ("both", "left") else value > self.left)
        hi_ok = self.right is None or (
            value <= self.right if self.closed in ("both", "right") else value < self.right)
        return lo_ok and hi_ok

    def __str__(self):
        kind = "an int" if self.kind is numbers.Integral else "a number"
        lb = "[" if self.closed in ("both", "left") else "("
        rb = "]" if self.closed in ("both", "right") else ")"
        left = "-inf" if self.left is None else f"{self.left:g}"
        right = "inf" if self.right is None else f"{self.right:g}"
        text = f"{kind} in {lb}{left}, {right}{rb}"
        return text + (" or np.inf" if self.inf and self.right is not None else "")


class Options:
    """One of a fixed set of values (strings, ``True``/``False``, ...)."""

    def __init__(self, *values):
        self.values = values

    def accepts(self, value):
        if isinstance(value, np.bool_):
            value = bool(value)
        return any(type(value) is type(v) and value == v for v in self.values)

    def __str__(self):
        return "one of " + ", ".join(repr(v) for v in self.values)


class Bound:
    """A public bound: a positive number, or an array of positive numbers (one per
    feature, checked against the data's width later). ``inf`` admits infinity."""

    def __init__(self, *, per_feature=False, inf=False):
        self.per_feature, self.inf = per_feature, inf

    def accepts(self, value):
        if _is_real(value):
            return self._in_range(np.asarray([value], dtype=float))
        if not self.per_feature or isinstance(value, str | bytes):
            return False
        try:
            arr = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            return False
        return arr.ndim == 1 and arr.size > 0 and self._in_range(arr)

    def _in_range(self, arr):
        finite = np.isfinite(arr)
        return bool(np.all(np.where(finite, (arr >= MIN_BOUND) & (arr <= MAX_BOUND),
                                    self.inf & (arr == np.inf))))

    def __str__(self):
        text = f"a positive number in [{MIN_BOUND:g}, {MAX_BOUND:g}]" + (
            " or inf" if self.inf else "")
        return text + (" or a 1-d array of them, one per feature" if self.per_feature else "")


def _accepts(constraint, value):
    if constraint is None:
        return value is None
    if constraint == "boolean":
        return isinstance(value, bool | np.bool_)
    if constraint == "random_state":
        return (value is None or _is_int(value)
                or isinstance(value, np.random.Generator | np.random.RandomState))
    if constraint == "array-like":
        return hasattr(value, "__len__") and not isinstance(value, str | bytes)
    if constraint == "callable":
        return callable(value)
    if constraint == "no_validation":
        return True
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    return constraint.accepts(value)


def _describe(constraint):
    if constraint is None:
        return "None"
    if isinstance(constraint, str):
        return {"boolean": "a bool", "random_state": "None, an int or a numpy Generator",
                "array-like": "an array-like", "callable": "a callable"}.get(
                    constraint, constraint)
    if isinstance(constraint, type):
        return f"an instance of {constraint.__name__}"
    return str(constraint)


def validate_params(constraints, params, owner):
    """Check every parameter that has constraints; raise ``ValueError`` on the first
    that satisfies none of its accepted forms."""
    for name, accepted in constraints.items():
        if name not in params:
            continue
        value = params[name]
        if not any(_accepts(c, value) for c in accepted):
            forms = " or ".join(_describe(c) for c in accepted)
            raise ValueError(f"{owner}: {name} must be {forms}; got {value!r}")


#: Constraints of the privacy budget, shared by every private estimator.
EPSILON = [Interval(numbers.Real, 0, MAX_EPSILON, closed="right", inf=True)]
DELTA = [Interval(numbers.Real, 0, 1, closed="left")]


def check_privacy_params(epsilon, delta, *, require_delta=False):
    """Validate ``(epsilon, delta)``: ``0 < epsilon <= MAX_EPSILON`` or ``np.inf``
    (noise off), ``0 <= delta < 1``; ``require_delta`` asks for ``delta > 0``."""
    validate_params({"epsilon": EPSILON, "delta": DELTA},
                    {"epsilon": epsilon, "delta": delta}, "the privacy budget")
    if require_delta and delta == 0:
        raise ValueError(
            "this method gives approximate DP only: set delta > 0 "
            "(for example 1 / n_samples**2)"
        )
    check_budget_pair(epsilon, delta)
    return float(epsilon), float(delta)


def check_budget_pair(epsilon, delta):
    """Refuse a finite ``epsilon`` below :func:`smallest_epsilon` of ``delta``, which
    ``delta`` alone nearly buys; ``epsilon`` and ``delta`` are otherwise valid."""
    if not (math.isfinite(epsilon) and delta > 0):
        return
    if epsilon < smallest_epsilon(delta):
        alone = 2.0 * float(norm.ppf((1.0 + delta) / 2.0))
        raise ValueError(
            f"epsilon={epsilon!r} is too small for delta={delta!r}: at this delta a "
            f"Gaussian release with noise {1 / alone:.3g} times its sensitivity is "
            "already (0, delta)-DP, which leaves no epsilon to calibrate the fit's "
            "releases by. Choose delta well below 1 / n_samples (for example "
            "1 / n_samples**2) or a larger epsilon")


def warn_delta_not_below_one_over_n(owner, delta, n_samples):
    """Warn when ``delta >= 1 / n_samples``: publishing each row in the clear with
    probability ``delta`` is ``(0, delta)``-DP, and then publishes ``n delta >= 1`` rows
    on average, so the guarantee no longer rules out such a release. The default
    ``delta = 1e-6`` reaches it at a million rows. Both numbers are public, so the
    warning reveals nothing about the rows."""
    if not (isinstance(delta, numbers.Real) and delta > 0 and n_samples):
        return
    if float(delta) * float(n_samples) >= 1.0:
        warn(f"{owner}: delta={float(delta):.3g} is not below 1 / n_samples = "
             f"{1.0 / float(n_samples):.3g}: publishing each row in the clear with "
             "probability delta satisfies such a guarantee. Choose delta well below "
             "1 / n_samples (for example 1 / n_samples**2)")


@functools.lru_cache(maxsize=256)
def smallest_epsilon(delta):
    """The smallest epsilon a fit accepts at ``delta`` (0 for pure DP): that of the
    Gaussian mechanism whose ratio is :data:`MIN_RATIO_OVER_DELTA_ALONE` times
    ``mu(0, delta) = 2 Phi^-1((1 + delta) / 2)``, the ratio at which a Gaussian
    mechanism is ``(0, delta)``-DP. A function of a public number (cached)."""
    if delta <= 0:
        return 0.0
    from ..privacy.accounting import gaussian_epsilon

    alone = 2.0 * float(norm.ppf((1.0 + delta) / 2.0))
    return gaussian_epsilon(MIN_RATIO_OVER_DELTA_ALONE * alone, float(delta))


def check_bound(name, value, *, allow_none=False, allow_inf=False, size=None):
    """A public bound as a float, or as an array of length ``size``."""
    if value is None:
        if allow_none:
            return None
        raise ValueError(f"{name} is a required public bound; it may not be None")
    constraint = Bound(per_feature=size is not None, inf=allow_inf)
    validate_params({name: [constraint]}, {name: value}, "the estimator")
    if _is_real(value):
        return float(value)
    arr = np.asarray(value, dtype=float)
    if arr.shape != (size,):
        raise ValueError(f"{name} must be a number or an array of shape ({size},), "
                         f"got shape {arr.shape}")
    return arr


def canonical_sparse(X):
    """A sparse matrix object of our own whose arrays are canonical.

    The caller's matrix is never modified: a non-canonical input (unsorted or
    duplicate indices, stored zeros, other dtypes) is copied before it is made
    canonical; a canonical one is wrapped in a new object that shares its arrays,
    which the library only reads. Duplicates whose sum overflows raise, or within
    :func:`nonfinite_rows_zeroed` make their rows zero rows.
    """
    zeros = X.nnz > 0 and not np.all(X.data)
    if X.has_canonical_format and not zeros and X.data.dtype == np.float64:
        return _on_own_indices(X, X.data)
    X = X.astype(np.float64, copy=True)
    X.sum_duplicates()
    # The values were checked finite as stored; the sums of duplicates can overflow.
    if not np.all(np.isfinite(X.data)):
        if _ZERO_NONFINITE_ROWS.get():
            return zero_nonfinite_rows(X)
        raise ValueError("X holds duplicate entries (the same row and column stored more "
                         "than once) whose sum is not finite; a sparse matrix means their "
                         "sum, so sum_duplicates() and check the values first")
    X.eliminate_zeros()
    return X


#: Parts of scikit-learn's and numpy's validation messages that quote the data: the
#: whole array of a 1-d X, and the cell that is not a number. Each is replaced by what
#: it says about the data's type or shape, which is public.
_QUOTED_DATA = (
    (re.compile(r":\s*array=.*?\.\s*(?=Reshape your data)", re.S), ".\n"),
    (re.compile(r"(could not convert \w+ to \w+):.*", re.S),
     r"\1 (a value of the data is not a number; it is not shown)"),
    (re.compile(r"(invalid literal for \S+ with base \d+):.*", re.S),
     r"\1 (a value of the data is not a number; it is not shown)"),
    (re.compile(r'(Unable to parse string) ".*?"', re.S), r"\1"),
    (re.compile(r"(Complex data not supported)\s.*", re.S),
     r"\1 (the data are complex numbers; they are not shown)"),
)


class data_free_errors:
    """Context in which a ``ValueError`` or ``TypeError`` of input validation leaves
    without the data it quotes: scikit-learn prints a 1-d X whole, and numpy the cell
    it cannot convert to a number. Error messages name parameters, types and shapes
    only (``doc/security.rst``). The exception chain, which may hold the original
    message, is cut."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if isinstance(exc, ValueError | TypeError):
            message = clean = str(exc)
            for pattern, replacement in _QUOTED_DATA:
                clean = pattern.sub(replacement, clean)
            if clean != message:
                exc.args = (clean,)
                exc.__cause__ = exc.__context__ = None
                exc.__suppress_context__ = True
        return False


def _check_container(X, owner):
    """Refuse before validation what it would mishandle: a dask collection (converted
    element by element) and a sparse matrix whose index arrays leave its shape."""
    module = type(X).__module__
    if module.startswith("dask"):
        # Estimators that fit dask arrays reach this with other dask collections only.
        what = "dask arrays" if module.startswith("dask.array") else \
            f"a dask {type(X).__name__}"
        # Imported here: the solvers import this module.
        from ..solvers import distributed_solvers

        blocks = ", ".join(distributed_solvers())
        raise ValueError(
            f"{owner} does not take {what}; DPSparseMeanEstimator, and "
            "DPSparseLogisticRegression / DPGreedyCDRegressor with a solver that runs on "
            f"row blocks ({blocks}), fit a dask array of row blocks with known chunk "
            "sizes (a DataFrame's to_dask_array(lengths=True)). Compute the data first if "
            "they fit in memory.")
    check_sparse_structure(X)


def check_sparse_structure(X):
    """Refuse a CSR/CSC/BSR matrix whose index arrays do not describe its shape (scipy
    accepts them unchecked, and kernels would read outside the arrays)."""
    if not sp.issparse(X) or X.format not in ("csr", "csc", "bsr"):
        return X
    major, minor = X.shape if X.format != "csc" else X.shape[::-1]
    if X.format == "bsr":
        r, c = X.blocksize
        major, minor = major // r, minor // c
    indptr, indices = X.indptr, X.indices
    fault = None
    if indptr.shape != (major + 1,) or indptr[0] != 0 or indptr[-1] > len(indices):
        fault = "its indptr does not match its shape"
    elif major and np.any(np.diff(indptr) < 0):
        fault = "its indptr decreases"
    elif indptr[-1] and (indices[:indptr[-1]].min() < 0
                         or indices[:indptr[-1]].max() >= minor):
        fault = "an index points outside its shape"
    if fault:
        raise ValueError(f"X is not a valid {X.format.upper()} matrix: {fault}")
    return X


def validate_rows(estimator, X, **kwargs):
    """scikit-learn's ``validate_data`` within :class:`data_free_errors`, on a sparse
    matrix whose index arrays were checked. Within :func:`nonfinite_rows_zeroed`, rows
    holding NaN or infinity become zero rows instead of raising."""
    _check_container(X, type(estimator).__name__)
    zero_rows = kwargs.get("ensure_all_finite", True) is True and _ZERO_NONFINITE_ROWS.get()
    if zero_rows:
        kwargs["ensure_all_finite"] = False
    with data_free_errors():
        X = validate_data(estimator, X, **kwargs)
    return zero_nonfinite_rows(X) if zero_rows else X


def validate_output_rows(estimator, X, **kwargs):
    """Rows in a fitted transformer's output space (``inverse_transform``'s input):
    :func:`checked_array` and the fitted number of columns. Feature names belong to
    the input space and are not checked (nor are they by scikit-learn's scalers): an
    array the transformer returned has none."""
    X = checked_array(X, **kwargs)
    n_features = getattr(estimator, "n_features_in_", None)
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"X has {X.shape[1]} features, but {type(estimator).__name__} "
                         f"is expecting {n_features} features as input.")
    return X


def checked_array(X, **kwargs):
    """scikit-learn's ``check_array`` within :class:`data_free_errors`, on a sparse
    matrix whose index arrays were checked."""
    _check_container(X, "this step")
    with data_free_errors():
        return check_array(X, **kwargs)


_ZERO_NONFINITE_ROWS = contextvars.ContextVar("zero_nonfinite_rows", default=False)


@contextlib.contextmanager
def nonfinite_rows_zeroed():
    """Within it, a fit maps each row of ``X`` holding NaN or infinity to a zero row
    instead of raising. The map reads each row alone, so neighbouring data sets stay
    neighbours and a fit's guarantee holds for the mapped rows; whether a fit fails no
    longer depends on them. The private search's runs fit in it: a failed run would
    change what the search releases, and a public step (``PolynomialFeatures``
    overflowing, a function of the rows) can make a value non-finite after the search
    checked its input."""
    token = _ZERO_NONFINITE_ROWS.set(True)
    try:
        yield
    finally:
        _ZERO_NONFINITE_ROWS.reset(token)


def zero_nonfinite_rows(X):
    """``X`` with every row holding NaN or infinity set to 0 (a copy where any is)."""
    if sp.issparse(X):
        bad = ~np.isfinite(X.data)
        if not bad.any():
            return X
        X = X.copy()
        entry_rows = X.indices if X.format == "csc" else \
            np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        X.data[np.isin(entry_rows, entry_rows[bad])] = 0.0
        X.eliminate_zeros()
        return X
    bad = ~np.isfinite(X).all(axis=1)
    if bad.any():
        X = np.array(X, copy=True)
        X[bad] = 0.0
    return X


def validate_fit_data(estimator, X, y=None, *, y_required=False, y_numeric=False,
                      accept_sparse=("csr", "csc"), ensure_all_finite=True):
    """Data of a fit: ``validate_data`` plus a canonical private copy of sparse input.

    Sparse formats other than ``accept_sparse`` (COO, LIL, DOK, ...) are converted
    to the first of them; stored duplicates are summed and stored zeros dropped
    (in a copy: the caller's matrix is never changed). Raises ``ValueError`` on
    NaN or infinity (unless ``ensure_all_finite=False``, or within
    :func:`nonfinite_rows_zeroed`, which maps such rows of ``X`` to zero rows), on no
    rows or no features, and when ``y`` is required and missing.
    """
    zero_rows = ensure_all_finite and _ZERO_NONFINITE_ROWS.get()
    if y is None and y_required:
        raise ValueError(f"{type(estimator).__name__} requires y to be passed, "
                         "but the target y is None.")
    kwargs = dict(reset=True, accept_sparse=list(accept_sparse), dtype=np.float64,
                  ensure_all_finite=ensure_all_finite and not zero_rows)
    _check_container(X, type(estimator).__name__)
    X = _float64_values(X)
    shape = getattr(X, "shape", ())
    if len(shape) == 2 and shape[1] == 0:
        # A shape is public; scikit-learn's own error (whose words this keeps) names
        # no cause.
        raise ValueError(
            f"Found array with 0 feature(s) (shape=({shape[0]}, 0)) while a minimum of 1 "
            f"is required by {type(estimator).__name__}: the step before it kept no "
            "column, as a DPTfidfVectorizer does when its private "
            "vocabulary comes out empty (its warning tells why and what to do: more "
            "documents, a larger epsilon, a smaller max_terms_per_document, or a "
            "HashingVectorizer, which needs no vocabulary). This fit spent nothing.")
    with data_free_errors():
        if y is None:
            X = validate_data(estimator, X, **kwargs)
        else:
            X, y = validate_data(estimator, X, y, y_numeric=y_numeric, **kwargs)
            if y_numeric:
                # scikit-learn converts object targets only; strings too fail here.
                y = np.asarray(y, dtype=np.float64)
                # Its finiteness check runs before that conversion, where a None among
                # objects is not yet the NaN it becomes.
                if not np.isfinite(y).all():
                    raise ValueError("Input y contains NaN or infinity (or None).")
    if X.shape[0] == 0:
        raise ValueError("X has no rows")
    if zero_rows:
        X = zero_nonfinite_rows(X)
    if sp.issparse(X):
        X = canonical_sparse(X)
    return X, y


def _float64_values(X):
    """A CSR or CSC matrix of other floats as float64 that shares the caller's index
    arrays (read only): scikit-learn's conversion copies them too, a third of the
    matrix's memory for float32 values and int32 indices. Anything else unchanged."""
    if not (sp.issparse(X) and X.format in ("csr", "csc")
            and np.issubdtype(X.data.dtype, np.floating) and X.data.dtype != np.float64):
        return X
    return _on_own_indices(X, X.data.astype(np.float64))


def _on_own_indices(X, data):
    """A new matrix of ``X``'s format (CSR or CSC) holding ``data`` on ``X``'s own index
    arrays where they are native int32 or int64 (others are converted), which the
    library only reads: scipy's constructor narrows int64 index arrays whose values fit
    in int32, in a copy that the kernels' int64 rows would widen again."""
    cls = sp.csr_matrix if X.format == "csr" else sp.csc_matrix
    out = cls((data, X.indices, X.indptr), shape=X.shape, copy=False)
    # Only native int32 and int64, scipy's own: index arrays of another integer type
    # (int16, uint32, big-endian, set on a matrix by hand) stay with the constructor's
    # int32 copy. Kept, int16 ones reached the mean's kernel, whose 8-byte view of them
    # failed or not by the number of stored entries (a private count) modulo 4.
    if X.indices.dtype == X.indptr.dtype and X.indices.dtype in _INDEX_DTYPES:
        out.indices, out.indptr = X.indices, X.indptr
    return out


_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def validate_predict_data(estimator, X):
    """Data for ``predict``: checked against the fit's width, never modified."""
    return validate_rows(estimator, X, reset=False, accept_sparse=["csr", "csc"],
                         dtype=np.float64)
