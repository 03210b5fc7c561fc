"""Statistical privacy audits of every estimator, through its public ``fit``.

Each audit (:data:`skdp_sparse.testing.audits.AUDITS`) fits an estimator many times
on a worst-case pair of replace-one neighbouring datasets and bounds epsilon from
below with Clopper-Pearson intervals. The honest fit must stay at or below its
claim (the epsilon its recorded mechanisms allow on the pair,
:func:`~skdp_sparse.testing.claim_epsilon`); the same estimator fitted with
exactly half the noise (at the epsilon where its own calibration halves the
noise) must be caught above the claim, by the audit's margin. The fast audits
run in CI; ``-m slow`` repeats them with more runs on several seed sets.

Where no audit through fit can see half the noise (the module docstring of
:mod:`skdp_sparse.testing.audits` says why), the noise a fit draws is checked
against its formula, re-derived here from the public budget.
"""

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import brentq
from sklearn.base import clone

import skdp_sparse.mean._release as mean_release
import skdp_sparse.solvers.bias_reduced_sgd as bias_reduced_module
from skdp_sparse.optim.losses import SquaredLoss
from skdp_sparse.privacy.accounting import gaussian_epsilon, zcdp_epsilon
from skdp_sparse.privacy.discrete import discrete_gaussian_event, laplace_scale_for
from skdp_sparse.solvers import SOLVERS
from skdp_sparse.solvers.decision import keeps_own
from skdp_sparse.testing import (
    AUDITS,
    claim_delta,
    claim_epsilon,
    halved_epsilon,
    halved_events,
    noise_scale,
    run_audit,
)
from skdp_sparse.testing._claims import gaussian_ratio, poisson_mixture_epsilon
from skdp_sparse.testing._halving import subsampling_of

NAMES = list(AUDITS)
HALVING = [name for name in NAMES if AUDITS[name].detects_halving]
SLOW_SEED_SETS = (1, 2, 3)


def _fit(audit, epsilon, side=0):
    X, y = audit.datasets[side]
    est = audit.make(epsilon, audit.delta, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X) if y is None else est.fit(X, y)


def _claim(audit):
    return claim_epsilon(audit)


# --------------------------------------------------------------------------
# The fits audited are the fits claimed, and the halved fits have half the noise.
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_audited_fit_spends_its_claim(name):
    audit = AUDITS[name]
    fitted = _fit(audit, audit.epsilon)
    assert fitted.epsilon_spent_ <= audit.epsilon * (1 + 1e-9)
    if name != "bias_reduced_sgd":  # its privacy filter stops below the budget
        # The claim is spent (to the calibration's tolerance), so the audit checks it.
        assert fitted.epsilon_spent_ >= audit.epsilon * 0.98
    assert fitted.delta_spent_ <= audit.delta * (1 + 1e-12)
    # The claim is what the fit's own mechanisms allow on the pair: never more than
    # the fit's spend, and the same on both sides of the pair.
    assert 0 < _claim(audit) <= fitted.epsilon_spent_ * (1 + 1e-9)
    if audit.claim is not None:
        other = _fit(audit, audit.epsilon, side=1)
        assert audit.claim(other, claim_delta(audit)) == pytest.approx(_claim(audit),
                                                                      rel=1e-9)


def _assert_events_halved(honest, halved, n_samples, batch_sizes=None):
    assert len(honest) == len(halved)
    expected = halved_events(honest, n_samples, batch_sizes)
    for e, h, x in zip(honest, halved, expected, strict=True):
        assert (h.name, h.count) == (e.name, e.count)
        if e.rdp is not None:
            q_e, z_e, s_e = subsampling_of(e, n_samples, batch_sizes=batch_sizes)
            q_h, z_h, s_h = subsampling_of(h, n_samples, batch_sizes=batch_sizes)
            assert (q_h, s_h) == (q_e, s_e)
            assert z_h == pytest.approx(z_e / 2, rel=1e-6)
            continue
        assert h.rho == pytest.approx(x.rho, rel=1e-6)
        if e.mu is not None:
            assert h.mu == pytest.approx(2 * e.mu, rel=1e-6)
        if math.isfinite(e.epsilon):
            assert h.epsilon == pytest.approx(2 * e.epsilon, rel=1e-6)


@pytest.mark.parametrize(
    "name", [n for n in HALVING if AUDITS[n].halved is None and n != "sgd_poisson"])
