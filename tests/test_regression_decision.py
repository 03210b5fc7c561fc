"""The calibrated decision of a regression (:mod:`skdp_sparse.solvers.decision`).

The solver runs on part of the budget; the centre of its scores (sensitivity 2), the
scale histogram of the centred scores (sqrt(2); l1 2) and one release of the moment
sums of the clipped, centred, scaled score ``u`` and the clipped target ``t`` (l2
sensitivity ``2 sqrt(2)``, l1 5) refit the slope and the intercept by least squares,
shrunk to the private mean of the targets where the noise hides the slope.
Both releases are composed with the solver's steps, so the fit spends its
``(epsilon, delta)``.
"""

import itertools
import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from skdp_sparse import DPGreedyCDRegressor
from skdp_sparse.data import LocalData
from skdp_sparse.linear_model import DPOutputPerturbationRegressor
from skdp_sparse.privacy.accounting import compose, gaussian_mu
from skdp_sparse.solvers import _calibration
from skdp_sparse.solvers import decision as D
from skdp_sparse.solvers._calibration import (
    MOMENT_SENSITIVITY,
    MOMENT_SENSITIVITY_L1,
    calibrate_regression,
    regression_line,
)
from skdp_sparse.solvers._screening import release_mu
from skdp_sparse.solvers.sgd import noise_ridge
from skdp_sparse.testing.bounds import assert_pair_audit

SOLVERS = ["sgd", "sparse_sgd", "phased_sgd", "cd", "output_perturbation", "bounded_newton"]


