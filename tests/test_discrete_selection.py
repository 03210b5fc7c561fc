"""Exact selections on lattice keys: the exponential mechanism and report-noisy-max.

Laws are checked by chi-square against probabilities computed in closed form (the
exponential mechanism) or by exact enumeration (report-noisy-max); the dynamic tree
through sequences of key updates; every continuation by making table ties frequent;
the privacy constants against their formulas; the randomness for reproducibility.
"""

import math
from fractions import Fraction

import numba
import numpy as np
import pytest
from scipy import stats

from skdp_sparse.privacy import discrete
from skdp_sparse.privacy.discrete import (
    HANDOFF_SLOTS,
    SENSITIVITY_SLACK,
    ExponentialSelector,
    _selection,
    _selection_kernels,
    em_select,
    em_set,
    finish_report_noisy_max,
    kernel_source,
    lattice_key,
    plan_selection,
    report_noisy_max,
    rnm_select,
    selection_epsilon,
    selection_scale_for,
)

MIN_P = 1e-3


def _em_probabilities(keys, t):
    keys = np.asarray(keys, dtype=float)
    w = np.exp((keys - keys.max()) / t)
    return w / w.sum()


def _chi2(samples, probs, min_expected=5.0):
    """p-value of the counts of ``samples`` (indices) against ``probs``; thin cells pooled."""
    counts = np.bincount(samples, minlength=probs.size).astype(float)
    expected = probs * samples.size
    keep = expected >= min_expected
    obs = np.append(counts[keep], samples.size - counts[keep].sum())
    exp = np.append(expected[keep], samples.size - expected[keep].sum())
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    return stats.chisquare(obs, exp).pvalue


# Regimes: t = 1 and 3 (bucket width 1), t = 100 (width 4), t = 2^17 (width 2^13); keys
# close together, spread over tens of e-folds, negative, tied.
_CASES = [
    ([0, 5, 10, -3, 10, 40], 7),
    ([0, 1, 2, 3, 3, 0, -1], 1),
    ([0, 0, 0, 0], 3),
    (list(range(-300, 300, 37)), 100),
    ([0, 2**17, 2**18, 5 * 2**17 + 12345, 3 * 2**17, -2**20, 7, 2**19], 2**17),
]


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("keys,t", _CASES)
def test_exponential_mechanism_law(keys, t, dynamic):
    sel = ExponentialSelector(keys, t, dynamic=dynamic)
    out = sel.select(np.random.default_rng(1), 100_000)
    assert _chi2(out, _em_probabilities(keys, t)) > MIN_P


@pytest.mark.parametrize("dynamic", [False, True])
def test_exponential_mechanism_many_coordinates(dynamic):
    # 5000 keys spread over 30 e-folds: most coordinates are far below the top.
    rng = np.random.default_rng(2)
    keys = rng.integers(-30 * 64, 64, size=5000)
    out = ExponentialSelector(keys, 64, dynamic=dynamic).select(np.random.default_rng(3),
                                                                60_000)
    probs = _em_probabilities(keys, 64)
    assert _chi2(out, probs) > MIN_P


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("t,span", [(64, 64), (2**17, 2**15)])
def test_acceptance_within_buckets(dynamic, t, span):
    # Keys spread inside a few buckets of t/16: only the exact acceptance exp(-x/t)
    # separates their probabilities (by up to 6%).
    keys = np.random.default_rng(15).integers(0, span, size=12)
    out = ExponentialSelector(keys, t, dynamic=dynamic).select(np.random.default_rng(16),
                                                               300_000)
    assert _chi2(out, _em_probabilities(keys, t)) > MIN_P


@pytest.mark.parametrize("dynamic", [False, True])
def test_far_coordinates_lumped_with_their_exact_factor(monkeypatch, dynamic):
    # With 3-bit weights, keys about two e-folds below the reference share the floor
    # weight and carry their exact extra factor exp(-x / t), and the other weights are
    # coarse (c_m down to 1/2): both are tested by the law.
    monkeypatch.setattr(_selection, "_weight_bits", lambda p: 3)
    keys = np.array([0, -1, -2, -3, -5, -8, -2, -1]) * 16 + np.arange(8)
    sel = ExponentialSelector(keys, 16, dynamic=dynamic)
    assert int(sel.arrays[3][3]) < 3 * 16  # the floor bucket is reached within the keys
    out = sel.select(np.random.default_rng(4), 200_000)
    assert _chi2(out, _em_probabilities(keys, 16)) > MIN_P


