import tracemalloc

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp
from sklearn.linear_model import ElasticNet as SkElasticNet
from sklearn.linear_model import Lasso, LogisticRegression, Ridge

from skdp_sparse.optim import _cd_kernels as K
from skdp_sparse.optim.coordinate_descent import (
    CDResult,
    _prepare_data,
    coordinate_descent,
)
from skdp_sparse.optim.losses import HuberLoss, LogisticLoss, SquaredLoss
from skdp_sparse.optim.penalties import (
    L1,
    L2,
    ElasticNet,
    NoPenalty,
    prox,
    subgrad_distance,
)
from skdp_sparse.privacy.discrete import HANDOFF_SLOTS, kernel_source

# ---------------------------------------------------------------- helpers


def _data(n=60, p=12, density=0.5, seed=0, logistic=False):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p)) * (rng.random((n, p)) < density)
    X[rng.integers(0, n, p), np.arange(p)] = 1.5  # no empty column
    w = rng.standard_normal(p) * (rng.random(p) < 0.6)
    z = X @ w + 0.5
    if logistic:
        y = np.where(rng.random(n) < 1 / (1 + np.exp(-z)), 1.0, -1.0)
    else:
        y = z + 0.3 * rng.standard_normal(n)
    return X, y


def _smoothness(X, loss, fit_intercept):
    m = loss.smoothness * (X**2).mean(axis=0)
    return np.r_[m, loss.smoothness] if fit_intercept else m


def _fit(X, y, loss, penalty, fit_intercept, selection, Xin=None, **kw):
    kw.setdefault("n_updates", 200_000)
    kw.setdefault("tol", 1e-12)
    return coordinate_descent(
        X if Xin is None else Xin, y, loss, penalty, fit_intercept=fit_intercept,
        clip=np.inf, smoothness=_smoothness(X, loss, fit_intercept),
        selection=selection, rng=0, **kw,
    )


def _formats(X):
    return {"dense": X, "csc": sp.csc_matrix(X)}


def _assert_coef(res, coef, intercept, rtol=1e-5):
    scale = max(1.0, np.abs(coef).max())
    np.testing.assert_allclose(res.coef, coef, rtol=0, atol=rtol * scale)
    assert abs(res.intercept - intercept) <= rtol * max(1.0, abs(intercept))


def _float_noise_args(rng):
    """The kernel's trailing arguments for a run without exact noise."""
    empty = np.empty(0, dtype=np.int64)
    src = kernel_source(rng)
    return ((empty,) * 6, empty, empty, empty, empty, np.zeros(6)), src.next64, \
        src.state, np.zeros(HANDOFF_SLOTS, dtype=np.int64), -1, np.nan


def _np_clipped_grad(X, y, loss, coef, intercept, clip, fit_intercept):
    """Brute force: (1/n) sum_i clip(l'(y_i, z_i) x_ij, [-clip_j, clip_j])."""
    Xa = np.c_[X, np.ones(len(y))] if fit_intercept else X
    z = X @ coef + intercept
    per_example = loss.derivative(y, z)[:, None] * Xa
    return np.clip(per_example, -clip, clip).mean(axis=0)


def _np_reference_cd(X, y, loss, pen, *, fit_intercept, clip, M, n_updates, selection,
                     selection_noise, selection_scale, update_noise, update_scale, rng):
    """Straight transcription of the algorithm, drawing noise in the kernels' order."""
    n, p = X.shape
    m = p + fit_intercept
    w = np.zeros(m)
    a, b = pen.a, pen.b
    for t in range(n_updates):
        g = _np_clipped_grad(X, y, loss, w[:p], w[p] if fit_intercept else 0.0, clip,
                             fit_intercept)
        if selection == "greedy":
            pen_a = np.r_[np.full(p, a), np.zeros(m - p)]
            pen_b = np.r_[np.full(p, b), np.zeros(m - p)]
            dist = np.where(w > 0, np.abs(g + pen_a + pen_b * w),
                            np.where(w < 0, np.abs(g - pen_a + pen_b * w),
                                     np.maximum(np.abs(g) - pen_a, 0)))
            score = dist / np.sqrt(M)
            if selection_noise == "gumbel":
                score = score - selection_scale * np.log(rng.standard_exponential(m))
            elif selection_noise == "laplace":
                score = score + selection_scale * rng.laplace(0.0, 1.0, m)
            j = int(np.argmax(score))
        elif selection == "random":
            j = int(rng.integers(0, m))
        else:
            j = t % m
        gj = g[j]
        if update_noise == "gaussian":
            gj += update_scale[j] * rng.standard_normal()
        elif update_noise == "laplace":
            gj += update_scale[j] * rng.laplace(0.0, 1.0)
        u = w[j] - gj / M[j]
        if j < p:
            thr = a / M[j]
            u = np.sign(u) * max(abs(u) - thr, 0.0) / (1 + b / M[j])
        w[j] = u
    return w


