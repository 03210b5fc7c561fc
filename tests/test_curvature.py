"""Private coordinate-wise curvature (``curvature="private"``): the released
statistic, its sensitivity, calibration and audit, and how the estimators use it."""

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from skdp_sparse.linear_model import DPGreedyCDRegressor, DPSparseLogisticRegression
from skdp_sparse.privacy.accounting import compose, gaussian_epsilon, zcdp_epsilon
from skdp_sparse.privacy.auditing import epsilon_lower_bound
from skdp_sparse.privacy.discrete import gaussian_rho, selection_epsilon
from skdp_sparse.privacy.mechanisms import GaussianMechanism
from skdp_sparse.privacy.statistics import (
    column_second_moment_sums,
    release_column_second_moments,
)
from skdp_sparse.solvers.coordinate_descent import CURVATURE_SHARE, MIN_CURVATURE_RATIO


def _reference_sums(X, norm_bound):
    X = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=float)
    out = np.zeros(X.shape[1])
    for row in X:
        norm = np.linalg.norm(row)
        scale = 1.0 if norm <= norm_bound else norm_bound / norm
        out += (scale * row) ** 2
    return out


def _rare_feature_data(n=2000, p=40, seed=0):
    """Binary features with frequencies from 0.5 down to 0.005."""
    rng = np.random.default_rng(seed)
    freq = np.geomspace(0.5, 0.005, p)
    X = sp.csr_matrix((rng.random((n, p)) < freq).astype(float))
    w = rng.standard_normal(p) * 2
    y = (X @ w + 0.5 * rng.standard_normal(n) > np.median(X @ w)).astype(int)
    return X, y, freq


# ------------------------------------------------------------ the statistic
@pytest.mark.parametrize("fmt", ["csr", "csc", "dense"])
@pytest.mark.parametrize("norm_bound", [0.5, 1.5, np.inf])
def test_second_moment_sums_match_reference(fmt, norm_bound):
    rng = np.random.default_rng(0)
    X = sp.random(60, 25, density=0.3, random_state=1, format="csr")
    X.data = rng.uniform(-1, 1, X.data.size)
    X = X.tolil()
    X[7] = 0.0  # an empty row must not divide by zero
    X = X.tocsr()
    Xf = X.toarray() if fmt == "dense" else X.asformat(fmt)
    sums, n_clipped = column_second_moment_sums(Xf, norm_bound)
    np.testing.assert_allclose(sums, _reference_sums(X, norm_bound), rtol=1e-12, atol=1e-15)
    assert n_clipped == int(np.sum(sp.linalg.norm(X, axis=1) > norm_bound))


@pytest.mark.parametrize("max_entry", [0.3, 1.0, 5.0])
def test_sensitivity_bounds_hold_and_are_tight(max_entry):
    """||s(X) - s(X')|| over replace-one pairs stays within the docstring's bounds."""
    L = 2.0
    m = min(max_entry, L)
    bound_l2 = math.sqrt(2 * m**2 * L**2 + 1)
    bound_l1 = 2 * L**2 + 1

    def stat(X):
        sums, n_clipped = column_second_moment_sums(X, L)
        return np.append(sums, n_clipped)

    rng = np.random.default_rng(3)
    worst = 0.0
    for _ in range(300):
        X = np.clip(rng.standard_normal((5, 12)) * rng.uniform(0.1, 3), -max_entry, max_entry)
        X *= rng.random(X.shape) < 0.5
        X2 = X.copy()
        X2[rng.integers(5)] = np.clip(rng.standard_normal(12) * rng.uniform(0.1, 3),
                                      -max_entry, max_entry)
        diff = stat(X) - stat(X2)
        assert np.linalg.norm(diff) <= bound_l2 * (1 + 1e-12)
        assert np.abs(diff).sum() <= bound_l1 * (1 + 1e-12)
        worst = max(worst, np.linalg.norm(diff) / bound_l2)
    assert worst > 0.1
    # A row above the bound, spreading its norm over entries at the bound, against
    # one on disjoint entries inside it: both bounds are attained in the limit.
    k = int(round((L / m) ** 2))
    a, b = np.zeros((1, 2 * k + 1)), np.zeros((1, 2 * k + 1))
    a[0, :k], a[0, -1] = m, 1e-6
    b[0, k:2 * k] = m * (1 - 1e-12)
    diff = stat(a) - stat(b)
    if abs(k * m**2 - L**2) < 1e-12:
        assert np.linalg.norm(diff) == pytest.approx(bound_l2)
        assert np.abs(diff).sum() == pytest.approx(bound_l1)