def _data(n=4000, p=10, noise=0.3, seed=0):
    """Unit rows and targets in [-1, 1] linear in them, plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    w = rng.normal(size=p)
    y = np.clip(0.8 * X @ w / np.linalg.norm(w) + 0.2 + noise * rng.normal(size=n), -1, 1)
    return X, y


def _split(X, y, n_train=None):
    """Training rows, then test rows of the same draw (the first half by default)."""
    n_train = X.shape[0] // 2 if n_train is None else n_train
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def _fit(solver, epsilon=1.0, delta=1e-6, seed=0, X=None, y=None, **kw):
    if solver == "output_perturbation":
        kw.setdefault("penalty", "l2")
    if X is None:
        X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DPGreedyCDRegressor(epsilon=epsilon, delta=delta, solver=solver,
                                   random_state=seed, **kw).fit(X, y)


def _decision_events(model):
    return [e for e in model.privacy_events_ if e.name.startswith("decision:")]


def _r2(model, X, y):
    return 1.0 - np.mean((model.predict(X) - y) ** 2) / np.var(y)


def test_moment_sensitivities_are_the_largest_change_of_one_row():
    # A row adds (u, u^2, t, u t) with u, t in [-1, 1]: the largest change over a grid
    # (which holds the maximisers) is the constant, and no pair exceeds it.
    grid = np.linspace(-1.0, 1.0, 41)
    u, t = np.meshgrid(grid, grid, indexing="ij")
    v = np.stack([u.ravel(), u.ravel() ** 2, t.ravel(), (u * t).ravel()], axis=1)
    diff = v[:, None, :] - v[None, :, :]
    assert np.sqrt((diff**2).sum(-1)).max() == pytest.approx(MOMENT_SENSITIVITY, abs=1e-12)
    assert np.abs(diff).sum(-1).max() == pytest.approx(MOMENT_SENSITIVITY_L1, abs=1e-12)


@pytest.mark.parametrize("n, epsilon", [(200, 1.0), (14_000, 0.1), (14_000, 1.0),
                                        (10**6, 1.0)])
@pytest.mark.parametrize("safe", [False, True])
def test_share_and_units_follow_their_formulas(n, epsilon, safe):
    delta = 1.0 / n**2
    mu = gaussian_mu(epsilon, delta)
    split = D.REGRESSION_SPLIT["moments"]
    need = MOMENT_SENSITIVITY**2 / (D.MOMENT_NOISE**2 * n**2 * mu**2 * split)
    share = D.decision_share(n, 1, mu, regression=True)
    assert share == pytest.approx(min(D.MAX_REGRESSION_SHARE, need), rel=1e-12)
    units, events = D.decision_units(epsilon, delta, safe, n, 1, regression=True)
    assert D.decision_splits(1, regression=True) == D.REGRESSION_SPLIT
    assert [e.name for e in events] == ["decision: centre of the scores",
                                        "decision: scale histogram",
                                        "decision: moments of score and target"]
    for (name, part), event in zip(D.REGRESSION_SPLIT.items(), events, strict=True):
        assert units[name] == pytest.approx(1.0 / (mu * math.sqrt(share * part)), rel=1e-12)
        if safe:
            assert 2.0 / event.pld.noise_multiplier == pytest.approx(1.0 / units[name],
                                                                     rel=1e-4)
        else:
            assert event.mu == pytest.approx(1.0 / units[name], rel=1e-12)
    # Where the share suffices, each moment sum's noise is MOMENT_NOISE of n.
    if need < D.MAX_REGRESSION_SHARE:
        assert MOMENT_SENSITIVITY * units["moments"] == pytest.approx(D.MOMENT_NOISE * n,
                                                                      rel=1e-9)


@pytest.mark.parametrize("n, epsilon", [(200, 1.0), (14_000, 1.0), (10**6, 0.1)])
def test_pure_units_follow_their_formula(n, epsilon):
    split = D.REGRESSION_SPLIT["moments"]
    need = math.sqrt(2) * MOMENT_SENSITIVITY_L1 / (D.MOMENT_NOISE * n * epsilon * split)
    share = D.decision_share_pure(n, 1, epsilon, regression=True)
    assert share == pytest.approx(min(D.MAX_REGRESSION_SHARE, need), rel=1e-12)
    units, events = D.decision_units(epsilon, 0.0, True, n, 1, regression=True)
    for (name, part), event in zip(D.REGRESSION_SPLIT.items(), events, strict=True):
        assert event.epsilon == pytest.approx(epsilon * share * part, rel=1e-12)
        assert event.delta == 0 and units[name] == pytest.approx(1 / event.epsilon)
    if need < D.MAX_REGRESSION_SHARE:
        sd = math.sqrt(2) * MOMENT_SENSITIVITY_L1 * units["moments"]
        assert sd == pytest.approx(D.MOMENT_NOISE * n, rel=1e-9)


def test_decision_events_match_dp_accounting():
    dpa = pytest.importorskip("dp_accounting")

    from skdp_sparse.privacy.subsampling import subsampled_gaussian_event
    delta = 1e-8
    units, events = D.decision_units(1.0, delta, False, 2000, 1, regression=True)
    steps = subsampled_gaussian_event(3.0, 0.02, count=300)
    ours = compose([steps, *events], delta)[0]
    acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE,
                                value_discretization_interval=1e-4)
    acc.compose(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(3.0)), 300)
    for name in D.REGRESSION_SPLIT:
        # Noise ``unit`` per unit of l2 sensitivity: dp-accounting's replace-one
        # GaussianDpEvent(2 unit).
        acc.compose(dpa.GaussianDpEvent(2.0 * units[name]))
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=2e-3)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("epsilon", [0.3, 3.0])
def test_fit_spends_its_budget_with_the_decision(solver, safe, epsilon):
    m = _fit(solver, epsilon=epsilon, floating_point_safe=safe, decision="calibrated")
    assert [e.name for e in _decision_events(m)] == [
        "decision: centre of the scores", "decision: scale histogram",
        "decision: moments of score and target"]
    assert epsilon * (1 - 0.002) <= m.epsilon_spent_ <= epsilon * (1 + 1e-9)
    assert m.delta_spent_ <= 1e-6 * (1 + 1e-9)
    assert compose(m.privacy_events_, 1e-6)[0] == pytest.approx(m.epsilon_spent_)


def test_output_perturbation_spends_its_pure_budget_with_the_decision():
    X, y = _data(n=20_000)
    m = DPOutputPerturbationRegressor(epsilon=1.0, random_state=0).fit(X, y)
    assert len(_decision_events(m)) == 3
    assert all(e.delta == 0 for e in m.privacy_events_) and m.delta_spent_ == 0
    assert m.epsilon_spent_ == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("solver", SOLVERS)
def test_moments_get_the_planned_noise(solver, spy_on_releases):
    captured, _ = spy_on_releases()
    X, y = _data()
    _fit(solver, X=X, y=y, decision="calibrated")
    units, _ = D.decision_units(1.0, 1e-6, True, X.shape[0], 1, regression=True)
    calls = [(c[0].shape, c[1], c[2]) for c in captured]
    assert [c[0] for c in calls] == [(1,), (1, _calibration.SCALE_LEVELS), (4,)]
    assert calls[0][1:] == (2.0, pytest.approx(units["location"]))
    assert calls[1][1:] == (pytest.approx(math.sqrt(2)), pytest.approx(units["scale"]))
    assert calls[2][1:] == (pytest.approx(MOMENT_SENSITIVITY), pytest.approx(units["moments"]))


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_regression_line_without_noise_is_least_squares(fit_intercept):
    rng = np.random.default_rng(0)
    u = np.clip(rng.normal(0.1, 0.4, size=500), -1, 1)
    t = np.clip(0.6 * u - 0.2 + 0.1 * rng.normal(size=500), -1, 1)
    moments = np.array([u.sum(), u @ u, t.sum(), u @ t])
    a, b = regression_line(moments, u.size, 0.0, fit_intercept)
    F = np.column_stack([u, np.ones_like(u)])[:, : 2 if fit_intercept else 1]
    expected = np.linalg.lstsq(F, t, rcond=None)[0]
    assert a == pytest.approx(expected[0], rel=1e-10)
    assert b == (pytest.approx(expected[1], rel=1e-10) if fit_intercept else 0.0)


def test_regression_line_shrinks_the_slope_to_the_mean_under_noise():
    # A slope of 0.05 with cov's noise sd about its size: shrunk by 1 - (sd/a)^2, to 0
    # within one sd (the prediction is then the mean of t).
    n = 1000
    moments = np.array([0.0, 0.3 * n, 0.2 * n, 0.3 * 0.05 * n])
    # cov = 0.015 with noise sd sqrt(1 + mean_t^2) / n, var = 0.3 with sd 1 / n: a
    # small shrink of each.
    a_clear, _ = regression_line(moments, n, 1.0)
    cov_sd, var_sd = math.sqrt(1 + 0.2**2) / n, 1.0 / n
    expected = 0.015 * 0.3 / (0.3**2 + 4 * var_sd**2) * (1 - (cov_sd / 0.015) ** 2)
    assert a_clear == pytest.approx(expected, rel=1e-12)
    a, b = regression_line(moments, n, 0.3 * 0.05 * n)
    assert a == 0.0 and b == pytest.approx(0.2)
    # A variance of u not above 0 (noise): no slope either.
    a, b = regression_line(np.array([0.0, -0.01 * n, 0.2 * n, 0.005 * n]), n, 0.01 * n)
    assert a == 0.0 and b == pytest.approx(0.2)


def test_regression_line_keeps_a_clear_covariance_over_a_noisy_variance():
    # The fit that lost its slope (California housing, sgd at epsilon 10): var 0.018
    # with noise sd 0.01, cov 0.06 with sd 0.01. The slope stays, at most
    # cov / (4 sd_v) however close the noisy variance comes to 0.
    n, sd = 14448, 144.48
    moments = np.array([-44.7, 262.5, -2488.6, 874.2])
    a, _ = regression_line(moments, n, sd)
    assert 1.0 < a < 3.0
    for var in (1e-6, 1e-3, 0.01, 0.05):
        a, _ = regression_line(np.array([0.0, var * n, 0.0, 0.06 * n]), n, sd)
        assert 0 < a <= 0.06 / (4 * sd / n) * (1 + 1e-12)


#: Row 0 of the worst-case pairs of the moment sums, ``(x, y)`` on each side (the
#: score is ``x``, so ``u = x``): for the l2 norm ``(1, 1)`` against ``(-1, 1)``, a
#: change ``(u - u', u^2 - u'^2, t - t', ut - u't') = (2, 0, 0, 2)`` of norm
#: ``2 sqrt(2)``; for the l1 norm ``(-1, -1)`` against ``(0, 1)``, ``(-1, 1, -2, 1)``
#: of norm 5.
_WORST_ROWS = {False: ((1.0, 1.0), (-1.0, 1.0)), True: ((-1.0, -1.0), (0.0, 1.0))}


def _pair_releases(monkeypatch, spy_on_releases, name, pure, rows, epsilon=30.0, n=200):
    """The release ``name`` (of :data:`~skdp_sparse.solvers.decision.REGRESSION_SPLIT`)
    of the real calibration at ``epsilon`` on a pair: ``n`` rows on one axis (the score
    is ``x``, its bound 1), row 0 being ``rows[0]`` on one side and ``rows[1]`` on the other, as
    ``(x, y)``. Without an intercept, so that the centre is 0 on both sides. Returns
    ``(units, claim, claim_delta, real, releases)``, ``releases`` holding each side's
    ``(value, sensitivity, unit, floating_point_safe)`` and ``claim`` the epsilon the
    release's event claims."""
    claim_delta = 0.05
    index = list(D.REGRESSION_SPLIT).index(name)
    units, events = D.decision_units(epsilon, 0.0 if pure else 1e-3, True, n, 1,
                                     regression=True)
    claim = compose([events[index]], claim_delta)[0]
    captured, real = spy_on_releases(pure)
    if name != "scale":
        # The releases compose adaptively: an audit of one may fix the outputs of the
        # others. The scale is 1 (half the centred scores' bound of 2) on both sides,
        # whatever its noisy counts, so that u = x.
        monkeypatch.setattr(_calibration, "_scale_from_counts", lambda c, bound, n, **_: bound / 2)
    x = np.linspace(-1, 1, n)
    y = np.where(np.arange(n) % 2 == 0, 0.5, -0.5)
    releases = []
    for x[0], y[0] in rows:
        captured.clear()
        calibrate_regression(LocalData(sp.csr_matrix(x[:, None]), y[:, None]), np.array([0]),
                             np.array([[1.0]]), norm_bound=1.0, target_bound=1.0,
                             location_unit=units["location"], scale_unit=units["scale"],
                             moment_unit=units["moments"], floating_point_safe=True,
                             rng=np.random.default_rng(0), fit_intercept=False, pure=pure)
        assert len(captured) == len(D.REGRESSION_SPLIT)
        releases.append(captured[index])
    return units, claim, claim_delta, real, releases


