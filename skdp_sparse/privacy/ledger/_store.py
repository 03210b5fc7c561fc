"""The ledger's store: an append-only file of JSON lines, written under a file lock.

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
def locked_fd(path, exclusive):
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
        if isinstance(value, bool) or value is None or isinstance(value, str):
            out[name] = value
        elif isinstance(value, numbers.Integral):
            out[name] = int(value)
        elif isinstance(value, numbers.Real):
            out[name] = float(value)
    return out