def test_release_noise_matches_calibration():
    X = np.array([[1.0, 0.0], [0.0, 0.5]])
    rng = np.random.default_rng(4)
    L, mu = 1.0, 0.5
    def draw(**kw):
        sums, n_clipped, std = release_column_second_moments(
            column_second_moment_sums(X, L), norm_bound=L, max_entry=1.0, rng=rng, **kw)
        return np.append(sums, n_clipped), std

    draws = np.array([draw(mu=mu)[0] for _ in range(20_000)])
    sigma = math.sqrt(2 * L**4 + 1) / mu
    assert draw(mu=mu)[1] == pytest.approx(sigma)
    np.testing.assert_allclose(draws.mean(axis=0), [1.0, 0.25, 0.0], atol=4 * sigma / 140)
    np.testing.assert_allclose(draws.std(axis=0), sigma, rtol=0.03)
    # Laplace: scale 2 L^2 / eps (floating-point safe: at most 2^-16 more).
    eps = 2.0
    lap = np.array([draw(epsilon=eps)[0] for _ in range(20_000)])
    np.testing.assert_allclose(lap.std(axis=0), math.sqrt(2) * (2 * L**2 + 1) / eps, rtol=0.03)
    with pytest.raises(ValueError, match="exactly one"):
        release_column_second_moments(column_second_moment_sums(X, L), norm_bound=L,
                                      max_entry=1.0, rng=rng)
    with pytest.raises(ValueError, match="norm_bound"):
        release_column_second_moments(column_second_moment_sums(X, np.inf), norm_bound=np.inf,
                                      max_entry=1.0, mu=1.0, rng=rng)


def _audit_release(mu, rng, n_runs=60_000):
    """Worst-case pair: one row L e_0 replaced by L e_1 (entries at the bound)."""
    L = 1.0
    X, X2 = np.array([[L, 0.0]]), np.array([[0.0, L]])

    def stat(data):
        out = np.empty(n_runs)
        for i in range(n_runs):
            s, _, _ = release_column_second_moments(column_second_moment_sums(data, L),
                                                    norm_bound=L, max_entry=L, mu=mu, rng=rng)
            out[i] = s[0] - s[1]
        return out

    return stat(X), stat(X2)


def test_audit_release_gaussian():
    rng = np.random.default_rng(5)
    # A large delta keeps the claim within reach of a CI-sized audit.
    delta = 1e-2
    eps = 1.0
    mu = GaussianMechanism(1.0, epsilon=eps, delta=delta).mu
    honest = epsilon_lower_bound(*_audit_release(mu, rng), delta=delta).epsilon_lb
    assert honest <= eps
    # Noise halved (mu doubled) while claiming the same epsilon: caught.
    under = epsilon_lower_bound(*_audit_release(2 * mu, rng), delta=delta).epsilon_lb
    assert under > eps


# --------------------------------------------------------- in the estimators
@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_cd_calibration_includes_curvature_share(cd_calls, safe):
    X, y, _ = _rare_feature_data(n=500, p=10)
    n, p = X.shape
    eps, delta = 1.0, 1e-5
    reg = DPGreedyCDRegressor(epsilon=eps, delta=delta, solver="cd", max_iter=2,
                              curvature="private", floating_point_safe=safe,
                              decision="fitted", random_state=0).fit(X, y)
    kw = cd_calls[0]
    k = 2 * (p + 1)
    if safe:
        # Discrete Gaussian releases with one multiplier: rho per update whatever C_j.
        np.testing.assert_allclose(kw["update_sensitivity"], 2 * kw["clip"] / n)
        rho = gaussian_rho(1.0, kw["update_scale"])
    else:
        mu = (2 * kw["clip"] / n) / kw["update_scale"]
        np.testing.assert_allclose(mu, mu[0])
        rho = mu[0] ** 2 / 2
    curvature_event = reg.privacy_events_[-1]
    assert curvature_event.name.startswith("curvature")
    rho_updates = sum(e.rho * e.count for e in reg.privacy_events_[:-1])
    assert rho_updates == pytest.approx(k * rho, rel=1e-12)
    # The estimate gets CURVATURE_SHARE of the total rho (GDP: of mu^2).
    assert curvature_event.rho == pytest.approx(
        CURVATURE_SHARE / (1 - CURVATURE_SHARE) * rho_updates)
    if safe:
        assert curvature_event.mu is None
        assert zcdp_epsilon(rho_updates + curvature_event.rho, delta) == pytest.approx(
            eps, rel=1e-6)
    else:
        total_mu = math.sqrt(k * mu[0] ** 2 + curvature_event.mu**2)
        assert gaussian_epsilon(total_mu, delta) == pytest.approx(eps, rel=1e-6)
    assert reg.epsilon_spent_ == pytest.approx(eps, rel=1e-6)


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_greedy_calibration_includes_curvature_share(cd_calls, safe):
    X, y, _ = _rare_feature_data(n=600, p=12)
    eps, delta, T = 1.0, 1e-6, 30
    clf = DPSparseLogisticRegression(epsilon=eps, delta=delta, solver="greedy_cd", max_iter=T,
                                     curvature="private", floating_point_safe=safe,
                                     random_state=0).fit(X, y)
    kw = cd_calls[0]
    n = X.shape[0]
    delta_j = 2 * kw["clip"] / n
    delta_u = np.max(delta_j / np.sqrt(kw["smoothness"]))
    if safe:
        np.testing.assert_allclose(kw["update_sensitivity"], delta_j)
        assert kw["selection_sensitivity"] == pytest.approx(delta_u, rel=1e-15)
        rho_update = gaussian_rho(1.0, kw["update_scale"])
        eps_sel = selection_epsilon(delta_u, kw["selection_scale"])
    else:
        mu = delta_j[0] / kw["update_scale"][0]
        rho_update = mu**2 / 2
        eps_sel = 2 * delta_u / kw["selection_scale"]
    rho_cd = T * (eps_sel**2 / 8 + rho_update)
    rho_c = clf.privacy_events_[-1].rho
    assert rho_c == pytest.approx(CURVATURE_SHARE / (1 - CURVATURE_SHARE) * rho_cd)
    assert zcdp_epsilon(rho_cd + rho_c, delta) == pytest.approx(eps, rel=1e-6)
    assert compose(clf.privacy_events_, delta)[0] == pytest.approx(eps, rel=1e-9)


