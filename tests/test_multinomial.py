"""The multinomial (softmax) loss of ``DPSparseLogisticRegression``
(``multi_class="multinomial"``, noisy gradient descent, ``solver="sgd"``).

Calibration against the formula (one Gaussian release of the K x (p + 1) gradient sum
per step, noise ``2 sqrt(2) sqrt(L^2 + 1) / mu_step`` per entry) and against
dp-accounting; a statistical audit through the estimator's fit that catches half the
noise; exactness without noise against scikit-learn's multinomial fit; the choice of
``multi_class="auto"`` and the errors before any budget.
"""

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from sklearn.linear_model import LogisticRegression

import skdp_sparse.solvers.sgd as sgd_module
from skdp_sparse import DPSparseLogisticRegression, privacy_ledger
from skdp_sparse.privacy.accounting import PrivacyEvent, compose, gaussian_mu
from skdp_sparse.privacy.auditing import epsilon_lower_bound
from skdp_sparse.privacy.discrete import SENSITIVITY_SLACK
from skdp_sparse.privacy.subsampling import subsampled_gaussian_event


def _three_classes(n=90, p=5, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p)) * (rng.random((n, p)) < 0.6)
    W = rng.normal(size=(3, p)) * 2
    y = np.argmax(X @ W.T + rng.gumbel(size=(n, 3)), axis=1)
    return (sp.csr_matrix(X) if sparse else X), y


def _model(**kw):
    params = dict(epsilon=1.0, delta=1e-6, classes=[0, 1, 2], solver="sgd",
                  multi_class="multinomial", random_state=0)
    return DPSparseLogisticRegression(**{**params, **kw})


# --------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon, max_iter", [(0.5, 20), (4.0, 200)])
@pytest.mark.filterwarnings("ignore::skdp_sparse.exceptions.PrivacyLeakWarning")
def test_one_release_per_step_composes_to_the_budget(epsilon, max_iter):
    X, y = _three_classes()
    model = _model(epsilon=epsilon, max_iter=max_iter, floating_point_safe=False).fit(X, y)
    (event,) = model.privacy_events_
    assert event.count == max_iter and model.n_iter_ == max_iter
    # Full batch: T Gaussian releases of ratio mu_step compose to sqrt(T) mu_step
    # (GDP), the budget's mu, whatever the number of classes.
    assert math.sqrt(max_iter) * event.mu == pytest.approx(gaussian_mu(epsilon, 1e-6),
                                                           rel=1e-6)
    assert model.epsilon_spent_ == pytest.approx(epsilon, rel=1e-6)
    # dp-accounting's PLD of the same T Gaussian releases.
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_event.GaussianDpEvent(1 / event.mu), max_iter)
    assert acc.get_epsilon(1e-6) == pytest.approx(model.epsilon_spent_, rel=2e-3)


@pytest.mark.filterwarnings("ignore::skdp_sparse.exceptions.PrivacyLeakWarning")
def test_noise_per_entry_is_the_formula():
    # Empty rows, no intercept, one step of rate 1 from 0: coef_ = -noise / n, each of
    # its K x p entries N(0, sigma^2) with sigma = (2 sqrt(2) L) / mu_step: the
    # replace-one sensitivity of the multinomial gradient sum over the step's ratio.
    n, p, norm_bound = 40, 3000, 2.0
    X = sp.csr_matrix((n, p))
    y = np.arange(n) % 3
    model = _model(epsilon=1.0, max_iter=1, learning_rate=1.0, fit_intercept=False,
                   penalty="none", norm_bound=norm_bound, floating_point_safe=False).fit(X, y)
    sigma = 2 * math.sqrt(2) * norm_bound / model.privacy_events_[0].mu
    assert model.coef_.shape == (3, p)
    assert np.std(model.coef_ * n) == pytest.approx(sigma, rel=0.03)
    # One-vs-rest on the same budget releases K sums of sensitivity 2 L each.
    ovr = _model(epsilon=1.0, max_iter=1, learning_rate=1.0, fit_intercept=False,
                 penalty="none", norm_bound=norm_bound, floating_point_safe=False,
                 multi_class="ovr", decision="fitted").fit(X, y)
    ovr_sigma = np.std(ovr.coef_ * n)
    assert ovr_sigma / sigma == pytest.approx(math.sqrt(3 / 2), rel=0.05)


