"""A privacy ledger: every private fit reports what it spent, wherever it runs.

scikit-learn copies estimators freely: :func:`~sklearn.base.clone` deep-copies
every parameter, :class:`~sklearn.model_selection.GridSearchCV` fits clones in
worker processes, and fitted models are pickled and reloaded. An accountant kept
inside an estimator is copied along and each copy starts from zero, so a grid
search that fits 31 models records the spend of none of them. A
:class:`PrivacyLedger` is the opposite: one record shared by every copy.

* **Shared by reference.** ``copy.copy``, ``copy.deepcopy`` (hence ``clone``)
  return the ledger itself, so an estimator parameter ``ledger=...`` survives
  ``clone`` and passes scikit-learn's check that a clone's parameters are the
  very objects given to its constructor.
* **One store for all processes.** The records live in an append-only file of
  JSON lines, written under an exclusive file lock (``fcntl.flock``). Pickling a
  ledger carries only a handle to that file, so a fit in a joblib worker (loky
  processes included) appends to the same store and the parent sees it.
* **Activation.** ``with privacy_ledger() as ledger:`` (or ``ledger.activate()``)
  makes a ledger receive every private fit of the current process, in all its
  threads, and of the processes this process starts while the ledger is active
  (joblib/loky workers, ``multiprocessing``): those find it through a small
  registry file keyed by their parent's process id. Processes started by a
  worker, or on other machines (dask, ray), do not: pass the ledger as the
  estimator parameter ``ledger=`` there, which travels with the pickled
  estimator and is the robust choice for any parallel backend.
* **Budget cap.** ``PrivacyLedger(max_epsilon=..., max_delta=...)`` refuses a fit
  whose planned budget would take the composed total above the cap. Estimators
  ask first with :func:`check_budget`, before any private computation; the
  check and a reservation of the planned budget happen under one lock, so
  parallel fits cannot both pass on the same remaining budget. A reservation
  counts until the fit's record replaces it; a fit that fails after reserving
  keeps its reservation counted, since it may have released something.

Totals. :meth:`PrivacyLedger.spent` composes the fits either by basic
composition of their ``(epsilon_spent, delta_spent)`` (Dwork & Roth 2014,
Thm 3.16) or, tightly, by :func:`~skdp_sparse.privacy.accounting.compose` over
all the mechanism events the fits recorded (zCDP, GDP, RDP and advanced
composition, all valid under adaptive composition). Both treat every fit as a
computation on the same private data: a ledger does not know which rows a fit
saw, so the totals are upper bounds.

Hook. A private fit ends with ``report_fit(self, accountant, delta)`` and should
start, once its budget is validated, with ``check_budget(self, epsilon, delta)``;
:class:`~skdp_sparse.base.DPEstimatorMixin` does both for the library's
estimators.

Records hold only data-independent values: the estimator's class, its
scalar hyperparameters, the mechanism events and spends, a timestamp and the
process id. They never hold data or anything computed from it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import math
import numbers
import os
import tempfile
import threading
import time
import uuid
import warnings
import weakref
from dataclasses import dataclass

from ..exceptions import BudgetExceededError
from .accounting import PrivacyEvent, compose

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
    import msvcrt

__all__ = [
    "PrivacyLedger",
    "LedgerRecord",
    "Reservation",
    "privacy_ledger",
    "active_ledgers",
    "ledgers_for",
    "report_fit",
    "check_budget",
]

_FORMAT_VERSION = 1
# Relative slack when comparing a total with a cap: calibrated fits land on their
# target up to rounding, and k fits of epsilon/k must fit a cap of epsilon.
_CAP_RTOL = 1e-9


# --------------------------------------------------------------------------
# File locking
# --------------------------------------------------------------------------
@contextlib.contextmanager
def _locked_fd(path, exclusive):
    """An O_APPEND descriptor of ``path`` holding a shared or exclusive lock.

    ``flock`` locks belong to the open file description, so two threads of one
    process exclude each other as two processes do.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield fd
        else:  # pragma: no cover - Windows: one exclusive lock on a side file
            with _windows_lock(path + ".lock"):
                yield fd
    finally:
        os.close(fd)  # releases the flock


