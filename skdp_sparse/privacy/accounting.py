"""Privacy accounting: composition of a fit's mechanism calls and noise calibration.

Every mechanism call of a fit is recorded as a :class:`PrivacyEvent`. The
:class:`PrivacyAccountant` composes them and reports the tightest
``(epsilon, delta)`` guarantee among the composition theorems that apply:

* basic composition (Dwork & Roth 2014, Thm 3.16): epsilons and deltas add up;
* advanced composition of pure-DP events (Dwork, Rothblum & Vadhan 2010,
  heterogeneous form, Kairouz et al. 2015);
* zero-concentrated DP (Bun & Steinke 2016): rhos add up and are converted to
  ``(epsilon, delta)`` with the conversion of Canonne, Kamath & Steinke 2020
  (Prop. 12), which is the one of Balle et al. 2020 for Renyi DP;
* Renyi DP (Mironov 2017) for events that carry an RDP curve (such as
  subsampled Gaussian mechanisms): curves add up order by order on the grid
  :data:`RDP_ORDERS` and convert with the same Prop. 12;
* exact composition of Gaussian mechanisms (Dong, Roth & Su 2019, GDP): the
  composition of Gaussian mechanisms with ratios ``mu_i = Delta_i / sigma_i`` is
  exactly a Gaussian mechanism with ``mu = sqrt(sum mu_i^2)``, converted with the
  analytic Gaussian mechanism (Balle & Wang 2018, Thm 8);
* privacy loss distributions (:mod:`skdp_sparse.privacy.pld`) for events that carry
  one (Gaussian mechanisms on sums of per-example terms, subsampled or not), composed
  with the Gaussian and (epsilon, delta) events: the tightest of all, within a
  discretisation error of the exact epsilon (``doc/proofs/pld.rst``).

Calibration inverts the same code path: :func:`calibrate_scale` finds the
smallest noise scale whose composed spend meets a target, so the noise a fit
adds and the spend it reports can never disagree.

All guarantees are for replace-one neighbouring datasets.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq, minimize_scalar
from scipy.special import log_ndtr

from .pld import GaussianPLD, pld_epsilon

__all__ = [
    "RDP_ORDERS",
    "rdp_epsilon",
    "PrivacyEvent",
    "PrivacyAccountant",
    "compose",
    "gaussian_delta",
    "gaussian_epsilon",
    "zcdp_epsilon",
    "zcdp_rho",
    "advanced_composition_epsilon",
    "calibrate_scale",
    "gaussian_mu",
]


# --------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------
def gaussian_delta(mu, epsilon):
    """Smallest delta of a Gaussian mechanism with ``Delta / sigma = mu`` at ``epsilon``.

    Balle & Wang (2018), Theorem 8: the mechanism is (epsilon, delta)-DP iff
    ``delta >= Phi(mu/2 - epsilon/mu) - exp(epsilon) Phi(-mu/2 - epsilon/mu)``.
    """
    if mu <= 0:
        return 0.0
    if not np.isfinite(mu):
        return 1.0
    a = log_ndtr(mu / 2 - epsilon / mu)
    b = epsilon + log_ndtr(-mu / 2 - epsilon / mu)
    # exp(a) - exp(b) computed without cancellation when both are tiny.
    if b >= a:
        return 0.0
    return float(np.exp(a) * -np.expm1(b - a))


def gaussian_epsilon(mu, delta):
    """Smallest epsilon for which a Gaussian mechanism with ratio ``mu`` is (eps, delta)-DP."""
    return _gaussian_epsilon(float(mu), float(delta))


# A pure function of two public floats, asked again by every fit of a configuration
# (each root search costs a few hundred evaluations of gaussian_delta).
@functools.lru_cache(maxsize=4096)
def _gaussian_epsilon(mu, delta):
    if mu <= 0:
        return 0.0
    if not np.isfinite(mu) or delta <= 0:
        return math.inf
    if gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gaussian_delta(mu, hi) > delta:
        hi *= 2
        if hi > 1e8:
            return math.inf
    eps = brentq(lambda e: gaussian_delta(mu, e) - delta, 0.0, hi, xtol=1e-14, rtol=1e-13)
    # Return a value on the private side of the root.
    while gaussian_delta(mu, eps) > delta:
        eps = eps * (1 + 1e-12) + 1e-15
    return eps


def zcdp_epsilon(rho, delta):
    """Epsilon of a rho-zCDP mechanism at ``delta`` (Canonne, Kamath & Steinke 2020, Prop. 12).

    ``epsilon = inf_{alpha > 1} alpha*rho + (log(1/delta) + (alpha-1) log(1-1/alpha)
    - log(alpha)) / (alpha - 1)``, never worse than Bun & Steinke's
    ``rho + 2 sqrt(rho log(1/delta))``. Cached: a function of two public numbers, and its
    search is most of the accounting of a fit (repeated fits ask for the same values).
    """
    return _zcdp_epsilon(float(rho), float(delta))


@functools.lru_cache(maxsize=256)
def _zcdp_epsilon(rho, delta):
    if rho <= 0:
        return 0.0
    if not np.isfinite(rho) or delta <= 0:
        return math.inf
    log_inv_delta = -math.log(delta)

    def eps_at(alpha):
        return (
            alpha * rho
            + (log_inv_delta + (alpha - 1) * math.log1p(-1 / alpha) - math.log(alpha))
            / (alpha - 1)
        )

    # The optimum sits near 1 + sqrt(log(1/delta)/rho); search in log(alpha - 1).
    guess = math.log(math.sqrt(log_inv_delta / rho))

    def objective(t):
        return eps_at(1 + math.exp(t))

    try:
        res = minimize_scalar(objective, bracket=(guess - 1, guess, guess + 1), tol=1e-12)
    except ValueError:
        # For small rho the bracket can miss the optimum; every alpha gives a valid
        # bound, so a bounded search around the guess is safe.
        res = minimize_scalar(objective, bounds=(max(guess - 20, -30.0), min(guess + 20, 700.0)),
                              method="bounded", options={"xatol": 1e-12})
    best = min(res.fun, rho + 2 * math.sqrt(rho * log_inv_delta))
    return max(float(best), 0.0)


def zcdp_rho(epsilon, delta):
    """Largest rho whose :func:`zcdp_epsilon` at ``delta`` is at most ``epsilon``: the
    zCDP budget of an ``(epsilon, delta)`` target (to a relative ``1e-12``, from below).

    ``inf`` for ``epsilon = inf``; 0 when ``delta = 0`` (zCDP converts to pure DP only
    at epsilon = inf).
    """
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if math.isinf(epsilon):
        return math.inf
    if delta <= 0:
        return 0.0
    # rho + 2 sqrt(rho log(1/delta)) >= zcdp_epsilon(rho) brackets the root from below.
    log_inv_delta = -math.log(delta)
    lo = (math.sqrt(log_inv_delta + epsilon) - math.sqrt(log_inv_delta)) ** 2
    hi = max(2.0 * lo, epsilon)
    while zcdp_epsilon(hi, delta) <= epsilon:
        lo, hi = hi, 2.0 * hi
    rho = brentq(lambda r: zcdp_epsilon(r, delta) - epsilon, lo, hi, xtol=1e-300,
                 rtol=1e-13)
    while zcdp_epsilon(rho, delta) > epsilon:
        rho *= 1 - 1e-13
    return rho


#: Renyi orders on which RDP curves are stored and composed.
RDP_ORDERS = np.unique(np.concatenate([
    1 + np.geomspace(1e-3, 1, 40)[:-1], np.arange(2, 65, dtype=float), np.geomspace(2, 2048, 120)
]))


def rdp_epsilon(rdp, delta, orders=RDP_ORDERS):
    """Epsilon at ``delta`` of a mechanism with RDP curve ``rdp`` over ``orders``.

    The same conversion as :func:`zcdp_epsilon` (Canonne, Kamath & Steinke 2020,
    Prop. 12; Balle et al. 2020), minimised over the grid.
    """
    if delta <= 0:
        return math.inf
    a = np.asarray(orders, dtype=float)
    r = np.asarray(rdp, dtype=float)
    eps = r + (np.log(1 / delta) + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)
    return max(float(np.min(eps)), 0.0)


def advanced_composition_epsilon(epsilons, counts, delta):
    """Epsilon of the composition of pure-DP mechanisms at extra failure ``delta``.

    Heterogeneous advanced composition (Dwork, Rothblum & Vadhan 2010; Kairouz,
    Oh & Viswanath 2015, Thm 3.5): ``sqrt(2 log(1/delta) sum eps_i^2) +
    sum eps_i (e^eps_i - 1) / (e^eps_i + 1)``.
    """
    if delta <= 0:
        return math.inf
    e = np.asarray(epsilons, dtype=float)
    k = np.asarray(counts, dtype=float)
    sq = float(np.sum(k * e**2))
    drift = float(np.sum(k * e * np.tanh(e / 2)))
    return math.sqrt(2 * math.log(1 / delta) * sq) + drift


# --------------------------------------------------------------------------
# Events and accountant
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class PrivacyEvent:
    """The guarantee of one mechanism call, or of ``count`` identical calls.

    Build events with the class methods, which know which composition theorems
    each kind of mechanism admits.

    Attributes
    ----------
    name : str
        What the call released (for reports).
    epsilon, delta : float
        Its own (epsilon, delta)-DP guarantee; ``epsilon`` is ``nan`` for a
        Gaussian mechanism, whose guarantee is a curve.
    rho : float or None
        zCDP parameter, if the mechanism is rho-zCDP.
    mu : float or None
        ``Delta / sigma`` for a Gaussian mechanism (exact GDP composition).
    rdp : tuple of float or None
        RDP curve on :data:`RDP_ORDERS`, for mechanisms that are not zCDP with a
        useful rho (e.g. subsampled ones).
    count : int
        Number of identical calls this event stands for.
    pld : GaussianPLD or None
        The step whose privacy loss distribution bounds the call
        (:mod:`~skdp_sparse.privacy.pld`), for Gaussian mechanisms on sums of
        per-example terms.
    """

    name: str
    epsilon: float
    delta: float = 0.0
    rho: float | None = None
    mu: float | None = None
    count: int = 1
    rdp: tuple | None = None
    pld: GaussianPLD | None = None

    @classmethod
    def pure(cls, epsilon, count=1, name="laplace"):
        """An epsilon-DP call; it is also epsilon^2/2-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
        return cls(name, float(epsilon), 0.0, 0.5 * float(epsilon) ** 2, None, int(count))

    @classmethod
    def exponential(cls, epsilon, count=1, name="exponential"):
        """An exponential-mechanism call with parameter epsilon.

        It is epsilon-DP and, having bounded range, epsilon^2/8-zCDP
        (Cesar & Rogers 2021, Lemma 3.2).
        """
        return cls(name, float(epsilon), 0.0, float(epsilon) ** 2 / 8, None, int(count))

    @classmethod
    def gaussian(cls, mu, count=1, name="gaussian"):
        """A Gaussian-mechanism call with ``Delta_2 / sigma = mu``: mu^2/2-zCDP, mu-GDP."""
        mu = float(mu)
        return cls(name, math.nan, 0.0, 0.5 * mu**2, mu, int(count))

    @classmethod
    def zcdp(cls, rho, count=1, name="zcdp"):
        """A rho-zCDP call with no finer description (e.g. a discrete Gaussian)."""
        return cls(name, math.nan, 0.0, float(rho), None, int(count))

    @classmethod
    def from_rdp(cls, rdp, count=1, name="rdp"):
        """A call known by its RDP curve on :data:`RDP_ORDERS` (e.g. a subsampled Gaussian)."""
        rdp = tuple(float(v) for v in rdp)
        if len(rdp) != RDP_ORDERS.size:
            raise ValueError(f"an RDP curve needs {RDP_ORDERS.size} values, one per order")
        return cls(name, math.nan, 0.0, None, None, int(count), rdp)

    @classmethod
    def from_pld(cls, step, count=1, name="pld", *, rho=None, rdp=None):
        """A call bounded by the privacy loss distribution of ``step`` (a
        :class:`~skdp_sparse.privacy.pld.GaussianPLD`, ``doc/proofs/pld.rst``), with the
        zCDP or RDP bound it also has, for the other composition theorems."""
        if not isinstance(step, GaussianPLD):
            raise TypeError("from_pld takes a GaussianPLD")
        if rdp is not None:
            rdp = tuple(float(v) for v in rdp)
            if len(rdp) != RDP_ORDERS.size:
                raise ValueError(f"an RDP curve needs {RDP_ORDERS.size} values, one per order")
        return cls(name, math.nan, 0.0, None if rho is None else float(rho), None,
                   int(count), rdp, step)

    @classmethod
    def approximate(cls, epsilon, delta, count=1, name="approximate"):
        """An (epsilon, delta)-DP call with no finer description (basic composition only)."""
        return cls(name, float(epsilon), float(delta), None, None, int(count))