def _audit(releases, real, claim, claim_delta, undernoised, pure):
    """The pair audit of one release, its draws made by the release the real
    calibration calls, with the parameters it passed (the unit halved if
    ``undernoised``). The statistic is the log-likelihood ratio of the two sides' laws:
    for the Gaussian, the projection on the values' difference."""
    (v, sensitivity, unit, fp), (v_prime, *_) = releases
    if undernoised:
        unit = unit / 2
    runs = 4000
    rng = np.random.default_rng(1)

    def statistic(value):
        noisy = np.stack([np.ravel(real(value, sensitivity, unit, fp, rng)[0])
                          for _ in range(runs)])
        if pure:
            return (np.abs(noisy - np.ravel(v_prime)).sum(axis=1)
                    - np.abs(noisy - np.ravel(v)).sum(axis=1))
        return noisy @ np.ravel(v - v_prime)

    assert_pair_audit(statistic(v), statistic(v_prime), claim, claim_delta, undernoised)


@pytest.mark.parametrize("pure", [False, True], ids=["gaussian", "laplace"])
@pytest.mark.parametrize("undernoised", [False, True])
def test_moment_audit(undernoised, pure, monkeypatch, spy_on_releases):
    # The honest release stays within the epsilon its event claims, half the noise is
    # caught above it.
    units, claim, claim_delta, real, releases = _pair_releases(
        monkeypatch, spy_on_releases, "moments", pure, _WORST_ROWS[pure])
    (m, sensitivity, unit, _), (m_prime, *_) = releases
    assert sensitivity == (MOMENT_SENSITIVITY_L1 if pure else MOMENT_SENSITIVITY)
    assert unit == units["moments"]
    (x, y), (x_prime, y_prime) = _WORST_ROWS[pure]
    row = np.array([x, x * x, y, x * y]) - np.array([x_prime, x_prime**2, y_prime,
                                                     x_prime * y_prime])
    np.testing.assert_allclose(m - m_prime, row, atol=1e-12)
    assert (np.abs(row).sum() if pure else np.linalg.norm(row)) == pytest.approx(sensitivity)
    _audit(releases, real, claim, claim_delta, undernoised, pure)


