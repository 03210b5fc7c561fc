"""Which ledgers a fit reports to: those activated in this process, and those its
ancestor processes have active (found through a per-user registry of small JSON
files keyed by process id)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import tempfile
import threading
import uuid

from ...exceptions import LedgerUnreachableError
from ...utils._warnings import warn
from ._ledger import PrivacyLedger, restore_ledger

__all__ = ["activate", "deactivate", "privacy_ledger", "active_ledgers",
           "activated_ledgers", "add_cluster_activation", "add_cluster_handles",
           "remove_cluster_handles"]

_STACK = []
_STACK_LOCK = threading.RLock()
# Activations published to the workers of a dask cluster: (ledger, client, plugin name).
_ON_CLUSTER = []


def activate(ledger):
    """Push ``ledger`` on this process's activation stack (see :meth:`PrivacyLedger.activate`)."""
    return _Activation(ledger)


def deactivate(ledger):
    """Remove the most recent activation of ``ledger``."""
    with _STACK_LOCK:
        for i in range(len(_STACK) - 1, -1, -1):
            if _STACK[i] is ledger:
                del _STACK[i]
                _publish_locked()
                break
        else:
            raise RuntimeError(f"{ledger!r} is not active")
        # Its last activation ends: every cluster it reached forgets it (clients made
        # meanwhile included); otherwise the most recent one does.
        mine = [i for i, entry in enumerate(_ON_CLUSTER) if entry[0] is ledger]
        gone = mine if not any(active is ledger for active in _STACK) else mine[-1:]
        removed = [_ON_CLUSTER[i] for i in gone]
        for i in reversed(gone):
            del _ON_CLUSTER[i]
    if removed:
        from ._dask_plugin import remove_activation

        for _, client, name in removed:
            remove_activation(client, name)


def activated_ledgers():
    """The ledgers activated in this process (not those inherited), each once."""
    with _STACK_LOCK:
        return list({id(ledger): ledger for ledger in _STACK}.values())


def add_cluster_activation(ledger, client, name):
    """Remember that plugin ``name`` activates ``ledger`` on ``client``'s cluster."""
    with _STACK_LOCK:
        _ON_CLUSTER.append((ledger, client, name))


#: The module distributed runs as each client starts (:mod:`._dask_preload`).
_CLIENT_PRELOAD = "skdp_sparse.privacy.ledger._dask_preload"


def _preload_in_new_clients():
    """Make dask clients created from now on activate this process's ledgers (a
    client preload); no-op without distributed."""
    import importlib.util

    if importlib.util.find_spec("distributed") is None:
        return
    import dask

    preloads = list(dask.config.get("distributed.client.preload", None) or [])
    if _CLIENT_PRELOAD not in preloads:
        dask.config.set({"distributed.client.preload": [*preloads, _CLIENT_PRELOAD]})


class _Activation:
    def __init__(self, ledger):
        self.ledger = ledger
        with _STACK_LOCK:
            _STACK.append(ledger)
            _publish_locked()
        _preload_in_new_clients()
        on_cluster = _activate_on_cluster(ledger)
        if on_cluster is not None:
            add_cluster_activation(ledger, *on_cluster)

    def __enter__(self):
        return self.ledger

    def __exit__(self, *exc):
        self.ledger.deactivate()
        return False


def _activate_on_cluster(ledger):
    """Activate ``ledger`` on the workers of the dask cluster this process uses, if
    any: ``(client, plugin name)``, or None."""
    import sys

    if "distributed" not in sys.modules and not ledger._path.startswith("dask://"):
        return None
    from ._dask_plugin import cluster_client_for, install_activation

    client = cluster_client_for(ledger)
    if client is None:
        return None
    return client, install_activation(client, [ledger._key])


# Ledgers a dask worker plugin activated in this process: plugin name -> handles.
_CLUSTER_HANDLES = {}


def add_cluster_handles(name, handles):
    with _STACK_LOCK:
        _CLUSTER_HANDLES[name] = list(handles)


def remove_cluster_handles(name):
    with _STACK_LOCK:
        _CLUSTER_HANDLES.pop(name, None)


def _cluster_ledgers():
    with _STACK_LOCK:
        handles = [h for hs in _CLUSTER_HANDLES.values() for h in hs]
    return [restore_ledger(*h) for h in handles]


@contextlib.contextmanager
def privacy_ledger(path=None, *, max_epsilon=None, max_delta=None):
    """Create a :class:`PrivacyLedger` and make it active for the ``with`` block.

    Every private fit of this process (any thread) and of the worker processes
    it starts meanwhile reports to it. The ledger stays readable after the block.

    Parameters
    ----------
    path, max_epsilon, max_delta
        As in :class:`PrivacyLedger`.

    Examples
    --------
    >>> with privacy_ledger() as ledger:  # doctest: +SKIP
    ...     cross_val_score(DPSparseLogisticRegression(epsilon=1.0, classes=[0, 1]), X, y,
    ...                     n_jobs=2)
    >>> len(ledger), ledger.spent()       # doctest: +SKIP
    """
    ledger = PrivacyLedger(path, max_epsilon=max_epsilon, max_delta=max_delta)
    with ledger.activate():
        yield ledger


