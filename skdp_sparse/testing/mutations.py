"""Mutation check of the audits: halve one noise scale in the real code, see who notices.

For each mutation below, the package and the test suite are copied to a temporary
directory, one line of the package's source is changed so that one noise scale of a
real code path is halved (the claim, and the accounting, stay as they are), and in
fresh interpreters (with a fresh ``NUMBA_CACHE_DIR``, so that no compiled code of the
unchanged package is reused):

1. the honest fast audits of :data:`~skdp_sparse.testing.audits.AUDITS` run against
   the copy; an audit *catches* the mutation when its bound exceeds its claim;
2. the non-slow tests run against the copy with ``-x`` (by default
   ``tests/test_audits.py`` without the audits of step 1 and of half the noise, then
   the test files that check noise scales and laws against their formulas,
   :data:`CALIBRATION_TESTS`; ``--tests all`` runs the whole suite); the first test
   that fails *catches* the mutation.

The default rows change the floating-point-safe code path every estimator takes by
default; rows marked "(float path)" change the path of ``floating_point_safe=False``
where it differs. Not part of the test suite; run it by hand::

    python -m skdp_sparse.testing.mutations                 # every mutation
    python -m skdp_sparse.testing.mutations --only sgd_full_batch,cd_update
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
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CALIBRATION_TESTS", "MUTATIONS", "Mutation", "apply_mutation", "run_mutation"]


@dataclass(frozen=True)
class Mutation:
    """Replace ``old`` (which must occur exactly once) by ``new`` in ``path``."""

    name: str
    description: str
    path: str  # relative to the package directory
    old: str
    new: str


_CD = "solvers/coordinate_descent.py"
_SPARSE = "solvers/sparse_sgd.py"
_HALF_GAUSSIAN = "(2 if isinstance(plan.mechanism, GaussianMechanism) else 1)"
_HALF_LAPLACE = "(1 if isinstance(plan.mechanism, GaussianMechanism) else 2)"


def _sampled_projection(safe):
    condition = "" if safe else "not "
    return Mutation(
        f"mean_sampled_projection{'' if safe else '_float'}",
        "the mean's sampled Gaussian projection (large d)" + ("" if safe else
                                                               " (float path)"),
        "mean/_release.py",
        "    mech = plan.mechanism\n",
        "    mech = plan.mechanism\n"
        "    if (isinstance(mech, GaussianMechanism) and mech.sigma > 0\n"
        f"            and {condition}mech.floating_point_safe):\n"
        "        mech = GaussianMechanism(mech.sensitivity, sigma=mech.sigma / 2,\n"
        "                                 floating_point_safe=mech.floating_point_safe)\n")


MUTATIONS = [
    # -- coordinate descent (safe path: lattice releases, exact selection) --------------
    Mutation(
        "cd_update", "the CD update noise (solver='cd', discrete Gaussian)", _CD,
        'return dict(update_noise="discrete_gaussian", update_scale=plan.scale,',
        'return dict(update_noise="discrete_gaussian", update_scale=plan.scale / 2,'),
    Mutation(
        "greedy_selection_exponential",
        "the greedy selection scale (exact exponential mechanism)", _CD,
        "eps_sel = _selection_epsilon_for(gaussian_rho(1.0, plan.scale))",
        "eps_sel = 2 * _selection_epsilon_for(gaussian_rho(1.0, plan.scale))"),
    Mutation(
        "greedy_selection_laplace",
        "the greedy selection scale (report-noisy-max, discrete Laplace)", _CD,
        "eps_sel, noise, update = laplace_epsilon(1.0, plan.scale), \\",
        "eps_sel, noise, update = 2 * laplace_epsilon(1.0, plan.scale), \\"),
    Mutation(
        "greedy_update_gaussian", "the greedy update noise (discrete Gaussian)", _CD,
        "update_scale=plan.scale, update_sensitivity=sensitivity)",
        "update_scale=plan.scale / (1 if plan.pure else 2), "
        "update_sensitivity=sensitivity)"),
    Mutation(
        "greedy_update_laplace", "the greedy update noise (discrete Laplace)", _CD,
        "update_scale=plan.scale, update_sensitivity=sensitivity)",
        "update_scale=plan.scale / (2 if plan.pure else 1), "
        "update_sensitivity=sensitivity)"),
    # -- gradient solvers ------------------------------------------------------------
    Mutation(
        "sgd_full_batch", "the noisy gradient descent noise (sgd, full batch)",
        "solvers/sgd.py",
        "sigma = plan.noise_multiplier * bounds.grad_l2",
        "sigma = plan.noise_multiplier * bounds.grad_l2 / (2 if plan.full_batch else 1)"),
    Mutation(
        "sgd_poisson", "the DP-SGD noise (sgd, Poisson subsampling)", "solvers/sgd.py",
        "sigma = plan.noise_multiplier * bounds.grad_l2",
        "sigma = plan.noise_multiplier * bounds.grad_l2 / (1 if plan.full_batch else 2)"),
    Mutation(
        "sparse_sgd_count", "the sparse_sgd feature-count noise (count_sigma)", _SPARSE,
        "count_scale = Fraction(count_sigma) / Fraction(2) ** count_k",
        "count_scale = Fraction(count_sigma) / Fraction(2) ** count_k / 2"),
    Mutation(
        "sparse_sgd_gradient", "the sparse_sgd gradient noise (grad_sigma)", _SPARSE,
        "grad_scale = Fraction(grad_sigma) / Fraction(2) ** grad_k",
        "grad_scale = Fraction(grad_sigma) / Fraction(2) ** grad_k / 2"),
    Mutation(
        "bias_reduced", "the projection-mechanism noise of bias_reduced_sgd",
        "solvers/bias_reduced_sgd.py",
        "floating_point_safe=safe).sigma",
        "floating_point_safe=safe).sigma / 2"),
    Mutation(
        "phased_sgd", "the phase noise of phased_sgd", "solvers/phased_sgd.py",
        "sigma_r = plan.noise_ratio * 2.0 * eta_r * bounds.grad_l2",
        "sigma_r = plan.noise_ratio * 2.0 * eta_r * bounds.grad_l2 / 2"),
    Mutation(
        "output_perturbation_gaussian", "the output-perturbation noise (discrete Gaussian)",
        "solvers/output_perturbation.py",
        "noisy = plan.mechanism.randomise(thetas, rng)",
        f"noisy = thetas + (plan.mechanism.randomise(thetas, rng) - thetas) / {_HALF_GAUSSIAN}"),
    Mutation(
        "output_perturbation_laplace", "the output-perturbation noise (discrete Laplace)",
        "solvers/output_perturbation.py",
        "noisy = plan.mechanism.randomise(thetas, rng)",
        f"noisy = thetas + (plan.mechanism.randomise(thetas, rng) - thetas) / {_HALF_LAPLACE}"),
    Mutation(
        "sufficient_statistics_moment", "the noise of X^T y (sufficient_statistics)",
        "solvers/sufficient_statistics.py",
        'noisy_moment, _ = release(moment, sens["moment"], units["moment"], safe, rng)',
        'noisy_moment, _ = release(moment, sens["moment"], units["moment"] / 2, safe, rng)'),
    Mutation(
        "sufficient_statistics_gram", "the noise of X^T X (sufficient_statistics)",
        "solvers/sufficient_statistics.py",
        'noisy_upper, sigma_g = release(gram[upper], sens["gram"], units["gram"], safe, rng)',
        'noisy_upper, sigma_g = release(gram[upper], sens["gram"], units["gram"] / 2, safe, '
        'rng)'),
    Mutation(
        "bounded_newton_gradient", "the noise of a gradient step (bounded_newton)",
        "solvers/bounded_newton.py",
        "grads, _ = release(grads, plan.gradient_sensitivity, plan.step_unit, safe, rng)",
        "grads, _ = release(grads, plan.gradient_sensitivity, plan.step_unit / 2, safe, "
        "rng)"),
    Mutation(
        "bounded_newton_gram", "the noise of X^T X (bounded_newton)",
        "solvers/bounded_newton.py",
        "noisy, sigma_gram = release(gram[upper], plan.gram_sensitivity, plan.gram_unit,",
        "noisy, sigma_gram = release(gram[upper], plan.gram_sensitivity, plan.gram_unit / 2,"),
    # -- the mean and the search ------------------------------------------------------
    Mutation(
        "mean_gaussian", "the mean's Gaussian release (gaussian, projection at small d)",
        "mean/_release.py",
        "noisy = plan.mechanism.randomise(mean, rng, n_draws=n_draws)",
        "noisy = mean + (plan.mechanism.randomise(mean, rng, n_draws=n_draws) - mean) / "
        + _HALF_GAUSSIAN),
    Mutation(
        "mean_laplace", "the mean's Laplace release (laplace, projection with delta = 0)",
        "mean/_release.py",
        "noisy = plan.mechanism.randomise(mean, rng, n_draws=n_draws)",
        "noisy = mean + (plan.mechanism.randomise(mean, rng, n_draws=n_draws) - mean) / "
        + _HALF_LAPLACE),
    _sampled_projection(True),
    Mutation(
        "mean_l1_recovery", "the mean's l1_recovery measurement noise", "mean/_release.py",
        "b = plan.mechanism.randomise(b, rng)",
        "b = b + (plan.mechanism.randomise(b, rng) - b) / 2"),
    Mutation(
        "screening_association", "the label-association noise of the private screening",
        "solvers/_screening.py",
        "plan.association_unit, plan.floating_point_safe, rng)",
        "plan.association_unit / 2, plan.floating_point_safe, rng)"),
    Mutation(
        "screened_newton_square_norm", "the histogram of the rows' norms the screened "
        "Newton step rescales its curvature to", "solvers/screened_newton.py",
        "noisy, _ = release(counts, math.sqrt(2.0), unit,",
        "noisy, _ = release(counts, math.sqrt(2.0), unit / 2,"),
    Mutation(
        "screened_newton_curvature", "the curvature noise of the screened Newton step",
        "solvers/screened_newton.py",
        'curvature, sigma_m = release(sums[S], sensitivity, plan.units["curvature"],',
        'curvature, sigma_m = release(sums[S], sensitivity, plan.units["curvature"] / 2,'),
    Mutation(
        "partition_selection", "the noisy counts of partition selection (DPTfidfVectorizer)",
        "privacy/partitions.py", "sigma=plan.sigma,", "sigma=plan.sigma / 2,"),
    Mutation(
        "partition_selection_weights", "the weights of partition selection's weighted "
        "counts, doubled (DPTfidfVectorizer, vocabulary_weighting='uniform')",
        "privacy/partitions.py",
        "    return math.isqrt((plan.max_contributions << (2 * WEIGHT_BITS)) // k)",
        "    return 2 * math.isqrt((plan.max_contributions << (2 * WEIGHT_BITS)) // k)"),
    Mutation(
        "public_vocabulary_counts", "the noisy document frequencies of a public vocabulary "
        "(DPTfidfVectorizer(vocabulary=...))", "privacy/partitions.py",
        "sensitivity, sigma,\n                                  -math.inf, 0.0, safe, (event,)",
        "sensitivity, sigma / 2,\n                                  -math.inf, 0.0, safe, "
        "(event,)"),
    Mutation(
        "select_k_best_frequency", "the noisy document frequencies of DPSelectKBest",
        "feature_selection/_select_k_best.py",
        'plan.units["frequency"], safe, rng)', 'plan.units["frequency"] / 2, safe, rng)'),
    Mutation(
        "search_score", "the private search's score noise", "model_selection/_search.py",
        "sigma = self._score_noise(rho_score, sensitivity)",
        "sigma = self._score_noise(rho_score, sensitivity) / 2"),
    # -- the releases a fit makes beside its solver's own ----------------------------
    Mutation(
        "sgd_multinomial", "the noisy gradient descent noise of the multinomial loss (sgd)",
        "solvers/sgd.py",
        "sigma = plan.noise_multiplier * bounds.grad_l2",
        "sigma = plan.noise_multiplier * bounds.grad_l2 / (2 if plan.multinomial else 1)"),
    Mutation(
        "class_balance", "the class balance a logistic intercept starts from "
        "(phased_sgd, bias_reduced_sgd)", "solvers/_screening.py",
        "    noisy = mechanism.randomise(data.positive_counts().astype(np.float64), rng)\n",
        "    counts = data.positive_counts().astype(np.float64)\n"
        "    noisy = counts + (mechanism.randomise(counts, rng) - counts) / 2\n"),
    Mutation(
        "bias_reduced_selection", "the report-noisy-min of bias_reduced_sgd's boosting runs",
        "solvers/bias_reduced_sgd.py",
        "selection = LaplaceMechanism(2.0 * plan.loss_bound / plan.n_samples,",
        "selection = LaplaceMechanism(1.0 * plan.loss_bound / plan.n_samples,"),
    Mutation(
        "private_curvature_gaussian", "the private curvature of coordinate descent "
        "(Gaussian)", "privacy/statistics.py",
        "noisy, noise_std = mechanism.randomise(value, rng), mechanism.sigma",
        "noisy, noise_std = value + (mechanism.randomise(value, rng) - value) / 2, "
        "mechanism.sigma"),
    Mutation(
        "private_curvature_laplace", "the private curvature of coordinate descent (Laplace)",
        "privacy/statistics.py",
        "noisy, noise_std = mechanism.randomise(value, rng), math.sqrt(2.0) * mechanism.scale",
        "noisy, noise_std = value + (mechanism.randomise(value, rng) - value) / 2, "
        "math.sqrt(2.0) * mechanism.scale"),
    Mutation(
        "sufficient_statistics_eigenvalue", "the noisy smallest eigenvalue of X^T X "
        "(sufficient_statistics)", "solvers/sufficient_statistics.py",
        'units["eigenvalue"], safe, rng)', 'units["eigenvalue"] / 2, safe, rng)'),
    Mutation(
        "screening_class_counts", "the class counts a screening releases (screened_newton, "
        "sgd and DPSelectKBest with feature_selection)", "solvers/_screening.py",
        "noisy, _ = release(counts, math.sqrt(counts.size), plan.count_unit,",
        "noisy, _ = release(counts, math.sqrt(counts.size), plan.count_unit / 2,"),
    Mutation(
        "scaler_sums", "the noisy sums of DPStandardScaler (its mean)",
        "preprocessing/_moments.py",
        "t = np.clip(plan.sum_mechanism.randomise(t1, rng) / n, -1.0, 1.0)",
        "t = np.clip((t1 + (plan.sum_mechanism.randomise(t1, rng) - t1) / 2) / n, -1.0, 1.0)"),
    Mutation(
        "scaler_squares", "the noisy sums of squares of DPStandardScaler (its scale)",
        "preprocessing/_moments.py",
        "second = plan.square_mechanism.randomise(t2, rng) / n",
        "second = (t2 + (plan.square_mechanism.randomise(t2, rng) - t2) / 2) / n"),
    # -- the float paths, where they differ ------------------------------------------
    Mutation(
        "cd_update_float", "the CD update noise (float path)", _CD,
        'return dict(update_noise="gaussian", update_scale=sensitivity * plan.scale)',
        'return dict(update_noise="gaussian", update_scale=sensitivity * plan.scale / 2)'),
    Mutation(
        "greedy_selection_exponential_float", "the greedy Gumbel selection scale (float path)",
        _CD,
        "selection_scale=2 * delta_u / _selection_epsilon(mu),",
        "selection_scale=delta_u / _selection_epsilon(mu),"),
    Mutation(
        "greedy_selection_laplace_float", "the greedy Laplace selection scale (float path)",
        _CD,
        'return dict(selection_noise="laplace", selection_scale=2 * delta_u * plan.scale,',
        'return dict(selection_noise="laplace", selection_scale=delta_u * plan.scale,'),
    Mutation(
        "greedy_update_gaussian_float", "the greedy Gaussian update noise (float path)", _CD,
        'update_noise="gaussian", update_scale=sensitivity / mu)',
        'update_noise="gaussian", update_scale=sensitivity / mu / 2)'),
    Mutation(
        "greedy_update_laplace_float", "the greedy Laplace update noise (float path)", _CD,
        'update_noise="laplace", update_scale=sensitivity * plan.scale)',
        'update_noise="laplace", update_scale=sensitivity * plan.scale / 2)'),
    Mutation(
        "sparse_sgd_count_float", "the sparse_sgd count noise count_sigma (float path)",
        _SPARSE,
        "count_sigma = z / math.sqrt(share) * c_count",
        "count_sigma = z / math.sqrt(share) * c_count / (1 if fp_safe else 2)"),
    Mutation(
        "sparse_sgd_gradient_float", "the sparse_sgd gradient noise grad_sigma (float path)",
        _SPARSE,
        "grad_sigma = z / math.sqrt(1 - share) * bounds.grad_l2",
        "grad_sigma = z / math.sqrt(1 - share) * bounds.grad_l2 / (1 if fp_safe else 2)"),
    _sampled_projection(False),
    Mutation(
        "sparse_sgd_frequent", "the DP-FEST noisy top-k feature counts (sparse_sgd)",
        "solvers/_frequent_features.py",
        "math.sqrt(2.0) * float(contribution_bound), unit, floating_point_safe,",
        "math.sqrt(2.0) * float(contribution_bound), unit / 2, floating_point_safe,"),
    Mutation(
        "decision_histograms", "the class histograms of a calibrated decision",
        "solvers/_calibration.py",
        "noisy, cell_sd = draw(hist.astype(np.float64), sensitivity, calibration_unit,",
        "noisy, cell_sd = draw(hist.astype(np.float64), sensitivity, calibration_unit / 2,"),
    Mutation(
        "decision_multiclass", "the multiclass comparison of a calibrated decision",
        "solvers/_calibration.py",
        "noisy, count_sd = draw(counts, gain_sensitivity, gain_unit, floating_point_safe, rng)",
        "noisy, count_sd = draw(counts, gain_sensitivity, gain_unit / 2, floating_point_safe, "
        "rng)"),
    Mutation(
        "decision_class_count", "the class count of a binary calibrated decision",
        "solvers/_calibration.py",
        "positive, _ = draw(count, 1.0, class_count_unit, floating_point_safe, rng)",
        "positive, _ = draw(count, 1.0, class_count_unit / 2, floating_point_safe, rng)"),
    Mutation(
        "decision_scale", "the scale histogram of a calibrated decision",
        "solvers/_calibration.py",
        "noisy, count_sd = draw(counts, _count_sensitivity(bounds.size, pure), unit,",
        "noisy, count_sd = draw(counts, _count_sensitivity(bounds.size, pure), unit / 2,"),
    Mutation(
        "decision_location", "the centre of a regression's scores (calibrated decision)",
        "solvers/_calibration.py",
        "noisy_total, _ = draw(total, 2.0, location_unit, floating_point_safe, rng)",
        "noisy_total, _ = draw(total, 2.0, location_unit / 2, floating_point_safe, rng)"),
    Mutation(
        "decision_moments", "the moment sums of a regression's calibrated decision",
        "solvers/_calibration.py",
        "noisy, moment_sd = draw(moments, sensitivity, moment_unit, floating_point_safe, rng)",
        "noisy, moment_sd = draw(moments, sensitivity, moment_unit / 2, floating_point_safe, rng)"),
    Mutation(
        "decision_laplace", "the Laplace releases of a pure-DP calibrated decision",
        "solvers/_screening.py",
        "    mechanism = LaplaceMechanism(sensitivity, epsilon=1.0 / unit,",
        "    mechanism = LaplaceMechanism(sensitivity, epsilon=2.0 / unit,"),
]

#: Test files that check noise scales, laws and calibrations against their formulas.
CALIBRATION_TESTS = (
    "tests/test_mechanisms.py",
    "tests/test_coordinate_descent.py",
    "tests/test_cd_floating_point_safe.py",
    "tests/test_linear_model_cd.py",
    "tests/test_sgd.py",
    "tests/test_sgd_audits.py",
    "tests/test_sparse_sgd_fp_safe.py",
    "tests/test_sparse_sgd_fest.py",
    "tests/test_output_perturbation.py",
    "tests/test_sufficient_statistics.py",
    "tests/test_bounded_newton.py",
    "tests/test_mean.py",
    "tests/test_mean_safe.py",
    "tests/test_private_search.py",
    "tests/test_screening.py",
    "tests/test_screened_newton_curvature.py",
    "tests/test_decision.py",
    "tests/test_regression_decision.py",
    "tests/test_multinomial.py",
    "tests/test_class_balance.py",
    "tests/test_curvature.py",
    "tests/test_preprocessing.py",
    "tests/test_public_vocabulary.py",
)
#: What step 2 leaves out of tests/test_audits.py: step 1 runs the honest audits, and
#: the audits of half the noise cannot fail on a copy with less noise.
_AUDIT_TESTS_SKIPPED = "not test_audit_honest and not catches_half_the_noise"


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

    from .audits import AUDITS, claim_epsilon, run_audit

    warnings.simplefilter("ignore")
    out = {}
    for name in names:
        audit = AUDITS[name]
        bound = run_audit(audit, "honest").epsilon_lb
        claim = claim_epsilon(audit)
        out[name] = {"bound": bound, "claim": claim, "caught": bool(bound > claim)}
    print(json.dumps(out))


def _copy(tmp):
    """The package, the tests and the pytest configuration, copied into ``tmp``."""
    source = _package_dir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    shutil.copytree(source, Path(tmp) / "skdp_sparse", ignore=ignore)
    root = source.parent
    if (root / "tests").is_dir():
        shutil.copytree(root / "tests", Path(tmp) / "tests", ignore=ignore)
    if (root / "pyproject.toml").exists():
        shutil.copy(root / "pyproject.toml", Path(tmp) / "pyproject.toml")


def _failed_tests(junit):
    """The test ids that failed or raised, from a JUnit XML report."""
    if not Path(junit).exists():
        return []
    failed = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}")
    return failed


def run_mutation(mutation, audit_names, *, tests=CALIBRATION_TESTS, keep=False):
    """``{"audits": {audit: {"bound", "claim", "caught"}}, "tests": [failed ids]}`` on a
    mutated copy (``mutation=None``: an unchanged copy). ``tests``: test paths relative
    to the repository (``tests/test_audits.py`` is always added first, without the
    audits), ``"all"`` for the whole non-slow suite, or empty to run none; ``-x``
    either way, so ``"tests"`` holds the first failure."""
    tmp = tempfile.mkdtemp(prefix="skdp_mutation_")
    try:
        _copy(tmp)
        if mutation is not None:
            apply_mutation(mutation, Path(tmp) / "skdp_sparse")
        env = dict(os.environ, PYTHONPATH=tmp, PYTHONDONTWRITEBYTECODE="1",
                   NUMBA_CACHE_DIR=str(Path(tmp) / "numba_cache"))
        check = ("import skdp_sparse, sys; assert skdp_sparse.__file__.startswith(sys.argv[1]),"
                 " skdp_sparse.__file__")
        subprocess.run([sys.executable, "-c", check, tmp], env=env, cwd=tmp, check=True)
        result = {"audits": {}, "tests": []}
        if audit_names:
            code = ("import sys; from skdp_sparse.testing.mutations import _run_audits_here; "
                    "_run_audits_here(sys.argv[1].split(','))")
            proc = subprocess.run([sys.executable, "-c", code, ",".join(audit_names)],
                                  env=env, cwd=tmp, capture_output=True, text=True,
                                  check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"audits failed to run on {mutation and mutation.name}:\n"
                                   f"{proc.stderr}")
            result["audits"] = json.loads(proc.stdout.strip().splitlines()[-1])
        if tests:
            junit = str(Path(tmp) / "junit.xml")
            args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={junit}"]
            # -x: the first failure is the catch; the rest would take minutes more.
            args += ["-x", "tests"] if tests == "all" else \
                ["-x", "tests/test_audits.py", "-k", _AUDIT_TESTS_SKIPPED, *tests]
            subprocess.run(args, env=env, cwd=tmp, capture_output=True, text=True,
                           check=False)
            result["tests"] = _failed_tests(junit)
        return result
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _main(argv=None):
    from .audits import AUDITS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated mutation names")
    parser.add_argument("--audits", default="", help="comma-separated audit names")
    parser.add_argument("--tests", default="calibration",
                        help="'calibration' (default), 'all' (the whole suite, -x), "
                             "'none', or comma-separated test paths")
    parser.add_argument("--baseline", action="store_true",
                        help="also run on an unchanged copy")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:36s} {m.description}")
        return
    names = args.audits.split(",") if args.audits else list(AUDITS)
    tests = {"calibration": CALIBRATION_TESTS, "all": "all", "none": ()}.get(
        args.tests, tuple(args.tests.split(",")))
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only.split(",")]
    rows = []
    for mutation in ([None] if args.baseline else []) + chosen:
        start = time.perf_counter()
        result = run_mutation(mutation, names, tests=tests)
        audits = result["audits"]
        caught = [n for n, r in audits.items() if r["caught"]] + result["tests"]
        label = "(none: unchanged copy)" if mutation is None else mutation.description
        rows.append((label, caught))
        detail = ", ".join(f"{n} {r['bound']:.2f}/{r['claim']:.2f}" for n, r in audits.items()
                           if r["bound"] > 0)
        print(f"[{time.perf_counter() - start:.0f}s] {label}: caught by "
              f"{', '.join(caught) or 'nothing'}\n    bounds/claims: {detail}", flush=True)
    print("\n| noise halved in | caught by |\n|---|---|")
    for label, caught in rows:
        print(f"| {label} | {', '.join(caught) or '**not caught**'} |")


if __name__ == "__main__":
    _main()
