"""What a ledger holds: fit records, reservations, caps, and their totals."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...exceptions import LedgerUnreachableError
from ..accounting import PrivacyEvent, compose
from ._store import FORMAT_VERSION

__all__ = ["LedgerRecord", "Reservation", "CAP_RTOL", "totals", "check_caps", "planned",
           "spend", "check_version", "fmt"]

# Relative slack when comparing a total with a cap: calibrated fits land on their
# target up to rounding, and k fits of epsilon/k must fit a cap of epsilon.
CAP_RTOL = 1e-9


@dataclass(frozen=True)
class LedgerRecord:
    """One private fit, as a ledger stores it.

    Attributes
    ----------
    estimator : str
        Class name of the fitted estimator.
    params : dict
        Its hyperparameters that are plain scalars (``epsilon``, ``delta``, ...).
    epsilon_spent, delta_spent : float
        The fit's own composed guarantee.
    events : tuple of PrivacyEvent
        The mechanism calls it recorded (empty if it recorded none).
    timestamp : float
        ``time.time()`` when the fit reserved its budget (when the record was written,
        for a fit that reserved none): no record tells how long its fit ran, which
        may depend on the data (a private search's running time tells its number of
        runs).
    pid : int
        Process that ran the fit.
    id : str
        Unique id of the record.
    reservation : str or None
        The budget reservation this fit settled.
    """

    estimator: str
    params: dict
    epsilon_spent: float
    delta_spent: float
    events: tuple
    timestamp: float
    pid: int
    id: str
    reservation: str | None = None

    @property
    def epsilon(self):
        """The fit's requested epsilon (its ``epsilon`` parameter), if it has one."""
        return self.params.get("epsilon")

    @property
    def delta(self):
        """The fit's requested delta (its ``delta`` parameter), if it has one."""
        return self.params.get("delta")

    def composable_events(self):
        """Events for composition: the recorded ones, else the fit's (eps, delta)."""
        if self.events and math.isfinite(self.epsilon_spent):
            return list(self.events)
        return [PrivacyEvent.approximate(self.epsilon_spent, self.delta_spent,
                                         name=self.estimator)]


@dataclass(frozen=True)
class Reservation:
    """Budget set aside by a fit that passed the cap check and has not reported yet,
    with the privacy events it planned (if it stated them)."""

    estimator: str
    epsilon: float
    delta: float
    timestamp: float
    pid: int
    id: str
    events: tuple = ()

    def composable_events(self):
        """The fit's planned events if it stated them (and planned noise), else its
        (epsilon, delta)."""
        if self.events and math.isfinite(self.epsilon):
            return list(self.events)
        return [PrivacyEvent.approximate(self.epsilon, self.delta, name="reserved")]


def totals(records, reservations, extra=(), delta=None, composition="tight",
           extra_events=None):
    """Composed ``(epsilon, delta)`` of fits, reservations and extra planned spends;
    ``extra_events``, the events the extra spends will record, replace their pairs in
    the tight total."""
    planned = [(r.epsilon, r.delta) for r in reservations] + list(extra)
    basic_eps = sum(r.epsilon_spent for r in records) + sum(e for e, _ in planned)
    basic_delta = sum(r.delta_spent for r in records) + sum(d for _, d in planned)
    if composition == "basic":
        return basic_eps, basic_delta
    if composition != "tight":
        raise ValueError(f"composition must be 'tight' or 'basic', got {composition!r}")
    target = basic_delta if delta is None else float(delta)
    events = [e for r in records for e in r.composable_events()]
    events += [e for r in reservations for e in r.composable_events()]
    events += list(extra_events) if extra_events is not None else [
        PrivacyEvent.approximate(e, d, name="planned") for e, d in extra]
    eps, dlt = compose(events, min(target, 1.0))
    if basic_delta <= target * (1 + 1e-12) and basic_eps <= eps:
        return basic_eps, basic_delta
    return eps, dlt


def fmt(value):
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"


def check_caps(max_epsilon, max_delta):
    if max_epsilon is None and max_delta is None:
        return None, None
    if max_epsilon is None or max_delta is None:
        raise ValueError(
            "a budget cap needs both max_epsilon and max_delta (use max_delta=0 for pure DP)"
        )
    eps = float(max_epsilon)
    dlt = float(max_delta)
    if not (eps > 0) or math.isnan(eps):
        raise ValueError(f"max_epsilon must be > 0, got {max_epsilon!r}")
    if not (0 <= dlt < 1):
        raise ValueError(f"max_delta must be in [0, 1), got {max_delta!r}")
    return eps, dlt


def spend(value, name):
    """A spend as a ledger holds it: a float >= 0 (infinite for a fit without noise)."""
    value = float(value)
    if not value >= 0:
        raise ValueError(f"a ledger holds spends >= 0, got {name}={value!r}")
    return value


def check_version(header):
    version = header.get("v", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise LedgerUnreachableError(
            f"the privacy ledger {header.get('id')} was written in format {version!r}, "
            f"newer than this version of skdp_sparse reads ({FORMAT_VERSION}); upgrade "
            "to read it")


def planned(epsilon, delta):
    eps = float(epsilon)
    dlt = 0.0 if delta is None else float(delta)
    if math.isnan(eps) or eps < 0 or math.isnan(dlt) or dlt < 0:
        raise ValueError(f"invalid planned budget (epsilon={epsilon!r}, delta={delta!r})")
    return eps, dlt
