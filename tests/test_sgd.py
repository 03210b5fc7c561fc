import math

import numpy as np
import pytest
import scipy.sparse as sp
from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.integrate import quad
from scipy.stats import ks_2samp
from sklearn.linear_model import LogisticRegression

from skdp_sparse.data import LocalData
from skdp_sparse.mean._sampled_projection import (
    sampled_discrete_projection,
    sampled_gaussian_projection,
    sampling_threshold,
)
from skdp_sparse.optim import _sgd_kernels as K
from skdp_sparse.optim._lazy_iterate import LazyIterate
from skdp_sparse.optim.losses import LogisticLoss, SquaredLoss
from skdp_sparse.optim.projections import project_l1_ball
from skdp_sparse.privacy.accounting import (
    RDP_ORDERS,
    PrivacyEvent,
    compose,
    gaussian_epsilon,
    rdp_epsilon,
    zcdp_epsilon,
)
from skdp_sparse.privacy.auditing import epsilon_lower_bound
from skdp_sparse.privacy.discrete import SENSITIVITY_SLACK
from skdp_sparse.privacy.mechanisms import GaussianMechanism
from skdp_sparse.privacy.subsampling import (
    poisson_gaussian_rdp,
    sampled_without_replacement_gaussian_rdp,
    subsampled_gaussian_event,
    subsampled_noise_multiplier,
    wor_amplified_epsilon_delta,
)
from skdp_sparse.solvers._gradient import gradient_bounds, gradient_sum, penalised_step
from skdp_sparse.solvers.bias_reduced_sgd import (
    PrivacyFilter,
    bias_reduced_gradient,
    projection_mechanism,
    step_privacy,
    truncated_geometric_probs,
)
from skdp_sparse.solvers.phased_sgd import phased_sgd_gradient_bound
from skdp_sparse.testing.solver_api import (
    bias_reduced_sgd,
    make_problem,
    phased_sgd,
    sgd,
    sparse_sgd,
)
from skdp_sparse.utils.sparse_vector import SparseVector


def _logistic_data(n=400, d=30, density=0.2, seed=0, dense=False):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=seed)
    w = rng.normal(size=d) * 2
    y = np.where(X @ w + 0.2 + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return (X.toarray() if dense else X), y


# --------------------------------------------------------------------------
# Subsampled Gaussian RDP against dp_accounting
# --------------------------------------------------------------------------
def _dp_accounting_epsilon(event, delta, orders, relation=NeighboringRelation.ADD_OR_REMOVE_ONE):
    acc = rdp_privacy_accountant.RdpAccountant(orders=list(orders), neighboring_relation=relation)
    acc.compose(event)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("q, z", [(0.01, 1.0), (0.001, 2.0), (0.1, 0.8), (0.05, 1.5),
                                  (0.5, 3.0), (1.0, 2.0)])
@pytest.mark.parametrize("order", [2, 3, 8, 32, 256])
def test_poisson_rdp_matches_dp_accounting_at_integer_orders(q, z, order):
    # Both accountants convert RDP with the same formula (Balle et al. 2020), so equal
    # epsilons at one order mean equal RDP values.
    delta = 1e-6
    ours = rdp_epsilon(poisson_gaussian_rdp(q, z, [order], relation="add_remove"), delta,
                       orders=[order])
    ref = _dp_accounting_epsilon(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)),
                                 delta, [order])
    assert ours == pytest.approx(ref, rel=1e-3)


@pytest.mark.parametrize("q, z", [(0.01, 1.0), (0.003, 0.7), (0.2, 2.0)])
def test_poisson_rdp_upper_bounds_exact_fractional_orders_and_composes(q, z):
    # (dp_accounting's series does not always converge below order 2; order 1.5 is
    # checked against quadrature instead.)
    fractional = [2.5, 7.3, 40.7, 300.2]
    ours = poisson_gaussian_rdp(q, z, fractional, relation="add_remove")
    ref = rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(q, z, fractional)
    assert np.all(ours >= ref * (1 - 1e-9))

    def integrand(x):
        ratio = (1 - q) + q * np.exp((2 * x - 1) / (2 * z * z))
        return np.exp(-x * x / (2 * z * z)) / math.sqrt(2 * math.pi * z * z) * ratio**1.5

    exact = math.log(quad(integrand, -80, 80, epsabs=1e-15, epsrel=1e-12, limit=500)[0]) / 0.5
    assert poisson_gaussian_rdp(q, z, [1.5], relation="add_remove")[0] >= exact
    # A whole training run on the same grid: the chord at fractional orders costs a
    # few percent of epsilon (up to ~10% at small noise) against dp_accounting's exact
    # fractional-order series; it is never below it.
    delta, steps = 1e-8, 1000
    ours_eps = compose([PrivacyEvent.from_rdp(
        poisson_gaussian_rdp(q, z, relation="add_remove"), count=steps)], delta)[0]
    ref_eps = _dp_accounting_epsilon(dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), steps), delta,
        list(RDP_ORDERS))
    assert ref_eps * (1 - 1e-3) <= ours_eps <= ref_eps * 1.15


@pytest.mark.parametrize("q, z", [(0.01, 1.0), (0.05, 2.0), (0.3, 4.0)])
def test_sampling_without_replacement_rdp_against_dp_accounting(q, z):
    # dp_accounting's noise multiplier is relative to the replace-one sensitivity 2C.
    n = 10_000
    m = int(q * n)
    orders = [2, 3, 4, 10, 64]
    ours = sampled_without_replacement_gaussian_rdp(m / n, z, orders)
    ref = rdp_privacy_accountant._compute_rdp_sample_wor_gaussian(m / n, z / 2, orders)
    # Theorem 9 (general) vs dp_accounting's Gaussian-specific strengthening: equal
    # at order 2, never below it.
    assert ours[0] == pytest.approx(ref[0], rel=1e-9)
    assert np.all(ours >= ref * (1 - 1e-9))
    event = dp_event.SampledWithoutReplacementDpEvent(n, m, dp_event.GaussianDpEvent(z / 2))
    ref_eps = _dp_accounting_epsilon(event, 1e-6, orders, NeighboringRelation.REPLACE_ONE)
    ours_eps = rdp_epsilon(ours, 1e-6, orders=orders)
    assert ref_eps * (1 - 1e-6) <= ours_eps <= ref_eps * 1.2