@contextlib.contextmanager
def _windows_lock(lock_path):  # pragma: no cover - Windows only
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.lseek(fd, 0, os.SEEK_SET)
                msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                break
            except OSError:  # LK_LOCK gives up after about 10 s; keep waiting
                continue
        try:
            yield
        finally:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    finally:
        os.close(fd)


def _read_from(fd, offset):
    size = os.fstat(fd).st_size
    chunks = []
    pos = offset
    while pos < size:
        chunk = os.pread(fd, min(1 << 20, size - pos), pos) if hasattr(os, "pread") \
            else _seek_read(fd, pos, size - pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks), size


def _seek_read(fd, pos, n):  # pragma: no cover - platforms without pread
    os.lseek(fd, pos, os.SEEK_SET)
    return os.read(fd, min(1 << 20, n))


def _append_line(fd, payload):
    """Append one JSON line; called with the exclusive lock held."""
    line = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
    size = os.fstat(fd).st_size
    # A writer killed mid-line leaves no newline; start a fresh line so the
    # damage stays confined to that one (skipped) line.
    if size and _last_byte(fd, size) != b"\n":
        line = b"\n" + line
    view = memoryview(line)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _last_byte(fd, size):
    if hasattr(os, "pread"):
        return os.pread(fd, 1, size - 1)
    return _seek_read(fd, size - 1, 1)  # pragma: no cover


# --------------------------------------------------------------------------
# Serialisation
# --------------------------------------------------------------------------
def _event_to_dict(event):
    d = dataclasses.asdict(event)
    if d["rdp"] is not None:
        d["rdp"] = list(d["rdp"])
    return d


def _event_from_dict(d):
    rdp = d.get("rdp")
    return PrivacyEvent(
        name=str(d["name"]),
        epsilon=float(d["epsilon"]),
        delta=float(d.get("delta", 0.0)),
        rho=None if d.get("rho") is None else float(d["rho"]),
        mu=None if d.get("mu") is None else float(d["mu"]),
        count=int(d.get("count", 1)),
        rdp=None if rdp is None else tuple(float(v) for v in rdp),
    )


def _scalar_params(estimator):
    """The estimator's hyperparameters that are plain scalars (JSON-safe)."""
    try:
        params = estimator.get_params(deep=False)
    except Exception:  # not an estimator: record no parameters
        return {}
    out = {}
    for name, value in params.items():
        if isinstance(value, bool) or value is None or isinstance(value, str):
            out[name] = value
        elif isinstance(value, numbers.Integral):
            out[name] = int(value)
        elif isinstance(value, numbers.Real):
            out[name] = float(value)
    return out


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
        ``time.time()`` when the record was written.
    pid : int
        Process that ran the fit.
    id : str
        Unique id of the record.
    reservation : str or None
        The budget reservation this fit settled, if its ledger has a cap.
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
    """Budget set aside by a fit that passed the cap check and has not reported yet."""

    estimator: str
    epsilon: float
    delta: float
    timestamp: float
    pid: int
    id: str