def test_pure_greedy_spends_laplace_curvature():
    X, y, _ = _rare_feature_data(n=400, p=8)
    reg = DPGreedyCDRegressor(epsilon=2.0, delta=0.0, selection="laplace", solver="greedy_cd",
                              curvature="private", max_iter=10, random_state=0).fit(X, y)
    event = reg.privacy_events_[-1]
    assert event.delta == 0 and event.mu is None
    total = sum(e.epsilon * e.count for e in reg.privacy_events_)
    assert event.epsilon == pytest.approx(CURVATURE_SHARE * total)
    assert reg.epsilon_spent_ == pytest.approx(2.0, rel=1e-9) and reg.delta_spent_ == 0


def test_private_constants_follow_estimate(cd_calls):
    """M_j and C_j scale with the clipped noisy estimate: C_j / sqrt(M_j) is constant,
    neither exceeds its bound, and both respect the floor."""
    X, y, freq = _rare_feature_data(n=20_000, p=30)
    # Binary rows over 30 features: sqrt(30) bounds their norm, so nothing is clipped.
    clf = DPSparseLogisticRegression(epsilon=5.0, delta=1e-8, solver="greedy_cd", max_iter=5,
                                     norm_bound=np.sqrt(30), random_state=0).fit(X, y)
    kw = cd_calls[0]
    ratio = kw["smoothness"] / 0.25
    assert ratio[-1] == 1.0  # intercept: a constant feature, known curvature
    assert np.all(ratio <= 1.0) and np.all(ratio >= MIN_CURVATURE_RATIO)
    np.testing.assert_allclose(kw["clip"], np.sqrt(ratio))
    # At this n and epsilon the estimate tracks the true frequencies.
    common = freq > 0.05
    np.testing.assert_allclose(ratio[:-1][common], freq[common], rtol=0.35)
    assert clf.epsilon_spent_ == pytest.approx(5.0, rel=1e-6)


def test_user_clip_is_kept_and_bound_mode_unchanged(cd_calls):
    X, y, _ = _rare_feature_data(n=300, p=6)
    clf = DPSparseLogisticRegression(solver="greedy_cd", max_iter=3, gradient_clip=0.3,
                                     random_state=0).fit(X, y)
    np.testing.assert_allclose(cd_calls[-1]["clip"][:-1], 0.3)
    np.testing.assert_allclose(cd_calls[-1]["smoothness"], 0.25)
    assert all(e.name != "curvature" for e in clf.privacy_events_)
    DPSparseLogisticRegression(solver="greedy_cd", max_iter=3, curvature="bound",
                               random_state=0).fit(X, y)
    np.testing.assert_allclose(cd_calls[-1]["smoothness"], 0.25)
    np.testing.assert_allclose(cd_calls[-1]["clip"], 1.0)


def test_noiseless_curvature_is_exact(cd_calls):
    X, y, _ = _rare_feature_data(n=300, p=6)
    X = X.multiply(1.7).tocsr()  # rows far above norm_bound: not clipped without noise
    DPGreedyCDRegressor(epsilon=np.inf, solver="cd", max_iter=2, feature_bound=2.0,
                        random_state=0).fit(X, y)
    kw = cd_calls[0]
    exact = np.asarray(X.multiply(X).mean(axis=0)).ravel()
    expected = np.clip(exact / 4.0, MIN_CURVATURE_RATIO, 1.0) * 4.0
    np.testing.assert_allclose(kw["smoothness"][:-1], expected)