def test_replace_one_poisson_rdp_is_between_add_remove_and_unsubsampled():
    for q, z in [(0.01, 1.0), (0.1, 2.0), (0.5, 0.7)]:
        ro = poisson_gaussian_rdp(q, z)
        ar = poisson_gaussian_rdp(q, z, relation="add_remove")
        assert np.all(ro >= ar * (1 - 1e-12))
        assert np.all(ro <= 2 * RDP_ORDERS / z**2 * (1 + 1e-12))
    # q = 1: a plain Gaussian of sensitivity 2C; the event is the exact GDP one.
    ev = subsampled_gaussian_event(2.0, 1.0, count=3)
    assert ev.mu == pytest.approx(1.0) and ev.count == 3
    assert np.all(poisson_gaussian_rdp(0.0, 1.0) == 0)
    assert np.all(np.isinf(poisson_gaussian_rdp(0.1, 0.0)))


def test_wor_amplification_formula():
    eps, dlt = wor_amplified_epsilon_delta(1.0, 1e-5, 0.1)
    assert eps == pytest.approx(math.log(1 + 0.1 * (math.e - 1)))
    assert dlt == pytest.approx(1e-6)


def test_subsampling_rejects_bad_arguments():
    with pytest.raises(ValueError, match="sampling rate"):
        poisson_gaussian_rdp(1.5, 1.0)
    with pytest.raises(ValueError, match="noise multiplier"):
        poisson_gaussian_rdp(0.1, -1.0)
    with pytest.raises(ValueError, match="relation"):
        poisson_gaussian_rdp(0.1, 1.0, relation="bogus")
    with pytest.raises(ValueError, match="sampling"):
        subsampled_gaussian_event(1.0, 0.1, sampling="bogus")


# --------------------------------------------------------------------------
# Calibration: the returned events compose to the requested budget
# --------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(batch_size=40, n_steps=30),
    dict(batch_size=40, n_steps=30, sampling="without_replacement"),
    dict(sparsity=5, gradient_estimator="projection", n_steps=7),
])
@pytest.mark.parametrize("epsilon", [0.5, 3.0])
def test_sgd_events_compose_to_the_budget(kwargs, epsilon):
    X, y = _logistic_data()
    delta = 1e-6
    coef, b, steps, events, n_grad = sgd(X, y, LogisticLoss(), epsilon=epsilon, delta=delta,
                                         rng=0, **kwargs)
    assert compose(events, delta)[0] == pytest.approx(epsilon, rel=1e-6)
    assert compose(events, delta)[0] <= epsilon
    assert sum(e.count for e in events) == steps
    if "batch_size" not in kwargs:
        assert n_grad == steps * X.shape[0]
    assert coef.shape == (X.shape[1],) and np.isfinite(b)


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_sparse_and_phased_sgd_events_compose_to_the_budget(safe):
    X, y = _logistic_data()
    delta = 1e-6
    for solver, kw in [(sparse_sgd, dict(batch_size=50, n_steps=20)),
                       (sparse_sgd, dict(batch_size=X.shape[0], n_steps=4)),
                       (phased_sgd, dict()), (phased_sgd, dict(sampling="with_replacement"))]:
        out = solver(X, y, LogisticLoss(), epsilon=1.0, delta=delta, rng=0,
                     floating_point_safe=safe, **kw)
        assert compose(out[3], delta)[0] == pytest.approx(1.0, rel=1e-6)
        assert compose(out[3], delta)[0] <= 1.0
    # sparse_sgd's events are those of its noise path: the safe path is accounted at the
    # multiplier z / (1 + 2^-16), and its z is calibrated for that.
    (event,) = sparse_sgd(X, y, LogisticLoss(), epsilon=1.0, delta=delta, rng=0, batch_size=50,
                          n_steps=20, floating_point_safe=safe)[3]
    z = subsampled_noise_multiplier(50 / X.shape[0], 20, "poisson", 1.0, delta, safe)
    ref = subsampled_gaussian_event(z, 50 / X.shape[0], 20, floating_point_safe=safe)
    assert event.rdp == ref.rdp and event.count == 20
    other = subsampled_gaussian_event(z, 50 / X.shape[0], 20, floating_point_safe=not safe)
    assert event.rdp != other.rdp


def test_bias_reduced_sgd_spend():
    X, y = _logistic_data(n=256)
    delta = 1e-6
    out = bias_reduced_sgd(X, y, LogisticLoss(), epsilon=1.0, delta=delta, rng=0,
                           filter_bound="amplified")
    eps, dlt = compose(out[3], delta)
    assert eps == pytest.approx(1.0, rel=1e-9) and dlt <= delta * (1 + 1e-9)
    out = bias_reduced_sgd(X, y, LogisticLoss(), epsilon=1.0, delta=delta, rng=0,
                           class_balance=False)
    eps, dlt = compose(out[3], delta)
    # The paper's rule: filter at (eps/2, delta/2) plus one step of at most ~(3/16) eps.
    n = X.shape[0]
    assert 0.5 < eps <= 0.5 + (3 * n + 1) / (16 * n) + 1e-12 and dlt <= delta
    out = bias_reduced_sgd(X, y, LogisticLoss(), epsilon=1.0, delta=delta, rng=0,
                           boosting_runs=2, filter_bound="amplified")
    assert compose(out[3], delta)[0] == pytest.approx(1.0, rel=1e-9)
    assert any(e.name.startswith("report-noisy-min") for e in out[3])


