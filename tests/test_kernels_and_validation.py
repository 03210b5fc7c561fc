"""Clipping and projection kernels, input validation, sources of randomness."""

import numpy as np
import pytest
import scipy.sparse as sp

from skdp_sparse.optim.projections import project_l1_ball, project_l2_ball
from skdp_sparse.privacy.clipping import clip_rows
from skdp_sparse.utils._first_use import FirstUseBudget
from skdp_sparse.utils.random import check_generator
from skdp_sparse.utils.validation import check_bound, check_privacy_params


def _sort_based_l1_projection(v, radius):
    # Duchi et al. (2008), an independent O(d log d) reference.
    if np.abs(v).sum() <= radius:
        return v.copy()
    u = np.sort(np.abs(v))[::-1]
    css = np.cumsum(u) - radius
    k = np.nonzero(u * np.arange(1, u.size + 1) > css)[0][-1]
    tau = css[k] / (k + 1)
    return np.sign(v) * np.maximum(np.abs(v) - tau, 0.0)


@pytest.mark.parametrize("d", [1, 2, 7, 100, 5000])
def test_l1_projection_matches_sort_reference(d):
    rng = np.random.default_rng(d)
    for _ in range(50):
        v = rng.standard_normal(d) * rng.exponential(3.0)
        if rng.random() < 0.3:
            v[rng.random(d) < 0.5] = 0.0  # ties at zero
        if rng.random() < 0.3:
            v = np.round(v, 1)  # repeated values
        r = rng.exponential(2.0)
        np.testing.assert_allclose(project_l1_ball(v, r), _sort_based_l1_projection(v, r),
                                   atol=1e-10)


