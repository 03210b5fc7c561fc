"""The ledger's stores: append-only logs of JSON lines, written under a lock.

A store has an ``address`` (what a pickled ledger carries), ``exists()``, and
``locked(exclusive)``, a context manager giving a session with ``read_from(offset)
-> (bytes, size)`` and ``append(payload)``. :class:`FileStore` is a local file
under ``flock``; :class:`~._dask_store.DaskLedgerStore` a log on a dask
scheduler. :func:`store_at` finds the store of an address.

``flock`` locks belong to the open file description, so two threads of one process
exclude each other as two processes do. A writer killed mid-line damages only that
line, which readers skip.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import numbers
import os
import threading

from ..accounting import PrivacyEvent
from ..pld import GaussianPLD

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
    import msvcrt

FORMAT_VERSION = 1

# File locking
# --------------------------------------------------------------------------
@contextlib.contextmanager
def locked_fd(path, exclusive, create=False):
    """An O_APPEND descriptor of ``path`` holding a shared or exclusive lock.

    ``flock`` locks belong to the open file description, so two threads of one
    process exclude each other as two processes do. Only ``create`` makes a missing
    file (``FileNotFoundError`` otherwise): a ledger's file is made once, with its
    header, and a file deleted later is never made again empty.
    """
    flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
    with _FD_LOCK:
        fd = os.open(path, flags, 0o600)
        _OPEN_LOCK_FDS.add(fd)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield fd
        else:  # pragma: no cover - Windows: one exclusive lock on a side file
            with _windows_lock(path + ".lock"):
                yield fd
    finally:
        with _FD_LOCK:
            _OPEN_LOCK_FDS.discard(fd)
            os.close(fd)  # releases the flock


# Descriptors of ledger files open under (or waiting for) a lock. A process forked
# while another thread holds one inherits it, and with it the lock, which then outlives
# the thread that took it and blocks the child's own locking for ever: the child
# closes its copies (the parent's lock stays with the parent's descriptor). Opening
# and closing hold _FD_LOCK, which a fork takes first, so the set is exact at a fork.
_OPEN_LOCK_FDS = set()
_FD_LOCK = threading.Lock()


def _close_inherited_lock_fds():
    global _FD_LOCK
    for fd in list(_OPEN_LOCK_FDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _OPEN_LOCK_FDS.clear()
    _FD_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=lambda: _FD_LOCK.acquire(),
                        after_in_parent=lambda: _FD_LOCK.release(),
                        after_in_child=_close_inherited_lock_fds)


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


def read_from(fd, offset):
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


def append_line(fd, payload):
    """Append one JSON line; called with the exclusive lock held."""
    line = line_of(payload)
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


class FileStore:
    """A ledger's records in a local file (JSON lines under ``flock``)."""

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))

    @property
    def address(self):
        return self.path

    @property
    def identity(self):
        """What two handles to the same file share, whatever the spelling of its path
        (symbolic or hard links): its device and inode, or its path where it cannot
        be read."""
        try:
            st = os.stat(self.path)
        except OSError:
            return ("path", self.path)
        return ("file", st.st_dev, st.st_ino)

    def exists(self):
        return os.path.exists(self.path)

    @contextlib.contextmanager
    def locked(self, exclusive, create=False):
        with locked_fd(self.path, exclusive, create) as fd:
            yield _FileSession(fd)


class _FileSession:
    def __init__(self, fd):
        self.fd = fd

    def read_from(self, offset):
        return read_from(self.fd, offset)

    def append(self, payload):
        append_line(self.fd, payload)


def store_at(address):
    """The store an address names: ``dask://...`` a scheduler's log, else a file."""
    if str(address).startswith("dask://"):
        from ._dask_store import DaskLedgerStore

        return DaskLedgerStore.at(address)
    return FileStore(address)


def line_of(payload):
    """One JSON line of a payload, as the stores write it."""
    return json.dumps(payload, separators=(",", ":")).encode() + b"\n"


# --------------------------------------------------------------------------
# Serialisation
# --------------------------------------------------------------------------
def event_to_dict(event):
    d = dataclasses.asdict(event)
    if d["rdp"] is not None:
        d["rdp"] = list(d["rdp"])
    return d


def event_from_dict(d):
    rdp = d.get("rdp")
    pld = d.get("pld")
    if pld is not None:
        pld = GaussianPLD(str(pld["sampling"]), float(pld["sampling_rate"]),
                          float(pld["noise_multiplier"]), bool(pld.get("lattice", False)))
    return PrivacyEvent(
        name=str(d["name"]),
        epsilon=float(d["epsilon"]),
        delta=float(d.get("delta", 0.0)),
        rho=None if d.get("rho") is None else float(d["rho"]),
        mu=None if d.get("mu") is None else float(d["mu"]),
        count=int(d.get("count", 1)),
        rdp=None if rdp is None else tuple(float(v) for v in rdp),
        pld=pld,
    )


def scalar_params(estimator):
    """The estimator's hyperparameters that are plain scalars (JSON-safe)."""
    try:
        params = estimator.get_params(deep=False)
    except Exception:  # not an estimator: record no parameters
        return {}
    out = {}
    for name, value in params.items():
        if name == "random_state":
            # A seed lets whoever reads the ledger regenerate the fit's noise.
            continue
        if isinstance(value, bool) or value is None or isinstance(value, str):
            out[name] = value
        elif isinstance(value, numbers.Integral):
            out[name] = int(value)
        elif isinstance(value, numbers.Real):
            out[name] = float(value)
    return out
