"""Private screening of features and the screened Newton solver.

The rules are pure functions of public values (pinned here); every release is
calibrated to its formula (sensitivity, noise from its share of ``rho``) and the
events compose to the budget; without noise the selection is the exact top-k and a
fit on it converges to the non-private optimum on those features. The statistical
audit of the screening through ``fit`` is ``AUDITS["screening"]`` (tests/test_audits.py).
"""

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import expit, log_expit
from sklearn.linear_model import LogisticRegression

from skdp_sparse import DPGreedyCDRegressor, DPSparseLogisticRegression
from skdp_sparse.data import LocalData
from skdp_sparse.optim.losses import LogisticLoss, SquaredLoss
from skdp_sparse.privacy.accounting import compose, gaussian_epsilon, gaussian_mu
from skdp_sparse.solvers import Problem, coordinate_bound_ratio, resolve_solver
from skdp_sparse.solvers._calibration import (
    CALIBRATION_BINS,
    MAJORITY_MARGIN,
    SCALE_LEVELS,
    SCALE_QUANTILE,
    _scale_from_counts,
    fit_binned,
)
from skdp_sparse.solvers._screening import (
    SCREENING_THRESHOLD,
    noise_units,
    null_residuals,
    plan_screening,
    release_mu,
    screen,
)
from skdp_sparse.solvers.screened_newton import (
    CURVATURE_QUANTILE,
    MULTICLASS_CALIBRATION_SHARE,
    MULTICLASS_GAIN_SHARE,
    PRIOR_SCALE,
    SHARES,
    newton_shares,
)
from skdp_sparse.solvers.sgd import SGD_COUNT_SHARE, SGD_SCREENING_SHARE
from skdp_sparse.testing import AUDITS
from skdp_sparse.testing.bounds import assert_pair_audit


def _data(n=400, p=30, seed=0, informative=4):
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=0.3, format="csr", random_state=rng)
    X.data = rng.uniform(0.1, 1.0, X.nnz)
    w = np.zeros(p)
    w[:informative] = rng.choice([-3.0, 3.0], informative)
    y = (rng.random(n) < expit(X @ w)).astype(int)
    return X, y


