"""Statistical privacy audits of sparse_sgd, phased_sgd and bias_reduced_sgd.

Each audit runs a short fit many times on a worst-case pair of replace-one
neighbours, reduces every output to a scalar, and turns threshold tests into a
Clopper-Pearson lower bound on epsilon (:func:`epsilon_lower_bound`) at the
claimed delta. The honest solver must stay at or below its claim; a copy whose
calibrated noise is cut must be caught above it, which shows the audit has teeth.

All audits use the claim (epsilon, delta) = (2, 1e-2) at 99% confidence: noise
cut in half moves a Gaussian release from epsilon 2 to 5.1 at that delta, far
enough for 4000 runs a side to separate the two whatever the seeds (in a
simulation over 100 seed sets the bound stayed <= 1.5 for the honest release
and >= 2.28 for the halved one).
"""

import math

import numpy as np
import pytest
import scipy.sparse as sp

import skdp_sparse.solvers.bias_reduced_sgd as bias_reduced_module
import skdp_sparse.solvers.phased_sgd as phased_module
import skdp_sparse.solvers.sparse_sgd as sparse_module
from skdp_sparse import DPSparseLogisticRegression
from skdp_sparse.data import LocalData
from skdp_sparse.optim.losses import SquaredLoss
from skdp_sparse.privacy.accounting import PrivacyEvent, compose, gaussian_mu
from skdp_sparse.privacy.auditing import epsilon_lower_bound
from skdp_sparse.privacy.discrete import SENSITIVITY_SLACK
from skdp_sparse.privacy.mechanisms import GaussianMechanism
from skdp_sparse.privacy.subsampling import subsampled_gaussian_event
from skdp_sparse.solvers._gradient import gradient_bounds, gradient_sum
from skdp_sparse.solvers.bias_reduced_sgd import step_privacy
from skdp_sparse.testing.solver_api import bias_reduced_sgd, make_problem, phased_sgd, sparse_sgd
from skdp_sparse.utils.sparse_vector import SparseVector

CLAIM, DELTA, CONFIDENCE = 2.0, 1e-2, 0.99
# A row at the l2 bound L = 1; with the intercept, its gradient (x, 1) has norm C2 = sqrt(2).
ROW = np.array([0.6, 0.8])
# Targets far beyond the derivative clip 1 of the squared loss: every per-example
# derivative sits at +-1 during the short fits, so replacing the last target's
# sign moves the gradient sum by exactly 2 C2 along (x, 1).
TARGET = 100.0


def _neighbours(n):
    """Targets of S (all +TARGET) and of S' (the last one flipped)."""
    y = np.full(n, TARGET)
    y_prime = y.copy()
    y_prime[-1] = -TARGET
    return y, y_prime


def _projection(coef, intercept):
    # The output's component along the direction (x, 1) in which S and S' differ.
    return float(coef @ ROW + intercept)


def _audit(stat_s, stat_s_prime):
    return epsilon_lower_bound(stat_s, stat_s_prime, delta=DELTA, confidence=CONFIDENCE, rng=0)


def _check(result, undernoised, events=None):
    if events is not None:
        assert compose(events, DELTA)[0] == pytest.approx(CLAIM, rel=1e-6)
    if undernoised:
        assert result.epsilon_lb > CLAIM
    else:
        assert result.epsilon_lb <= CLAIM


def _scaled(monkeypatch, module, name, factor):
    """Replace the calibration ``name`` of a solver module by ``factor`` times its value:
    the noise drops while the claim (the requested epsilon) stays."""
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: factor * real(*a, **k))


# --------------------------------------------------------------------------
# sparse_sgd (DP-AdaFEST). The noisy counts and the noisy gradient sum form one
# Gaussian mechanism, split by selection_share. At CI size neither channel can be
# audited through the other, so each is audited alone with (almost) the whole
# budget: share -> 0 audits the gradient step, share -> 1 the selection step. Both
# noise paths: the floating-point-safe one (exact discrete Gaussian noise on integer
# keys, the absent features by an exceedance process) is the default.
# --------------------------------------------------------------------------
def _sparse_gradient_outputs(y, runs, seed, n_steps, safe):
    X = sp.csr_matrix(np.tile(ROW, (y.size, 1)))
    out = np.empty(runs)
    for i in range(runs):
        coef, b, _, events, _ = sparse_sgd(
            X, y, SquaredLoss(), derivative_clip=1.0, epsilon=CLAIM, delta=DELTA,
            n_steps=n_steps, batch_size=y.size, selection_share=1e-9, threshold=-1e12,
            learning_rate=1.0, average=False, rng=seed + i, floating_point_safe=safe)
        out[i] = _projection(coef, b)
    return out, events


