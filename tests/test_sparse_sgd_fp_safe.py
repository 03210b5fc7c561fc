"""The floating-point-safe path of sparse_sgd (DP-AdaFEST), the default.

What the privacy argument of ``doc/proofs/sparse_sgd.rst`` rests on, checked on the
running code: an example's integer keys are never longer than its terms over the
lattice step; the released gradient sums lie on their lattice and differ from the exact
key sums by integer noise of the planned discrete Gaussian law; a feature absent from the
batch passes with probability ``P(Z > u)`` exactly, independently of the others (so
their number is Binomial(d - k, q) and their positions uniform), and a present one with
``P(Z > u - key)``, whichever of its two paths (its own draw, or the exceedance process
of the features with small counts) it takes, also when the samplers hand draws over to
Python.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

import skdp_sparse.solvers.sparse_sgd as sparse_module
from skdp_sparse.optim import _sgd_kernels as K
from skdp_sparse.optim import _sgd_selection as S
from skdp_sparse.optim.losses import LogisticLoss
from skdp_sparse.privacy import discrete
from skdp_sparse.privacy.discrete import ExceedancePlan, plan_exceedance
from skdp_sparse.solvers import get_solver
from skdp_sparse.testing.solver_api import make_problem, sparse_sgd

MIN_P = 1e-3


def _plan(X, epsilon, delta, n_steps, batch_size, **options):
    """The plan the solver makes for these arguments (as ``sparse_sgd`` passes them)."""
    problem = make_problem(LogisticLoss(), epsilon=epsilon)
    options = {"max_iter": n_steps, "batch_size": batch_size, "learning_rate": None,
               "verbose": 0, "tol": 0.0, "selection": "exponential", "curvature": "bound",
               **options}
    return get_solver("sparse_sgd").plan(problem, (*X.shape, 1), epsilon, delta, options)


# --------------------------------------------------------------------------
# Keys: an example's integer vector is no longer than its terms over gamma
# --------------------------------------------------------------------------
@pytest.mark.parametrize("nnz", [1, 3, 7, 50, 1000])
def test_keys_round_towards_zero_and_sums_are_exact(nnz):
    # One example per call of the accumulation kernel: its count keys times sqrt(nnz)
    # and its gradient keys must not exceed C_c / gamma and |g x_j| / gamma, in exact
    # arithmetic, and lose less than one lattice step each (plus the relative 2^-50 the
    # keys give up to absorb the rounding of the products).
    rng = np.random.default_rng(nnz)
    d = 2000
    shrink = 1.0 - 2.0**-50
    for _ in range(40):
        c_count = float(rng.choice([1.0, 0.3, 2.5, rng.uniform(0.1, 3)]))
        k_c, k_g = int(rng.integers(-40, -10)), int(rng.integers(-40, -10))
        keys = np.array([math.ldexp(shrink, -k_c), math.ldexp(shrink, -k_g),
                         math.ldexp(1.0, k_g)])
        cols = np.sort(rng.choice(d, size=nnz, replace=False)).astype(np.int64)
        data = rng.normal(size=nnz)
        data /= np.linalg.norm(data) * rng.uniform(1.0, 1.5)
        indptr = np.array([0, nnz], dtype=np.int64)
        margin = rng.normal() * 3
        st = np.zeros(S.STATE_SLOTS, dtype=np.int64)
        st[S._M] = 1
        # Zero coefficients and the intercept at the margin: the example's margin.
        feat = np.zeros(d, dtype=K.FEATURE_STATE)
        intercept = np.array([margin, 0.0, 0.0])
        touched = np.empty(nnz, dtype=np.int64)
        compact_counts = np.empty(nnz, dtype=np.int64)
        compact_grads = np.empty(nnz, dtype=np.int64)
        loss = LogisticLoss()
        K._accumulate(st, 1, data, cols, indptr, np.array([1.0]), loss.code, loss.param, 1.0,
                      np.array([0], dtype=np.int64), feat,
                      np.zeros(d, dtype=K.FEATURE_HISTORY), 1.0, 0.0, True, intercept,
                      c_count, touched, np.zeros(0), np.zeros(0), True, keys, compact_counts,
                      compact_grads, np.empty(nnz))
        # The sums are compact, in the order the features were touched.
        assert st[S._N_TOUCHED] == nnz and np.array_equal(np.sort(touched), cols)
        assert np.array_equal(feat["slot"][touched], np.arange(1, nnz + 1))
        count_keys = np.zeros(d, dtype=np.int64)
        grad_keys = np.zeros(d, dtype=np.int64)
        count_keys[touched], grad_keys[touched] = compact_counts, compact_grads
        g = K._clipped_derivative(loss.code, 1.0, margin, loss.param, 1.0)
        count_key = count_keys[cols]
        assert np.all(count_key == count_key[0]) and np.all(np.delete(count_keys, cols) == 0)
        bound = Fraction(c_count) / Fraction(2) ** k_c
        assert Fraction(int(count_key[0])) ** 2 * nnz <= bound**2
        assert count_key[0] + 1 > min(1.0, c_count / math.sqrt(nnz)) * 2.0**-k_c * (1 - 1e-12)
        for j, x in zip(cols, data, strict=True):
            exact = abs(Fraction(g) * Fraction(float(x))) / Fraction(2) ** k_g
            key = abs(int(grad_keys[j]))
            assert key <= exact < key + 1 + exact * 2.0**-49
            assert np.sign(grad_keys[j]) in (0, np.sign(g * x))
        exact_b = abs(Fraction(g)) / Fraction(2) ** k_g
        key_b = abs(int(st[S._GB_KEY]))
        assert key_b <= exact_b < key_b + 1 + exact_b * 2.0**-49
        assert st[S._N_TOUCHED] == nnz


# --------------------------------------------------------------------------
# The stored coefficients change only where a step's selection (released) says
# --------------------------------------------------------------------------
@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_a_step_changes_the_state_of_its_selected_features_only(safe, monkeypatch):
    # The features of a batch's rows are private; the margins read them. Bringing them
    # up to date there (the closed-form decay, split where a batch read) left in the
    # released coefficients' bits which features the sampled rows held: here 503
    # (float) and 473 (safe) feature states changed, over 11 steps, at a step that did
    # not select them.
    rng = np.random.default_rng(0)
    n, d, steps = 400, 300, 12
    X = sp.random(n, d, density=0.03, format="csr", random_state=1)
    X.data[:] = 1.0
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    previous = {}
    stray = []
    run_steps = K.sparse_sgd_steps

    def stepped(*args):
        feat, hist, st, trace = args[18], args[19], args[27], args[29]
        request = run_steps(*args)
        if request == S.DONE:
            t = int(st[S.ST_T])
            chosen = np.zeros(d, dtype=bool)
            chosen[trace[t - 1, 1:1 + trace[t - 1, 0]]] = True
            if previous:
                moved = ((feat["w"] != previous["w"]) | (hist["total"] != previous["total"])
                         | (hist["last"] != previous["last"]))
                stray.append(int(np.count_nonzero(moved & ~chosen)))
            previous.update(w=feat["w"].copy(), total=hist["total"].copy(),
                            last=hist["last"].copy())
        return request

    monkeypatch.setattr(K, "sparse_sgd_steps", stepped)
    monkeypatch.setattr(sparse_module, "checkpoints", lambda n_steps, verbose: set(
        range(1, n_steps + 1)))
    coef, *_ = sparse_sgd(X, y, LogisticLoss(), l2=0.05, epsilon=8.0, delta=1e-5,
                          batch_size=100, n_steps=steps, average=True, rng=3,
                          _trace=(steps, d + 1), floating_point_safe=safe)
    assert len(stray) == steps - 1 and sum(stray) == 0
    assert np.count_nonzero(coef) > 0  # not vacuous: the steps moved coefficients


# --------------------------------------------------------------------------
# The gradient release: lattice values, integer noise of the planned law
# --------------------------------------------------------------------------
def _one_step(X, y, seed, safe):
    # One full-batch step from 0 with learning rate 1 and no penalty: w = -g / n with g
    # the released gradient sums (n a power of two, so the division is exact).
    coef, b, *_ = sparse_sgd(X, y, LogisticLoss(), epsilon=4.0, delta=1e-5, n_steps=1,
                             batch_size=X.shape[0], learning_rate=1.0, average=False,
                             threshold=-1e6, rng=seed, floating_point_safe=safe)
    return -X.shape[0] * np.append(coef, b)


def test_released_gradient_sums_lie_on_their_lattice_with_discrete_gaussian_noise():
    n, d = 64, 12
    rng = np.random.default_rng(0)
    X = sp.random(n, d, density=0.4, format="csr", random_state=rng)
    X.data = rng.uniform(-1, 1, X.nnz)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    # Rows inside the unit ball, so clipping leaves them as they are.
    X = sp.csr_matrix(X.multiply(0.9 / np.maximum(norms, 1e-12)[:, None]))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    plan = _plan(X, 4.0, 1e-5, 1, n, learning_rate=1.0, threshold=-1e6)
    k, scale = plan.safe.grad_k, plan.safe.grad_scale
    assert plan.safe.mode == S.SELECT_DRAW  # every feature selected at this threshold
    # The exact key sums at w = 0 (margins 0, derivative -y / 2), as the kernel rounds.
    g = -y / 2
    shrink = math.ldexp(1.0 - 2.0**-50, -k)
    keys = np.zeros(d + 1)
    for i in range(n):
        for p in range(X.indptr[i], X.indptr[i + 1]):
            keys[X.indices[p]] += np.trunc(g[i] * X.data[p] * shrink)
        keys[d] += np.trunc(g[i] * shrink)
    noise = []
    for seed in range(150):
        released = _one_step(X, y, seed, True)
        units = np.ldexp(released, -k)
        assert np.all(units == np.round(units))  # on the lattice gamma Z
        noise.append(units - keys)
    noise = np.concatenate(noise) / float(scale)
    assert abs(noise.mean()) < 4 / math.sqrt(noise.size)
    assert abs(noise.std() - 1) < 4 / math.sqrt(2 * noise.size)
    assert stats.kstest(noise, "norm").pvalue > MIN_P
    # The float path's releases are not on that lattice: the check above can fail.
    units = np.ldexp(_one_step(X, y, 0, False), -k)
    assert np.any(units != np.round(units))


# --------------------------------------------------------------------------
# The selection: absent features Binomial(d - k, q), uniform; present ones exact
# --------------------------------------------------------------------------
def _selection_run(d, n_steps, sigmas, seed, rows=400, safe=True):
    """A full-batch run on ``rows`` rows holding feature 0 only (its count, about half a
    noise scale, matters), with the threshold ``sigmas`` count noise scales above that
    count; the plan, the count (key) and each step's selection."""
    X = sp.csr_matrix((np.ones(rows), np.zeros(rows, dtype=np.int64), np.arange(rows + 1)),
                      shape=(rows, d))
    y = np.where(np.arange(rows) % 2 == 0, 1.0, -1.0)
    kw = dict(epsilon=1.0, delta=1e-6, n_steps=n_steps, batch_size=rows,
              floating_point_safe=safe)
    base = _plan(X, **kw)
    if safe:
        key0 = rows * math.floor(math.ldexp(1 - 2.0**-50, -base.safe.count_k))
        threshold = math.ldexp(key0 + sigmas * float(base.safe.count_scale),
                               base.safe.count_k)
    else:
        key0 = float(rows)
        threshold = key0 + sigmas * base.count_sigma
    plan = _plan(X, threshold=threshold, **kw)
    *_, info = sparse_sgd(X, y, LogisticLoss(), threshold=threshold, rng=seed,
                          _trace=(n_steps, d + 1), **kw)
    return plan, key0, info["selected"]


