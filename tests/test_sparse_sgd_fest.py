"""DP-FEST (``sparse_sgd`` with ``frequent_features``): fixed features, public or chosen
once by a noisy top-k of the feature counts, then DP-SGD on them alone."""

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from skdp_sparse import DPSparseLogisticRegression
from skdp_sparse.optim.losses import LogisticLoss
from skdp_sparse.privacy.accounting import compose, gaussian_epsilon, gaussian_mu
from skdp_sparse.solvers import get_solver
from skdp_sparse.solvers._screening import noise_units
from skdp_sparse.solvers.sparse_sgd import (
    FREQUENT_FEATURES_SHARE,
    FixedFeaturesPlan,
    frequency_counts,
    release_frequent_features,
)
from skdp_sparse.testing.bounds import assert_pair_audit
from skdp_sparse.testing.solver_api import make_problem, sgd, sparse_sgd


def _data(n=600, d=300, nnz=4, seed=0):
    rng = np.random.default_rng(seed)
    # Column j is drawn with weight ~ 1/(j+1): low indices are frequent.
    p = 1.0 / np.arange(1, d + 1)
    cols = np.array([rng.choice(d, size=nnz, replace=False, p=p / p.sum())
                     for _ in range(n)])
    X = sp.csr_matrix((np.full(n * nnz, 0.5), cols.ravel(), np.arange(0, n * nnz + 1, nnz)),
                      shape=(n, d))
    X.sort_indices()
    w = rng.normal(size=d)
    y = np.where(X @ w + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _plan(X, epsilon, delta, **options):
    problem = make_problem(LogisticLoss(), epsilon=epsilon)
    options = {"max_iter": 20, "batch_size": 60, "learning_rate": None, "verbose": 0,
               **options}
    return get_solver("sparse_sgd").plan(problem, (*X.shape, 1), epsilon, delta, options)


def test_frequency_counts_and_their_sensitivity():
    X = sp.csr_matrix(np.array([[1.0, 0, -2.0, 0], [0, 0, 3.0, 0], [0.5, 0.5, 0.5, 0.5]]))
    # Rows of 2, 1 and 4 non-zeros: indicators scaled to norm <= 1.
    expected = np.array([1 / math.sqrt(2) + 0.5, 0.5, 1 / math.sqrt(2) + 1 + 0.5, 0.5])
    assert frequency_counts(X, 1.0) == pytest.approx(expected, rel=1e-12)
    # C_c = 2: rows with at most 4 non-zeros count fully.
    assert frequency_counts(X, 2.0) == pytest.approx([2, 1, 3, 1], rel=1e-12)
    # Replace-one: the counts move by at most sqrt(2) C_c.
    rng = np.random.default_rng(1)
    base = sp.random(50, 30, density=0.2, format="csr", random_state=2)
    for _ in range(200):
        other = base.tolil(copy=True)
        row = sp.random(1, 30, density=rng.uniform(0.02, 0.9), random_state=rng)
        other[int(rng.integers(50))] = row.toarray()
        c = float(rng.uniform(0.3, 3.0))
        move = np.linalg.norm(frequency_counts(base, c) - frequency_counts(other.tocsr(), c))
        assert move <= math.sqrt(2) * c * (1 + 1e-12)


@pytest.mark.parametrize("safe", [True, False], ids=["fp_safe", "float"])
def test_private_top_k_plan_splits_the_budget(safe):
    X, _ = _data()
    epsilon, delta = 1.0, 1e-6
    plan = _plan(X, epsilon, delta, frequent_features=25, floating_point_safe=safe)
    assert isinstance(plan, FixedFeaturesPlan)
    assert (plan.k, plan.columns) == (25, None)
    counts_event, *steps = plan.events
    assert counts_event.name == "sparse_sgd: noisy feature counts (top-k)"
    # The count release takes its share of the budget...
    (unit,), (expected,) = noise_units(epsilon, delta, [FREQUENT_FEATURES_SHARE], safe,
                                       ["x"])
    assert plan.count_unit == unit
    assert counts_event.rho == pytest.approx(expected.rho, rel=1e-12)
    # (its share of the Gaussian budget mu^2; the safe path's lattice slack in the unit)
    slack = (1 + 2.0**-16) * (1 + 2.0**-20) if safe else 1.0
    assert unit == pytest.approx(
        slack / (gaussian_mu(epsilon, delta) * math.sqrt(FREQUENT_FEATURES_SHARE)), rel=1e-9)
    # ... and the steps' noise is calibrated so that everything spends the budget.
    assert compose(plan.events, delta)[0] <= epsilon * (1 + 1e-9)
    assert compose(plan.events, delta)[0] >= epsilon * 0.999
    assert plan.inner.n_features == 25 and plan.inner.noise_multiplier > 0
    # A smaller share leaves more to the steps: less gradient noise.
    other = _plan(X, epsilon, delta, frequent_features=25, floating_point_safe=safe,
                  feature_selection_share=0.05)
    assert other.inner.noise_multiplier < plan.inner.noise_multiplier
    assert other.count_unit > plan.count_unit


@pytest.mark.parametrize("safe", [True, False], ids=["fp_safe", "float"])
def test_count_noise_matches_its_calibration(safe):
    # Constant data: the noisy counts minus the exact ones are the noise alone, of
    # standard deviation sqrt(2) C_c unit.
    X, _ = _data(n=40, d=2000)
    unit, c = 0.7, 1.5
    exact = frequency_counts(X, c)
    rng = np.random.default_rng(3)
    noise = np.concatenate([
        release_frequent_features(X, 5, c, unit, safe, rng)[1] - exact for _ in range(5)])
    sigma = math.sqrt(2) * c * unit
    assert stats.kstest(noise / sigma, "norm").pvalue > 1e-3
    assert np.std(noise) == pytest.approx(sigma, rel=0.03)


@pytest.mark.parametrize("undernoised", [False, True])
def test_private_top_k_audit(undernoised):
    # Worst-case pair: one row holds feature 0 alone, replaced by a row holding feature 1
    # alone; the counts move by sqrt(2) C_c. Their noisy difference (post-processing of
    # the release, what the top-k reads) bounds epsilon from below; the honest release
    # stays at its claim (the Gaussian of ratio sqrt(2 rho) of its recorded event), the
    # same release with half the noise is caught above it.
    X, _ = _data(n=30, d=6, nnz=2)
    rows = [sp.csr_matrix(([1.0], ([0], [j])), shape=(1, 6)) for j in (0, 1)]
    pair = [sp.vstack([X[:-1], r]).tocsr() for r in rows]
    # At (1.5, 0.2) the release's ratio is about 1.2: resolvable in a few thousand runs.
    (unit,), (event,) = noise_units(1.5, 0.2, [1.0], True, ["counts"])
    claim_delta = 0.2
    claim = gaussian_epsilon(math.sqrt(2 * event.rho), claim_delta)
    if undernoised:
        unit /= 2
    rng = np.random.default_rng(0)
    runs = 5000

    def statistic(Xs):
        noisy = release_frequent_features(Xs, 1, 1.0, unit, True, rng)[1]
        return noisy[0] - noisy[1]

    s = np.array([statistic(pair[0]) for _ in range(runs)])
    s_prime = np.array([statistic(pair[1]) for _ in range(runs)])
    assert_pair_audit(s, s_prime, claim, claim_delta, undernoised)


def test_public_list_is_dense_sgd_on_those_columns():
    X, y = _data()
    cols = np.array([3, 0, 7, 11, 42])
    kw = dict(epsilon=1.0, delta=1e-6, n_steps=15, batch_size=60, learning_rate=1.0)
    coef, b, steps, events, _ = sparse_sgd(X, y, LogisticLoss(), rng=5,
                                           frequent_features=cols, **kw)[:5]
    ref = sgd(X[:, np.sort(cols)], y, LogisticLoss(), rng=5, **kw)
    assert np.flatnonzero(coef).tolist() == sorted(cols.tolist())
    assert coef[np.sort(cols)] == pytest.approx(ref[0], rel=1e-12)
    assert b == pytest.approx(ref[1], rel=1e-12)
    # A public list costs nothing: the steps alone spend the budget, as dense sgd's.
    assert [e.name for e in events] == [e.name for e in ref[3]]
    assert compose(events, 1e-6)[0] == pytest.approx(compose(ref[3], 1e-6)[0], rel=1e-12)


def test_private_top_k_keeps_frequent_features_and_records_its_release():
    X, y = _data(n=3000, d=300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = DPSparseLogisticRegression(solver="sparse_sgd", frequent_features=20,
                                         classes=[-1, 1], epsilon=4.0, delta=1e-6,
                                         random_state=0).fit(X, y)
    kept = np.flatnonzero(clf.coef_[0])
    assert kept.size <= 20
    # The most frequent features (low indices) are kept.
    assert np.mean(kept < 60) > 0.7
    assert clf.privacy_events_[0].name == "sparse_sgd: noisy feature counts (top-k)"
    assert clf.epsilon_spent_ == pytest.approx(4.0, rel=1e-3)
    with pytest.raises(ValueError, match="frequent_features"):
        DPSparseLogisticRegression(solver="sparse_sgd", frequent_features=[300],
                                   classes=[-1, 1]).fit(X, y)
    with pytest.raises(ValueError, match="frequent_features"):
        DPSparseLogisticRegression(solver="sgd", frequent_features=5,
                                   classes=[-1, 1]).fit(X, y)


def test_estimator_parameters_reach_sparse_sgd():
    X, y = _data(n=400, d=200)

    def fit(**kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return DPSparseLogisticRegression(solver="sparse_sgd", classes=[-1, 1],
                                              max_iter=5, random_state=0, **kw).fit(X, y)

    base = fit()
    # A threshold no noisy count reaches selects nothing; one below every count selects
    # every feature.
    assert not np.any(fit(selection_threshold=1e6).coef_)
    assert np.all(fit(selection_threshold=-1e6).coef_)
    # The share and the contribution bound change the noise (same seed, same steps).
    for kw in (dict(selection_share=0.2), dict(contribution_bound=3.0)):
        other = fit(**kw)
        assert other.privacy_events_[0].name == base.privacy_events_[0].name
        assert not np.array_equal(other.coef_, base.coef_)
    with pytest.raises(ValueError, match="selection_share"):
        fit(selection_share=1.0)