def test_bias_reduced_filter_is_the_corrected_spec_rule():
    rng = np.random.default_rng(3)
    n, epsilon, delta = 1000, 0.7, 1e-7
    M = int(math.floor(math.log2(n))) - 1
    probs = truncated_geometric_probs(M)
    assert probs.sum() == pytest.approx(1.0)
    filt = PrivacyFilter(epsilon / 2, delta / 4, delta / 4)
    cs = []
    for _ in range(5000):
        N = int(rng.choice(M + 1, p=probs))
        eps_s, delta_s = step_privacy(N, n, epsilon, delta, "paper")
        c = (3 * 2 ** (N + 1) + 1) / (16 * n)
        assert eps_s == pytest.approx(epsilon * c) and delta_s == pytest.approx(delta * c)
        filt.add(eps_s, delta_s)
        cs.append(c)
        c2 = np.sum(np.square(cs))
        spec = (math.sqrt(2 * math.log(4 / delta) * c2) + epsilon / 2 * c2 <= 0.5
                and np.sum(cs) <= 0.25)
        assert filt.within() == spec
        if not spec:
            break
    else:
        pytest.fail("the filter never stopped")
    # Exact amplification is never looser than the paper's linearisation for eps <= 1.
    for N in range(M + 1):
        assert (step_privacy(N, n, 1.0, delta, "amplified")[0]
                <= step_privacy(N, n, 1.0, delta, "paper")[0])
    # Above eps ~ 13 the linearisation breaks; the rule falls back to the exact value.
    big = step_privacy(M, n, 40.0, delta, "paper")[0]
    assert big >= step_privacy(M, n, 40.0, delta, "amplified")[0]


# --------------------------------------------------------------------------
# Noise off: the solvers optimise the right objective
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dense", [False, True])
def test_noise_off_full_batch_gd_matches_sklearn(dense):
    X, y = _logistic_data(n=300, d=15, dense=dense)
    n = X.shape[0]
    lam = 0.05
    ref = LogisticRegression(C=1 / (lam * n), tol=1e-12, max_iter=10_000).fit(X, y)
    coef, b, *_ = sgd(X, y, LogisticLoss(), l2=lam, epsilon=np.inf, max_row_norm=1e6,
                      n_steps=1500, average=False)
    np.testing.assert_allclose(coef, ref.coef_.ravel(), atol=1e-6)
    assert b == pytest.approx(ref.intercept_[0], abs=1e-6)


def test_noise_off_sparse_sgd_equals_dense_proximal_gd():
    # Full batch, no noise: the lazy closed-form penalty updates must reproduce the
    # dense proximal gradient iterates and their average.
    X, y = _logistic_data(n=200, d=40, density=0.1)
    kw = dict(l2=0.03, l1=0.002, epsilon=np.inf, learning_rate=1.5, n_steps=60)
    dense = sgd(X, y, LogisticLoss(), **kw)
    lazy = sparse_sgd(X, y, LogisticLoss(), batch_size=X.shape[0], **kw)
    np.testing.assert_allclose(lazy[0], dense[0], atol=1e-10)
    assert lazy[1] == pytest.approx(dense[1], abs=1e-10)
    last_dense = sgd(X, y, LogisticLoss(), average=False, **kw)
    last_lazy = sparse_sgd(X, y, LogisticLoss(), batch_size=X.shape[0], average=False, **kw)
    np.testing.assert_allclose(last_lazy[0], last_dense[0], atol=1e-10)


@pytest.mark.parametrize("c, a", [(1.0, 0.0), (0.9, 0.0), (1.0, 0.05), (0.93, 0.02),
                                  # c within 1e-6 to 1e-12 of 1: its closed form through
                                  # a / (1 - c) lost the sum (5% off at 1e-9, 100% at 1e-12)
                                  (1.0 - 1e-6, 0.0), (1.0 - 1e-9, 0.01), (1.0 - 1e-12, 0.05),
                                  (1.0 - 1e-7, 1e-5),
                                  # eta l2 >= 1 (bias-reduced SGD's step size can reach
                                  # it): the sign flips each step; log(c) was NaN
                                  (0.0, 0.0), (0.0, 0.05), (-0.4, 0.0), (-0.4, 0.02),
                                  (-1.0 + 1e-9, 0.01), (-1.0, 0.05)])
def test_lazy_penalty_closed_form(c, a):
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = rng.normal() * 2
        k = int(rng.integers(0, 40))
        v, total = x, 0.0
        for _ in range(k):
            v = c * v
            v = math.copysign(max(abs(v) - a, 0.0), v)
            total += v
        got_v, got_total = K._lazy_decay(x, k, c, a)
        assert got_v == pytest.approx(v, abs=1e-12)
        assert got_total == pytest.approx(total, abs=1e-10)


