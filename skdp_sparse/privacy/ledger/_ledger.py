"""The :class:`PrivacyLedger`: a store of fit records shared by its handles."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
import uuid
import weakref

from ...exceptions import BudgetExceededError, LedgerUnreachableError
from ...utils._warnings import warn
from ._records import (
    CAP_RTOL,
    LedgerRecord,
    Reservation,
    check_caps,
    check_version,
    fmt,
    planned,
    spend,
    totals,
)
from ._store import (
    FORMAT_VERSION,
    FileStore,
    event_from_dict,
    event_to_dict,
    scalar_params,
    store_at,
)

__all__ = ["PrivacyLedger"]

# --------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------
# Ledger objects alive in this process, so that unpickling a handle in the
# process that holds the ledger returns that very object.
_LIVE = weakref.WeakValueDictionary()
_LIVE_LOCK = threading.Lock()


def _remove_owned_file(path, owner_pid):
    # A forked child holds a copy of the owner's object; only the creating
    # process may delete the store.
    if os.getpid() == owner_pid:
        with contextlib.suppress(OSError):
            os.remove(path)


class PrivacyLedger:
    """Shared record of the privacy spent by private fits, with an optional cap.

    Parameters
    ----------
    path : str or os.PathLike, optional
        File of the store (JSON lines, append-only). An existing ledger file is
        reopened and keeps its records, so a ledger can span sessions. ``None``
        creates a temporary file that the creating process deletes when the
        ledger is garbage-collected or the interpreter exits.
    store : DaskLedgerStore, optional
        Where the records live instead of a file: a
        :class:`~skdp_sparse.privacy.ledger.DaskLedgerStore` keeps them on a dask
        scheduler, reachable from every worker of the cluster (give no ``path``).
    max_epsilon, max_delta : float, optional
        Budget cap. A fit whose planned ``(epsilon, delta)``, composed with
        everything already recorded, would exceed ``max_epsilon`` at
        ``max_delta`` is refused with
        :class:`~skdp_sparse.exceptions.BudgetExceededError` before it runs.
        Give both or neither: the cap is a guarantee ``(max_epsilon, max_delta)``.
        It is written to the store: every handle to the same store, later ones
        opened without a cap included, enforces it (see :attr:`caps`).

    Notes
    -----
    Copies (``copy.copy``, ``copy.deepcopy``, :func:`sklearn.base.clone` of an
    estimator holding it) are the ledger itself. A pickle holds a handle to the
    store: unpickled in the same process it is the same object; elsewhere it is
    a new object appending to the same file.

    Caps bind the store, not a handle: a cap, once written, holds for every handle
    to the store from then on, so reopening a ledger's file without a cap (or with
    a looser one) cannot lift it. A handle can add a tighter cap, never remove one;
    to spend beyond a cap, the data's owner starts a new ledger knowingly.

    Fail closed: a handle whose store cannot be reached (its file does not exist in
    this process's file system, its scheduler is gone) raises
    :class:`~skdp_sparse.exceptions.LedgerUnreachableError` on every access, so a fit
    that must report to it refuses to run rather than run unrecorded. So does a
    handle whose file was deleted, truncated or replaced by another ledger's while in
    use: a ledger is never started again empty.

    Examples
    --------
    >>> from skdp_sparse.privacy.ledger import privacy_ledger
    >>> with privacy_ledger() as ledger:          # doctest: +SKIP
    ...     GridSearchCV(DPSparseLogisticRegression(classes=[0, 1]), grid).fit(X, y)
    >>> ledger.spent()                             # doctest: +SKIP
    """

    def __init__(self, path=None, *, store=None, max_epsilon=None, max_delta=None):
        self._max_epsilon, self._max_delta = check_caps(max_epsilon, max_delta)
        self._init_state()
        if store is not None:
            if path is not None:
                raise ValueError("give a ledger a path or a store, not both")
            self._store = store
        elif path is None:
            fd, path = tempfile.mkstemp(prefix="skdp_sparse-ledger-", suffix=".jsonl")
            os.close(fd)
            self._store = FileStore(path)
            weakref.finalize(self, _remove_owned_file, self._store.path, os.getpid())
        else:
            self._store = FileStore(path)
        self._path = self._store.address
        self._unreachable = None
        self._id = self._read_or_write_header()
        self._write_cap()
        self._register()

    def _init_state(self):
        self._mutex = threading.RLock()
        self._reset_cache()

    def _reset_cache(self):
        self._offset = 0
        self._records = []
        self._reservations = {}
        self._settled = set()
        self._stored_caps = set()

    @classmethod
    def _attach(cls, ledger_id, path, max_epsilon, max_delta):
        """The ledger with this handle: the live object here, or a new view of its file."""
        key = (ledger_id, path, max_epsilon, max_delta)
        with _LIVE_LOCK:
            obj = _LIVE.get(key)
            if obj is not None:
                return obj
            obj = cls.__new__(cls)
            obj._max_epsilon, obj._max_delta = max_epsilon, max_delta
            obj._init_state()
            obj._path = path
            obj._id = ledger_id
            obj._store = store_at(path)
            obj._unreachable = None
            if not obj._store.exists():
                # Fail closed: never start an empty copy of a ledger that exists
                # elsewhere (a worker with its own file system, a deleted file).
                obj._unreachable = (
                    f"the store of privacy ledger {ledger_id} ({path}) cannot be reached "
                    f"from this process (pid {os.getpid()}): fits that report to it refuse "
                    "to run. Keep the store where every process can reach it: a path on a "
                    "shared file system, or a DaskLedgerStore on a dask cluster.")
            _LIVE[key] = obj
            return obj

    def _register(self):
        with _LIVE_LOCK:
            _LIVE.setdefault(self._key, self)

    def _read_or_write_header(self):
        with self._store.locked(exclusive=True, create=True) as session:
            data, _ = session.read_from(0)
            first = data.split(b"\n", 1)[0]
            if first.strip():
                try:
                    header = json.loads(first)
                except ValueError:
                    header = None
                if not isinstance(header, dict) or header.get("kind") != "header":
                    raise ValueError(f"{self._path} is not a privacy ledger file")
                check_version(header)
                return str(header["id"])
            ledger_id = uuid.uuid4().hex
            session.append({"kind": "header", "v": FORMAT_VERSION, "id": ledger_id,
                              "created": time.time()})
            return ledger_id

    def _write_cap(self):
        """Write this handle's cap to the store, once: from then on it binds every
        handle to the store."""
        if self._max_epsilon is None:
            return
        with self._locked(exclusive=True) as log:
            if (self._max_epsilon, self._max_delta) not in self._stored_caps:
                log.append({"kind": "cap", "max_epsilon": self._max_epsilon,
                            "max_delta": self._max_delta, "time": time.time(),
                            "pid": os.getpid()})
                self._refresh(log)

    # -- identity ---------------------------------------------------------
    @property
    def _key(self):
        return (self._id, self._path, self._max_epsilon, self._max_delta)

    @property
    def id(self):
        """Identifier of the store (shared by every handle to the same file)."""
        return self._id

    @property
    def store_key(self):
        """The same for every handle to one store, whatever its cap or the spelling of
        its path: a fit reserves and records once per store."""
        return (self._id, self._store.identity)

    @property
    def path(self):
        """The file holding the records (for a store other than a file, its address)."""
        return self._path

    def ensure_reachable(self):
        """Raise :class:`~skdp_sparse.exceptions.LedgerUnreachableError` unless the
        store can be read from this process (a fit's reservation fails the same way)."""
        with self._locked(exclusive=False):
            pass

    @property
    def max_epsilon(self):
        return self._max_epsilon

    @property
    def max_delta(self):
        return self._max_delta

    @property
    def caps(self):
        """Every cap in force, as ``(max_epsilon, max_delta)`` pairs sorted by
        epsilon: this handle's and those written to the store by any handle. A fit
        must keep the composed total within each."""
        with self._locked(exclusive=False):
            return self._caps_in_force()

    def _caps_in_force(self):
        caps = set(self._stored_caps)
        if self._max_epsilon is not None:
            caps.add((self._max_epsilon, self._max_delta))
        return sorted(caps)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (restore_ledger, self._key)

    def __eq__(self, other):
        return isinstance(other, PrivacyLedger) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        caps = ""
        if self._max_epsilon is not None:
            caps = f", max_epsilon={self._max_epsilon!r}, max_delta={self._max_delta!r}"
        return f"PrivacyLedger(path={self._path!r}{caps})"

    # -- reading ----------------------------------------------------------
    def _refresh(self, session):
        """Parse the lines appended since the last read (the store is append-only)."""
        data, size = session.read_from(self._offset)
        if size < self._offset:
            self._gone("its file shrank (records were removed)")
        end = data.rfind(b"\n")
        if end < 0:
            return
        for line in data[: end + 1].splitlines():
            if not line.strip():
                continue
            item = None
            try:
                item = json.loads(line)
                self._ingest(item)
            except (ValueError, KeyError, TypeError):
                if isinstance(item, dict) and item.get("kind") in ("cap", "header"):
                    # A cap skipped would be a cap lifted: refuse instead.
                    self._gone(f"a line of kind {item['kind']!r} cannot be read")
                # The totals stay upper bounds: a lost fit record leaves its
                # reservation pending, and a lost release its reservation counted.
                warn(f"skipped a damaged line of privacy ledger {self._path}; a fit "
                     "whose record it held counts with its reserved budget", RuntimeWarning)
        self._offset += end + 1

    def _ingest(self, item):
        kind = item["kind"]
        if kind == "fit":
            rec = LedgerRecord(
                estimator=str(item["estimator"]),
                params=dict(item.get("params", {})),
                epsilon_spent=spend(item["epsilon_spent"], "epsilon"),
                delta_spent=spend(item["delta_spent"], "delta"),
                events=tuple(event_from_dict(e) for e in item.get("events", [])),
                timestamp=float(item["time"]),
                pid=int(item["pid"]),
                id=str(item["id"]),
                reservation=item.get("reservation"),
            )
            self._records.append(rec)
            if rec.reservation is not None:
                self._settled.add(rec.reservation)
                self._reservations.pop(rec.reservation, None)
        elif kind == "reserve":
            if item["id"] not in self._settled:
                self._reservations[item["id"]] = Reservation(
                    str(item["estimator"]), spend(item["epsilon"], "epsilon"),
                    spend(item["delta"], "delta"),
                    float(item["time"]), int(item["pid"]), str(item["id"]),
                    tuple(event_from_dict(e) for e in item.get("events", [])),
                )
        elif kind == "release":
            self._settled.add(item["reservation"])
            self._reservations.pop(item["reservation"], None)
        elif kind == "cap":
            self._stored_caps.add(check_caps(item["max_epsilon"], item["max_delta"]))
        elif kind == "header":
            if str(item["id"]) != self._id:
                self._gone("its file now holds another ledger")
            check_version(item)
        else:
            # A line this version cannot read may carry spend or a cap: totals
            # without it could be too small, so refuse rather than guess.
            self._gone(f"it holds a line of kind {kind!r}, written by a newer version "
                       "of skdp_sparse; upgrade to read it")

    @contextlib.contextmanager
    def _locked(self, exclusive):
        if self._unreachable:
            raise LedgerUnreachableError(self._unreachable)
        with self._mutex, self._opened(exclusive) as session:
            self._refresh(session)
            yield session

    @contextlib.contextmanager
    def _opened(self, exclusive):
        try:
            with self._store.locked(exclusive) as session:
                yield session
        except FileNotFoundError:
            self._gone("its file is gone")

    def _gone(self, what):
        # Fail closed: records that were lost are never replaced by an empty total.
        raise LedgerUnreachableError(
            f"privacy ledger {self._id} ({self._path}): {what}, so its records cannot "
            "all be read and fits that report to it refuse to run. Restore the file, or "
            "start a new ledger knowingly.")

    def _snapshot(self):
        with self._locked(exclusive=False):
            return list(self._records), list(self._reservations.values())

    def records(self):
        """The fits recorded so far, oldest first (a list of :class:`LedgerRecord`)."""
        return self._snapshot()[0]

    def pending(self):
        """Reservations of fits that have not reported (running, or whose record
        was lost)."""
        return self._snapshot()[1]

    def __len__(self):
        return len(self.records())

    def events(self):
        """Every recorded mechanism event, and the planned events (or one
        (epsilon, delta) event) of each pending reservation: what :meth:`spent`
        composes."""
        records, pending = self._snapshot()
        return [e for r in [*records, *pending] for e in r.composable_events()]

    def spent(self, delta=None, *, composition="tight"):
        """Total privacy spent by all recorded fits (and pending reservations).

        Parameters
        ----------
        delta : float, optional
            Delta at which the tight total is evaluated; default: the sum of the
            fits' deltas, the delta of basic composition, so both totals are
            comparable.
        composition : {"tight", "basic"}
            ``"basic"``: the sums of the fits' epsilons and deltas. ``"tight"``:
            the smallest epsilon at ``delta`` among basic composition and
            :func:`~skdp_sparse.privacy.accounting.compose` over all events.

        Returns
        -------
        (epsilon, delta) : tuple of float
        """
        records, pending = self._snapshot()
        return totals(records, pending, delta=delta, composition=composition)

    def summary(self, delta=None):
        """A text table of the fits and their basic and tight totals."""
        records, pending = self._snapshot()
        lines = [f"PrivacyLedger {self._path}: {len(records)} fits"
                 + (f", {len(pending)} pending" if pending else "")]
        for cap_epsilon, cap_delta in self.caps:
            lines.append(f"cap: epsilon={cap_epsilon:g} at delta={cap_delta:g}")
        lines.append(f"{'#':>4}  {'estimator':<32} {'epsilon':>9} {'delta':>9} "
                     f"{'eps spent':>10} {'delta spent':>11} {'pid':>7}")
        for i, r in enumerate(records):
            lines.append(
                f"{i:>4}  {r.estimator[:32]:<32} {fmt(r.epsilon):>9} {fmt(r.delta):>9} "
                f"{r.epsilon_spent:>10.4g} {r.delta_spent:>11.3g} {r.pid:>7}"
            )
        for p in pending:
            lines.append(f"   -  {p.estimator[:32]:<32} {p.epsilon:>9.4g} {p.delta:>9.3g} "
                         f"{'(reserved)':>10} {'':>11} {p.pid:>7}")
        be, bd = totals(records, pending, composition="basic")
        te, td = totals(records, pending, delta=delta)
        lines.append(f"total, basic composition: epsilon={be:.6g}, delta={bd:.3g}")
        lines.append(f"total, tight composition: epsilon={te:.6g}, delta={td:.3g}")
        return "\n".join(lines)

    # -- writing ----------------------------------------------------------
    def _exceeded_cap(self, records, reservations, epsilon, delta, events=None):
        """The first cap in force that spending ``(epsilon, delta)`` more (composed as
        its ``events`` if given) would exceed, with the total at its delta;
        ``(None, None)`` if none."""
        for cap_epsilon, cap_delta in self._caps_in_force():
            eps, dlt = totals(records, reservations, extra=[(epsilon, delta)],
                               delta=cap_delta, extra_events=events)
            if (not eps <= cap_epsilon * (1 + CAP_RTOL)) or (
                    not dlt <= cap_delta * (1 + CAP_RTOL) + 1e-300):
                return (cap_epsilon, cap_delta), (eps, dlt)
        return None, None

    def _refusal(self, what, epsilon, delta, cap, total):
        # A total of epsilon=inf alone would not say that the plan's own delta is what
        # no epsilon can cover (a default delta=1e-6 fit under a pure-DP cap).
        why = "" if not delta > cap[1] * (1 + CAP_RTOL) else (
            f": its delta alone is above the cap's delta={cap[1]:g}, which no epsilon "
            "covers" + (" (a cap with max_delta=0 admits fits with delta=0 only)"
                        if cap[1] == 0 else ""))
        return BudgetExceededError(
            f"{what} with budget (epsilon={epsilon:g}, delta={delta:g}) would bring the "
            f"total of {self!r} to (epsilon={total[0]:.6g}, delta={total[1]:.3g}), above "
            f"its cap (epsilon={cap[0]:g}, delta={cap[1]:g}){why}"
        )

    def check(self, epsilon, delta, *, estimator="a fit", events=None):
        """Raise :class:`BudgetExceededError` if spending ``(epsilon, delta)`` more
        (composed as ``events``, if given) would exceed a cap in force; reserve
        nothing (see :meth:`reserve`)."""
        epsilon, delta = planned(epsilon, delta)
        events = tuple(events or ()) or None
        with self._locked(exclusive=False):
            cap, total = self._exceeded_cap(self._records, list(self._reservations.values()),
                                            epsilon, delta, events)
        if cap is not None:
            raise self._refusal(estimator, epsilon, delta, cap, total)

    def reserve(self, epsilon, delta, *, estimator="a fit", events=None):
        """Check the cap (if any) and set ``(epsilon, delta)`` aside, atomically.

        Returns the reservation id. The reservation counts in every total until a
        fit record settles it, so a fit whose record is lost (a writer killed
        mid-line, a damaged line) still counts with its planned budget: ledgers
        without a cap reserve too. ``events``, the privacy events the fit will
        record, are what the cap check composes in place of the pair (tightly:
        ten fits at ``(1, 1e-6)`` compose to far less than 10); a record of other
        events that takes the total above the cap raises once it is written.
        """
        epsilon, delta = planned(epsilon, delta)
        events = tuple(events or ()) or None
        with self._locked(exclusive=True) as log:
            cap, total = self._exceeded_cap(self._records, list(self._reservations.values()),
                                            epsilon, delta, events)
            if cap is not None:
                raise self._refusal(estimator, epsilon, delta, cap, total)
            rid = uuid.uuid4().hex
            entry = {"kind": "reserve", "id": rid, "estimator": estimator,
                     "epsilon": epsilon, "delta": delta, "time": time.time(),
                     "pid": os.getpid()}
            if events is not None:
                entry["events"] = [event_to_dict(e) for e in events]
            log.append(entry)
            self._refresh(log)
            return rid

    def _release(self, reservation):
        """Cancel a reservation whose fit never started."""
        with self._locked(exclusive=True) as log:
            log.append({"kind": "release", "reservation": reservation,
                              "time": time.time(), "pid": os.getpid()})
            self._refresh(log)

    def record(self, estimator, events, epsilon_spent, delta_spent, *, params=None,
               reservation=None):
        """Append one fit's spend; return its :class:`LedgerRecord`.

        Most code calls :func:`report_fit` instead, which finds the ledgers of
        an estimator and fills these fields in. A fit that did not reserve its
        budget first is recorded even if it takes the total above the cap (it
        has run: its spend is real), and then raises ``BudgetExceededError``.
        """
        name = estimator if isinstance(estimator, str) else type(estimator).__name__
        if params is None:
            params = {} if isinstance(estimator, str) else scalar_params(estimator)
        epsilon_spent = spend(epsilon_spent, "epsilon_spent")
        delta_spent = spend(delta_spent, "delta_spent")
        rid = uuid.uuid4().hex
        payload = {
            "kind": "fit", "id": rid, "estimator": name, "params": params,
            "epsilon_spent": float(epsilon_spent), "delta_spent": float(delta_spent),
            "events": [event_to_dict(e) for e in events], "time": time.time(),
            "pid": os.getpid(), "reservation": reservation,
        }
        with self._locked(exclusive=True) as log:
            # The time of the reservation, not of the end of the fit: a record must not
            # tell how long its fit ran (a search's time tells its number of runs).
            reserved = self._reservations.get(reservation)
            if reserved is not None:
                payload["time"] = reserved.timestamp
            log.append(payload)
            self._refresh(log)
            record = next(r for r in reversed(self._records) if r.id == rid)
            # As JSON text, where the events' NaN fields compare equal.
            planned_events = None if reserved is None or not reserved.events else \
                json.dumps([event_to_dict(e) for e in reserved.events], sort_keys=True)
            if reservation is None or planned_events not in (
                    None, json.dumps(payload["events"], sort_keys=True)):
                cap, total = self._exceeded_cap(self._records,
                                                list(self._reservations.values()), 0.0, 0.0)
                if cap is not None:
                    raise BudgetExceededError(
                        f"{name} ran without reserving its budget first (or recorded "
                        "other events than it reserved) and took the "
                        f"total of {self!r} to (epsilon={total[0]:.6g}, "
                        f"delta={total[1]:.3g}), above its cap; its spend is recorded"
                    )
        return record

    # -- activation -------------------------------------------------------
    def activate(self):
        """Make this ledger receive every private fit of this process and of the
        processes it starts, until :meth:`deactivate` or the end of the ``with``
        block: ``with ledger.activate(): ...``."""
        from ._registry import activate

        return activate(self)

    def deactivate(self):
        """Undo the most recent :meth:`activate` of this ledger."""
        from ._registry import deactivate

        deactivate(self)


def restore_ledger(ledger_id, path, max_epsilon, max_delta):
    return PrivacyLedger._attach(ledger_id, path, max_epsilon, max_delta)


def _reinit_after_fork():
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()
    for ledger in list(_LIVE.values()):
        ledger._mutex = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
