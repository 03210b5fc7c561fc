"""Per-entry work over blocks of whole rows or columns: every stored entry once, in
storage order, and the preprocessing sums and copies the same to the bit as the
expressions over all entries at once."""

import numpy as np
import pytest
import scipy.sparse as sp

from skdp_sparse.preprocessing._bounds import clip_and_scale_sparse, unscale_sparse
from skdp_sparse.preprocessing._moments import unit_sums
from skdp_sparse.utils import _entry_blocks
from skdp_sparse.utils._entry_blocks import entry_blocks


def _matrix(fmt, index_dtype, dtype, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(300, 40, density=0.2, format="csr", random_state=rng, dtype=np.float64)
    X.data = rng.normal(0, 3, X.data.size)
    X = X.tolil()
    X[7, :] = 0  # an empty row
    X[:, 5] = 0  # an empty column
    X[11, :] = rng.normal(0, 3, 40)  # a row longer than a block
    X = X.asformat(fmt).astype(dtype)
    X.indices = X.indices.astype(index_dtype)
    X.indptr = X.indptr.astype(index_dtype)
    return X


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("size", [1, 7, 30, 10**6])
def test_blocks_cover_every_entry_once_in_storage_order(fmt, size):
    X = _matrix(fmt, np.int32, np.float64)
    coo = X.tocoo()  # COO of CSR / CSC keeps storage order
    starts, rows, cols = [], [], []
    for entries, r, c in entry_blocks(X, size):
        starts.append((entries.start, entries.stop))
        rows.append(r)
        cols.append(c)
    # Contiguous blocks of whole rows (columns), at most `size` entries unless one
    # row alone holds more.
    assert starts[0][0] == 0 and starts[-1][1] == X.nnz
    assert all(a[1] == b[0] for a, b in zip(starts[:-1], starts[1:], strict=True))
    major = X.indptr
    for (a, b), r, c in zip(starts, rows, cols, strict=True):
        assert a in major and b in major
        m = r if fmt == "csr" else c
        assert b - a <= size or np.unique(m).size == 1
    np.testing.assert_array_equal(np.concatenate(rows), coo.row)
    np.testing.assert_array_equal(np.concatenate(cols), coo.col)


def _reference_unit_sums(X, lower, upper):
    """The sums over all entries at once (no blocks)."""
    n, p = X.shape
    mid, half = (lower + upper) / 2, (upper - lower) / 2
    clipped = X.astype(np.float64, copy=True)
    cols = clipped.indices if X.format == "csr" else np.repeat(np.arange(p), np.diff(X.indptr))
    np.clip(clipped.data, lower[cols], upper[cols], out=clipped.data)
    z = np.clip((clipped.data - mid[cols]) / half[cols], -1.0, 1.0)
    z0 = np.clip(-mid / half, -1.0, 1.0)
    absent = n - np.bincount(cols, minlength=p)
    return (np.bincount(cols, weights=z, minlength=p) + absent * z0,
            np.bincount(cols, weights=z * z, minlength=p) + absent * z0**2)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_preprocessing_equals_the_whole_expression_bitwise(monkeypatch, fmt,
                                                                    index_dtype, dtype):
    monkeypatch.setattr(_entry_blocks, "BLOCK_ENTRIES", 13)
    X = _matrix(fmt, index_dtype, dtype, seed=1)
    rng = np.random.default_rng(2)
    lower = -rng.uniform(0.5, 4, X.shape[1])
    upper = rng.uniform(0.5, 4, X.shape[1])
    for got, want in zip(unit_sums(X, lower, upper), _reference_unit_sums(X, lower, upper),
                          strict=True):
        np.testing.assert_array_equal(got, want)
    scale = rng.uniform(0.1, 3, X.shape[1])
    out = clip_and_scale_sparse(X, lower, upper, scale, 1.5)
    want = X.astype(np.float64, copy=True)
    cols = want.indices if fmt == "csr" else np.repeat(np.arange(X.shape[1]),
                                                       np.diff(want.indptr))
    want.data = np.clip(np.clip(want.data, lower[cols], upper[cols]) / scale[cols], -1.5, 1.5)
    want.eliminate_zeros()
    assert out.format == fmt
    np.testing.assert_array_equal(out.indptr, want.indptr)
    np.testing.assert_array_equal(out.indices, want.indices)
    np.testing.assert_array_equal(out.data, want.data)
    back = unscale_sparse(X, scale)
    np.testing.assert_array_equal(back.data, X.data.astype(np.float64) * scale[cols])


def _held(func, *args):
    """``(peak, kept, result)``: the memory ``func(*args)`` allocates at its peak and
    keeps when it returns (its result's included), in bytes."""
    import tracemalloc

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = func(*args)
        kept, peak = tracemalloc.get_traced_memory()
        return peak - base, kept - base, result
    finally:
        tracemalloc.stop()


def _large_csr(monkeypatch):
    """A canonical CSR matrix of 4 x 10^6 entries, as validated data are, read in 60
    blocks; and its size in bytes."""
    monkeypatch.setattr(_entry_blocks, "BLOCK_ENTRIES", 1 << 16)
    rng = np.random.default_rng(0)
    n, p, per_row = 200_000, 50_000, 20
    X = sp.csr_matrix((rng.random(n * per_row), rng.integers(0, p, n * per_row),
                       np.arange(0, n * per_row + 1, per_row)), shape=(n, p))
    X.sum_duplicates()
    return X, X.data.nbytes + X.indices.nbytes + X.indptr.nbytes


def test_scaler_statistics_and_transform_hold_blocks_not_copies_of_x(monkeypatch):
    """The sums hold a few blocks of temporaries (they held three copies of X), and the
    transform its output and a few blocks (two copies of X more)."""
    X, x_bytes = _large_csr(monkeypatch)
    p = X.shape[1]
    lower, upper = np.full(p, -0.5), np.full(p, 0.7)
    peak, _, _ = _held(unit_sums, X, lower, upper)
    assert peak < 0.3 * x_bytes
    peak, _, out = _held(clip_and_scale_sparse, X, lower, upper, np.full(p, 2.0))
    out_bytes = out.data.nbytes + out.indices.nbytes + out.indptr.nbytes
    assert peak < out_bytes + 0.3 * x_bytes


def _reference_second_moments(X, norm_bound, square_norm, feature_bound):
    """The statistic over a CSC copy of the clipped entries, squared all at once."""
    from skdp_sparse.privacy.clipping import clip_entries

    C = clip_entries(X, feature_bound)
    squares = sp.csc_matrix((np.square(C.data), C.indices, C.indptr), shape=C.shape)
    row_sq = np.asarray(squares.sum(axis=1)).ravel()
    weights = np.ones_like(row_sq)
    clipped = row_sq > norm_bound**2
    weights[clipped] = norm_bound**2 / row_sq[clipped]
    norms = weights * np.sqrt(np.bincount(squares.indices, weights=np.square(squares.data),
                                          minlength=X.shape[0]))
    if square_norm is not None:
        weights = np.divide(weights * square_norm, norms, out=np.zeros_like(norms),
                            where=norms > 0)
    return squares.T @ weights, int(clipped.sum()), norms


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("square_norm", [None, 0.7])
@pytest.mark.parametrize("feature_bound", [2.5, "per feature"])
def test_second_moments_by_blocks_equal_the_statistic_of_the_clipped_copy(
        monkeypatch, fmt, square_norm, feature_bound):
    """The curvature statistics of the coordinate and Newton solvers, read a block at a
    time from X without the CSC copy of its clipped entries, are the same to the bit."""
    from skdp_sparse.privacy.statistics import column_second_moment_sums, row_square_norms

    monkeypatch.setattr(_entry_blocks, "BLOCK_ENTRIES", 29)
    X = _matrix("csr", np.int32, np.float64, seed=3).asformat(fmt)
    if feature_bound == "per feature":
        feature_bound = np.random.default_rng(4).uniform(0.5, 4, X.shape[1])
    sums, n_clipped = column_second_moment_sums(X, 6.0, square_norm,
                                                feature_bound=feature_bound)
    want_sums, want_clipped, want_norms = _reference_second_moments(X, 6.0, square_norm,
                                                                    feature_bound)
    assert 0 < n_clipped == want_clipped < X.shape[0]
    np.testing.assert_array_equal(sums, want_sums)
    np.testing.assert_array_equal(row_square_norms(X, 6.0, feature_bound=feature_bound),
                                  want_norms)


def test_curvature_statistics_hold_blocks_not_copies_of_x(monkeypatch):
    """The second moments of a data view (the screened Newton step's and coordinate
    descent's curvature) kept a CSC copy of the clipped entries and three more copies
    of X in temporaries; they hold a few blocks now."""
    from skdp_sparse.data import LocalData

    X, x_bytes = _large_csr(monkeypatch)
    data = LocalData(X, np.ones((X.shape[0], 1)))
    peak, _, (sums, _) = _held(data.column_second_moment_sums, 0.8, 1.0, 0.5)
    assert peak < 0.3 * x_bytes
    assert np.all(sums >= 0) and sums.sum() > 0


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("feature_bound", [0.9, "per feature"])
def test_entries_and_rows_clipped_from_one_copy_equal_the_composition(monkeypatch, fmt,
                                                                      feature_bound):
    """The coordinate solvers' rows (entries clipped, then rows) from one copy clipped in
    place are the composition's matrix to the bit, and leave the input unchanged."""
    from skdp_sparse.privacy.clipping import clip_entries, clip_entries_and_rows, clip_rows

    monkeypatch.setattr(_entry_blocks, "BLOCK_ENTRIES", 17)
    X = _matrix("csr", np.int32, np.float64, seed=5).asformat(fmt)
    before = X.copy()
    if feature_bound == "per feature":
        feature_bound = np.random.default_rng(6).uniform(0.5, 4, X.shape[1])
    got = clip_entries_and_rows(X, feature_bound, 2.0)
    want = clip_rows(clip_entries(X, feature_bound), 2.0)
    assert got.format == want.format == "csc"
    for name in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    assert np.max(np.sqrt(np.asarray(got.multiply(got).sum(axis=1)))) <= 2.0 * (1 + 1e-15)
    assert (X != before).nnz == 0
    dense = X.toarray()
    np.testing.assert_array_equal(clip_entries_and_rows(dense, feature_bound, 2.0),
                                  clip_rows(clip_entries(dense, feature_bound), 2.0))


def test_entries_and_rows_clipped_hold_one_copy_of_x(monkeypatch):
    """The view's rows for coordinate descent: one CSC copy of X at the end, and no
    more than one other copy on the way (the entries' copy stayed cached, and a CSR
    copy of it and a repeat of the row factors were made besides)."""
    from skdp_sparse.data import LocalData

    X, x_bytes = _large_csr(monkeypatch)
    data = LocalData(X, np.ones((X.shape[0], 1)))
    peak, kept, rows = _held(data.entries_and_rows_clipped, 0.8, 1.0)
    assert rows.format == "csc"
    assert kept < 1.1 * x_bytes
    assert peak < 2.2 * x_bytes


def test_second_moments_sum_duplicate_integer_entries_in_doubles():
    """A CSR matrix that stores (0, 0) twice as int8 100 means 200 there, as the clip of
    its entries reads it; summed in int8 it wrapped to -56."""
    from skdp_sparse.privacy.statistics import column_second_moment_sums, row_square_norms

    X = sp.csr_matrix((np.array([100, 100, 3], dtype=np.int8), np.array([0, 0, 1]),
                       np.array([0, 2, 3])), shape=(2, 2))
    sums, _ = column_second_moment_sums(X, np.inf)
    np.testing.assert_array_equal(sums, [200.0**2, 9.0])
    np.testing.assert_array_equal(row_square_norms(X), [200.0**2, 9.0])