def _registry_dirs():
    """Where the per-user registry may be: ``/tmp`` (on POSIX) and this process's
    temporary directory. An entry is written to each and read from each, so that a
    child whose ``TMPDIR`` differs from its parent's still finds the parent's
    ledgers."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    roots = (["/tmp"] if os.name == "posix" else []) + [tempfile.gettempdir()]
    dirs = [os.path.join(os.path.realpath(root), f"skdp_sparse-ledgers-{uid}")
            for root in roots]
    return list(dict.fromkeys(dirs))


def _own_registry_dir(d, create):
    """The per-user registry directory ``d``, or None if it is missing or not ours."""
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
    """Write (or remove) this process's registry entries; ``_STACK_LOCK`` is held."""
    seen, handles = set(), []
    for ledger in _STACK:
        if ledger._key not in seen:
            seen.add(ledger._key)
            handles.append(list(ledger._key))
    published = False
    for d in _registry_dirs():
        d = _own_registry_dir(d, create=bool(_STACK))
        if d is None:
            continue
        path = os.path.join(d, f"active-{os.getpid()}.json")
        if not _STACK:
            with contextlib.suppress(OSError):
                os.remove(path)
            continue
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump({"token": _process_token(os.getpid()), "ledgers": handles}, f)
            os.replace(tmp, path)
            published = True
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(tmp)
    if _STACK and not published:
        warn("cannot publish the active privacy ledger to worker processes; "
             "pass it as the estimators' ledger= parameter", RuntimeWarning)


def _remove_registry_entry():
    with _STACK_LOCK:
        if _STACK:
            _STACK.clear()
            _publish_locked()


atexit.register(_remove_registry_entry)


#: Ancestors a process looks through for active ledgers (a deeper chain of processes
#: starting processes is not expected).
MAX_ANCESTORS = 64
_ANCESTORS = {}


def _parent_of(pid):
    """The parent of process ``pid`` (Linux: from ``/proc``), or None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2:].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _ancestors():
    """This process's parent, its parent, ... up to init (the parent only where the
    OS does not say more): a forkserver's workers, and the processes a worker starts,
    find the ledgers of the process that started the chain. Read once per process
    (every fit asks); an ancestor that exits leaves an entry that no longer matches
    its token, or none."""
    key = (os.getpid(), os.getppid())
    if _ANCESTORS.get("key") != key:
        pid, out = os.getppid(), []
        while pid is not None and pid > 1 and len(out) < MAX_ANCESTORS:
            out.append(pid)
            pid = _parent_of(pid)
        _ANCESTORS.update(key=key, chain=out)
    return _ANCESTORS["chain"]


def _inherited_ledgers():
    """Ledgers the ancestor processes have active (read from their registry entries)."""
    dirs = [d for d in (_own_registry_dir(d, create=False) for d in _registry_dirs()) if d]
    return [ledger for pid in _ancestors() for d in dirs for ledger in _entry_ledgers(d, pid)]


def _entry_ledgers(d, pid):
    """The ledgers process ``pid`` has active, from its entry in registry ``d``."""
    try:
        with open(os.path.join(d, f"active-{pid}.json")) as f:
            text = f.read()
    except OSError:
        return []  # no entry: that process has no active ledger
    try:
        data = json.loads(text)
    except ValueError:
        # Entries are replaced atomically, so a damaged one was damaged after it was
        # written: the ledgers it names cannot be known, and fits refuse to run.
        raise LedgerUnreachableError(
            f"the registry entry of the active privacy ledgers of process {pid} "
            f"({d}) is damaged, so fits here cannot know which ledgers to report to "
            "and refuse to run. Deactivate the ledger there, or remove the entry "
            "knowingly.") from None
    if data.get("token") != _process_token(pid):
        return []  # a dead process's entry whose pid was reused
    out = []
    for handle in data.get("ledgers", []):
        with contextlib.suppress(OSError, ValueError, TypeError):
            out.append(restore_ledger(*handle))
    return out


def _reinit_after_fork():
    global _STACK_LOCK
    _STACK_LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def active_ledgers():
    """Ledgers active for fits of this process: activated here, or inherited from
    an ancestor process. Handles to one store (whatever their caps) appear once."""
    with _STACK_LOCK:
        own = list(_STACK)
    found = {}
    for ledger in own + _inherited_ledgers() + _cluster_ledgers():
        found.setdefault(ledger.store_key, ledger)
    return list(found.values())