#: The location and scale releases take 10% and 20% of the share: under pure DP, on 50
#: rows at epsilon 120 (the share at its cap) their claims are 1 and 2, where 4,000
#: draws can see half the noise.
_SMALL_SPLIT = {False: {}, True: {"epsilon": 120.0, "n": 50}}


@pytest.mark.parametrize("pure", [False, True], ids=["gaussian", "laplace"])
@pytest.mark.parametrize("undernoised", [False, True])
def test_location_audit(undernoised, pure, monkeypatch, spy_on_releases):
    # Row 0's score at +B on one side and -B on the other: the sum of clip(s / B)
    # moves by 2, its sensitivity (l1 and l2).
    units, claim, claim_delta, real, releases = _pair_releases(
        monkeypatch, spy_on_releases, "location", pure, ((1.0, 0.5), (-1.0, 0.5)),
        **_SMALL_SPLIT[pure])
    (v, sensitivity, unit, _), (v_prime, *_) = releases
    assert sensitivity == 2.0 and unit == units["location"]
    np.testing.assert_allclose(v - v_prime, [2.0], atol=1e-12)
    _audit(releases, real, claim, claim_delta, undernoised, pure)


@pytest.mark.parametrize("pure", [False, True], ids=["gaussian", "laplace"])
@pytest.mark.parametrize("undernoised", [False, True])
def test_scale_audit(undernoised, pure, monkeypatch, spy_on_releases):
    # Row 0's score 1 on one side (level 1 below the bound 2) and 1e-3 on the other
    # (level 10): one count moves between two cells, the full sensitivity (sqrt(2) in
    # l2, 2 in l1).
    units, claim, claim_delta, real, releases = _pair_releases(
        monkeypatch, spy_on_releases, "scale", pure, ((1.0, 0.5), (1e-3, 0.5)),
        **_SMALL_SPLIT[pure])
    (v, sensitivity, unit, _), (v_prime, *_) = releases
    assert sensitivity == (2.0 if pure else math.sqrt(2.0)) and unit == units["scale"]
    diff = np.ravel(v - v_prime)
    assert np.flatnonzero(diff).tolist() == [1, 10] and diff[1] == 1 and diff[10] == -1
    _audit(releases, real, claim, claim_delta, undernoised, pure)


