"""Differentially private stochastic-gradient solvers for sparse generalised linear models.

Four solvers of ``min_theta (1/n) sum_i l(y_i, x_i . w + b) + (l2/2) ||w||^2 + l1 ||w||_1``
(``theta = (w, b)``; the intercept is never penalised):

* :func:`sgd` -- minibatch DP-SGD (full batch: noisy gradient descent) with
  per-example clipping, Gaussian or projection-mechanism gradient estimates,
  accounted exactly (full batch, GDP) or by the RDP of the subsampled Gaussian;
* :func:`bias_reduced_sgd` -- the bias-reduced SGD of Ghazi et al. (Alg. 5-6 of
  "Differentially Private Optimization with Sparse Gradients"), stopped by a
  fully adaptive privacy filter, with the boosting wrapper of their Alg. 7;
* :func:`sparse_sgd` -- sparsity-preserving DP-SGD (DP-AdaFEST, Ghazi et al.,
  "Sparsity-Preserving Differentially Private Training of Large Embedding
  Models"): per-step cost proportional to the batch's non-zeros, not to d;
* :func:`phased_sgd` -- the phased SGD of Menart & Nikolov ("On the Gradient
  Complexity of Private Optimization with Private Oracles", Alg. 4) for smooth
  losses, in about ``max(sqrt(d log(1/delta))/alpha, 1/alpha^2)`` gradients.

Every solver returns ``(coef, intercept, n_steps, events, n_gradient_evaluations)``
where ``events`` is the list of :class:`~skdp_sparse.privacy.accounting.PrivacyEvent`
actually spent; they compose (:func:`~skdp_sparse.privacy.accounting.compose`) to at
most the requested ``(epsilon, delta)``, and exactly to it for :func:`sgd`,
:func:`sparse_sgd` and :func:`phased_sgd` (whose noise is calibrated through
:func:`~skdp_sparse.privacy.accounting.calibrate_scale`).

Public bounds and sensitivities (replace-one neighbours, n public). Rows are
clipped to l2 norm ``L = max_row_norm`` and, given ``sparsity = s``, to l1 norm
``L sqrt(s)`` (:func:`~skdp_sparse.privacy.clipping.clip_rows`); per-example
derivatives ``l'(y_i, z_i)`` are clipped to ``[-G, G]`` with ``G =
derivative_clip`` (default: the loss's own bound, 1 for the logistic loss; the
squared loss needs a public ``derivative_clip``). The per-example gradient
``l'_i (x_i, 1)`` then has l2 norm ``<= C2 = G sqrt(L^2 + 1)`` and l1 norm
``<= C1 = G (L sqrt(s) + 1)`` (``sqrt(d)`` in place of ``sqrt(s)`` when ``s``
is not given; drop the ``+ 1`` terms without intercept), whatever the data.
A sum of per-example gradients therefore moves by at most ``2 C2`` in l2 when
one example is replaced.

``epsilon = np.inf`` switches all noise off (not private: the event list then
holds one event of infinite epsilon). Every solver adds Gaussian noise and needs
``delta > 0`` otherwise. Noise is fresh at every step and coordinate; the only
data-independent stopping rule is the privacy filter of :func:`bias_reduced_sgd`.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln, logsumexp
from scipy.stats import norm

from ..privacy._random import check_generator
from ..privacy.accounting import (
    RDP_ORDERS,
    PrivacyEvent,
    calibrate_scale,
    compose,
)
from ..privacy.clipping import clip_rows, with_summed_duplicates
from ..privacy.mechanisms import GaussianMechanism
from ..privacy.subsampling import subsampled_gaussian_event, wor_amplified_epsilon_delta
from . import _sgd_kernels as K
from .losses import LogisticLoss, _Loss
from .projections import project_l1_ball

__all__ = [
    "sgd",
    "bias_reduced_sgd",
    "sparse_sgd",
    "phased_sgd",
    "default_noisy_gd_steps",
    "phased_sgd_gradient_bound",
]


# --------------------------------------------------------------------------
# Validation and the public constants of a problem
# --------------------------------------------------------------------------
@dataclass
class _Problem:
    X: object  # CSR matrix or C-contiguous ndarray, rows clipped
    y: np.ndarray
    n: int
    d: int
    sparse: bool
    loss: _Loss
    dclip: float  # G: per-example derivative clip
    fi: int  # 1 with an intercept
    row_l2: float  # L
    c2: float  # l2 bound of one per-example gradient
    c1: float  # l1 bound of one per-example gradient
    beta: float  # smoothness of one per-example loss (penalty included)
    l2: float
    l1: float

    @property
    def p(self):
        """Length of the parameter vector theta = (w, b)."""
        return self.d + self.fi


def _check_nonneg(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value >= 0) \
            or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_positive(name, value, *, allow_none=False, allow_inf=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value > 0) \
            or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _check_int(name, value, low, high=None, *, allow_none=True):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low \
            or (high is not None and value > high):
        span = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an int in {span}, got {value!r}")
    return int(value)


def _check_privacy(epsilon, delta):
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not (epsilon > 0):
        raise ValueError(f"epsilon must be > 0 (np.inf turns noise off), got {epsilon!r}")
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) \
            or not (0 <= delta < 1):
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if math.isfinite(epsilon) and delta == 0:
        raise ValueError(
            "these solvers add Gaussian noise and give approximate DP only: "
            "set delta > 0 (for example 1 / n_samples**2)"
        )
    return float(epsilon), float(delta)


def _prepare(X, y, loss, *, l2, l1, max_row_norm, sparsity, derivative_clip, fit_intercept,
             epsilon, delta):
    epsilon, delta = _check_privacy(epsilon, delta)
    private = math.isfinite(epsilon)
    if not isinstance(loss, _Loss):
        raise ValueError(f"loss must be a loss object of skdp_sparse.optim.losses, got {loss!r}")
    l2 = _check_nonneg("l2", l2)
    l1 = _check_nonneg("l1", l1)
    row_l2 = _check_positive("max_row_norm", max_row_norm, allow_inf=not private)
    if sparsity is not None:
        sparsity = _check_int("sparsity", sparsity, 1, allow_none=False)
    if sp.issparse(X):
        # Clipping and feature counts must see each row with its duplicates summed.
        X = with_summed_duplicates(sp.csr_matrix(X, dtype=np.float64))
        if not np.all(np.isfinite(X.data)):
            raise ValueError("X contains NaN or infinity")
        sparse = True
    else:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-dimensional, got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinity")
        sparse = False
    n, d = X.shape
    if n == 0 or d == 0:
        raise ValueError(f"X must have at least one row and one column, got shape {X.shape}")
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},), got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or infinity")
    if isinstance(loss, LogisticLoss) and not np.all(np.abs(y) == 1):
        raise ValueError("the logistic loss takes labels y in {-1, +1}")
    if derivative_clip is None:
        dclip = float(loss.derivative_bound)
    else:
        dclip = _check_positive("derivative_clip", derivative_clip, allow_inf=not private)
    if private and not math.isfinite(dclip):
        raise ValueError(
            f"{loss!r} has an unbounded derivative: give a public derivative_clip "
            "(the per-example derivative is clipped to [-derivative_clip, derivative_clip])"
        )
    s_eff = d if sparsity is None else min(sparsity, d)
    row_l1 = row_l2 * math.sqrt(s_eff)
    if math.isfinite(row_l2):
        X = clip_rows(X, row_l2, row_l1 if sparsity is not None else np.inf)
    if sparse:
        X.sort_indices()
        X.indices = X.indices.astype(np.int64, copy=False)
        X.indptr = X.indptr.astype(np.int64, copy=False)
    else:
        X = np.ascontiguousarray(X)
    fi = int(bool(fit_intercept))
    if not private:
        # Without noise the step size may read the data: use the actual largest row.
        sq = X.multiply(X).sum(axis=1) if sparse else (X * X).sum(axis=1)
        row_l2 = min(row_l2, math.sqrt(float(np.max(sq))) or 1.0)
    c2 = dclip * math.sqrt(row_l2**2 + fi)
    c1 = dclip * (row_l1 + fi)
    beta = loss.smoothness * (row_l2**2 + fi) + l2
    return _Problem(X, y, n, d, sparse, loss, dclip, fi, row_l2, c2, c1, beta, l2, l1), \
        epsilon, delta


def _gradient_sum(P, theta, rows):
    """Sum over ``rows`` (None: all) of the clipped per-example gradients, length ``P.p``."""
    w = theta[: P.d]
    b = theta[P.d] if P.fi else 0.0
    out = np.empty(P.p)
    if P.sparse:
        X = P.X
        if rows is None:
            rows = np.arange(P.n, dtype=np.int64)
        grad = out[: P.d]
        total = K.csr_batch_gradient(X.data, X.indices, X.indptr, rows, w, b, P.y,
                                     P.loss.code, P.loss.param, P.dclip, grad)
        if not np.all(np.isfinite(grad)):
            raise FloatingPointError("non-finite gradient")
    else:
        Xb = P.X if rows is None else P.X[rows]
        yb = P.y if rows is None else P.y[rows]
        g = np.clip(P.loss.derivative(yb, Xb @ w + b), -P.dclip, P.dclip)
        out[: P.d] = Xb.T @ g
        total = float(g.sum())
    if P.fi:
        out[P.d] = total
    return out


def _penalised_step(P, theta, grad, eta, radius):
    """``theta <- Pi(prox_{eta l1}(theta - eta (grad + l2 w)))``; the intercept is unpenalised."""
    d = P.d
    if P.l2:
        grad = grad.copy()
        grad[:d] += P.l2 * theta[:d]
    theta = theta - eta * grad
    if P.l1:
        w = theta[:d]
        theta[:d] = np.sign(w) * np.maximum(np.abs(w) - eta * P.l1, 0.0)
    if radius is not None:
        nrm = np.linalg.norm(theta)
        if nrm > radius:
            theta *= radius / nrm
    return theta


def _split(P, theta):
    coef = np.array(theta[: P.d], dtype=np.float64)
    intercept = float(theta[P.d]) if P.fi else 0.0
    return coef, intercept


def _non_private_events():
    return [PrivacyEvent.approximate(math.inf, 0.0, name="non-private (epsilon=inf)")]


def _gdp_mu(epsilon, delta):
    """Total ``mu`` of a Gaussian mechanism that is exactly (epsilon, delta)-DP."""
    return 1.0 / calibrate_scale(lambda s: [PrivacyEvent.gaussian(1.0 / s)], epsilon, delta)


@functools.lru_cache(maxsize=256)
def _subsampled_multiplier(q, n_steps, sampling, epsilon, delta):
    """Smallest noise multiplier whose ``n_steps`` subsampled Gaussian steps are
    (epsilon, delta)-DP. Deterministic in its arguments, hence cached: repeated
    fits with one configuration do not redo the bisection."""
    return calibrate_scale(
        lambda z: [subsampled_gaussian_event(z, q, n_steps, sampling=sampling)], epsilon, delta
    )


def _report(tag, t, total, events_so_far, delta, extra=""):
    eps = compose(events_so_far, delta)[0] if events_so_far else 0.0
    print(f"[{tag}] step {t}/{total}{extra}  privacy spent: epsilon={eps:.4g} "
          f"(delta={delta:.3g})")


def _checkpoints(total, verbose):
    if not verbose or total <= 0:
        return set()
    every = max(1, total // (10 if verbose < 2 else 100))
    return set(range(every, total + 1, every)) | {1, total}


# --------------------------------------------------------------------------
# 1. DP-SGD / noisy gradient descent
# --------------------------------------------------------------------------
def default_noisy_gd_steps(n_samples, n_params, epsilon, delta, *, smoothness, grad_bound,
                           scale=1.0):
    """Number of steps of full-batch noisy gradient descent from public quantities.

    Averaged noisy GD with step ``1/beta`` on a ``beta``-smooth convex objective
    has excess risk about ``beta R^2 / (2T) + p sigma_T^2 / (2 beta)``, where the
    per-step noise on the mean gradient is ``sigma_T = 2 C2 sqrt(T) / (n mu)``
    when ``T`` Gaussian steps compose to ``mu``-GDP (the ``(epsilon, delta)``
    budget). The two terms balance at ``T = beta R n mu / (2 C2 sqrt(p))``, with
    ``R = scale`` a public guess of the solution's norm. Clipped to [5, 1000].
    """
    mu = _gdp_mu(epsilon, delta)
    t = smoothness * scale * n_samples * mu / (2.0 * grad_bound * math.sqrt(n_params))
    return int(min(1000, max(5, round(t))))


def _resolve_estimator(gradient_estimator, P, epsilon, delta, sparsity):
    if gradient_estimator not in ("auto", "gaussian", "projection"):
        raise ValueError(
            "gradient_estimator must be 'auto', 'gaussian' or 'projection', "
            f"got {gradient_estimator!r}"
        )
    if gradient_estimator != "auto":
        return gradient_estimator
    if sparsity is None or not math.isfinite(epsilon):
        return "gaussian"
    # The regime of Ghazi et al. (Lemma 6.4): d >~ n eps sqrt(s ln(d/s) / ln(1/delta)),
    # where projecting the noise on the l1 ball shrinks it more than the signal.
    s = min(sparsity + P.fi, P.p)
    threshold = P.n * epsilon * math.sqrt(s * math.log(max(P.p / s, math.e)) /
                                          math.log(1 / delta))
    return "projection" if P.p >= threshold else "gaussian"


def sgd(X, y, loss, *, l2=0.0, l1=0.0, max_row_norm=1.0, sparsity=None, derivative_clip=None,
        radius=None, epsilon=1.0, delta=1e-6, n_steps=None, batch_size=None,
        sampling="poisson", gradient_estimator="auto", learning_rate=None, average=True,
        fit_intercept=True, rng=None, verbose=0):
    """Minibatch DP-SGD; with ``batch_size=None`` (or ``n``) noisy full-batch gradient descent.

    Each step draws a batch (Poisson with rate ``q = batch_size / n``, or a
    uniform subset of ``batch_size`` rows with ``sampling="without_replacement"``;
    all rows when ``batch_size >= n``), sums the clipped per-example gradients,
    adds ``N(0, (z C2)^2 I)`` and divides by the expected batch size. With
    ``gradient_estimator="projection"`` the noisy mean is then projected on the
    l1 ball of radius ``C1`` (the projection mechanism, Alg. 1 of Ghazi et al.;
    post-processing). The step is ``theta <- Pi(prox_{eta l1}(theta - eta
    (g + l2 w)))``, ``Pi`` the projection on the l2 ball of ``radius`` (none by
    default); the averaged iterate is returned (the last one with ``average=False``).

    Privacy (replace-one): the noisy sum has l2 sensitivity ``2 C2``.

    * Full batch: ``T`` Gaussian mechanisms of ratio ``mu = 2 C2 / (z C2) = 2/z``
      compose exactly into one of ratio ``sqrt(T) mu`` (Dong, Roth & Su 2019).
    * Poisson subsampling: the RDP of the subsampled Gaussian
      (:func:`~skdp_sparse.privacy.subsampling.poisson_gaussian_rdp`, Mironov,
      Talwar & Zhang 2019, made replace-one by the weak triangle inequality).
    * Fixed-size sampling without replacement: Wang, Balle & Kasiviswanathan
      (2019, Thm. 9).

    ``z`` is the smallest noise multiplier whose ``T`` steps compose to
    ``(epsilon, delta)`` (:func:`~skdp_sparse.privacy.accounting.calibrate_scale`).

    Parameters
    ----------
    X : sparse matrix (CSR preferred) or ndarray of shape (n, d)
    y : ndarray of shape (n,); labels in {-1, +1} for the logistic loss
    loss : loss object of :mod:`skdp_sparse.optim.losses`
    l2, l1 : float, default=0
        Penalty strengths ``(l2/2) ||w||^2 + l1 ||w||_1``.
    max_row_norm : float, default=1
        Public l2 bound ``L`` each row is clipped to.
    sparsity : int, optional
        Public ``s``: rows are also clipped to l1 norm ``L sqrt(s)``, and the
        projection mechanism projects on the l1 ball of radius ``C1``.
    derivative_clip : float, optional
        Public bound ``G`` the per-example derivative is clipped to.
    radius : float, optional
        Projects ``theta = (w, b)`` on the l2 ball of this radius after each step.
    epsilon, delta : float
        Budget of the whole run; ``epsilon=np.inf`` switches noise off.
    n_steps : int, optional
        ``None``: :func:`default_noisy_gd_steps` (a full pass or more for minibatches).
    batch_size : int, optional
        Expected batch size; ``None`` means the full batch.
    sampling : {"poisson", "without_replacement"}
    gradient_estimator : {"auto", "gaussian", "projection"}
        ``"auto"`` projects only in the high-dimensional sparse regime of
        Ghazi et al. (``d >~ n eps sqrt(s ln(d/s) / ln(1/delta))``).
    learning_rate : float, optional
        ``None``: ``1 / beta`` with ``beta = smoothness * (L^2 + 1) + l2``, the
        smoothness of one clipped example's loss (a public, worst-case value;
        the private search may tune it).
    average : {True, False, "tail"}, default=True
        Return the average of all iterates, the last one, or the average of
        the second half (suffix averaging).
    fit_intercept : bool, default=True
    rng : None, int or numpy Generator
    verbose : int

    Returns
    -------
    coef : ndarray of shape (d,)
    intercept : float
    n_steps : int
    events : list of PrivacyEvent
    n_gradient_evaluations : int
        Number of per-example gradients computed.
    """
    P, epsilon, delta = _prepare(X, y, loss, l2=l2, l1=l1, max_row_norm=max_row_norm,
                                 sparsity=sparsity, derivative_clip=derivative_clip,
                                 fit_intercept=fit_intercept, epsilon=epsilon, delta=delta)
    rng = check_generator(rng)
    if sampling not in ("poisson", "without_replacement"):
        raise ValueError(
            f"sampling must be 'poisson' or 'without_replacement', got {sampling!r}"
        )
    radius = _check_positive("radius", radius, allow_none=True)
    batch = _check_int("batch_size", batch_size, 1)
    batch = P.n if batch is None else min(batch, P.n)
    q = batch / P.n
    full = batch == P.n
    private = math.isfinite(epsilon)
    n_steps = _check_int("n_steps", n_steps, 1)
    if n_steps is None:
        if private:
            n_steps = default_noisy_gd_steps(P.n, P.p, epsilon, delta, smoothness=P.beta,
                                             grad_bound=P.c2, scale=radius or 1.0)
        else:
            n_steps = 200
        if not full:
            n_steps = max(n_steps, math.ceil(P.n / batch))
    eta = _check_positive("learning_rate", learning_rate, allow_none=True) or 1.0 / P.beta
    estimator = _resolve_estimator(gradient_estimator, P, epsilon, delta, sparsity)

    name = "noisy gradient" if full else f"subsampled noisy gradient ({sampling})"

    def events_for(z, count=n_steps):
        return [subsampled_gaussian_event(z, q, count, sampling=sampling, name=name)]

    if private:
        z = _subsampled_multiplier(q, n_steps, sampling, epsilon, delta)
        events = events_for(z)
    else:
        z = 0.0
        events = _non_private_events()
    sigma = z * P.c2
    checkpoints = _checkpoints(n_steps, verbose)
    if average not in (True, False, "tail"):
        raise ValueError(f"average must be True, False or 'tail', got {average!r}")
    # 'tail' averages the iterates of the second half of the run (suffix averaging).
    first_averaged = n_steps // 2 + 1 if average == "tail" else 1
    theta = np.zeros(P.p)
    avg = np.zeros(P.p)
    n_grad = 0
    for t in range(1, n_steps + 1):
        if full:
            rows, denom = None, float(P.n)
            n_grad += P.n
        else:
            size = rng.binomial(P.n, q) if sampling == "poisson" else batch
            rows = np.sort(rng.choice(P.n, size=size, replace=False)).astype(np.int64)
            denom = q * P.n
            n_grad += size
        g = _gradient_sum(P, theta, rows)
        if sigma > 0:
            g += sigma * rng.standard_normal(P.p)
        g /= denom
        if estimator == "projection":
            g = project_l1_ball(g, P.c1)
        theta = _penalised_step(P, theta, g, eta, radius)
        if t >= first_averaged:
            avg += (theta - avg) / (t - first_averaged + 1)
        if t in checkpoints:
            _report("sgd", t, n_steps, events_for(z, t) if private else [], delta)
    coef, intercept = _split(P, avg if average else theta)
    return coef, intercept, n_steps, events, n_grad


# --------------------------------------------------------------------------
# 2. Bias-reduced SGD with a privacy filter (Ghazi et al., Alg. 5-7)
# --------------------------------------------------------------------------
def _tgeom_probs(M):
    """Truncated geometric law on {0..M}: p_k = C_M / 2^k, C_M = 1 / (2 (1 - 2^-(M+1)))."""
    c_m = 1.0 / (2.0 * (1.0 - 2.0 ** -(M + 1)))
    return c_m / 2.0 ** np.arange(M + 1)


def _projection_mechanism(P, grad_sum, m, sigma_unit, rng, estimator):
    """Alg. 1 of Ghazi et al. on the mean of ``m`` clipped gradients.

    Gaussian noise calibrated to the mean's replace-one l2 sensitivity
    ``2 C2 / m`` (``sigma_unit`` is the noise of sensitivity 1), then the
    Euclidean projection on the l1 ball of radius ``C1``, which holds every
    mean of clipped gradients.
    """
    g = grad_sum / m
    if sigma_unit > 0:
        g = g + (2.0 * P.c2 / m) * sigma_unit * rng.standard_normal(P.p)
    if estimator == "projection":
        g = project_l1_ball(g, P.c1)
    return g


def _bias_reduced_gradient(P, theta, N, probs, sigma_unit, rng, estimator):
    """Alg. 5: ``G = (G_B - (G_O + G_E)/2) / p_N + G_I``; returns (G, gradients used).

    ``B`` is a uniform subset of size ``2^(N+1)`` split uniformly into halves O
    and E, ``I`` a uniform index; each of the four means goes through its own
    projection mechanism with fresh noise.
    """
    half = 2**N
    rows = rng.choice(P.n, size=2 * half, replace=False).astype(np.int64)
    odd, even = np.sort(rows[:half]), np.sort(rows[half:])
    g_odd = _gradient_sum(P, theta, odd)
    g_even = _gradient_sum(P, theta, even)
    i = np.array([rng.integers(P.n)], dtype=np.int64)
    g_one = _gradient_sum(P, theta, i)
    G_B = _projection_mechanism(P, g_odd + g_even, 2 * half, sigma_unit, rng, estimator)
    G_O = _projection_mechanism(P, g_odd, half, sigma_unit, rng, estimator)
    G_E = _projection_mechanism(P, g_even, half, sigma_unit, rng, estimator)
    G_I = _projection_mechanism(P, g_one, 1, sigma_unit, rng, estimator)
    return (G_B - 0.5 * (G_O + G_E)) / probs[N] + G_I, 2 * half + 1


class _Filter:
    """The fully adaptive (epsilon, delta) filter of Whitehouse, Ramdas, Rogers & Wu (2023).

    Steps with predictable privacy parameters ``(eps_s, delta_s)`` compose to
    ``(eps_F, delta' + delta'')`` as long as
    ``sqrt(2 ln(1/delta') sum eps_s^2) + (1/2) sum eps_s^2 <= eps_F`` and
    ``sum delta_s <= delta''`` (Ghazi et al., Thm. A.4).
    """

    def __init__(self, eps_f, delta_prime, delta_second):
        self.eps_f = eps_f
        self.log_inv = math.log(1.0 / delta_prime)
        self.delta_second = delta_second
        self.sq = 0.0
        self.dl = 0.0

    def add(self, eps_s, delta_s):
        self.sq += eps_s**2
        self.dl += delta_s

    def within(self):
        return (math.sqrt(2 * self.log_inv * self.sq) + 0.5 * self.sq <= self.eps_f
                and self.dl <= self.delta_second)


def _bias_reduced_eta(P, probs, sigma_unit, estimator, radius, tau):
    """Step ``D / (nu sqrt(tau))`` of Ghazi et al. (Thm. 6.7), from public quantities.

    ``nu^2`` bounds the oracle's second moment: the noiseless parts of
    ``G_B - (G_O + G_E)/2`` cancel (the means lie in the l1 ball, where the
    projection is the identity), leaving noise of second moment
    ``3 p sigma_B^2`` (at most ``(2 C1)^2`` after projection), weighted by
    ``1 / p_N``; ``G_I`` adds at most ``C2^2 + p sigma_1^2`` (``C1^2`` projected).
    ``D = 2 radius`` (radius 1 when not given); ``tau`` is the expected number of steps.
    """
    nu2 = 0.0
    for k, p_k in enumerate(probs):
        sigma_b = 2.0 * P.c2 * sigma_unit / 2 ** (k + 1)
        a_k = 3.0 * P.p * sigma_b**2
        if estimator == "projection":
            a_k = min(a_k, 4.0 * P.c1**2)
        nu2 += 2.0 * a_k / p_k
    g_i = P.c2**2 + P.p * (2.0 * P.c2 * sigma_unit) ** 2
    if estimator == "projection":
        g_i = min(g_i, P.c1**2)
    nu2 += 2.0 * g_i
    return 2.0 * (radius or 1.0) / (math.sqrt(nu2) * math.sqrt(tau))


def _bias_reduced_step_privacy(N, n, epsilon, delta, filter_bound):
    """(eps_s, delta_s) of one step of Alg. 6 with batch parameter ``N`` (see
    :func:`bias_reduced_sgd`); each projection mechanism runs at (eps/32, delta/16)."""
    eps0, delta0 = epsilon / 32.0, delta / 16.0
    q = 2.0 ** (N + 1) / n
    e3, d3 = wor_amplified_epsilon_delta(3 * eps0, 3 * delta0, q)
    e1, d1 = wor_amplified_epsilon_delta(eps0, delta0, 1.0 / n)
    eps_s, delta_s = e3 + e1, d3 + d1
    if filter_bound == "paper":
        c = (3.0 * 2.0 ** (N + 1) + 1.0) / (16.0 * n)
        # The paper's eps c_s rests on e^x - 1 <= 2x, true for x <= 1.25 only; the
        # max keeps the rule valid for every epsilon and equal to it below that.
        eps_s, delta_s = max(epsilon * c, eps_s), max(delta * c, delta_s)
    return eps_s, delta_s


def _one_bias_reduced_run(P, epsilon, delta, *, eta, radius, filter_bound, estimator,
                          max_steps, rng, verbose, tag):
    n = P.n
    M = max(int(math.floor(math.log2(n))) - 1, 0)
    probs = _tgeom_probs(M)
    # Each projection mechanism of Alg. 5 runs at (eps/32, delta/16): Alg. 6 calls
    # the oracle with (eps/8, delta/4) and Alg. 5 gives each call a quarter.
    sigma_unit = GaussianMechanism(1.0, epsilon=epsilon / 32.0, delta=delta / 16.0).sigma

    def step_privacy(N):
        return _bias_reduced_step_privacy(N, n, epsilon, delta, filter_bound)

    eps_last, delta_last = step_privacy(M)
    if filter_bound == "paper":
        filt = _Filter(epsilon / 2.0, delta / 4.0, delta / 4.0)
        eps_f, delta_f = epsilon / 2.0, delta / 2.0
    else:
        eps_f, delta_f = epsilon - eps_last, delta - delta_last
        filt = _Filter(eps_f, delta_f / 2.0, delta_f / 2.0)
    if eta is None:
        # Expected number of steps the filter allows: the sum of eps_s^2 it admits
        # over the mean eps_s^2 per step (and the same for the deltas).
        params = np.array([step_privacy(k) for k in range(M + 1)])
        mean_sq = float(probs @ params[:, 0] ** 2)
        mean_delta = float(probs @ params[:, 1])
        tau = min(filt.eps_f**2 / (2 * filt.log_inv * mean_sq), filt.delta_second / mean_delta)
        eta = _bias_reduced_eta(P, probs, sigma_unit, estimator, radius, max(tau, 1.0))

    theta = np.zeros(P.p)
    avg = theta.copy()  # average of x^0 .. x^t
    n_grad = 0
    t = 0
    stopped_by_filter = False
    while True:
        if not filt.within():
            stopped_by_filter = True
            break
        if max_steps is not None and t >= max_steps:
            break
        N = int(rng.choice(M + 1, p=probs))
        G, used = _bias_reduced_gradient(P, theta, N, probs, sigma_unit, rng, estimator)
        n_grad += used
        filt.add(*step_privacy(N))
        theta = _penalised_step(P, theta, G, eta, radius)
        t += 1
        avg += (theta - avg) / (t + 1)
        if verbose and (t & (t - 1)) == 0:
            print(f"[{tag}] step {t}  N={N}  filter: sqrt-term+drift="
                  f"{math.sqrt(2 * filt.log_inv * filt.sq) + 0.5 * filt.sq:.4g} "
                  f"<= {filt.eps_f:.4g}?  sum delta_s={filt.dl:.3g}")
    if stopped_by_filter:
        # Steps 0..t-2 passed the filter; the last one overshoots by at most one
        # step, whose parameters are bounded by those of the largest batch (N = M).
        events = [
            PrivacyEvent.approximate(eps_f, delta_f, name="bias-reduced SGD: filtered steps"),
            PrivacyEvent.approximate(eps_last, delta_last,
                                     name="bias-reduced SGD: last step (worst case)"),
        ]
    else:
        events = [PrivacyEvent.approximate(eps_f, delta_f,
                                           name="bias-reduced SGD: filtered steps")]
    if verbose:
        print(f"[{tag}] stopped after {t} steps; privacy spent: epsilon="
              f"{compose(events, delta)[0]:.4g} (delta={delta:.3g})")
    return avg, t, events, n_grad


def bias_reduced_sgd(X, y, loss, *, l2=0.0, l1=0.0, max_row_norm=1.0, sparsity=None,
                     derivative_clip=None, radius=None, epsilon=1.0, delta=1e-6,
                     learning_rate=None, max_steps=None, filter_bound="paper",
                     gradient_estimator="projection", boosting_runs=0, loss_bound=1.0,
                     fit_intercept=True, rng=None, verbose=0):
    """Bias-reduced DP-SGD stopped by a privacy filter (Ghazi et al., Alg. 5-7).

    Each step draws ``N ~ TGeom(M)``, ``M = floor(log2 n) - 1``, and estimates
    the gradient by Alg. 5: ``G = (G_B - (G_O + G_E)/2) / p_N + G_I`` with ``B``
    a uniform subset of size ``2^(N+1)``, ``O, E`` its halves, ``I`` one uniform
    index, each mean released by the projection mechanism (Alg. 1, Gaussian
    noise, l1-ball projection) at ``(eps/32, delta/16)``. Its expectation is the
    expectation of the mechanism on a uniform batch of size ``2^(M+1)`` (the
    full batch when n is a power of two): the telescoping cancels the
    smaller-batch bias. The step is the proximal/projected step of :func:`sgd`
    and the returned point is the average of ``x^0 .. x^T``.

    Privacy (replace-one). Given ``B``, the three means on ``B, O, E`` are
    ``(3 eps0, 3 delta0)``-DP (basic composition); ``B`` is a uniform subset,
    so they are ``(log(1 + q (e^{3 eps0} - 1)), 3 q delta0)``-DP with
    ``q = 2^(N+1)/n`` (Balle, Barthe & Gaboardi 2018, Thm. 9), and ``G_I`` is
    ``(log(1 + (e^eps0 - 1)/n), delta0/n)``-DP: step ``s`` is ``(eps_s, delta_s)``-DP
    with parameters known before it runs (``N_s`` is data-independent). The
    run stops by the fully adaptive filter of Whitehouse et al. (2023) (Thm. A.4
    of the paper) checked over **all executed steps** (the paper's printed rule
    indexes ``N_t`` inside the sums; ``N_s`` is the correct reading):

    * ``filter_bound="paper"``: the SPEC's rule, continue while
      ``sqrt(2 ln(4/delta) sum c_s^2) + (eps/2) sum c_s^2 <= 1/2`` and
      ``sum c_s <= 1/4`` with ``c_s = (3 * 2^(N_s+1) + 1)/(16 n)``, i.e. the filter
      at ``(eps/2, delta/2)`` with ``delta' = delta'' = delta/4`` and
      ``eps_s = eps c_s``. The paper's ``eps c_s`` uses ``e^x - 1 <= 2x``, valid
      for ``eps <~ 13``; above that the exact amplified ``eps_s`` is used
      (``max`` of both), so the rule is valid for every epsilon.
    * ``filter_bound="amplified"``: the exact amplified ``eps_s`` (about half of
      ``eps c_s``, so about four times as many steps) and the filter at
      ``(eps - eps_max, delta - delta_max)`` with ``(eps_max, delta_max)`` the
      parameters of the largest batch: the spend is then exactly
      ``(epsilon, delta)``.

    The steps before the last satisfy the filter, hence are ``(eps_F, delta_F)``-DP;
    the last step (run because the filter held before it) is at most
    ``(eps_max, delta_max)``-DP; adaptive composition gives the reported events.
    Stopping at a public ``max_steps`` before the filter trips reports only the
    filter's part.

    Boosting (Alg. 7, ``boosting_runs = K > 0``): K independent runs at
    ``(eps/(K+1), delta/(K+1))`` each, then report-noisy-min over the clipped
    empirical loss ``(1/n) sum_i min(l_i(theta_k), loss_bound)``, whose
    replace-one sensitivity is ``loss_bound / n``. The scores move in arbitrary
    directions between neighbours, so the Laplace scale is
    ``2 loss_bound (K+1) / (n eps)`` (twice the paper's ``lambda``, which is only
    valid for monotone scores), which is ``eps/(K+1)``-DP.

    Parameters
    ----------
    X, y, loss, l2, l1, max_row_norm, sparsity, derivative_clip, radius,
    epsilon, delta, fit_intercept, rng, verbose
        As in :func:`sgd`.
    learning_rate : float, optional
        ``None``: the paper's ``eta = D / (nu sqrt(tau))`` (Thm. 6.7), with ``tau``
        the expected number of steps the filter allows and ``nu^2`` a bound on
        the oracle's second moment, both computed from the public noise levels
        (the paper's ``nu^2 ~ L^2 ln(n) sqrt(s ln(d/s) ln(1/delta)) / eps`` hides
        constants and assumes ``d >~ n eps sqrt(s ln(d/s) / ln(1/delta))``),
        and ``D = 2 radius`` (``radius`` 1 when not given).
    max_steps : int, optional
        Public cap on the number of steps.
    filter_bound : {"paper", "amplified"}
    gradient_estimator : {"projection", "gaussian"}
    boosting_runs : int, default=0
    loss_bound : float, default=1
        Clip of the per-example loss in the boosting selection.

    Returns
    -------
    coef, intercept, n_steps, events, n_gradient_evaluations
        ``n_steps`` counts the steps of all runs.
    """
    P, epsilon, delta = _prepare(X, y, loss, l2=l2, l1=l1, max_row_norm=max_row_norm,
                                 sparsity=sparsity, derivative_clip=derivative_clip,
                                 fit_intercept=fit_intercept, epsilon=epsilon, delta=delta)
    rng = check_generator(rng)
    radius = _check_positive("radius", radius, allow_none=True)
    max_steps = _check_int("max_steps", max_steps, 1)
    if filter_bound not in ("paper", "amplified"):
        raise ValueError(f"filter_bound must be 'paper' or 'amplified', got {filter_bound!r}")
    if gradient_estimator not in ("projection", "gaussian"):
        raise ValueError(
            f"gradient_estimator must be 'projection' or 'gaussian', got {gradient_estimator!r}"
        )
    runs = _check_int("boosting_runs", boosting_runs, 0, allow_none=False)
    loss_bound = _check_positive("loss_bound", loss_bound)
    private = math.isfinite(epsilon)
    if not private and max_steps is None:
        raise ValueError("with epsilon=np.inf there is no privacy filter: give max_steps")
    if learning_rate is not None:
        learning_rate = _check_positive("learning_rate", learning_rate)

    def run(eps_k, delta_k, tag):
        if private:
            return _one_bias_reduced_run(P, eps_k, delta_k, eta=learning_rate, radius=radius,
                                         filter_bound=filter_bound,
                                         estimator=gradient_estimator, max_steps=max_steps,
                                         rng=rng, verbose=verbose, tag=tag)
        theta = np.zeros(P.p)
        avg = theta.copy()
        probs = _tgeom_probs(max(int(math.floor(math.log2(P.n))) - 1, 0))
        eta = learning_rate or _bias_reduced_eta(P, probs, 0.0, gradient_estimator, radius,
                                                 float(max_steps))
        n_grad = 0
        for t in range(1, max_steps + 1):
            N = int(rng.choice(probs.size, p=probs))
            G, used = _bias_reduced_gradient(P, theta, N, probs, 0.0, rng, gradient_estimator)
            n_grad += used
            theta = _penalised_step(P, theta, G, eta, radius)
            avg += (theta - avg) / (t + 1)
        return avg, max_steps, _non_private_events(), n_grad

    if runs == 0:
        theta, steps, events, n_grad = run(epsilon, delta, "bias_reduced_sgd")
        coef, intercept = _split(P, theta)
        return coef, intercept, steps, events, n_grad

    share_eps, share_delta = epsilon / (runs + 1), delta / (runs + 1)
    candidates, events, total_steps, total_grad = [], [], 0, 0
    for k in range(runs):
        theta, steps, ev, n_grad = run(share_eps, share_delta, f"bias_reduced_sgd run {k + 1}")
        candidates.append(theta)
        events.extend(ev)
        total_steps += steps
        total_grad += n_grad
    scores = np.array([_clipped_loss(P, th, loss_bound) for th in candidates])
    if private:
        scale = 2.0 * loss_bound / (P.n * share_eps)
        scores = scores + rng.laplace(0.0, scale, size=runs)
        events.append(PrivacyEvent.pure(share_eps, name="report-noisy-min (laplace)"))
    best = int(np.argmin(scores))
    coef, intercept = _split(P, candidates[best])
    return coef, intercept, total_steps, events, total_grad


def _clipped_loss(P, theta, bound):
    w = theta[: P.d]
    b = theta[P.d] if P.fi else 0.0
    z = np.asarray(P.X @ w).ravel() + b
    return float(np.mean(np.minimum(P.loss.value(P.y, z), bound)))


# --------------------------------------------------------------------------
# 3. Sparsity-preserving DP-SGD (DP-AdaFEST)
# --------------------------------------------------------------------------
def sparse_sgd(X, y, loss, *, l2=0.0, l1=0.0, max_row_norm=1.0, derivative_clip=None,
               epsilon=1.0, delta=1e-6, n_steps=None, batch_size=None, selection_share=0.5,
               threshold=None, contribution_bound=1.0, learning_rate=None, average=True,
               fit_intercept=True, rng=None, verbose=0, _trace=None):
    """Sparsity-preserving DP-SGD (DP-AdaFEST) for one-hot / embedding-like features.

    Each step (Poisson batch of rate ``q = batch_size / n``):

    1. every example's binary map of activated (non-zero) features, scaled to
       l2 norm ``<= C_c = contribution_bound``, is summed over the batch and
       Gaussian noise ``z_c C_c`` is added to the count of **every** feature;
       the features whose noisy count exceeds ``threshold`` are selected;
    2. the clipped per-example gradients are summed and Gaussian noise
       ``z_g C2`` is added on the selected coordinates and the intercept;
    3. a proximal step updates the selected coordinates only.

    Cost per step: O(batch non-zeros + selected), never O(d). The noisy counts
    of the features absent from the batch are never materialised: their count
    is exactly 0, so each passes the threshold independently with probability
    ``p0 = P(N(0, (z_c C_c)^2) > threshold)``; the kernel draws how many pass,
    ``Binomial(d - k, p0)``, and which, a uniform subset of that size, which is
    the same distribution as thresholding d - k noisy zeros. (Adding noise only
    to the features present in the batch would not be private: the candidate
    set itself would reveal which features an example has.) The gradient noise
    of unselected coordinates is likewise never drawn: the release is a
    post-processing of the release with noise on all d coordinates. The l2 and
    l1 penalties act on untouched coordinates lazily, in closed form, so the
    iterates (and their average) equal those of the dense algorithm.

    Privacy (replace-one): per step, the pair (noisy counts, noisy gradient
    sums) is one Gaussian mechanism on the concatenated vector with per-example
    blocks of l2 norm ``<= C_c`` and ``<= C2``; scaled by the noise, it is a
    sum with noise multiplier ``z = (z_c^-2 + z_g^-2)^(-1/2)``, Poisson-subsampled:
    each step is accounted by :func:`~skdp_sparse.privacy.subsampling.poisson_gaussian_rdp`
    (both mechanisms, with amplification), and ``z`` is calibrated so the
    ``T`` steps compose to ``(epsilon, delta)``. ``selection_share`` is the share
    of ``1/z^2`` spent on the counts: ``z_c = z / sqrt(share)``,
    ``z_g = z / sqrt(1 - share)``.

    Parameters
    ----------
    X : sparse matrix of shape (n, d); dense input is converted to CSR
    y, loss, l2, l1, max_row_norm, derivative_clip, epsilon, delta, fit_intercept,
    rng, verbose
        As in :func:`sgd`.
    n_steps : int, optional
        ``None``: two passes, ``ceil(2 n / batch_size)`` steps (at least 10).
    batch_size : int, optional
        Expected batch size; ``None``: the larger of ``sqrt(d ln(1/delta))`` (the
        batch of DP-SGD's oracle-complexity analysis, Menart & Nikolov, Alg. 3)
        and ``n / 100``: the noisy counts need batches large enough for the
        frequent features to clear the threshold.
    selection_share : float in (0, 1), default=0.5
    threshold : float, optional
        ``None``: ``z_c C_c Phi^{-1}(1 - 1/d)``: one absent feature passes per
        step on average, whatever d.
    contribution_bound : float, default=1
    learning_rate : float, optional
        ``None``: ``1 / beta``.
    average : bool, default=True

    Returns
    -------
    coef, intercept, n_steps, events, n_gradient_evaluations
    """
    if not sp.issparse(X):
        X = sp.csr_matrix(np.asarray(X, dtype=np.float64))
    P, epsilon, delta = _prepare(X, y, loss, l2=l2, l1=l1, max_row_norm=max_row_norm,
                                 sparsity=None, derivative_clip=derivative_clip,
                                 fit_intercept=fit_intercept, epsilon=epsilon, delta=delta)
    rng = check_generator(rng)
    private = math.isfinite(epsilon)
    share = float(selection_share)
    if not (0 < share < 1):
        raise ValueError(f"selection_share must be in (0, 1), got {selection_share!r}")
    c_count = _check_positive("contribution_bound", contribution_bound)
    batch = _check_int("batch_size", batch_size, 1)
    if batch is None:
        log_inv = math.log(1 / delta) if delta > 0 else 1.0
        batch = max(int(round(math.sqrt(P.d * log_inv))), math.ceil(P.n / 100))
    batch = int(min(max(batch, 1), P.n))
    q = batch / P.n
    n_steps = _check_int("n_steps", n_steps, 1)
    if n_steps is None:
        n_steps = max(10, math.ceil(2 * P.n / batch))
    eta = _check_positive("learning_rate", learning_rate, allow_none=True) or 1.0 / P.beta
    if eta * P.l2 >= 1:
        raise ValueError("learning_rate * l2 must be < 1")

    def events_for(z, count=n_steps):
        return [subsampled_gaussian_event(
            z, q, count, sampling="poisson",
            name="noisy feature counts + noisy sparse gradient (joint)")]

    if private:
        z = _subsampled_multiplier(q, n_steps, "poisson", epsilon, delta)
        events = events_for(z)
        count_sigma = z / math.sqrt(share) * c_count
        grad_sigma = z / math.sqrt(1 - share) * P.c2
    else:
        z = 0.0
        events = _non_private_events()
        count_sigma = grad_sigma = 0.0
    if threshold is None:
        threshold = count_sigma * float(norm.isf(1.0 / P.d)) if count_sigma > 0 else 0.0
    else:
        threshold = float(threshold)
        if not math.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold!r}")
    if count_sigma > 0:
        p_zero = float(norm.sf(threshold / count_sigma))
    else:
        p_zero = 1.0 if threshold < 0 else 0.0

    Xc = P.X
    w = np.zeros(P.d)
    wsum = np.zeros(P.d)
    last = np.zeros(P.d, dtype=np.int64)
    counts = np.zeros(P.d)
    grads = np.zeros(P.d)
    marks = np.zeros(P.d, dtype=np.uint8)
    intercept = np.zeros(2)
    trace_rows, trace_cols = _trace if _trace is not None else (0, 1)
    selected_trace = np.zeros((trace_rows, trace_cols), dtype=np.int64)
    ops = np.zeros(n_steps, dtype=np.int64)
    checkpoints = sorted(_checkpoints(n_steps, verbose) | {n_steps})
    t0 = 0
    n_grad = 0
    for t1 in checkpoints:
        n_grad += K.sparse_sgd_steps(
            Xc.data, Xc.indices, Xc.indptr, P.y, P.loss.code, P.loss.param, P.dclip,
            bool(P.fi), q, t0, t1, eta, P.l2, P.l1, count_sigma, grad_sigma, threshold,
            p_zero, c_count, w, wsum, last, counts, grads, marks, intercept, rng,
            selected_trace, ops)
        t0 = t1
        if verbose:
            _report("sparse_sgd", t1, n_steps, events_for(z, t1) if private else [], delta,
                    extra=f"  ops/step={ops[:t1].mean():.0f}")
    K.lazy_finish(n_steps, w, wsum, last, eta, P.l2, P.l1)
    if average:
        coef, b = wsum / n_steps, intercept[1] / n_steps
    else:
        coef, b = w.copy(), intercept[0]
    b = float(b) if P.fi else 0.0
    if _trace is not None:
        return coef, b, n_steps, events, n_grad, {"selected": selected_trace, "ops": ops,
                                                   "threshold": threshold, "p_zero": p_zero}
    return coef, b, n_steps, events, n_grad


# --------------------------------------------------------------------------
# 4. Phased SGD (Menart & Nikolov, Alg. 4)
# --------------------------------------------------------------------------
def phased_sgd_gradient_bound(n_params, delta, alpha, *, diameter=1.0, lipschitz=1.0):
    """``max(B L sqrt(d log(1/delta)) / alpha, (B L / alpha)^2)``: gradient evaluations
    phased SGD needs for excess risk ``alpha`` on smooth losses (Menart & Nikolov, Thm. 4)."""
    bl = diameter * lipschitz
    return max(bl * math.sqrt(n_params * math.log(1 / delta)) / alpha, (bl / alpha) ** 2)


def _with_replacement_rdp(n, n_draws, ratio, cap):
    """RDP curve of a phase: Gaussian output whose sensitivity is ``k * Delta`` (capped).

    ``k ~ Binomial(n_draws, 1/n)`` is how often the replaced example is drawn;
    ``ratio = Delta / sigma``, ``cap = diameter / sigma``. Both outputs are
    mixtures over the same draw sequences of Gaussians whose means differ by
    ``<= min(k Delta, diameter)``, and ``exp((a-1) D_a)`` is jointly convex, so
    ``(a-1) eps(a) <= log sum_k p_k exp(a (a-1) min(k ratio, cap)^2 / 2)``.
    The sum is exact up to the count where the cap binds (or ``_K_MAX``); the
    rest is bounded with the cap and the union bound
    ``P(k > k0) <= C(n_draws, k0+1) n^-(k0+1)``.
    """
    a = RDP_ORDERS[:, None]
    k_cap = math.ceil(cap / ratio) if ratio > 0 else n_draws
    k0 = int(min(n_draws, k_cap, _K_MAX))
    k = np.arange(k0 + 1, dtype=float)[None, :]
    log_pk = (gammaln(n_draws + 1) - gammaln(k + 1) - gammaln(n_draws - k + 1)
              - k * math.log(n) + (n_draws - k) * math.log1p(-1.0 / n))
    shift = np.minimum(k * ratio, cap)
    terms = log_pk + a * (a - 1) * shift**2 / 2
    if n_draws > k0:
        log_tail = (gammaln(n_draws + 1) - gammaln(k0 + 2) - gammaln(n_draws - k0)
                    - (k0 + 1) * math.log(n))
        tail = min(log_tail, 0.0) + RDP_ORDERS * (RDP_ORDERS - 1) * cap**2 / 2
        terms = np.concatenate([terms, tail[:, None]], axis=1)
    cgf = np.maximum(logsumexp(terms, axis=1), 0.0)
    return cgf / (RDP_ORDERS - 1)


_K_MAX = 4096


def phased_sgd(X, y, loss, *, l2=0.0, l1=0.0, max_row_norm=1.0, sparsity=None,
               derivative_clip=None, radius=10.0, epsilon=1.0, delta=1e-6, n_steps=None,
               n_phases=None, target_accuracy=None, learning_rate=None,
               sampling="disjoint", fit_intercept=True, rng=None, verbose=0):
    """Phased SGD for smooth losses (Menart & Nikolov, Alg. 4), near-linear time.

    Phase ``r = 1..R``: run one-pass projected proximal SGD from ``w_{r-1}`` over
    ``T_r = T / 2^r`` examples with step ``eta_r = eta / 4^r``; release the
    average iterate plus ``N(0, sigma_r^2 I)``, which starts the next phase.
    Defaults (their Alg. 4, ``B`` the diameter ``2 radius`` of the domain, ``L``
    the Lipschitz bound ``C2 + l2 radius``, ``p = d + 1``):
    ``alpha = 6 alpha*`` with ``alpha* = B L sqrt(p log(1/delta)) / (n eps)``,
    ``T = max(B L sqrt(p log(n/delta)) / alpha, (B L / alpha)^2)``,
    ``eta = (B/L) min(1/sqrt(p log(n/delta)), alpha/(B L))``,
    ``R = ceil(log2(B L / alpha) / 2)``; the gradient evaluations are ``sum T_r < T``.

    Sensitivity (replace-one). Each step ``theta <- Pi(prox(theta - eta_r
    (grad_i + l2 w)))`` is non-expansive when the per-example loss is convex and
    ``beta``-smooth and ``eta_r <= 2 / beta`` (the clipped derivative keeps both
    properties; ``eta`` is capped to ensure it), and a step on the replaced
    example moves the two runs apart by at most ``2 eta_r C2``. If the example
    is used ``k`` times in a phase, the two averages differ by at most
    ``min(2 eta_r C2 k, B)``. ``sigma_r = s * 2 eta_r C2`` with ``s`` calibrated
    (:func:`~skdp_sparse.privacy.accounting.calibrate_scale`) so the whole run
    is exactly ``(epsilon, delta)``-DP:

    * ``sampling="disjoint"`` (default; the single-pass phased SGD of Feldman,
      Koren & Talwar 2020): the phases take consecutive blocks of one random
      permutation, so ``T <= n`` and each example is used at most once. The
      phase holding the replaced example is a Gaussian mechanism of ratio
      ``1/s`` and the other phases are post-processing of it (their data are
      the same on both sides): the run is ``(1/s)``-GDP.
    * ``sampling="with_replacement"`` (the paper's Alg. 4, any ``T``): ``k ~
      Binomial(T_r, 1/n)``; each phase is accounted by the RDP bound of
      :func:`_with_replacement_rdp` (joint convexity over ``k``) and the phases
      compose in RDP. This replaces the paper's Lemma 6, an (eps, delta)
      amplification stated for eps <= 1, by an exact accounting.

    Parameters
    ----------
    X, y, loss, l2, l1, max_row_norm, sparsity, derivative_clip, epsilon, delta,
    fit_intercept, rng, verbose
        As in :func:`sgd`; ``loss`` must be smooth.
    radius : float, default=10
        Public radius of the domain (l2 ball of ``theta = (w, b)``).
    n_steps : int, optional
        Total gradient budget ``T``.
    n_phases : int, optional
    target_accuracy : float, optional
        ``alpha``; the default is ``6 alpha*``.
    learning_rate : float, optional
        ``eta`` (phase r uses ``eta / 4^r``), capped at ``8 / beta``.
    sampling : {"disjoint", "with_replacement"}

    Returns
    -------
    coef, intercept, n_steps, events, n_gradient_evaluations
        ``n_steps`` is the number of SGD steps, equal to the gradient evaluations.
    """
    P, epsilon, delta = _prepare(X, y, loss, l2=l2, l1=l1, max_row_norm=max_row_norm,
                                 sparsity=sparsity, derivative_clip=derivative_clip,
                                 fit_intercept=fit_intercept, epsilon=epsilon, delta=delta)
    rng = check_generator(rng)
    radius = _check_positive("radius", radius)
    if sampling not in ("disjoint", "with_replacement"):
        raise ValueError(
            f"sampling must be 'disjoint' or 'with_replacement', got {sampling!r}"
        )
    private = math.isfinite(epsilon)
    n_steps = _check_int("n_steps", n_steps, 1)
    n_phases = _check_int("n_phases", n_phases, 1)
    diam = 2.0 * radius
    lip = P.c2 + P.l2 * radius
    bl = diam * lip
    log_n_delta = math.log(P.n / delta) if delta > 0 else math.log(P.n)
    if target_accuracy is None:
        eps_ref = epsilon if private else 1.0
        log_inv = math.log(1 / delta) if delta > 0 else 1.0
        alpha = 6.0 * bl * math.sqrt(P.p * log_inv) / (P.n * eps_ref)
    else:
        alpha = _check_positive("target_accuracy", target_accuracy)
    if n_steps is None:
        n_steps = math.ceil(max(bl * math.sqrt(P.p * log_n_delta) / alpha, (bl / alpha) ** 2))
        n_steps = int(min(n_steps, 10**8))
    if n_phases is None:
        n_phases = max(1, math.ceil(0.5 * math.log2(max(bl / alpha, 2.0))))
    if learning_rate is None:
        eta = (diam / lip) * min(1.0 / math.sqrt(P.p * log_n_delta), alpha / bl)
    else:
        eta = _check_positive("learning_rate", learning_rate)
    # Non-expansiveness of every step needs eta_1 = eta / 4 <= 2 / beta.
    eta = min(eta, 8.0 / P.beta)
    if sampling == "disjoint":
        n_steps = min(n_steps, P.n)
    steps = [max(1, int(round(n_steps / 2**r))) for r in range(1, n_phases + 1)]
    if sampling == "disjoint":
        # The phases take consecutive blocks of one random permutation; a block may
        # not run past the data.
        steps = [max(0, min(t, P.n - sum(steps[:r]))) for r, t in enumerate(steps)]
    etas = [eta / 4**r for r in range(1, n_phases + 1)]

    def events_for(s, phases=n_phases):
        if sampling == "disjoint":
            # One example sits in one phase: the run is one Gaussian mechanism.
            return [PrivacyEvent.gaussian(1.0 / s, name="phased SGD (disjoint phases)")]
        # ratio Delta_r / sigma_r = 1/s in every phase; cap = B / sigma_r.
        return [PrivacyEvent.from_rdp(
            _with_replacement_rdp(P.n, steps[r], 1.0 / s, diam / (s * 2 * etas[r] * P.c2)),
            name=f"phased SGD phase {r + 1}") for r in range(phases)]

    if private:
        s = calibrate_scale(events_for, epsilon, delta)
        events = events_for(s)
    else:
        s = 0.0
        events = _non_private_events()
    X = P.X
    if P.sparse:
        data, indices, indptr, dense = X.data, X.indices, X.indptr, np.empty((0, 0))
    else:
        data, indices, indptr = np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64)
        dense = X
    theta = np.zeros(P.p)
    total = 0
    perm = rng.permutation(P.n).astype(np.int64) if sampling == "disjoint" else None
    for r in range(n_phases):
        if sampling == "disjoint":
            order = perm[total: total + steps[r]]
        else:
            order = rng.integers(0, P.n, size=steps[r]).astype(np.int64)
        avg = K.single_pass_sgd(data, indices, indptr, dense, P.sparse, order, theta.copy(),
                                P.d, P.y, P.loss.code, P.loss.param, P.dclip, bool(P.fi),
                                etas[r], P.l2, P.l1, radius)
        sigma_r = s * 2.0 * etas[r] * P.c2
        theta = avg + (sigma_r * rng.standard_normal(P.p) if sigma_r > 0 else 0.0)
        total += steps[r]
        if verbose:
            _report("phased_sgd", r + 1, n_phases, events_for(s, r + 1) if private else [],
                    delta, extra=f" (phase; {steps[r]} steps, eta={etas[r]:.3g})")
    coef, intercept = _split(P, theta)
    return coef, intercept, total, events, total
