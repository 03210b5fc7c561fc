"""Private coordinate descent estimators: DP-GCD (greedy) and DP-CD (randomised).

The estimators wire three separate parts together: public bounds and clipping
(what makes the sensitivities hold), the privacy calibration (one accountant
for every mechanism call of the fit), and the optimisation engine
(:func:`skdp_sparse.optim.coordinate_descent.coordinate_descent`).

Sensitivities (replace-one neighbours, n public). Entries are clipped to the
public feature bounds ``|x_ij| <= b_j`` and every per-example coordinate
gradient ``l'(y_i, z_i) x_ij`` to ``[-C_j, C_j]``, so the average coordinate
gradient ``g_j`` changes by at most ``Delta_j = 2 C_j / n`` when one row is
replaced, whatever the data. Coordinate ``j`` of the objective is
``M_j = smoothness(loss) * b_j^2``-smooth; ``M_j`` comes from public bounds only.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .._validation import check_bound, check_privacy_params, validate_sparse_data
from ..base import DPEstimatorMixin
from ..optim import sgd as _sgd_module
from ..optim.coordinate_descent import coordinate_descent
from ..optim.losses import HuberLoss, LogisticLoss, SquaredLoss
from ..optim.penalties import L1, L2, ElasticNet, NoPenalty
from ..privacy._random import check_generator
from ..privacy.accounting import PrivacyAccountant, PrivacyEvent, calibrate_scale
from ..privacy.statistics import column_second_moment_sums, release_column_second_moments
from ..utils._labels import encode_labels
from ._output_perturbation import fit_output_perturbation

__all__ = [
    "DPGreedyCDRegressor",
    "DPSparseLogisticRegression",
    "default_greedy_iterations",
    "resolve_solver",
]

# Share of each greedy step's zCDP budget spent on the selection; the rest goes
# to the coordinate update. With equal rho the selection's Gumbel noise and the
# update's Gaussian noise have about the same size on the gradient scale.
_SELECTION_SHARE = 0.5

#: Share of the coordinate-descent budget (of its zCDP rho, or of its pure
#: epsilon) spent on the private curvature estimate of ``curvature="private"``.
#: Noise on the estimate only mis-sizes steps, while noise on the updates is the
#: utility bottleneck, so the estimate gets a small share.
CURVATURE_SHARE = 0.1
#: Smallest coordinate curvature, relative to the bound ``beta b_j^2``: caps the
#: step on rare or noisily estimated features at this many times the bound's.
MIN_CURVATURE_RATIO = 1e-3
#: With more rows than this above ``norm_bound`` (by the private count), the
#: curvature estimate is too biased to use and the bound's constants are kept.
MAX_CLIPPED_ROW_FRACTION = 0.5


def _make_penalty(penalty, alpha, l1_ratio):
    if penalty is None or penalty == "none" or alpha == 0:
        return NoPenalty()
    if penalty == "l1":
        return L1(alpha)
    if penalty == "l2":
        return L2(alpha)
    if penalty == "elasticnet":
        return ElasticNet(alpha, l1_ratio)
    raise ValueError(f"penalty must be 'l1', 'l2', 'elasticnet' or None, got {penalty!r}")


def default_greedy_iterations(n_samples, epsilon, delta):
    """Number of DP-GCD steps from the public n, epsilon, delta.

    The convex utility bound of DP-GCD (Mangold et al. 2023, Thm 4.3) balances
    optimisation error ~ 1/T against privacy error ~ T^{1/2} sqrt(log(1/delta))/(n eps)
    per step, which is minimised at ``T ~ (n eps / sqrt(log(1/delta)))^{2/3}``.
    """
    log_term = math.log(1 / delta) if delta > 0 else 1.0
    return max(1, int(round((n_samples * epsilon / math.sqrt(log_term)) ** (2 / 3))))


_CD_SOLVERS = ("greedy_cd", "cd")
_GRADIENT_SOLVERS = ("sgd", "bias_reduced_sgd", "sparse_sgd", "phased_sgd")
SOLVERS = ("auto",) + _CD_SOLVERS + _GRADIENT_SOLVERS + ("output_perturbation",)

#: ``solver="auto"`` takes the greedy solver from this many examples per feature
#: per unit of epsilon on (a9a, n eps / p = 265, is above; w8a, 124, and reuters,
#: 0.9, are below: there noisy gradient descent wins, see benchmarks/bench_cd.py).
GREEDY_MIN_SAMPLES_PER_FEATURE = 200
#: ``solver="auto"`` takes the sparsity-preserving SGD from this many features on,
#: where a dense noisy gradient of length p per step dominates the cost.
SPARSE_SGD_MIN_FEATURES = 100_000


def resolve_solver(solver, n_samples, n_features, epsilon):
    """The solver ``solver="auto"`` runs, from public n, p and epsilon only.

    The rule never looks at feature values, labels or non-zero counts, so the
    choice itself reveals nothing about the training data:

    * ``p >= SPARSE_SGD_MIN_FEATURES``: ``"sparse_sgd"`` (per-step cost independent of p);
    * ``n * epsilon / p >= GREEDY_MIN_SAMPLES_PER_FEATURE``: ``"greedy_cd"``;
    * otherwise ``"sgd"`` (noisy full-batch gradient descent, averaged iterates).
    """
    if solver != "auto":
        return solver
    if n_features >= SPARSE_SGD_MIN_FEATURES:
        return "sparse_sgd"
    if n_samples * min(epsilon, 1e12) / max(n_features, 1) >= GREEDY_MIN_SAMPLES_PER_FEATURE:
        return "greedy_cd"
    return "sgd"


class _BaseDPCoordinateDescent(DPEstimatorMixin, BaseEstimator):
    """Shared fit logic; subclasses define the loss and the target handling."""

    _solvers = SOLVERS

    def _check_params(self, n_samples, n_features):
        epsilon, delta = check_privacy_params(self.epsilon, self.delta)
        if self.solver not in self._solvers:
            raise ValueError(f"solver must be one of {self._solvers}, got {self.solver!r}")
        self.solver_ = resolve_solver(self.solver, n_samples, n_features, epsilon)
        check_bound("norm_bound", self.norm_bound)
        if self.sparsity is not None and (
            not isinstance(self.sparsity, numbers.Integral) or self.sparsity < 1
        ):
            raise ValueError(f"sparsity must be a positive int or None, got {self.sparsity!r}")
        for name in ("batch_size",):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, numbers.Integral) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        if self.learning_rate is not None:
            check_bound("learning_rate", self.learning_rate)
        if math.isfinite(epsilon) and self.solver_ in _GRADIENT_SOLVERS and delta == 0:
            raise ValueError(f"solver={self.solver_!r} adds Gaussian noise and needs delta > 0")
        if self.solver_ == "output_perturbation" and self.penalty != "l2":
            raise ValueError(
                "solver='output_perturbation' solves the L2-regularised problem: "
                "set penalty='l2' (alpha=None picks the theorem's default strength)"
            )
        if self.curvature not in ("private", "bound"):
            raise ValueError(
                f"curvature must be 'private' or 'bound', got {self.curvature!r}"
            )
        if self.selection not in ("exponential", "laplace"):
            raise ValueError(
                f"selection must be 'exponential' or 'laplace', got {self.selection!r}"
            )
        if self.alpha is not None and (
            not isinstance(self.alpha, numbers.Real) or not (self.alpha >= 0)
        ):
            raise ValueError(f"alpha must be a non-negative number or None, got {self.alpha!r}")
        if not (0 <= self.l1_ratio <= 1):
            raise ValueError(f"l1_ratio must be in [0, 1], got {self.l1_ratio!r}")
        if self.max_iter is not None and (
            not isinstance(self.max_iter, numbers.Integral) or self.max_iter < 1
        ):
            raise ValueError(f"max_iter must be a positive int or None, got {self.max_iter!r}")
        feature_bound = check_bound("feature_bound", self.feature_bound, size=n_features)
        clip = check_bound(
            "gradient_clip", self.gradient_clip, allow_none=True, allow_inf=True,
            size=n_features,
        )
        private = math.isfinite(epsilon)
        if private and clip is not None and np.any(np.isinf(clip)):
            raise ValueError("gradient_clip must be finite when epsilon is finite")
        if private and self.solver_ == "greedy_cd" and self.selection == "exponential" \
                and delta == 0:
            raise ValueError(
                "selection='exponential' composes in zCDP and needs delta > 0; "
                "use selection='laplace' for pure DP"
            )
        if private and self.solver_ == "cd" and delta == 0:
            raise ValueError("solver='cd' adds Gaussian noise and needs delta > 0")
        return epsilon, delta, feature_bound, clip

    def _public_constants(self, loss, n_features, feature_bound, clip):
        """Per-coordinate smoothness M_j and clipping C_j, from public values only.

        The intercept is the coordinate of a constant feature equal to 1.
        """
        b = np.broadcast_to(np.asarray(feature_bound, dtype=float), (n_features,))
        if self.fit_intercept:
            b = np.append(b, 1.0)
        smoothness = loss.smoothness * b**2
        # A bounded-derivative loss never exceeds |l'| b_j, so that is the default
        # clip; the squared loss takes a public target scale instead.
        derivative_scale = loss.derivative_bound if np.isfinite(loss.derivative_bound) \
            else self._target_scale()
        clip_all = derivative_scale * b
        if clip is not None:
            clip_all[:n_features] = clip
        return smoothness, clip_all

    def _target_scale(self):
        raise NotImplementedError

    def _n_updates(self, n_samples, n_coords, epsilon, delta):
        if self.max_iter is not None:
            return self.max_iter if self.solver_ == "greedy_cd" else self.max_iter * n_coords
        if not math.isfinite(epsilon):
            return 200 * n_coords
        if self.solver_ == "greedy_cd":
            return default_greedy_iterations(n_samples, epsilon, delta)
        # DP-CD: a few passes; more passes split the budget over more noisy updates.
        return 5 * n_coords

    def _events(self, scale, n_updates, n_problems, epsilon_pure, curvature=False):
        """Mechanism calls of the whole fit for a noise scale (``1 / mu`` or ``1 / eps0``).

        With ``curvature``, the last event is the curvature estimate's, sized to
        ``CURVATURE_SHARE`` of the total (in rho, or in epsilon for Laplace noise).
        """
        k = n_updates * n_problems
        if self.solver_ == "cd":
            events = [PrivacyEvent.gaussian(1.0 / scale, count=k, name="cd update")]
        elif epsilon_pure:
            eps0 = 1.0 / scale
            events = [PrivacyEvent.pure(eps0, count=k, name="noisy max (laplace)"),
                      PrivacyEvent.pure(eps0, count=k, name="update (laplace)")]
        else:
            mu = 1.0 / scale
            eps_select = math.sqrt(8 * _SELECTION_SHARE / (1 - _SELECTION_SHARE) * mu**2 / 2)
            events = [PrivacyEvent.exponential(eps_select, count=k, name="selection"),
                      PrivacyEvent.gaussian(mu, count=k, name="update")]
        if curvature:
            ratio = CURVATURE_SHARE / (1 - CURVATURE_SHARE)
            if epsilon_pure:
                eps_c = ratio * sum(e.epsilon * e.count for e in events)
                events.append(PrivacyEvent.pure(eps_c, name="curvature (laplace)"))
            else:
                rho_c = ratio * sum(e.rho * e.count for e in events)
                events.append(PrivacyEvent.gaussian(math.sqrt(2 * rho_c), name="curvature"))
        return events

    def _curvature_ratios(self, X, feature_bound, event, rng):
        """Coordinate curvature relative to its bound, ``r_j ~ mean_i x_ij^2 / b_j^2``.

        With ``event`` (a private fit), a noisy release of the second moments of
        the rows clipped to ``norm_bound`` (:func:`release_column_second_moments`);
        without (noise off), the exact second moments. Clipped to
        ``[max(MIN_CURVATURE_RATIO, 2 noise_std), 1]``: the upper end is the
        bound itself, the lower end keeps noise from inflating steps.
        """
        n_samples, n_features = X.shape
        b2 = np.broadcast_to(np.asarray(feature_bound, dtype=float), (n_features,)) ** 2
        if event is None:
            sums, noise_std = column_second_moment_sums(X)[0], 0.0
        else:
            norm_bound = float(self.norm_bound)
            kwargs = dict(mu=event.mu) if event.mu is not None else dict(epsilon=event.epsilon)
            sums, n_clipped, noise_std = release_column_second_moments(
                X, norm_bound=norm_bound, max_entry=float(np.sqrt(b2.max())), rng=rng,
                **kwargs,
            )
            if n_clipped > MAX_CLIPPED_ROW_FRACTION * n_samples:
                # Decided on the private release only, so the fallback leaks nothing.
                warnings.warn(
                    f"norm_bound={norm_bound:g} is below the l2 norm of most rows (by a "
                    "private count), so the private curvature estimate would be biased "
                    "low; the fit uses the feature bounds' curvature instead "
                    "(curvature='bound'). Set norm_bound to a public bound on the row "
                    "norms to use the estimate.", UserWarning, stacklevel=4,
                )
                return np.ones(n_features + int(self.fit_intercept))
        floor = np.maximum(MIN_CURVATURE_RATIO, 2 * noise_std / (n_samples * b2))
        ratios = np.clip(sums / (n_samples * b2), np.minimum(floor, 1.0), 1.0)
        if self.fit_intercept:
            ratios = np.append(ratios, 1.0)
        return ratios

    def _alpha(self):
        return self._default_alpha if self.alpha is None else self.alpha

    def _fit_problems(self, X, targets, loss, epsilon, delta, feature_bound, clip):
        """Fit one linear model per target vector with the resolved solver; one budget."""
        if self.solver_ in _CD_SOLVERS:
            penalty = _make_penalty(self.penalty, self._alpha(), self.l1_ratio)
            return self._fit_cd(self._clip_entries(X, feature_bound), targets, loss, penalty,
                                epsilon, delta, feature_bound, clip)
        if self.solver_ == "output_perturbation":
            return self._fit_output_perturbation(X, targets, loss, epsilon, delta)
        return self._fit_gradient(X, targets, loss, epsilon, delta)

    def _penalty_strengths(self):
        alpha = self._alpha()
        if self.penalty is None or self.penalty == "none":
            return 0.0, 0.0
        if self.penalty == "l1":
            return 0.0, alpha
        if self.penalty == "l2":
            return alpha, 0.0
        if self.penalty == "elasticnet":
            return alpha * (1 - self.l1_ratio), alpha * self.l1_ratio
        raise ValueError(f"penalty must be 'l1', 'l2', 'elasticnet' or None, got {self.penalty!r}")

    def _fit_gradient(self, X, targets, loss, epsilon, delta):
        """Stochastic-gradient solvers; K one-vs-rest problems get (eps/K, delta/K) each
        (basic composition), since each solver calibrates its own noise."""
        l2, l1 = self._penalty_strengths()
        k = len(targets)
        solver = getattr(_sgd_module, self.solver_)
        kwargs = dict(l2=l2, l1=l1, max_row_norm=float(self.norm_bound),
                      derivative_clip=self._derivative_clip(loss), epsilon=epsilon / k,
                      delta=delta / k, learning_rate=self.learning_rate,
                      fit_intercept=self.fit_intercept, verbose=self.verbose)
        if self.solver_ != "sparse_sgd":
            kwargs["sparsity"] = self.sparsity
        if self.solver_ in ("sgd", "sparse_sgd"):
            kwargs["batch_size"] = self.batch_size
            # Averaging the iterates only serves to average out the noise; without
            # noise the last iterate converges to the optimum much faster.
            kwargs["average"] = math.isfinite(epsilon)
        if self.max_iter is not None:
            kwargs["max_steps" if self.solver_ == "bias_reduced_sgd" else "n_steps"] = \
                self.max_iter
        rng = check_generator(self.random_state)
        accountant = PrivacyAccountant()
        coefs, intercepts, steps = [], [], []
        for y_k in targets:
            coef, intercept, n_steps, events, _ = solver(X, y_k, loss, rng=rng, **kwargs)
            for event in events:
                accountant.record(event)
            coefs.append(coef)
            intercepts.append(intercept)
            steps.append(n_steps)
        self._record_spend(accountant, delta)
        self.n_iter_ = int(max(steps))
        return np.array(coefs), np.array(intercepts)

    def _fit_output_perturbation(self, X, targets, loss, epsilon, delta):
        accountant = PrivacyAccountant()
        Y = np.column_stack(targets)
        coef, intercept = fit_output_perturbation(
            X, Y if Y.shape[1] > 1 else Y[:, 0], loss, alpha=self.alpha, epsilon=epsilon,
            delta=delta, norm_bound=float(self.norm_bound), domain="none", radius=None,
            tol=1e-3, rng=check_generator(self.random_state), accountant=accountant,
            fit_intercept=self.fit_intercept, intercept_bound=1.0, sparsity=self.sparsity,
            target_bound=self._output_perturbation_target_bound(),
        )
        self._record_spend(accountant, delta)
        # The number of solver iterations depends on the data; a fixed count is reported.
        self.n_iter_ = 1
        return np.atleast_2d(coef), np.atleast_1d(intercept)

    def _derivative_clip(self, loss):
        return None if np.isfinite(loss.derivative_bound) else self._target_scale()

    def _output_perturbation_target_bound(self):
        return None

    def _fit_cd(self, X, targets, loss, penalty, epsilon, delta, feature_bound, clip):
        """Run one private CD per target vector, all calibrated to one joint budget."""
        n_samples, n_features = X.shape
        n_problems = len(targets)
        n_coords = n_features + int(self.fit_intercept)
        smoothness, clip_all = self._public_constants(loss, n_features, feature_bound, clip)
        n_updates = self._n_updates(n_samples, n_coords, epsilon, delta)
        pure = self.solver_ == "greedy_cd" and self.selection == "laplace"
        private = math.isfinite(epsilon)
        # Larger steps on rare features pay off only with clips shrunk to match
        # (C_j ~ sqrt(M_j)); an explicit gradient_clip fixes C_j, so the bounds'
        # curvature is kept and no budget is spent on an estimate.
        curvature = self.curvature == "private" and (clip is None or not private)
        rng = check_generator(self.random_state)

        accountant = PrivacyAccountant()
        if private:
            scale = calibrate_scale(
                lambda s: self._events(s, n_updates, n_problems, pure, curvature),
                epsilon, delta,
            )
            events = self._events(scale, n_updates, n_problems, pure, curvature)
            for event in events:
                accountant.record(event)
        if curvature:
            ratios = self._curvature_ratios(X, feature_bound, events[-1] if private else None,
                                            rng)
            smoothness = smoothness * ratios
            # C_j proportional to sqrt(M_j) (Mangold et al. 2022): every coordinate's
            # noisy step then has the same signal-to-noise scale. Without noise the
            # clip is left alone, so that the objective is unchanged.
            if private:
                clip_all = clip_all * np.sqrt(ratios)
        sensitivity = 2.0 * clip_all / n_samples
        if private:
            if self.solver_ == "cd":
                update_noise, update_scale = "gaussian", sensitivity * scale
                selection_noise, selection_scale = "none", 0.0
            elif pure:
                # Update: Laplace with b_j = Delta_j / eps0. Selection: report-noisy-max
                # on scores of sensitivity Delta_u with Laplace(2 Delta_u / eps0),
                # eps0-DP for arbitrary (non-monotone) scores.
                update_noise, update_scale = "laplace", sensitivity * scale
                delta_u = float(np.max(sensitivity / np.sqrt(smoothness)))
                selection_noise, selection_scale = "laplace", 2 * delta_u * scale
            else:
                mu = 1.0 / scale
                eps_select = self._events(scale, 1, 1, False)[0].epsilon
                update_noise, update_scale = "gaussian", sensitivity / mu
                delta_u = float(np.max(sensitivity / np.sqrt(smoothness)))
                # Gumbel-max: argmax eps u / (2 Delta_u) + G == argmax u + (2 Delta_u / eps) G.
                selection_noise, selection_scale = "gumbel", 2 * delta_u / eps_select
        else:
            update_noise, update_scale = "none", np.zeros(n_coords)
            selection_noise, selection_scale = "none", 0.0

        selection = "greedy" if self.solver_ == "greedy_cd" else "random"
        coefs, intercepts, n_iters = [], [], []
        for k, y_k in enumerate(targets):
            if self.verbose and n_problems > 1:
                print(f"[{type(self).__name__}] problem {k + 1}/{n_problems}")
            res = coordinate_descent(
                X, y_k, loss, penalty, fit_intercept=self.fit_intercept, clip=clip_all,
                smoothness=smoothness, n_updates=n_updates, selection=selection,
                selection_noise=selection_noise, selection_scale=selection_scale,
                update_noise=update_noise, update_scale=update_scale, rng=rng,
                tol=self.tol if not math.isfinite(epsilon) else 0.0, verbose=self.verbose,
            )
            coefs.append(res.coef)
            intercepts.append(res.intercept)
            n_iters.append(res.n_iter)
        self._record_spend(accountant, delta)
        self.n_iter_ = int(max(n_iters))
        return np.array(coefs), np.array(intercepts)

    def _prepare_X(self, X, y, reset=True):
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        X, y = validate_sparse_data(self, X, y, reset=reset, accept_sparse=("csc", "csr"),
                                    y_numeric=not isinstance(self, ClassifierMixin))
        return X, y

    def _clip_entries(self, X, feature_bound):
        """Clip each entry to its public bound ``[-b_j, b_j]`` (copy; sparse stays sparse)."""
        b = np.asarray(feature_bound, dtype=float)
        if sp.issparse(X):
            X = sp.csc_matrix(X, copy=True)
            # Clip x_ij as a whole: stored duplicates are summed by every later product.
            X.sum_duplicates()
            bound = b[X.indices] if b.ndim else b
            np.clip(X.data, -bound, bound, out=X.data)
            return X
        return np.clip(X, -b, b)

    def _decision(self, X):
        check_is_fitted(self)
        X = validate_sparse_data(self, X, reset=False, accept_sparse=("csr", "csc"))
        return X @ self.coef_.T + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class DPGreedyCDRegressor(RegressorMixin, _BaseDPCoordinateDescent):
    """Linear regression trained with differential privacy on sparse data.

    Minimises ``(1/n) sum_i l(y_i, x_i . w + b) + psi(w)`` with the squared or
    Huber loss ``l`` and an l1, l2 or elastic-net penalty ``psi``, by private
    greedy coordinate descent (DP-GCD, Mangold et al. 2023), private randomised
    coordinate descent (DP-CD, Mangold et al. 2022), one of the stochastic-gradient
    solvers of :mod:`skdp_sparse.optim.sgd`, or output perturbation.

    Privacy
    -------
    The fit is (epsilon, delta)-DP for replace-one neighbouring datasets. Entries
    are clipped to ``[-feature_bound_j, feature_bound_j]`` and every per-example
    coordinate gradient to ``[-C_j, C_j]`` (``gradient_clip``), so each released
    coordinate gradient has sensitivity ``2 C_j / n``.

    * ``solver="greedy_cd"``, ``selection="exponential"`` (default): each step selects
      a coordinate with the exponential mechanism on the scores
      ``u_j = dist(g_j, -d psi_j(w_j)) / sqrt(M_j)`` (sensitivity
      ``max_j 2 C_j / (n sqrt(M_j))``; epsilon_s^2/8-zCDP) and updates it with
      Gaussian noise (``mu^2/2``-zCDP); all steps compose in zCDP and convert to
      (epsilon, delta) (Canonne, Kamath & Steinke 2020).
    * ``solver="greedy_cd"``, ``selection="laplace"``: the paper's Laplace noise:
      report-noisy-max with ``Lap(2 Delta_u / eps0)`` on the scores and a Laplace
      update, each eps0-DP; composed by the tightest of basic and advanced
      composition and zCDP; ``delta=0`` gives pure DP.
    * ``solver="cd"``: a coordinate drawn uniformly at random, Gaussian update;
      the updates compose exactly as one Gaussian mechanism (GDP).
    * ``solver="sgd"``, ``"bias_reduced_sgd"``, ``"sparse_sgd"``, ``"phased_sgd"``:
      rows are clipped to l2 norm ``norm_bound`` (and l1 norm
      ``norm_bound * sqrt(sparsity)``), per-example derivatives to the loss's bound
      (``target_bound`` for the squared loss); see :func:`skdp_sparse.optim.sgd.sgd`
      and its siblings for each mechanism and its accounting.
    * ``solver="output_perturbation"``: L2-regularised ERM solved to a certified
      tolerance plus calibrated noise
      (:func:`~skdp_sparse.linear_model.fit_output_perturbation`); needs
      ``penalty="l2"``.
    * ``solver="auto"`` (default): chosen by :func:`resolve_solver` from the public
      n, p and epsilon only, never from the data's values or labels.

    The noise is calibrated so that the accountant's total equals
    ``(epsilon, delta)``; ``epsilon_spent_`` and ``delta_spent_`` report it. For
    multiclass one-vs-rest fits the coordinate-descent solvers calibrate all K
    problems jointly; the gradient solvers give each ``(epsilon/K, delta/K)``.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget of the whole fit; ``np.inf`` switches noise off (not private).
    delta : float, default=1e-6
        Approximate-DP failure probability, in [0, 1). Choose it below 1/n.
    loss : {"squared", "huber"}, default="squared"
    huber_epsilon : float, default=1.35
        Threshold of the Huber loss.
    penalty : {"l1", "l2", "elasticnet"} or None, default="l1"
    alpha : float, default=None
        Penalty strength; ``None`` is 1e-3 (``output_perturbation``: the theorem's
        rule from the public bounds).
    l1_ratio : float, default=0.5
        Elastic-net mixing (scikit-learn's convention).
    feature_bound : float or array of shape (n_features,), default=1.0
        Public bound on ``|x_ij|`` (coordinate-descent solvers); entries are clipped to it.
    norm_bound : float, default=1.0
        Public bound on the l2 norm of a row (gradient solvers, output perturbation,
        and the curvature estimate of the coordinate-descent solvers); rows are
        clipped to it.
    sparsity : int, default=None
        Public bound s on non-zeros per row; rows are also clipped to l1 norm
        ``norm_bound * sqrt(s)`` (projection-mechanism gradients, pure-DP output
        perturbation).
    target_bound : float, default=1.0
        Public scale of ``|y|``, used for the default gradient clipping of the
        squared loss (``C_j = target_bound * feature_bound_j``).
    gradient_clip : float or array of shape (n_features,), default=None
        Per-example coordinate-gradient clipping ``C_j``; ``None`` derives it from
        the loss and the bounds.
    fit_intercept : bool, default=True
        The intercept is the coefficient of a constant feature 1, unpenalised;
        its gradient is clipped like a feature of bound 1.
    solver : {"auto", "greedy_cd", "cd", "sgd", "bias_reduced_sgd", "sparse_sgd", \
"phased_sgd", "output_perturbation"}, default="auto"
    selection : {"exponential", "laplace"}, default="exponential"
        Noisy selection of the greedy solver.
    curvature : {"private", "bound"}, default="private"
        Where the coordinate-descent solvers take each coordinate's smoothness
        ``M_j`` (its step is ``1/M_j``) and default clip ``C_j``. ``"bound"``: from
        the public bounds alone, ``M_j = beta b_j^2`` (``beta`` the loss's
        smoothness) and ``C_j`` as above; safe but very conservative for rare
        features. ``"private"``: ``CURVATURE_SHARE`` (10%) of the budget buys a
        noisy estimate of the column second moments ``mean_i x_ij^2`` of the rows
        clipped to ``norm_bound``
        (:func:`~skdp_sparse.privacy.statistics.release_column_second_moments`;
        Gaussian noise, Laplace for ``selection="laplace"``); then
        ``M_j = beta b_j^2 r_j`` and ``C_j = C_j^bound sqrt(r_j)`` with
        ``r_j`` the estimate over ``b_j^2``, clipped to ``[1e-3, 1]``
        (DP-CD's ``C_j ~ sqrt(M_j)``, Mangold et al. 2022). Set ``norm_bound`` to
        a bound on the row norms: rows above it bias the estimate low. The same
        release counts them, and if the noisy count exceeds half the rows the
        fit warns and keeps the bound's constants. Without noise
        (``epsilon=np.inf``) the exact moments set ``M_j`` and ``C_j`` is left
        as it is. With an explicit ``gradient_clip`` a private fit keeps the
        bounds' curvature (larger steps without matching clips amplify the noise).
        Ignored by the other solvers.
    max_iter : int, default=None
        Greedy steps (``greedy_cd``), passes over the coordinates (``cd``) or
        gradient steps (gradient solvers). ``None``: ``(n eps / sqrt(log(1/delta)))^{2/3}``
        greedy steps (:func:`default_greedy_iterations`), 5 passes, or each
        gradient solver's theory default.
    batch_size : int, default=None
        Minibatch size of ``sgd`` and ``sparse_sgd`` (``None``: the solver's default,
        full batch for ``sgd``).
    learning_rate : float, default=None
        Step size of the gradient solvers (``None``: ``1 / smoothness`` from the bounds).
    tol : float, default=1e-7
        Stopping tolerance on the best score, used only when ``epsilon=np.inf``
        (a data-dependent stopping rule would not be private).
    random_state : None, int or Generator, default=None
        ``None`` draws fresh OS entropy, as a private release should.
    verbose : int, default=0

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    solver_ : str
        The solver that ran (``solver="auto"`` resolved).
    n_iter_ : int
        Iterations run; a public number fixed before the fit (1 for output perturbation).
    epsilon_spent_, delta_spent_ : float
    privacy_events_ : tuple of PrivacyEvent

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from skdp_sparse import DPGreedyCDRegressor
    >>> X = sp.random(500, 50, density=0.1, format="csr", random_state=0)
    >>> y = X @ np.r_[1.0, -1.0, np.zeros(48)]
    >>> reg = DPGreedyCDRegressor(epsilon=1.0, delta=1e-6, random_state=0).fit(X, y)
    >>> reg.epsilon_spent_ <= 1.0
    True
    """

    _default_alpha = 1e-3

    def __init__(self, *, epsilon=1.0, delta=1e-6, loss="squared", huber_epsilon=1.35,
                 penalty="l1", alpha=None, l1_ratio=0.5, feature_bound=1.0, norm_bound=1.0,
                 sparsity=None, target_bound=1.0, gradient_clip=None, fit_intercept=True,
                 solver="auto", selection="exponential", curvature="private", max_iter=None,
                 batch_size=None, learning_rate=None, tol=1e-7, random_state=None, verbose=0):
        self.epsilon = epsilon
        self.delta = delta
        self.loss = loss
        self.huber_epsilon = huber_epsilon
        self.penalty = penalty
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.feature_bound = feature_bound
        self.norm_bound = norm_bound
        self.sparsity = sparsity
        self.target_bound = target_bound
        self.gradient_clip = gradient_clip
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.selection = selection
        self.curvature = curvature
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose

    def _output_perturbation_target_bound(self):
        return self._target_scale()

    def _target_scale(self):
        return check_bound("target_bound", self.target_bound)

    def _loss(self):
        if self.loss == "squared":
            return SquaredLoss()
        if self.loss == "huber":
            return HuberLoss(self.huber_epsilon)
        raise ValueError(f"loss must be 'squared' or 'huber', got {self.loss!r}")

    def fit(self, X, y):
        """Fit the model privately on ``X`` (dense or sparse) and targets ``y``."""
        X, y = self._prepare_X(X, y)
        loss = self._loss()
        epsilon, delta, feature_bound, clip = self._check_params(*X.shape)
        self._check_budget(epsilon, delta)
        self._target_scale()
        coef, intercept = self._fit_problems(
            X, [np.asarray(y, dtype=float)], loss, epsilon, delta, feature_bound, clip
        )
        self.coef_ = coef[0]
        self.intercept_ = float(intercept[0])
        return self

    def predict(self, X):
        """Predicted targets ``X @ coef_ + intercept_``."""
        return np.asarray(self._decision(X)).ravel()


class DPSparseLogisticRegression(ClassifierMixin, _BaseDPCoordinateDescent):
    """Logistic regression trained with differential privacy on sparse data.

    Minimises ``(1/n) sum_i log(1 + exp(-y_i (x_i . w + b))) + psi(w)`` by private
    greedy coordinate descent (``solver="greedy_cd"``, DP-GCD), private randomised
    coordinate descent (``solver="cd"``, DP-CD), a stochastic-gradient solver
    (``"sgd"``, ``"bias_reduced_sgd"``, ``"sparse_sgd"``, ``"phased_sgd"``) or
    output perturbation; ``solver="auto"`` chooses from public n, p and epsilon
    (:func:`resolve_solver`). Multiclass problems are solved one-vs-rest and the
    whole fit, all classes together, meets ``(epsilon, delta)``: the
    coordinate-descent solvers calibrate the K binary fits jointly in one
    accountant, the other solvers give each ``(epsilon/K, delta/K)``.

    Privacy
    -------
    (epsilon, delta)-DP for replace-one neighbouring datasets. The logistic loss
    has ``|l'| <= 1``, so after clipping entries to ``feature_bound`` every
    per-example coordinate gradient lies in ``[-b_j, b_j]``; ``gradient_clip``
    may clip tighter. See :class:`DPGreedyCDRegressor` for the mechanisms and
    their composition; the labels are part of the private data.

    Parameters
    ----------
    epsilon, delta, penalty, l1_ratio, feature_bound, norm_bound, sparsity,
    gradient_clip, fit_intercept, solver, selection, curvature, max_iter, batch_size,
    learning_rate, tol, random_state, verbose
        As in :class:`DPGreedyCDRegressor`.
    alpha : float, default=None
        Penalty strength; ``None`` is 1e-4 (``output_perturbation``: the theorem's rule).
    classes : array-like of labels, default=None
        The public label set. ``classes_`` is its sorted copy whatever labels the
        training data hold (a class absent from them is still learnt, from its
        absence), and a label outside it raises ``ValueError`` before any privacy
        budget is spent. ``None`` reads the label set from ``y``, which the
        guarantee does not cover (one row with a rare label changes ``classes_``
        and the shape of ``coef_``), and emits
        :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    solver_ : str
    n_iter_ : int
    epsilon_spent_, delta_spent_ : float
    privacy_events_ : tuple of PrivacyEvent

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from skdp_sparse import DPSparseLogisticRegression
    >>> X = sp.random(1000, 30, density=0.2, format="csr", random_state=0)
    >>> y = (X[:, 0].toarray().ravel() > 0.1).astype(int)
    >>> clf = DPSparseLogisticRegression(epsilon=1.0, random_state=0).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
    """

    _default_alpha = 1e-4

    def __init__(self, *, epsilon=1.0, delta=1e-6, penalty="l1", alpha=None, l1_ratio=0.5,
                 feature_bound=1.0, norm_bound=1.0, sparsity=None, gradient_clip=None,
                 fit_intercept=True, solver="auto", selection="exponential",
                 curvature="private", max_iter=None, batch_size=None, learning_rate=None,
                 tol=1e-7, classes=None, random_state=None, verbose=0):
        self.epsilon = epsilon
        self.delta = delta
        self.penalty = penalty
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.feature_bound = feature_bound
        self.norm_bound = norm_bound
        self.sparsity = sparsity
        self.gradient_clip = gradient_clip
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.selection = selection
        self.curvature = curvature
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.tol = tol
        self.classes = classes
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X, y):
        """Fit the classifier privately on ``X`` (dense or sparse) and labels ``y``."""
        X, y = self._prepare_X(X, y)
        classes, codes = encode_labels(y, self.classes, type(self).__name__)
        self.classes_ = classes
        epsilon, delta, feature_bound, clip = self._check_params(*X.shape)
        self._check_budget(epsilon, delta)
        positives = [1] if self.classes_.size == 2 else range(self.classes_.size)
        targets = [np.where(codes == k, 1.0, -1.0) for k in positives]
        coef, intercept = self._fit_problems(
            X, targets, LogisticLoss(), epsilon, delta, feature_bound, clip
        )
        self.coef_ = coef
        self.intercept_ = intercept
        return self

    def _target_scale(self):
        return 1.0

    def decision_function(self, X):
        """Signed distance to the separating hyperplane(s)."""
        scores = np.asarray(self._decision(X))
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict_proba(self, X):
        """Class probabilities (one-vs-rest scores normalised for multiclass)."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1 - p, p])
        p = expit(scores)
        return p / p.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        return np.log(self.predict_proba(X))

    def predict(self, X):
        """Predicted class labels."""
        scores = self.decision_function(X)
        idx = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[idx]