def test_default_regression_is_not_below_the_mean():
    # phased SGD at n epsilon = 400 (n mu about 100): its last phase's noise makes the
    # fitted prediction far worse than the mean of the targets; the default decision
    # refits it there (on half the budget) and falls back on the mean.
    X, y, Xt, yt = _split(*_data(n=8000, noise=0.5, seed=1))
    fitted = [_r2(_fit("phased_sgd", epsilon=0.1, seed=s, X=X, y=y, decision="fitted"),
                  Xt, yt) for s in range(3)]
    calibrated = [_r2(_fit("phased_sgd", epsilon=0.1, seed=s, X=X, y=y), Xt, yt)
                  for s in range(3)]
    assert np.mean(fitted) < -0.5
    # A slope whose estimate passes one sd by noise keeps a little of it: near the
    # mean's R^2 of 0, never far below.
    assert np.mean(calibrated) > -0.05


@pytest.mark.parametrize("solver, n, data_seed, options", [
    ("output_perturbation", 20, 0, dict(penalty="l2", delta=0, floating_point_safe=False,
                                         fit_intercept=False)),
    ("output_perturbation", 20, 0, dict(penalty="l2", delta=0, fit_intercept=False)),
    ("sgd", 50, 1, dict(decision="calibrated")),
])
def test_a_noisy_scale_never_blows_up_the_refit_slope(solver, n, data_seed, options):
    # At epsilon 1 and these n the scale's counts are mostly noise; a sum of noise that
    # stayed below the threshold down to a deep level gave scales of 2^-29 of the bound,
    # a slope fitted on the signs of the scores, and coefficients up to 2e7 (output
    # perturbation, n = 20, fit 12) and 9e11 (sgd, n = 50, fit 26).
    rng = np.random.default_rng(data_seed)
    X = rng.uniform(-1, 1, (n, 3))[:, :1 if solver == "output_perturbation" else 3]
    X /= np.sqrt(X.shape[1])
    beta = np.array([1.0, -0.5, 0.3])[:X.shape[1]]
    y = np.clip(X @ beta + 0.1 * rng.normal(size=n), -1, 1)
    coefs = [DPGreedyCDRegressor(solver=solver, random_state=s, **options).fit(X, y).coef_
             for s in range(30)]
    # Rows within norm 1 and targets within 1: a slope above a few units would predict
    # far outside the targets' range on most rows.
    assert np.max(np.abs(coefs)) < 5.0