def _exceedance(scale, u):
    """``P(Z > u)`` for the discrete Gaussian of ``scale`` lattice units, any integer u."""
    if u >= 0:
        return plan_exceedance("gaussian", scale, u).probability
    return 1 - plan_exceedance("gaussian", scale, -u - 1).probability


def _binomial_pvalue(samples, trials, q):
    """Chi-square p-value of ``samples`` against Binomial(trials, q), on bins of the
    support pooled from the left until each expects at least 5."""
    expected = stats.binom.pmf(np.arange(trials + 1), trials, q) * samples.size
    observed = np.bincount(samples, minlength=trials + 1)
    bins_e, bins_o, e, o = [], [], 0.0, 0
    for e_v, o_v in zip(expected, observed, strict=True):
        e, o = e + e_v, o + o_v
        if e >= 5:
            bins_e.append(e)
            bins_o.append(o)
            e, o = 0.0, 0
    bins_e[-1] += e
    bins_o[-1] += o
    assert len(bins_e) >= 2
    return stats.chisquare(bins_o, np.array(bins_e) * samples.size / sum(bins_e)).pvalue


def _check_selection(plan, key0, selected, d):
    safe = plan.safe
    if safe is None:
        # The float path: Gaussian noise on counts in doubles.
        q = plan.p_zero
        q0 = stats.norm.sf((plan.threshold - key0) / plan.count_sigma)
    else:
        q = _exceedance(safe.count_scale, safe.u)
        q0 = _exceedance(safe.count_scale, safe.u - key0)
    counts = selected[:, 0]
    chosen = np.zeros((selected.shape[0], d), dtype=bool)
    for t, row in enumerate(selected):
        chosen[t, row[1:1 + row[0]]] = True
    assert np.all(chosen.sum(axis=1) == counts)  # no feature twice
    # Feature 0 (present, count key0) passes with probability P(Z > u - key0).
    assert stats.binomtest(int(chosen[:, 0].sum()), chosen.shape[0], q0).pvalue > MIN_P
    # The d - 1 absent ones: their number per step is Binomial(d - 1, q) ...
    absent = chosen[:, 1:].sum(axis=1)
    assert _binomial_pvalue(absent, d - 1, q) > MIN_P
    # ... and, pooled over the steps, spread uniformly over the absent features.
    per_block = chosen[:, 1:].sum(axis=0).reshape(-1, (d - 1) // 7).sum(axis=1)
    assert stats.chisquare(per_block).pvalue > MIN_P
    return q


@pytest.mark.parametrize("sigmas, light_tail, path", [
    (1.0, 2.0, "present feature drawn, absent process at u"),
    (1.0, 0.5, "present feature by the light process"),
    (2.6, 2.0, "absent process above u0 < u with values, light process"),
    (2.6, 10.0, "present feature drawn, absent process with values"),
    (1.0, None, "float path: Gaussian count noise, Binomial and uniform absent features"),
])
def test_selection_law(sigmas, light_tail, path, monkeypatch):
    d = 400
    if light_tail is None:
        plan, key0, selected = _selection_run(d, 3000, sigmas, seed=1, safe=False)
        _check_selection(plan, key0, selected, d)
        return
    monkeypatch.setattr(sparse_module, "_LIGHT_TAIL", light_tail)
    sparse_module.plan_safe_selection.cache_clear()
    plan, key0, selected = _selection_run(d, 3000, sigmas, seed=1)
    safe = plan.safe
    light = 0 <= key0 <= safe.light
    assert light == ("light" in path)
    assert 0.2 < key0 / float(safe.count_scale) < 2
    assert (safe.u0 < safe.u) == ("with values" in path)
    q = _check_selection(plan, key0, selected, d)
    assert 1e-4 < q < 0.5
    assert q == pytest.approx(plan.p_zero, rel=1e-6)
    sparse_module.plan_safe_selection.cache_clear()


def test_selection_law_through_handoffs(monkeypatch):
    # With 6-bit words the exceedance processes' table comparisons tie often: the kernel
    # stops, Python finishes the step from the same generator and the kernel resumes.
    monkeypatch.setattr(discrete, "_WORD_BITS", 6)
    sparse_module.plan_safe_selection.cache_clear()
    finished = []
    real = ExceedancePlan.finish

    def counted(self, *args, **kwargs):
        finished.append(self.u)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ExceedancePlan, "finish", counted)
    d = 400
    plan, key0, selected = _selection_run(d, 1500, 2.6, seed=2)
    assert plan.safe.light >= key0 and plan.safe.u0 < plan.safe.u
    # Both processes handed steps over.
    assert {plan.safe.u0, plan.safe.u - plan.safe.light} <= set(finished)
    _check_selection(plan, key0, selected, d)
    sparse_module.plan_safe_selection.cache_clear()


