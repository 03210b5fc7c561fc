"""Sparsity-preserving DP-SGD (DP-AdaFEST, Ghazi et al., "Sparsity-Preserving
Differentially Private Training of Large Embedding Models").

Each step (Poisson batch of rate ``q``): every example's binary map of non-zero
features, scaled to l2 norm ``<= C_c = contribution_bound``, is summed and Gaussian
noise ``z_c C_c`` is added to the count of every feature; the features whose noisy
count exceeds ``threshold`` are selected; the clipped per-example gradients are
summed with Gaussian noise ``z_g C2`` on the selected coordinates and the intercept
only; a proximal step updates the selected coordinates. Cost per step: O(batch
non-zeros + selected), never O(d): absent features are selected exactly in
distribution without being touched, and penalties act lazily in closed form.

Privacy (replace-one): per step, the counts and the gradient sums are one Gaussian
mechanism on the concatenated vector with noise multiplier
``z = (z_c^-2 + z_g^-2)^(-1/2)``, Poisson-subsampled, accounted by its privacy loss
distribution (``doc/proofs/pld.rst``) and calibrated so the ``T`` steps of the ``K``
one-vs-rest problems together compose to ``(epsilon, delta)``; ``selection_share`` is
the share of ``1/z^2`` spent on the counts.

With ``floating_point_safe`` (the default) every step is exact: each example's count
and gradient terms are rounded towards zero to integer keys on lattices fixed from
public values, summed exactly, and receive exact discrete Gaussian noise; the absent
features are selected by the exceedance process of that noise at the integer
threshold. The step is accounted as
:func:`~skdp_sparse.privacy.subsampling.subsampled_gaussian_event` states (the
continuous mechanism at multiplier ``z / ((1 + 2^-16)(1 + 2^-20))`` for the privacy
loss distribution, ``z / (1 + 2^-16)`` for the RDP curves). Details:
``doc/proofs/sparse_sgd.rst``.

DP-FEST (``frequent_features``): the features are fixed for the whole run, either a
public list of columns, or the ``k`` of largest noisy count (:func:`frequency_counts`
over all rows, one Gaussian release at the share ``feature_selection_share``, default
:data:`FREQUENT_FEATURES_SHARE`, of the budget; replace-one sensitivity ``sqrt(2) C_c``);
the steps are then those of :class:`~skdp_sparse.solvers.sgd.NoisySGD` on those
coordinates (noise on them and the intercept only), calibrated so that the release and
the steps compose to ``(epsilon, delta)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp
from scipy.stats import norm

from ..optim import _sgd_kernels as K
from ..optim import _sgd_selection as S
from ..privacy.accounting import calibrate_scale
from ..privacy.discrete import (
    HANDOFF_SLOTS,
    SENSITIVITY_SLACK,
    ExceedancePlan,
    NoiseBuffer,
    kernel_source,
    plan_exceedance,
    plan_gaussian,
)
from ..privacy.subsampling import subsampled_gaussian_event, subsampled_noise_multiplier
from ..utils.validation import Bound, Interval, validate_params
from ._base import Plan, SolverResult, non_private_events
from ._frequent_features import (
    FREQUENT_FEATURES_SHARE,
    FixedFeaturesPlan,
    _frequent_columns,
    frequency_counts,
    release_frequent_features,
)
from ._gradient import GradientBounds, GradientSolver, checkpoints, gradient_bounds, report
from ._screening import noise_units
from .sgd import NoisySGD
from .sgd import _step_events as _sgd_step_events

__all__ = ["FREQUENT_FEATURES_SHARE", "SparseSGD", "default_threshold_tail",
           "frequency_counts", "release_frequent_features"]

_OPTIONS = {
    "max_iter": [Interval(numbers.Integral, 1, None), None],
    "batch_size": [Interval(numbers.Integral, 1, None), None],
    "learning_rate": [Interval(numbers.Real, 0, None, closed="neither"), None],
    "selection_share": [Interval(numbers.Real, 0, 1, closed="neither")],
    "threshold": [Interval(numbers.Real, None, None), None],
    "contribution_bound": [Bound()],
    "average": ["boolean"],
    "floating_point_safe": ["boolean"],
    "frequent_features": [Interval(numbers.Integral, 1, None), "array-like", None],
    "feature_selection_share": [Interval(numbers.Real, 0, 1, closed="neither"), None],
}


@dataclass(frozen=True, eq=False)
class SafeSelection:
    """The lattices and the integer threshold of the floating-point-safe path.

    Counts and gradient sums live on ``gamma = 2^k`` lattices (``count_k``, ``grad_k``);
    their discrete Gaussian noise has scale ``count_scale`` and ``grad_scale`` lattice
    units (``sigma / gamma``, exact rationals; the samplers use ``s^2`` rounded up). A
    feature is selected when its count key plus noise exceeds ``u``; ``mode`` is one of
    the kernel's ``SELECT_*``; absent features go through ``process``, the exceedance
    process of the noise above ``u0 <= u`` (values compared with ``u`` when ``u0 < u``),
    present features with a count key at most ``light`` through ``light_process``, that
    of the noise above ``u - light`` (``light = -1``: none).
    """

    count_k: int
    grad_k: int
    count_scale: Fraction
    grad_scale: Fraction
    mode: int
    u: int = 0
    u0: int = 0
    process: ExceedancePlan | None = None
    light: int = -1
    light_process: ExceedancePlan | None = None

    def kernel_arrays(self):
        """``lat`` (mode, u, u0, with values, light) and ``keys`` ((1 - 2^-50) / gamma of
        the counts and of the gradients, then the gradient lattice step)."""
        lat = np.array([self.mode, self.u, self.u0, int(self.u0 < self.u), self.light],
                       dtype=np.int64)
        shrink = 1.0 - 2.0**-50
        keys = np.array([math.ldexp(shrink, -self.count_k), math.ldexp(shrink, -self.grad_k),
                         math.ldexp(1.0, self.grad_k)])
        return lat, keys


# The process of the present features starts this many count noise scales below the
# threshold: a candidate rate of 2.3%, and only counts above the threshold minus two noise
# scales draw their own noise.
_LIGHT_TAIL = 2.0


def float_error(n_features):
    """Relative bound on how far an example's gradient, computed from rows clipped in
    floating point, can exceed ``C2``: ``(d + 16) 2^-52``.

    A clipped row's norm is a sum of at most d squares rounded at each addition, a
    square root and a division (the summation bound ``gamma_m = m u / (1 - m u)``, ``u =
    2^-53``), and ``C2 = G sqrt(L^2 + 1)`` is itself rounded twice; ``(d + 16) 2^-52``
    covers all of it for ``d < 2^40``.
    """
    return Fraction(int(n_features) + 16, 1 << 52)


def _lattice_exponent(bound, sigma, n):
    """``k`` of the lattice ``2^k`` of sums of ``n`` per-example terms of l2 norm
    ``<= bound``: that of :func:`plan_gaussian` for one coordinate (``2^k <= 2^-30 sigma``
    and ``<= 2^-16 bound``), coarsened until ``n bound / 2^k <= 2^52``, so every key sum
    is an exact integer below 2^52 (the range of ``lattice_release``)."""
    k = plan_gaussian(float(bound), float(sigma), 1).k
    while Fraction(n) * Fraction(bound) > Fraction(2) ** (52 + k):
        k += 1
    # A lattice coarser than 2^-12 noise scales would turn the truncation of the keys
    # into a bias comparable with the noise.
    if Fraction(sigma) < Fraction(2) ** (k + 12):
        raise ValueError(
            "floating_point_safe=True needs the noise above 2^-40 n times the per-example "
            "bound (n too large for this noise); use floating_point_safe=False")
    return k


def default_threshold_tail(batch_size, d):
    """``Phi^-1(1 - min(1, B / d))``: the default threshold in count noise scales, so that
    ``B = batch_size`` absent features pass per step on average (``-inf``, every feature
    selected, when ``B >= d``).

    The noisy step then touches about as many absent coordinates as its batch has rows,
    so its cost stays O(batch non-zeros), while the threshold sits as low as that cost
    allows: a feature whose clipped batch count is ``c`` is selected with probability
    ``Phi(c / (z_c C_c) - tail)``, and a feature that every step would miss gets no
    update at all. ``d / B`` is also about how many times fewer coordinates are noised
    than by dense DP-SGD with the same batches.
    """
    if batch_size >= d:
        return -math.inf
    return float(norm.isf(batch_size / d))


@functools.lru_cache(maxsize=64)
def plan_safe_selection(n, d, z, c_count, count_sigma, grad_bound, grad_sigma, threshold,
                        batch_size=1):
    """The :class:`SafeSelection` of a private run, from public values only (cached:
    repeated fits of one configuration share it).

    Checks in exact arithmetic that an example's contribution, in noise units, is at most
    ``(1 + 2^-16) / z`` (what the accounting at ``z / (1 + 2^-16)`` assumes): its count
    keys move by at most ``C_c / gamma_c`` in l2 and its gradient keys by at most ``(1 +
    float_error(d)) C2 / gamma_g``, against noise of ``s >= sigma / gamma``.
    """
    slack = 1 + float_error(d)
    shift = (Fraction(c_count) / Fraction(count_sigma)) ** 2 \
        + (slack * Fraction(grad_bound) / Fraction(grad_sigma)) ** 2
    if shift > ((1 + Fraction(SENSITIVITY_SLACK)) / Fraction(z)) ** 2:
        raise ValueError("n_features is too large for floating_point_safe=True")
    count_k = _lattice_exponent(c_count, count_sigma, n)
    grad_k = _lattice_exponent(slack * Fraction(grad_bound), grad_sigma, n)
    count_scale = Fraction(count_sigma) / Fraction(2) ** count_k
    grad_scale = Fraction(grad_sigma) / Fraction(2) ** grad_k
    # Where the exceedance process of the absent features starts: one candidate per
    # step on average, so a high threshold costs no more than that.
    start_tail = float(norm.isf(1.0 / d))
    default = max(0, round(float(count_scale) * start_tail)) if math.isfinite(start_tail) \
        else 0
    if threshold is None:
        tail = default_threshold_tail(batch_size, d)
        threshold = (round(float(count_scale) * tail) * math.ldexp(1.0, count_k)
                     if math.isfinite(tail) else -math.inf)
    lattices = (count_k, grad_k, count_scale, grad_scale)
    if math.isinf(threshold):
        return SafeSelection(*lattices, S.SELECT_ALL if threshold < 0 else S.SELECT_NONE)
    # A noisy integer count c + Z exceeds threshold iff it exceeds floor(threshold / gamma).
    u = math.floor(Fraction(threshold) / Fraction(2) ** count_k)
    if abs(u) >= 1 << 61:
        raise ValueError("floating_point_safe=True needs a threshold within 2^30 count "
                         "noise scales")
    if u < 0:
        return SafeSelection(*lattices, S.SELECT_DRAW, u, u)
    u0 = min(u, default)
    process = plan_exceedance("gaussian", count_scale, u0)
    # Present features whose count is at most u - v pass only if their noise exceeds v:
    # one process over them replaces most draws when counts are small against the noise.
    v = min(u, round(_LIGHT_TAIL * float(count_scale)))
    if u - v <= 0:
        return SafeSelection(*lattices, S.SELECT_PROCESS, u, u0, process)
    return SafeSelection(*lattices, S.SELECT_PROCESS, u, u0, process, u - v,
                         plan_exceedance("gaussian", count_scale, v))


def _selection_probability(safe):
    """``P(Z > u)``, the chance that an absent feature is selected (float, for reports)."""
    if safe.mode in (S.SELECT_ALL, S.SELECT_NONE):
        return float(safe.mode == S.SELECT_ALL)
    if safe.process is not None and safe.u0 == safe.u:
        return safe.process.probability
    return float(norm.sf((safe.u + 0.5) / float(safe.count_scale)))


@dataclass(frozen=True, kw_only=True, eq=False)
class SparseSGDPlan(Plan):
    bounds: GradientBounds
    sampling_rate: float
    noise_multiplier: float
    count_sigma: float
    grad_sigma: float
    threshold: float
    p_zero: float
    contribution_bound: float
    learning_rate: float
    average: bool
    floating_point_safe: bool
    safe: SafeSelection | None
    verbose: int

    def step_events(self, count):
        """The privacy events of ``count`` steps of one problem."""
        return _step_events(self.noise_multiplier, self.sampling_rate, count,
                            self.floating_point_safe)


def _step_events(z, q, count, floating_point_safe):
    return [subsampled_gaussian_event(z, q, count, sampling="poisson",
                                      name="noisy feature counts + noisy sparse gradient "
                                           "(joint)",
                                      floating_point_safe=floating_point_safe)]


class SparseSGD(GradientSolver):
    """DP-AdaFEST (see the module docstring).

    Options: ``batch_size`` (default ``max(sqrt(d ln(1/delta)), n / 100)``: the batch
    of DP-SGD's oracle-complexity analysis, large enough for frequent features to
    clear the threshold), ``max_iter`` (default two passes, at least 10 steps),
    ``selection_share`` (0.5: the counts' signal-to-noise ratio scales as
    ``sqrt(share)`` and the gradients' as ``sqrt(1 - share)``, and 0.5 maximises their
    product), ``threshold`` (default ``z_c C_c Phi^-1(1 - min(1, B / d))`` with ``B``
    the batch size, :func:`default_threshold_tail`: ``B`` absent features pass per step
    on average, so the step stays O(batch non-zeros) and noises about ``d / B`` times
    fewer coordinates than dense DP-SGD; ``-inf``, every feature, when ``B >= d``; on
    the safe path that rule in lattice units, and a given threshold is rounded down to
    the lattice), ``contribution_bound`` (``C_c = 1``; the counts and their noise scale
    together, so it only matters through rows with fewer than ``C_c^2`` non-zeros,
    whose features count fully),
    ``learning_rate`` (``1 / beta``), ``average``, ``floating_point_safe`` (True),
    ``frequent_features`` (None; DP-FEST, see the module docstring) and
    ``feature_selection_share`` (its count release's share).
    """

    name = "sparse_sgd"
    reads = frozenset({"max_iter", "batch_size", "learning_rate", "threshold",
                       "selection_share", "contribution_bound", "feature_selection_share",
                       "frequent_features", "verbose"})
    use_sparsity = False

    def plan_with(self, problem, shape, epsilon, delta, options, bounds):
        options = {"selection_share": 0.5, "threshold": None, "contribution_bound": 1.0,
                   "average": True, "floating_point_safe": True, "frequent_features": None,
                   "feature_selection_share": None, **options}
        validate_params(_OPTIONS, options, f"solver {self.name!r}")
        n, d, n_targets = shape
        # The default batch reads one problem's share of delta; the noise is calibrated
        # for the K problems together.
        delta_k = delta / n_targets
        private = math.isfinite(epsilon)
        fp_safe = bool(options["floating_point_safe"]) and private
        share = float(options["selection_share"])
        c_count = float(options["contribution_bound"])
        batch = options["batch_size"]
        if batch is None:
            log_inv = math.log(1 / delta_k) if delta_k > 0 else 1.0
            batch = max(int(round(math.sqrt(d * log_inv))), math.ceil(n / 100))
        batch = int(min(max(batch, 1), n))
        q = batch / n
        n_steps = options["max_iter"]
        if n_steps is None:
            n_steps = max(10, math.ceil(2 * n / batch))
        eta = options["learning_rate"] or 1.0 / bounds.smoothness
        if eta * bounds.l2 >= 1:
            raise ValueError("learning_rate * l2 must be < 1")
        if options["frequent_features"] is not None:
            return self._plan_fixed(problem, shape, epsilon, delta, options, batch, n_steps,
                                    eta)
        if private:
            z = subsampled_noise_multiplier(q, n_steps * n_targets, "poisson", epsilon, delta,
                                            fp_safe)
            count_sigma = z / math.sqrt(share) * c_count
            grad_sigma = z / math.sqrt(1 - share) * bounds.grad_l2
        else:
            z = count_sigma = grad_sigma = 0.0
        threshold = options["threshold"]
        safe = None
        if fp_safe:
            safe = plan_safe_selection(n, d, z, c_count, count_sigma, bounds.grad_l2,
                                       grad_sigma, threshold, batch)
            threshold = (math.ldexp(safe.u, safe.count_k) if safe.mode in
                         (S.SELECT_PROCESS, S.SELECT_DRAW) else
                         -math.inf if safe.mode == S.SELECT_ALL else math.inf)
            p_zero = _selection_probability(safe)
        else:
            if threshold is None:
                threshold = (count_sigma * default_threshold_tail(batch, d)
                             if count_sigma > 0 else 0.0)
            threshold = float(threshold)
            if count_sigma > 0:
                p_zero = float(norm.sf(threshold / count_sigma))
            else:
                p_zero = 1.0 if threshold < 0 else 0.0
        events = (_step_events(z, q, n_steps, fp_safe) if private
                  else list(non_private_events()))
        return SparseSGDPlan(
            solver=self.name, n_samples=n, n_features=d, n_targets=n_targets,
            epsilon=epsilon, delta=delta, events=tuple(events) * n_targets, n_iter=n_steps,
            options=options,
            bounds=bounds, sampling_rate=q, noise_multiplier=z, count_sigma=count_sigma,
            grad_sigma=grad_sigma, threshold=threshold, p_zero=p_zero,
            contribution_bound=c_count, learning_rate=eta, average=bool(options["average"]),
            floating_point_safe=fp_safe, safe=safe, verbose=int(options.get("verbose", 0)),
        )

    def _plan_fixed(self, problem, shape, epsilon, delta, options, batch, n_steps, eta):
        """DP-FEST's plan: the steps of dense DP-SGD on the fixed features (noise on
        those ``k`` coordinates and the intercept), after, for a private top-k, one
        release of the feature counts at its share of the budget; the steps' noise is
        calibrated so that everything composes to ``(epsilon, delta)``."""
        n, d, n_targets = shape
        columns, k = _frequent_columns(options["frequent_features"], d)
        safe = bool(options["floating_point_safe"])
        inner_options = {"max_iter": n_steps, "batch_size": batch, "learning_rate": eta,
                         "sampling": "poisson", "gradient_estimator": "gaussian",
                         "average": bool(options["average"]), "floating_point_safe": safe,
                         "feature_selection": "none", "verbose": options.get("verbose", 0)}
        sgd = NoisySGD()
        sub = gradient_bounds(problem, k, private=math.isfinite(epsilon), use_sparsity=False)
        inner = sgd.plan_with(problem, (n, k, n_targets), epsilon, delta, inner_options, sub)
        count_unit = 0.0
        if columns is None and inner.private:
            share = options["feature_selection_share"] or FREQUENT_FEATURES_SHARE
            (count_unit,), count_events = noise_units(
                epsilon, delta, [share], safe, ["sparse_sgd: noisy feature counts (top-k)"])

            def steps(z):
                return _sgd_step_events(z, inner.sampling_rate, inner.sampling, inner.n_iter,
                                        safe) * n_targets

            z = calibrate_scale(lambda z: count_events + steps(z), epsilon, delta)
            inner = dataclasses.replace(inner, noise_multiplier=z,
                                        events=tuple(count_events) + tuple(steps(z)))
        return FixedFeaturesPlan(
            solver=self.name, n_samples=n, n_features=d, n_targets=n_targets,
            epsilon=epsilon, delta=delta, events=inner.events, n_iter=inner.n_iter,
            options=options, inner=inner, columns=columns, k=k, count_unit=count_unit,
            contribution_bound=float(options["contribution_bound"]),
            floating_point_safe=safe)

    def _solve_fixed(self, problem, data, plan, rng):
        columns, info = plan.columns, {}
        if columns is None:
            columns, noisy = release_frequent_features(
                data.X, plan.k, plan.contribution_bound, plan.count_unit,
                plan.floating_point_safe, rng)
            info["feature_counts"] = noisy
        result = NoisySGD().solve(problem, data.restricted(columns), plan.inner, rng)
        coef = np.zeros((plan.n_targets, plan.n_features))
        coef[:, columns] = result.coef
        info.update(result.info, frequent_features=columns)
        return SolverResult(coef, result.intercept, plan.n_iter, plan.events, info)

    def input_clipping(self, problem, plan):
        if isinstance(plan, FixedFeaturesPlan):
            # The steps clip the rows restricted to the fixed features, not whole rows.
            return None, math.inf, math.inf
        return super().input_clipping(problem, plan)

    def rows(self, data, plan):
        rows = super().rows(data, plan)
        # The steps walk each row's non-zeros: dense rows are read as CSR.
        return rows if sp.issparse(rows) else sp.csr_matrix(rows)

    def solve(self, problem, data, plan, rng):
        if isinstance(plan, FixedFeaturesPlan):
            return self._solve_fixed(problem, data, plan, rng)
        # ``trace=(rows, cols)`` (an option for tests and benchmarks) records the
        # selected coordinates and the operations of the first steps.
        trace = plan.options.get("trace")
        plan = self.replanned(problem, data, plan, plan.options)
        rows = self.rows(data, plan)
        coefs, intercepts, n_grad, traces = [], [], 0, []
        for k in range(plan.n_targets):
            coef, b, used, tr = self._run(problem, rows, data.target(k), plan, rng, trace, k)
            coefs.append(coef)
            intercepts.append(b)
            n_grad += used
            traces.append(tr)
        info = {"n_gradient_evaluations": n_grad}
        if trace is not None:
            info["trace"] = traces
        return SolverResult(np.array(coefs), np.array(intercepts), plan.n_iter, plan.events,
                            info)

    def _run(self, problem, X, y, plan, rng, trace, k=0):
        bounds, n_steps, d, n = plan.bounds, plan.n_iter, plan.n_features, plan.n_samples
        feat = np.zeros(d, dtype=K.FEATURE_STATE)
        hist = np.zeros(d, dtype=K.FEATURE_HISTORY)
        intercept = np.zeros(3)
        run = _Run(plan, rng, d, n)
        trace_rows, trace_cols = trace if trace is not None else (0, 1)
        selected_trace = np.zeros((trace_rows, trace_cols), dtype=np.int64)
        ops = np.zeros(n_steps, dtype=np.int64)
        for t1 in sorted(checkpoints(n_steps, plan.verbose) | {n_steps}):
            while True:
                with run.src.lock:
                    request = K.sparse_sgd_steps(
                        X.data, X.indices, X.indptr, y, problem.loss.code, problem.loss.param,
                        bounds.derivative_clip, bool(bounds.intercept), plan.sampling_rate,
                        t1, plan.learning_rate, bounds.l2, bounds.l1, plan.count_sigma,
                        plan.grad_sigma, plan.threshold, plan.p_zero, plan.contribution_bound,
                        feat, hist, intercept, run.counts, run.grads, run.batch,
                        run.row_mark, run.touched, run.selected, run.state, rng,
                        selected_trace, ops, run.safe, run.lat, run.keys, run.count_keys,
                        run.grad_keys, run.count_noise.values, run.count_noise.pos,
                        run.grad_noise.values, run.grad_noise.pos, run.process,
                        run.light_process, run.src.next64, run.src.state, run.fb,
                        run.current)
                if request == S.DONE:
                    break
                run.serve(request)
            if plan.verbose:
                report(self.name, t1, n_steps,
                       plan.step_events(k * n_steps + t1) if plan.private else [], plan.delta)
        K.lazy_finish(n_steps, feat, hist, plan.learning_rate, bounds.l2, bounds.l1)
        if plan.average:
            coef, b = hist["total"] / n_steps, intercept[1] / n_steps
        else:
            coef, b = np.array(feat["w"]), intercept[0]
        b = float(b) if bounds.intercept else 0.0
        tr = None
        if trace is not None:
            tr = {"selected": selected_trace, "ops": ops, "threshold": plan.threshold,
                  "p_zero": plan.p_zero}
        return coef, b, int(run.state[S.ST_N_GRAD]), tr


class _Run:
    """The scratch arrays, noise buffers and generator interface of one run, and how the
    kernel's requests are served."""

    def __init__(self, plan, rng, d, n):
        safe = plan.safe
        self.safe = safe is not None
        self.src = kernel_source(rng)
        self.fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)
        self.state = np.zeros(S.STATE_SLOTS, dtype=np.int64)
        self.batch = np.empty(n, dtype=np.int64)
        self.row_mark = np.zeros(n, dtype=np.uint8)
        self.touched = np.empty(min(d, 4096), dtype=np.int64)
        self.selected = np.empty(min(d, 4096), dtype=np.int64)
        # The sums of the touched features, and the coefficients their margins read, in
        # the order of ``touched``; of the sums, only the path's own pair grows.
        self.counts, self.grads = np.zeros(0), np.zeros(0)
        self.count_keys = np.zeros(0, dtype=np.int64)
        self.grad_keys = np.zeros(0, dtype=np.int64)
        self._grow_sums(self.touched.size)
        if self.safe:
            self.lat, self.keys = safe.kernel_arrays()
            # Buffers draw only when a request asks (a fresh buffer is empty), and grow
            # with use, so a short run draws little more than it uses.
            self.count_noise = NoiseBuffer("gaussian", safe.count_scale, rng, 16)
            self.grad_noise = NoiseBuffer("gaussian", safe.grad_scale, rng, 16)
            self._processes = (safe.process, safe.light_process)
        else:
            self.lat, self.keys = np.array([0, 0, 0, 0, -1], dtype=np.int64), np.zeros(3)
            self.count_noise = self.grad_noise = _NoNoise()
            self._processes = (None, None)
        # The kernel's argument types do not depend on the path: an unused plan stands in.
        unused = plan_exceedance("gaussian", 1, 0)
        self.process, self.light_process = ((p or unused).arrays for p in self._processes)

    def serve(self, request):
        need = int(self.state[S.ST_NEED])
        if request == S.GROW_TOUCHED:
            self.touched = _grown(self.touched, need)
            self._grow_sums(self.touched.size)
        elif request == S.GROW_SELECTED:
            self.selected = _grown(self.selected, need)
        elif request in (S.NEED_COUNT_NOISE, S.NEED_GRAD_NOISE):
            buffer = self.count_noise if request == S.NEED_COUNT_NOISE else self.grad_noise
            buffer.refill(max(need, min(2 * buffer.values.size, _MAX_BUFFER)))
        elif request == S.HANDOFF:
            which = int(self.state[S.ST_WHICH])
            with_value = bool(self.lat[3]) or which == 1
            j, z = self._processes[which].finish(self.fb, self.src, int(self.state[S.ST_M]),
                                                 with_value)
            self.state[S.ST_PJ], self.state[S.ST_PZ] = j, z
            self.state[S.ST_PENDING] = 1
        else:
            raise RuntimeError(f"unknown kernel request {request}")

    def _grow_sums(self, size):
        self.current = np.empty(size)
        if self.safe:
            self.count_keys = np.empty(size, dtype=np.int64)
            self.grad_keys = np.empty(size, dtype=np.int64)
        else:
            self.counts, self.grads = np.empty(size), np.empty(size)


_MAX_BUFFER = 1 << 16


class _NoNoise:
    values = np.zeros(0, dtype=np.int64)
    pos = np.zeros(1, dtype=np.int64)


def _grown(arr, need):
    out = np.empty(max(2 * arr.size, need), dtype=arr.dtype)
    out[: arr.size] = arr
    return out