def _totals(records, reservations, extra=(), delta=None, composition="tight"):
    """Composed ``(epsilon, delta)`` of fits, reservations and extra planned spends."""
    planned = [(r.epsilon, r.delta) for r in reservations] + list(extra)
    basic_eps = sum(r.epsilon_spent for r in records) + sum(e for e, _ in planned)
    basic_delta = sum(r.delta_spent for r in records) + sum(d for _, d in planned)
    if composition == "basic":
        return basic_eps, basic_delta
    if composition != "tight":
        raise ValueError(f"composition must be 'tight' or 'basic', got {composition!r}")
    target = basic_delta if delta is None else float(delta)
    events = [e for r in records for e in r.composable_events()]
    events += [PrivacyEvent.approximate(e, d, name="planned") for e, d in planned]
    eps, dlt = compose(events, min(target, 1.0))
    if basic_delta <= target * (1 + 1e-12) and basic_eps <= eps:
        return basic_eps, basic_delta
    return eps, dlt


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
    max_epsilon, max_delta : float, optional
        Budget cap. A fit whose planned ``(epsilon, delta)``, composed with
        everything already recorded, would exceed ``max_epsilon`` at
        ``max_delta`` is refused with
        :class:`~skdp_sparse.exceptions.BudgetExceededError` before it runs.
        Give both or neither: the cap is a guarantee ``(max_epsilon, max_delta)``.

    Notes
    -----
    Copies (``copy.copy``, ``copy.deepcopy``, :func:`sklearn.base.clone` of an
    estimator holding it) are the ledger itself. A pickle holds a handle to the
    store: unpickled in the same process it is the same object; elsewhere it is
    a new object appending to the same file. The cap travels with the handle.

    Examples
    --------
    >>> from skdp_sparse.privacy.ledger import privacy_ledger
    >>> with privacy_ledger() as ledger:          # doctest: +SKIP
    ...     GridSearchCV(DPSparseLogisticRegression(), grid).fit(X, y)
    >>> ledger.spent()                             # doctest: +SKIP
    """

    def __init__(self, path=None, *, max_epsilon=None, max_delta=None):
        self._max_epsilon, self._max_delta = _check_caps(max_epsilon, max_delta)
        self._init_state()
        if path is None:
            fd, path = tempfile.mkstemp(prefix="skdp_sparse-ledger-", suffix=".jsonl")
            os.close(fd)
            self._path = os.path.abspath(path)
            weakref.finalize(self, _remove_owned_file, self._path, os.getpid())
        else:
            self._path = os.path.abspath(os.fspath(path))
        self._id = self._read_or_write_header()
        self._register()

    def _init_state(self):
        self._mutex = threading.RLock()
        self._reset_cache()

    def _reset_cache(self):
        self._offset = 0
        self._records = []
        self._reservations = {}
        self._settled = set()
        self._bad_lines = 0

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
            if not os.path.exists(path):
                warnings.warn(
                    f"the store of privacy ledger {ledger_id} ({path}) no longer exists; "
                    "it starts empty again. Give PrivacyLedger a path to keep a ledger "
                    "beyond the process that created it.",
                    RuntimeWarning,
                    stacklevel=3,
                )
                obj._write_header_if_empty(ledger_id)
            _LIVE[key] = obj
            return obj

    def _register(self):
        with _LIVE_LOCK:
            _LIVE.setdefault(self._key, self)

    def _write_header_if_empty(self, ledger_id):
        with _locked_fd(self._path, exclusive=True) as fd:
            if os.fstat(fd).st_size == 0:
                _append_line(fd, {"kind": "header", "v": _FORMAT_VERSION, "id": ledger_id,
                                  "created": time.time()})

    def _read_or_write_header(self):
        with _locked_fd(self._path, exclusive=True) as fd:
            data, _ = _read_from(fd, 0)
            first = data.split(b"\n", 1)[0]
            if first.strip():
                try:
                    header = json.loads(first)
                except ValueError:
                    header = None
                if not isinstance(header, dict) or header.get("kind") != "header":
                    raise ValueError(f"{self._path} is not a privacy ledger file")
                return str(header["id"])
            ledger_id = uuid.uuid4().hex
            _append_line(fd, {"kind": "header", "v": _FORMAT_VERSION, "id": ledger_id,
                              "created": time.time()})
            return ledger_id

    # -- identity ---------------------------------------------------------
    @property
    def _key(self):
        return (self._id, self._path, self._max_epsilon, self._max_delta)

    @property
    def id(self):
        """Identifier of the store (shared by every handle to the same file)."""
        return self._id

    @property
    def path(self):
        """The file holding the records."""
        return self._path

    @property
    def max_epsilon(self):
        return self._max_epsilon

    @property
    def max_delta(self):
        return self._max_delta

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (_restore_ledger, self._key)

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
    def _refresh(self, fd):
        """Parse the lines appended since the last read (the store is append-only)."""
        data, size = _read_from(fd, self._offset)
        if size < self._offset:  # replaced behind our back: start over
            self._reset_cache()
            data, size = _read_from(fd, 0)
        end = data.rfind(b"\n")
        if end < 0:
            return
        for line in data[: end + 1].splitlines():
            if not line.strip():
                continue
            try:
                self._ingest(json.loads(line))
            except (ValueError, KeyError, TypeError):
                self._bad_lines += 1
                warnings.warn(f"skipped a damaged line of privacy ledger {self._path}",
                              RuntimeWarning, stacklevel=4)
        self._offset += end + 1

    def _ingest(self, item):
        kind = item["kind"]
        if kind == "fit":
            rec = LedgerRecord(
                estimator=str(item["estimator"]),
                params=dict(item.get("params", {})),
                epsilon_spent=float(item["epsilon_spent"]),
                delta_spent=float(item["delta_spent"]),
                events=tuple(_event_from_dict(e) for e in item.get("events", [])),
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
                    str(item["estimator"]), float(item["epsilon"]), float(item["delta"]),
                    float(item["time"]), int(item["pid"]), str(item["id"]),
                )
        elif kind == "release":
            self._settled.add(item["reservation"])
            self._reservations.pop(item["reservation"], None)
        # "header" and kinds of later versions carry nothing to total.

    @contextlib.contextmanager
    def _locked(self, exclusive):
        with self._mutex, _locked_fd(self._path, exclusive) as fd:
            self._refresh(fd)
            yield fd

    def _snapshot(self):
        with self._locked(exclusive=False):
            return list(self._records), list(self._reservations.values())

    def records(self):
        """The fits recorded so far, oldest first (a list of :class:`LedgerRecord`)."""
        return self._snapshot()[0]

    def pending(self):
        """Reservations of fits that passed the cap check and have not reported."""
        return self._snapshot()[1]

    def __len__(self):
        return len(self.records())

    def events(self):
        """Every recorded mechanism event, and one (epsilon, delta) event per pending
        reservation: what :meth:`spent` composes."""
        records, pending = self._snapshot()
        events = [e for r in records for e in r.composable_events()]
        return events + [PrivacyEvent.approximate(p.epsilon, p.delta, name="reserved")
                         for p in pending]

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
        return _totals(records, pending, delta=delta, composition=composition)

    def summary(self, delta=None):
        """A text table of the fits and their basic and tight totals."""
        records, pending = self._snapshot()
        lines = [f"PrivacyLedger {self._path}: {len(records)} fits"
                 + (f", {len(pending)} pending" if pending else "")]
        if self._max_epsilon is not None:
            lines.append(f"cap: epsilon={self._max_epsilon:g} at delta={self._max_delta:g}")
        lines.append(f"{'#':>4}  {'estimator':<32} {'epsilon':>9} {'delta':>9} "
                     f"{'eps spent':>10} {'delta spent':>11} {'pid':>7}")
        for i, r in enumerate(records):
            lines.append(
                f"{i:>4}  {r.estimator[:32]:<32} {_fmt(r.epsilon):>9} {_fmt(r.delta):>9} "
                f"{r.epsilon_spent:>10.4g} {r.delta_spent:>11.3g} {r.pid:>7}"
            )
        for p in pending:
            lines.append(f"   -  {p.estimator[:32]:<32} {p.epsilon:>9.4g} {p.delta:>9.3g} "
                         f"{'(reserved)':>10} {'':>11} {p.pid:>7}")
        be, bd = _totals(records, pending, composition="basic")
        te, td = _totals(records, pending, delta=delta)
        lines.append(f"total, basic composition: epsilon={be:.6g}, delta={bd:.3g}")
        lines.append(f"total, tight composition: epsilon={te:.6g}, delta={td:.3g}")
        return "\n".join(lines)

    # -- writing ----------------------------------------------------------
    def _exceeds(self, records, reservations, epsilon, delta):
        if self._max_epsilon is None:
            return False, (0.0, 0.0)
        eps, dlt = _totals(records, reservations, extra=[(epsilon, delta)],
                           delta=self._max_delta)
        over = (not eps <= self._max_epsilon * (1 + _CAP_RTOL)) or (
            not dlt <= self._max_delta * (1 + _CAP_RTOL) + 1e-300
        )
        return over, (eps, dlt)

    def _refusal(self, what, epsilon, delta, total):
        return BudgetExceededError(
            f"{what} with budget (epsilon={epsilon:g}, delta={delta:g}) would bring the "
            f"total of {self!r} to (epsilon={total[0]:.6g}, delta={total[1]:.3g}), above "
            f"its cap (epsilon={self._max_epsilon:g}, delta={self._max_delta:g})"
        )

    def check(self, epsilon, delta, *, estimator="a fit"):
        """Raise :class:`BudgetExceededError` if spending ``(epsilon, delta)`` more
        would exceed the cap; reserve nothing (see :meth:`reserve`)."""
        if self._max_epsilon is None:
            return
        epsilon, delta = _planned(epsilon, delta)
        records, pending = self._snapshot()
        over, total = self._exceeds(records, pending, epsilon, delta)
        if over:
            raise self._refusal(estimator, epsilon, delta, total)

    def reserve(self, epsilon, delta, *, estimator="a fit"):
        """Check the cap and set ``(epsilon, delta)`` aside, atomically.

        Returns the reservation id (``None`` without a cap). The reservation
        counts in every total until a fit record settles it.
        """
        if self._max_epsilon is None:
            return None
        epsilon, delta = _planned(epsilon, delta)
        with self._locked(exclusive=True) as fd:
            over, total = self._exceeds(self._records, list(self._reservations.values()),
                                        epsilon, delta)
            if over:
                raise self._refusal(estimator, epsilon, delta, total)
            rid = uuid.uuid4().hex
            _append_line(fd, {"kind": "reserve", "id": rid, "estimator": estimator,
                              "epsilon": epsilon, "delta": delta, "time": time.time(),
                              "pid": os.getpid()})
            self._refresh(fd)
            return rid

    def _release(self, reservation):
        """Cancel a reservation whose fit never started."""
        with self._locked(exclusive=True) as fd:
            _append_line(fd, {"kind": "release", "reservation": reservation,
                              "time": time.time(), "pid": os.getpid()})
            self._refresh(fd)

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
            params = {} if isinstance(estimator, str) else _scalar_params(estimator)
        rid = uuid.uuid4().hex
        payload = {
            "kind": "fit", "id": rid, "estimator": name, "params": params,
            "epsilon_spent": float(epsilon_spent), "delta_spent": float(delta_spent),
            "events": [_event_to_dict(e) for e in events], "time": time.time(),
            "pid": os.getpid(), "reservation": reservation,
        }
        with self._locked(exclusive=True) as fd:
            _append_line(fd, payload)
            self._refresh(fd)
            record = next(r for r in reversed(self._records) if r.id == rid)
            if reservation is None and self._max_epsilon is not None:
                over, total = self._exceeds(self._records,
                                            list(self._reservations.values()), 0.0, 0.0)
                if over:
                    raise BudgetExceededError(
                        f"{name} ran without reserving its budget first and took the "
                        f"total of {self!r} to (epsilon={total[0]:.6g}, "
                        f"delta={total[1]:.3g}), above its cap; its spend is recorded"
                    )
        return record

    # -- activation -------------------------------------------------------
    def activate(self):
        """Make this ledger receive every private fit of this process and of the
        processes it starts, until :meth:`deactivate` or the end of the ``with``
        block: ``with ledger.activate(): ...``."""
        return _Activation(self)

    def deactivate(self):
        """Undo the most recent :meth:`activate` of this ledger."""
        with _STACK_LOCK:
            for i in range(len(_STACK) - 1, -1, -1):
                if _STACK[i] is self:
                    del _STACK[i]
                    _publish_locked()
                    return
        raise RuntimeError(f"{self!r} is not active")


def _fmt(value):
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"


def _check_caps(max_epsilon, max_delta):
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


def _planned(epsilon, delta):
    eps = float(epsilon)
    dlt = 0.0 if delta is None else float(delta)
    if math.isnan(eps) or eps < 0 or math.isnan(dlt) or dlt < 0:
        raise ValueError(f"invalid planned budget (epsilon={epsilon!r}, delta={delta!r})")
    return eps, dlt


def _restore_ledger(ledger_id, path, max_epsilon, max_delta):
    return PrivacyLedger._attach(ledger_id, path, max_epsilon, max_delta)


# --------------------------------------------------------------------------
# Activation: this process, and processes it starts
# --------------------------------------------------------------------------
_STACK = []
_STACK_LOCK = threading.RLock()


class _Activation:
    def __init__(self, ledger):
        self.ledger = ledger
        with _STACK_LOCK:
            _STACK.append(ledger)
            _publish_locked()

    def __enter__(self):
        return self.ledger

    def __exit__(self, *exc):
        self.ledger.deactivate()
        return False


@contextlib.contextmanager
def privacy_ledger(path=None, *, max_epsilon=None, max_delta=None):
    """Create a :class:`PrivacyLedger` and make it active for the ``with`` block.

    Every private fit of this process (any thread) and of the worker processes
    it starts meanwhile reports to it. The ledger stays readable after the block.

    >>> with privacy_ledger() as ledger:  # doctest: +SKIP
    ...     cross_val_score(DPSparseLogisticRegression(epsilon=1.0), X, y, n_jobs=2)
    >>> len(ledger), ledger.spent()       # doctest: +SKIP
    """
    ledger = PrivacyLedger(path, max_epsilon=max_epsilon, max_delta=max_delta)
    with ledger.activate():
        yield ledger


def _registry_dir():
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"skdp_sparse-ledgers-{uid}")


def _own_registry_dir(create):
    """The per-user registry directory, or None if it is missing or not ours."""
    d = _registry_dir()
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
    try:
        st = os.stat(d)
    except OSError:
        return None
    # Never trust (or write into) a directory another user planted at our path.
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return None
    return d


def _process_token(pid):
    """Identifies one process beyond its pid (which the OS recycles): boot id and
    start time on Linux; empty elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        start = stat[stat.rfind(b")") + 2:].split()[19].decode()
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}:{start}"
    except (OSError, IndexError):
        return ""