def _sparse_gradient_audit(runs, n_steps, safe):
    # Full batch (no subsampling to amplify), both features selected at every step
    # (threshold far below any noisy count): the last iterate moves by -(sum of the
    # T noisy gradient sums)/n, whose projection on (x, 1) is a Gaussian mechanism
    # of ratio 2 sqrt(T) / z, exactly the accounted one.
    y, y_prime = _neighbours(4)
    s, events = _sparse_gradient_outputs(y, runs, 0, n_steps, safe)
    s_prime, _ = _sparse_gradient_outputs(y_prime, runs, 10**6, n_steps, safe)
    return _audit(s, s_prime), events


@pytest.mark.parametrize("runs, n_steps", [
    (6000, 3),
    pytest.param(20_000, 10, marks=pytest.mark.slow, id="many_steps"),
])
@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
@pytest.mark.parametrize("undernoised", [False, True])
def test_sparse_sgd_gradient_step_audit(undernoised, safe, runs, n_steps, monkeypatch):
    if undernoised:
        _scaled(monkeypatch, sparse_module, "subsampled_noise_multiplier", 0.5)
    result, events = _sparse_gradient_audit(runs=runs, n_steps=n_steps, safe=safe)
    _check(result, undernoised, None if undernoised else events)


def _sparse_selection_outputs(feature, runs, seed, threshold, safe):
    # Rows 0 and 1 hold feature 0; row 2 holds ``feature``. Only the selection is
    # read: a coordinate the step did not select keeps its exact zero.
    rows = [[0], [0], [feature]]
    indptr = np.array([0, 1, 2, 3])
    X = sp.csr_matrix((np.ones(3), np.concatenate(rows), indptr), shape=(3, 6))
    y = np.full(3, TARGET)
    out = np.empty(runs)
    for i in range(runs):
        coef, _, _, events, _ = sparse_sgd(
            X, y, SquaredLoss(), derivative_clip=1.0, epsilon=CLAIM, delta=DELTA, n_steps=1,
            batch_size=3, selection_share=1 - 1e-9, threshold=threshold, learning_rate=1.0,
            average=False, fit_intercept=False, rng=seed + i, floating_point_safe=safe)
        out[i] = float(coef[2] != 0) - float(coef[4] != 0)
    return out, events


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
@pytest.mark.parametrize("undernoised", [False, True])
def test_sparse_sgd_selection_step_audit(undernoised, safe, monkeypatch):
    # The replaced example holds feature 2 in S and feature 4 in S': in each dataset
    # one of the two counts is 1 and the other is 0, so one of them goes through the
    # path of the absent features (Binomial plus a uniform subset on the float path,
    # the exceedance process on the safe one).
    #
    # The undernoised copy has a quarter of the noise, not half: the counts of
    # neighbours differ by at most sqrt(2) C_c (they are non-negative), not the
    # 2 C_c the accounting charges, and only one bit of each count is released.
    # With half the noise the released bits are (2.03, 1e-2)-DP at best, at the
    # claim; with a quarter they are (5.2, 1e-2)-DP. The threshold 1.5 (counts
    # are 0 or 1) is where the quarter-noise copy is caught most surely at this
    # run count.
    if undernoised:
        _scaled(monkeypatch, sparse_module, "subsampled_noise_multiplier", 0.25)
    runs, threshold = 6000, 1.5
    s, events = _sparse_selection_outputs(2, runs, 0, threshold, safe)
    s_prime, _ = _sparse_selection_outputs(4, runs, 10**6, threshold, safe)
    # Both outcomes occur on both sides: the audit reads the selection, not noise.
    assert 0 < np.mean(s == 1) < 1 and 0 < np.mean(s_prime == -1) < 1
    _check(_audit(s, s_prime), undernoised, None if undernoised else events)


# --------------------------------------------------------------------------
# The same channel through DPSparseLogisticRegression's fit (safe path, the default).
# A flipped label moves a logistic derivative by exactly 1 whatever the margin, half
# the 2 G the accounting charges, so no pair reaches the fit's claim; the audit is set
# against the epsilon the fit's own events give for the pair. One full-batch step from 0
# with an l2 penalty moves coefficient j by -eta (noisy gradient sum j) / n, a function
# of the rows holding feature j only: with B blocks of rows, one feature each, one fit
# gives B independent samples of one coordinate's release.
# --------------------------------------------------------------------------
_BLOCKS, _BLOCK_ROWS = 250, 16


def _logistic_blocks(flipped):
    n = _BLOCKS * _BLOCK_ROWS
    X = sp.csr_matrix((np.ones(n), np.repeat(np.arange(_BLOCKS), _BLOCK_ROWS), np.arange(n + 1)),
                      shape=(n, _BLOCKS))
    y = np.ones(n, dtype=int)
    if flipped:
        y[::_BLOCK_ROWS] = 0  # the first row of every block
    return X, y