def test_private_curvature_lowers_excess_risk_on_rare_features():
    """On features of very unequal frequency, the private curvature gives a lower
    training objective than the bound's constants at the same budget."""
    X, y, _ = _rare_feature_data(n=5000, p=40, seed=1)
    yy = 2 * y - 1

    def objective(clf):
        margins = yy * (X @ clf.coef_.ravel() + clf.intercept_[0])
        return np.mean(np.logaddexp(0, -margins))

    scores = {}
    for mode in ("private", "bound"):
        scores[mode] = np.mean([
            objective(DPSparseLogisticRegression(epsilon=1.0, delta=1e-8, solver="greedy_cd",
                                                 curvature=mode, norm_bound=np.sqrt(40),
                                                 random_state=seed).fit(X, y))
            for seed in range(4)
        ])
    assert scores["private"] < scores["bound"] - 0.01


def test_a_norm_bound_that_holds_is_not_called_too_low_at_small_n():
    # 178 rows within a public bound: the noisy count of clipped rows passed n / 2 in 5
    # of 40 seeds, and warned, before the warning needed a margin of three noise sds.
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (178, 13))
    y = (X[:, 0] > 0.5).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed in range(40):
            DPSparseLogisticRegression(solver="greedy_cd", max_iter=3, classes=[0, 1],
                                       norm_bound=np.sqrt(13), random_state=seed).fit(X, y)


def test_norm_bound_below_most_rows_falls_back_to_bound(cd_calls):
    X, y, _ = _rare_feature_data(n=3000, p=30)  # about 5 ones per row: norms near 2.2
    with pytest.warns(UserWarning, match="norm_bound=1 is below"):
        DPSparseLogisticRegression(solver="greedy_cd", max_iter=3, random_state=0).fit(X, y)
    np.testing.assert_allclose(cd_calls[-1]["smoothness"], 0.25)
    np.testing.assert_allclose(cd_calls[-1]["clip"], 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DPSparseLogisticRegression(solver="greedy_cd", max_iter=3, norm_bound=np.sqrt(30),
                                   classes=[0, 1], random_state=0).fit(X, y)
    assert np.all(cd_calls[-1]["smoothness"][:-1] < 0.25)


def test_invalid_curvature_raises():
    X, y, _ = _rare_feature_data(n=50, p=4)
    with pytest.raises(ValueError, match="curvature must be"):
        DPSparseLogisticRegression(curvature="data").fit(X, y)


def _with_duplicates(X):
    """The same matrix with every stored entry split into two halves (non-canonical)."""
    coo = sp.coo_matrix(X)
    rows = np.concatenate([coo.row, coo.row])
    cols = np.concatenate([coo.col, coo.col])
    data = np.concatenate([coo.data / 2, coo.data / 2])
    # csr_matrix((data, (i, j))) would sum duplicates; build the raw arrays instead.
    order = np.lexsort((cols, rows))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=X.shape[0]))])
    dup = sp.csr_matrix((data[order], cols[order], indptr), shape=X.shape)
    assert not dup.has_canonical_format and dup.nnz == 2 * coo.nnz
    return dup


def test_duplicate_entries_are_clipped_as_summed():
    """Entry and row clipping see x_ij with its stored duplicates summed, as every
    later product does; otherwise split entries would escape the bounds."""
    from skdp_sparse import DPSparseMeanEstimator
    from skdp_sparse.privacy.clipping import clip_rows

    rng = np.random.default_rng(0)
    X = sp.random(80, 6, density=0.5, random_state=0, format="csr")
    X.data = rng.uniform(1, 3, X.data.size)  # entries and rows above their bounds
    y = rng.integers(0, 2, 80)
    Xd = _with_duplicates(X)
    np.testing.assert_allclose(clip_rows(Xd, 1.0).toarray(), clip_rows(X, 1.0).toarray())
    np.testing.assert_allclose(column_second_moment_sums(Xd, 1.0)[0],
                               column_second_moment_sums(X, 1.0)[0])
    for est in (DPSparseLogisticRegression(solver="greedy_cd", max_iter=20, norm_bound=3.0,
                                           random_state=0),
                DPSparseLogisticRegression(solver="cd", max_iter=2, random_state=0)):
        np.testing.assert_allclose(clone_fit(est, Xd, y).coef_, clone_fit(est, X, y).coef_)
    mean = DPSparseMeanEstimator(epsilon=1.0, delta=1e-6, random_state=0,
                                 method="gaussian")
    np.testing.assert_allclose(clone_fit(mean, Xd).mean_, clone_fit(mean, X).mean_)


def clone_fit(est, X, y=None):
    from sklearn.base import clone

    return clone(est).fit(X) if y is None else clone(est).fit(X, y)