def test_scale_goes_down_only_levels_whose_summed_noise_is_small_against_the_rows():
    counts = np.zeros(_calibration.SCALE_LEVELS)
    counts[10] = 1000.0  # every row's score within 2^-10 of the bound
    assert _calibration._scale_from_counts(counts, 1.0, 1000) == 2.0 ** -10
    # Noise of sd 600 per count: twice it exceeds the 1000 rows at the first level.
    assert _calibration._scale_from_counts(counts, 1.0, 1000, noise_sd=600.0) == 1.0
    # sd 100: levels 0 to 24 (2 * 100 * sqrt(25) = 1000); the rows at level 10 are
    # found.
    assert _calibration._scale_from_counts(counts, 1.0, 1000, noise_sd=100.0) == 2.0 ** -10
    # sd 200: levels 0 to 5 only; the rows deeper give the deepest of them.
    assert _calibration._scale_from_counts(counts, 1.0, 1000, noise_sd=200.0) == 2.0 ** -5


def test_calibrated_regression_rescales_a_shrunk_prediction():
    # Output perturbation's default ridge shrinks the prediction toward 0; the refit
    # slope undoes it.
    X, y, Xt, yt = _split(*_data(n=60_000, noise=0.2, seed=3), n_train=40_000)
    auto = [_r2(DPOutputPerturbationRegressor(epsilon=1.0, random_state=s).fit(X, y), Xt, yt)
            for s in range(3)]
    fitted = [_r2(DPOutputPerturbationRegressor(epsilon=1.0, random_state=s,
                                                decision="fitted").fit(X, y), Xt, yt)
              for s in range(3)]
    assert np.mean(auto) > np.mean(fitted) + 0.1