def test_halved_noise_epsilon_halves_the_noise(name):
    """The fit at halved_noise_epsilon adds half the noise on every mechanism call."""
    audit = AUDITS[name]
    honest = _fit(audit, audit.epsilon)
    halved = _fit(audit, halved_epsilon(audit))
    assert noise_scale(halved) == pytest.approx(noise_scale(honest) / 2, rel=2e-3)
    if hasattr(honest, "best_estimator_"):
        # The private search: its fits' noise moves with the score noise.
        assert noise_scale(halved.best_estimator_) == pytest.approx(
            noise_scale(honest.best_estimator_) / 2, rel=2e-3)
        return
    if hasattr(honest, "n_iter_"):
        assert halved.n_iter_ == honest.n_iter_
    n_samples = audit.datasets[0][0].shape[0]
    batch = getattr(honest, "batch_size", None)
    _assert_events_halved(honest.privacy_events_, halved.privacy_events_, n_samples,
                          None if batch is None else [min(batch, n_samples)])


def test_halved_noise_epsilon_of_a_subsampled_fit():
    # The RDP curve of a Poisson-subsampled fit is recomputed with half the multiplier.
    audit = AUDITS["sgd_poisson"]
    honest = _fit(audit, audit.epsilon)
    (event,) = honest.privacy_events_
    q, z, sampling = subsampling_of(event, 100, batch_sizes=[99])
    assert (q, sampling) == (99 / 100, "poisson")
    halved = _fit(audit, halved_epsilon(audit))
    z_halved = subsampling_of(halved.privacy_events_[0], 100, batch_sizes=[99])[1]
    assert z_halved == pytest.approx(z / 2, rel=1e-6)


def test_bias_reduced_halving_keeps_the_run():
    audit = AUDITS["bias_reduced_sgd"]
    honest = _fit(audit, audit.epsilon)
    halved = _fit(audit, halved_epsilon(audit))
    assert honest.n_iter_ == halved.n_iter_ == 1


# --------------------------------------------------------------------------
# Fast audits
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_audit_honest(name):
    audit = AUDITS[name]
    result = run_audit(audit, "honest")
    assert result.epsilon_lb <= _claim(audit), (
        f"privacy bug: {name} fitted at epsilon={audit.epsilon}, delta={audit.delta} "
        f"shows epsilon >= {result.epsilon_lb:.3f} on its pair, which its mechanisms "
        f"bound by {_claim(audit):.3f} ({result})")


@pytest.mark.parametrize("name", HALVING)
def test_audit_catches_half_the_noise(name):
    audit = AUDITS[name]
    result = run_audit(audit, "halved")
    assert result.epsilon_lb >= audit.margin * _claim(audit), (
        f"{name}: half the noise gives only {result.epsilon_lb:.3f} against the claim "
        f"{_claim(audit):.3f} ({result})")


@pytest.mark.parametrize("name", [n for n in NAMES if not AUDITS[n].detects_halving])
def test_audit_sees_the_pair_without_noise(name):
    """Positive control of the audits that cannot see half the noise: without noise
    (epsilon = inf) the statistic tells the two datasets apart."""
    audit = AUDITS[name]
    result = run_audit(audit, "honest", n_runs=200, epsilon=np.inf)
    assert result.epsilon_lb > _claim(audit)


# --------------------------------------------------------------------------
# Slow audits: more runs, several seed sets
# --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("seed_set", SLOW_SEED_SETS)
@pytest.mark.parametrize("name", NAMES)
def test_audit_honest_slow(name, seed_set):
    audit = AUDITS[name]
    result = run_audit(audit, "honest", n_runs=audit.slow_runs, seed_set=seed_set)
    assert result.epsilon_lb <= _claim(audit), result


@pytest.mark.slow
@pytest.mark.parametrize("seed_set", SLOW_SEED_SETS)
@pytest.mark.parametrize("name", HALVING)
def test_audit_catches_half_the_noise_slow(name, seed_set):
    audit = AUDITS[name]
    result = run_audit(audit, "halved", n_runs=audit.slow_runs, seed_set=seed_set)
    assert result.epsilon_lb >= audit.slow_margin * _claim(audit), result