# --------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------
def test_plan_is_public_and_checks_the_joint_bound():
    X = sp.random(500, 3000, density=0.01, format="csr", random_state=0)
    plan = _plan(X, 1.0, 1e-6, 40, 50)
    safe = plan.safe
    z = plan.noise_multiplier
    # The lattices are at least 2^30 times finer than the noise and sums stay below 2^52.
    assert Fraction(plan.count_sigma) / Fraction(2) ** safe.count_k >= 2**30 - 1
    assert safe.count_scale == Fraction(plan.count_sigma) / Fraction(2) ** safe.count_k
    assert safe.grad_scale == Fraction(plan.grad_sigma) / Fraction(2) ** safe.grad_k
    assert 500 * plan.contribution_bound * 2.0**-safe.count_k <= 2**52
    # Default threshold: as many absent features pass per step on average as the batch
    # has rows (50), in lattice units.
    assert plan.p_zero * 3000 == pytest.approx(50.0, rel=1e-6)
    assert plan.threshold == math.ldexp(safe.u, safe.count_k)
    # The joint per-example shift the accounting assumes, checked again here.
    shift = (Fraction(plan.contribution_bound) / Fraction(plan.count_sigma)) ** 2 + (
        (1 + sparse_module.float_error(3000)) * Fraction(plan.bounds.grad_l2)
        / Fraction(plan.grad_sigma)) ** 2
    assert shift <= ((1 + Fraction(discrete.SENSITIVITY_SLACK)) / Fraction(z)) ** 2
    with pytest.raises(ValueError, match="n_features"):
        sparse_module.plan_safe_selection(10, 2**62, z, 1.0, plan.count_sigma, 1.0,
                                          plan.grad_sigma, None)
    with pytest.raises(ValueError, match="threshold"):
        sparse_module.plan_safe_selection(10, 100, z, 1.0, plan.count_sigma, 1.0,
                                          plan.grad_sigma, 1e300)
    # Without noise there is nothing to make safe.
    assert _plan(X, math.inf, 0.0, 5, 50).safe is None