# ---------------------------------------------------------------- penalties


@pytest.mark.parametrize("pen", [NoPenalty(), L2(0.7), L1(0.4), ElasticNet(0.8, 0.3)])
def test_prox_and_subgrad_distance_match_brute_force(pen):
    grid = np.linspace(-6, 6, 240_001)
    psi = pen.a * np.abs(grid) + 0.5 * pen.b * grid**2
    for v, step in [(2.0, 0.5), (-0.3, 1.3), (0.1, 0.2), (-4.0, 2.0)]:
        brute = grid[np.argmin(0.5 * (grid - v) ** 2 + step * psi)]
        assert abs(prox(pen.code, pen.a, pen.b, v, step) - brute) < 1e-4
    for wj, gj in [(0.0, 0.1), (0.0, -1.0), (0.5, -0.2), (-1.0, 0.3)]:
        if wj == 0:
            xi = np.linspace(-pen.a, pen.a, 2001)
        else:
            xi = np.array([pen.a * np.sign(wj) + pen.b * wj])
        assert subgrad_distance(pen.code, pen.a, pen.b, wj, gj) == pytest.approx(
            np.abs(gj + xi).min(), abs=1e-3)


def test_penalty_values_follow_sklearn_convention():
    w = np.array([1.0, -2.0, 0.0])
    assert ElasticNet(0.5, 0.2).value(w) == pytest.approx(0.5 * 0.2 * 3 + 0.5 * 0.8 / 2 * 5)
    assert L1(0.3).value(w) == pytest.approx(0.9)
    assert L2(0.3).value(w) == pytest.approx(0.75)
    assert NoPenalty().value(w) == 0.0
    with pytest.raises(ValueError):
        ElasticNet(1.0, 1.5)
    with pytest.raises(ValueError):
        L1(-1.0)


# ---------------------------------------------------------------- convergence