def _check_tree(sel):
    keys, tree, meta, params, weights, _ = sel.arrays
    p = keys.size
    if meta[1]:
        return
    wshift, m_cap = int(params[1]), int(params[3])
    offsets = np.minimum(meta[0] - (keys >> wshift), m_cap)
    assert np.all(offsets >= 0)
    np.testing.assert_array_equal(tree[p:], weights[offsets])
    v = np.arange(1, p)
    np.testing.assert_array_equal(tree[v], tree[2 * v] + tree[2 * v + 1])


def test_tree_follows_key_updates():
    # Updates that stay in place, rise above the reference bucket (rebuild), and fall
    # far below it (rebuild on the small total); the law after each batch is exact.
    rng = np.random.default_rng(5)
    t = 50
    keys = rng.integers(0, 200, size=300)
    sel = ExponentialSelector(keys, t, dynamic=True)
    sel.select(rng)
    builds = []
    for batch in range(6):
        idx = rng.choice(300, size=40, replace=False)
        if batch == 2:
            new = keys[idx] + 40 * t  # far above: must rebuild
        elif batch == 4:
            keys_all = sel.keys - 60 * t  # everything drops far below the reference
            sel.set(np.arange(300), keys_all)
            idx, new = idx[:0], keys[:0]
        else:
            new = rng.integers(-100, 300, size=idx.size) + sel.keys.max()
        sel.set(idx, new)
        keys = sel.keys.copy()
        builds.append((int(sel.arrays[2][0]), int(sel.arrays[2][1])))
        _check_tree(sel)
        out = sel.select(np.random.default_rng(10 + batch), 30_000)
        _check_tree(sel)
        assert _chi2(out, _em_probabilities(keys, t)) > MIN_P
    assert builds[2][1] == 1  # the rise flagged a rebuild


def test_tree_incremental_updates():
    # Updates that stay below the reference bucket change the leaves and their paths
    # only; the tree stays exactly the sum of the envelope weights and the law exact.
    rng = np.random.default_rng(17)
    t = 64
    keys = rng.integers(0, 6 * t, size=9)
    sel = ExponentialSelector(keys, t, dynamic=True)
    sel.select(rng)
    top = int(sel.arrays[2][0])
    for step in range(4):
        idx = rng.choice(9, size=3, replace=False)
        sel.set(idx, rng.integers(-2 * t, 6 * t, size=3))
        assert sel.arrays[2][1] == 0 and int(sel.arrays[2][0]) == top  # no rebuild
        _check_tree(sel)
        out = sel.select(np.random.default_rng(20 + step), 100_000)
        assert _chi2(out, _em_probabilities(sel.keys, t)) > MIN_P


def test_tree_rebuilds_on_rise_and_drop():
    t = 64
    sel = ExponentialSelector(np.zeros(10, dtype=np.int64), t, dynamic=True)
    sel.select(np.random.default_rng(0))
    top = int(sel.arrays[2][0])
    sel.set([3], [(top + 1) * 4 * t])  # above the reference bucket
    assert sel.arrays[2][1] == 1
    assert sel.select(np.random.default_rng(0)) == 3
    assert int(sel.arrays[2][0]) > top
    high = int(sel.arrays[2][0])
    sel.set(np.arange(10), np.full(10, -10**6))  # far below: total tiny
    sel.select(np.random.default_rng(0))
    assert int(sel.arrays[2][0]) < high


def test_tree_rebuilds_after_a_drop_beyond_the_floor_of_many_keys():
    # 2^21 keys: the floor weight each leaf keeps (1) sums to more than the drop
    # threshold, so a total that counted it never fell below it and keys fallen far
    # below the reference were not rebuilt (greedy CD stalled past 2^20 features).
    from skdp_sparse.privacy.discrete._selection_kernels import needs_rebuild

    p = 2**21
    sel = ExponentialSelector(np.zeros(p, dtype=np.int64), 64, dynamic=True)
    sel.select(np.random.default_rng(0))
    high = int(sel.arrays[2][0])
    keys, tree, meta, params, weights, _ = sel.arrays
    assert not needs_rebuild(tree, meta, params, weights)
    sel.set(np.arange(p), np.full(p, -10**6))
    assert needs_rebuild(tree, meta, params, weights)
    sel.select(np.random.default_rng(0))
    assert int(sel.arrays[2][0]) < high