def _publish_locked():
    """Write (or remove) this process's registry entry; ``_STACK_LOCK`` is held."""
    d = _own_registry_dir(create=bool(_STACK))
    if d is None:
        if _STACK:
            warnings.warn("cannot publish the active privacy ledger to worker processes; "
                          "pass it as the estimators' ledger= parameter", RuntimeWarning,
                          stacklevel=4)
        return
    path = os.path.join(d, f"active-{os.getpid()}.json")
    if not _STACK:
        with contextlib.suppress(OSError):
            os.remove(path)
        return
    seen, handles = set(), []
    for ledger in _STACK:
        if ledger._key not in seen:
            seen.add(ledger._key)
            handles.append(list(ledger._key))
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as f:
        json.dump({"token": _process_token(os.getpid()), "ledgers": handles}, f)
    os.replace(tmp, path)


def _remove_registry_entry():
    with _STACK_LOCK:
        if _STACK:
            _STACK.clear()
            _publish_locked()


atexit.register(_remove_registry_entry)


def _inherited_ledgers():
    """Ledgers the parent process has active (read from its registry entry)."""
    ppid = os.getppid()
    if ppid <= 1:
        return []
    d = _own_registry_dir(create=False)
    if d is None:
        return []
    try:
        with open(os.path.join(d, f"active-{ppid}.json")) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    if data.get("token") != _process_token(ppid):
        return []  # a dead process's entry whose pid was reused
    out = []
    for handle in data.get("ledgers", []):
        with contextlib.suppress(OSError, ValueError, TypeError):
            out.append(_restore_ledger(*handle))
    return out


