"""Mutation check of the audits: halve one noise scale in the real code, see who notices.

For each mutation below, the package is copied to a temporary directory, one
line of its source is changed so that one noise scale of the real code path is
halved (the claim, and the accounting, stay as they are), and the honest fast
audits of :data:`~skdp_sparse.testing.audits.AUDITS` are run against the copy in
a fresh interpreter. An audit *catches* the mutation when its bound exceeds the
claim. Not part of the test suite; run it by hand::

    python -m skdp_sparse.testing.mutations                 # every mutation
    python -m skdp_sparse.testing.mutations --only sgd_gradient,cd_update
    python -m skdp_sparse.testing.mutations --list

It prints the table "noise halved in | caught by" (and each audit's bound).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MUTATIONS", "Mutation", "apply_mutation", "run_mutation"]


@dataclass(frozen=True)
class Mutation:
    """Replace ``old`` (which must occur exactly once) by ``new`` in ``path``."""

    name: str
    description: str
    path: str  # relative to the package directory
    old: str
    new: str


MUTATIONS = [
    Mutation(
        "cd_update", "the CD update noise (solver='cd')",
        "linear_model/_coordinate_descent.py",
        'update_noise, update_scale = "gaussian", sensitivity * scale',
        'update_noise, update_scale = "gaussian", sensitivity * scale / 2'),
    Mutation(
        "greedy_selection_exponential", "the greedy selection scale (Gumbel, zCDP)",
        "linear_model/_coordinate_descent.py",
        'selection_noise, selection_scale = "gumbel", 2 * delta_u / eps_select',
        'selection_noise, selection_scale = "gumbel", delta_u / eps_select'),
    Mutation(
        "greedy_selection_laplace", "the greedy selection scale (Laplace, pure DP)",
        "linear_model/_coordinate_descent.py",
        'selection_noise, selection_scale = "laplace", 2 * delta_u * scale',
        'selection_noise, selection_scale = "laplace", delta_u * scale'),
    Mutation(
        "greedy_update_gaussian", "the greedy update noise (Gaussian)",
        "linear_model/_coordinate_descent.py",
        'update_noise, update_scale = "gaussian", sensitivity / mu',
        'update_noise, update_scale = "gaussian", sensitivity / mu / 2'),
    Mutation(
        "greedy_update_laplace", "the greedy update noise (Laplace)",
        "linear_model/_coordinate_descent.py",
        'update_noise, update_scale = "laplace", sensitivity * scale',
        'update_noise, update_scale = "laplace", sensitivity * scale / 2'),
    Mutation(
        "sgd_gradient", "the gradient noise of sgd (full batch and subsampled)",
        "optim/sgd.py",
        "    sigma = z * P.c2\n",
        "    sigma = z * P.c2 / 2\n"),
    Mutation(
        "sparse_sgd_count", "the sparse_sgd count noise count_sigma",
        "optim/sgd.py",
        "count_sigma = z / math.sqrt(share) * c_count",
        "count_sigma = z / math.sqrt(share) * c_count / 2"),
    Mutation(
        "sparse_sgd_gradient", "the sparse_sgd gradient noise grad_sigma",
        "optim/sgd.py",
        "grad_sigma = z / math.sqrt(1 - share) * P.c2",
        "grad_sigma = z / math.sqrt(1 - share) * P.c2 / 2"),
    Mutation(
        "bias_reduced", "the projection-mechanism noise of bias_reduced_sgd",
        "optim/sgd.py",
        "sigma_unit = GaussianMechanism(1.0, epsilon=epsilon / 32.0, delta=delta / 16.0).sigma",
        "sigma_unit = GaussianMechanism(1.0, epsilon=epsilon / 32.0, delta=delta / 16.0)"
        ".sigma / 2"),
    Mutation(
        "phased_sgd", "the phase noise of phased_sgd",
        "optim/sgd.py",
        "sigma_r = s * 2.0 * etas[r] * P.c2",
        "sigma_r = s * 2.0 * etas[r] * P.c2 / 2"),
    Mutation(
        "output_perturbation", "the output-perturbation noise (Gaussian and Laplace)",
        "linear_model/_output_perturbation.py",
        "noisy = mech.randomise(thetas, rng)",
        "noisy = thetas + (mech.randomise(thetas, rng) - thetas) / 2"),
    Mutation(
        "mean_perturb", "the mean's noise (gaussian, laplace, projection at small d)",
        "mean.py",
        "noisy = plan.mechanism.randomise(mean, rng, n_draws=n_draws)",
        "noisy = mean + (plan.mechanism.randomise(mean, rng, n_draws=n_draws) - mean) / 2"),
    Mutation(
        "mean_sampled_projection", "the mean's sampled Gaussian projection (large d)",
        "mean.py",
        "np.ascontiguousarray(mean), mech.sigma, plan.radius, t, rng,",
        "np.ascontiguousarray(mean), mech.sigma / 2, plan.radius, t, rng,"),
    Mutation(
        "mean_l1_recovery", "the mean's l1_recovery measurement noise",
        "mean.py",
        "b = plan.mechanism.randomise(b, rng)",
        "b = b + (plan.mechanism.randomise(b, rng) - b) / 2"),
    Mutation(
        "search_score", "the private search's score noise",
        "model_selection/_search.py",
        "sigma = self._score_noise(rho_score, sensitivity)",
        "sigma = self._score_noise(rho_score, sensitivity) / 2"),
]


def _package_dir():
    return Path(__file__).resolve().parents[1]


def apply_mutation(mutation, package_dir):
    """Change the copy of the package in ``package_dir`` (raises if the line moved)."""
    path = Path(package_dir) / mutation.path
    text = path.read_text()
    count = text.count(mutation.old)
    if count != 1:
        raise ValueError(f"mutation {mutation.name!r}: expected the line once in "
                         f"{mutation.path}, found it {count} times")
    path.write_text(text.replace(mutation.old, mutation.new))


def _run_audits_here(names):
    """In the copy's interpreter: the honest audits' bounds, as JSON on stdout."""
    import warnings

    from .audits import AUDITS, run_audit

    warnings.simplefilter("ignore")
    out = {}
    for name in names:
        audit = AUDITS[name]
        bound = run_audit(audit, "honest").epsilon_lb
        out[name] = {"bound": bound, "claim": audit.epsilon,
                     "caught": bool(bound > audit.epsilon)}
    print(json.dumps(out))


def run_mutation(mutation, audit_names, *, keep=False):
    """``{audit: {"bound", "claim", "caught"}}`` of the honest audits on a mutated copy
    (``mutation=None``: an unchanged copy)."""
    tmp = tempfile.mkdtemp(prefix="skdp_mutation_")
    try:
        target = Path(tmp) / "skdp_sparse"
        shutil.copytree(_package_dir(), target,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi",
                                                      "*.nbc"))
        if mutation is not None:
            apply_mutation(mutation, target)
        env = dict(os.environ, PYTHONPATH=tmp, PYTHONDONTWRITEBYTECODE="1")
        code = ("import sys; from skdp_sparse.testing.mutations import _run_audits_here; "
                "_run_audits_here(sys.argv[1].split(','))")
        proc = subprocess.run([sys.executable, "-c", code, ",".join(audit_names)], env=env,
                              cwd=tmp, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"audits failed to run on {mutation and mutation.name}:\n"
                               f"{proc.stderr}")
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _main(argv=None):
    from .audits import AUDITS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated mutation names")
    parser.add_argument("--audits", default="", help="comma-separated audit names")
    parser.add_argument("--baseline", action="store_true",
                        help="also run the audits on an unchanged copy")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:32s} {m.description}")
        return
    names = args.audits.split(",") if args.audits else list(AUDITS)
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only.split(",")]
    rows = []
    for mutation in ([None] if args.baseline else []) + chosen:
        start = time.perf_counter()
        result = run_mutation(mutation, names)
        caught = [n for n, r in result.items() if r["caught"]]
        label = "(none: unchanged copy)" if mutation is None else mutation.description
        rows.append((label, caught))
        detail = ", ".join(f"{n} {r['bound']:.2f}/{r['claim']:g}" for n, r in result.items()
                           if r["bound"] > 0)
        print(f"[{time.perf_counter() - start:.0f}s] {label}: caught by "
              f"{', '.join(caught) or 'nothing'}\n    bounds/claims: {detail}", flush=True)
    print("\n| noise halved in | caught by |\n|---|---|")
    for label, caught in rows:
        print(f"| {label} | {', '.join(caught) or '**not caught**'} |")


if __name__ == "__main__":
    _main()