@pytest.fixture
def short_words(monkeypatch):
    """6-bit words: a uniform word ties with an acceptance threshold about once in 64
    tests, so the exact continuation runs often."""
    monkeypatch.setattr(discrete, "_WORD_BITS", 6)
    calls = []
    finish = ExponentialSelector.finish

    def counting(self, fb, bits):
        calls.append(int(fb[0]))
        return finish(self, fb, bits)

    monkeypatch.setattr(ExponentialSelector, "finish", counting)
    return calls


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("keys,t", [_CASES[0], _CASES[3], _CASES[4]])
def test_selection_continuation(short_words, keys, t, dynamic):
    sel = ExponentialSelector(keys, t, dynamic=dynamic)
    assert int(sel.arrays[3][4]) == 6
    out = sel.select(np.random.default_rng(6), 40_000)
    assert len(short_words) > 20
    assert set(short_words) == {_selection_kernels._FB_SELECT}
    assert _chi2(out, _em_probabilities(keys, t)) > MIN_P


def test_continuation_decides_with_the_exact_acceptance():
    # A handed-back proposal is accepted with probability c_m exp(-x/t) given that its
    # word tied with T_m: P = (c_m 2^w - T_m) exp(-x/t).
    sel = ExponentialSelector([0, -40, -90], 7)
    params, weights, thresholds = sel.arrays[3], sel.arrays[4], sel.arrays[5]
    m, x = 2, 5
    lam = Fraction(1 << int(params[1]), 7)
    lo, _ = _selection._ratio_bracket(lam, m, int(weights[m]), int(params[2]), 63 + 40)
    p_tie = (lo - (int(thresholds[m]) << 40)) / 2.0**40  # c_m 2^63 - T_m
    assert 0 < p_tie < 1
    fb = np.array([_selection_kernels._FB_SELECT, 1, m, int(thresholds[m]), x, 0, 0, 0])
    bits = discrete._PyBits(np.random.default_rng(7))
    n = 20_000
    hits = sum(sel.finish(fb, bits) == 1 for _ in range(n))
    p = p_tie * math.exp(-x / 7)
    assert abs(hits / n - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_tables_are_exact():
    params, weights, thresholds = _selection._selection_tables(100, 40, 63)
    t, wshift, s_bits, m_cap = (int(v) for v in params[:4])
    lam = (1 << wshift) / t
    m = np.arange(1, m_cap)
    v = 2.0**s_bits * np.exp(-m * lam)
    # E_m = ceil(2^S exp(-m lam)) above the floor, E_M = 1 below it.
    assert np.all(weights[1:m_cap] - v > 0) and np.all(weights[1:m_cap] - v <= 1 + 1e-6 * v)
    assert weights[0] == 2**s_bits and weights[m_cap] == 1
    assert 2.0**s_bits * math.exp(-m_cap * lam) < 1
    c = v / weights[1:m_cap]
    assert np.all(np.abs(thresholds[1:m_cap] / 2.0**63 - c) < 1e-12)


# ------------------------------------------------------------------- kernels
@numba.njit
def _greedy_rounds(sel, steps, next64, state, fb, out, start, forced):
    """A caller kernel: selection, then the chosen key drops and one other rises.

    Returns where it stopped for a handoff (``start`` = that step); ``forced >= 0``
    resumes the step with the finished selection.
    """
    keys = sel[0]
    p = keys.size
    for s in range(start, steps):
        if s == start and forced >= 0:
            j = forced
        else:
            j = em_select(sel, next64, state, fb)
            if j < 0:
                return s
        out[s] = j
        em_set(sel, j, keys[j] - 3)
        em_set(sel, (j + 1) % p, keys[(j + 1) % p] + 2)
    return steps


def _run_rounds(sel, steps, rng):
    src = kernel_source(rng)
    fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)
    out = np.empty(steps, dtype=np.int64)
    s, forced, handoffs = 0, -1, 0
    while s < steps:
        s = _greedy_rounds(sel.arrays, steps, src.next64, src.state, fb, out, s, forced)
        forced = -1
        if s < steps:
            handoffs += 1
            forced = sel.finish(fb, src)
    return out, handoffs