def _reinit_after_fork():
    global _STACK_LOCK, _LIVE_LOCK
    _STACK_LOCK = threading.RLock()
    _LIVE_LOCK = threading.Lock()
    for ledger in list(_LIVE.values()):
        ledger._mutex = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def active_ledgers():
    """Ledgers active for fits of this process: activated here, or inherited from
    the parent process. Duplicates (same store and cap) appear once."""
    with _STACK_LOCK:
        own = list(_STACK)
    found = {}
    for ledger in own + _inherited_ledgers():
        found.setdefault(ledger._key, ledger)
    return list(found.values())


# --------------------------------------------------------------------------
# Hooks for private fits
# --------------------------------------------------------------------------
_LOCAL = threading.local()
# accountant -> ids of the estimators already reported with it, so a fit that
# reports twice (through the mixin and by hand) is recorded once.
_REPORTED = weakref.WeakKeyDictionary()
_RESERVATIONS_ATTR = "_skdp_ledger_reservations"


@contextlib.contextmanager
def _reporting_suspended():
    """Fits in this block (this thread only) neither check nor report.

    For meta-algorithms that account for their inner fits themselves, such as
    the private hyperparameter search: recording each inner fit would both
    double-count and reveal how many fits ran.
    """
    depth = getattr(_LOCAL, "suspended", 0)
    _LOCAL.suspended = depth + 1
    try:
        yield
    finally:
        _LOCAL.suspended = depth