@pytest.mark.parametrize("dense", [False, True])
def test_noise_off_phased_sgd_equals_a_reference_of_its_phases(dense):
    # Phased SGD makes one pass over the rows by design, so with noise off it returns
    # its phases' iterate, not the ERM optimum: compared here with a plain reference
    # of the algorithm (Menart & Nikolov, Alg. 4, disjoint blocks of one permutation).
    X, y = _logistic_data(n=256, d=8, density=0.5, dense=dense)
    n, d = X.shape
    l2, l1, eta, radius, T, phases = 0.02, 0.003, 2.0, 0.8, 192, 3
    coef, b, *_ = phased_sgd(X, y, LogisticLoss(), l2=l2, l1=l1, epsilon=np.inf, rng=0,
                             n_steps=T, n_phases=phases, learning_rate=eta, radius=radius,
                             class_balance=False, max_row_norm=3.0)  # >= sqrt(d): no clip
    Xd = X if dense else X.toarray()
    order = np.random.default_rng(0).permutation(n)
    theta, used = np.zeros(d + 1), 0
    for r in range(1, phases + 1):
        steps, eta_r = round(T / 2**r), eta / 4**r
        iterates = []
        for i in order[used: used + steps]:
            z = Xd[i] @ theta[:d] + theta[d]
            g = -y[i] / (1.0 + np.exp(y[i] * z))  # the logistic loss's derivative
            theta[:d] = (1 - eta_r * l2) * theta[:d] - eta_r * g * Xd[i]
            theta[d] -= eta_r * g
            theta[:d] = np.sign(theta[:d]) * np.maximum(np.abs(theta[:d]) - eta_r * l1, 0)
            theta *= min(1.0, radius / np.linalg.norm(theta))
            iterates.append(theta.copy())
        theta, used = np.mean(iterates, axis=0), used + steps
    assert used == T - T // 2**phases
    np.testing.assert_allclose(coef, theta[:d], rtol=0, atol=1e-12)
    assert b == pytest.approx(theta[d], abs=1e-12)
    assert np.abs(theta[:d]).max() > 0.05  # the steps went somewhere


@pytest.mark.parametrize("solver, steps", [(sgd, {"n_steps": 5}), (sparse_sgd, {"n_steps": 5}),
                                           (phased_sgd, {"n_steps": 5}),
                                           (bias_reduced_sgd, {"max_steps": 5})])
def test_noise_off_fit_of_rows_below_the_smallest_bound(solver, steps):
    # Without noise the plan takes the largest row norm as its bound; below 1e-100, the
    # floor of every clipping bound, clip_rows refused it and the fit raised.
    X, y = _logistic_data(n=64, d=6, density=0.5)
    coef, *_ = solver(X * 1e-120, y, LogisticLoss(), epsilon=np.inf, rng=0, l2=0.1, **steps)
    assert np.all(np.isfinite(coef))


def test_noise_off_phased_and_bias_reduced_learn():
    X, y = _logistic_data(n=512, d=10, density=0.5)
    base = np.mean(np.logaddexp(0, -y * 0))

    def loss(coef, b):
        return np.mean(np.logaddexp(0, -y * (X @ coef + b)))

    c, b, *_ = phased_sgd(X, y, LogisticLoss(), epsilon=np.inf, n_steps=512, rng=0,
                          learning_rate=8.0)
    assert loss(c, b) < base - 0.1
    c, b, *_ = bias_reduced_sgd(X, y, LogisticLoss(), epsilon=np.inf, max_steps=400, rng=0,
                                learning_rate=1.0, gradient_estimator="gaussian")
    assert loss(c, b) < base - 0.1


# --------------------------------------------------------------------------
# Fresh noise and privacy audits
# --------------------------------------------------------------------------
@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_sgd_draws_fresh_noise_every_step(safe):
    # Empty rows and no intercept: the gradient is 0 and the iterate is the running
    # sum of the step noises. Fresh draws give variance T s^2; a reused draw T^2 s^2.
    n, d, T = 50, 4000, 4
    X = sp.csr_matrix((n, d))
    y = np.ones(n)
    coef, _, _, events, _ = sgd(X, y, LogisticLoss(), epsilon=1.0, delta=1e-5, n_steps=T,
                                learning_rate=1.0, average=False, fit_intercept=False, rng=1,
                                floating_point_safe=safe)
    # Noise multiplier (C2 = 1): mu = 2 / z, or rho = (2 (1 + eta) / z)^2 / 2 per step.
    if safe:
        z = 2.0 * (1 + SENSITIVITY_SLACK) / math.sqrt(2.0 * events[0].rho)
    else:
        z = 2.0 / events[0].mu
    per_step = (z / n) ** 2
    assert np.var(coef) == pytest.approx(T * per_step, rel=0.1)


def _one_step_outputs(y, epsilon, delta, runs, seed, safe):
    X = np.ones((4, 1))
    out = np.empty(runs)
    for i in range(runs):
        coef, *_ = sgd(X, y, SquaredLoss(), epsilon=epsilon, delta=delta, derivative_clip=1.0,
                       n_steps=1, learning_rate=1.0, average=False, fit_intercept=False,
                       rng=seed + i, floating_point_safe=safe)
        out[i] = coef[0]
    return out


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
@pytest.mark.parametrize("undernoised", [False, True])
def test_privacy_audit_of_one_full_batch_step(undernoised, safe):
    # One full-batch step is a Gaussian mechanism; with targets beyond the derivative
    # clip, replacing the last row moves the gradient sum by exactly 2 C2: the audit is
    # tight. The claim is (2, 1e-3); a copy with half the noise must be caught.
    claim, delta, runs = 2.0, 1e-3, 8000
    run_eps = claim
    if undernoised:
        # The budget whose calibration gives exactly half the noise: mu doubled (GDP),
        # or rho quadrupled (the safe path's zCDP accounting).
        events = sgd(np.ones((4, 1)), np.ones(4), SquaredLoss(), epsilon=claim, delta=delta,
                     derivative_clip=1.0, n_steps=1, rng=0, floating_point_safe=safe)[3]
        if safe:
            run_eps = zcdp_epsilon(4 * events[0].rho, delta)
        else:
            run_eps = gaussian_epsilon(2 * events[0].mu, delta)
    s = _one_step_outputs(np.full(4, 10.0), run_eps, delta, runs, 0, safe)
    s_prime = _one_step_outputs(np.array([10.0, 10.0, 10.0, -10.0]), run_eps, delta, runs,
                                10**6, safe)
    result = epsilon_lower_bound(s, s_prime, delta=delta, confidence=0.95, rng=0)
    if undernoised:
        assert result.epsilon_lb > claim
    else:
        assert result.epsilon_lb <= claim


