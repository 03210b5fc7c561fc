"""The private standard scaler: parameters, the fit hooks, transform."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..base import DPEstimatorMixin
from ..utils._warnings import warn_float_noise
from ..utils.validation import (
    DELTA,
    EPSILON,
    Bound,
    Options,
    validate_fit_data,
    validate_output_rows,
    validate_rows,
)
from ._bounds import (
    OutputBounds,
    check_bounds,
    check_zero_inside,
    clip_and_scale_sparse,
    ranges_for,
    required_output_width,
    unscale_sparse,
)
from ._moments import make_plan, release_moments

__all__ = ["DPStandardScaler"]

_SPARSE_CENTRE = ("Cannot center sparse matrices: pass `with_mean=False` instead (centring "
                  "would make every zero nonzero)")


@dataclass(frozen=True)
class _ScalerResult:
    mean: np.ndarray | None
    var: np.ndarray | None
    events: tuple


class DPStandardScaler(OneToOneFeatureMixin, TransformerMixin, DPEstimatorMixin,
                       BaseEstimator):
    """Standardise features by a differentially private mean and standard deviation.

    Each feature is clipped to its public range ``[lower_j, upper_j]``; the fit
    releases noisy per-feature sums of the clipped values and of their squared
    deviations from the range's midpoint, from which it derives ``mean_`` and
    ``var_`` (:mod:`skdp_sparse.preprocessing._moments` has the derivation).
    ``transform`` clips to the same ranges, then computes ``(x - mean_) / scale_``
    like :class:`~sklearn.preprocessing.StandardScaler`, and optionally clips the
    result to ``[-clip_output, clip_output]``.

    Privacy
    -------
    The fit is (epsilon, delta)-DP for replace-one neighbouring datasets (n public).
    Replacing one row moves the sum of feature ``j``'s clipped values by at most
    ``u_j - l_j`` and the sum of their squared deviations from the midpoint of the
    range by at most ``((u_j - l_j) / 2)^2``. Each feature's sums receive noise
    proportional to these sensitivities (the sums are released on the unit scale of
    each feature's range), so that every feature has the same relative accuracy;
    the privacy loss over the features is the l1 norm of the ratios sensitivity /
    noise for Laplace noise (``delta = 0``, pure DP) and their l2 norm for Gaussian
    noise (``delta > 0``). With both sums released (``with_std=True``) the budget
    is split equally between them: epsilon / 2 each for Laplace noise, half the zCDP
    rho each for the default discrete Gaussian noise (half of mu^2 on the float
    path); the sums alone are released, with the whole budget, when
    ``with_std=False``, and nothing when ``with_mean`` and ``with_std`` are both
    False. The derived mean is clipped to ``[lower_j, upper_j]`` and the variance to
    ``[(1e-3 (u_j - l_j) / 2)^2, ((u_j - l_j) / 2)^2]``, which is post-processing.
    Everything else (the ranges, n, the number of features) is public. The spend is
    in ``epsilon_spent_``, ``delta_spent_`` and ``privacy_events_`` and is reported
    to the privacy ledgers.

    Bounds for the next step: set ``clip_output=c`` and give the estimator that
    follows ``feature_bound=c`` and ``norm_bound=c * sqrt(n_features)``
    (:meth:`output_bounds`); these are public constants, known before the fit, so
    they can be fixed in a :class:`~sklearn.pipeline.Pipeline`. Without
    ``clip_output`` the output of a fitted scaler is still bounded, by
    ``max(u_j - mean_j, mean_j - l_j) / scale_j``, but that bound is only known
    after the fit. A standardised feature rarely exceeds 3 or 4 in absolute value,
    so ``clip_output=3`` loses little, whereas the worst case without it can reach
    ``2000`` for a feature whose spread is far below its range.

    Parameters
    ----------
    bounds : pair (lower, upper)
        Public range of each feature: numbers (the same range for every feature) or
        arrays with one value per feature, finite, with ``lower_j < upper_j``.
        Entries outside are clipped, in ``fit`` and in ``transform``. For sparse
        input every range must contain 0.
    epsilon : float, default=1.0
        Privacy budget of the fit, > 0; ``np.inf`` adds no noise (the exact
        statistics of the clipped data; not private).
    delta : float, default=0.0
        0 for pure DP (Laplace noise); in (0, 1) for Gaussian noise.
    with_mean : bool, default=True
        Centre the data. Not possible on sparse input (a ``ValueError`` says so):
        set it to False there, as with scikit-learn's scaler.
    with_std : bool, default=True
        Divide by the standard deviation.
    clip_output : float or None, default=None
        If given, the transformed values are clipped to
        ``[-clip_output, clip_output]``, a public bound on the output.
    floating_point_safe : {"auto", True, False}, default="auto"
        ``"auto"`` and True: the sums are rounded to a lattice and receive exact
        discrete Laplace or Gaussian noise, so the low-order bits of the release
        carry nothing about the data (:ref:`security`); the discrete Gaussian is
        accounted in zCDP. False: noise in doubles, not private against an adversary
        who reads low-order bits; the fit emits
        :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`.
    random_state : None, int or numpy.random.Generator, default=None
        Source of the noise; ``None`` (fresh OS entropy) for a release.
    ledger : PrivacyLedger, default=None
        A ledger the fit reports to besides the active ones (see
        :func:`~skdp_sparse.privacy_ledger`); it travels with the estimator through
        ``clone`` and pickling, so it reaches fits in processes an activation does not
        (those a worker starts, or a ray or dask task), and its cap holds there.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,) or None
        Private mean of each clipped feature; None when ``with_mean`` and
        ``with_std`` are both False.
    var_ : ndarray of shape (n_features,) or None
        Private variance of each clipped feature; None when ``with_std=False``.
    scale_ : ndarray of shape (n_features,) or None
        ``sqrt(var_)``, the divisor of ``transform``; None when ``with_std=False``.
    n_samples_seen_ : int
        Number of rows (public under replace-one neighbours).
    sum_noise_scale_, square_sum_noise_scale_ : float
        Laplace scale or Gaussian standard deviation of the noise on the sums and on
        the sums of squares, on each feature's unit scale: in the original units the
        noise of feature ``j`` is this times ``(u_j - l_j) / 2`` for the sum and times
        its square for the sum of squared deviations (0 when not released).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of the features seen during fit, when ``X`` has string column names.
    epsilon_spent_, delta_spent_ : float
        The privacy guarantee of the fit.
    privacy_events_ : tuple of PrivacyEvent
        The releases of the fit.

    See Also
    --------
    BoundedScaler : scaling to public ranges, without privacy cost.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_sparse.preprocessing import DPStandardScaler
    >>> X = np.column_stack([np.linspace(30.0, 70.0, 5000), np.tile([1.5, 2.5], 2500)])
    >>> X.mean(axis=0), X.std(axis=0).round(1)
    (array([50.,  2.]), array([11.5,  0.5]))
    >>> scaler = DPStandardScaler(bounds=([0, 0], [100, 5]), epsilon=1.0,
    ...                           clip_output=4.0, random_state=0).fit(X)
    >>> np.round(scaler.mean_, 1), np.round(scaler.scale_, 1)
    (array([50.,  2.]), array([11.6,  0.5]))
    >>> scaler.epsilon_spent_ <= 1.0
    True
    >>> scaler.output_bounds()
    OutputBounds(feature_bound=4.0, norm_bound=5.656854249492381)
    """

    _parameter_constraints = {
        "bounds": ["no_validation"],
        "epsilon": EPSILON,
        "delta": DELTA,
        "with_mean": ["boolean"],
        "with_std": ["boolean"],
        "clip_output": [Bound(), None],
        "floating_point_safe": [Options("auto", True, False)],
        "random_state": ["random_state"],
    }

    def __init__(self, bounds, *, epsilon=1.0, delta=0.0, with_mean=True, with_std=True,
                 clip_output=None, floating_point_safe="auto", random_state=None,
                 ledger=None):
        self.bounds = bounds
        self.epsilon = epsilon
        self.delta = delta
        self.with_mean = with_mean
        self.with_std = with_std
        self.clip_output = clip_output
        self.floating_point_safe = floating_point_safe
        self.random_state = random_state
        self.ledger = ledger

    # -- the fit sequence ---------------------------------------------------------
    def _check_dp_rules(self):
        check_bounds(self.bounds, type(self).__name__)
        if self.floating_point_safe is False:
            warn_float_noise(type(self).__name__)

    def _validate_fit_data(self, X, y):
        owner = type(self).__name__
        X, _ = validate_fit_data(self, X)
        if sp.issparse(X) and self.with_mean:
            raise ValueError(f"{owner}: {_SPARSE_CENTRE}")
        lower, upper = ranges_for(self, X.shape[1])
        if sp.issparse(X):
            check_zero_inside(lower, upper, owner)
        public = {"n_samples": X.shape[0], "n_features": X.shape[1],
                  "lower": lower, "upper": upper}
        return (X, lower, upper), public

    def _plan(self, public):
        return make_plan(int(public["n_features"]), float(self.epsilon), float(self.delta),
                         with_mean=bool(self.with_mean), with_std=bool(self.with_std),
                         floating_point_safe=self.floating_point_safe is not False)

    def _solve(self, data, plan, rng):
        mean, var = release_moments(*data, plan, rng)
        return _ScalerResult(mean, var, plan.events)

    def _fitted_attributes(self, public, plan, result):
        def scale(m):
            if m is None:
                return 0.0
            return float(m.scale if hasattr(m, "scale") else m.sigma)

        return {
            "mean_": result.mean,
            "var_": result.var,
            "scale_": None if result.var is None else np.sqrt(result.var),
            "n_samples_seen_": int(public["n_samples"]),
            "sum_noise_scale_": scale(plan.sum_mechanism),
            "square_sum_noise_scale_": scale(plan.square_mechanism),
        }

    def fit(self, X, y=None, sample_weight=None):
        """Estimate the mean and standard deviation of each feature privately.

        Every check (parameters, ranges against the number of features, NaN or
        infinite values, sparse input with ``with_mean=True``) happens before any
        budget is reserved.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : None
            Ignored.
        sample_weight : None
            Refused unless None (a ``TypeError``): the noise is calibrated to one
            row, which a weight would multiply.

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight)

    # -- transform ------------------------------------------------------------------
    def transform(self, X):
        """Clip ``X`` to the ranges, centre and scale it, and clip to ``clip_output``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        X_new : {ndarray, sparse matrix} of shape (n_samples, n_features)
            A new array or matrix; ``X`` is never modified. Sparse input keeps its
            zeros (it is only scaled).
        """
        check_is_fitted(self)
        X = validate_rows(self, X, accept_sparse=["csr", "csc"], dtype=np.float64,
                          reset=False)
        lower, upper = ranges_for(self, X.shape[1])
        c = None if self.clip_output is None else float(self.clip_output)
        if sp.issparse(X):
            if self.with_mean:
                raise ValueError(f"{type(self).__name__}: {_SPARSE_CENTRE}")
            scale = np.ones(X.shape[1]) if self.scale_ is None else self.scale_
            return clip_and_scale_sparse(X, lower, upper, scale, c)
        out = np.clip(X, lower, upper)
        if self.with_mean:
            out -= self.mean_
        if self.with_std:
            out /= self.scale_
        if c is not None:
            np.clip(out, -c, c, out=out)
        return out

    def inverse_transform(self, X):
        """Undo the centring and scaling (clipped values stay clipped).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        X_original : {ndarray, sparse matrix} of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        X = validate_output_rows(self, X, accept_sparse=["csr", "csc"], dtype=np.float64)
        scale = np.ones(X.shape[1]) if self.scale_ is None else self.scale_
        if sp.issparse(X):
            if self.with_mean:
                raise ValueError(f"{type(self).__name__}: {_SPARSE_CENTRE}")
            return unscale_sparse(X, scale)
        out = X * scale
        if self.with_mean:
            out += self.mean_
        return out

    # -- public bounds of the output --------------------------------------------
    def output_bounds(self, n_features=None):
        """Bounds on :meth:`transform`'s output: ``(feature_bound, norm_bound)``.

        With ``clip_output=c``: ``(c, c sqrt(n_features))``, public constants known
        before the fit (``n_features`` from the argument, the bounds' length or
        ``n_features_in_``). Without it, the scaler must be fitted, and the bound of
        feature ``j`` is ``max(u_j - mu_j, mu_j - l_j) / scale_j`` (``mu_j = mean_j``
        when centring, else 0; ``scale_j = 1`` without ``with_std``), an array,
        computed from the private release and the public ranges only
        (post-processing); the norm bound is its l2 norm.

        Returns
        -------
        OutputBounds
            The named pair ``(feature_bound, norm_bound)``.
        """
        owner = type(self).__name__
        lower, upper = check_bounds(self.bounds, owner)
        if self.clip_output is not None:
            n_features = required_output_width(self, lower, n_features, "scaler")
            c = float(self.clip_output)
            return OutputBounds(c, c * math.sqrt(n_features))
        check_is_fitted(self, msg=f"{owner} without clip_output knows the bounds of its "
                                  "output only after fit; set clip_output for a bound "
                                  "known in advance")
        lower, upper = ranges_for(self, self.n_features_in_)
        centre = self.mean_ if self.with_mean else 0.0
        bound = np.maximum(np.abs(upper - centre), np.abs(centre - lower))
        if self.with_std:
            bound = bound / self.scale_
        return OutputBounds(bound, float(np.linalg.norm(bound)))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = not self.with_mean
        return tags
