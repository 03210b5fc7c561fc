"""DPSelectKBest: calibration, exactness without noise, the selection, bad input."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from skdp_sparse import PrivacyLeakWarning, privacy_ledger
from skdp_sparse.feature_selection import DPSelectKBest
from skdp_sparse.feature_selection._select_k_best import (
    ASSOCIATION_SHARES,
    truncated_indicators,
)
from skdp_sparse.privacy.accounting import compose, gaussian_mu
from skdp_sparse.testing import halved_noise_epsilon
from skdp_sparse.testing.audits import AUDITS


def _data(n=400, p=30, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=0.1, format="csr", random_state=seed)
    X.data = rng.uniform(0.1, 1.0, X.nnz)
    y = (np.asarray(X[:, 4].sum(axis=1)).ravel() > 0).astype(int)
    return X, y


# -- calibration -------------------------------------------------------------------
@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (0.2, 1e-9), (5.0, 1e-3)])
def test_frequency_noise_is_the_gaussian_of_the_budget_float(epsilon, delta):
    X, _ = _data()
    with pytest.warns(PrivacyLeakWarning):
        sel = DPSelectKBest(k=3, epsilon=epsilon, delta=delta, sparsity=4,
                            floating_point_safe=False, random_state=0).fit(X)
    sensitivity = math.sqrt(8.0)
    mu = sensitivity / sel.noise_scale_
    assert mu == pytest.approx(gaussian_mu(epsilon, delta), rel=1e-9)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_event.GaussianDpEvent(sel.noise_scale_ / sensitivity))
    assert acc.get_epsilon(delta) == pytest.approx(epsilon, rel=2e-3)
    assert sel.epsilon_spent_ <= epsilon * (1 + 1e-9)


@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (0.2, 1e-9)])
def test_frequency_noise_on_the_safe_path_is_the_exact_gaussian(epsilon, delta):
    X, _ = _data()
    sel = DPSelectKBest(k=3, epsilon=epsilon, delta=delta, sparsity=4,
                        random_state=0).fit(X)
    # The lattice release is bounded by the continuous Gaussian at a ratio larger by
    # (1 + 2^-16)(1 + 2^-20): its noise pays that factor over the analytic one.
    slack = (1 + 2.0**-16) * (1 + 2.0**-20)
    expected = slack * math.sqrt(8.0) / gaussian_mu(epsilon, delta)
    assert sel.noise_scale_ == pytest.approx(expected, rel=1e-9)
    assert sel.epsilon_spent_ == pytest.approx(epsilon, rel=1e-6)
    assert sel.epsilon_spent_ <= epsilon
    assert sel.delta_spent_ == delta


def test_association_spends_its_shares():
    X, y = _data()
    sel = DPSelectKBest(k=3, epsilon=1.0, delta=1e-6, score_func="association",
                        classes=[0, 1], random_state=0).fit(X, y)
    counts, association = sel.privacy_events_
    mu2 = gaussian_mu(1.0, 1e-6) ** 2
    for event, key in ((counts, "count"), (association, "association")):
        assert (2.0 / event.pld.noise_multiplier) ** 2 == pytest.approx(
            ASSOCIATION_SHARES[key] * mu2, rel=1e-9)
    assert compose(sel.privacy_events_, 1e-6)[0] == pytest.approx(1.0, rel=1e-6)


def test_frequency_noise_is_drawn_with_its_scale():
    X = sp.csr_matrix(np.ones((50, 1)))
    scores = np.array([DPSelectKBest(k=1, epsilon=1.0, delta=1e-6, sparsity=1,
                                     random_state=s).fit(X).scores_[0] for s in range(300)])
    sigma = DPSelectKBest(k=1, epsilon=1.0, delta=1e-6, sparsity=1,
                          random_state=0).fit(X).noise_scale_
    assert scores.mean() == pytest.approx(50, abs=4 * sigma / math.sqrt(300))
    assert scores.std() == pytest.approx(sigma, rel=0.15)


def test_association_audit_halves_every_unit():
    # The halved fit of the association audit adds half the noise per unit of
    # sensitivity on both releases (its sd also moves with the noisy class rate).
    audit = AUDITS["select_k_best_association"]
    X, y = audit.datasets[0]
    honest = audit.make(audit.epsilon, audit.delta, 0).fit(X, y)
    halved = audit.make(halved_noise_epsilon(honest, X, y), audit.delta, 0).fit(X, y)
    for e, h in zip(honest.privacy_events_, halved.privacy_events_, strict=True):
        assert h.rho == pytest.approx(4 * e.rho, rel=1e-6)


# -- exactness ---------------------------------------------------------------------
def test_truncated_indicators_keep_the_largest_entries_of_each_row():
    X = sp.csr_matrix(np.array([[0.1, -3.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0],
                                [0.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0]]))
    T = truncated_indicators(X, 2).toarray()
    np.testing.assert_array_equal(T, [[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0],
                                      [0, 1, 0, 0]])


def test_truncated_indicators_rank_only_the_rows_above_the_bound(monkeypatch):
    # Every entry was sorted (17 s of a 21 s fit at 10^6 rows with 2.9 x 10^7
    # non-zeros, where no row was above the bound). The kept entries are those of a
    # ranking of every row by magnitude, ties to the lower column.
    rng = np.random.default_rng(0)
    X = sp.random(400, 60, density=0.1, format="csr", random_state=1)
    X.data = rng.choice([-2.0, -1.0, 0.5, 1.0, 2.0], X.nnz)  # many ties
    sparsity = 7
    counts = np.diff(X.indptr)
    assert 0 < np.count_nonzero(counts > sparsity) < X.shape[0]
    dense = X.toarray()
    want = np.zeros_like(dense)
    for i, row in enumerate(dense):
        nz = np.flatnonzero(row)
        ranked = nz[np.lexsort((nz, -np.abs(row[nz])))]
        want[i, ranked[:sparsity]] = 1.0
    sorted_sizes = []
    lexsort = np.lexsort

    def counted(keys, *args, **kwargs):
        sorted_sizes.append(len(keys[0]))
        return lexsort(keys, *args, **kwargs)

    monkeypatch.setattr(np, "lexsort", counted)
    for fmt in ("csr", "csc"):
        np.testing.assert_array_equal(truncated_indicators(X.asformat(fmt), sparsity)
                                      .toarray(), want)
    longer = int(counts[counts > sparsity].sum())
    assert sorted_sizes == [longer, longer]


def test_the_k_best_columns_are_picked_without_sorting_every_score(monkeypatch):
    # A stable argsort of all p noisy scores took 2 to 4 s at p = 10^7 for k = 1000;
    # the selection is the same: the k highest, ties to the lower column.
    from skdp_sparse.utils._ranking import top_k

    rng = np.random.default_rng(0)
    for _ in range(300):
        p = int(rng.integers(1, 40))
        k = int(rng.integers(0, p + 1))
        scores = rng.choice([-1.0, -0.0, 0.0, 2.0, 3.5], p)
        np.testing.assert_array_equal(
            top_k(scores, k), np.sort(np.argsort(-scores, kind="stable")[:k]))
    X = sp.random(300, 5000, density=0.01, format="csr", random_state=2)
    sizes = []
    argsort = np.argsort

    def counted(a, *args, **kwargs):
        sizes.append(np.size(a))
        return argsort(a, *args, **kwargs)

    monkeypatch.setattr(np, "argsort", counted)
    sel = DPSelectKBest(k=20, sparsity=50, random_state=0).fit(X)
    assert sel.selected_.size == 20
    assert 5000 not in sizes


@pytest.mark.parametrize("sparsity", [2**31, 2**63 - 1, 10**30])
@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_a_sparsity_beyond_the_index_type_counts_every_entry(sparsity, index_type):
    # The bound was compared with the int32 index arrays and numpy raised OverflowError
    # inside the fit, after the budget was reserved.
    X, _ = _data()
    X.indices, X.indptr = X.indices.astype(index_type), X.indptr.astype(index_type)
    np.testing.assert_array_equal(truncated_indicators(X, sparsity).toarray(),
                                  (X.toarray() != 0).astype(float))
    with privacy_ledger() as ledger:
        sel = DPSelectKBest(k=5, sparsity=sparsity, random_state=0).fit(X)
    assert len(ledger) == 1 and sel.epsilon_spent_ <= 1.0


def test_frequency_without_noise_is_the_exact_top_k():
    X, _ = _data()
    sel = DPSelectKBest(k=5, epsilon=np.inf, sparsity=100).fit(X)
    counts = np.diff(X.tocsc().indptr)
    np.testing.assert_array_equal(sel.scores_, counts)
    expected = np.sort(np.argsort(-counts, kind="stable")[:5])
    np.testing.assert_array_equal(sel.get_support(indices=True), expected)
    assert sel.epsilon_spent_ == math.inf


def test_association_without_noise_is_the_exact_ranking():
    X, y = _data()
    sel = DPSelectKBest(k=4, epsilon=np.inf, score_func="association", norm_bound=10.0,
                        classes=[0, 1]).fit(X, y)
    # Rows have norm below 10: nothing is clipped; A_j = sum_i (y_i - mean(y)) x_ij.
    A = np.abs(X.T @ (y - y.mean()))
    np.testing.assert_allclose(sel.scores_, A, rtol=1e-12, atol=1e-12)
    assert 4 in sel.get_support(indices=True)
    np.testing.assert_array_equal(sel.get_support(indices=True),
                                  np.sort(np.argsort(-A, kind="stable")[:4]))


def test_private_selection_finds_the_informative_columns():
    rng = np.random.default_rng(1)
    n, p = 4000, 500
    y = rng.integers(0, 2, n)
    X = sp.random(n, p, density=0.01, format="lil", random_state=1)
    for j in range(5):
        X[np.flatnonzero(y == 1)[j::5], j] = 1.0
    X = sp.csr_matrix(X)
    from sklearn.preprocessing import normalize
    X = normalize(X)
    sel = DPSelectKBest(k=5, epsilon=1.0, delta=1e-6, score_func="association",
                        classes=[0, 1], random_state=0).fit(X, y)
    assert set(sel.get_support(indices=True)) == set(range(5))
    assert sel.transform(X).shape == (n, 5)


def test_multiclass_association_and_feature_names():
    X, y = _data()
    y = y + (np.asarray(X[:, 7].sum(axis=1)).ravel() > 0)
    sel = DPSelectKBest(k=2, epsilon=np.inf, score_func="association", classes=[0, 1, 2],
                        norm_bound=10.0).fit(X, y)
    assert sel.classes_.tolist() == [0, 1, 2]
    names = sel.get_feature_names_out([f"f{j}" for j in range(X.shape[1])])
    assert names.tolist() == [f"f{j}" for j in sel.get_support(indices=True)]


def test_k_larger_than_the_columns_keeps_all():
    X, _ = _data(p=6)
    # Warned from the public k and n_features, as scikit-learn's SelectKBest warns.
    with pytest.warns(UserWarning, match="k=50 is greater than n_features=6"):
        sel = DPSelectKBest(k=50, sparsity=3, random_state=0).fit(X)
    assert sel.get_support().all()
    # k="all", as in scikit-learn: every column, the same noisy scores and spend
    every = DPSelectKBest(k="all", sparsity=3, random_state=0).fit(X)
    assert every.get_support().all()
    np.testing.assert_array_equal(every.scores_, sel.scores_)
    assert every.privacy_events_ == sel.privacy_events_
    with pytest.raises(ValueError, match="k"):
        DPSelectKBest(k="some", sparsity=3).fit(X)


def test_fit_is_recorded_in_the_ledger():
    X, _ = _data()
    with privacy_ledger() as ledger:
        sel = DPSelectKBest(k=3, sparsity=3, random_state=0).fit(X)
    (record,) = ledger.records()
    assert record.epsilon_spent == sel.epsilon_spent_


# -- bad input ---------------------------------------------------------------------
def _nan():
    X, _ = _data()
    X = X.tolil()
    X[0, 0] = np.nan
    return sp.csr_matrix(X)


@pytest.mark.parametrize("params, data, message", [
    ({"sparsity": 3}, lambda: (_nan(), None), "NaN"),
    ({}, lambda: (_data()[0], None), "needs sparsity"),
    ({"sparsity": 3, "delta": 0.0}, lambda: (_data()[0], None), "delta > 0"),
    ({"sparsity": 0}, lambda: (_data()[0], None), "sparsity"),
    ({"sparsity": 3, "k": 0}, lambda: (_data()[0], None), "k must be"),
    ({"score_func": "association", "norm_bound": -1.0}, lambda: _data(), "norm_bound"),
    ({"score_func": "association"}, lambda: (_data()[0], None), "requires y"),
    ({"score_func": "association", "classes": [0, 2]}, lambda: _data(), "outside the public"),
    ({"score_func": "chi2", "sparsity": 3}, lambda: (_data()[0], None), "score"),
])
def test_bad_input_raises_before_any_budget(params, data, message):
    X, y = data()
    with privacy_ledger(max_epsilon=10.0, max_delta=1e-3) as ledger:
        with pytest.raises(ValueError, match=message):
            DPSelectKBest(**params, random_state=0).fit(X, y)
        assert ledger.records() == [] and ledger.pending() == []