def _fit(**kw):
    X, y = kw.pop("data", None) or _data()
    kw.setdefault("classes", [0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DPSparseLogisticRegression(**kw).fit(X, y), X, y


# --------------------------------------------------------------------------
# The rules, pinned as functions of public values
# --------------------------------------------------------------------------
def test_constants_are_pinned():
    assert SCREENING_THRESHOLD == 1.0
    assert (SGD_SCREENING_SHARE, SGD_COUNT_SHARE) == (1 / 4, 1 / 25)
    assert (CALIBRATION_BINS, SCALE_LEVELS, SCALE_QUANTILE, MAJORITY_MARGIN) == \
        (20, 48, 0.95, 1.0)
    assert SHARES == {"count": 1 / 25, "association": 3 / 4, "square_norm": 1 / 50,
                      "curvature": 1 / 8, "scale": 1 / 50, "calibration": 1 / 8}
    assert (MULTICLASS_CALIBRATION_SHARE, MULTICLASS_GAIN_SHARE) == (1 / 16, 1 / 64)
    assert (CURVATURE_QUANTILE, PRIOR_SCALE) == (0.5, 2.5)


def test_newton_shares():
    total = sum(SHARES.values())
    shares = newton_shares()
    assert sum(shares.values()) == pytest.approx(1.0, rel=1e-15)
    assert shares == pytest.approx({k: v / total for k, v in SHARES.items()})
    no_count = newton_shares(fit_intercept=False)
    assert "count" not in no_count and sum(no_count.values()) == pytest.approx(1.0)
    # K > 1 classes: their class histograms' own share, and the comparison's.
    multi = newton_shares(n_targets=3)
    assert multi["calibration"] / multi["scale"] == pytest.approx(
        MULTICLASS_CALIBRATION_SHARE / SHARES["scale"])
    assert multi["gain"] / multi["scale"] == pytest.approx(MULTICLASS_GAIN_SHARE
                                                          / SHARES["scale"])
    half = newton_shares(association_share=0.5)
    assert half["association"] == 0.5 and sum(half.values()) == pytest.approx(1.0)
    assert half["curvature"] / half["scale"] == pytest.approx(SHARES["curvature"]
                                                            / SHARES["scale"])


def test_plan_screening_modes():
    kw = dict(count_unit=1.0, association_unit=2.0, floating_point_safe=True)
    assert plan_screening("auto", 50, **kw).mode == "threshold"
    assert plan_screening("none", 50, **kw).mode == "none"
    top = plan_screening(7, 50, **kw)
    assert (top.mode, top.k, top.threshold) == ("top_k", 7, SCREENING_THRESHOLD)
    assert plan_screening(10**9, 50, **kw).k == 50
    assert plan_screening("auto", 50, default="none", **kw).mode == "none"


def test_auto_solver_rule_is_a_function_of_public_values():
    logistic = LogisticLoss()
    # n eps / p >= 200: greedy coordinate descent, otherwise the screened Newton step.
    assert resolve_solver("auto", 32_561, 123, 1.0, loss=logistic) == "greedy_cd"
    assert resolve_solver("auto", 32_561, 123, 10.0, loss=logistic) == "greedy_cd"
    for n, p, eps in [(32_561, 123, 0.1), (25_000, 2**18, 1.0), (3_901, 2**18, 10.0),
                      (7_770, 8_315, 1.0), (49_749, 300, 1.0), (100, 10**7, 0.1)]:
        assert resolve_solver("auto", n, p, eps, loss=logistic) == "screened_newton"
    assert resolve_solver("auto", 24_600, 123, 1.0, loss=logistic) == "greedy_cd"
    assert resolve_solver("auto", 24_599, 123, 1.0, loss=logistic) == "screened_newton"
    # Other losses keep their rule.
    assert resolve_solver("auto", 7_770, 8_315, 1.0, loss=SquaredLoss()) == "sgd"
    assert resolve_solver("auto", 10**5, 10**6, 1.0, loss=SquaredLoss()) == "sparse_sgd"
    assert resolve_solver("sgd", 10, 10**7, 1.0, loss=logistic) == "sgd"


def test_auto_solver_takes_greedy_cd_only_where_coordinate_bounds_are_small():
    logistic = LogisticLoss()
    # One-hot rows of 14 attributes (a9a): a coordinate is 1/sqrt(14) of the row.
    assert coordinate_bound_ratio(1.0, math.sqrt(14), 123) == pytest.approx(1 / math.sqrt(14))
    # The entries' bounds bound the row too, and per-feature bounds take their largest.
    assert coordinate_bound_ratio(1.0, math.inf, 4) == pytest.approx(0.5)
    assert coordinate_bound_ratio([1.0, 3.0, 0.0, 0.0], math.inf, 4) == \
        pytest.approx(3 / math.sqrt(10))
    assert coordinate_bound_ratio(2.0, 1.0, 0) == 1.0
    for eps in (1.0, 10.0):
        assert resolve_solver("auto", 32_561, 123, eps, loss=logistic,
                              norm_bound=math.sqrt(14)) == "greedy_cd"
        # Unit rows of entries bounded by 1 (w8a with norm_bound=1): ratio 1.
        assert resolve_solver("auto", 37_311, 300, eps, loss=logistic,
                              norm_bound=1.0) == "screened_newton"
    # The threshold sqrt(1/2) (b = 1, L = sqrt(2)), on either side of it.
    kw = dict(loss=logistic, feature_bound=1.0)
    assert resolve_solver("auto", 32_561, 123, 10.0, norm_bound=1.4, **kw) == \
        "screened_newton"
    assert resolve_solver("auto", 32_561, 123, 10.0, norm_bound=1.42, **kw) == "greedy_cd"
    # Without noise greedy CD solves exactly, whatever the bounds.
    assert resolve_solver("auto", 37_311, 300, math.inf, loss=logistic,
                          norm_bound=1.0) == "greedy_cd"
    # Only the logistic loss: the squared loss keeps its rule.
    assert resolve_solver("auto", 32_561, 123, 1.0, loss=SquaredLoss(), l1_penalty=True,
                          norm_bound=1.0) == "greedy_cd"


# --------------------------------------------------------------------------
# Calibration of the releases
# --------------------------------------------------------------------------
@pytest.mark.parametrize("safe", [True, False])
def test_noise_units_split_the_budget(safe):
    eps, delta, shares = 1.0, 1e-6, [0.1, 0.3, 0.6]
    units, events = noise_units(eps, delta, shares, safe, ["a", "b", "c"])
    assert compose(events, delta)[0] <= eps
    assert compose(events, delta)[0] == pytest.approx(eps, rel=1e-6)
    mu = gaussian_mu(eps, delta)
    # The safe path's lattice releases pay (1 + 2^-16)(1 + 2^-20) in their unit.
    slack = (1 + 2.0**-16) * (1 + 2.0**-20) if safe else 1.0
    for unit, share, event in zip(units, shares, events, strict=True):
        assert release_mu(event) == pytest.approx(mu * math.sqrt(share), rel=1e-9)
        assert unit == pytest.approx(slack / (mu * math.sqrt(share)), rel=1e-9)
        assert (event.pld is not None and event.pld.lattice) if safe else event.mu
    assert noise_units(math.inf, delta, shares, safe, ["a", "b", "c"])[0] == [0.0] * 3


@pytest.mark.parametrize("safe", [True, False])
def test_screened_newton_spends_exactly_its_budget(safe):
    eps, delta = 1.0, 1e-5
    clf, _, _ = _fit(solver="screened_newton", epsilon=eps, delta=delta,
                     floating_point_safe=safe)
    assert clf.epsilon_spent_ <= eps and clf.epsilon_spent_ == pytest.approx(eps, rel=1e-6)
    events = clf.privacy_events_
    assert [e.name for e in events] == [
        f"screened_newton: {name}" for name in ("class counts", "label association",
                                                "curvature norm", "curvature",
                                                "score scale", "score calibration")]
    shares = newton_shares()
    mus = [release_mu(e) for e in events]
    assert [m * m for m in mus] == pytest.approx(
        [gaussian_mu(eps, delta) ** 2 * s for s in shares.values()], rel=1e-9)
    assert gaussian_epsilon(math.sqrt(sum(m * m for m in mus)), delta) == \
        pytest.approx(eps, rel=1e-6)


def test_sgd_screening_spends_exactly_its_budget():
    eps, delta = 2.0, 1e-5
    # The solver's own releases (the calibrated decision has its tests elsewhere).
    clf, _, _ = _fit(solver="sgd", feature_selection=5, epsilon=eps, delta=delta,
                     max_iter=10, decision="fitted")
    assert clf.epsilon_spent_ <= eps and clf.epsilon_spent_ == pytest.approx(eps, rel=1e-6)
    count, association, steps = clf.privacy_events_
    mu = gaussian_mu(eps, delta)
    assert release_mu(count) ** 2 == pytest.approx(SGD_COUNT_SHARE * mu**2, rel=1e-9)
    assert release_mu(association) ** 2 == pytest.approx(SGD_SCREENING_SHARE * mu**2,
                                                        rel=1e-9)
    # The steps take the rest, composed with the screening in one accountant.
    assert compose([count, association, steps], delta)[0] == pytest.approx(eps, rel=1e-6)


def test_sgd_screening_of_a_regression_releases_no_count():
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPGreedyCDRegressor(solver="sgd", feature_selection=5, epsilon=2.0, delta=1e-5,
                                  max_iter=5, random_state=0).fit(X, y - 0.5)
    assert [e.name for e in reg.privacy_events_][:1] == ["sgd: label association"]
    assert reg.epsilon_spent_ == pytest.approx(2.0, rel=1e-6)
    assert np.count_nonzero(reg.coef_) <= 5 and reg.coef_.shape == (X.shape[1],)


def _problem(**kw):
    return Problem(loss=LogisticLoss(), **kw)


@pytest.mark.parametrize("undernoised", [False, True])
def test_class_counts_audit(undernoised):
    # Worst-case pair of the screening's class counts: one label flips, the positive
    # count moves by its full sensitivity 1. The released rate (monotone in the noisy
    # count) over many runs of screen() bounds epsilon at delta 0.2; the claim is the
    # count's own Gaussian profile (ratio 1.23, claim 1.06). The honest release stayed
    # at 0.51 times the claim, the one with half the noise went to 2.2 times it.
    units, events = noise_units(3.0, 0.1, [0.5, 0.5], True, ["class counts", "association"])
    claim = gaussian_epsilon(release_mu(events[0]), 0.2)
    plan = plan_screening("none", 1, count_unit=units[0] / (2 if undernoised else 1),
                          association_unit=units[1], floating_point_safe=True)
    n = 400
    y = np.where(np.arange(n) < n // 2, 1.0, -1.0)
    y_prime = y.copy()
    y_prime[n // 2] = 1.0
    problem, X, rng = _problem(norm_bound=1.0), sp.csr_matrix((n, 1)), np.random.default_rng(0)
    s, s_prime = (np.array([screen(problem, LocalData(X, labels[:, None]), plan, rng).rates[0]
                            for _ in range(2500)]) for labels in (y, y_prime))
    assert_pair_audit(s, s_prime, claim, 0.2, undernoised)


@pytest.mark.parametrize("rate", [None, 0.5])
def test_association_noise_matches_its_formula(rate):
    # All-zero rows: the release is pure noise, of standard deviation 2 L D times the
    # unit, D = max(p, 1 - p) with p the class rate (1/2 without a count).
    n, p, L = 50, 40_000, 3.0
    Y = np.where(np.arange(n) < 10, 1.0, -1.0)[:, None]
    data = LocalData(sp.csr_matrix((n, p)), Y)
    units, _ = noise_units(1.0, 1e-5, [0.2, 0.5], True, ["c", "a"])
    plan = plan_screening("auto", p, count_unit=units[0] if rate is None else None,
                          association_unit=units[1], floating_point_safe=True)
    out = screen(_problem(norm_bound=L), data, plan, np.random.default_rng(0))
    p_hat = 0.5 if rate is not None else float(out.rates[0])
    assert out.sigma == pytest.approx(2 * L * max(p_hat, 1 - p_hat) * units[1], rel=1e-12)
    assert out.sigma >= 2 * L * max(p_hat, 1 - p_hat) * units[1]
    assert np.std(out.association) == pytest.approx(out.sigma, rel=0.03)
    assert abs(np.mean(out.association)) < 4 * out.sigma / math.sqrt(p)
    # The threshold keeps the coordinates above one noise standard deviation, about 32%.
    assert out.columns.size / p == pytest.approx(2 * 0.1587, abs=0.02)
    assert np.all(np.abs(out.association[out.columns]) > out.sigma)


def test_null_residuals_are_bounded_by_d():
    rng = np.random.default_rng(1)
    for K in (1, 3):
        Y = rng.choice([-1.0, 1.0], size=(30, K))
        rates = rng.uniform(0.01, 0.99, K)
        R, D = null_residuals(_problem(), Y, rates)
        assert np.max(np.linalg.norm(R, axis=1)) <= D + 1e-15
        assert D == pytest.approx(np.sqrt(np.sum(np.maximum(rates, 1 - rates) ** 2)))
    # Targets outside {-1, +1} are clipped, so the bound holds whatever is passed.
    R, D = null_residuals(_problem(), np.array([[5.0], [-7.0]]), np.array([0.3]))
    assert np.max(np.abs(R)) <= D


# --------------------------------------------------------------------------
# Exactness without noise
# --------------------------------------------------------------------------
def _association(X, y, L):
    Xd = X.toarray()
    norms = np.linalg.norm(Xd, axis=1, keepdims=True)
    Xd = Xd * np.minimum(1.0, L / np.maximum(norms, 1e-300))
    return Xd.T @ (y - y.mean()), Xd


def test_selection_is_the_exact_top_k_without_noise():
    X, y = _data(seed=3)
    k = 6
    clf, _, _ = _fit(data=(X, y), solver="sgd", feature_selection=k, epsilon=np.inf,
                     norm_bound=3.0)
    A, _ = _association(X, y, 3.0)
    np.testing.assert_allclose(clf.screening_scores_[0], A, rtol=1e-12, atol=1e-12)
    top = np.sort(np.argsort(-np.abs(A))[:k])
    assert clf.coef_.shape == (1, X.shape[1])
    np.testing.assert_array_equal(np.flatnonzero(clf.coef_[0]), top)


def test_fit_on_the_selection_converges_to_the_non_private_optimum():
    X, y = _data(seed=4, n=300, p=20)
    k, alpha = 5, 0.01
    clf, _, _ = _fit(data=(X, y), solver="sgd", feature_selection=k, epsilon=np.inf,
                     norm_bound=10.0, penalty="l2", alpha=alpha, max_iter=20_000)
    S = np.sort(np.argsort(-np.abs(_association(X, y, 10.0)[0]))[:k])
    Xs, s = X[:, S].toarray(), 2.0 * y - 1.0

    def objective(theta):
        z = Xs @ theta[:k] + theta[k]
        return -np.mean(log_expit(s * z)) + 0.5 * alpha * theta[:k] @ theta[:k]

    best = minimize(objective, np.zeros(k + 1), method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(clf.coef_[0, S], best[:k], atol=2e-4)
    assert clf.intercept_[0] == pytest.approx(best[k], abs=2e-4)
    assert np.all(np.delete(clf.coef_[0], S) == 0.0)


def test_screened_newton_without_noise_is_the_diagonal_newton_step():
    X, y = _data(seed=5)
    clf, _, _ = _fit(data=(X, y), solver="screened_newton", epsilon=np.inf,
                     penalty=None, norm_bound=10.0, feature_bound=10.0)
    A, Xd = _association(X, y, 10.0)
    p_hat = y.mean()
    step = A / (p_hat * (1 - p_hat) * np.sum(Xd**2, axis=0))
    coef = clf.coef_[0]
    cosine = coef @ step / (np.linalg.norm(coef) * np.linalg.norm(step))
    assert cosine == pytest.approx(1.0, abs=1e-12)
    assert coef @ step > 0


# --------------------------------------------------------------------------
# Decisions
# --------------------------------------------------------------------------
def test_fit_binned_is_the_weighted_logistic_regression():
    rng = np.random.default_rng(0)
    t = np.linspace(-0.95, 0.95, 20)
    c1 = rng.integers(0, 50, 20) * (t > 0) + rng.integers(0, 5, 20)
    c0 = rng.integers(0, 50, 20).astype(float)
    a, b = fit_binned(t, c1, c0)
    lr = LogisticRegression(C=1e12, tol=1e-12, max_iter=10_000).fit(
        np.r_[t, t][:, None], np.r_[np.ones(20), np.zeros(20)], sample_weight=np.r_[c1, c0])
    assert (a, b) == pytest.approx((lr.coef_[0, 0], lr.intercept_[0]), rel=1e-4)
    a0, b0 = fit_binned(t, c1, c0, fit_intercept=False)
    assert b0 == 0.0 and a0 > 0


def test_scale_from_counts():
    counts = np.zeros(SCALE_LEVELS)
    counts[3], counts[5] = 11.0, 189.0  # 5.5% of the mass in level 3, (2^-4, 2^-3]
    assert _scale_from_counts(counts, 8.0, 200) == 8.0 * 2.0**-3
    assert _scale_from_counts(-counts, 8.0, 200) == 8.0  # no mass: no clipping
    # Noise on the empty levels above the scores is summed, not clamped at 0: ten
    # empty levels drawing +-3 (each under 5% of the rows) leave the scale where the
    # scores are; clamped, their positive draws alone reached 5% at level 6.
    noisy = np.zeros(SCALE_LEVELS)
    noisy[:10] = np.resize([3.0, -3.0], 10)
    noisy[12], noisy[14] = 11.0, 189.0
    assert _scale_from_counts(noisy, 8.0, 200) == 8.0 * 2.0**-12
    clamped = np.cumsum(np.maximum(noisy, 0))
    assert np.searchsorted(clamped, 0.05 * clamped[-1]) == 6


def test_no_signal_predicts_the_majority():
    rng = np.random.default_rng(2)
    X = sp.random(2000, 50, density=0.2, format="csr", random_state=rng)
    y = (rng.random(2000) < 0.2).astype(int)  # labels independent of X
    clf, _, _ = _fit(data=(X, y), solver="screened_newton", epsilon=0.5, delta=1e-6,
                     random_state=0, norm_bound=math.sqrt(50))
    assert np.all(clf.predict(X) == 0)


def test_fallback_takes_the_majority_of_the_class_counts():
    # Labels independent of X, 55% positive, n = 2000: every fit falls back on the
    # majority. The histograms' class sums (each a sum of 20 noisy cells, sd about 107
    # rows against a margin of 100) pick the wrong class about one time in nine; the
    # class counts' own release (sd about 25 rows) practically never.
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (2000, 5))
    y = (rng.random(2000) < 0.55).astype(int)
    majority = int(y.mean() > 0.5)
    predicted = [np.unique(_fit(data=(X, y), solver="screened_newton", norm_bound=math.sqrt(5),
                                random_state=seed)[0].predict(X)) for seed in range(30)]
    # (2 of these 30 fits predicted the minority for every row with the histograms' sums)
    assert not any(p.tolist() == [1 - majority] for p in predicted), predicted
    assert sum(p.tolist() == [majority] for p in predicted) >= 25, predicted


def test_signal_beats_the_majority():
    X, y = _data(n=3000, seed=6)
    clf, _, _ = _fit(data=(X, y), solver="screened_newton", epsilon=5.0, delta=1e-6,
                     random_state=0, norm_bound=4.0)
    assert clf.score(X, y) > max(y.mean(), 1 - y.mean()) + 0.05


# --------------------------------------------------------------------------
# Estimator surface
# --------------------------------------------------------------------------
def test_feature_selection_needs_a_screening_solver():
    with pytest.raises(ValueError, match="does not screen"):
        _fit(solver="greedy_cd", feature_selection=3)
    _fit(solver="greedy_cd", feature_selection="none", max_iter=3)
    with pytest.raises(ValueError, match="does not screen"):
        _fit(solver="output_perturbation", penalty="l2", feature_selection=3)


def test_screened_newton_needs_the_logistic_loss():
    X, y = _data()
    with pytest.raises(ValueError, match="logistic"):
        DPGreedyCDRegressor(solver="screened_newton").fit(X, y.astype(float))


def test_screened_newton_multiclass_and_without_intercept():
    X, y = _data(n=600, seed=7)
    y3 = y + (X[:, 5].toarray().ravel() > 0.5)
    clf, _, _ = _fit(data=(X, y3), classes=[0, 1, 2], solver="screened_newton",
                     epsilon=2.0, delta=1e-5)
    assert clf.coef_.shape == (3, X.shape[1]) and clf.screening_scores_.shape == (3, 30)
    assert clf.epsilon_spent_ == pytest.approx(2.0, rel=1e-6)
    clf, _, _ = _fit(solver="screened_newton", fit_intercept=False, epsilon=2.0)
    assert np.all(clf.intercept_ == 0.0)
    assert "count" not in " ".join(e.name for e in clf.privacy_events_)


def test_screened_newton_is_the_default_for_text_shapes():
    X, y = _data(n=50, p=400, seed=8)
    clf, _, _ = _fit(data=(X, y), epsilon=1.0, delta=1e-4)
    assert clf.solver_ == "screened_newton"
    assert clf.n_iter_ == 1


def test_screening_audit_is_registered():
    audit = AUDITS["screening"]
    (X, y), (X2, y2) = audit.datasets
    np.testing.assert_array_equal(y, y2)
    assert (X - X2).nnz == 1


# --------------------------------------------------------------------------
# feature_selection="sure": the threshold chosen from the released association
# --------------------------------------------------------------------------
def _stein_risk(z, t):
    return z.size - 2.0 * np.sum(np.abs(z) <= t) + np.sum(np.minimum(z * z, t * t))


@pytest.mark.parametrize("signals", [10, 3000])
def test_sure_threshold_minimises_steins_risk(signals):
    """The threshold is the minimiser of Stein's unbiased risk estimate of the soft-
    thresholded vector (checked on a fine grid): high where few coordinates carry
    signal, low where many do."""
    from skdp_sparse.solvers._screening import sure_threshold

    rng = np.random.default_rng(signals)
    z = rng.normal(size=20_000)
    z[:signals] += rng.choice([-4.0, 4.0], signals)
    t = sure_threshold(z)
    grid = np.linspace(0.0, 6.0, 3001)
    assert _stein_risk(z, t) <= min(_stein_risk(z, g) for g in grid) + 1e-9
    assert (t > 2.4) if signals == 10 else (t < 1.5)
    assert sure_threshold(np.zeros(0)) == 0.0


def test_sure_screening_is_post_processing_and_keeps_fewer_nulls():
    """``feature_selection="sure"`` releases what ``"auto"`` releases (same events, same
    noise for the same seed) and only cuts the released association elsewhere: on
    many features of which few carry signal it keeps fewer of the others."""
    X, y = _data(n=2000, p=3000, informative=5)
    kw = dict(solver="screened_newton", epsilon=2.0, delta=1e-6, random_state=3)
    auto, _, _ = _fit(data=(X, y), **kw)
    sure, _, _ = _fit(data=(X, y), feature_selection="sure", **kw)
    assert [(e.name, e.epsilon, e.delta) for e in sure.privacy_events_] == \
        [(e.name, e.epsilon, e.delta) for e in auto.privacy_events_]
    assert sure.epsilon_spent_ == auto.epsilon_spent_
    kept_auto, kept_sure = np.flatnonzero(auto.coef_), np.flatnonzero(sure.coef_)
    assert set(kept_sure) < set(kept_auto)
    assert np.sum(kept_sure >= 5) < np.sum(kept_auto >= 5) / 10


def test_sure_takes_the_screening_solver_and_is_refused_elsewhere():
    X, y = _data(n=4000, p=3, informative=2)
    clf, _, _ = _fit(data=(X, y), feature_selection="sure", epsilon=1.0, delta=1e-6,
                     random_state=0)
    assert clf.solver_ == "screened_newton"
    for solver in ("greedy_cd", "sgd", "bounded_newton"):
        with pytest.raises(ValueError, match=r"feature_selection='sure'.*screened_newton"):
            _fit(data=(X, y), solver=solver, feature_selection="sure", epsilon=1.0,
                 delta=1e-6)
    # A regressor has no label association to cut: refused as a parameter value.
    with pytest.raises(ValueError, match="feature_selection"):
        DPGreedyCDRegressor(feature_selection="sure", epsilon=1.0, delta=1e-6).fit(
            X, y.astype(float))


def test_sure_with_more_than_two_classes_keeps_auto_on_the_screening_solver():
    """With three classes, epsilon finite and delta > 0, ``solver="auto"`` fits the
    multinomial loss, whose solver takes no screening rule: ``"sure"``, like an integer
    ``k``, keeps the fit one-vs-rest on ``screened_newton`` (it was refused by the
    solver ``"auto"`` had chosen). The columns kept are those whose largest association
    over the classes passes one cut."""
    rng = np.random.default_rng(4)
    X = sp.random(3000, 200, density=0.05, format="csr", random_state=rng)
    y = np.argmax(X[:, :3].toarray() + 0.3 * rng.random((3000, 3)), axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPSparseLogisticRegression(feature_selection="sure", epsilon=1.0, delta=1e-6,
                                         random_state=0).fit(X, y)
    assert clf.solver_ == "screened_newton" and clf.multi_class_ == "ovr"
    score = np.max(np.abs(clf.screening_scores_), axis=0)
    kept = np.any(clf.coef_ != 0, axis=0)
    assert 0 < kept.sum() < X.shape[1]
    assert score[kept].min() > score[~kept].max()


def test_sure_threshold_is_zero_where_every_observation_is_large():
    """Stein's risk is minimised at 0 where every observation is large: ``SURE(0) = p``
    against ``p - 2 + ...`` with the smallest ``|z_j|`` squared counted p times at any
    positive candidate. Taking the smallest ``|z_j|`` instead zeroed it whatever its
    size: with one feature, ``"sure"`` left every fit without a coefficient."""
    from skdp_sparse.solvers._screening import sure_threshold

    z = np.array([5.0, -6.0, 7.0])
    assert sure_threshold(z) == 0.0
    assert _stein_risk(z, 0.0) < _stein_risk(z, 5.0)
    assert sure_threshold([3.0]) == 0.0 and sure_threshold([0.5]) == 0.5
    rng = np.random.default_rng(0)
    X = rng.random((4000, 1))
    y = (X[:, 0] > 0.5).astype(int)
    sure, _, _ = _fit(data=(X, y), feature_selection="sure", epsilon=1.0, delta=1e-6,
                      random_state=0)
    auto, _, _ = _fit(data=(X, y), solver="screened_newton", epsilon=1.0, delta=1e-6,
                      random_state=0)
    assert sure.solver_ == "screened_newton"
    assert sure.coef_[0, 0] > 0 and auto.coef_[0, 0] > 0