# --------------------------------------------------------------------------
# Audit through the fit (the safe path, the default). One full-batch step from 0
# without intercept moves column j of coef_ by -eta (noisy gradient sum of column j) / n,
# a function of the rows holding feature j only: with one row per feature, a fit gives
# one independent sample per feature. Row j is x_j = +1 in S and -1 in S', class 0 in
# both: the column's sum moves by 2 (u - e_0), u = (1/K, ..., 1/K), of norm
# 2 sqrt(1 - 1/K), against the 2 sqrt(2) the accounting charges (tight only where the
# softmax puts all its mass on a wrong class, which a step from 0 never does). The
# audit is set against the epsilon the fit's own events give for this pair; with 10^5
# samples a side it catches noise 1/sqrt(2) times too small (the sensitivity of a
# one-vs-rest problem, without the softmax's sqrt(2)), not only half the noise.
# --------------------------------------------------------------------------
CLAIM, DELTA, CONFIDENCE = 2.0, 1e-2, 0.99
_K, _FEATURES, _FITS = 10, 50_000, 2
_SHIFT = 2 * math.sqrt(1 - 1 / _K)
_DIRECTION = np.full(_K, -1.0 / _K)
_DIRECTION[0] += 1.0
_DIRECTION /= np.linalg.norm(_DIRECTION)  # -(u - e_0), normalised


def _rows(flipped):
    values = np.full(_FEATURES, -1.0 if flipped else 1.0)
    X = sp.csr_matrix((values, np.arange(_FEATURES), np.arange(_FEATURES + 1)),
                      shape=(_FEATURES, _FEATURES))
    return X, np.zeros(_FEATURES, dtype=int)


def _fit_outputs(flipped, fits, seed, epsilon):
    X, y = _rows(flipped)
    out = []
    for i in range(fits):
        model = _model(epsilon=epsilon, delta=DELTA, classes=list(range(_K)), penalty="none",
                       fit_intercept=False, max_iter=1, learning_rate=1.0,
                       random_state=seed + i).fit(X, y)
        out.append(_DIRECTION @ model.coef_)
    return np.concatenate(out), model


def _pair_epsilon(model):
    """Epsilon of this pair's release from the fit's event: the safe step's rho is
    ``((1 + 2^-16) 2 / z)^2 / 2``, its noise ``z C2`` with ``C2 = sqrt(2) L``, L = 1."""
    (event,) = model.privacy_events_
    assert event.name == "discrete_gaussian" and event.count == 1
    z = 2 * (1 + SENSITIVITY_SLACK) / math.sqrt(2 * event.rho)
    return compose([PrivacyEvent.gaussian(_SHIFT / (z * math.sqrt(2)))], DELTA)[0]


@pytest.mark.parametrize("noise_factor", [1.0, 1 / math.sqrt(2), 0.5])
def test_multinomial_fit_audit(noise_factor, monkeypatch):
    # The requested epsilon that puts the honest pair at CLAIM.
    z = _SHIFT / (math.sqrt(2) * gaussian_mu(CLAIM, DELTA))
    epsilon = compose([subsampled_gaussian_event(z, 1.0, 1, floating_point_safe=True)],
                      DELTA)[0]
    if noise_factor != 1.0:
        real = sgd_module.subsampled_noise_multiplier
        monkeypatch.setattr(sgd_module, "subsampled_noise_multiplier",
                            lambda *a, **k: noise_factor * real(*a, **k))
    s, model = _fit_outputs(False, _FITS, 0, epsilon)
    s_prime, _ = _fit_outputs(True, _FITS, 10**6, epsilon)
    bound = _pair_epsilon(model)
    result = epsilon_lower_bound(s, s_prime, delta=DELTA, confidence=CONFIDENCE, rng=0)
    if noise_factor != 1.0:
        # The event follows the patched multiplier: set against the unpatched pair.
        honest = compose([PrivacyEvent.gaussian(_SHIFT / (z * math.sqrt(2)))], DELTA)[0]
        assert honest == pytest.approx(CLAIM, rel=1e-3)
        assert honest < result.epsilon_lb <= bound
    else:
        assert bound == pytest.approx(CLAIM, rel=1e-3)
        # Within 0.5 of the pair's epsilon: the audit has the power to see a gap.
        assert bound - 0.5 < result.epsilon_lb <= bound <= epsilon