def _suspended():
    return getattr(_LOCAL, "suspended", 0) > 0


def ledgers_for(estimator):
    """The ledgers a fit of ``estimator`` reports to: its ``ledger`` parameter (if
    it has one) and the active ledgers."""
    found = {}
    own = getattr(estimator, "ledger", None)
    if own is not None:
        if not isinstance(own, PrivacyLedger):
            raise TypeError(f"ledger must be a PrivacyLedger or None, got {own!r}")
        found[own._key] = own
    for ledger in active_ledgers():
        found.setdefault(ledger._key, ledger)
    return list(found.values())


def _requested_budget(estimator):
    eps = getattr(estimator, "epsilon", None)
    dlt = getattr(estimator, "delta", None)
    eps = float(eps) if isinstance(eps, numbers.Real) and not isinstance(eps, bool) else None
    dlt = float(dlt) if isinstance(dlt, numbers.Real) and not isinstance(dlt, bool) else None
    return eps, dlt


def check_budget(estimator, epsilon, delta):
    """Refuse a fit before it runs if a capped ledger cannot afford it.

    Call at the start of ``fit``, once ``(epsilon, delta)`` is validated and
    before any private computation. For every ledger of the fit with a cap,
    checks the cap and reserves ``(epsilon, delta)`` under the store's lock; the
    fit's :func:`report_fit` settles the reservations. If one ledger refuses,
    the reservations already made for this fit are released and
    :class:`~skdp_sparse.exceptions.BudgetExceededError` propagates.
    """
    if _suspended():
        return
    capped = [led for led in ledgers_for(estimator) if led.max_epsilon is not None]
    if not capped:
        return
    name = type(estimator).__name__
    made = {}
    try:
        for ledger in capped:
            made[ledger._key] = (ledger, ledger.reserve(epsilon, delta, estimator=name))
    except BudgetExceededError:
        for ledger, rid in made.values():
            ledger._release(rid)
        raise
    with contextlib.suppress(AttributeError, TypeError):
        getattr(estimator, "__dict__", {})[_RESERVATIONS_ATTR] = made


