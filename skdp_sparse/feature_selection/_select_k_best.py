"""The private top-k selector: parameters, the fit hooks, the mask."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.feature_selection import SelectorMixin
from sklearn.utils.validation import check_is_fitted

from ..base import DPEstimatorMixin
from ..data import LocalData
from ..optim.losses import LogisticLoss
from ..solvers import Problem
from ..solvers._screening import noise_units, plan_screening, release, screen
from ..utils._labels import encode_labels
from ..utils._ranking import top_k
from ..utils._warnings import warn, warn_float_noise
from ..utils.validation import (
    DELTA,
    EPSILON,
    Bound,
    Interval,
    Options,
    data_free_errors,
    validate_fit_data,
)

__all__ = ["DPSelectKBest", "ASSOCIATION_SHARES", "truncated_indicators"]

#: Shares of the budget (of ``mu^2``) of the association
#: score's two releases: the class counts only centre the labels (relative precision
#: suffices), the association ranks the features.
ASSOCIATION_SHARES = {"count": 1 / 25, "association": 24 / 25}


@dataclass(frozen=True)
class _SelectPlan:
    epsilon: float
    delta: float
    events: tuple
    k: int
    units: dict
    screening: object = None


@dataclass(frozen=True)
class _Selected:
    columns: np.ndarray
    scores: np.ndarray
    noise: float
    events: tuple


def truncated_indicators(X, sparsity):
    """Indicators of the non-zeros of each row of CSR ``X``, at most ``sparsity`` a row
    (the entries of largest magnitude, ties to the lower column): a function of each row
    alone."""
    X = sp.csr_matrix(X)
    # A row has at most n_features non-zeros, so a larger bound truncates nothing; the
    # bound as given (2^31, say) may not fit the index arrays' integer type, and numpy
    # refuses to compare them with it.
    sparsity = min(int(sparsity), X.shape[1])
    if not X.has_sorted_indices:
        X = X.sorted_indices()
    counts = np.diff(X.indptr)
    # Only the rows above the bound are ranked (a sort of every entry took 17 s of a
    # 21 s fit at 2.9 x 10^7 non-zeros); the others keep every entry.
    longer = counts > sparsity
    keep = np.repeat(~longer, counts)
    entries = np.flatnonzero(~keep)
    lengths = counts[longer]
    rows = np.repeat(np.flatnonzero(longer), lengths)
    order = np.lexsort((X.indices[entries], -np.abs(X.data[entries]), rows))
    rank = np.arange(entries.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    keep[entries[order[rank < sparsity]]] = True
    out = sp.csr_matrix((np.ones(int(keep.sum())), X.indices[keep],
                         np.concatenate([[0], np.cumsum(np.minimum(counts, sparsity))])),
                        shape=X.shape)
    return out


class DPSelectKBest(SelectorMixin, DPEstimatorMixin, BaseEstimator):
    """Select the ``k`` columns with the highest differentially private score.

    The fit releases one noisy score per column with Gaussian noise, then keeps the
    ``k`` columns of highest noisy score (post-processing). Two scores:

    * ``score_func="frequency"`` (no labels): the number of rows in which the column is
      non-zero, each row counting at most ``sparsity`` columns (the entries of largest
      magnitude; a public bound). Replacing one row moves at most ``2 sparsity``
      counts by one each: l2 sensitivity ``sqrt(2 sparsity)``.
    * ``score_func="association"`` (labels): the label association of the private screening
      of the classifiers (:mod:`skdp_sparse.solvers._screening`, the same release),
      ``A_jk = sum_i (1[y_i = k] - p_k) xt_ij`` with each row clipped to l2 norm
      ``norm_bound`` and ``p_k`` the class rate released first as a noisy count; the
      score of column ``j`` is ``max_k |A_jk|`` (one column ``k`` for two classes).
      Its l2 sensitivity is ``2 L sqrt(sum_k max(p_k, 1 - p_k)^2)``, from the public
      ``norm_bound`` ``L`` whatever the labels; the counts' is ``sqrt(K)``. The budget
      is split 1/25 : 24/25 between the counts and the association
      (:data:`ASSOCIATION_SHARES`).

    Privacy
    -------
    ``(epsilon, delta)``-DP for replace-one neighbouring datasets (n public), with
    ``delta > 0`` (Gaussian noise). On the floating-point-safe path (default) the
    releases are discrete Gaussians on a lattice, accounted as the continuous
    Gaussian with the lattice's slack (``doc/proofs/pld.rst``); with
    ``floating_point_safe=False`` they are Gaussians in doubles, composed exactly in
    GDP, and the fit emits :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`. The
    noisy scores (``scores_``), the selected columns and the spend are public;
    ``epsilon=np.inf`` selects by the exact scores (not private).

    Parameters
    ----------
    k : int or "all", default=10
        Number of columns kept (all of them when ``k`` is at least their number, or
        ``"all"``, as in scikit-learn, which warns when an integer ``k`` exceeds the
        number of columns: the noisy scores are still released and paid for, so that a
        search over ``k`` compares like with like).
    epsilon : float, default=1.0
        Privacy budget, > 0, or ``np.inf`` (no noise).
    delta : float, default=1e-6
        In (0, 1).
    score_func : {"frequency", "association"}, default="frequency"
        The score (named like scikit-learn's ``SelectKBest(score_func=...)``; a string, as
        each score needs its own sensitivity analysis).
    sparsity : int or None, default=None
        Public bound on the non-zeros of a row that the frequency counts (required by
        ``score_func="frequency"``; rows with more count their ``sparsity`` largest).
    norm_bound : float, default=1.0
        Public bound on the l2 norm of a row (``score_func="association"``; rows are
        clipped to it). Unit rows (``TfidfVectorizer``, ``DPTfidfVectorizer``,
        ``Normalizer``) have 1.
    classes : array-like or None, default=None
        The public label set (``score_func="association"``). Without it the label set is
        read from ``y`` with a :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`.
    floating_point_safe : {"auto", True, False}, default="auto"
    random_state : None, int or numpy.random.Generator, default=None
    ledger : PrivacyLedger, default=None
        A ledger the fit reports to besides the active ones (see
        :func:`~skdp_sparse.privacy_ledger`); it travels with the estimator through
        ``clone`` and pickling, so it reaches fits in processes an activation does not
        (those a worker starts, or a ray or dask task), and its cap holds there.

    Attributes
    ----------
    scores_ : ndarray of shape (n_features,)
        The noisy score of every column.
    selected_ : ndarray of shape (min(k, n_features),)
        The indices of the columns kept, increasing.
    noise_scale_ : float
        Standard deviation of the noise on each score.
    classes_ : ndarray
        The label set (``score_func="association"`` only).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Defined when ``X`` has string column names.
    epsilon_spent_, delta_spent_ : float
    privacy_events_ : tuple of PrivacyEvent

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from skdp_sparse.feature_selection import DPSelectKBest
    >>> X = sp.random(5000, 50, density=0.02, format="lil", random_state=0)
    >>> X[:, 7] = 1.0  # a column in every row
    >>> X = X.tocsr()
    >>> sel = DPSelectKBest(k=1, sparsity=5, delta=1e-6, random_state=0).fit(X)
    >>> sel.get_support(indices=True)
    array([7])
    """

    _parameter_constraints = {
        "k": [Interval(numbers.Integral, 1, None), Options("all")],
        "epsilon": EPSILON,
        "delta": DELTA,
        "score_func": [Options("frequency", "association")],
        "sparsity": [Interval(numbers.Integral, 1, None), None],
        "norm_bound": [Bound()],
        "classes": ["array-like", None],
        "floating_point_safe": [Options("auto", True, False)],
        "random_state": ["random_state"],
    }

    def __init__(self, k=10, *, epsilon=1.0, delta=1e-6, score_func="frequency",
                 sparsity=None, norm_bound=1.0, classes=None, floating_point_safe="auto",
                 random_state=None, ledger=None):
        self.k = k
        self.epsilon = epsilon
        self.delta = delta
        self.score_func = score_func
        self.sparsity = sparsity
        self.norm_bound = norm_bound
        self.classes = classes
        self.floating_point_safe = floating_point_safe
        self.random_state = random_state
        self.ledger = ledger

    # -- the fit sequence ---------------------------------------------------------
    def _check_dp_rules(self):
        owner = type(self).__name__
        if math.isfinite(self.epsilon) and self.delta == 0:
            raise ValueError(f"{owner} adds Gaussian noise and needs delta > 0 (for example "
                             "1 / n_samples**2)")
        if self.score_func == "frequency" and self.sparsity is None:
            raise ValueError(f"{owner}(score_func='frequency') needs sparsity, the public bound "
                             "on the non-zeros of a row (for text: the distinct terms a "
                             "document may count, e.g. DPTfidfVectorizer's "
                             "max_terms_per_document)")
        if self.floating_point_safe is False:
            warn_float_noise(owner)

    def _validate_fit_data(self, X, y):
        owner = type(self).__name__
        association = self.score_func == "association"
        X, y = validate_fit_data(self, X, y, y_required=association,
                                 accept_sparse=("csr",))
        public = {"n_samples": X.shape[0], "n_features": X.shape[1]}
        Y = None
        if association:
            classes, codes = encode_labels(y, self.classes, owner)
            # One-vs-rest targets in {-1, +1}: one problem for two classes.
            if classes.size == 2:
                Y = np.where(codes == 1, 1.0, -1.0)[:, None]
            else:
                Y = -np.ones((X.shape[0], classes.size))
                Y[np.arange(X.shape[0]), codes] = 1.0
            public["classes"] = classes
        public["n_targets"] = 0 if Y is None else Y.shape[1]
        return LocalData(X, Y), public

    def _plan(self, public):
        safe = self.floating_point_safe is not False
        p = int(public["n_features"])
        if self.k != "all" and int(self.k) > p:
            # k and n_features are public: the warning tells nothing about the data.
            warn(f"{type(self).__name__}: k={int(self.k)} is greater than "
                 f"n_features={p}. All the features will be returned; the noisy "
                 "scores_ are still released and paid for, as with k='all'")
        k = p if self.k == "all" else min(int(self.k), p)
        epsilon, delta = float(self.epsilon), float(self.delta)
        if self.score_func == "frequency":
            units, events = noise_units(epsilon, delta, [1.0], safe,
                                        ["select k best: column frequencies"])
            return _SelectPlan(epsilon, delta, tuple(events), k, {"frequency": units[0]})
        names = [f"select k best: {n}" for n in ("class counts", "label association")]
        units, events = noise_units(epsilon, delta, list(ASSOCIATION_SHARES.values()), safe,
                                    names)
        units = dict(zip(ASSOCIATION_SHARES, units, strict=True))
        screening = plan_screening(k, p, count_unit=units["count"],
                                   association_unit=units["association"],
                                   floating_point_safe=safe)
        return _SelectPlan(epsilon, delta, tuple(events), k, units, screening)

    def _problem(self):
        return Problem(LogisticLoss(), norm_bound=float(self.norm_bound))

    def _solve(self, data, plan, rng):
        if plan.screening is not None:
            screened = screen(self._problem(), data, plan.screening, rng)
            scores = np.max(np.abs(screened.association), axis=1)
            return _Selected(screened.columns, scores, screened.sigma, plan.events)
        s = int(self.sparsity)
        counts = np.asarray(truncated_indicators(data.X, s).sum(axis=0)).ravel()
        safe = self.floating_point_safe is not False
        sensitivity = float(np.nextafter(math.sqrt(2.0 * s), np.inf))
        scores, sigma = release(counts, sensitivity, plan.units["frequency"], safe, rng)
        return _Selected(top_k(scores, plan.k), scores, sigma, plan.events)

    def _fitted_attributes(self, public, plan, result):
        out = {"scores_": result.scores, "selected_": result.columns.astype(np.int64),
               "noise_scale_": float(result.noise)}
        if "classes" in public:
            out["classes_"] = public["classes"]
        return out

    def fit(self, X, y=None, sample_weight=None):
        """Release the noisy scores and keep the ``k`` highest.

        Every check (parameters, bounds, NaN or infinite values, labels outside
        ``classes``) happens before any budget is reserved.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or None
            Labels (``score_func="association"``); ignored otherwise.
        sample_weight : None
            Refused unless None (a ``TypeError``): the noise is calibrated to one
            row, which a weight would multiply.

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight)

    def transform(self, X):
        """``X`` with the selected columns only (errors quote none of its values)."""
        with data_free_errors():
            return super().transform(X)

    def inverse_transform(self, X):
        """``X`` put back in the columns it came from, zeros elsewhere."""
        with data_free_errors():
            return super().inverse_transform(X)

    def _get_support_mask(self):
        check_is_fitted(self)
        mask = np.zeros(self.n_features_in_, dtype=bool)
        mask[self.selected_] = True
        return mask

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = self.score_func == "association"
        return tags
