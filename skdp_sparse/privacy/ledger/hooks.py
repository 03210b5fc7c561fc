"""How a private fit meets its ledgers: reserve before, record after.

:class:`FitBudget` carries one fit's budget across every ledger that applies to
it (its ``ledger`` parameter and the active ledgers). The fit sequence of
:class:`~skdp_sparse.base.DPEstimatorMixin` uses it through :func:`fit_budget`:

1. **reserve**, after every public check and before any private computation: each
   ledger checks its cap (if it has one) and sets the planned ``(epsilon, delta)``
   aside under its lock, so parallel fits cannot both pass on the same remaining
   budget and a fit whose record is lost still counts; one refusal releases the
   reservations already made;
2. **record** the events the fit spent, which settles the reservations;
3. if the fit raises in between: when its generator drew no randomness, nothing
   private was released and the reservations are **released**; otherwise the
   planned events are **recorded** (a failed fit may have released something).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import weakref

from ...exceptions import PrivacyLeakWarning
from ...utils._warnings import warn
from ..accounting import compose
from ._ledger import PrivacyLedger
from ._registry import active_ledgers
from ._suspension import reporting_suspended

__all__ = ["FitBudget", "fit_budget", "ledgers_for", "check_budget", "report_fit"]


def _own_ledgers(estimator):
    """The ``ledger`` parameters of ``estimator`` and of the estimators it holds (the
    searched estimator of a private search, its pipeline's steps): a meta-estimator
    whose inner fits do not report themselves reports to their ledgers, so that a
    ledger given to an estimator keeps its cap wherever the estimator is fitted."""
    get_params = getattr(estimator, "get_params", None)
    if get_params is None:
        own = getattr(estimator, "ledger", None)
        return [] if own is None else [("ledger", own)]
    return [(name, value) for name, value in get_params(deep=True).items()
            if (name == "ledger" or name.endswith("__ledger")) and value is not None]


def ledgers_for(estimator):
    """The ledgers a fit of ``estimator`` reports to: its ``ledger`` parameter (if
    it has one) and those of the estimators it holds, and the active ledgers, each
    once."""
    found = {}
    for name, own in _own_ledgers(estimator):
        if not isinstance(own, PrivacyLedger):
            raise TypeError(f"{name} must be a PrivacyLedger or None, got {own!r}")
        found.setdefault(own.store_key, own)
    for ledger in active_ledgers():
        found.setdefault(ledger.store_key, ledger)
    return list(found.values())


def _generator_state(rng):
    return None if rng is None else rng.bit_generator.state


#: A key of this process's own: the fingerprints below say nothing of a seed to whoever
#: reads them (a seed regenerates the noise it seeded).
_FINGERPRINT_KEY = os.urandom(16)
#: Ledger store -> fingerprints of the generator states this process's private fits
#: recorded in it started their noise from.
_NOISE_SOURCES = {}


def _warn_on_shared_noise(ledgers, state, estimator):
    """Warn if a private fit recorded in one of ``ledgers`` by this process started from
    the generator state ``state`` too: the two releases carry the same noise (a seed
    given twice, or a ``Generator`` copied with its state by ``clone``), and the
    ledger's composition, which assumes independent noise, does not cover them."""
    digest = hashlib.blake2b(repr(state).encode(), key=_FINGERPRINT_KEY,
                             digest_size=16).digest()
    shared = False
    for ledger in ledgers:
        seen = _NOISE_SOURCES.setdefault(ledger.store_key, set())
        shared |= digest in seen
        seen.add(digest)
    if shared:
        warn(f"{type(estimator).__name__} draws its noise from the same generator state "
             "as an earlier private fit recorded in the same ledger (its random_state, or "
             "a Generator copied with its state by clone): the two releases carry the "
             "same noise, so their difference is exact wherever their values without "
             "noise differ (other rows, or other settings on the same rows), and the "
             "ledger's total, which composes independent noise, does not hold for them. "
             "Give each fit random_state=None, or its own seed.",
             PrivacyLeakWarning)


class FitBudget:
    """The budget of one fit of ``estimator``: ``(epsilon, delta)`` planned, with the
    privacy ``events`` the fit will record if it completes."""

    def __init__(self, estimator, epsilon, delta, events=()):
        self.estimator = estimator
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.events = tuple(events)
        self._reservations = {}
        self._rng = None
        self._rng_state = None
        self._done = reporting_suspended()

    def reserve(self):
        """Reserve the planned budget in every ledger, all or none: a capped one
        refuses a budget above its cap, and one that cannot be reached raises
        :class:`~skdp_sparse.exceptions.LedgerUnreachableError` (a fit that could
        not record its spend does not run)."""
        if self._done:
            return
        name = type(self.estimator).__name__
        try:
            for ledger in ledgers_for(self.estimator):
                # A fit without noise spends epsilon=inf whatever events it plans.
                rid = ledger.reserve(self.epsilon, self.delta, estimator=name,
                                     events=self.events if math.isfinite(self.epsilon)
                                     else None)
                self._reservations[ledger.store_key] = (ledger, rid)
        except BaseException:
            self.release()
            raise

    def watch(self, rng):
        """Remember ``rng``'s state: a failure before it advances released nothing; and
        warn if a private fit in the same ledgers started from it before."""
        self._rng, self._rng_state = rng, _generator_state(rng)
        if self._reservations and math.isfinite(self.epsilon) and rng is not None:
            _warn_on_shared_noise([led for led, _ in self._reservations.values()],
                                  self._rng_state, self.estimator)

    def randomness_used(self):
        return self._rng is None or _generator_state(self._rng) != self._rng_state

    def release(self):
        """Cancel the reservations (the fit released nothing)."""
        for ledger, rid in self._reservations.values():
            ledger._release(rid)
        self._reservations = {}
        self._done = True

    def record(self, events, epsilon_spent, delta_spent, *, params=None):
        """Record the fit's spend in every ledger that applies, settling reservations.

        Returns the records written. A ledger the fit did not reserve in (one
        activated while it ran, say) still gets its record, and refuses with
        ``BudgetExceededError`` if that takes it above its cap.
        """
        if self._done:
            return []
        self._done = True
        targets = {led.store_key: led for led in ledgers_for(self.estimator)}
        for key, (ledger, _) in self._reservations.items():
            targets.setdefault(key, ledger)
        records, errors = [], []
        for key, ledger in targets.items():
            rid = self._reservations[key][1] if key in self._reservations else None
            try:
                records.append(ledger.record(self.estimator, tuple(events), epsilon_spent,
                                             delta_spent, params=params, reservation=rid))
            except Exception as exc:  # write to every ledger before raising
                errors.append(exc)
        self._reservations = {}
        if errors:
            raise errors[0]
        return records

    def abort(self, error=None):
        """The fit raised ``error``: release if no randomness was drawn, else record the
        plan (or the events the error reports it ran, ``error.privacy_events``)."""
        if self._done:
            return
        if not self.randomness_used():
            self.release()
            return
        events = getattr(error, "privacy_events", None) or self.events
        if math.isinf(self.epsilon):
            spent = (math.inf, self.delta)
        else:
            spent = compose(events, self.delta) if events else (self.epsilon, self.delta)
        self.record(events, *spent)


@contextlib.contextmanager
def fit_budget(estimator, epsilon, delta, events=()):
    """Reserve ``(epsilon, delta)`` for a fit of ``estimator``; on an exception,
    release or record it (see :meth:`FitBudget.abort`)."""
    budget = FitBudget(estimator, epsilon, delta, events)
    budget.reserve()
    try:
        yield budget
    except BaseException as error:
        budget.abort(error)
        raise


# --------------------------------------------------------------------------
# For estimators that run their own fit sequence
# --------------------------------------------------------------------------
_PENDING_ATTR = "_skdp_fit_budget"
# accountant -> ids of the estimators already reported with it, so a fit that
# reports twice (through the mixin and by hand) is recorded once.
_REPORTED = weakref.WeakKeyDictionary()


def check_budget(estimator, epsilon, delta):
    """Reserve ``(epsilon, delta)`` for a fit of ``estimator`` in every ledger (a
    capped one raises ``BudgetExceededError`` above its cap); :func:`report_fit`
    settles the reservations.

    For estimators that do not use :class:`~skdp_sparse.base.DPEstimatorMixin`'s fit
    sequence; call it once the parameters are validated and before any private
    computation.
    """
    budget = FitBudget(estimator, epsilon, delta)
    budget.reserve()
    with contextlib.suppress(AttributeError, TypeError):
        estimator.__dict__[_PENDING_ATTR] = budget


def report_fit(estimator, accountant, delta):
    """Record a finished fit of ``estimator`` (its ``accountant``'s events, spent at
    ``delta``) in every ledger that applies; returns the records written. A fit
    reported twice with the same accountant is recorded once; ``epsilon=inf``
    (noise off) is recorded as an infinite spend."""
    budget = getattr(estimator, "__dict__", {}).pop(_PENDING_ATTR, None)
    try:
        done = _REPORTED.setdefault(accountant, set())
    except TypeError:
        done = set()
    if id(estimator) in done:
        return []
    done.add(id(estimator))
    if budget is None:
        budget = FitBudget(estimator, 0.0, delta)
    eps, spent_delta = accountant.spent(delta)
    requested = getattr(estimator, "epsilon", None)
    if isinstance(requested, float | int) and math.isinf(requested):
        eps = math.inf
    return budget.record(tuple(accountant.events), eps, spent_delta)
