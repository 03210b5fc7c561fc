"""A ledger store that lives with a dask cluster: a log on the scheduler.

The records are an append-only log of JSON lines held in the scheduler process
(one per ledger), read and appended by functions the scheduler runs
(``Client.run_on_scheduler``: each call runs whole on its event loop). Writers
exclude each other with a ``distributed.Lock`` named after the ledger, so a
ledger's check, reservation and record stay atomic across the client and every
worker, wherever their file systems are. A worker reaches the log through its own
client to the scheduler.

It fails closed: if the scheduler cannot be reached, or no longer holds the log
(it restarted), every access raises
:class:`~skdp_sparse.exceptions.LedgerUnreachableError`, and a fit that reports to
the ledger refuses to run. Fits of retried tasks are recorded once per attempt
(each attempt reserves and records); an attempt killed after reserving leaves its
reservation counted.
"""

from __future__ import annotations

import contextlib
import threading
import uuid

from ...exceptions import LedgerUnreachableError
from ._store import line_of

__all__ = ["DaskLedgerStore", "client_of"]

_PREFIX = "dask://"
# Logs held by this process when it is a scheduler: name -> bytearray.
_LOGS = {}
_LOGS_LOCK = threading.Lock()
# Clients this process opened to schedulers it is not a worker of.
_CLIENTS = {}


# Run on the scheduler ------------------------------------------------------
def _create_log(name):
    with _LOGS_LOCK:
        _LOGS.setdefault(name, bytearray())
    return True


def _has_log(name):
    return name in _LOGS


def _read_log(name, offset):
    log = _LOGS.get(name)
    if log is None:
        return None
    return bytes(log[offset:]), len(log)


def _append_log(name, line):
    log = _LOGS.get(name)
    if log is None:
        return False
    log.extend(line)
    return True


# The client side ------------------------------------------------------------
def client_of(scheduler):
    """A client to ``scheduler``: the worker's own inside a task, the default one
    in the client process, else a new connection (kept for later calls)."""
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise LedgerUnreachableError(
            "a privacy ledger on a dask cluster needs the dask extra") from exc
    with contextlib.suppress(ValueError):
        client = distributed.get_client()
        if client.scheduler.address == scheduler:
            return client
    if scheduler not in _CLIENTS:
        try:
            _CLIENTS[scheduler] = distributed.Client(scheduler, set_as_default=False,
                                                     timeout=10)
        except (OSError, TimeoutError) as exc:
            raise LedgerUnreachableError(
                f"cannot reach the scheduler {scheduler} that holds a privacy ledger"
            ) from exc
    return _CLIENTS[scheduler]


class DaskLedgerStore:
    """A privacy ledger's records on the scheduler of a dask cluster.

    Parameters
    ----------
    client : distributed.Client, optional
        A client of the cluster; default: the current client
        (``distributed.get_client()``).
    name : str, optional
        The log's name on the scheduler; default: a new unique name. A name whose log
        the scheduler already holds continues that log.

    Pass it to :class:`~skdp_sparse.privacy.ledger.PrivacyLedger` as ``store=``; then
    ``ledger.activate()`` makes every worker of the cluster, including workers that
    join later, report its fits to the ledger (a worker plugin activates it there).
    """

    def __init__(self, client=None, *, name=None):
        if client is None:
            import distributed

            client = distributed.get_client()
        self.scheduler = client.scheduler.address
        self.name = name or f"skdp_sparse-ledger-{uuid.uuid4().hex}"
        self._call(_create_log, self.name)

    @classmethod
    def at(cls, address):
        """The store of an address ``dask://<scheduler address>#<log name>``."""
        scheduler, _, name = address[len(_PREFIX):].rpartition("#")
        obj = cls.__new__(cls)
        obj.scheduler, obj.name = scheduler, name
        return obj

    @property
    def address(self):
        return f"{_PREFIX}{self.scheduler}#{self.name}"

    @property
    def identity(self):
        """What two handles to the same log share: its address."""
        return ("address", self.address)

    def _call(self, func, *args):
        client = client_of(self.scheduler)
        try:
            return client.run_on_scheduler(func, *args)
        except LedgerUnreachableError:
            raise
        except (OSError, TimeoutError) as exc:
            raise LedgerUnreachableError(
                f"cannot reach the privacy ledger {self.address}") from exc

    def exists(self):
        try:
            return bool(self._call(_has_log, self.name))
        except LedgerUnreachableError:
            return False

    @contextlib.contextmanager
    def locked(self, exclusive, create=False):
        # The scheduler's log exists from the store's creation on: nothing to create.
        session = _Session(self)
        if not exclusive:
            # A read of the append-only log is one scheduler call: atomic.
            yield session
            return
        import distributed

        client_of(self.scheduler)
        lock = distributed.Lock(self.name)
        try:
            acquired = lock.acquire(timeout=60)
        except (OSError, TimeoutError) as exc:
            raise LedgerUnreachableError(
                f"cannot lock the privacy ledger {self.address}") from exc
        if not acquired:
            raise LedgerUnreachableError(f"timed out locking the privacy ledger {self.address}")
        try:
            yield session
        finally:
            lock.release()


class _Session:
    def __init__(self, store):
        self.store = store

    def read_from(self, offset):
        got = self.store._call(_read_log, self.store.name, offset)
        if got is None:
            raise LedgerUnreachableError(
                f"the scheduler no longer holds the privacy ledger {self.store.address}")
        return got

    def append(self, payload):
        if not self.store._call(_append_log, self.store.name, line_of(payload)):
            raise LedgerUnreachableError(
                f"the scheduler no longer holds the privacy ledger {self.store.address}")