def _logistic_fit_outputs(flipped, fits, seed, epsilon):
    X, y = _logistic_blocks(flipped)
    out = []
    for i in range(fits):
        model = DPSparseLogisticRegression(
            epsilon=epsilon, delta=DELTA, classes=[0, 1], penalty="l2", solver="sparse_sgd",
            batch_size=X.shape[0], max_iter=1, random_state=seed + i,
            decision="fitted").fit(X, y)
        out.append(model.coef_[0])
    return np.concatenate(out), model


def _pair_epsilon(model):
    """Epsilon of one coordinate's release for a flipped label, from the fit's events.

    The event of one full-batch safe step carries the rho of
    ``discrete_gaussian_event(2, z)``: ``rho = ((1 + 2^-16) 2 / z)^2 / 2`` gives ``z``.
    The gradient noise is ``sigma_g = z C2 / sqrt(1 - share)`` (``share = 1/2``, ``C2 =
    sqrt(L^2 + 1) = sqrt(2)``), and the flip moves the coordinate's integer key sum by at
    most ``1 / gamma`` against noise of ``s >= sigma_g / gamma`` units: a discrete
    Gaussian pair of ratio at most ``1 / sigma_g``. At ``s >= 2^30`` units its (epsilon,
    delta) curve is the continuous Gaussian's to within far less than the audit
    resolves.
    """
    (event,) = model.privacy_events_
    assert event.name == "discrete_gaussian" and event.count == 1
    z = 2 * (1 + SENSITIVITY_SLACK) / math.sqrt(2 * event.rho)
    return compose([PrivacyEvent.gaussian(1 / _gradient_sigma(z))], DELTA)[0]


def _gradient_sigma(z):
    # z C2 / sqrt(1 - share) with C2 = sqrt(2) (unit rows and an intercept), share 1/2.
    return z * math.sqrt(2) / math.sqrt(0.5)