def test_registry_is_complete():
    # Every solver and mechanism has an audit through fit.
    assert set(NAMES) >= {
        "greedy_cd_exponential", "greedy_cd_exponential_update",
        "greedy_cd_exponential_private_curvature", "greedy_cd_laplace",
        "greedy_cd_laplace_update", "greedy_cd_laplace_private_curvature", "cd", "sgd",
        "sgd_noise_ridge", "sgd_poisson", "sparse_sgd_gradient", "sparse_sgd_selection",
        "bias_reduced_sgd", "phased_sgd", "output_perturbation_gaussian",
        "output_perturbation_laplace",
        "mean_projection_laplace", "mean_projection_gaussian",
        "mean_projection_gaussian_sampled", "mean_l1_recovery", "mean_gaussian",
        "mean_laplace", "private_search",
    }
    for audit in AUDITS.values():
        assert clone(audit.make(audit.epsilon, audit.delta, 0)) is not None


def test_noise_ridge_audit_runs_the_default_decisions_own_plan():
    # The audit reaches the plan that decision="auto" keeps at small n mu (the solver's
    # own fit with its noise ridge): same releases as decision="fitted", another step.
    audit = AUDITS["sgd_noise_ridge"]
    X, y = audit.datasets[0]
    assert keeps_own(SOLVERS["sgd"], SquaredLoss(), X.shape[0], audit.epsilon, audit.delta)
    ridge = _fit(audit, audit.epsilon)
    fitted = clone(ridge).set_params(decision="fitted").fit(X, y)
    assert [(e.name, e.count, e.rho) for e in ridge.privacy_events_] == \
        [(e.name, e.count, e.rho) for e in fitted.privacy_events_]
    assert not np.allclose(ridge.coef_, fitted.coef_)


# --------------------------------------------------------------------------
# The claims
# --------------------------------------------------------------------------
def test_claims_of_known_mechanisms():
    # A discrete Gaussian of sigma for sensitivity Delta: ratio (1 + 2^-16) Delta / sigma.
    event = discrete_gaussian_event(0.3, 0.25, count=4)
    assert gaussian_ratio([event]) == pytest.approx(2 * (1 + 2**-16) * 0.3 / 0.25, rel=1e-12)
    # Poisson rate 1 is the Gaussian of the full shift 2a; smaller rates leak less.
    assert poisson_mixture_epsilon(1.0, 0.6, 0.2) == pytest.approx(
        gaussian_epsilon(1.2, 0.2), rel=1e-4)
    assert poisson_mixture_epsilon(0.5, 0.6, 0.05) < poisson_mixture_epsilon(0.9, 0.6, 0.05)


def test_claims_are_below_the_fits_accounting():
    # Every claim through a noise ratio is at most what zCDP gives for the same ratio.
    for name in ("sgd", "mean_gaussian", "sparse_sgd_gradient", "sparse_sgd_selection"):
        audit = AUDITS[name]
        (event,) = _fit(audit, audit.epsilon).privacy_events_
        assert claim_epsilon(audit) <= zcdp_epsilon(event.rho * event.count, audit.delta)


# --------------------------------------------------------------------------
# Calibration of the noise no audit through fit resolves, against its formula
# --------------------------------------------------------------------------
def _cks_epsilon(rho, delta):
    """Canonne, Kamath & Steinke (2020), Prop. 12, minimised on a fine grid of orders."""
    a = 1 + np.geomspace(1e-4, 1e4, 400_001)
    return float(np.min(a * rho + (math.log(1 / delta) + (a - 1) * np.log1p(-1 / a)
                                   - np.log(a)) / (a - 1)))


def _safe_gaussian_sigma(sensitivity, epsilon, delta):
    """sigma of a floating-point-safe Gaussian release calibrated to (epsilon, delta): the
    largest rho-zCDP at (epsilon, delta) and the 2^-16 slack of the lattice's rounding,
    ``sigma = (1 + 2^-16) Delta / sqrt(2 rho)``."""
    rho = brentq(lambda r: _cks_epsilon(r, delta) - epsilon, 1e-9, 1e3, xtol=1e-15)
    return (1 + 2.0**-16) * sensitivity / math.sqrt(2 * rho)


