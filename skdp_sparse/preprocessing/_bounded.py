"""A scaler to public ranges: clips and rescales each feature, learns nothing."""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin

from ..utils.validation import validate_output_rows, validate_rows
from ._bounds import (
    OutputBounds,
    check_bounds,
    check_zero_inside,
    clip_and_scale_sparse,
    ranges_for,
    required_output_width,
    unscale_sparse,
)

__all__ = ["BoundedScaler"]


def check_feature_range(feature_range, owner):
    """``(a, b)`` as floats, finite with ``a < b``."""
    ok = (isinstance(feature_range, tuple | list) and len(feature_range) == 2
          and all(isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_)
                  and math.isfinite(v) for v in feature_range)
          and feature_range[0] < feature_range[1])
    if not ok:
        raise ValueError(f"{owner}: feature_range must be a pair (a, b) of finite numbers "
                         f"with a < b, got {feature_range!r}")
    return float(feature_range[0]), float(feature_range[1])


class BoundedScaler(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Clip each feature to a public range and map it linearly to a fixed interval.

    Dense input: each entry is clipped to ``[lower_j, upper_j]`` and mapped by
    ``a + (b - a) (x - lower_j) / (upper_j - lower_j)`` onto ``feature_range =
    (a, b)``, as :class:`~sklearn.preprocessing.MinMaxScaler` would with the ranges
    given instead of learnt.

    Sparse input is scaled **without shifting**, so that zeros stay zeros and
    nothing is densified: each stored entry is clipped to ``[lower_j, upper_j]`` and
    divided by ``max(|lower_j|, |upper_j|)``; the output lies in ``[-1, 1]`` and
    ``feature_range`` is not used. Every range must then contain 0 (a ``ValueError``
    says so otherwise: pass such data dense). The output keeps the input's format
    (CSR or CSC; other formats become CSR) and never stores more entries than the
    input.

    Privacy
    -------
    The ranges are public hyperparameters and ``fit`` learns nothing from the data
    (it checks the parameters and the number of features), so the transformer costs
    no privacy budget: ``epsilon_spent_`` and ``delta_spent_`` are 0. It turns raw
    measurements into features with public bounds, which the private estimators
    need: :meth:`output_bounds` gives the ``feature_bound`` and ``norm_bound`` to
    pass to the next step of a pipeline, from the parameters alone. Choose the
    ranges from what is known about the data without looking at it (units,
    documented caps, physical limits); ranges taken from the training data
    (``X.min(0)``, ``X.max(0)``) would release those statistics.

    Parameters
    ----------
    bounds : pair (lower, upper)
        Public range of each feature: ``lower`` and ``upper`` are numbers (the same
        range for every feature) or arrays with one value per feature, finite, with
        ``lower_j < upper_j``. Entries outside are clipped to the nearest bound.
    feature_range : pair (a, b), default=(0.0, 1.0)
        Interval onto which each range is mapped (dense input), with ``a < b``.

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of the features seen during fit, when ``X`` has string column names.
    epsilon_spent_, delta_spent_ : float
        0: the fit reads nothing private.
    privacy_events_ : tuple
        Empty.

    See Also
    --------
    DPStandardScaler : private standardisation, when the centre and spread of the
        features are not known.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_sparse.preprocessing import BoundedScaler
    >>> X = np.array([[20.0, 1.0], [35.0, 9.0], [99.0, 5.0]])
    >>> scaler = BoundedScaler(bounds=([18, 0], [90, 10]), feature_range=(-1, 1))
    >>> scaler.fit_transform(X)
    array([[-0.94444444, -0.8       ],
           [-0.52777778,  0.8       ],
           [ 1.        ,  0.        ]])
    >>> scaler.output_bounds()
    OutputBounds(feature_bound=1.0, norm_bound=1.4142135623730951)
    """

    def __init__(self, bounds, *, feature_range=(0.0, 1.0)):
        self.bounds = bounds
        self.feature_range = feature_range

    # -- checks ---------------------------------------------------------------
    def _check_params(self):
        owner = type(self).__name__
        check_bounds(self.bounds, owner)
        check_feature_range(self.feature_range, owner)

    # -- fit / transform --------------------------------------------------------
    def fit(self, X, y=None):
        """Check the parameters and the number of features of ``X``; learn nothing.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Raises ``ValueError`` on NaN or infinite values, and on a number of
            features other than the bounds' length (when they are arrays).
        y : None
            Ignored.

        Returns
        -------
        self
        """
        self._check_params()
        X = validate_rows(self, X, accept_sparse=["csr", "csc"], dtype=np.float64)
        lower, upper = ranges_for(self, X.shape[1])
        if sp.issparse(X):
            check_zero_inside(lower, upper, type(self).__name__)
        self.epsilon_spent_ = 0.0
        self.delta_spent_ = 0.0
        self.privacy_events_ = ()
        return self

    def transform(self, X):
        """Clip ``X`` to the ranges and rescale it (see the class description).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        X_new : {ndarray, sparse matrix} of shape (n_samples, n_features)
            A new array (or matrix, for sparse input); ``X`` is never modified.
        """
        self._check_params()
        X = validate_rows(self, X, accept_sparse=["csr", "csc"],
                          dtype=[np.float64, np.float32], reset=False)
        dtype = X.dtype
        lower, upper = ranges_for(self, X.shape[1])
        if sp.issparse(X):
            check_zero_inside(lower, upper, type(self).__name__)
            out = clip_and_scale_sparse(X, lower, upper,
                                        np.maximum(np.abs(lower), np.abs(upper)))
            # Entries lie in [-1, 1], whose ends float32 holds exactly: rounding to
            # nearest cannot leave it.
            return out.astype(dtype, copy=False)
        a, b = check_feature_range(self.feature_range, type(self).__name__)
        out = np.clip(X, lower, upper).astype(np.float64, copy=False)
        out -= lower
        out *= (b - a) / (upper - lower)
        out += a
        out = out.astype(dtype, copy=False)
        # Rounding (in the arithmetic, or to float32) may put an entry one unit in the
        # last place outside [a, b]: clip to the output type's values inside it.
        return np.clip(out, *_inside(a, b, dtype), out=out)

    def inverse_transform(self, X):
        """Map transformed data back to the original units (of the clipped data).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        X_original : {ndarray, sparse matrix} of shape (n_samples, n_features)
        """
        self._check_params()
        X = validate_output_rows(self, X, accept_sparse=["csr", "csc"], dtype=np.float64)
        lower, upper = ranges_for(self, X.shape[1])
        if sp.issparse(X):
            return unscale_sparse(X, np.maximum(np.abs(lower), np.abs(upper)))
        a, b = check_feature_range(self.feature_range, type(self).__name__)
        return (X - a) * ((upper - lower) / (b - a)) + lower

    # -- public bounds of the output ------------------------------------------
    def output_bounds(self, n_features=None, *, sparse=False):
        """Public bounds of :meth:`transform`'s output, from the parameters alone.

        Every entry of the output satisfies ``|x_ij| <= feature_bound`` and every row
        ``||x_i||_2 <= norm_bound = feature_bound * sqrt(n_features)``, whatever the
        data: pass them as the ``feature_bound`` and ``norm_bound`` of the estimator
        that follows.

        Parameters
        ----------
        n_features : int, optional
            Number of features; by default the length of the bounds (when they are
            arrays) or ``n_features_in_`` after fit.
        sparse : bool, default=False
            Bounds of the output for sparse input (scaled without shifting:
            ``feature_bound = 1``) rather than dense input
            (``feature_bound = max(|a|, |b|)`` of ``feature_range``).

        Returns
        -------
        OutputBounds
            The named pair ``(feature_bound, norm_bound)``.
        """
        owner = type(self).__name__
        lower, _ = check_bounds(self.bounds, owner)
        n_features = required_output_width(self, lower, n_features, "transformer")
        if sparse:
            feature_bound = 1.0
        else:
            a, b = check_feature_range(self.feature_range, owner)
            feature_bound = max(abs(a), abs(b))
        return OutputBounds(feature_bound, feature_bound * math.sqrt(n_features))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.requires_fit = False
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _inside(a, b, dtype):
    """The closest values of ``dtype`` inside ``[a, b]``."""
    low, high = dtype.type(a), dtype.type(b)
    # Compared as Python floats: against a numpy float32, a/b would be rounded first.
    if float(low) < a:
        low = np.nextafter(low, dtype.type(np.inf))
    if float(high) > b:
        high = np.nextafter(high, dtype.type(-np.inf))
    return low, high