# --------------------------------------------------------------------------
# Calibration: the count and gradient noise together are the accounted Gaussian
# --------------------------------------------------------------------------
@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("share", [0.1, 0.5])
def test_count_and_gradient_noise_are_the_accounted_joint_release(safe, share):
    # One step releases the clipped counts (l2 bound c) and the clipped gradients
    # (l2 bound C2) with noise sigma_c and sigma_g: one Gaussian mechanism of ratio
    # sqrt((c / sigma_c)^2 + (C2 / sigma_g)^2), which must be 1 / z, the multiplier
    # the recorded events are computed from; those events spend the budget.
    from skdp_sparse.privacy.accounting import compose
    X = sp.random(2000, 500, density=0.01, format="csr", random_state=0)
    epsilon, delta = 1.0, 1e-6
    plan = _plan(X, epsilon, delta, 50, 200, floating_point_safe=safe,
                 selection_share=share)
    ratio = math.hypot(plan.contribution_bound / plan.count_sigma,
                       plan.bounds.grad_l2 / plan.grad_sigma)
    assert ratio == pytest.approx(1.0 / plan.noise_multiplier, rel=1e-12)
    # The split between the two channels is the selection share.
    assert (plan.contribution_bound / plan.count_sigma) ** 2 == pytest.approx(
        share / plan.noise_multiplier**2, rel=1e-12)
    spent = compose(list(plan.events), delta)[0]
    assert 0.98 * epsilon <= spent <= epsilon * (1 + 1e-9)


