"""Sizing of the audits: the distribution of their bounds over many seed sets.

For each audit, a pool of statistics is drawn through the real ``fit`` (honest
and halved noise, both datasets), and the audit is replayed many times on
random subsets of ``n_runs`` runs a side, with a fresh split of the bound each
time. The quantiles of the bound (as multiples of the claim) show how safely the
fast audit passes whatever the seeds: the honest bound must stay below the
claim and the halved one above its asserted margin.

Run ``python -m skdp_sparse.testing.design --help``. Pools are cached in
``--cache`` (``.npz`` per audit), so the replay can be redone for other sizes.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from .audits import AUDITS, audit_seeds, claim_delta, claim_epsilon, fit_runner, halved_epsilon
from .bounds import epsilon_lower_bound_cp

__all__ = ["draw_pool", "replay"]


def draw_pool(audit, size, *, cache=None, runner=None):
    """``{"honest": (s, s'), "halved": (s, s')}`` of ``size`` runs each, and the time per fit."""
    path = None if cache is None else os.path.join(cache, f"{audit.name}.npz")
    if path is not None and os.path.exists(path):
        data = np.load(path)
        if data["honest_s"].size >= size:
            return ({k: (data[f"{k}_s"], data[f"{k}_sp"]) for k in ("honest", "halved")},
                    float(data["seconds_per_fit"]))
    runner = fit_runner(audit) if runner is None else runner
    out = {}
    start = time.perf_counter()
    for variant, noise in enumerate(("honest", "halved")):
        epsilon = audit.epsilon if noise == "honest" else halved_epsilon(audit)
        # Seed sets far from the ones the tests use.
        out[noise] = tuple(runner(epsilon, side, audit_seeds(10_000 + variant, side, size))
                           for side in (0, 1))
    seconds = (time.perf_counter() - start) / (4 * size)
    if path is not None:
        os.makedirs(cache, exist_ok=True)
        np.savez(path, honest_s=out["honest"][0], honest_sp=out["honest"][1],
                 halved_s=out["halved"][0], halved_sp=out["halved"][1],
                 seconds_per_fit=seconds)
    return out, seconds


def replay(audit, pool, n_runs, reps, seed=0):
    """Bounds over the claim (:func:`claim_epsilon`) of ``reps`` audits of ``n_runs`` runs
    a side drawn from ``pool``."""
    rng = np.random.default_rng(seed)
    result = {}
    for noise, (s, s_prime) in pool.items():
        bounds = np.empty(reps)
        for r in range(reps):
            a = rng.choice(s, size=n_runs, replace=False)
            b = rng.choice(s_prime, size=n_runs, replace=False)
            bounds[r] = epsilon_lower_bound_cp(a, b, delta=claim_delta(audit),
                                               confidence=audit.confidence,
                                               rng=int(rng.integers(2**31))).epsilon_lb
        result[noise] = bounds / claim_epsilon(audit)
    return result


def _main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", default=",".join(AUDITS), help="comma-separated names")
    parser.add_argument("--pool", type=int, default=0,
                        help="runs per side and variant in the pool (default 5 n_runs)")
    parser.add_argument("--runs", type=int, default=0, help="n_runs (default: the audit's)")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--cache", default=None)
    args = parser.parse_args(argv)
    for name in args.audits.split(","):
        audit = AUDITS[name]
        n_runs = args.runs or audit.n_runs
        pool, seconds = draw_pool(audit, args.pool or 5 * n_runs, cache=args.cache)
        res = replay(audit, pool, n_runs, args.reps)
        h, v = res["honest"], res["halved"]
        print(f"{name:40s} fit ({audit.epsilon:g}, {audit.delta:g}) claim "
              f"({claim_epsilon(audit):.3f}, {claim_delta(audit):g}) N={n_runs:5d} "
              f"{seconds * 1e3:5.2f} ms/fit | honest q50 {np.median(h):.2f} q99 "
              f"{np.quantile(h, .99):.2f} max {h.max():.2f} | halved min {v.min():.2f} "
              f"q01 {np.quantile(v, .01):.2f} q50 {np.median(v):.2f}", flush=True)


if __name__ == "__main__":
    _main()