def test_auto_refits_at_every_size():
    X, y = _data(n=4000)
    # n mu = 4000 * mu(0.3, 1e-6) is below 480: the decision takes its cap of the
    # budget, where the solver's own fit is mostly noise; at epsilon 3 its need.
    mu = gaussian_mu(0.3, 1e-6)
    assert D.decision_share(4000, 1, mu, regression=True) == D.MAX_REGRESSION_SHARE
    assert D.decision_share(4000, 1, gaussian_mu(3.0, 1e-6),
                            regression=True) < D.MAX_DECISION_SHARE
    small = _decision_events(_fit("sgd", epsilon=0.3, X=X, y=y))
    assert len(small) == 3
    share = sum(release_mu(e) ** 2 for e in small) / mu**2
    assert share == pytest.approx(D.MAX_REGRESSION_SHARE, rel=1e-4)
    assert len(_decision_events(_fit("sgd", epsilon=3.0, X=X, y=y))) == 3
    # Below the informative refit's n mu only the solvers without a noise ridge refit.
    assert len(_decision_events(_fit("phased_sgd", epsilon=0.1, X=X, y=y))) == 3
    assert not _decision_events(_fit("sgd", epsilon=0.1, X=X, y=y))
    assert len(_decision_events(_fit("sgd", epsilon=0.1, X=X, y=y,
                                     decision="calibrated"))) == 3
    # greedy CD fits its own intercept: refit only when asked.
    assert not _decision_events(_fit("greedy_cd", epsilon=3.0, X=X, y=y))
    assert len(_decision_events(_fit("greedy_cd", epsilon=3.0, X=X, y=y,
                                     decision="calibrated"))) == 3


def test_huber_loss_and_runs_without_noise_keep_the_solver_own():
    X, y = _data()
    assert not _decision_events(_fit("sgd", epsilon=3.0, X=X, y=y, loss="huber"))
    with pytest.raises(ValueError, match="logistic and the squared"):
        _fit("sgd", X=X, y=y, loss="huber", decision="calibrated")
    exact = _fit("sgd", epsilon=math.inf, X=X, y=y, decision="calibrated")
    fitted = _fit("sgd", epsilon=math.inf, X=X, y=y, decision="fitted")
    assert not _decision_events(exact)
    np.testing.assert_array_equal(exact.coef_, fitted.coef_)


@pytest.mark.parametrize("target_bounds", [None, (100.0, 300.0)])
def test_calibrated_regression_predicts_in_the_target_units(target_bounds):
    # Targets in their own units through target_bounds: the refit is on the mapped
    # targets, and the coefficients are mapped back.
    X, y = _data(n=30_000, noise=0.2, seed=4)
    if target_bounds is not None:
        y = 200.0 + 100.0 * y
    m = _fit("sgd", epsilon=3.0, X=X, y=y, target_bounds=target_bounds,
             decision="calibrated")
    assert m.epsilon_spent_ <= 3.0 * (1 + 1e-9)
    assert _r2(m, X, y) > 0.5
    assert np.all(np.isfinite(m.coef_))


def test_every_decision_release_combination_is_named():
    for regression, K in itertools.product([False, True], [1, 3]):
        for name in D.decision_splits(K, regression):
            assert name in D._EVENT_NAMES


@pytest.mark.parametrize("n, epsilon, delta, informative", [
    (309, 1.0, 1 / 309**2, False),        # diabetes' training rows: n mu = 83
    (2923, 0.3, 1 / 2923**2, False),      # abalone: n mu = 202
    (14448, 0.1, 1 / 14448**2, True),     # California housing: n mu = 305
    (309, 10.0, 1 / 309**2, True),        # n mu = 619
    (309, 1.0, 0.0, True),                # pure DP: no solver with a noise ridge runs
    (309, math.inf, 1e-6, True),
])
def test_refit_is_informative_from_public_values_only(n, epsilon, delta, informative):
    assert D.regression_refit_informative(n, epsilon, delta) is informative
    if delta > 0 and math.isfinite(epsilon):
        # At its cap each moment sum has noise Delta / (mu sqrt(share split)); the refit
        # is informative where that is at most twice MOMENT_NOISE of n.
        noise = D.MOMENT_SENSITIVITY / (gaussian_mu(epsilon, delta) * math.sqrt(
            D.MAX_REGRESSION_SHARE * D.REGRESSION_SPLIT["moments"]))
        assert informative == (noise <= D.REFIT_NOISE_FACTOR * D.MOMENT_NOISE * n)


