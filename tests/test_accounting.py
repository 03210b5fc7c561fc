import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from skdp_sparse.privacy.accounting import (
    PrivacyAccountant,
    PrivacyEvent,
    advanced_composition_epsilon,
    calibrate_scale,
    compose,
    gaussian_delta,
    gaussian_epsilon,
    zcdp_epsilon,
)

RDP_ORDERS = [1 + x / 20 for x in range(1, 200)] + list(range(11, 2000))


def _dp_accounting_rdp(events, delta):
    acc = rdp_privacy_accountant.RdpAccountant(orders=RDP_ORDERS)
    for ev in events:
        acc.compose(ev)
    return acc.get_epsilon(delta)


def _dp_accounting_pld(events, delta):
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    for ev in events:
        acc.compose(ev)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize(
    "mu", [0.05, 0.3, 1.0, 3.0, pytest.param(10.0, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_analytic_gaussian_matches_pld(mu, delta):
    ours = gaussian_epsilon(mu, delta)
    ref = _dp_accounting_pld([dp_event.GaussianDpEvent(1 / mu)], delta)
    assert ours == pytest.approx(ref, rel=2e-3, abs=2e-4)
    # The value sits on the curve: delta(eps) = delta.
    if ours > 0:
        assert gaussian_delta(mu, ours) == pytest.approx(delta, rel=1e-6)


def test_analytic_gaussian_beats_classical_formula():
    # sigma = Delta sqrt(2 ln(1.25/delta)) / eps is valid for eps <= 1 only and loose.
    for eps in [0.1, 0.5, 1.0]:
        delta = 1e-5
        mu_classic = eps / math.sqrt(2 * math.log(1.25 / delta))
        assert gaussian_epsilon(mu_classic, delta) < eps


@pytest.mark.parametrize("rho", [1e-4, 0.01, 0.5, 5.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-9])
def test_zcdp_conversion_matches_rdp_accountant(rho, delta):
    # A Gaussian with noise multiplier z is 1/(2 z^2)-zCDP; the RDP accountant's
    # conversion at optimal order equals ours (both Canonne-Kamath-Steinke).
    z = 1 / math.sqrt(2 * rho)
    ref = _dp_accounting_rdp([dp_event.GaussianDpEvent(z)], delta)
    ours = zcdp_epsilon(rho, delta)
    assert ours <= ref * (1 + 1e-6) + 1e-9
    assert ours == pytest.approx(ref, rel=5e-3)
    assert ours <= rho + 2 * math.sqrt(rho * math.log(1 / delta))


def test_gaussian_composition_is_exact_gdp():
    events = [PrivacyEvent.gaussian(0.1, count=50), PrivacyEvent.gaussian(0.2, count=10)]
    eps, delta = compose(events, 1e-6)
    ref_events = [dp_event.GaussianDpEvent(10.0)] * 50 + [dp_event.GaussianDpEvent(5.0)] * 10
    ref = _dp_accounting_pld(ref_events, 1e-6)
    assert delta == 1e-6
    assert eps == pytest.approx(ref, rel=5e-3)


def test_mixed_exponential_and_gaussian_uses_zcdp():
    e_sel, mu = 0.05, 0.05
    events = [PrivacyEvent.exponential(e_sel, 300), PrivacyEvent.gaussian(mu, 300)]
    eps, _ = compose(events, 1e-6)
    rho = 300 * (e_sel**2 / 8 + mu**2 / 2)
    assert eps == pytest.approx(zcdp_epsilon(rho, 1e-6), rel=1e-12)
    # Independent check of the zCDP sum: RDP of the Gaussian part plus the
    # exponential mechanism's rho as a Gaussian of equal rho.
    z = 1 / math.sqrt(2 * rho)
    assert eps == pytest.approx(_dp_accounting_rdp([dp_event.GaussianDpEvent(z)], 1e-6),
                                rel=5e-3)


def test_pure_composition_takes_best_theorem():
    # Few large epsilons: basic composition wins; many small ones: advanced/zCDP win.
    few = [PrivacyEvent.pure(0.5, count=2)]
    assert compose(few, 1e-6) == (1.0, 0.0)
    many = [PrivacyEvent.pure(0.01, count=10_000)]
    eps, delta = compose(many, 1e-6)
    assert eps < 100 * 0.5
    assert eps <= advanced_composition_epsilon([0.01], [10_000], 1e-6)
    assert eps <= zcdp_epsilon(10_000 * 0.01**2 / 2, 1e-6) + 1e-12
    assert delta == 1e-6
    # Pure DP requested: only basic composition qualifies.
    assert compose(many, 0.0) == pytest.approx((100.0, 0.0))


def test_advanced_composition_formula():
    e, k, d = 0.1, 100, 1e-5
    expected = math.sqrt(2 * k * math.log(1 / d)) * e + k * e * math.tanh(e / 2)
    assert advanced_composition_epsilon([e], [k], d) == pytest.approx(expected)
    assert expected < k * e * (math.exp(e) - 1) + math.sqrt(2 * k * math.log(1 / d)) * e


def test_approximate_events_add_up():
    acc = PrivacyAccountant()
    acc.record(PrivacyEvent.approximate(0.3, 1e-7, count=3))
    assert acc.spent(1e-6) == pytest.approx((0.9, 3e-7))
    with pytest.raises(TypeError):
        acc.record((0.1, 0.0))
    # Delta budget smaller than the events' own delta: no theorem applies.
    assert math.isinf(acc.spent(1e-8)[0])


def test_gaussian_needs_delta():
    assert math.isinf(compose([PrivacyEvent.gaussian(0.1)], 0.0)[0])


@pytest.mark.parametrize("target", [0.1, 1.0, 8.0])
def test_calibrate_scale_hits_target(target):
    def events(scale):
        return [PrivacyEvent.exponential(1 / scale, 200), PrivacyEvent.gaussian(1 / scale, 200)]

    scale = calibrate_scale(events, target, 1e-6)
    spent = compose(events(scale), 1e-6)[0]
    assert spent <= target
    assert spent == pytest.approx(target, rel=1e-6)
    # A slightly smaller scale overspends: the calibration is tight.
    assert compose(events(scale * (1 - 1e-4)), 1e-6)[0] > target


def test_calibrate_scale_rejects_impossible_budget():
    with pytest.raises(ValueError):
        calibrate_scale(lambda s: [PrivacyEvent.gaussian(1 / s)], 1.0, 0.0)
    with pytest.raises(ValueError):
        calibrate_scale(lambda s: [PrivacyEvent.pure(1 / s)], 0.0, 0.0)


def test_gaussian_delta_monotone_and_bounded():
    eps = np.linspace(0, 10, 50)
    d = [gaussian_delta(1.0, e) for e in eps]
    assert all(0 <= x <= 1 for x in d)
    assert np.all(np.diff(d) <= 1e-15)


def test_rdp_curve_events_compose_with_zcdp_events():
    from skdp_sparse.privacy.accounting import RDP_ORDERS, rdp_epsilon

    mu = 0.1
    as_curve = PrivacyEvent.from_rdp(RDP_ORDERS * mu**2 / 2, count=100)
    eps_curve, _ = compose([as_curve], 1e-6)
    assert eps_curve == pytest.approx(zcdp_epsilon(100 * mu**2 / 2, 1e-6), rel=1e-3)
    mixed, _ = compose([as_curve, PrivacyEvent.exponential(0.1, count=100)], 1e-6)
    rho = 100 * (mu**2 / 2 + 0.1**2 / 8)
    assert mixed == pytest.approx(zcdp_epsilon(rho, 1e-6), rel=1e-3)
    assert 0.0 <= rdp_epsilon(RDP_ORDERS * 0.0, 1e-6) < 0.01  # the grid ends at 2048
    with pytest.raises(ValueError):
        PrivacyEvent.from_rdp([0.1, 0.2])


@pytest.mark.parametrize("rho", [1e-9, 1e-6, 1e-3, 1.0, 50.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-2])
def test_zcdp_epsilon_matches_grid_search(rho, delta):
    """The CKS conversion's optimiser finds the grid minimum for every rho (small rho
    once fell outside the initial bracket)."""
    from skdp_sparse.privacy.accounting import zcdp_epsilon

    alphas = 1 + np.exp(np.linspace(-10, 40, 200_001))
    L = -np.log(delta)
    grid = np.min(alphas * rho + (L + (alphas - 1) * np.log1p(-1 / alphas) - np.log(alphas))
                  / (alphas - 1))
    best = min(grid, rho + 2 * np.sqrt(rho * L))
    assert zcdp_epsilon(rho, delta) == pytest.approx(max(best, 0.0), rel=1e-5, abs=1e-12)


def test_an_event_known_only_by_its_loss_distribution_composes_with_others():
    from skdp_sparse.privacy.pld import GaussianPLD

    # It used to give NaN: the zCDP candidate summed the PLD event's missing epsilon.
    pld_only = PrivacyEvent.from_pld(GaussianPLD("none", 1.0, 10.0))
    gaussian = PrivacyEvent.gaussian(0.2)  # the same mechanism: 2 / noise multiplier
    eps, _ = compose([pld_only, gaussian], 1e-6)
    assert math.isfinite(eps)
    assert eps == pytest.approx(compose([gaussian, gaussian], 1e-6)[0], rel=1e-3)