class PrivacyAccountant:
    """Composes the privacy events of a computation.

    Examples
    --------
    >>> acc = PrivacyAccountant()
    >>> acc.record(PrivacyEvent.exponential(0.1, count=100))
    >>> acc.record(PrivacyEvent.gaussian(0.2, count=100))
    >>> eps, delta = acc.spent(delta=1e-6)
    """

    def __init__(self, events=()):
        self.events = list(events)

    def record(self, event):
        """Add one event (already run, or about to run)."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError("record takes a PrivacyEvent")
        if event.count > 0:
            self.events.append(event)

    def spent(self, delta=0.0):
        """Tightest ``(epsilon, delta')`` with ``delta' <= delta`` over all theorems."""
        return compose(self.events, delta)

    def __repr__(self):
        return f"PrivacyAccountant({len(self.events)} events)"


def compose(events, delta):
    """Compose ``events``; return the smallest epsilon found with total delta <= ``delta``."""
    events = [e for e in events if e.count > 0]
    if not events:
        return 0.0, 0.0
    candidates = []

    # Basic composition; Gaussian events have no single (eps, delta) and are skipped.
    if all(not math.isnan(e.epsilon) for e in events):
        eps = sum(e.count * e.epsilon for e in events)
        dlt = sum(e.count * e.delta for e in events)
        if dlt <= delta * (1 + 1e-12):
            candidates.append((eps, min(dlt, delta)))

    approx = [e for e in events if e.rho is None and e.rdp is None]
    # An event known only by its privacy loss distribution has no (epsilon, delta),
    # zCDP or RDP form: only the PLD candidate below accounts for it.
    if delta > 0 and not any(math.isnan(e.epsilon) for e in approx):
        eps_approx = sum(e.count * e.epsilon for e in approx)
        delta_left = delta - sum(e.count * e.delta for e in approx)
        smooth = [e for e in events if e.rho is not None]
        curved = [e for e in events if e.rdp is not None]
        if delta_left > 0 and curved:
            total = sum(e.count * np.asarray(e.rdp) for e in curved)
            total = total + RDP_ORDERS * sum(e.count * e.rho for e in smooth)
            candidates.append((eps_approx + rdp_epsilon(total, delta_left), delta))
        elif delta_left > 0 and smooth:
            if all(e.mu is not None for e in smooth):
                # Exact: Gaussian mechanisms compose into one Gaussian mechanism,
                # so no other bound can be smaller.
                mu = math.sqrt(sum(e.count * e.mu**2 for e in smooth))
                candidates.append((eps_approx + gaussian_epsilon(mu, delta_left), delta))
            else:
                rho = sum(e.count * e.rho for e in smooth)
                candidates.append((eps_approx + zcdp_epsilon(rho, delta_left), delta))
            if all(e.mu is None and e.delta == 0 and not math.isnan(e.epsilon)
                   for e in smooth):
                candidates.append(
                    (
                        eps_approx
                        + advanced_composition_epsilon(
                            [e.epsilon for e in smooth], [e.count for e in smooth], delta_left
                        ),
                        delta,
                    )
                )
    if 0 < delta < 1 and any(e.pld is not None for e in events):
        items = _pld_items(events)
        if items is not None:
            candidates.append((_pld_candidate(tuple(items), float(delta)), delta))
    if not candidates:
        return math.inf, delta
    return min(candidates, key=lambda c: c[0])


def _pld_items(events):
    """``(step, count)`` of every event for :func:`~skdp_sparse.privacy.pld.pld_epsilon`,
    identical steps merged (so K problems of T steps are the K T steps a calibration
    composes), or None if an event has no privacy loss distribution (only RDP or
    zCDP)."""
    counts = {}
    for e in events:
        if e.pld is not None:
            step = e.pld
        elif e.mu is not None:
            # A Gaussian mechanism of ratio mu: the full-batch step with 2 / z = mu.
            step = GaussianPLD("none", 1.0,
                               0.0 if math.isinf(e.mu) else (math.inf if e.mu == 0
                                                             else 2.0 / e.mu))
        elif not math.isnan(e.epsilon):
            step = (e.epsilon, e.delta)
        else:
            return None
        counts[step] = counts.get(step, 0) + e.count
    return list(counts.items())


@functools.lru_cache(maxsize=512)
def _pld_candidate(items, delta):
    # Events are functions of public values: repeated compositions (reports, fits of
    # one configuration) reuse the result.
    return pld_epsilon(items, delta)


def calibrate_scale(events_for_scale, epsilon, delta, *, lo=1e-12, hi=1.0, rtol=1e-10):
    """Smallest noise scale whose composed spend is at most ``(epsilon, delta)``.

    Parameters
    ----------
    events_for_scale : callable
        Maps a noise scale (larger means more noise, less privacy loss) to the
        list of :class:`PrivacyEvent` the computation would run with it. The
        composed epsilon must be non-increasing in the scale.
    epsilon, delta : float
        The target budget.
    lo : float, default=1e-12
        The smallest scale returned: where its spend is already at most ``epsilon``.
    hi : float, default=1.0
        The upper end of the bracket searched; it grows fourfold until its spend is
        at most ``epsilon``.
    rtol : float, default=1e-10
        Relative tolerance on the scale.

    Returns
    -------
    scale : float
        A scale whose spend is <= epsilon (to relative tolerance ``rtol`` on
        the scale, always on the private side).
    """
    if not (epsilon > 0):
        raise ValueError(f"epsilon must be > 0, got {epsilon}")

    def spend(scale):
        return compose(events_for_scale(scale), delta)[0]

    while spend(hi) > epsilon:
        lo, hi = hi, hi * 4
        if hi > 1e300:
            raise ValueError(
                f"No noise scale reaches epsilon={epsilon}, delta={delta}; "
                "pure DP (delta=0) may be impossible for this mechanism."
            )
    if spend(lo) <= epsilon:
        return lo
    log_scale = brentq(lambda t: spend(math.exp(t)) - epsilon, math.log(lo), math.log(hi),
                       xtol=rtol / 4)
    scale = min(math.exp(log_scale) * (1 + rtol / 2), hi)
    # The root is approximate: step towards more noise until the budget holds.
    while spend(scale) > epsilon:
        scale *= 1 + rtol
    return scale


def gaussian_mu(epsilon, delta):
    """``mu = Delta / sigma`` of the Gaussian mechanism that is exactly
    ``(epsilon, delta)``-DP (the budget of ``T`` composed steps as one GDP ``mu``)."""
    return _gaussian_mu(float(epsilon), float(delta))


@functools.lru_cache(maxsize=4096)
def _gaussian_mu(epsilon, delta):
    # Pure in its two public floats, like _gaussian_epsilon.
    return 1.0 / calibrate_scale(lambda s: [PrivacyEvent.gaussian(1.0 / s)], epsilon, delta)