@pytest.mark.parametrize("samples", [
    6000,
    pytest.param(20_000, marks=pytest.mark.slow, id="many_samples"),
])
@pytest.mark.parametrize("undernoised", [False, True])
def test_sparse_logistic_regression_fit_audit(undernoised, samples, monkeypatch):
    # The requested epsilon that puts the honest pair at CLAIM: noise ratio 1 / sigma_g
    # = gaussian_mu(CLAIM, DELTA), so half the noise is the ratio of (5.1, 1e-2).
    z = 1 / (_gradient_sigma(1.0) * gaussian_mu(CLAIM, DELTA))
    # The fit accounts its step as subsampled_gaussian_event does (the Gaussian's PLD
    # at z / ((1 + 2^-16)(1 + 2^-20))): the epsilon that calibrates back to z.
    epsilon = compose([subsampled_gaussian_event(z, 1.0, 1, floating_point_safe=True)],
                      DELTA)[0]
    honest = _logistic_fit_outputs(False, 1, 0, epsilon)[1]
    bound = _pair_epsilon(honest)
    assert bound == pytest.approx(CLAIM, rel=1e-3)
    if undernoised:
        _scaled(monkeypatch, sparse_module, "subsampled_noise_multiplier", 0.5)
    fits = -(-samples // _BLOCKS)
    s, model = _logistic_fit_outputs(False, fits, 0, epsilon)
    s_prime, _ = _logistic_fit_outputs(True, fits, 10**6, epsilon)
    assert model.epsilon_spent_ > epsilon if undernoised else \
        model.epsilon_spent_ == pytest.approx(epsilon, rel=1e-6)
    result = _audit(s, s_prime)
    if undernoised:
        # Caught above what the honest fit can leak on this pair, and below what the
        # half-noise fit's own events allow (the audit overstates nothing).
        assert bound < result.epsilon_lb <= _pair_epsilon(model)
    else:
        assert result.epsilon_lb <= bound <= epsilon


# --------------------------------------------------------------------------
# phased_sgd. With disjoint phases the example sits in one phase, whose noisy
# average is one Gaussian mechanism; the tight case is the example taking the
# first step of the phase, which n = 1 makes certain.
# --------------------------------------------------------------------------
def _phased_outputs(y, runs, seed):
    X = ROW[None, :]
    out = np.empty(runs)
    for i in range(runs):
        coef, b, _, events, _ = phased_sgd(
            X, y, SquaredLoss(), derivative_clip=1.0, epsilon=CLAIM, delta=DELTA, n_steps=1,
            n_phases=1, learning_rate=1.0, rng=seed + i)
        out[i] = _projection(coef, b)
    return out, events


@pytest.mark.parametrize("undernoised", [False, True])
def test_phased_sgd_audit(undernoised, monkeypatch):
    # One step of size eta/4 from 0 moves the two runs apart by exactly
    # 2 (eta/4) C2 along (x, 1), the sensitivity the noise sigma_1 = s 2 (eta/4) C2
    # is calibrated to. (Each fit recalibrates s, about 1 ms: 4000 runs a side.)
    if undernoised:
        _scaled(monkeypatch, phased_module, "calibrate_scale", 0.5)
    y, y_prime = _neighbours(1)
    s, events = _phased_outputs(y, 4000, 0)
    s_prime, _ = _phased_outputs(y_prime, 4000, 10**6)
    _check(_audit(s, s_prime), undernoised, None if undernoised else events)


# --------------------------------------------------------------------------
# bias_reduced_sgd. A step releases G = (G_B - (G_O + G_E)/2) / p_N + G_I, where
# the gradient parts of G_B and (G_O + G_E)/2 cancel exactly: only G_I, one
# uniformly drawn example, reaches the output, under the noise of all four
# releases, while the accounting charges four projection mechanisms. A whole
# run therefore sits far below its claim (and below it even with half the
# noise), so the audited component is what the accounting composes: each
# projection mechanism, claimed (epsilon/32, delta/16)-DP with respect to the
# examples it averages.
# --------------------------------------------------------------------------
_BR_EPSILON, _BR_DELTA = 32 * CLAIM, 16 * DELTA


def _bias_reduced_mechanism_calls(monkeypatch):
    """(m, sigma_unit) of the four projection mechanisms of one step of a real fit."""
    calls = []
    real = bias_reduced_module.projection_mechanism

    def spy(bounds, grad_sum, m, sigma_unit, rng, estimator, safe=False, *args, **kwargs):
        calls.append((m, sigma_unit, safe))
        return real(bounds, grad_sum, m, sigma_unit, rng, estimator, safe, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(bias_reduced_module, "projection_mechanism", spy)
        y, _ = _neighbours(2)
        bias_reduced_sgd(np.tile(ROW, (2, 1)), y, SquaredLoss(), derivative_clip=1.0,
                         epsilon=_BR_EPSILON, delta=_BR_DELTA, max_steps=1,
                         gradient_estimator="gaussian", rng=0)
    return calls


def _mechanism_outputs(y, m, sigma_unit, runs, seed, safe):
    problem = make_problem(SquaredLoss(), max_row_norm=1.0, derivative_clip=1.0)
    bounds = gradient_bounds(problem, ROW.size, private=True)
    rows = LocalData(np.tile(ROW, (m, 1))).rows_clipped(bounds.norm_bound, bounds.l1_bound)
    grad_sum = gradient_sum(rows, y, bounds, problem.loss, np.zeros(bounds.n_params), None)
    rng = np.random.default_rng(seed)
    mechanism = bias_reduced_module.projection_mechanism
    # the form a fit passes: a sparse vector (here with every entry)
    return np.array([_projection(g[:2], g[2]) for g in (
        mechanism(bounds, SparseVector.full(grad_sum), m, sigma_unit, rng, "gaussian",
                  safe).toarray()
        for _ in range(runs))])


def test_bias_reduced_step_accounting_charges_the_audited_mechanisms():
    # n = 2: B is both examples (q = 1), G_I one of two. The step's spend must be the
    # amplified composition of three mechanisms on B and one on I at (eps/32, delta/16).
    e0, d0 = _BR_EPSILON / 32, _BR_DELTA / 16
    eps_s, delta_s = step_privacy(0, 2, _BR_EPSILON, _BR_DELTA, "amplified")
    assert eps_s == pytest.approx(3 * e0 + math.log1p(math.expm1(e0) / 2))
    assert delta_s == pytest.approx(3 * d0 + d0 / 2)


@pytest.mark.parametrize("undernoised", [False, True])
def test_bias_reduced_projection_mechanism_audit(undernoised, monkeypatch):
    if undernoised:
        class HalfNoise(GaussianMechanism):
            # Halves the calibrated noise (sigma from a budget) once; a mechanism
            # built from that sigma adds it as it is.
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                if kwargs.get("sigma") is None:
                    self.sigma /= 2

        monkeypatch.setattr(bias_reduced_module, "GaussianMechanism", HalfNoise)
    calls = _bias_reduced_mechanism_calls(monkeypatch)
    # n = 2 forces N = 0: means over B (2 examples), its halves O and E, and I.
    assert sorted(m for m, _, _ in calls) == [1, 1, 1, 2]
    assert len({(sigma, safe) for _, sigma, safe in calls}) == 1
    _, sigma_unit, safe = calls[0]
    assert safe  # the default path: exact discrete noise on a lattice
    for m in (1, 2):
        y, y_prime = _neighbours(m)
        s = _mechanism_outputs(y, m, sigma_unit, 6000, 10 * m, safe)
        s_prime = _mechanism_outputs(y_prime, m, sigma_unit, 6000, 10 * m + 1, safe)
        _check(_audit(s, s_prime), undernoised)
