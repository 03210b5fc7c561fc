"""Fitting dask arrays: the same fit as in memory, whatever the chunking.

A fit on a dask array of scipy.sparse (or dense) row blocks must give the in-memory
fit's result on the same rows with the same ``random_state`` (to 1e-9), because the
blocks return only partial sums and the client draws the noise once, from the same
generator, after the reduction. The cluster tests run the same fits on a
``LocalCluster`` of worker processes.
"""

import math
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from skdp_sparse import (  # noqa: E402
    DPGreedyCDRegressor,
    DPSparseLogisticRegression,
    DPSparseMeanEstimator,
    PrivacyLedger,
)
from skdp_sparse.data import DaskData, LocalData  # noqa: E402
from skdp_sparse.exceptions import PrivacyLeakWarning  # noqa: E402
from skdp_sparse.optim.losses import LogisticLoss  # noqa: E402
from skdp_sparse.optim.penalties import L2  # noqa: E402
from skdp_sparse.privacy.row_sampling import PoissonRows, step_samplers  # noqa: E402
from skdp_sparse.solvers import Problem, distributed_solvers, get_solver  # noqa: E402

CHUNKINGS = [(600,), (200, 200, 200), (1, 299, 37, 263)]


def as_dask(X, chunks):
    """``X`` (CSR or array) as a dask array whose row blocks have the sizes ``chunks``."""
    meta = sp.csr_matrix((0, X.shape[1])) if sp.issparse(X) else np.empty((0, X.shape[1]))
    starts = np.concatenate([[0], np.cumsum(chunks)[:-1]])
    # The blocks travel as data (no function of this module has to import on workers).
    blocks = [da.from_delayed(dask.delayed(X[int(a):int(a + c)]),
                              shape=(c, X.shape[1]), dtype=np.float64, meta=meta)
              for a, c in zip(starts, chunks, strict=True)]
    return da.concatenate(blocks, axis=0)


@pytest.fixture(scope="module")
def sparse_data():
    rng = np.random.default_rng(0)
    X = sp.random(600, 40, density=0.15, format="csr", random_state=1)
    X.data = rng.normal(size=X.nnz) * 2.0
    y = (X @ rng.normal(size=40) + 0.3 * rng.normal(size=600) > 0).astype(int)
    return X, y


def _same(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------
# The mean, every method
# --------------------------------------------------------------------------
@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize("method,delta,safe", [
    ("projection", 1e-6, True), ("projection", 0.0, True), ("projection", 1e-6, False),
    ("gaussian", 1e-6, True), ("laplace", 0.0, True), ("laplace", 0.0, False),
])
def test_mean_on_dask_equals_in_memory(sparse_data, chunks, method, delta, safe):
    X, _ = sparse_data
    kw = dict(epsilon=1.0, delta=delta, norm_bound=1.5, sparsity=6, method=method,
              floating_point_safe=safe, random_state=7)
    with pytest.warns() if safe is False else _no_warning():
        local = DPSparseMeanEstimator(**kw).fit(X)
    with pytest.warns() if safe is False else _no_warning():
        remote = DPSparseMeanEstimator(**kw).fit(as_dask(X, chunks))
    _same(remote.mean_, local.mean_)
    assert remote.epsilon_spent_ == local.epsilon_spent_
    assert remote.n_features_in_ == X.shape[1]


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("chunks", [(60,), (25, 35)])
def test_mean_l1_recovery_on_dask_equals_in_memory(chunks):
    # The compressed branch needs d large against n eps (test_mean's sizes).
    rng = np.random.default_rng(2)
    n, d, s = 60, 8000, 3
    X = sp.csr_matrix((np.abs(rng.normal(size=n * s)),
                       rng.integers(0, d, size=n * s), np.arange(0, n * s + 1, s)),
                      shape=(n, d))
    kw = dict(epsilon=2.0, delta=1e-5, sparsity=s, method="l1_recovery", random_state=0)
    local = DPSparseMeanEstimator(**kw).fit(X)
    assert local.n_measurements_ > 0
    remote = DPSparseMeanEstimator(**kw).fit(as_dask(X, chunks))
    _same(remote.mean_, local.mean_)


def test_mean_on_dense_blocks_equals_in_memory(sparse_data):
    X = sparse_data[0].toarray()
    kw = dict(epsilon=1.0, delta=1e-6, sparsity=6, method="projection", random_state=3)
    _same(DPSparseMeanEstimator(**kw).fit(as_dask(X, (250, 350))).mean_,
          DPSparseMeanEstimator(**kw).fit(X).mean_)


def test_mean_without_noise_is_the_clipped_mean(sparse_data):
    X, _ = sparse_data
    est = DPSparseMeanEstimator(epsilon=np.inf, norm_bound=1.0, method="gaussian",
                                delta=1e-6).fit(as_dask(X, (100, 500)))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).ravel()
    scales = np.minimum(1.0, 1.0 / np.maximum(norms, 1e-300))
    exact = np.asarray(X.multiply(scales[:, None]).mean(axis=0)).ravel()
    np.testing.assert_allclose(est.mean_, exact, rtol=1e-12, atol=1e-15)


