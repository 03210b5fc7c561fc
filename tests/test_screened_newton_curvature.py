"""The screened Newton step's curvature: rows rescaled to a privately chosen norm, and
the step's floors (:mod:`skdp_sparse.solvers.screened_newton`, steps 3 and 4).

Two releases: the histogram of the rows' norms of squares (sensitivity ``sqrt(2)``),
whose median level gives the norm ``c``, and the column sums of the rows' squares,
each row's vector rescaled to norm ``c`` (sensitivity ``sqrt(2) c``). Each is tested
against its formula through the real code path and audited on a worst-case pair; the
same audit catches the release at half the noise.
"""

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import expit

import skdp_sparse.solvers.screened_newton as sn
from skdp_sparse import DPSparseLogisticRegression
from skdp_sparse.data import LocalData
from skdp_sparse.optim.losses import LogisticLoss
from skdp_sparse.privacy.accounting import compose
from skdp_sparse.privacy.statistics import column_second_moment_sums, row_square_norms
from skdp_sparse.solvers import Problem
from skdp_sparse.solvers._calibration import SCALE_LEVELS, _scale_from_counts
from skdp_sparse.solvers._screening import noise_units, null_curvature
from skdp_sparse.testing.bounds import assert_pair_audit


def _fit(X, y, **kw):
    kw = {"solver": "screened_newton", "penalty": None, "classes": [0, 1],
          "random_state": 0, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DPSparseLogisticRegression(**kw).fit(X, y)


def _text_like(n=600, p=40, seed=0):
    """Unit rows of non-negative entries, a few columns carrying the label."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=0.25, format="csr", random_state=rng)
    X.data = rng.uniform(0.1, 1.0, X.nnz)
    X = sp.csr_matrix(X.multiply(1.0 / np.maximum(sp.linalg.norm(X, axis=1), 1e-12)[:, None]))
    w = np.zeros(p)
    w[:5] = [4.0, -4.0, 3.0, -3.0, 2.0]
    y = (rng.random(n) < expit(X @ w)).astype(int)
    return X, y


@pytest.fixture
def curvature_releases(monkeypatch):
    """The screened Newton step's own releases (the histogram of the rows' norms, then
    the curvature), each recorded as ``(value, sensitivity, unit, floating_point_safe,
    noisy, sigma)``."""
    calls = []
    real = sn.release

    def recording(value, sensitivity, unit, floating_point_safe, rng):
        noisy, sigma = real(value, sensitivity, unit, floating_point_safe, rng)
        calls.append((np.array(value), sensitivity, unit, floating_point_safe, noisy, sigma))
        return noisy, sigma

    monkeypatch.setattr(sn, "release", recording)
    return calls, real


# --------------------------------------------------------------------------
# The statistic and its sensitivity
# --------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
def test_square_norm_sums_match_their_definition(fmt):
    rng = np.random.default_rng(0)
    X = sp.random(60, 25, density=0.2, format="csr", random_state=rng)
    X.data = rng.normal(size=X.nnz) * 3
    dense = X.toarray()
    dense[5] = 0.0  # an empty row adds nothing
    X = sp.csr_matrix(dense)
    L, c = 2.0, 0.3
    row_norms = np.maximum(np.linalg.norm(dense, axis=1), 1e-300)
    clipped = dense * np.minimum(1.0, L / row_norms)[:, None]
    squares = clipped**2
    norms = np.linalg.norm(squares, axis=1)
    rescaled = squares * np.divide(c, norms, out=np.zeros_like(norms), where=norms > 0)[:, None]
    given = dense if fmt == "dense" else X.asformat(fmt)
    np.testing.assert_allclose(row_square_norms(given, L), norms, rtol=1e-12)
    sums, n_clipped = column_second_moment_sums(given, L, square_norm=c)
    np.testing.assert_allclose(sums, rescaled.sum(axis=0), rtol=1e-12)
    assert n_clipped == int(np.sum(np.linalg.norm(dense, axis=1) > L))
    # Without the rescaling, the plain clipped curvature.
    np.testing.assert_allclose(column_second_moment_sums(given, L)[0], squares.sum(axis=0),
                               rtol=1e-12)


def test_rescaled_rows_move_the_sums_by_at_most_sqrt2_c():
    # Replacing one row moves the sums by v - v', two non-negative vectors of norm c
    # (or 0 for an empty row): at most sqrt(2) c, attained by disjoint supports.
    rng = np.random.default_rng(1)
    c, p = 0.4, 12
    rows = [np.zeros(p), np.eye(p)[0], np.eye(p)[1], 50.0 * np.eye(p)[2]]
    rows += [rng.normal(size=p) * rng.random(p) ** 4 for _ in range(40)]

    def moved(a, b):
        base = sp.csr_matrix(np.vstack([rng.random((5, p)), a]))
        other = sp.csr_matrix(np.vstack([base.toarray()[:5], b]))
        return np.linalg.norm(column_second_moment_sums(base, 1.0, square_norm=c)[0]
                              - column_second_moment_sums(other, 1.0, square_norm=c)[0])

    largest = max(moved(a, b) for a in rows for b in rows)
    assert largest <= math.sqrt(2.0) * c * (1 + 1e-12)
    assert moved(rows[1], rows[2]) == pytest.approx(math.sqrt(2.0) * c, rel=1e-12)


# --------------------------------------------------------------------------
# Calibration through the real code path
# --------------------------------------------------------------------------
@pytest.mark.parametrize("safe", [True, False])
def test_curvature_releases_get_their_planned_noise(safe, curvature_releases):
    calls, _ = curvature_releases
    X, y = _text_like()
    eps, delta, L = 2.0, 1e-5, 1.0
    clf = _fit(X, y, epsilon=eps, delta=delta, norm_bound=L, floating_point_safe=safe)
    shares = sn.newton_shares()
    units, _ = noise_units(eps, delta, list(shares.values()), safe, list(shares))
    units = dict(zip(shares, units, strict=True))
    (hist, s_hist, u_hist, fp_hist, noisy_hist, _), (curv, s_curv, u_curv, fp_curv, _, _) = calls
    # The histogram: one count per row on the dyadic levels below m L, one row moves one
    # count (l2 sensitivity sqrt(2)), noise of its share.
    assert hist.shape == (SCALE_LEVELS,) and hist.sum() == X.shape[0]
    np.testing.assert_array_equal(
        hist, np.bincount(np.clip(np.floor(-np.log2(row_square_norms(X, L) / L)), 0,
                                  SCALE_LEVELS - 1).astype(int), minlength=SCALE_LEVELS))
    assert (s_hist, u_hist, fp_hist) == (math.sqrt(2.0), units["square_norm"], safe)
    # The norm c is the upper edge of the noisy median's level; the curvature of the
    # kept columns is the column sums of the rows rescaled to it, of sensitivity
    # sqrt(2) c and the curvature's unit.
    c = _scale_from_counts(noisy_hist, L, X.shape[0], sn.CURVATURE_QUANTILE)
    assert (s_curv, u_curv, fp_curv) == (math.sqrt(2.0) * c, units["curvature"], safe)
    sums = column_second_moment_sums(X, L, square_norm=c)[0]
    kept = np.flatnonzero(clf.coef_[0])
    np.testing.assert_allclose(curv, sums[kept], rtol=1e-12)


def test_square_norm_is_the_median_level(curvature_releases):
    # At a budget where the histogram's noise is far below one row, c is the upper edge
    # of the level of the rows' median norm of squares.
    calls, _ = curvature_releases
    X, y = _text_like(n=2000)
    _fit(X, y, epsilon=1000.0, delta=1e-5, norm_bound=1.0)
    norms = np.sort(row_square_norms(X, 1.0))
    median = norms[len(norms) // 2]
    c = calls[1][1] / math.sqrt(2.0)
    assert c == 2.0 ** -math.floor(-math.log2(median))
    assert median <= c < 2 * median


def test_without_noise_the_curvature_is_exact(curvature_releases):
    calls, _ = curvature_releases
    X, y = _text_like()
    _fit(X, y, epsilon=np.inf, norm_bound=1.0, feature_selection="none")
    assert len(calls) == 1  # no histogram: nothing to rescale
    value, _, unit, _, noisy, sigma = calls[0]
    assert unit == 0 and sigma == 0
    np.testing.assert_allclose(noisy, column_second_moment_sums(X, 1.0)[0], rtol=1e-14)


# --------------------------------------------------------------------------
# The step's floors
# --------------------------------------------------------------------------
def test_step_floors_the_curvature_at_its_noise_and_the_step_at_the_prior(monkeypatch,
                                                                           curvature_releases):
    # w_j = soft(A_j) / max(q max(M_j, sigma_M), sigma_A L / T): a curvature the release
    # sees clearly divides the step; one it cannot see is floored at its noise; a
    # denominator below sigma_A L / T is raised to it, so that the association's noise
    # moves no coefficient by more than T / L in standard deviation.
    calls, _ = curvature_releases
    seen = {}
    real_screen, real_calibrate = sn.screen, sn.calibrate

    def screen(*args, **kw):
        seen["screened"] = real_screen(*args, **kw)
        return seen["screened"]

    def calibrate(data, columns, directions, **kw):
        seen["directions"] = np.asarray(directions)[:, 0]
        return real_calibrate(data, columns, directions, **kw)

    monkeypatch.setattr(sn, "screen", screen)
    monkeypatch.setattr(sn, "calibrate", calibrate)
    rng = np.random.default_rng(3)
    X, y = _text_like(n=4000, p=60, seed=3)
    # Columns of entries 30 times smaller: curvatures far below the noise.
    X = sp.csr_matrix(X @ sp.diags(np.r_[np.ones(30), np.full(30, 1 / 30)]))
    X = X[rng.permutation(X.shape[0])]
    L = 1.0
    _fit(X, y, epsilon=4.0, delta=1e-6, norm_bound=L)
    *_, curvature, sigma_m = calls[-1]
    screened = seen["screened"]
    q = null_curvature(Problem(loss=LogisticLoss()), screened)[0]
    denominator = screened.weights[:, 0] / seen["directions"]
    prior = screened.sigma * L / sn.PRIOR_SCALE
    expected = np.maximum(q * np.maximum(curvature, sigma_m), prior)
    np.testing.assert_allclose(denominator, expected, rtol=1e-12)
    clear = q * curvature > np.maximum(q * sigma_m, prior)
    at_prior = prior > q * np.maximum(curvature, sigma_m)
    assert clear.any() and at_prior.any()


# --------------------------------------------------------------------------
# Audits: worst-case pairs through the real releases
# --------------------------------------------------------------------------
def _pair_releases(curvature_releases, index, row, row_prime, n=200):
    """The ``index``-th release of the step (0: the histogram, 1: the curvature) on the
    two sides of a pair that differs in its last row, both fitted at epsilon 30 (few
    rows, so that half the noise shows), and the epsilon its event claims at delta
    0.05."""
    calls, real = curvature_releases
    p = len(row)
    rng = np.random.default_rng(0)
    base = np.zeros((n, p))
    base[: n // 2, 2] = rng.uniform(0.5, 1.0, n // 2)
    y = np.r_[np.zeros(n - 1, dtype=int), 1]
    releases = []
    for last in (row, row_prime):
        calls.clear()
        X = sp.csr_matrix(np.vstack([base[:-1], last]))
        clf = _fit(X, y, epsilon=30.0, delta=1e-3, norm_bound=1.0, feature_selection="none")
        releases.append(calls[index])
    name = ("curvature norm", "curvature")[index]
    event = next(e for e in clf.privacy_events_ if e.name == f"screened_newton: {name}")
    claim_delta = 0.05
    return releases, real, compose([event], claim_delta)[0], claim_delta


def _audit_first_two_cells(value, value_prime, sensitivity, unit, fp, real, claim,
                           claim_delta, undernoised, runs=4000):
    """The pair audit of a release whose two sides differ along ``e_0 - e_1``: the
    statistic is the difference of those two noisy cells, drawn by the real release
    with the sensitivity and unit the fit passed it (half the unit if
    ``undernoised``)."""
    if undernoised:
        unit = unit / 2
    rng = np.random.default_rng(1)

    def statistic(v):
        noisy = np.stack([real(v, sensitivity, unit, fp, rng)[0] for _ in range(runs)])
        return noisy[:, 0] - noisy[:, 1]

    assert_pair_audit(statistic(value), statistic(value_prime), claim, claim_delta,
                      undernoised)


@pytest.mark.parametrize("undernoised", [False, True])
def test_square_norm_histogram_audit(undernoised, curvature_releases):
    # One row moves from the top level (one entry of 1: norm of squares 1) to level 1
    # (four entries of 1/2: norm 1/2): one count leaves a cell and enters the next.
    e0 = np.array([1.0, 0.0, 0.0, 0.0, 0.0])
    spread = np.array([0.5, 0.5, 0.0, 0.5, 0.5])
    releases, real, claim, claim_delta = _pair_releases(curvature_releases, 0, e0, spread)
    (h, sensitivity, unit, fp, *_), (h_prime, *_) = releases
    assert sensitivity == pytest.approx(math.sqrt(2.0))
    assert np.abs(h - h_prime).sum() == 2 and h[0] - h_prime[0] == 1
    _audit_first_two_cells(h, h_prime, sensitivity, unit, fp, real, claim, claim_delta,
                           undernoised)


@pytest.mark.parametrize("undernoised", [False, True])
def test_curvature_audit(undernoised, curvature_releases):
    # The last row is e_0 on one side and e_1 on the other: both of norm of squares 1,
    # so the histogram and c are the same, and the sums move by c (e_0 - e_1), the
    # full sensitivity sqrt(2) c.
    e0, e1 = np.eye(5)[0], np.eye(5)[1]
    releases, real, claim, claim_delta = _pair_releases(curvature_releases, 1, e0, e1)
    (v, sensitivity, unit, fp, *_), (v_prime, s_prime, *_) = releases
    assert sensitivity == s_prime
    np.testing.assert_allclose(np.linalg.norm(v - v_prime), sensitivity, rtol=1e-12)
    _audit_first_two_cells(v, v_prime, sensitivity, unit, fp, real, claim, claim_delta,
                           undernoised)


def test_local_view_sums_match_the_statistic():
    X, y = _text_like()
    data = LocalData(X.tocsc(), np.where(y > 0, 1.0, -1.0)[:, None])
    np.testing.assert_allclose(data.column_second_moment_sums(1.0, 1.0, 0.25)[0],
                               column_second_moment_sums(X, 1.0, square_norm=0.25)[0],
                               rtol=1e-12)