@pytest.mark.parametrize("dynamic", [False, True])
def test_caller_kernel_protocol(monkeypatch, dynamic):
    # Scan and tree give the same law through a kernel that updates keys between
    # selections, stopping and resuming on every handoff.
    monkeypatch.setattr(discrete, "_WORD_BITS", 6)
    keys0 = np.arange(12) * 3
    outs = []
    for rep in range(300):
        sel = ExponentialSelector(keys0, 5, dynamic=dynamic)
        out, _ = _run_rounds(sel, 8, np.random.default_rng(rep))
        outs.append(out)
    outs = np.array(outs)
    # The first selection has the exact law; later ones depend on the path.
    assert _chi2(outs[:, 0], _em_probabilities(keys0, 5), 3.0) > MIN_P
    # Replay of the same seed: the kernel and the keys end identical.
    a, b = ExponentialSelector(keys0, 5, dynamic), ExponentialSelector(keys0, 5, dynamic)
    oa, _ = _run_rounds(a, 20, np.random.default_rng(9))
    ob, _ = _run_rounds(b, 20, np.random.default_rng(9))
    np.testing.assert_array_equal(oa, ob)
    np.testing.assert_array_equal(a.keys, b.keys)


def test_scan_and_tree_agree_along_a_path():
    # Same key path (forced choices), selections from each sampler at every step.
    rng = np.random.default_rng(11)
    keys = rng.integers(0, 400, size=64)
    scan, tree = ExponentialSelector(keys, 40, False), ExponentialSelector(keys, 40, True)
    for step in range(5):
        idx = rng.choice(64, size=10, replace=False)
        new = rng.integers(-200, 600, size=10)
        scan.set(idx, new)
        tree.set(idx, new)
        probs = _em_probabilities(scan.keys, 40)
        for sampler in (scan, tree):
            out = sampler.select(np.random.default_rng(step), 20_000)
            assert _chi2(out, probs) > MIN_P


# -------------------------------------------------------------- report-noisy-max
def _rnm_probabilities(keys, t, span=80):
    """Exact P(argmax = j) with ties to the lowest index, discrete Laplace noise."""
    z = np.arange(-span, span + 1)
    pmf = np.exp(-np.abs(z) / t)
    pmf /= pmf.sum()
    cdf = np.cumsum(pmf)

    def below(v):  # P(Z < v) for integer array v
        idx = np.clip(v - z[0] - 1, -1, z.size - 1)
        return np.where(idx < 0, 0.0, cdf[np.maximum(idx, 0)])

    probs = []
    for j, kj in enumerate(keys):
        total = np.ones_like(pmf)
        for i, ki in enumerate(keys):
            if i == j:
                continue
            v = kj + z - ki  # i loses if k_i + Z_i < k_j + z (i < j) or <= (i > j)
            total *= below(v) if i < j else below(v + 1)
        probs.append(np.sum(pmf * total))
    return np.array(probs)


@pytest.mark.parametrize("keys,t", [([0, 0, 0], 2), ([3, 0, 3, -2], 2), ([0, 5, 2, 5], 3)])
def test_report_noisy_max_law_and_ties(keys, t):
    probs = _rnm_probabilities(keys, t)
    assert probs.sum() == pytest.approx(1.0, abs=1e-9)
    out = report_noisy_max(keys, t, np.random.default_rng(12), 100_000)
    assert _chi2(out, probs) > MIN_P
    if keys == [0, 0, 0]:
        assert probs[0] > probs[1] > probs[2]  # ties favour the lowest index


def test_report_noisy_max_kernel_contract():
    keys = np.array([1, 2, 3], dtype=np.int64)
    noise = np.array([5, 0, 0, 0, 0, 0, 7], dtype=np.int64)
    pos = np.array([0], dtype=np.int64)
    assert rnm_select(keys, noise, pos) == 0 and pos[0] == 3
    assert rnm_select(keys, noise, pos) == 2 and pos[0] == 6
    assert rnm_select(keys, noise, pos) == -1 and pos[0] == 6  # not enough left
    # A draw beyond 2^61 is compared in Python integers.
    wide = np.array([2**62, -2**62, 2**62], dtype=np.int64)
    pos[0] = 0
    assert rnm_select(keys, wide, pos) == -2 and pos[0] == 0
    assert finish_report_noisy_max(keys, wide, pos) == 2 and pos[0] == 3


# ----------------------------------------------------------- privacy constants
@pytest.mark.parametrize("sens,scale,bound", [(1e-4, 2e-4, 16000.0), (0.3, 0.05, 3.0),
                                              (2.0, 200.0, 1e6)])