# --------------------------------------------------------------------------
# sgd: full batch, Poisson and fixed-size minibatches
# --------------------------------------------------------------------------
@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize("batch_size", [None, 120])
def test_sgd_on_dask_equals_in_memory(sparse_data, chunks, batch_size):
    X, y = sparse_data
    kw = dict(epsilon=1.0, delta=1e-6, norm_bound=2.0, solver="sgd", classes=[0, 1],
              batch_size=batch_size, max_iter=15, random_state=11)
    local = DPSparseLogisticRegression(**kw).fit(X, y)
    remote = DPSparseLogisticRegression(**kw).fit(as_dask(X, chunks),
                                                  da.from_array(y, chunks=(chunks,)))
    _same(remote.coef_, local.coef_)
    _same(remote.intercept_, local.intercept_)
    assert remote.epsilon_spent_ == local.epsilon_spent_
    assert remote.delta_spent_ == local.delta_spent_


def _signs(y):
    return np.where(np.asarray(y) > 0, 1.0, -1.0).reshape(-1, 1), {}


@pytest.mark.parametrize("chunks", CHUNKINGS)
def test_sgd_without_replacement_on_dask_equals_in_memory(sparse_data, chunks):
    X, y = sparse_data
    problem = Problem(LogisticLoss(), L2(0.01), norm_bound=2.0, fit_intercept=True)
    solver = get_solver("sgd")
    options = dict(max_iter=12, batch_size=90, sampling="without_replacement")
    plan = solver.plan(problem, (600, 40, 1), 1.0, 1e-6, {**_defaults(), **options})
    local = solver.solve(problem, LocalData(X, _signs(y)[0]), plan, np.random.default_rng(4))
    data = DaskData.from_arrays(as_dask(X, chunks), y, targets=_signs, n_targets=1)
    remote = solver.solve(problem, data, plan, np.random.default_rng(4))
    _same(remote.coef, local.coef)
    _same(remote.intercept, local.intercept)


def _defaults():
    return {"max_iter": None, "batch_size": None, "learning_rate": None}


@pytest.mark.parametrize("multi_class", ["ovr", "multinomial"])
def test_sgd_multiclass_and_regression_on_dask_equal_in_memory(sparse_data, multi_class):
    X, y = sparse_data
    labels = y + (np.arange(y.size) % 3 == 0)
    kw = dict(epsilon=2.0, delta=1e-6, solver="sgd", classes=[0, 1, 2], max_iter=10,
              multi_class=multi_class, random_state=5)
    local = DPSparseLogisticRegression(**kw).fit(X, labels)
    remote = DPSparseLogisticRegression(**kw).fit(as_dask(X, (300, 300)), labels)
    assert local.multi_class_ == multi_class
    _same(remote.coef_, local.coef_)
    _same(remote.intercept_, local.intercept_)
    # Poisson batches: each block draws its own rows of every step.
    kw["batch_size"] = 100
    local = DPSparseLogisticRegression(**kw).fit(X, labels)
    remote = DPSparseLogisticRegression(**kw).fit(as_dask(X, (1, 299, 37, 263)), labels)
    _same(remote.coef_, local.coef_)
    target = X @ np.linspace(-1, 1, X.shape[1])
    kw = dict(epsilon=2.0, delta=1e-6, solver="sgd", target_bound=3.0, max_iter=10,
              random_state=5)
    local = DPGreedyCDRegressor(**kw).fit(X, target)
    remote = DPGreedyCDRegressor(**kw).fit(as_dask(X, (100, 500)), target)
    _same(remote.coef_, local.coef_)
    _same(remote.intercept_, local.intercept_)
    # The regression's refit (centre, scale, moments) sums its statistics where the rows
    # are.
    kw["decision"] = "calibrated"
    local = DPGreedyCDRegressor(**kw).fit(X, target)
    remote = DPGreedyCDRegressor(**kw).fit(as_dask(X, (100, 500)), target)
    assert len([e for e in local.privacy_events_ if e.name.startswith("decision:")]) == 3
    _same(remote.coef_, local.coef_)
    _same(remote.intercept_, local.intercept_)