def test_auto_keeps_noisy_gradient_descent_own_fit_with_its_noise_ridge():
    from skdp_sparse.optim.losses import SquaredLoss
    from skdp_sparse.optim.penalties import L1
    from skdp_sparse.solvers import Problem, get_solver

    problem = Problem(loss=SquaredLoss(), penalty=L1(1e-3), norm_bound=2.0, target_bound=1.0)
    n, p, epsilon, delta = 300, 10, 1.0, 1e-6
    options = {"max_iter": None, "batch_size": None, "learning_rate": None,
               "floating_point_safe": True}
    own = get_solver("sgd").plan(problem, (n, p, 1), epsilon, delta, options)
    auto = D.CalibratedDecision(get_solver("sgd"), auto=True).plan(
        problem, (n, p, 1), epsilon, delta, options)
    # 2 C2 sqrt(d) / (R n mu), C2 = sqrt(L^2 + 1) for targets within 1, R = 1.
    ridge = 2 * math.sqrt(5.0) * math.sqrt(p + 1) / (n * gaussian_mu(epsilon, delta))
    assert noise_ridge(n, p + 1, epsilon, delta, grad_bound=math.sqrt(5.0)) \
        == pytest.approx(ridge)
    assert auto.bounds.l2 == pytest.approx(problem.l2 + ridge)
    assert auto.bounds.smoothness == pytest.approx(own.bounds.smoothness + ridge)
    assert auto.bounds.l1 == problem.l1
    # The whole budget goes to the steps (more of them: the ridge adds to the
    # smoothness their number is planned from), and no decision is released.
    assert auto.n_iter > own.n_iter
    assert compose(list(auto.events), delta)[0] == pytest.approx(epsilon, rel=1e-3)
    assert not [e for e in auto.events if e.name.startswith("decision:")]
    # Where the refit is informative, and when it is asked for, the decision is refitted.
    assert isinstance(D.CalibratedDecision(get_solver("sgd"), auto=True).plan(
        problem, (n, p, 1), 20.0, delta, options), D.DecisionPlan)
    assert isinstance(D.CalibratedDecision(get_solver("sgd")).plan(
        problem, (n, p, 1), epsilon, delta, options), D.DecisionPlan)


def test_default_learns_where_the_refit_cannot_see_its_slope():
    # 500 training rows at epsilon 1 (n mu about 100): the refit's moment sums have
    # noise of 6% of n, its slope is lost in them and the prediction is about the mean
    # of the targets; noisy gradient descent's own on the whole budget learns.
    X, y, Xt, yt = _split(*_data(n=1000, noise=0.2, seed=4))
    auto = [_r2(_fit("sgd", seed=s, X=X, y=y), Xt, yt) for s in range(5)]
    refit = [_r2(_fit("sgd", seed=s, X=X, y=y, decision="calibrated"), Xt, yt)
             for s in range(5)]
    assert np.mean(auto) > 0.15
    assert np.mean(auto) > np.mean(refit) + 0.1


def test_asking_for_the_refit_where_auto_keeps_its_own_is_not_called_unused():
    X, y = _data(n=400)

    def unused_warnings(epsilon):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            DPGreedyCDRegressor(epsilon=epsilon, solver="sgd", decision="calibrated",
                                random_state=0).fit(X, y)
        return [w for w in caught if "does not use" in str(w.message)]

    # n mu = 400 mu(1, 1e-6) is below 240: "calibrated" refits where "auto" would not.
    assert not D.regression_refit_informative(400, 1.0, 1e-6)
    assert not unused_warnings(1.0)
    # At epsilon 30 "auto" refits too: asking for it changes nothing, and says so.
    assert D.regression_refit_informative(400, 30.0, 1e-6)
    assert unused_warnings(30.0)