@pytest.mark.parametrize("fmt", ["dense", "csc"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("selection", ["greedy", "cyclic"])
def test_squared_l1_matches_lasso(fmt, fit_intercept, selection):
    X, y = _data()
    alpha = 0.05
    ref = Lasso(alpha=alpha, fit_intercept=fit_intercept, tol=1e-14, max_iter=100_000)
    ref.fit(X, y)
    res = _fit(X, y, SquaredLoss(), L1(alpha), fit_intercept, selection,
               Xin=_formats(X)[fmt])
    assert res.n_iter < 200_000  # stopped on tol
    assert np.count_nonzero(ref.coef_) < X.shape[1]  # the l1 kink is exercised
    _assert_coef(res, ref.coef_, ref.intercept_ if fit_intercept else 0.0)
    obj = 0.5 * np.mean((X @ res.coef + res.intercept - y) ** 2) + alpha * np.abs(
        res.coef).sum()
    assert res.objective == pytest.approx(obj, rel=1e-12)


@pytest.mark.parametrize("fmt", ["dense", "csc"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_squared_elasticnet_matches_sklearn(fmt, fit_intercept):
    X, y = _data(seed=1)
    ref = SkElasticNet(alpha=0.08, l1_ratio=0.4, fit_intercept=fit_intercept, tol=1e-14,
                       max_iter=100_000).fit(X, y)
    for selection in ["greedy", "cyclic"]:
        res = _fit(X, y, SquaredLoss(), ElasticNet(0.08, 0.4), fit_intercept, selection,
                   Xin=_formats(X)[fmt])
        _assert_coef(res, ref.coef_, ref.intercept_ if fit_intercept else 0.0)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_squared_l2_matches_ridge(fit_intercept):
    X, y = _data(seed=2)
    n, alpha = X.shape[0], 0.1
    ref = Ridge(alpha=n * alpha, fit_intercept=fit_intercept, solver="cholesky").fit(X, y)
    for Xin in _formats(X).values():
        for selection in ["greedy", "cyclic", "random"]:
            res = _fit(X, y, SquaredLoss(), L2(alpha), fit_intercept, selection, Xin=Xin)
            _assert_coef(res, ref.coef_, ref.intercept_ if fit_intercept else 0.0)


@pytest.mark.parametrize("fmt", ["dense", "csc"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_logistic_l2_matches_lbfgs(fmt, fit_intercept):
    X, y = _data(n=80, p=8, seed=3, logistic=True)
    n, alpha = X.shape[0], 0.02
    ref = LogisticRegression(C=1 / (n * alpha), l1_ratio=0.0, solver="lbfgs",
                             fit_intercept=fit_intercept, tol=1e-13, max_iter=100_000)
    ref.fit(X, y)
    for selection in ["greedy", "cyclic"]:
        res = _fit(X, y, LogisticLoss(), L2(alpha), fit_intercept, selection,
                   Xin=_formats(X)[fmt])
        _assert_coef(res, ref.coef_.ravel(), ref.intercept_[0] if fit_intercept else 0.0,
                     rtol=1e-5)


def _scipy_reference(X, y, loss, alpha_l1, alpha_l2, fit_intercept):
    """min (1/n) sum l + alpha_l1 |w|_1 + alpha_l2/2 |w|^2 with w = u - v, u, v >= 0."""
    n, p = X.shape

    def f(theta):
        u, v = theta[:p], theta[p:2 * p]
        b = theta[2 * p] if fit_intercept else 0.0
        w = u - v
        z = X @ w + b
        dz = loss.derivative(y, z) / n
        gw = X.T @ dz + alpha_l2 * w
        grad = np.r_[gw + alpha_l1, -gw + alpha_l1]
        if fit_intercept:
            grad = np.r_[grad, dz.sum()]
        val = loss.value(y, z).mean() + alpha_l1 * (u + v).sum() + 0.5 * alpha_l2 * w @ w
        return val, grad

    m = 2 * p + fit_intercept
    bounds = [(0, None)] * (2 * p) + [(None, None)] * fit_intercept
    r = so.minimize(f, np.zeros(m), jac=True, method="L-BFGS-B", bounds=bounds,
                    options={"ftol": 1e-16, "gtol": 1e-12, "maxiter": 100_000,
                             "maxcor": 50})
    coef = r.x[:p] - r.x[p:2 * p]
    return coef, (r.x[2 * p] if fit_intercept else 0.0)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_logistic_l1_matches_scipy(fit_intercept):
    X, y = _data(n=80, p=8, seed=4, logistic=True)
    alpha = 0.03
    coef, b = _scipy_reference(X, y, LogisticLoss(), alpha, 0.0, fit_intercept)
    for Xin in _formats(X).values():
        res = _fit(X, y, LogisticLoss(), L1(alpha), fit_intercept, "greedy", Xin=Xin)
        assert np.count_nonzero(res.coef) < X.shape[1]
        _assert_coef(res, coef, b, rtol=1e-5)
        # optimality certificate computed independently of the kernels
        g = _np_clipped_grad(X, y, LogisticLoss(), res.coef, res.intercept, np.inf,
                             fit_intercept)
        gw = g[: X.shape[1]]
        assert np.all(np.abs(gw[res.coef == 0]) <= alpha + 1e-9)
        nz = res.coef != 0
        np.testing.assert_allclose(gw[nz] + alpha * np.sign(res.coef[nz]), 0, atol=1e-9)


def test_huber_l2_matches_scipy():
    X, y = _data(n=70, p=9, seed=5)
    y[:5] += 20  # outliers, so the linear part of the Huber loss is active
    loss = HuberLoss(0.8)
    coef, b = _scipy_reference(X, y, loss, 0.0, 0.05, True)
    for Xin in _formats(X).values():
        for selection in ["greedy", "cyclic"]:
            res = _fit(X, y, loss, L2(0.05), True, selection, Xin=Xin)
            _assert_coef(res, coef, b, rtol=1e-5)


# ---------------------------------------------------------------- clipping and state


def _row_ratio(dense, data, clip, n):
    """The kernel's per-row clip ratios."""
    ratio = np.empty(n)
    K.row_clip_ratios(dense, data, clip, ratio)
    return ratio


def _run_kernel(X, y, loss, pen, fit_intercept, clip, M, n_steps, selection, seed,
                refresh_work=2**62):
    """Drive the kernel directly with noisy updates, to reach arbitrary iterates."""
    dense, data, _ = _prepare_data(X, need_rows=True)
    n, p = X.shape
    m = p + fit_intercept
    w, z, d = np.zeros(m), np.zeros(n), np.empty(n)
    K.init_derivatives(y, z, d, loss.code, loss.param)
    g = np.zeros(m)
    K.full_gradient(dense, data, p, d, clip, g)
    work = np.zeros(3, dtype=np.int64)
    rng = np.random.default_rng(seed)
    done, _, _, status, _ = K.cd_run(
        dense, data, y, p, loss.code, loss.param, pen.code, pen.a, pen.b, clip,
        _row_ratio(dense, data, clip, n), M, 1 / np.sqrt(M), np.full(m, 0.3), selection,
        K.NOISE_LAPLACE, 0.05, K.NOISE_GAUSSIAN, rng, False, 0.0, 0, n_steps,
        w, z, d, g, work, np.int64(refresh_work), np.empty(0),
        (np.empty(0, np.int64), np.empty(0, np.uint8)), *_float_noise_args(rng),
    )
    assert done == n_steps and status == K.DONE
    return dense, data, w, z, d, g


#: Clips of the incremental-gradient test: "active" clips some terms of most rows (the
#: kernels then test term by term), "loose" and "none" clip no term (they then add each
#: changed row with one factor per row), "mixed" clips terms of the first rows only
#: (scaled up tenfold by the test), so that one update takes both routes.
_CLIPS = {"active": np.r_[np.linspace(0.05, 0.6, 10), 0.3], "loose": np.full(11, 50.0),
          "none": np.full(11, np.inf), "mixed": np.full(11, 4.0)}


@pytest.mark.parametrize("clips", sorted(_CLIPS))
@pytest.mark.parametrize("fmt", ["dense", "csc", "csr"])
@pytest.mark.parametrize("loss", [LogisticLoss(), SquaredLoss(), HuberLoss(0.5)])
def test_incremental_gradient_matches_brute_force_with_clipping(fmt, loss, clips):
    X, y = _data(n=50, p=10, seed=6, logistic=isinstance(loss, LogisticLoss))
    if clips == "mixed":
        X[:5] *= 10.0
    Xin = {"dense": X, "csc": sp.csc_matrix(X), "csr": sp.csr_matrix(X)}[fmt]
    clip = _CLIPS[clips]
    M = _smoothness(X, SquaredLoss(), True)
    dense, data, w, z, d, g = _run_kernel(Xin, y, loss, L1(0.01), True, clip, M, 400,
                                          K.GREEDY, seed=1)
    assert np.count_nonzero(w) > 3
    np.testing.assert_allclose(z, X @ w[:-1] + w[-1], rtol=0, atol=1e-12)
    brute = _np_clipped_grad(X, y, loss, w[:-1], w[-1], clip, True)
    per_example = np.abs(loss.derivative(y, z)[:, None] * np.c_[X, np.ones(len(y))])
    # The test exercises clipping where it means to, and only there.
    if clips == "mixed":
        # Most rows take the one-factor route, the scaled ones (|l'| >= 1/2 at the
        # start for every loss here) the term-by-term test.
        ratio = _row_ratio(dense, data, clip, len(y))
        assert (ratio < 1).mean() > 0.8 and (ratio[:5] > 2).sum() >= 2
    else:
        assert (per_example > clip).any() == (clips == "active")
    np.testing.assert_allclose(g, brute, rtol=0, atol=1e-12)  # incremental
    fresh = np.empty_like(g)
    K.full_gradient(dense, data, X.shape[1], d, clip, fresh)  # from columns (random/CD)
    np.testing.assert_allclose(fresh, brute, rtol=0, atol=1e-14)
    for j in range(len(g)):
        assert K.column_gradient(dense, data, j, X.shape[1], d, clip) == fresh[j]


def test_incremental_state_after_many_updates_matches_recomputation():
    rng = np.random.default_rng(7)
    X = sp.random(300, 2000, density=0.01, format="csr", random_state=rng)
    X.data = rng.standard_normal(X.nnz)
    y = np.where(rng.random(300) < 0.5, -1.0, 1.0)
    clip = np.full(2001, 0.2)
    M = np.full(2001, 0.25)
    _, data, w, z, d, g = _run_kernel(X, y, LogisticLoss(), ElasticNet(0.001, 0.5), True,
                                      clip, M, 5000, K.GREEDY, seed=2)
    np.testing.assert_allclose(z, X @ w[:-1] + w[-1], rtol=0, atol=1e-11)
    brute = _np_clipped_grad(X.toarray(), y, LogisticLoss(), w[:-1], w[-1], clip, True)
    np.testing.assert_allclose(g, brute, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- noise and randomness


@pytest.mark.parametrize("selection", ["greedy", "random", "cyclic"])
@pytest.mark.parametrize("noises", [("gumbel", "gaussian"), ("laplace", "laplace"),
                                    ("none", "gaussian")])
def test_matches_numpy_reference_draw_for_draw(selection, noises):
    """Against a transcription of the algorithm fed by the same seed: the noise is
    drawn afresh for every coordinate and update, in the documented order, and the
    clipping is applied per example."""
    sel_noise, upd_noise = noises
    X, y = _data(n=40, p=7, seed=8, logistic=True)
    loss, pen = LogisticLoss(), ElasticNet(0.02, 0.7)
    M = _smoothness(X, loss, True)
    clip = np.r_[np.full(7, 0.3), 0.5]
    scale = np.linspace(0.01, 0.05, 8)
    kw = dict(fit_intercept=True, clip=clip, n_updates=30, selection=selection,
              selection_noise=sel_noise, selection_scale=0.05, update_noise=upd_noise,
              update_scale=scale)
    ref = _np_reference_cd(X, y, loss, pen, M=M, rng=np.random.default_rng(3), **kw)
    for Xin in (X, sp.csr_matrix(X)):
        res = coordinate_descent(Xin, y, loss, pen, smoothness=M, gumbel_sampler="pass",
                                 rng=np.random.default_rng(3), **kw)
        np.testing.assert_allclose(res.coef, ref[:-1], rtol=0, atol=1e-10)
        assert res.intercept == pytest.approx(ref[-1], abs=1e-10)
        assert res.n_iter == 30


def test_noise_is_fresh_every_update():
    # All-zero data give a zero gradient: every update moves w by -noise / M, so
    # the iterates are partial sums of the draws.
    X = np.zeros((5, 1))
    y = np.zeros(5)
    steps = []
    for T in (1, 2, 3):
        r = coordinate_descent(X, y, SquaredLoss(), NoPenalty(), fit_intercept=False,
                               clip=1.0, smoothness=1.0, n_updates=T,
                               update_noise="gaussian", update_scale=1.0, rng=11)
        steps.append(r.coef[0])
    draws = -np.diff(np.r_[0.0, steps])
    np.testing.assert_allclose(draws, np.random.default_rng(11).standard_normal(3))
    assert len(set(np.round(draws, 12))) == 3

    # Selection noise: with huge noise the choices are spread over coordinates.
    X, y = _data(n=30, p=20, seed=9)
    chosen = set()
    rng = np.random.default_rng(5)
    for _ in range(10):
        r = coordinate_descent(X, y, SquaredLoss(), NoPenalty(), fit_intercept=False,
                               clip=1.0, smoothness=1.0, n_updates=1,
                               selection_noise="laplace", selection_scale=1e6, rng=rng)
        chosen.add(int(np.flatnonzero(r.coef)[0]))
    assert len(chosen) >= 5


@pytest.mark.parametrize("sampler", ["heap", "pass"])
def test_seeds(sampler):
    X, y = _data(n=50, p=30, seed=10, logistic=True)
    kw = dict(fit_intercept=True, clip=0.5, smoothness=0.25, n_updates=50,
              selection_noise="gumbel", selection_scale=0.01, update_noise="gaussian",
              update_scale=0.01, gumbel_sampler=sampler)
    a = coordinate_descent(sp.csc_matrix(X), y, LogisticLoss(), L1(0.01), rng=1, **kw)
    b = coordinate_descent(sp.csc_matrix(X), y, LogisticLoss(), L1(0.01), rng=1, **kw)
    c = coordinate_descent(sp.csc_matrix(X), y, LogisticLoss(), L1(0.01), rng=2, **kw)
    np.testing.assert_array_equal(a.coef, b.coef)
    assert a.intercept == b.intercept
    assert not np.array_equal(a.coef, c.coef)


def test_tol_is_ignored_under_noise():
    X, y = _data(seed=11)
    for noise in [dict(update_noise="gaussian", update_scale=1e-12),
                  dict(selection_noise="gumbel", selection_scale=1e-12)]:
        for selection in ["greedy", "cyclic"]:
            r = coordinate_descent(X, y, SquaredLoss(), L1(10.0), fit_intercept=False,
                                   clip=np.inf, smoothness=1.0, n_updates=77,
                                   selection=selection, tol=1e9, rng=0, **noise)
            assert r.n_iter == 77
    r = coordinate_descent(X, y, SquaredLoss(), L1(10.0), fit_intercept=False,
                           clip=np.inf, smoothness=1.0, n_updates=77, tol=1e9)
    assert r.n_iter == 0 and np.all(r.coef == 0)


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize("selection", ["greedy", "random"])
def test_csr_csc_dense_agree(selection):
    X, y = _data(n=60, p=25, density=0.2, seed=12, logistic=True)
    kw = dict(fit_intercept=True, clip=0.4, smoothness=0.1, n_updates=60,
              selection=selection, selection_noise="gumbel", selection_scale=1e-3,
              update_noise="laplace", update_scale=1e-3)
    res = [coordinate_descent(Xin, y, LogisticLoss(), L1(0.01), rng=4, **kw)
           for Xin in (X, sp.csc_matrix(X), sp.csr_matrix(X), sp.coo_matrix(X),
                       sp.csr_array(X))]
    for r in res[1:]:
        np.testing.assert_allclose(r.coef, res[0].coef, rtol=0, atol=1e-12)
        assert r.intercept == pytest.approx(res[0].intercept, abs=1e-12)
    np.testing.assert_array_equal(res[1].coef, res[2].coef)


def test_duplicate_entries_are_summed_before_clipping():
    X = sp.coo_matrix((np.array([1.0, 1.0, 2.0]), (np.array([0, 0, 1]), np.array([0, 0, 0]))),
                      shape=(2, 1)).tocsc()
    y = np.array([1.0, 1.0])
    kw = dict(fit_intercept=False, clip=1.5, smoothness=1.0, n_updates=1)
    a = coordinate_descent(X, y, SquaredLoss(), NoPenalty(), **kw)
    b = coordinate_descent(np.array([[2.0], [2.0]]), y, SquaredLoss(), NoPenalty(), **kw)
    assert a.coef[0] == b.coef[0] == pytest.approx(1.5)


# ---------------------------------------------------------------- heap sampler


def test_heap_sampler_draws_the_exponential_mechanism():
    rng = np.random.default_rng(13)
    m = 37
    s = rng.random(m) * 3
    b = 0.7
    tree = np.empty(2 * m)
    K.tree_build(tree, np.zeros(m), s, m, 0, 0.0, 0.0, np.ones(m), 1 / b)
    gen = np.random.default_rng(0)
    counts = np.bincount([K.tree_sample(tree, m, gen) for _ in range(40_000)],
                         minlength=m)
    prob = np.exp(s / b) / np.exp(s / b).sum()
    expected = 40_000 * prob
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 80  # 36 degrees of freedom: p-value about 3e-5


def test_heap_stays_consistent_and_selects_like_gumbel_max():
    rng = np.random.default_rng(14)
    X = sp.random(200, 500, density=0.02, format="csr", random_state=rng)
    X.data = rng.standard_normal(X.nnz)
    y = np.where(rng.random(200) < 0.5, -1.0, 1.0)
    m = 501
    dense, data, _ = _prepare_data(X, need_rows=True)
    w, z, d = np.zeros(m), np.zeros(200), np.empty(200)
    K.init_derivatives(y, z, d, 0, 0.0)
    g = np.zeros(m)
    K.full_gradient(dense, data, 500, d, np.full(m, 0.3), g)
    pen = L1(0.002)
    score_w = np.full(m, 2.0)
    tree = np.empty(2 * m)
    K.tree_build(tree, w, g, 500, pen.code, pen.a, pen.b, score_w, 1 / 0.01)
    changed = (np.zeros(1 + m, dtype=np.int64), np.zeros(m, dtype=np.uint8))
    gen = np.random.default_rng(0)
    K.cd_run(dense, data, y, 500, 0, 0.0, pen.code, pen.a, pen.b, np.full(m, 0.3),
             _row_ratio(dense, data, np.full(m, 0.3), 200), np.full(m, 0.25), score_w,
             np.full(m, 0.01), K.GREEDY, K.NOISE_GUMBEL, 0.01, K.NOISE_GAUSSIAN, gen, False,
             0.0, 0, 3000, w, z, d, g,
             np.zeros(3, np.int64), np.int64(2**62), tree, changed, *_float_noise_args(gen))
    assert np.count_nonzero(w) > 20
    assert changed[0][0] == 0 and not changed[1].any()
    fresh = np.empty(2 * m)
    K.tree_build(fresh, w, g, 500, pen.code, pen.a, pen.b, score_w, 1 / 0.01)
    np.testing.assert_array_equal(tree[1:], fresh[1:])

    # Same law as the one-pass Gumbel-max: compare selection frequencies at w = 0.
    X, y = _data(n=40, p=6, seed=15, logistic=True)
    kw = dict(fit_intercept=False, clip=1.0, smoothness=1.0, n_updates=1,
              selection_noise="gumbel", selection_scale=0.05)
    freq = {}
    for sampler in ("heap", "pass"):
        gen = np.random.default_rng(1)
        picks = [np.flatnonzero(coordinate_descent(X, y, LogisticLoss(), NoPenalty(),
                                                   rng=gen, gumbel_sampler=sampler,
                                                   **kw).coef)[0]
                 for _ in range(3000)]
        freq[sampler] = np.bincount(picks, minlength=6) / 3000
    np.testing.assert_allclose(freq["heap"], freq["pass"], atol=0.04)


@pytest.mark.parametrize("m", [1, 2, 7, 1000, 4097])
def test_heap_refresh_of_every_leaf_is_the_rebuilt_heap_to_the_bit(m):
    # After a step that may have changed any score, only the nodes above a leaf whose
    # value changed are recomputed, and the heap is the one tree_build gives.
    rng = np.random.default_rng(m)
    pen = L1(0.01)
    w = np.where(rng.random(m) < 0.2, rng.normal(size=m), 0.0)
    g = rng.normal(size=m) * 0.02
    score_w = rng.uniform(0.5, 2.0, m)
    tree, fresh = np.empty(2 * m), np.empty(2 * m)
    K.tree_build(tree, w, g, m, pen.code, pen.a, pen.b, score_w, 1 / 0.03)
    flags = np.zeros(m, dtype=np.uint8)
    for share in (0.0, 0.003, 0.1, 0.6, 1.0):
        pick = rng.random(m) < share
        g[pick] += rng.normal(size=pick.sum()) * 0.01
        # Moves that keep a score at 0 (|g_j| below the l1 strength at w_j = 0).
        still = (w == 0) & (np.abs(g) < 0.005)
        g[still] = rng.uniform(-0.005, 0.005, still.sum())
        leaves = tree[m:].copy()
        done = K._tree_update(tree, w, g, m, pen.code, pen.a, pen.b, score_w, 1 / 0.03,
                              flags)
        K.tree_build(fresh, w, g, m, pen.code, pen.a, pen.b, score_w, 1 / 0.03)
        np.testing.assert_array_equal(tree[1:], fresh[1:])
        assert not flags.any()
        moved = np.count_nonzero(leaves != fresh[m:])
        assert done <= min(moved * max(1, int(np.ceil(np.log2(m)))), max(m - 1, 0))


# ---------------------------------------------------------------- API and scale


def test_validation_and_result():
    X, y = _data(n=10, p=3)
    base = dict(fit_intercept=True, clip=1.0, smoothness=1.0, n_updates=3)
    r = coordinate_descent(X, y, SquaredLoss(), L2(0.1), **base)
    assert isinstance(r, CDResult) and r.coef.shape == (3,) and r.n_iter == 3
    bad = [dict(selection="best"), dict(selection_noise="normal"),
           dict(update_noise="gaussian"), dict(clip=np.ones(3)),
           dict(smoothness=0.0), dict(n_updates=-1), dict(selection_scale=-1.0),
           dict(update_noise="laplace", update_scale=-1.0)]
    for kw in bad:
        with pytest.raises(ValueError):
            coordinate_descent(X, y, SquaredLoss(), L2(0.1), **{**base, **kw})
    with pytest.raises(ValueError):
        coordinate_descent(X, y[:-1], SquaredLoss(), L2(0.1), **base)


def test_degenerate_shapes():
    y = np.array([1.0, 2.0, 4.0])
    r = coordinate_descent(np.zeros((3, 0)), y, SquaredLoss(), L1(0.1), fit_intercept=True,
                           clip=np.inf, smoothness=1.0, n_updates=50, tol=1e-12)
    assert r.coef.shape == (0,) and r.intercept == pytest.approx(7 / 3)
    r = coordinate_descent(sp.csr_matrix((3, 0)), y, SquaredLoss(), L1(0.1),
                           fit_intercept=False, clip=np.inf, smoothness=1.0, n_updates=5)
    assert r.n_iter == 0 and r.objective == pytest.approx(np.mean(y**2) / 2)


def test_heap_falls_back_when_weights_overflow():
    X, y = _data(n=20, p=5)
    kw = dict(fit_intercept=False, clip=np.inf, smoothness=1.0, n_updates=3,
              selection_noise="gumbel", selection_scale=1e-320, rng=0)
    a = coordinate_descent(X, y, SquaredLoss(), NoPenalty(), gumbel_sampler="heap", **kw)
    b = coordinate_descent(X, y, SquaredLoss(), NoPenalty(), gumbel_sampler="pass", **kw)
    np.testing.assert_array_equal(a.coef, b.coef)


def test_verbose_prints_progress(capsys):
    X, y = _data(n=20, p=4)
    coordinate_descent(X, y, SquaredLoss(), L1(0.01), fit_intercept=True, clip=np.inf,
                       smoothness=_smoothness(X, SquaredLoss(), True), n_updates=20,
                       selection="cyclic", verbose=1, objective_every=5)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 4 and "objective" in out[-1]


def _huge_problem():
    rng = np.random.default_rng(16)
    n, p, nnz = 10_000, 5_000_000, 200_000
    X = sp.csr_matrix((rng.standard_normal(nnz), (rng.integers(0, n, nnz),
                                                  rng.integers(0, p, nnz))), shape=(n, p))
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return X, y


@pytest.mark.parametrize(
    "sampler", ["heap", pytest.param("pass", marks=pytest.mark.slow)])
def test_huge_sparse_problem_runs(sampler):
    X, y = _huge_problem()
    p1 = 5_000_001
    tracemalloc.start()
    r = coordinate_descent(X, y, LogisticLoss(), L1(1e-5), fit_intercept=True,
                           clip=np.ones(p1), smoothness=np.full(p1, 0.25), n_updates=20,
                           selection_noise="gumbel", selection_scale=1e-4,
                           update_noise="gaussian", update_scale=np.full(p1, 1e-4), rng=0,
                           gumbel_sampler=sampler)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # O(nnz + n + p) memory, inputs included: about ten p-vectors (40 MB each),
    # nothing like n * p.
    assert peak < 500e6
    assert r.coef.shape == (5_000_000,) and r.n_iter == 20
    assert np.count_nonzero(r.coef) + (r.intercept != 0) >= 10


def test_data_passes_count_the_entries_each_rule_reads():
    """Cyclic CD reads each column twice (gradient, update) in a sweep: two passes. A
    greedy step reads the rows of its column once each (and their intercept term),
    after one pass for the first gradient."""
    X, y = _data(n=60, p=12, density=0.3, seed=8, logistic=True)
    Xs = sp.csr_matrix(X)
    pass_size = Xs.nnz + X.shape[0]
    kw = dict(fit_intercept=True, clip=1.0, smoothness=0.25)
    sweep = coordinate_descent(Xs, y, LogisticLoss(), NoPenalty(), n_updates=13,
                               selection="cyclic", **kw)
    assert np.count_nonzero(sweep.coef) == 12 and sweep.intercept != 0
    assert sweep.data_passes == pytest.approx(2.0, rel=1e-12)
    step = coordinate_descent(Xs, y, LogisticLoss(), NoPenalty(), n_updates=1, **kw)
    moved = np.flatnonzero(np.r_[step.coef, step.intercept])
    assert moved.size == 1
    rows = np.flatnonzero(X[:, moved[0]]) if moved[0] < 12 else np.arange(60)
    read = (np.count_nonzero(X[rows], axis=1) + 1).sum()
    assert step.data_passes == pytest.approx(1.0 + read / pass_size, rel=1e-12)


@pytest.mark.parametrize("limit", [3, 10_000])
def test_a_move_lists_the_changed_coordinates_up_to_its_limit(limit):
    # A move lists the coordinates whose gradient changed; past its consumer's limit
    # it records "all of them" and stops listing (the rest of the column needs no
    # marking pass). The gradient is the same either way.
    from skdp_sparse.optim._cd_margins import BlockMargins, new_changes, take_changes

    rng = np.random.default_rng(0)
    X = sp.random(300, 40, density=0.1, format="csr", random_state=1)
    X[np.arange(300), np.arange(300) % 40] = 1.0
    y = np.where(rng.random(300) < 0.5, -1.0, 1.0)
    clip = np.full(41, 0.5)
    listed = BlockMargins.of(X, y, LogisticLoss(), clip, 41, 300)
    reference = BlockMargins.of(X, y, LogisticLoss(), clip, 41, 300)
    changed = new_changes(41, list_limit=limit)
    column = X.tocsc()[:, 5]
    touched = np.unique(X[column.indices].indices)
    g = listed.move(5, 0.3, changed)
    np.testing.assert_array_equal(g, reference.move(5, 0.3))
    coords = take_changes(changed)
    if limit < touched.size:
        assert coords is None
    else:
        np.testing.assert_array_equal(np.sort(coords), np.append(touched, 40))
    assert not changed[1].any() and changed[0][0] == 0  # reset for the next move
    # The default limit is the selection's rebuild threshold, m / (log2(m) + 1).
    assert new_changes(1024)[0][-1] == 93