# --------------------------------------------------------------------------
# Exactness without noise
# --------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_noise_off_matches_sklearn_multinomial(sparse, fit_intercept):
    X, y = _three_classes(sparse=sparse)
    n, alpha = X.shape[0], 0.1
    model = _model(epsilon=np.inf, penalty="l2", alpha=alpha, max_iter=1500,
                   fit_intercept=fit_intercept, norm_bound=1e3).fit(X, y)
    assert model.multi_class_ == "multinomial"
    # scikit-learn: C sum_i loss_i + ||W||^2 / 2, i.e. C = 1 / (n alpha).
    ref = LogisticRegression(C=1 / (n * alpha), tol=1e-12, max_iter=10000,
                             fit_intercept=fit_intercept).fit(X, y)
    np.testing.assert_allclose(model.coef_, ref.coef_, atol=1e-7)
    np.testing.assert_allclose(model.intercept_, ref.intercept_ - ref.intercept_.mean(),
                               atol=1e-7)
    np.testing.assert_allclose(model.predict_proba(X), ref.predict_proba(X), atol=1e-7)
    np.testing.assert_array_equal(model.predict(X), ref.predict(X))


def test_sparse_and_dense_input_give_the_same_private_fit():
    X, y = _three_classes(sparse=True)
    a = _model(max_iter=30).fit(X, y)
    b = _model(max_iter=30).fit(X.toarray(), y)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------
# multi_class="auto" and the errors
# --------------------------------------------------------------------------
def test_auto_is_multinomial_sgd_for_more_than_two_classes_only():
    X, y = _three_classes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPSparseLogisticRegression(epsilon=1.0, classes=[0, 1, 2],
                                           random_state=0).fit(X, y)
    assert model.solver_ == "sgd" and model.multi_class_ == "multinomial"
    assert len(model.privacy_events_) == 1
    # Two classes: one binary problem, whatever multi_class says.
    binary = _model(classes=[0, 1]).fit(X, (y > 0).astype(int))
    assert binary.multi_class_ == "ovr" and binary.coef_.shape == (1, X.shape[1])
    # A solver without the multinomial loss keeps one-vs-rest under "auto".
    other = DPSparseLogisticRegression(epsilon=1.0, classes=[0, 1, 2], penalty="l2",
                                       solver="output_perturbation", multi_class="auto",
                                       random_state=0).fit(X, y)
    assert other.multi_class_ == "ovr" and other.coef_.shape == (3, X.shape[1])
    # One-vs-rest on request, with its calibrated decision.
    ovr = _model(multi_class="ovr").fit(X, y)
    assert ovr.multi_class_ == "ovr"
    assert any(e.name.startswith("decision:") for e in ovr.privacy_events_)


@pytest.mark.parametrize("kwargs", [dict(feature_selection=3), dict(decision="calibrated")])
@pytest.mark.parametrize("solver", ["auto", "sgd"])
def test_auto_keeps_one_vs_rest_for_its_own_settings(kwargs, solver):
    # Screening and the calibrated decision exist for one-vs-rest problems: under
    # multi_class="auto" they fit one-vs-rest, as they did before the multinomial loss,
    # instead of an error about a multi_class the call did not set.
    X, y = _three_classes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPSparseLogisticRegression(epsilon=1.0, classes=[0, 1, 2], solver=solver,
                                           random_state=0, **kwargs).fit(X, y)
    assert model.multi_class_ == "ovr" and model.coef_.shape == (3, X.shape[1])