@pytest.mark.parametrize("safe", [False, True], ids=["float", "fp_safe"])
def test_lazy_run_equals_the_eager_run_to_rounding(safe, monkeypatch):
    # The eager reference brings every feature to every step (each coordinate decayed
    # at each step); the lazy run decays a feature only when a step selects it and at
    # the end. With d far above the batch most features wait, some selected at the first
    # step for half the run or more. Measured: relative differences up to 6e-15.
    rng = np.random.default_rng(1)
    n, d, steps = 300, 1500, 150
    X = sp.random(n, d, density=0.004, format="csr", random_state=1)
    X.data[:] = rng.uniform(0.2, 1.0, X.nnz)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    run_steps = K.sparse_sgd_steps
    monkeypatch.setattr(sparse_module, "checkpoints", lambda n_steps, verbose: set(
        range(1, n_steps + 1)))

    def fit(eager, average):
        def stepped(*args):
            request = run_steps(*args)
            if eager and request == S.DONE:
                K.lazy_finish(int(args[27][S.ST_T]), args[18], args[19], *args[10:13])
            return request

        monkeypatch.setattr(K, "sparse_sgd_steps", stepped)
        coef, *_, info = sparse_sgd(X, y, LogisticLoss(), l2=0.05, l1=0.002, epsilon=2.0,
                                    delta=1e-5, batch_size=30, n_steps=steps,
                                    average=average, rng=0, _trace=(steps, d + 1),
                                    floating_point_safe=safe)
        return coef, info["selected"]

    for average in (True, False):
        (lazy, chosen), (eager, chosen_eager) = fit(False, average), fit(True, average)
        assert np.array_equal(chosen, chosen_eager)
        np.testing.assert_allclose(lazy, eager, rtol=0, atol=1e-12 * np.max(np.abs(eager)))
    sets = [set(row[1:1 + row[0]]) for row in chosen]
    assert sets[0] - set().union(*sets[steps // 2:])  # not vacuous: long waits
    assert np.count_nonzero(eager) < d  # and some are never selected