# --------------------------------------------------------------------------
# Bias-reduced estimator
# --------------------------------------------------------------------------
def _small_problem(n=16, d=6, seed=1):
    """A problem, its clipped rows, labels and public bounds, and a point theta."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.5, format="csr", random_state=seed)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    problem = make_problem(LogisticLoss(), max_row_norm=1.0, sparsity=2)
    bounds = gradient_bounds(problem, d, private=True)
    rows = LocalData(X).rows_clipped(bounds.norm_bound, bounds.l1_bound)
    theta = rng.normal(size=bounds.n_params)
    return problem, rows, y, bounds, theta


def test_bias_reduced_estimator_is_unbiased_without_noise():
    problem, rows, y, bounds, theta = _small_problem()
    n = rows.shape[0]
    probs = truncated_geometric_probs(int(math.log2(n)) - 1)
    rng = np.random.default_rng(0)
    draws = np.array([bias_reduced_gradient(problem, rows, y, bounds, theta,
                                            int(rng.choice(probs.size, p=probs)),
                                            probs, 0.0, rng, "gaussian")[0]
                      for _ in range(20_000)])
    full = gradient_sum(rows, y, bounds, problem.loss, theta, None) / n
    se = draws.std(axis=0) / math.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - full) <= 5 * se + 1e-12)


def test_bias_reduced_estimator_matches_full_batch_projection_mechanism():
    # n a power of two: E[G] is the mean of the projection mechanism on the full batch,
    # which the heavy noise and the l1-ball projection pull far from the gradient.
    problem, rows, y, bounds, theta = _small_problem(n=4)
    n = rows.shape[0]
    probs = truncated_geometric_probs(int(math.log2(n)) - 1)
    sigma_unit = 10.0
    rng = np.random.default_rng(0)
    draws = np.array([bias_reduced_gradient(problem, rows, y, bounds, theta,
                                            int(rng.choice(probs.size, p=probs)),
                                            probs, sigma_unit, rng, "projection")[0]
                      for _ in range(20_000)])
    full_sum = gradient_sum(rows, y, bounds, problem.loss, theta, None)
    ref = np.array([projection_mechanism(bounds, full_sum, n, sigma_unit, rng, "projection")
                    for _ in range(20_000)])
    se = np.sqrt(draws.var(axis=0) / len(draws) + ref.var(axis=0) / len(ref))
    assert np.all(np.abs(draws.mean(axis=0) - ref.mean(axis=0)) <= 5 * se)
    # The projection biases the mechanism: the check is not vacuous.
    assert np.max(np.abs(ref.mean(axis=0) - full_sum / n)) > 10 * np.max(se)


@pytest.mark.parametrize("l1, l2", [(0.0, 0.0), (0.3, 0.0), (0.0, 0.2), (0.05, 0.1),
                                    # eta l2 = 1.4 and 1: the decay flips the sign, or
                                    # zeroes every coefficient it reaches
                                    (0.0, 2.0), (0.05, 2.0), (0.05, 1 / 0.7)])
def test_lazy_iterate_equals_the_dense_steps_and_their_average(l1, l2):
    # Steps whose estimate touches a few coordinates, the others decaying lazily: every
    # iterate read midway (through a gradient's catch-up) and the final average must be
    # those of penalised_step on dense vectors, to rounding.
    rng = np.random.default_rng(3)
    d, steps, eta = 60, 40, 0.7
    problem = make_problem(LogisticLoss(), l1=l1, l2=l2)
    bounds = gradient_bounds(problem, d, private=True)
    theta0 = rng.normal(size=d + 1)
    iterate = LazyIterate(theta0, d, eta, l2, l1)
    theta, thetas, touched = theta0.copy(), [theta0.copy()], []
    X = sp.random(5, d, density=0.2, format="csr", random_state=1)
    y = np.where(rng.random(5) < 0.5, 1.0, -1.0)
    for t in range(steps):
        if t % 7 == 3:  # a gradient reads some coordinates mid-run, bringing them up to date
            columns, values, total = iterate.csr_gradient(X, y, problem.loss, 1.0,
                                                          np.array([0, 2]))
            want = gradient_sum(X, y, bounds, problem.loss, theta, np.array([0, 2]))
            np.testing.assert_allclose(values, want[columns], rtol=1e-12, atol=1e-14)
            assert total == pytest.approx(want[d], rel=1e-12)
            assert np.all(want[np.setdiff1d(np.arange(d), columns)] == 0)
        positions = np.sort(rng.choice(d + 1, size=4, replace=False))
        touched.append(positions)
        G = rng.normal(size=4)
        dense = np.zeros(d + 1)
        dense[positions] = G
        theta = penalised_step(bounds, theta, dense, eta, None)
        thetas.append(theta.copy())
        iterate.step(positions, G)
    np.testing.assert_allclose(iterate.current(), theta, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(iterate.average(), np.mean(thetas, axis=0), rtol=1e-11,
                               atol=1e-13)
    # Not vacuous: some coefficients no step touched, and the penalty moved them.
    untouched = np.setdiff1d(np.arange(d), np.concatenate(touched))
    assert untouched.size > 0
    assert l2 == l1 == 0 or np.all(theta[untouched] != theta0[untouched])
    assert l1 == 0 or np.any(theta[:d] == 0)


def _plain_penalised_step(bounds, theta, grad, eta, radius):
    # The step as written before it was made to work in place (the reference bits).
    d = bounds.n_features
    if bounds.l2:
        grad = grad.copy()
        grad[..., :d] += bounds.l2 * theta[..., :d]
    theta = theta - eta * grad
    if bounds.l1:
        w = theta[..., :d]
        theta[..., :d] = np.sign(w) * np.maximum(np.abs(w) - eta * bounds.l1, 0.0)
    if radius is not None and np.linalg.norm(theta) > radius:
        theta *= radius / np.linalg.norm(theta)
    return theta


@pytest.mark.parametrize("l1, l2", [(0.0, 0.0), (0.3, 0.0), (0.0, 0.2), (0.05, 0.1)])
def test_penalised_step_holds_two_parameter_matrices_and_keeps_its_bits(l1, l2):
    # The multinomial loss steps K x p parameters (5 x 10^7 floats at p = 10^7): the
    # step's temporaries made five such matrices at its peak (3.1 GB traced for a
    # 5-class fit at p = 10^7). It needs its result and one buffer.
    import tracemalloc

    rng = np.random.default_rng(5)
    K, d = 3, 200_000
    problem = make_problem(LogisticLoss(), l1=l1, l2=l2)
    bounds = gradient_bounds(problem, d, private=True)
    theta = rng.normal(size=(K, d + 1))
    theta[:, ::7] = 0.0
    theta[:, 1::7] = -0.0
    grad = rng.normal(size=(K, d + 1))
    before = theta.copy(), grad.copy()
    for radius in (None, 5.0):
        want = _plain_penalised_step(bounds, theta.copy(), grad.copy(), 0.7, radius)
        tracemalloc.start()
        got = penalised_step(bounds, theta, grad, 0.7, radius)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert got.tobytes() == want.tobytes()
        assert peak < 2.2 * theta.nbytes
    # Its inputs are left as they were.
    assert theta.tobytes() == before[0].tobytes() and grad.tobytes() == before[1].tobytes()


@pytest.mark.parametrize("l1, l2", [(0.0, 0.0), (0.05, 0.1)])
def test_lazy_iterate_gradient_reads_leave_the_iterate_bitwise_unchanged(l1, l2):
    # Which coefficients a gradient reads is a function of its private rows, and the
    # closed-form decay rounds differently when split: a read that stored the caught-up
    # values changed the released average's bits (all of 200 runs with reads between 30
    # steps, l1 = 0.01, l2 = 0.3), even without a penalty (the iterates' sum k x).
    rng = np.random.default_rng(5)
    d, eta = 40, 0.7
    X = sp.random(30, d, density=0.3, format="csr", random_state=2)
    y = np.where(rng.random(30) < 0.5, 1.0, -1.0)
    read = LazyIterate(rng.normal(size=d + 1), d, eta, l2, l1)
    unread = LazyIterate(read.theta, d, eta, l2, l1)
    for _ in range(30):
        positions = np.sort(rng.choice(d + 1, size=3, replace=False))
        G = rng.normal(size=3)
        state = (read.theta.copy(), read.last.copy(), read.total.copy())
        read.csr_gradient(X, y, LogisticLoss(), 1.0,
                          np.sort(rng.choice(30, size=4, replace=False)).astype(np.int64))
        for before, after in zip(state, (read.theta, read.last, read.total), strict=True):
            assert np.array_equal(before, after)
        read.step(positions, G)
        unread.step(positions, G)
    assert np.array_equal(read.average(), unread.average())


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_bias_reduced_release_drawing_only_surviving_noise_has_the_reference_law(safe):
    # At this width the projection's public sampling threshold exists, so the release
    # draws only the noise that can survive the projection: its law must be that of
    # Gaussian noise on every coordinate followed by the projection (the reference
    # below, the mechanism the accounting describes).
    problem, rows, y, bounds, theta = _small_problem(n=8, d=3000, seed=2)
    grad_sum = gradient_sum(rows, y, bounds, problem.loss, theta, None)
    m, sigma_unit = 2, 3.0
    sensitivity = 2.0 * bounds.grad_l2 / m
    sigma = sensitivity * sigma_unit
    assert sampling_threshold(sigma, bounds.n_params, bounds.grad_l1) is not None
    rng = np.random.default_rng(0)
    runs = 3000
    got = np.array([projection_mechanism(bounds, grad_sum.copy(), m, sigma_unit, rng,
                                         "projection", safe) for _ in range(runs)])
    mech = GaussianMechanism(sensitivity, sigma=sigma, floating_point_safe=safe)
    ref = np.array([project_l1_ball(mech.randomise(grad_sum / m, rng), bounds.grad_l1)
                    for _ in range(runs)])
    # The coordinates with the largest mean, the l2 norm and the support size (the l1
    # norm is the radius in both, up to rounding): two-sample KS tests at level 1e-4 each.
    top = np.argsort(-np.abs(grad_sum))[:3]
    stats = [(got[:, j], ref[:, j]) for j in top]
    stats.append((np.linalg.norm(got, axis=1), np.linalg.norm(ref, axis=1)))
    stats.append(((got != 0).sum(axis=1), (ref != 0).sum(axis=1)))
    for a, b in stats:
        assert ks_2samp(a, b).pvalue > 1e-4
    # Not vacuous: the projection moved the signal coordinates.
    assert np.abs(ref[:, top].mean(axis=0) - grad_sum[top] / m).max() > 0.1 * sigma


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_bias_reduced_sparse_release_draws_what_the_dense_release_draws(safe):
    # The release of a sparse gradient sum reads its support only, yet it must draw,
    # from the same generator, exactly what the dense release draws: the same vector,
    # bit for bit, so the reference-law test above covers both forms.
    rng = np.random.default_rng(5)
    problem = make_problem(LogisticLoss(), max_row_norm=1.0, sparsity=4)
    bounds = gradient_bounds(problem, 3000, private=True)
    X = sp.random(64, 3000, density=0.002, format="csr", random_state=5)
    rows = LocalData(X).rows_clipped(bounds.norm_bound, bounds.l1_bound)
    y = np.where(rng.random(64) < 0.5, 1.0, -1.0)
    theta = rng.normal(size=bounds.n_params)
    batch = np.array([3, 17, 40], dtype=np.int64)
    dense_sum = gradient_sum(rows, y, bounds, problem.loss, theta, batch)
    sparse_sum = SparseVector.from_dense(dense_sum)
    assert 0 < sparse_sum.positions.size < bounds.n_params // 10
    scratch = np.zeros(bounds.n_params)
    for m, sigma_unit in [(3, 3.0), (3, 0.05), (1, 30.0), (3, 0.0)]:
        for seed in range(5):
            want = projection_mechanism(bounds, dense_sum.copy(), m, sigma_unit,
                                        np.random.default_rng(seed), "projection", safe)
            got = projection_mechanism(bounds, sparse_sum, m, sigma_unit,
                                       np.random.default_rng(seed), "projection", safe,
                                       scratch=scratch)
            assert isinstance(got, SparseVector)
            np.testing.assert_array_equal(got.toarray(), want)
            assert not scratch.any()


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_sampled_projection_with_a_support_equals_the_dense_one_on_both_stages(safe):
    # Stage 1 stopping (a small radius) and stage 2 completing the draw (a radius the
    # revealed values cannot reach): with the same generator, the same release.
    d, sigma, t = 4000, 1.0, 2.5
    rng = np.random.default_rng(0)
    support = np.sort(rng.choice(d, size=40, replace=False))
    mean = np.zeros(d)
    mean[support] = rng.normal(scale=[0.01, 0.2, 5.0] * 13 + [40.0])
    release = (lambda x, r, g, **kw: sampled_discrete_projection(x, 0.5, sigma, r, t, g, **kw)) \
        if safe else (lambda x, r, g, **kw: sampled_gaussian_projection(x, sigma, r, t, g, **kw))
    stages = set()
    for radius in (5.0, 1e4):
        for seed in range(3):
            want, _, full, _, _ = release(mean, radius, np.random.default_rng(seed))
            got, _, full_sparse, _, _ = release(mean, radius, np.random.default_rng(seed),
                                                support=support)
            assert full == full_sparse
            stages.add(full)
            np.testing.assert_array_equal(got.toarray(), want)
    assert stages == {False, True}


# --------------------------------------------------------------------------
# Sparsity-preserving DP-SGD
# --------------------------------------------------------------------------
def _one_hot(n, n_fields, vocab, p, seed):
    """n rows, one active feature per field, feature ids below ``vocab`` (of ``p`` columns)."""
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.3, size=(n, n_fields)) - 1
    cols = (ranks % (vocab // n_fields)) + np.arange(n_fields) * (vocab // n_fields)
    rows = np.repeat(np.arange(n), n_fields)
    X = sp.csr_matrix((np.ones(n * n_fields), (rows, cols.ravel())), shape=(n, p))
    X.sum_duplicates()
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_sparse_sgd_updates_only_selected_coordinates(safe):
    X, y = _one_hot(2000, 5, 5000, 5000, seed=0)
    coef, b, steps, events, n_grad, info = sparse_sgd(
        X, y, LogisticLoss(), epsilon=1.0, delta=1e-6, batch_size=400, n_steps=1,
        average=False, rng=0, _trace=(1, 5000), floating_point_safe=safe)
    selected = info["selected"][0]
    chosen = set(selected[1: 1 + selected[0]].tolist())
    assert 0 < len(chosen) < np.unique(X.indices).size
    assert set(np.flatnonzero(coef).tolist()) <= chosen
    assert set(np.flatnonzero(coef).tolist()) == chosen  # noise makes every update non-zero


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_sparse_sgd_work_per_step_does_not_grow_with_dimension(safe):
    # The same rows in 10^4 and 10^6 columns: the operation counts per step match.
    X_small, y = _one_hot(3000, 6, 6000, 10_000, seed=1)
    X_big = sp.csr_matrix((X_small.data, X_small.indices, X_small.indptr),
                          shape=(3000, 1_000_000))
    ops = {}
    for name, X in [("small", X_small), ("big", X_big)]:
        *_, info = sparse_sgd(X, y, LogisticLoss(), epsilon=1.0, delta=1e-6, batch_size=300,
                              n_steps=50, rng=0, _trace=(0, 1), floating_point_safe=safe)
        ops[name] = info["ops"]
        # Expected absent features passing the threshold: the batch size, whatever d.
        assert info["p_zero"] * X.shape[1] == pytest.approx(300.0, rel=1e-6)
    ratio = ops["big"].sum() / ops["small"].sum()
    assert 0.95 < ratio < 1.05
    nnz_per_step = 300 * 6
    assert ops["big"].mean() < 4 * nnz_per_step


def test_sparse_sgd_learns_frequent_features():
    X, _ = _one_hot(20_000, 4, 400, 400, seed=2)
    rng = np.random.default_rng(0)
    w = rng.normal(size=400) * 3
    y = np.where(X @ w + rng.logistic(size=X.shape[0]) > 0, 1.0, -1.0)
    coef, b, *_ = sparse_sgd(X, y, LogisticLoss(), epsilon=2.0, delta=1e-8, batch_size=2000,
                             n_steps=200, learning_rate=8.0, rng=0)
    acc = np.mean(np.sign(X @ coef + b) == y)
    assert acc > 0.7


# --------------------------------------------------------------------------
# Phased SGD
# --------------------------------------------------------------------------
def test_phased_sgd_uses_each_example_at_most_once_and_meets_the_bound():
    X, y = _logistic_data(n=2000, d=20)
    delta = 1 / 2000**2
    coef, b, steps, events, n_grad = phased_sgd(X, y, LogisticLoss(), epsilon=1.0,
                                                delta=delta, rng=0)
    assert n_grad == steps <= X.shape[0]
    # Default accuracy target alpha = 6 alpha*, diameter 20, Lipschitz sqrt(2).
    bl = 20 * math.sqrt(2)
    alpha = 6 * bl * math.sqrt(21 * math.log(1 / delta)) / (2000 * 1.0)
    assert n_grad <= phased_sgd_gradient_bound(21, delta / 2000, alpha, diameter=20,
                                               lipschitz=math.sqrt(2))
    _, _, steps_wr, _, n_wr = phased_sgd(X, y, LogisticLoss(), epsilon=1.0, delta=delta,
                                         rng=0, sampling="with_replacement", n_steps=5000)
    assert n_wr == steps_wr > X.shape[0]


@pytest.mark.parametrize("solver, kwargs", [
    (sgd, dict(n_steps=3)),
    (sparse_sgd, dict(n_steps=3, batch_size=8)),
    (phased_sgd, dict(n_steps=8, n_phases=2)),
    (bias_reduced_sgd, dict(max_steps=3, gradient_estimator="gaussian")),
])
def test_duplicate_entries_are_summed_before_clipping(solver, kwargs):
    # scipy reads duplicate entries of a CSR matrix as their sum, and so do the
    # kernels: the clipping (and the feature counts of sparse_sgd) must see the
    # summed row too, or one row of 100 entries of 0.1 in one column has stored
    # l2 norm 1 and escapes the bound while its gradient is ten times C2.
    rng = np.random.default_rng(0)
    n, d = 8, 3
    cols = rng.integers(0, d, size=(n, 40))
    X_dup = sp.csr_matrix((np.full(n * 40, 0.1), cols.ravel(), np.arange(0, n * 40 + 1, 40)),
                          shape=(n, d))
    assert not X_dup.has_canonical_format
    X_sum = X_dup.copy()
    X_sum.sum_duplicates()
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    kw = dict(epsilon=1.0, delta=1e-5, learning_rate=1.0, **kwargs)
    dup = solver(X_dup, y, LogisticLoss(), rng=3, **kw)
    ref = solver(X_sum, y, LogisticLoss(), rng=3, **kw)
    np.testing.assert_allclose(dup[0], ref[0], rtol=1e-12, atol=1e-12)
    assert dup[1] == pytest.approx(ref[1], rel=1e-12, abs=1e-12)
    # The caller's matrix is left as it was.
    assert X_dup.nnz == n * 40 and not X_dup.has_canonical_format


# --------------------------------------------------------------------------
# Verbose output and bad input
# --------------------------------------------------------------------------
def test_verbose_reports_privacy_spent(capsys):
    X, y = _logistic_data(n=100)
    sgd(X, y, LogisticLoss(), epsilon=1.0, delta=1e-6, n_steps=5, rng=0, verbose=1)
    out = capsys.readouterr().out
    assert "step 5/5" in out and "privacy spent: epsilon=1" in out
    sparse_sgd(X, y, LogisticLoss(), epsilon=1.0, delta=1e-6, n_steps=5, rng=0, verbose=1)
    assert "privacy spent" in capsys.readouterr().out


@pytest.mark.parametrize("solver", [sgd, sparse_sgd, phased_sgd, bias_reduced_sgd])
@pytest.mark.parametrize("kwargs, match", [
    (dict(epsilon=0.0), "epsilon"),
    (dict(epsilon=1.0, delta=0.0), "delta > 0"),
    (dict(delta=1.5), "delta"),
    (dict(l2=-1.0), "l2"),
    (dict(max_row_norm=0.0), "max_row_norm"),
    (dict(derivative_clip=-1.0), "derivative_clip"),
])
def test_bad_privacy_and_bound_parameters(solver, kwargs, match):
    X, y = _logistic_data(n=64)
    with pytest.raises(ValueError, match=match):
        solver(X, y, LogisticLoss(), **kwargs)


def test_bad_inputs():
    X, y = _logistic_data(n=64)
    with pytest.raises(ValueError, match="labels"):
        sgd(X, (y + 1) / 2, LogisticLoss())
    with pytest.raises(ValueError, match="target_bound"):
        sgd(X, y, SquaredLoss())
    with pytest.raises(ValueError, match="shape"):
        sgd(X, y[:-1], LogisticLoss())
    bad = X.toarray()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        sgd(bad, y, LogisticLoss())
    with pytest.raises(ValueError, match="loss"):
        sgd(X, y, "logistic")
    with pytest.raises(ValueError, match="batch_size"):
        sgd(X, y, LogisticLoss(), batch_size=0)
    with pytest.raises(ValueError, match="max_iter"):
        sgd(X, y, LogisticLoss(), n_steps=0)
    with pytest.raises(ValueError, match="sampling"):
        sgd(X, y, LogisticLoss(), batch_size=8, sampling="bogus")
    with pytest.raises(ValueError, match="gradient_estimator"):
        sgd(X, y, LogisticLoss(), gradient_estimator="bogus")
    with pytest.raises(ValueError, match="average"):
        sgd(X, y, LogisticLoss(), average="bogus")
    with pytest.raises(ValueError, match="selection_share"):
        sparse_sgd(X, y, LogisticLoss(), selection_share=1.0)
    with pytest.raises(ValueError, match="filter_bound"):
        bias_reduced_sgd(X, y, LogisticLoss(), filter_bound="bogus")
    with pytest.raises(ValueError, match="max_iter"):
        bias_reduced_sgd(X, y, LogisticLoss(), epsilon=np.inf)
    with pytest.raises(ValueError, match="sampling"):
        phased_sgd(X, y, LogisticLoss(), sampling="bogus")
    with pytest.raises(ValueError, match="radius"):
        phased_sgd(X, y, LogisticLoss(), radius=0.0)