def test_selection_lattice_and_epsilon(sens, scale, bound):
    plan = plan_selection(sens, scale, bound)
    gamma = Fraction(2) ** plan.k
    div = Fraction(bound) / 2**52
    assert plan.delta_units == math.floor((1 + div) / gamma) + 1
    assert plan.t == math.ceil(Fraction(scale) / (Fraction(sens) * gamma))
    assert plan.epsilon == Fraction(2 * plan.delta_units, plan.t)
    claim = selection_epsilon(sens, scale)
    assert claim == pytest.approx((1 + SENSITIVITY_SLACK) * 2 * sens / scale, rel=1e-15)
    assert Fraction(claim) >= (1 + Fraction(SENSITIVITY_SLACK)) * 2 * Fraction(sens) \
        / Fraction(scale)
    assert plan.epsilon <= Fraction(claim)
    beta = selection_scale_for(sens, 0.7)
    assert selection_epsilon(sens, beta) <= 0.7 < selection_epsilon(
        sens, math.nextafter(beta, 0.0))


def test_neighbouring_keys_differ_by_at_most_delta_units():
    # Scores at the worst places for rounding: the normalised value just below and above
    # half-integers of the lattice, and neighbours a full sensitivity away.
    sens, scale, bound = 0.3, 0.05, 1e4
    plan = plan_selection(sens, scale, bound)
    rng = np.random.default_rng(13)
    base = (rng.integers(-10**6, 10**6, size=20_000) + 0.5) * plan.gamma
    v = np.concatenate([np.nextafter(base, -np.inf), base, np.nextafter(base, np.inf)])
    u = v * sens
    u2 = u + sens * rng.choice([-1.0, 1.0], size=u.size)
    k1, k2 = plan.keys(u, sens), plan.keys(u2, sens)
    diff = np.abs(k1 - k2)
    assert diff.max() <= plan.delta_units
    assert diff.max() >= plan.delta_units - 1  # the bound is nearly attained
    # Clipped scores and NaN stay on the lattice of the bound.
    big = plan.keys(np.array([1e30, -1e30, np.nan]), sens)
    np.testing.assert_array_equal(big, np.rint(np.array([1, -1, 1]) * bound / plan.gamma))
    # The kernel rounding is the same.
    ks = np.array([lattice_key(x, sens, bound, plan.inv_gamma) for x in u[:500]])
    np.testing.assert_array_equal(ks, k1[:500])


def test_exact_mechanism_loss_meets_epsilon():
    # For neighbouring keys (each moved by at most D), the exact output probabilities of
    # both mechanisms differ by at most exp(2 D / t), and the worst pair comes close.
    d_units, t = 3, 4
    keys = np.array([0, 2, 5, 1])
    eps = 2 * d_units / t
    worst_em = worst_rnm = 0.0
    for j in range(keys.size):
        shift = np.full(keys.size, d_units)
        shift[j] = -d_units
        for k2 in (keys + shift, keys - shift):
            a, b = _em_probabilities(keys, t), _em_probabilities(k2, t)
            worst_em = max(worst_em, np.max(np.abs(np.log(a / b))))
            a, b = _rnm_probabilities(keys, t), _rnm_probabilities(k2, t)
            worst_rnm = max(worst_rnm, np.max(np.abs(np.log(a / b))))
    assert worst_em <= eps + 1e-12 and worst_em > 0.9 * eps
    assert worst_rnm <= eps + 1e-9


# ------------------------------------------------------------------ randomness
def test_selections_are_reproducible_and_advance_the_generator():
    keys = np.arange(50) * 7
    for dynamic in (False, True):
        sel = ExponentialSelector(keys, 30, dynamic=dynamic)
        a = sel.select(123, 200)
        np.testing.assert_array_equal(a, sel.select(123, 200))
        rng = np.random.default_rng(14)
        first, second = sel.select(rng, 200), sel.select(rng, 200)
        assert not np.array_equal(first, second)
        ref = np.random.default_rng(14).bit_generator
        target = rng.bit_generator.state["state"]
        for _ in range(20_000):
            if ref.state["state"] == target:
                break
            ref.advance(1)
        assert ref.state["state"] == target


def test_validation():
    with pytest.raises(ValueError):
        ExponentialSelector([], 3)
    with pytest.raises(ValueError):
        ExponentialSelector([1, 2], 0)
    with pytest.raises(ValueError):
        ExponentialSelector([2**62], 3)
    with pytest.raises(IndexError):
        ExponentialSelector([1, 2], 3).set([2], [0])
    with pytest.raises(ValueError, match="2\\^35"):
        plan_selection(1.0, 1.0, 2.0**40)