def test_predict_proba_is_the_softmax_of_the_scores():
    X, y = _three_classes()
    model = _model(max_iter=30).fit(X, y)
    scores = model.decision_function(X)
    expected = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict_proba(X), expected, rtol=1e-12)


@pytest.mark.parametrize("kwargs, match", [
    (dict(solver="greedy_cd"), r"multi_class='multinomial' runs with solver in \['sgd'\]"),
    (dict(solver="cd"), "fits one-vs-rest problems only"),
    (dict(decision="calibrated"), "decision='calibrated' calibrates one-vs-rest"),
    (dict(feature_selection=2), "screens features for one-vs-rest problems only"),
])
def test_unsupported_settings_fail_before_any_budget(kwargs, match):
    X, y = _three_classes()
    with privacy_ledger(max_epsilon=10.0, max_delta=1e-3) as ledger:
        with pytest.raises(ValueError, match=match):
            _model(**kwargs).fit(X, y)
    assert len(ledger) == 0 and ledger.pending() == []


def _plain_multinomial_gradient_sum(rows, Y, d, theta):
    # The sum as one product of all K classes (the reference bits).
    margins = np.asarray(rows @ theta[:, :d].T) + theta[:, d]
    margins = margins - margins.max(axis=1, keepdims=True)
    prob = np.exp(margins)
    prob /= prob.sum(axis=1, keepdims=True)
    residual = prob - (Y > 0)
    out = np.empty_like(theta)
    out[:, :d] = np.asarray(rows.T @ residual).T
    out[:, d] = residual.sum(axis=0)
    return out.ravel()


def test_multinomial_gradient_sum_holds_one_parameter_matrix_and_keeps_its_bits():
    # At p = 10^7 and K = 5 a parameter matrix is 400 MB: the sum formed rows^T R as a
    # p x K matrix, copied it into a matrix of its own and that into the block's vector
    # (four such matrices traced). One class at a time, into the block's vector: the
    # result and the transient copy of W that rows @ W^T makes.
    import tracemalloc

    from skdp_sparse.optim.losses import LogisticLoss
    from skdp_sparse.solvers._gradient import gradient_bounds
    from skdp_sparse.solvers._multinomial import (
        block_multinomial_gradient_sum,
        multinomial_bounds,
    )
    from skdp_sparse.testing.solver_api import make_problem

    rng = np.random.default_rng(2)
    n, d, K = 300, 200_000, 4
    rows = sp.random(n, d, density=2e-4, format="csr", random_state=3)
    Y = np.where(np.arange(K) == rng.integers(0, K, n)[:, None], 1.0, -1.0)
    bounds = multinomial_bounds(gradient_bounds(make_problem(LogisticLoss()), d,
                                                private=True))
    theta = rng.normal(size=(K, d + 1))
    want = _plain_multinomial_gradient_sum(rows, Y, d, theta)
    tracemalloc.start()
    got = block_multinomial_gradient_sum(rows, Y, 0, bounds, theta, None)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got[:-1].tobytes() == want.tobytes() and got[-1] == n
    assert peak < 2.3 * theta.nbytes


def test_multinomial_steps_keep_few_parameter_matrices():
    # Each step's gradient sum and noisy gradient were kept until the next step's sum
    # was computed beside them, and the lattice of the safe release rounded into a new
    # matrix: eight K x p matrices at the peak of a step (3.06 GB traced at p = 10^7,
    # K = 5), five now (the iterate, its average, the sum, its lattice and the release).
    import tracemalloc

    rng = np.random.default_rng(4)
    n, p, K = 400, 200_000, 5
    X = sp.random(n, p, density=1e-4, format="csr", random_state=5)
    y = rng.integers(0, K, n)
    clf = DPSparseLogisticRegression(epsilon=1.0, delta=1e-6, classes=list(range(K)),
                                     max_iter=3, random_state=0)
    clf.fit(X[:50], y[:50])  # compiled outside the measure
    tracemalloc.start()
    clf.fit(X, y)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert clf.solver_ == "sgd" and clf.multi_class_ == "multinomial"
    assert peak < 6.0 * K * (p + 1) * 8