def test_sgd_without_noise_on_dask_matches_in_memory_optimum(sparse_data):
    X, y = sparse_data
    kw = dict(epsilon=np.inf, solver="sgd", classes=[0, 1], max_iter=50, random_state=0)
    local = DPSparseLogisticRegression(**kw).fit(X, y)
    remote = DPSparseLogisticRegression(**kw).fit(as_dask(X, (1, 299, 300)), y)
    _same(remote.coef_, local.coef_)


# --------------------------------------------------------------------------
# greedy_cd: margins kept on the workers, selection and noise on the client
# --------------------------------------------------------------------------
#: The safe path (exact samplers: its releases are lattice values, so a rounding
#: difference of the summed gradient would have to cross a lattice point to show) and
#: the float path, with both selection rules.
GREEDY_PATHS = [(True, "exponential"), (True, "laplace"), (False, "exponential"),
                (False, "laplace")]


def _greedy_pair(Est, X, y, chunks, **kw):
    # A norm_bound above most rows' norms: curvature="auto" then releases the column
    # second moments, from the blocks' partial sums on a dask array.
    kw = {"epsilon": 5.0, "delta": 1e-6, "solver": "greedy_cd", "max_iter": 120,
          "norm_bound": 8.0, "random_state": 3, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        local = Est(**kw).fit(X, y)
        remote = Est(**kw).fit(as_dask(X, chunks), da.from_array(np.asarray(y),
                                                                 chunks=(chunks,)))
    return local, remote


def _same_fit(remote, local):
    _same(remote.coef_, local.coef_)
    _same(remote.intercept_, local.intercept_)
    assert remote.n_iter_ == local.n_iter_
    assert remote.epsilon_spent_ == local.epsilon_spent_
    assert remote.delta_spent_ == local.delta_spent_


@pytest.mark.parametrize("chunks", CHUNKINGS)
@pytest.mark.parametrize("safe,selection", GREEDY_PATHS)
def test_greedy_cd_on_dask_equals_in_memory(sparse_data, chunks, safe, selection):
    # Float path: the blocks' gradients are added in another order than the in-memory
    # run's incremental sums, so the coefficients differ by rounding (about 1e-15 here),
    # far below the tolerance; the noisy selection would have to meet a near-tie of two
    # noisy scores within that rounding to choose otherwise.
    X, y = sparse_data
    local, remote = _greedy_pair(DPSparseLogisticRegression, X, y, chunks, classes=[0, 1],
                                 floating_point_safe=safe, selection=selection)
    assert np.count_nonzero(local.coef_) > 3
    _same_fit(remote, local)
    if safe:
        # The safe releases are lattice values: equal, not merely close.
        np.testing.assert_array_equal(remote.coef_, local.coef_)


@pytest.mark.parametrize("curvature,norm_bound,epsilon", [
    ("private", 8.0, 5.0), ("bound", 8.0, 5.0), ("auto", 1.5, 1.0)])
def test_greedy_cd_curvature_and_regression_on_dask_equal_in_memory(
        sparse_data, curvature, norm_bound, epsilon):
    # "private" releases the column second moments from the blocks' partial sums;
    # "auto" at this norm_bound and epsilon takes the norm-share constants, with the
    # rows clipped on the blocks.
    X, y = sparse_data
    chunks = (1, 299, 37, 263)
    kw = dict(curvature=curvature, norm_bound=norm_bound, epsilon=epsilon)
    local, remote = _greedy_pair(DPSparseLogisticRegression, X, y, chunks, classes=[0, 1],
                                 **kw)
    _same_fit(remote, local)
    target = X @ np.linspace(-1, 1, X.shape[1])
    for safe in (True, False):
        local, remote = _greedy_pair(DPGreedyCDRegressor, X, target, chunks,
                                     target_bound=3.0, floating_point_safe=safe, **kw)
        _same_fit(remote, local)


def test_greedy_cd_multiclass_dense_and_one_row_blocks_on_dask_equal_in_memory(
        sparse_data):
    X, y = sparse_data
    labels = y + (np.arange(y.size) % 3 == 0)
    local, remote = _greedy_pair(DPSparseLogisticRegression, X, labels, (250, 350),
                                 classes=[0, 1, 2])
    assert local.coef_.shape == (3, X.shape[1])
    _same_fit(remote, local)
    local, remote = _greedy_pair(DPSparseLogisticRegression, X.toarray(), y, (250, 350),
                                 classes=[0, 1], floating_point_safe=False)
    _same_fit(remote, local)
    # Blocks of one row each (fewer rows: each block is a task of every step).
    small, labels = X[:40], y[:40]
    for safe in (True, False):
        local, remote = _greedy_pair(DPSparseLogisticRegression, small, labels, (1,) * 40,
                                     classes=[0, 1], max_iter=30, floating_point_safe=safe)
        _same_fit(remote, local)


def test_greedy_cd_without_noise_on_dask_stops_like_in_memory(sparse_data):
    # No noise: the exact second moments, and the stopping test on the summed gradient.
    X, y = sparse_data
    local, remote = _greedy_pair(DPSparseLogisticRegression, X, y, (100, 500),
                                 classes=[0, 1], epsilon=np.inf, max_iter=None, tol=1e-4)
    assert local.n_iter_ < 200 * (X.shape[1] + 1)
    _same_fit(remote, local)


@pytest.mark.parametrize("wide", [False, True])
def test_greedy_cd_blocks_add_up_to_the_in_memory_state(sparse_data, wide):
    # The engine's two sides: the blocks' gradients after the same moves add up to the
    # in-memory block's, and so do their losses and the entries they read. On wide
    # rows a move changes few coordinates, and only those come back from the blocks.
    from skdp_sparse.optim.coordinate_descent import BlockMargins

    X, y = sparse_data
    if wide:
        X = sp.random(600, 400, density=0.005, format="csr", random_state=4)
        X.data = np.random.default_rng(4).normal(size=X.nnz) * 2.0
        X[np.arange(600), np.arange(600) % 400] = 1.0  # no column without rows
    p = X.shape[1]
    signs = _signs(y)[0][:, 0]
    clip = np.full(p + 1, 0.7)
    whole = BlockMargins.of(X, signs, LogisticLoss(), clip, p + 1, 600)
    data = DaskData.from_arrays(as_dask(X, (1, 299, 37, 263)), y, targets=_signs,
                                n_targets=1)
    remote = data.entries_clipped(np.inf).greedy_margins(data.target(0), LogisticLoss(),
                                                         clip, p + 1)
    np.testing.assert_allclose(remote.gradient, whole.g, rtol=0, atol=1e-15)
    for j, step in [(3, 0.5), (p, -0.2), (3, -1.0), (17, 2.0)]:
        before = remote.gradient.copy()
        changed = remote.move(j, step)
        np.testing.assert_allclose(remote.gradient, whole.move(j, step), rtol=0,
                                   atol=1e-15)
        if changed is None:  # most coordinates moved: the whole vector came back
            assert not wide or j == p
            continue
        assert wide and 0 < changed.size < p
        # Every other entry is as it was, bit for bit.
        kept = np.setdiff1d(np.arange(p + 1), changed)
        np.testing.assert_array_equal(remote.gradient[kept], before[kept])
    assert math.isclose(remote.loss_sum(), whole.loss_sum(), rel_tol=1e-13)
    assert remote.entries_read(True)[1] == whole.entries_read(True)[1]


# --------------------------------------------------------------------------
# Poisson sampling on the blocks
# --------------------------------------------------------------------------
def test_poisson_rows_are_the_same_whatever_the_blocks():
    sampler = PoissonRows(0.3, (12345, 678))
    whole = sampler.rows(0, 1000)
    for cuts in ([0, 1, 2, 3, 1000], [0, 499, 500, 1000], [0, 333, 777, 1000]):
        parts = [sampler.rows(a, b) + a for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        np.testing.assert_array_equal(np.concatenate(parts), whole)
    # a retry draws the same rows
    np.testing.assert_array_equal(sampler.rows(10, 90), sampler.rows(10, 90))


def test_poisson_rows_keep_each_row_with_the_rate():
    # 200 steps x 5000 rows: the kept fraction within 5 standard deviations of q,
    # and each step's sample fresh (no two steps share their rows).
    rng = np.random.default_rng(0)
    q, n = 0.05, 5000
    samplers = step_samplers(q, 200, rng)
    counts = np.array([s.rows(0, n).size for s in samplers])
    sd = math.sqrt(q * (1 - q) * n * 200)
    assert abs(counts.sum() - q * n * 200) < 5 * sd
    assert len({tuple(s.rows(0, n)) for s in samplers}) == 200
    # a row's inclusion is independent across steps: row 0 kept about q of the time
    kept = np.zeros(n)
    for s in samplers:
        kept[s.rows(0, n)] += 1
    assert abs(kept.mean() - q * 200) < 5 * math.sqrt(q * (1 - q) * 200 / n)


# --------------------------------------------------------------------------
# Errors: clear, and before any budget is reserved
# --------------------------------------------------------------------------
def test_bad_blocks_fail_before_the_budget_is_reserved(sparse_data):
    X, y = sparse_data
    bad = X.copy()
    bad.data[-1] = np.nan
    ledger = PrivacyLedger(max_epsilon=10.0, max_delta=1e-3)
    with pytest.raises(ValueError, match="NaN"):
        _fit_with(ledger, DPSparseMeanEstimator(sparsity=5), as_dask(bad, (300, 300)))
    with pytest.raises(ValueError, match="NaN"):
        _fit_with(ledger, DPSparseLogisticRegression(solver="sgd", classes=[0, 1],
                                                     delta=1e-6), as_dask(bad, (300, 300)), y)
    with pytest.raises(ValueError, match="do not have the sizes of its chunks"):
        _fit_with(ledger, DPSparseMeanEstimator(sparsity=5), _mislabelled(X))
    # Numeric targets are finite, as in memory: a target range would clip an infinite
    # one, and a NaN would reach the solver after the budget is reserved.
    for value in (np.nan, np.inf):
        target = np.zeros(X.shape[0])
        target[-1] = value
        for solver in ("sgd", "greedy_cd"):
            with pytest.raises(ValueError, match="y contains NaN or infinity"):
                _fit_with(ledger, DPGreedyCDRegressor(solver=solver, target_bounds=(-1, 1),
                                                      delta=1e-6),
                          as_dask(X, (300, 300)), da.from_array(target, chunks=300))
    assert ledger.pending() == [] and len(ledger) == 0


def _mislabelled(X):
    """``X`` in blocks of 250 and 350 rows whose chunks say 300 and 300."""
    meta = sp.csr_matrix((0, X.shape[1]))
    return da.concatenate([da.from_delayed(dask.delayed(part), shape=(300, X.shape[1]),
                                           dtype=np.float64, meta=meta)
                           for part in (X[:250], X[250:])])


def _fit_with(ledger, est, *args):
    with ledger.activate():
        return est.fit(*args)


def test_unsupported_solver_and_missing_label_set_raise_clearly(sparse_data):
    X, y = sparse_data
    Xd = as_dask(X, (300, 300))
    distributed = distributed_solvers()
    with pytest.raises(ValueError, match="cannot fit a dask array.*"
                                         + re.escape(repr(distributed))):
        DPSparseLogisticRegression(solver="cd", classes=[0, 1],
                                   delta=1e-6).fit(Xd, y)
    with pytest.raises(ValueError, match="classes="):
        DPSparseLogisticRegression(solver="sgd", delta=1e-6).fit(Xd, y)
    with pytest.raises(ValueError, match="outside|not in|unknown"):
        DPSparseLogisticRegression(solver="sgd", delta=1e-6, classes=[0, 1]).fit(Xd, y + 5)
    with pytest.raises(ValueError, match="1-d with 600"):
        DPSparseLogisticRegression(solver="sgd", delta=1e-6, classes=[0, 1]).fit(Xd, y[:10])
    unknown = da.from_array(np.ones((10, 3)), chunks=5)[da.from_array(np.arange(10)) > 2]
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        DPSparseMeanEstimator().fit(unknown)


def test_a_screening_rule_on_a_dask_array_is_refused_by_name(sparse_data):
    # solver="auto" takes screened_newton for a screening rule; the error then named the
    # solvers that fit dask arrays as the way out ("pass solver=... explicitly"), none
    # of which screens.
    X, y = sparse_data
    Xd = as_dask(X, (300, 300))
    for rule in ("sure", 5):
        with pytest.raises(ValueError, match=re.escape(
                f"feature_selection={rule!r} is not supported on a dask array")):
            DPSparseLogisticRegression(feature_selection=rule, classes=[0, 1], epsilon=1.0,
                                       delta=1e-6).fit(Xd, y)


def test_other_dask_collections_and_labels_of_unknown_length_are_refused_clearly(sparse_data):
    # A dask DataFrame (here a bag, which needs no pyarrow) was refused with "does not
    # take dask collections" by the very estimators the message then listed; labels
    # with unknown chunk sizes raised "cannot convert float NaN to integer".
    import dask.bag as db

    X, y = sparse_data
    ledger = PrivacyLedger()
    rows = db.from_sequence(X.toarray().tolist(), npartitions=2)
    for est in (DPSparseMeanEstimator(), DPSparseLogisticRegression(solver="sgd",
                                                                    classes=[0, 1])):
        with pytest.raises(ValueError, match=r"does not take a dask Bag.*"
                                             r"to_dask_array\(lengths=True\)") as info:
            _fit_with(ledger, est, rows, y)
        # It names every solver that runs on row blocks.
        assert all(name in str(info.value) for name in distributed_solvers())
    labels = da.from_array(y, chunks=300)
    labels = labels[labels >= 0]  # all of them, in chunks of unknown size
    with pytest.raises(ValueError, match="y has unknown chunk sizes"):
        _fit_with(ledger, DPSparseLogisticRegression(solver="sgd", classes=[0, 1]),
                  as_dask(X, (300, 300)), labels)
    assert ledger.pending() == [] and len(ledger) == 0


# --------------------------------------------------------------------------
# On a cluster of worker processes
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        yield client


@pytest.mark.dask
def test_bad_blocks_on_a_local_cluster_fail_before_the_budget_is_reserved(cluster,
                                                                         sparse_data):
    # The workers validate their blocks; the first error comes back before the fit
    # checks its budget, which this cap would refuse (a later check would raise
    # BudgetExceededError instead).
    X, y = sparse_data
    bad = X.copy()
    bad.data[-1] = np.inf
    ledger = PrivacyLedger(max_epsilon=0.5, max_delta=1e-3)
    with pytest.raises(ValueError, match="NaN or infinity"):
        _fit_with(ledger, DPSparseLogisticRegression(solver="sgd", classes=[0, 1],
                                                     epsilon=1.0, delta=1e-6),
                  as_dask(bad, (300, 300)), y)
    with pytest.raises(ValueError, match="do not have the sizes of its chunks"):
        _fit_with(ledger, DPSparseMeanEstimator(sparsity=5, epsilon=1.0), _mislabelled(X))
    assert ledger.pending() == [] and len(ledger) == 0


@pytest.mark.dask
def test_fits_on_a_local_cluster_equal_in_memory(cluster, sparse_data):
    X, y = sparse_data
    chunks = (100, 250, 250)
    Xd, yd = as_dask(X, chunks), da.from_array(y, chunks=(chunks,))
    kw = dict(epsilon=1.0, delta=1e-6, sparsity=6, method="projection", random_state=2)
    _same(DPSparseMeanEstimator(**kw).fit(Xd).mean_, DPSparseMeanEstimator(**kw).fit(X).mean_)
    for batch_size in (None, 150):
        kw = dict(epsilon=1.0, delta=1e-6, solver="sgd", classes=[0, 1], max_iter=8,
                  batch_size=batch_size, random_state=9)
        remote = DPSparseLogisticRegression(**kw).fit(Xd, yd)
        local = DPSparseLogisticRegression(**kw).fit(X, y)
        _same(remote.coef_, local.coef_)
        _same(remote.intercept_, local.intercept_)
    for solver in ("greedy_cd", "bounded_newton"):
        kw = dict(epsilon=2.0, delta=1e-6, solver=solver, classes=[0, 1], random_state=4)
        _same_fit(DPSparseLogisticRegression(**kw).fit(Xd, yd),
                  DPSparseLogisticRegression(**kw).fit(X, y))


@pytest.mark.dask
def test_row_sums_on_a_local_cluster_are_one_call_to_each_worker(cluster, sparse_data):
    # The actors holding each worker's blocks give, bit for bit, the total of the task
    # graph's reduction (for the blocks as given and for a clipped view).
    distributed = pytest.importorskip("distributed")
    X, y = sparse_data
    data = DaskData.from_arrays(as_dask(X, (100, 50, 200, 250)), y, targets=_signs,
                                n_targets=1)
    b = np.full(40, 0.9)
    for kwargs in ({}, {"norm_bound": 1.5}):
        by_actors = _pass_over_rows(data, b, kwargs)
        key = None if not kwargs else (1.5, math.inf)
        holders = data._row_holders[key]
        assert len(holders) == 2
        assert all(isinstance(h, distributed.Actor) for h in holders)
        data._row_holders[key] = None  # the task graph instead
        by_graph = _pass_over_rows(data, b, kwargs)
        if not kwargs:
            assert by_actors[1] == by_graph[1]
            by_actors, by_graph = by_actors[0], by_graph[0]
        np.testing.assert_array_equal(by_actors, by_graph)


def _pass_over_rows(data, b, kwargs):
    return data.column_second_moment_sums(b, 2.0) if not kwargs else \
        data.row_sum(_second_moments_of_rows, b, **kwargs)


def _second_moments_of_rows(X, Y, start, b):
    return np.concatenate([np.asarray(X.multiply(X).sum(axis=0)).ravel() * b,
                           [start, X.shape[0]]])


@pytest.mark.dask
def test_greedy_cd_states_live_on_the_workers_of_a_local_cluster(cluster, sparse_data):
    # One actor per worker holds its blocks' states; its answers are those of the
    # same blocks held here.
    distributed = pytest.importorskip("distributed")
    X, y = sparse_data
    clip = np.full(41, 0.7)
    data = DaskData.from_arrays(as_dask(X, (100, 250, 250)), y, targets=_signs,
                                n_targets=1)
    rows = data.entries_clipped(np.inf)
    remote = rows.greedy_margins(data.target(0), LogisticLoss(), clip, 41)
    assert remote._remote
    assert all(isinstance(h, distributed.Actor) for h in remote._holders)
    from skdp_sparse.data._dask import _DaskMargins, _GroupMargins

    here = object.__new__(_DaskMargins)
    here._holders = [_GroupMargins(list(cluster.gather(
        [distributed.futures_of(rows._blocks[i])[0] for i in group])), 0, LogisticLoss(),
        clip, 41, 600) for group in rows._groups]
    here._remote = False
    here._parts = np.array([h.gradient() for h in here._holders])
    from skdp_sparse.data._dask import _tree_sum

    here.gradient = _tree_sum(here._parts)
    np.testing.assert_array_equal(remote.gradient, here.gradient)
    for j, step in [(3, 0.5), (40, -0.2), (17, 2.0)]:
        remote.move(j, step)
        here.move(j, step)
        np.testing.assert_array_equal(remote.gradient, here.gradient)
    assert remote.loss_sum() == here.loss_sum()


@pytest.mark.dask
def test_greedy_cd_fails_when_a_worker_holding_its_states_is_lost(sparse_data, monkeypatch):
    # A worker killed mid-fit takes its blocks' states with it: the fit raises (it does
    # not go on from another state, nor hang), stays unfitted, and the ledger records
    # the plan of the fit, whose selections had drawn noise.
    import os
    import signal

    distributed = pytest.importorskip("distributed")
    from skdp_sparse.data import _dask
    from skdp_sparse.privacy.ledger import PrivacyLedger

    X, y = sparse_data
    real_move = _dask._DaskMargins.move
    moves = []

    def move_then_lose_a_worker(self, j, delta):
        moves.append(j)
        if len(moves) == 3:
            client = distributed.get_client()
            holder = self._holders[0]._address
            pid = client.run(os.getpid, workers=[holder])[holder]
            os.kill(pid, signal.SIGKILL)
        return real_move(self, j, delta)

    monkeypatch.setattr(_dask._DaskMargins, "move", move_then_lose_a_worker)
    model = DPSparseLogisticRegression(epsilon=5.0, delta=1e-6, solver="greedy_cd",
                                       max_iter=50, norm_bound=8.0, classes=[0, 1],
                                       random_state=3)
    ledger = PrivacyLedger()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cl, \
            distributed.Client(cl), ledger.activate():
        Xd, yd = as_dask(X, (100, 250, 250)), da.from_array(y, chunks=((100, 250, 250),))
        with pytest.raises(RuntimeError, match="worker holding blocks of the fit"):
            model.fit(Xd, yd)
    assert len(moves) == 3
    assert not hasattr(model, "coef_")
    (record,) = ledger.records()
    assert record.epsilon_spent == pytest.approx(5.0, rel=1e-9)
    assert record.delta_spent == pytest.approx(1e-6, rel=1e-9)


@pytest.mark.dask
@pytest.mark.parametrize("safe,selection", GREEDY_PATHS)
def test_greedy_cd_on_a_local_cluster_equals_in_memory(cluster, sparse_data, safe,
                                                       selection):
    # The blocks' margins persist on the worker processes from step to step; every
    # step sends the coordinate and its step and gets the summed gradient back.
    X, y = sparse_data
    for chunks in [(600,), (100, 250, 250), (1, 299, 37, 263)]:
        local, remote = _greedy_pair(DPSparseLogisticRegression, X, y, chunks,
                                     classes=[0, 1], floating_point_safe=safe,
                                     selection=selection, max_iter=60)
        _same_fit(remote, local)
    target = X @ np.linspace(-1, 1, X.shape[1])
    local, remote = _greedy_pair(DPGreedyCDRegressor, X, target, (100, 250, 250),
                                 target_bound=3.0, curvature="private", norm_bound=10.0,
                                 floating_point_safe=safe, selection=selection, max_iter=60)
    _same_fit(remote, local)


def test_poisson_rows_never_keep_above_the_rate():
    # The coin is a 53-bit integer compared with floor(q 2^53): q = 2^-53 keeps a row
    # only on the coin 0, and a rate just below 1 / 2^k keeps below it.
    sampler = PoissonRows(2.0**-53 * 0.999, (1, 2))
    assert sampler.rows(0, 100_000).size == 0
    assert PoissonRows(1.0, (1, 2)).rows(0, 1000).size == 1000


# --------------------------------------------------------------------------
# Predictions on dask arrays
# --------------------------------------------------------------------------
@pytest.mark.parametrize("chunks", CHUNKINGS)
def test_predictions_on_a_dask_array_are_those_in_memory_block_by_block(sparse_data, chunks):
    # They used to be refused with "does not take dask collections", after a dask fit.
    X, y = sparse_data
    Xd = as_dask(X, chunks)
    labels = np.array(["a", "b", "c"])[(np.arange(X.shape[0]) * 7) % 3]
    for clf in (DPSparseLogisticRegression(solver="sgd", classes=[0, 1],
                                           random_state=0).fit(as_dask(X, chunks),
                                                               da.from_array(y)),
                DPSparseLogisticRegression(solver="sgd", classes=["a", "b", "c"],
                                           random_state=0).fit(X, labels)):
        for name in ("predict", "decision_function", "predict_proba", "predict_log_proba"):
            lazy = getattr(clf, name)(Xd)
            assert isinstance(lazy, da.Array)
            got, want = lazy.compute(), getattr(clf, name)(X)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    reg = DPGreedyCDRegressor(solver="sgd", target_bounds=(-3, 3),
                              random_state=0).fit(X, X @ np.linspace(-1, 1, X.shape[1]))
    np.testing.assert_array_equal(reg.predict(Xd).compute(), reg.predict(X))
