"""Cost of the exact samplers against the float draws they replace.

Times, in ns per selection / per draw / per process, the minimum over ``--repeats``
interleaved runs (other load on the machine inflates it less), of:

* **selection** over ``p`` scores (p = 124, 8,315, 10^5, 10^6), static scores: Gumbel-max
  in doubles (``s_j / beta - log(E_j)``, one pass, as the coordinate-descent kernel
  does) against the exact exponential mechanism, one pass (``scan``) and the sum tree
  (``tree``); report-noisy-max with ``rng.laplace`` against exact discrete Laplace
  noise (buffered draws) for the smaller ``p``;
* **dynamic selection** (p = 10^5, 10^6): one step = ``K = 40`` changed scores plus one
  selection, the pattern of greedy coordinate descent on a sparse matrix with 20
  non-zeros a row (the chosen score falls to about zero, 40 others move by a few
  hundredths of the temperature, ``move = 0.05``; and a stress case where they move by
  a whole temperature, so the top often leaves the tree's reference bucket and forces
  O(p) rebuilds); the current log-sum-exp heap of ``optim/_cd_kernels.py`` against the
  exact tree;
* **buffered noise**: ns per draw to fill a buffer of 10^6 exact discrete Gaussian /
  Laplace draws at ``2^30`` lattice units, against ``rng.normal`` / ``rng.laplace``;
  and ns per draw a kernel pays to take them;
* **exceedance process** over ``m = 10^6`` positions, discrete Gaussian of ``s = 2^30``
  units, threshold for ``q = 1/m`` and ``q = 10^-2``: positions only and with the
  values, against ``rng.normal(size=m)`` and a comparison (and against the binomial
  count plus a uniform subset that ``sparse_sgd`` draws in floats).

Scores are in units of the temperature: ``|N(0, 2^2)|``, so a few dominate. The exact
samplers use keys ``rint(u t)`` with ``t = 2^17`` (the temperature of the lattice of
``plan_selection``).

Run: ``python benchmarks/bench_samplers.py [--quick] [--repeats 5]``; ``--quick``
sets 2 repeats, fewer selections and skips p = 10^6.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import markdown_table  # noqa: E402

from skdp_sparse.optim._cd_kernels import _logaddexp, _tree_set, tree_sample  # noqa: E402
from skdp_sparse.privacy.discrete import (  # noqa: E402
    HANDOFF_SLOTS,
    ExponentialSelector,
    NoiseBuffer,
    em_select,
    em_set,
    kernel_source,
    noise_take,
    plan_exceedance,
    rnm_select,
)

T_UNITS = 2**17


# ----------------------------------------------------------------- float paths
@numba.njit(cache=True)
def _gumbel_loop(scores, rng, n, out):
    for r in range(n):
        best = -np.inf
        best_j = 0
        for j in range(scores.size):
            s = scores[j] - np.log(rng.standard_exponential())
            if s > best:
                best = s
                best_j = j
        out[r] = best_j


@numba.njit(cache=True)
def _rnm_float_loop(scores, scale, rng, n, out):
    for r in range(n):
        best = -np.inf
        best_j = 0
        for j in range(scores.size):
            s = scores[j] + scale * rng.laplace(0.0, 1.0)
            if s > best:
                best = s
                best_j = j
        out[r] = best_j


@numba.njit(cache=True)
def _heap_build(tree, values):
    m = values.size
    for j in range(m):
        tree[m + j] = values[j]
    for v in range(m - 1, 0, -1):
        tree[v] = _logaddexp(tree[2 * v], tree[2 * v + 1])


@numba.njit(cache=True)
def _heap_steps(tree, values, upd_idx, upd_val, drop_val, rng, out):
    m = values.size
    k = upd_idx.shape[1]
    for s in range(out.size):
        j = tree_sample(tree, m, rng)
        out[s] = j
        _tree_set(tree, m, j, drop_val[s])
        for r in range(k):
            i = upd_idx[s, r]
            values[i] = max(values[i] + upd_val[s, r], 0.0)
            _tree_set(tree, m, i, values[i])


# ----------------------------------------------------------------- exact paths
@numba.njit(cache=True)
def _select_loop(sel, n, next64, state, fb, out):
    for r in range(n):
        j = em_select(sel, next64, state, fb)
        if j < 0:
            return r
        out[r] = j
    return n


@numba.njit(cache=True)
def _exact_steps(sel, upd_idx, upd_val, drop_val, next64, state, fb, out, start):
    keys = sel[0]
    k = upd_idx.shape[1]
    for s in range(start, out.size):
        j = em_select(sel, next64, state, fb)
        if j < 0:
            return s
        out[s] = j
        em_set(sel, j, np.int64(drop_val[s] * 131072.0))
        for r in range(k):
            i = upd_idx[s, r]
            em_set(sel, i, max(keys[i] + np.int64(upd_val[s, r] * 131072.0), 0))
    return out.size


@numba.njit(cache=True)
def _rnm_exact_loop(keys, noise, pos, n, out):
    for r in range(n):
        j = rnm_select(keys, noise, pos)
        if j < 0:
            return r
        out[r] = j
    return n


@numba.njit(cache=True)
def _take_loop(values, pos, n):
    total = np.int64(0)
    for _ in range(n):
        ok, z = noise_take(values, pos)
        total += z
    return total


def _best(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _run_exact(kernel_call, n, rng, finish):
    """Drive a kernel loop that may stop on a handoff (none expected at 63 bits)."""
    src = kernel_source(rng)
    fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)
    done = 0
    while done < n:
        done = kernel_call(src, fb, done)
        if done < n:
            finish(fb, src)
            done += 1


# ------------------------------------------------------------------ sections
def selection_rows(sizes, n_sel, repeats):
    return [_selection_case(p, n_sel, repeats) for p in sizes]


def _selection_case(p, n_sel, repeats):
    scores = np.abs(np.random.default_rng(p).normal(0.0, 2.0, size=p))
    keys = np.rint(scores * T_UNITS).astype(np.int64)
    # The O(p) passes are timed on fewer selections at large p; the tree on n_sel.
    n = max(3, n_sel // max(1, p // 1000))
    out = np.empty(max(n, n_sel), dtype=np.int64)
    rng = np.random.default_rng(0)
    scan = ExponentialSelector(keys, T_UNITS, dynamic=False)
    tree = ExponentialSelector(keys, T_UNITS, dynamic=True)
    tree.select(rng)  # builds the tree

    def exact(sel, count):
        src = kernel_source(rng)
        fb = np.zeros(HANDOFF_SLOTS, dtype=np.int64)
        r = 0
        while r < count:
            r += _select_loop(sel.arrays, count - r, src.next64, src.state, fb, out)
            if r < count:
                sel.finish(fb, src)

    cases = {
        "Gumbel-max (floats)": (lambda: _gumbel_loop(scores, rng, n, out), n),
        "exact scan": (lambda: exact(scan, n), n),
        "exact tree": (lambda: exact(tree, n_sel), n_sel),
    }
    for f, _ in cases.values():
        f()
    times = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (f, count) in cases.items():
            times[name].append(_best(f, 1) / count)
    t_g = min(times["Gumbel-max (floats)"])
    row = {"p": f"{p:,}", "Gumbel (ns)": 1e9 * t_g}
    for name in ("exact scan", "exact tree"):
        t = min(times[name])
        row[name.replace("exact ", "") + " (ns)"] = 1e9 * t
        row[name.replace("exact ", "") + " / Gumbel"] = t / t_g
    if p <= 10_000:
        buf = NoiseBuffer("laplace", T_UNITS, rng, size=p * n)
        scale = 1.0

        def rnm_exact():
            buf.refill(p * n)
            _rnm_exact_loop(keys, buf.values, buf.pos, n, out)

        rnm_exact()
        t_rf = min(_best(lambda: _rnm_float_loop(scores, scale, rng, n, out), 1)
                   for _ in range(repeats)) / n
        t_re = min(_best(rnm_exact, 1) for _ in range(repeats)) / n
        row.update({"RNM float (ns)": 1e9 * t_rf, "RNM exact (ns)": 1e9 * t_re,
                    "RNM exact / float": t_re / t_rf})
    return row


def dynamic_rows(sizes, steps, repeats, k=40):
    return [_dynamic_case(p, steps, repeats, k, move) for p in sizes for move in (0.05, 1.0)]


def _dynamic_case(p, steps, repeats, k, move):
    g = np.random.default_rng(p + 1)
    scores = np.abs(g.normal(0.0, 2.0, size=p))
    upd_idx = g.integers(0, p, size=(steps, k))
    upd_val = g.normal(0.0, move, size=(steps, k))
    drop_val = np.abs(g.normal(0.0, 0.1, size=steps))
    out = np.empty(steps, dtype=np.int64)

    def heap():
        values = scores.copy()
        tree = np.empty(2 * p)
        _heap_build(tree, values)
        _heap_steps(tree, values, upd_idx, upd_val, drop_val, np.random.default_rng(1),
                    out)

    def exact():
        sel = ExponentialSelector(np.rint(scores * T_UNITS).astype(np.int64), T_UNITS,
                                  dynamic=True)
        _run_exact(lambda src, fb, s: _exact_steps(sel.arrays, upd_idx, upd_val,
                                                   drop_val, src.next64, src.state, fb,
                                                   out, s),
                   steps, np.random.default_rng(1), sel.finish)

    heap()
    exact()
    t_h = min(_best(heap, 1) for _ in range(repeats)) / steps
    t_e = min(_best(exact, 1) for _ in range(repeats)) / steps
    return {"p": f"{p:,}", "changed scores per step": k, "move (temperatures)": move,
            "heap, floats (us/step)": 1e6 * t_h, "exact tree (us/step)": 1e6 * t_e,
            "exact / heap": t_e / t_h}


def noise_rows(repeats, n=10**6):
    rows = []
    rng = np.random.default_rng(2)
    for law, float_draw in (("gaussian", lambda: rng.normal(size=n)),
                            ("laplace", lambda: rng.laplace(size=n))):
        buf = NoiseBuffer(law, 2**30 + 12345, rng, size=n)
        buf.refill()
        t_fill = min(_best(lambda b=buf: (b.pos.__setitem__(0, n), b.refill()), 1)
                     for _ in range(repeats)) / n
        t_float = min(_best(float_draw, 1) for _ in range(repeats)) / n

        def take(b=buf):
            b.pos[0] = 0
            _take_loop(b.values, b.pos, n)

        take()
        t_take = min(_best(take, 1) for _ in range(repeats)) / n
        rows.append({"law": law, "exact fill (ns/draw)": 1e9 * t_fill,
                     "float draw (ns/draw)": 1e9 * t_float, "exact / float": t_fill / t_float,
                     "kernel take (ns/draw)": 1e9 * t_take})
    return rows


def process_rows(repeats, m=10**6):
    return [_process_case(q, repeats, m) for q in (1.0 / m, 1e-2)]


def _process_case(q_target, repeats, m):
    s = 2**30 + 12345
    rng = np.random.default_rng(3)
    u = int(round(s * stats.norm.isf(q_target)))
    plan = plan_exceedance("gaussian", s, u)
    q = plan.probability
    thr = u / s

    def floats():
        return np.flatnonzero(rng.normal(size=m) > thr)

    def binomial():
        c = rng.binomial(m, q)
        return np.unique(rng.integers(0, m, size=c))

    cases = {"positions": lambda: plan.sample(m, rng, values=False),
             "with values": lambda: plan.sample(m, rng, values=True),
             "floats": floats, "binomial": binomial}
    for f in cases.values():
        f()
    t = {name: min(_best(f, 1) for _ in range(repeats)) for name, f in cases.items()}
    return {"q": f"{q:.2g}", "expected selected": f"{m * q:.3g}",
            "exact, positions (ms)": 1e3 * t["positions"],
            "exact, with values (ms)": 1e3 * t["with values"],
            "m floats (ms)": 1e3 * t["floats"],
            "binomial + subset (ms)": 1e3 * t["binomial"],
            "exact with values / floats": t["with values"] / t["floats"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 repeats, fewer selections, no p = 10^6")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = [124, 8_315, 10**5, 10**6]
    n_sel, steps = 2000, 2000
    if args.quick:
        args.repeats, sizes, n_sel, steps = 2, sizes[:3], 500, 500
    rows = selection_rows(sizes, n_sel, args.repeats)
    cols = ["p", "Gumbel (ns)", "scan (ns)", "scan / Gumbel", "tree (ns)", "tree / Gumbel",
            "RNM float (ns)", "RNM exact (ns)", "RNM exact / float"]
    print("Selection over p static scores (ns per selection):\n")
    print(markdown_table(rows, cols, floatfmt=".2f"))
    rows = dynamic_rows([p for p in sizes if p >= 10**5], steps, args.repeats)
    cols = ["p", "changed scores per step", "move (temperatures)", "heap, floats (us/step)",
            "exact tree (us/step)", "exact / heap"]
    print("\nDynamic selection, one step = 40 changed scores + 1 selection:\n")
    print(markdown_table(rows, cols, floatfmt=".2f"))
    rows = noise_rows(args.repeats)
    cols = ["law", "exact fill (ns/draw)", "float draw (ns/draw)", "exact / float",
            "kernel take (ns/draw)"]
    print("\nBuffered noise at 2^30 lattice units:\n")
    print(markdown_table(rows, cols, floatfmt=".2f"))
    rows = process_rows(args.repeats)
    cols = ["q", "expected selected", "exact, positions (ms)", "exact, with values (ms)",
            "m floats (ms)", "binomial + subset (ms)", "exact with values / floats"]
    print("\nExceedance process over m = 10^6 positions (discrete Gaussian, s = 2^30):\n")
    print(markdown_table(rows, cols, floatfmt=".3f"))


if __name__ == "__main__":
    main()
