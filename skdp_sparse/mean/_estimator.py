"""The private mean estimator: parameters, the fit hooks and fitted attributes."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from ..base import DPEstimatorMixin
from ..data import DaskData, LocalData, is_dask_array
from ..utils._warnings import warn_float_noise
from ..utils.validation import DELTA, EPSILON, Bound, Interval, Options, validate_fit_data
from ._plan import METHODS, make_plan
from ._release import block_clipped_mean, check_finite, l1_recovery, release

__all__ = ["DPSparseMeanEstimator"]


@dataclass(frozen=True)
class _MeanResult:
    mean: np.ndarray
    events: tuple


class DPSparseMeanEstimator(DPEstimatorMixin, BaseEstimator):
    """Differentially private mean of sparse, high-dimensional rows.

    Each row ``z_i`` of ``X`` is first clipped to the public bounds (l2 norm
    ``norm_bound`` = L and, when ``sparsity`` = s is given, l1 norm ``L*sqrt(s)``,
    the convex relaxation of "s nonzeros, l2 norm <= L", Remark 2.1 of [1]).
    The clipped mean ``z_bar`` is then released by one of the mechanisms below.
    The bounds are public: nothing is computed from the data to set them.

    Privacy: the fit is (epsilon, delta)-differentially private with respect to
    **replace-one** neighbouring datasets (same number of rows n, which is public;
    one row changed), whatever the data, because clipping makes the stated
    sensitivities hold for every input. The spend is recorded in
    ``epsilon_spent_``, ``delta_spent_`` and ``privacy_events_``.

    Methods (``method``):

    ``"projection"``
        Algorithm 1 of [1]: ``z~ = z_bar + xi``, then the Euclidean projection of
        ``z~`` onto the l1 ball of radius ``L*sqrt(s)``. With ``delta = 0``,
        ``xi`` is Laplace with scale ``b = 2 L sqrt(s) / (n epsilon)`` (l1
        sensitivity ``2 L sqrt(s) / n``; epsilon-DP, Thm 3.2 of [1]). With
        ``delta > 0``, ``xi`` is Gaussian with the smallest sigma meeting
        (epsilon, delta) for l2 sensitivity ``2L/n`` by the analytic Gaussian
        mechanism (Balle & Wang 2018; Thm 3.3 of [1]), or, on the default
        floating-point-safe path, discrete Gaussian noise calibrated through zCDP.
        The projection is post-processing. (In high dimension the fit draws only the
        noise values that can survive the projection, from thresholds fixed by
        public quantities; the release has exactly the law of drawing all d, so the
        guarantee is the same.) Error:
        ``min(||xi||_2, sqrt(2 L sqrt(s) ||xi||_inf))`` at most (Lemma 3.1), that is
        ``L min(sqrt(s ln d / (eps n)), sqrt(s d) / (eps n))`` for pure DP and
        ``L min((s ln d ln(1/delta))^(1/4) / sqrt(eps n), sqrt(d ln(1/delta)) / (eps n))``
        for approximate DP, up to constants (Table 1). Needs ``sparsity``.
    ``"l1_recovery"``
        Algorithm 2 of [1] (delta > 0 only). With
        ``m = ceil(n eps sqrt(s ln(d/s) / ln(1/delta)))``: if ``d < m ln^2 m``
        it releases the mean with Gaussian noise (l2 sensitivity ``2L/n``);
        otherwise it draws ``A`` with iid ``N(0, 1/m)`` entries (from a seed, by
        column blocks; it is never held in memory beyond 200 MB), clips every
        row's measurement ``A z_i`` to l2 norm ``1.5 L``, releases their mean plus
        Gaussian noise calibrated analytically to l2 sensitivity ``3L/n``
        (which holds for every ``A``, not only for a restricted isometry, so no
        failure probability is charged to delta), solves
        ``min ||z||_1 s.t. A z = b`` approximately (ADMM) and returns ``z`` if
        ``||z||_2 <= 2L``, else 0. Privacy follows from the Gaussian mechanism on
        ``b`` and post-processing (Thm 3.4 of [1], with this hardening).
        Needs ``sparsity``.
    ``"gaussian"``, ``"laplace"``
        Baselines: the clipped mean plus Gaussian noise (l2 sensitivity ``2L/n``,
        analytic calibration; delta > 0) or Laplace noise (l1 sensitivity
        ``2 L sqrt(s) / n``, or ``2 L sqrt(d) / n`` without ``sparsity``), with no
        projection.
    ``"auto"``
        Chosen from public n, d, s, epsilon, delta only: without ``sparsity``,
        ``"laplace"`` if delta = 0 else ``"gaussian"``; with it, ``"projection"``
        (which is never less accurate than the plain baseline with the same
        noise), except that for delta > 0 ``"l1_recovery"`` is used where
        Algorithm 2 takes its compressed-sensing branch, its Table-1 rate
        (inflated by ``sqrt(1.5)`` for its larger sensitivity) is below both the
        projection's and 1, and a product with its sensing matrix costs at most
        1e9 multiply-adds. The rate gain of Algorithm 2 (ln d -> ln(d/s) in a
        fourth root) needs s > d^0.56 or so, and together these conditions only
        hold for d of order 1e8 with ``m * d > 4e13``: in practice ``"auto"``
        picks ``"projection"`` whenever ``sparsity`` is given.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy parameter, > 0. ``np.inf`` adds no noise (the exact clipped mean,
        still projected) and reports an infinite spend.
    delta : float, default=0.0
        Privacy parameter in [0, 1). 0 asks for pure DP.
    norm_bound : float, default=1.0
        Public bound L on the l2 norm of a row; rows beyond it are rescaled.
    sparsity : int or None, default=None
        Public bound s on the number of nonzeros of a row, used through the l1
        bound ``L*sqrt(s)`` (rows beyond it are rescaled). Required by
        ``"projection"`` and ``"l1_recovery"``. An int ``>= 1``; one above
        ``n_features`` is taken as ``n_features``.
    method : {"auto", "projection", "l1_recovery", "gaussian", "laplace"}, default="auto"
        See above.
    floating_point_safe : {"auto", True, False}, default="auto"
        True: the released statistic (the clipped mean, or the measurements of
        ``"l1_recovery"``) is rounded to a lattice ``gamma Z`` (``gamma`` a power of
        two fixed by public values) and receives exact discrete Laplace or discrete
        Gaussian noise, so the low-order bits of the noisy vector carry nothing about
        the data (:ref:`security`); the projection and the recovery are then
        post-processing of that vector. The rounding costs a relative ``2^-16`` of
        sensitivity, included in the reported spend; the discrete Gaussian is
        accounted in zCDP, which needs a sigma 4 to 9% larger than the analytic
        calibration for the same (epsilon, delta). The Gaussian projection still draws
        only the noise that can survive it, with the law of drawing all d values.
        False: continuous noise added in doubles, not private against an adversary
        who reads the low-order bits of the output (a ``PrivacyLeakWarning`` says
        so). ``"auto"``: True, for every method.
    random_state : None, int or numpy.random.Generator, default=None
        Source of the noise. ``None`` draws fresh OS entropy (use it for a
        release); an int makes the fit reproducible.
    ledger : PrivacyLedger, default=None
        A ledger the fit reports to besides the active ones (see
        :func:`~skdp_sparse.privacy_ledger`); it travels with the estimator through
        ``clone`` and pickling, so it reaches fits in processes an activation does not
        (those a worker starts, or a ray or dask task), and its cap holds there.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,)
        The private estimate of the mean of the clipped rows.
    method_ : str
        The method used (``method``, or the one ``"auto"`` chose).
    noise_scale_ : float
        Laplace scale b or Gaussian standard deviation sigma of the noise (a
        function of public quantities only).
    n_measurements_ : int
        Number m of random measurements of ``"l1_recovery"``; 0 when no
        compressed sensing was used.
    floating_point_safe_ : bool
        Whether the noise was drawn on the floating-point-safe path.
    n_features_in_ : int
        Number of features seen during fit.
    epsilon_spent_, delta_spent_ : float
        The privacy guarantee of the fit.
    privacy_events_ : tuple of PrivacyEvent
        The mechanism call of the fit.

    See Also
    --------
    skdp_sparse.optim.projections.project_l1_ball : the projection of Algorithm 1.

    References
    ----------
    .. [1] B. Ghazi, C. Guzmán, P. Kamath, R. Kumar, P. Manurangsi,
       "Differentially Private Optimization with Sparse Gradients", Section 3.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from skdp_sparse import DPSparseMeanEstimator
    >>> X = sp.random(1000, 10_000, density=5e-4, format="csr", random_state=0)
    >>> est = DPSparseMeanEstimator(epsilon=1.0, delta=1e-6, sparsity=10,
    ...                             random_state=0).fit(X)
    >>> est.method_
    'projection'
    >>> est.mean_.shape
    (10000,)
    >>> round(est.epsilon_spent_, 6)
    1.0
    """

    _parameter_constraints = {
        "epsilon": EPSILON,
        "delta": DELTA,
        "norm_bound": [Bound()],
        "sparsity": [Interval(numbers.Integral, 1, None), None],
        "method": [Options(*METHODS)],
        "floating_point_safe": [Options("auto", True, False)],
        "random_state": ["random_state"],
    }

    def __init__(self, epsilon=1.0, delta=0.0, norm_bound=1.0, sparsity=None,
                 method="auto", floating_point_safe="auto", random_state=None, ledger=None):
        self.epsilon = epsilon
        self.delta = delta
        self.norm_bound = norm_bound
        self.sparsity = sparsity
        self.method = method
        self.floating_point_safe = floating_point_safe
        self.random_state = random_state
        self.ledger = ledger

    def _check_dp_rules(self):
        if self.method in ("projection", "l1_recovery") and self.sparsity is None:
            raise ValueError(
                f"method={self.method!r} needs the public bound `sparsity` "
                "(number of nonzeros per row)"
            )
        if self.method in ("l1_recovery", "gaussian") and self.delta == 0:
            raise ValueError(
                f"method={self.method!r} gives approximate DP only: set delta > 0 "
                "(for example 1 / n_samples**2), or use method='projection' or "
                "'laplace' for pure DP"
            )
        if self.floating_point_safe is False:
            warn_float_noise(type(self).__name__)

    def _validate_fit_data(self, X, y):
        if is_dask_array(X):
            # Blocks are validated (finite values included) on the workers.
            data = DaskData.from_arrays(X)
            self.n_features_in_ = data.n_features
            return data, {"n_samples": data.n_samples, "n_features": data.n_features}
        # One vectorised pass instead of scikit-learn's slower check, still before
        # the budget is reserved: a NaN refused after it would leave a trace (a
        # reservation and its release) that depends on one row.
        X, _ = validate_fit_data(self, X, ensure_all_finite=False)
        check_finite(X.data if sp.issparse(X) else X)
        n, d = X.shape
        return LocalData(X), {"n_samples": n, "n_features": d}

    def _plan(self, public):
        n, d = public["n_samples"], public["n_features"]
        # A row has at most d non-zeros: a larger public bound is a loose one, and d
        # is as true and tighter (as in the linear models).
        sparsity = None if self.sparsity is None else float(min(self.sparsity, d))
        return make_plan(self.method, int(n), int(d), float(self.norm_bound), sparsity,
                         float(self.epsilon), float(self.delta), self.floating_point_safe)

    def _solve(self, data, plan, rng):
        if plan.n_measurements:
            mean = l1_recovery(data, plan, rng)
        else:
            # The clipped mean is a fresh array: the release may overwrite it.
            mean = data.row_sum(block_clipped_mean, plan, data.n_samples)
            mean = release(mean, plan, rng, overwrite=True)
        return _MeanResult(mean, plan.events)

    def _fitted_attributes(self, public, plan, result):
        return {
            "mean_": result.mean,
            "method_": plan.method,
            "noise_scale_": float(plan.noise_scale),
            "n_measurements_": int(plan.n_measurements),
            "floating_point_safe_": bool(plan.mechanism.floating_point_safe),
        }

    def fit(self, X, y=None, sample_weight=None):
        """Estimate the mean of the rows of ``X`` privately.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            CSR and CSC are used as they are; other sparse formats are converted.
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