def test_screened_projection_equals_unscreened_kernel():
    # The histogram screening must not change the result: compare against
    # Condat's kernel run on all coordinates, on inputs with ties, spikes and zeros.
    from skdp_sparse.optim.projections import project_l1_inplace

    rng = np.random.default_rng(0)
    for trial in range(200):
        d = int(rng.integers(1, 40_000))
        radius = float(rng.exponential(3.0)) + 1e-3
        x = rng.normal(size=d) * rng.exponential()
        if trial % 3 == 0:
            x[rng.integers(0, d, 3)] += 50 * rng.normal(size=3)
        if trial % 5 == 0:
            x[: d // 2] = 0.0
        if trial % 7 == 0:
            x = np.sort(x)[::-1].copy()  # nearly sorted input, as the mean of Zipf data
        ref = x.copy()
        project_l1_inplace(ref, radius)
        np.testing.assert_allclose(project_l1_ball(x, radius), ref, rtol=0,
                                   atol=1e-10 * max(radius, np.abs(x).max()))


def _awkward_magnitudes(rng, trial, max_size, log10_spread, zero_share, *, min_size=0,
                        relative_ties=False):
    """Non-negative values of magnitudes ``10^+-log10_spread``: every third vector with a
    share of zeros, every third with ties (on bucket edges, or relative to its largest
    value, shifted off 0)."""
    d = int(rng.integers(min_size, max_size))
    y = np.abs(rng.standard_normal(d)) * 10.0 ** rng.uniform(-log10_spread, log10_spread)
    if trial % 3 == 1:
        y[rng.random(d) < zero_share] = 0.0
    elif trial % 3 == 2:
        y = np.round(y / y.max(), 1) + 0.1 if relative_ties else np.round(y, 1)
    return y


def test_interpreted_l1_threshold_has_the_kernels_bits(monkeypatch, counted_kernel):
    """A process's first thresholds run interpreted (no compilation on a new install's
    first fit): the same IEEE operations in the same order as the kernel, so the same
    bits, on inputs with ties, spikes, zeros and magnitudes far from 1."""
    from skdp_sparse.optim import projections

    kernel = projections.simplex_threshold
    rng = np.random.default_rng(5)
    for trial in range(300):
        y = _awkward_magnitudes(rng, trial, 3000, 150, 0.5, min_size=1, relative_ties=True)
        y[0] = max(y[0], 1e-300)
        d = y.size
        radius = float(y.sum() * rng.uniform(1e-6, 0.999))
        compiled = kernel(y, radius, np.empty(2 * d))
        assert kernel.py_func(y.tolist(), radius, [0.0] * (2 * d)) == compiled
    # threshold_of interprets within the process's budget, runs the kernel past it
    y = np.abs(rng.standard_normal(500))
    stand_in = counted_kernel(kernel)
    monkeypatch.setattr(projections, "simplex_threshold", stand_in)
    monkeypatch.setattr(projections, "_INTERPRETED", FirstUseBudget(stand_in, 500))
    assert projections.threshold_of(y, 1.0) == kernel(y, 1.0, np.empty(1000))
    assert stand_in.calls == 0 and projections._INTERPRETED.left == 0
    assert projections.threshold_of(y, 1.0) == kernel(y, 1.0, np.empty(1000))
    assert stand_in.calls == 1


def test_row_norms_in_numpy_have_the_kernels_bits(monkeypatch, counted_kernel):
    """A process's first row scales come from NumPy (no compilation on a new install's
    first fit), one position of every row at a time: each row's sums in the kernel's
    order, so the same bits, with rows of every length, huge and tiny values, rows
    whose squares overflow (marked NaN for the rescaling) and non-finite values."""
    from skdp_sparse.privacy import clipping

    rng = np.random.default_rng(6)
    for trial in range(200):
        n, d = int(rng.integers(1, 300)), int(rng.integers(1, 200))
        X = sp.random(n, d, density=rng.uniform(0, 0.5), format="csr", random_state=trial)
        X.data = rng.standard_normal(X.nnz) * 10.0 ** rng.uniform(-200, 200, X.nnz)
        if trial % 4 == 0 and X.nnz:
            X.data[rng.integers(0, X.nnz, 2)] = [np.nan, np.inf][trial % 8 // 4]
        for max_l2, max_l1 in [(1.0, 2.0), (np.inf, 0.5), (0.3, np.inf), (0.0, 1.0)]:
            kernel, numpy = np.empty(n), np.empty(n)
            clipping._row_scales_csr(kernel, X.data, X.indptr, max_l2, max_l1)
            clipping._row_scales_numpy(numpy, X.data, X.indptr, max_l2, max_l1)
            np.testing.assert_array_equal(numpy, kernel)
    # within the budget row_scales_csr sums in NumPy, past it in the kernel
    X = sp.random(50, 30, density=0.2, format="csr", random_state=0)
    stand_in = counted_kernel(clipping._row_scales_csr)
    monkeypatch.setattr(clipping, "_row_scales_csr", stand_in)
    longest = int(np.diff(X.indptr).max())
    monkeypatch.setattr(clipping, "_NUMPY_NORMS", FirstUseBudget(stand_in, 50 * longest))
    first = clipping.row_scales_csr(X.data, X.indptr, 0.5, 1.0)
    assert stand_in.calls == 0 and clipping._NUMPY_NORMS.left == 0
    np.testing.assert_array_equal(clipping.row_scales_csr(X.data, X.indptr, 0.5, 1.0)[0],
                                  first[0])
    assert stand_in.calls == 1


def test_l1_projection_satisfies_optimality_certificate():
    # p is the projection iff <v - p, z - p> <= 0 for all z in the ball, and the
    # maximum of <v - p, z> over the ball is radius * ||v - p||_inf.
    rng = np.random.default_rng(3)
    for _ in range(100):
        v = rng.standard_normal(20) * 3
        r = rng.exponential(2.0)
        p = project_l1_ball(v, r)
        assert np.abs(p).sum() <= r * (1 + 1e-12)
        g = v - p
        assert r * np.max(np.abs(g)) <= g @ p + 1e-9


def test_l1_projection_inside_ball_is_identity_and_bad_input():
    v = np.array([0.1, -0.2])
    np.testing.assert_array_equal(project_l1_ball(v, 1.0), v)
    with pytest.raises(ValueError):
        project_l1_ball(v, -1.0)
    with pytest.raises(ValueError):
        project_l1_ball(np.array([np.nan, 1.0]), 1.0)


def test_l2_projection():
    v = np.array([3.0, 4.0])
    np.testing.assert_allclose(project_l2_ball(v, 1.0), [0.6, 0.8])
    np.testing.assert_array_equal(project_l2_ball(v, 10.0), v)


@pytest.mark.parametrize("fmt", ["csr", "csc", "dense"])
def test_clip_rows_bounds_and_direction(fmt):
    rng = np.random.default_rng(0)
    dense = sp.random(200, 50, density=0.1, random_state=1).toarray() * rng.exponential(
        5.0, size=(200, 1))
    dense[0] = 0.0
    X = dense if fmt == "dense" else sp.csr_matrix(dense).asformat(fmt)
    out = clip_rows(X, max_l2=1.0, max_l1=2.0)
    assert (out.format if sp.issparse(out) else "dense") == fmt
    D = out.toarray() if sp.issparse(out) else out
    assert np.all(np.linalg.norm(D, axis=1) <= 1.0 + 1e-12)
    assert np.all(np.abs(D).sum(axis=1) <= 2.0 + 1e-12)
    # Each row is a non-negative multiple of the original, unchanged if already inside.
    norms = np.linalg.norm(dense, axis=1)
    inside = (norms <= 1.0) & (np.abs(dense).sum(axis=1) <= 2.0)
    np.testing.assert_allclose(D[inside], dense[inside])
    for i in np.nonzero(~inside)[0]:
        c = D[i] @ dense[i] / (dense[i] @ dense[i])
        assert 0 < c < 1
        np.testing.assert_allclose(D[i], c * dense[i], atol=1e-12)
    # The input is not modified.
    if sp.issparse(X):
        np.testing.assert_allclose(X.toarray(), dense)


@pytest.mark.parametrize("eps,delta", [(0.0, 0.0), (-1.0, 0.0), (np.nan, 0.0), (1.0, 1.0),
                                       (1.0, -1e-9), (1.0, np.nan), ("1", 0.0), (True, 0.0)])
def test_check_privacy_params_rejects(eps, delta):
    with pytest.raises(ValueError):
        check_privacy_params(eps, delta)


def test_check_privacy_params_accepts():
    assert check_privacy_params(np.inf, 0.0) == (np.inf, 0.0)
    assert check_privacy_params(1, 1e-6) == (1.0, 1e-6)
    with pytest.raises(ValueError, match="delta > 0"):
        check_privacy_params(1.0, 0.0, require_delta=True)


@pytest.mark.parametrize("value", [0.0, -1.0, np.nan, np.inf, [1.0, -1.0], True])
def test_check_bound_rejects(value):
    with pytest.raises(ValueError):
        check_bound("norm_bound", value)


def test_check_bound_shapes():
    np.testing.assert_array_equal(check_bound("b", [1.0, 2.0], size=2), [1.0, 2.0])
    with pytest.raises(ValueError, match="shape"):
        check_bound("b", [1.0, 2.0], size=3)
    assert check_bound("b", None, allow_none=True) is None


def test_generator_sources():
    a = check_generator(5).standard_normal(3)
    b = check_generator(5).standard_normal(3)
    np.testing.assert_array_equal(a, b)
    # None draws fresh OS entropy: two generators disagree.
    assert not np.array_equal(check_generator(None).standard_normal(3),
                              check_generator(None).standard_normal(3))
    g = np.random.default_rng(1)
    assert check_generator(g) is g
    assert isinstance(check_generator(np.random.RandomState(0)), np.random.Generator)
    with pytest.raises(ValueError):
        check_generator("seed")


def test_numba_cache_is_fresh():
    """The kernels of this run compile into the run's own cache directory, so no test
    runs code compiled from an older source (see conftest.py)."""
    import os

    import numba.core.config

    from skdp_sparse.optim import _cd_kernels

    fresh = os.environ["NUMBA_CACHE_DIR"]
    assert "skdp_sparse-numba-" in fresh
    assert numba.core.config.CACHE_DIR == fresh
    path = _cd_kernels.cd_run._cache._cache_path
    assert os.path.abspath(path).startswith(os.path.abspath(fresh))


def _sequential_screening_threshold(y, radius, n_buckets):
    # the bucket loop the screening stands for, one value at a time
    ymax = max(y, default=0.0)
    if ymax == 0.0:
        return 0.0
    scale = n_buckets / ymax
    counts = [0] * (n_buckets + 1)
    sums = [0.0] * (n_buckets + 1)
    for v in y:
        k = min(int(v * scale), n_buckets)
        counts[k] += 1
        sums[k] += v
    count, total = 0, 0.0
    for k in range(n_buckets, -1, -1):
        count += counts[k]
        total += sums[k]
        if total - count * (k / scale) >= radius:
            return k / scale
    return 0.0


def test_screening_threshold_is_the_sequential_loop():
    """Every sum in the same order as the loop over the values, so the same bits."""
    from skdp_sparse.optim.projections import screening_threshold

    rng = np.random.default_rng(3)
    for t in range(300):
        y = _awkward_magnitudes(rng, t, 400, 5, 0.7)
        radius = float(y.sum() * rng.uniform(0.0, 1.2)) if t % 5 else float(rng.uniform(0, 3))
        n_buckets = int(rng.choice([1, 7, 4096]))
        expected = _sequential_screening_threshold(y.tolist(), radius, n_buckets)
        assert screening_threshold(y, radius, n_buckets) == expected


def test_first_fits_compile_few_functions(tmp_path):
    """On an empty Numba cache (a new install) the quickstart's fits, a projection mean
    and a logistic regression, compile at most 7 of the package's functions and nothing
    of Numba's own: no NumPy constructor (their arrays come from Python), no
    specialisation of the builtin min or max (the kernels compare), not the rare
    rescaling of rows whose squares overflow, and neither the l1 threshold, the row
    norms nor the clipped mean (a process's first ones run interpreted or in NumPy)."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np
        import scipy.sparse as sp
        from numba.core import event

        from skdp_sparse import DPSparseLogisticRegression, DPSparseMeanEstimator

        names = []

        class Count(event.Listener):
            def on_start(self, ev):
                pass

            def on_end(self, ev):
                f = ev.data["dispatcher"].py_func
                package = f.__module__.startswith("skdp_sparse")
                names.append(("" if package else "numba:") + f.__qualname__)

        event.register("numba:compile", Count())
        X = sp.random(300, 3000, density=0.005, format="csr", random_state=0)
        y = np.arange(300) % 2
        DPSparseMeanEstimator(epsilon=1.0, delta=1e-6, norm_bound=1.0, sparsity=20,
                              random_state=0).fit(X)
        DPSparseLogisticRegression(classes=[0, 1], epsilon=1.0, delta=1e-6, feature_bound=1.0,
                                   solver="screened_newton", random_state=0).fit(X, y)
        print(" ".join(names))
    """)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    names = done.stdout.split()
    compiled = [name for name in names if not name.startswith("numba:")]
    assert "_noise_kernel" in compiled  # the path measured: the exact discrete Gaussian
    assert len(compiled) <= 7, compiled
    for name in ("rescaled_clip_factor", "simplex_threshold", "_row_scales_csr",
                 "clipped_mean_csr"):
        assert name not in compiled
    assert not [name for name in names if name.startswith("numba:")], names



@pytest.mark.parametrize("max_l2, max_l1", [(1e-100, np.inf), (np.inf, 1e-100),
                                            (2.5e-100, 1e-99)])
def test_rows_whose_factor_would_be_subnormal_are_clipped_within_the_bounds(max_l2,
                                                                             max_l1):
    """A row whose factor would be subnormal (a norm of some 1e220 against a public
    bound of 1e-100) is clipped within the bounds by every path: a subnormal factor's
    rounding is not relative (5e-324 for 3e-323 put a row at 1.7 times the bound)."""
    from skdp_sparse.mean import _release
    from skdp_sparse.mean._kernels import ROW_BLOCK, clipped_mean_csr
    from skdp_sparse.privacy import clipping

    bound = min(max_l2, max_l1)
    # factors from 0.55 to 2^60 times the smallest subnormal, then a normal 2^-1000
    f = np.array([0.55, 0.7, 0.9, 1.4, 1.6, 2.6, 6.5, 10.5, 100.5, 2**30 + 0.5,
                  2**60 + 0.5, 2.0**74])
    v = bound / (f * 5e-324) * np.where(np.arange(f.size) % 2, -1.0, 1.0)
    # one or two values a row, each row in its own two columns
    data = np.concatenate([v, np.stack([v, v / 3], axis=1).ravel(), [0.5 * bound]])
    lengths = np.r_[np.ones(f.size, dtype=int), np.full(f.size, 2), 1]
    indptr = np.r_[0, np.cumsum(lengths)]
    indices = 2 * np.repeat(np.arange(lengths.size), lengths) + (
        np.arange(data.size) - np.repeat(indptr[:-1], lengths))
    X = sp.csr_matrix((data, indices, indptr), shape=(lengths.size, 2 * lengths.size))

    def check(clipped):
        rows = np.asarray(clipped.toarray() if sp.issparse(clipped) else clipped)
        if rows.ndim == 2:  # a matrix: each row's two columns (a mean is them already)
            rows = rows.reshape(lengths.size, lengths.size, 2)[np.arange(lengths.size),
                                                                np.arange(lengths.size)]
        rows = rows.reshape(lengths.size, 2) / bound  # each row's values, over the bound
        assert max_l2 == np.inf or np.all(np.linalg.norm(rows, axis=1) * bound <= max_l2)
        assert max_l1 == np.inf or np.all(np.abs(rows).sum(axis=1) * bound <= max_l1)
        assert rows[-1, 0] == 0.5  # a row inside is left unchanged

    numpy, kernel = np.empty(lengths.size), np.empty(lengths.size)
    clipping._row_scales_numpy(numpy, X.data, X.indptr, max_l2, max_l1)
    clipping._row_scales_csr(kernel, X.data, X.indptr, max_l2, max_l1)
    np.testing.assert_array_equal(numpy, kernel)
    check(clip_rows(X, max_l2, max_l1))
    check(clip_rows(X.toarray(), max_l2, max_l1))
    mean = np.empty(X.shape[1])  # the sum of the clipped rows, with n = 1
    assert clipped_mean_csr(mean, np.empty(ROW_BLOCK), X.data, _release._unsigned(X.indices),
                            _release._unsigned(X.indptr), max_l2, max_l1, 1.0) == 1
    assert _release._clipped_mean_numpy(mean, X, max_l2, max_l1, 1.0) == 0
    check(mean)


@pytest.mark.parametrize("x, radius", [([1e20, 5.0], 1.0), ([1.0, 1.0], 1e-17),
                                       ([-3.0], 1e-16)])
def test_l1_projection_with_a_radius_below_the_rounding_of_the_values(x, radius):
    # Condat's cleaning loop removed every value (each rounds to at most the
    # threshold) and divided by the 0 left: a private mean at epsilon 1e-20 (noise
    # some 1e20 times the radius) ended its fit on ZeroDivisionError after the release
    from skdp_sparse.optim import projections

    out = project_l1_ball(np.array(x), radius)
    assert np.all(np.isfinite(out)) and np.abs(out).sum() <= radius
    y = np.abs(np.array(x))
    assert projections.simplex_threshold.py_func(y.tolist(), radius, [0.0] * (2 * y.size)) \
        == projections.simplex_threshold(y, radius, np.empty(2 * y.size))


@pytest.mark.parametrize("values, index", [(np.float32, np.int32), (np.float32, np.int64),
                                           (np.float64, np.int64)])
def test_fit_data_keep_the_callers_index_arrays(values, index):
    # Float32 values were converted with a copy of the index arrays too (a third of a
    # float32 matrix with int32 indices), and int64 index arrays narrowed to int32 in a
    # copy that the kernels' int64 rows widened again: at 10^6 x 10^7 with 3 x 10^7
    # non-zeros, 115 to 230 MB held through the fit for nothing.
    from skdp_sparse import DPSparseLogisticRegression
    from skdp_sparse.data import LocalData
    from skdp_sparse.utils.validation import validate_fit_data

    base = sp.random(300, 1000, density=0.02, format="csr", random_state=0)
    X = sp.csr_matrix((base.data.astype(values), base.indices, base.indptr),
                      shape=base.shape)
    X.indices, X.indptr = X.indices.astype(index), X.indptr.astype(index)
    y = np.arange(300) % 2
    V, _ = validate_fit_data(DPSparseLogisticRegression(classes=[0, 1]), X, y)
    assert V.data.dtype == np.float64 and np.array_equal(V.data, X.data.astype(np.float64))
    assert np.shares_memory(V.indices, X.indices) and np.shares_memory(V.indptr, X.indptr)
    assert V.indices.dtype == index
    rows = LocalData(V).rows_clipped(1.0)
    assert rows.indices.dtype == np.int64
    np.testing.assert_array_equal(rows.indices, base.indices)
    # The caller's matrix is unchanged.
    assert X.data.dtype == values and X.indices.dtype == index


@pytest.mark.parametrize("values", [np.float64, np.float32])
@pytest.mark.parametrize("index", [np.int16, np.uint16, np.uint32, ">i4", ">i8"])
@pytest.mark.parametrize("extra", range(4))
def test_index_arrays_of_other_integer_types_give_the_int32_fit(values, index, extra):
    # Index arrays of another integer type than scipy's (set by hand) were kept as they
    # were; the mean's kernel viewed int16 ones as 8-byte integers, which failed with
    # numpy's message or with "not a valid CSR matrix" by the number of stored entries
    # (a private count) modulo 4, after the budget was reserved, and read big-endian
    # ones as native integers. The last row, which neighbouring data sets may differ
    # in, moves that number through 0 to 3.
    from skdp_sparse import DPSparseMeanEstimator
    from skdp_sparse.utils.validation import validate_fit_data

    rng = np.random.default_rng(0)
    D = (rng.random((40, 10)) < 0.3) * rng.integers(-8, 9, (40, 10)) / 32.0
    D[-1] = 0.0
    D[-1, : extra + 1] = 0.125
    X = sp.csr_matrix(D.astype(values))
    reference = DPSparseMeanEstimator(epsilon=2.0, delta=1e-5, random_state=1).fit(X)
    X.indices, X.indptr = X.indices.astype(index), X.indptr.astype(index)
    before = [a.copy() for a in (X.data, X.indices, X.indptr)]
    V, _ = validate_fit_data(DPSparseMeanEstimator(), X)
    assert V.indices.dtype in (np.int32, np.int64) and V.indptr.dtype == V.indices.dtype
    assert V.indices.dtype.isnative
    fitted = DPSparseMeanEstimator(epsilon=2.0, delta=1e-5, random_state=1).fit(X)
    np.testing.assert_array_equal(fitted.mean_, reference.mean_)
    for a, b in zip(before, (X.data, X.indices, X.indptr), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