def report_fit(estimator, accountant, delta):
    """Record a finished private fit in every ledger that applies to it.

    Parameters
    ----------
    estimator : estimator instance
        The fitted estimator; its class name and scalar hyperparameters are
        recorded, and its ``ledger`` parameter (if any) is one of the targets.
    accountant : PrivacyAccountant
        The fit's accountant; its events and ``spent(delta)`` are recorded.
    delta : float
        The delta the fit's spend is reported at.

    Returns
    -------
    list of LedgerRecord
        One per ledger written to (empty when no ledger applies).

    A fit reported twice with the same accountant is recorded once. A fit with
    ``epsilon=inf`` (noise switched off) is recorded as spending ``inf``.
    """
    reservations = {}
    if hasattr(estimator, "__dict__"):
        reservations = estimator.__dict__.pop(_RESERVATIONS_ATTR, None) or {}
    if _suspended():
        return []
    try:
        done = _REPORTED.setdefault(accountant, set())
    except TypeError:
        done = set()
    if id(estimator) in done:
        return []
    targets = {led._key: led for led in ledgers_for(estimator)}
    # A ledger that reserved for this fit gets its record even if it is no longer
    # active, so the reservation is settled rather than left counting.
    for key, (ledger, _) in reservations.items():
        targets.setdefault(key, ledger)
    if not targets:
        return []
    done.add(id(estimator))
    events = tuple(accountant.events)
    eps_spent, delta_spent = accountant.spent(delta)
    requested_eps, _ = _requested_budget(estimator)
    if requested_eps is not None and math.isinf(requested_eps):
        eps_spent = math.inf
    params = _scalar_params(estimator)
    out, errors = [], []
    for key, ledger in targets.items():
        rid = reservations[key][1] if key in reservations else None
        try:
            out.append(ledger.record(type(estimator).__name__, events, eps_spent,
                                     delta_spent, params=params, reservation=rid))
        except BudgetExceededError as exc:  # write to every ledger before raising
            errors.append(exc)
    if errors:
        raise errors[0]
    return out
