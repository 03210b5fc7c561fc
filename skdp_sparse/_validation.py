"""Checks of hyperparameters and data shared by all estimators.

Every check raises a ``ValueError`` that names the offending parameter, before
any private computation starts.
"""

import math
import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import validate_data

__all__ = ["check_privacy_params", "check_bound", "check_floating_point_safe",
           "validate_sparse_data"]


def check_privacy_params(epsilon, delta, *, require_delta=False):
    """Validate ``(epsilon, delta)``: ``epsilon > 0`` (``np.inf`` switches noise off),
    ``0 <= delta < 1``; ``require_delta`` asks for ``delta > 0``."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise ValueError(f"epsilon must be a positive number, got {epsilon!r}")
    if not (epsilon > 0):
        raise ValueError(f"epsilon must be > 0 (np.inf turns noise off), got {epsilon!r}")
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or math.isnan(delta):
        raise ValueError(f"delta must be a number in [0, 1), got {delta!r}")
    if not (0 <= delta < 1):
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if require_delta and delta == 0:
        raise ValueError(
            "this method gives approximate DP only: set delta > 0 "
            "(for example 1 / n_samples**2)"
        )
    return float(epsilon), float(delta)


def check_bound(name, value, *, allow_none=False, allow_inf=False, size=None):
    """Validate a public bound: a positive number, or an array of them of length ``size``."""
    if value is None:
        if allow_none:
            return None
        raise ValueError(f"{name} is a required public bound; it may not be None")
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        if isinstance(value, bool):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
        bad = not (arr > 0) or (np.isinf(arr) and not allow_inf)
        if bad:
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        return float(arr)
    if size is not None and arr.shape != (size,):
        raise ValueError(f"{name} must be a number or an array of shape ({size},), "
                         f"got shape {arr.shape}")
    if np.any(np.isnan(arr)) or np.any(arr <= 0) or (np.any(np.isinf(arr)) and not allow_inf):
        raise ValueError(f"{name} must contain positive finite numbers only")
    return arr


def check_floating_point_safe(value):
    """Validate a ``floating_point_safe`` option: ``"auto"`` or a bool (returned as bool)."""
    if isinstance(value, str) and value == "auto":
        return value
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise ValueError(f"floating_point_safe must be 'auto', True or False, got {value!r}")


def validate_sparse_data(estimator, X, y=None, *, reset=True, accept_sparse=("csr", "csc"),
                         **kwargs):
    """``sklearn.utils.validation.validate_data`` that keeps sparse input sparse.

    COO, LIL, DOK and other formats are converted to the first of ``accept_sparse``;
    NaN and infinity raise ``ValueError``; data are cast to float64.
    """
    kwargs.setdefault("dtype", np.float64)
    if y is None:
        kwargs.pop("y_numeric", None)
        X = validate_data(estimator, X, reset=reset, accept_sparse=list(accept_sparse),
                          **kwargs)
        out = X
    else:
        X, y = validate_data(estimator, X, y, reset=reset, accept_sparse=list(accept_sparse),
                             **kwargs)
        out = (X, y)
    if X.shape[0] == 0:
        raise ValueError("X has no rows")
    if sp.issparse(X):
        X.sort_indices()
    return out