def test_l1_recovery_measurement_noise_has_the_calibrated_scale(monkeypatch):
    # The measurements b = (1/n) sum_i clip(A z_i, 1.5 L) receive the Gaussian noise of
    # (epsilon, delta) for the l2 sensitivity 3 L / n: read b where the fit hands it to
    # the recovery, and subtract the exact measurements.
    audit = AUDITS["mean_l1_recovery"]
    (X, _), _ = audit.datasets
    n, L = X.shape[0], 1.0
    captured = []
    real = mean_release.basis_pursuit

    def spy(A, b, **kwargs):
        captured.append((A, np.array(b)))
        return real(A, b, **kwargs)

    monkeypatch.setattr(mean_release, "basis_pursuit", spy)
    for seed in range(300):
        fitted = audit.make(audit.epsilon, audit.delta, seed).fit(X)
    assert fitted.n_measurements_ > 0 and len(captured) == 300
    noise = []
    for A, b in captured:
        Y = A.toarray() @ X.T  # one column per row
        scale = np.minimum(1.0, 1.5 * L / np.linalg.norm(Y, axis=0))
        noise.append(b - (Y * scale).mean(axis=1))
    noise = np.concatenate(noise)
    sigma = _safe_gaussian_sigma(3 * L / n, audit.epsilon, audit.delta)
    assert abs(noise.mean()) < 5 * sigma / math.sqrt(noise.size)
    assert noise.std() == pytest.approx(sigma, rel=6 / math.sqrt(2 * noise.size))


def test_bias_reduced_noise_has_the_calibrated_scale(monkeypatch):
    # Each of the four projection mechanisms of a step adds the Gaussian noise of
    # (epsilon/32, delta/16) for its mean's l2 sensitivity 2 C2 / m: record every release.
    audit = AUDITS["bias_reduced_sgd"]
    releases = []

    class Recorded(bias_reduced_module.GaussianMechanism):
        def randomise(self, value, rng, n_draws=None):
            out = super().randomise(value, rng, n_draws)
            releases.append((self.sensitivity, np.asarray(out) - np.asarray(value)))
            return out

    monkeypatch.setattr(bias_reduced_module, "GaussianMechanism", Recorded)
    X, y = audit.datasets[0]
    for seed in range(150):
        fitted = audit.make(audit.epsilon, audit.delta, seed).fit(X, y)
    assert fitted.n_iter_ == 1 and len(releases) == 4 * 150
    # Rows at the l2 bound 1 with an intercept, derivative clip 1: C2 = sqrt(2); the means
    # are over m = 2 (B) or 1 (O, E, I) rows.
    c2 = math.sqrt(2.0)
    assert sorted({round(s / c2, 9) for s, _ in releases}) == [1.0, 2.0]
    unit = np.concatenate([noise / sensitivity for sensitivity, noise in releases])
    sigma_unit = _safe_gaussian_sigma(1.0, audit.epsilon / 32, audit.delta / 16)
    assert unit.std() == pytest.approx(sigma_unit, rel=6 / math.sqrt(2 * unit.size))


def test_bias_reduced_boosting_selection_has_the_calibrated_scale(monkeypatch):
    # The report-noisy-min over the boosting runs' clipped losses (sensitivity
    # loss_bound / n each, in any direction) adds Laplace noise of scale
    # 2 loss_bound / (n run_epsilon), run_epsilon = epsilon / (runs + 1) without the
    # class balance. No pair moves the candidates' scores by a known amount, so the
    # mechanism is checked against that formula, and its draws against its law.
    from skdp_sparse.optim.losses import LogisticLoss
    from skdp_sparse.testing.solver_api import bias_reduced_sgd

    mechanisms = []

    class Recorded(bias_reduced_module.LaplaceMechanism):
        def randomise(self, value, rng, n_draws=None):
            mechanisms.append(self)
            return super().randomise(value, rng, n_draws)

    monkeypatch.setattr(bias_reduced_module, "LaplaceMechanism", Recorded)
    n, runs, epsilon, loss_bound = 8, 3, 2.0, 1.0
    X = np.tile([0.6, 0.8], (n, 1))
    y = np.where(np.arange(n) % 2, 1.0, -1.0)
    events = bias_reduced_sgd(X, y, LogisticLoss(), epsilon=epsilon, delta=1e-3, rng=0,
                              boosting_runs=runs, class_balance=False)[3]
    assert len(mechanisms) == 1
    assert [e.epsilon for e in events if e.name.startswith("report-noisy-min")] == \
        [pytest.approx(epsilon / (runs + 1))]
    mechanism, run_epsilon = mechanisms[0], epsilon / (runs + 1)
    assert mechanism.sensitivity == pytest.approx(2 * loss_bound / n, rel=1e-12)
    assert mechanism.epsilon == pytest.approx(run_epsilon, rel=1e-12)
    draws = mechanism.randomise(np.zeros(20000), np.random.default_rng(0))
    scale = laplace_scale_for(2 * loss_bound / n, run_epsilon)
    assert draws.std() == pytest.approx(math.sqrt(2) * scale, rel=0.05)
