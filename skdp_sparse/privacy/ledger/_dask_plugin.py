"""Ledgers made active on every worker of a dask cluster (imported only where a
dask client exists)."""

from __future__ import annotations

import contextlib
import uuid

import distributed
from distributed import WorkerPlugin

from ._dask_store import DaskLedgerStore, client_of

__all__ = ["LedgerActivation", "cluster_client_for", "install_activation",
           "new_activation", "remove_activation"]


# Activation on the workers ---------------------------------------------------
class LedgerActivation(WorkerPlugin):
    """Makes ledgers active in every worker of a cluster, those that join later too.

    The plugin carries only the ledgers' handles; a worker resolves them when a fit
    asks (never on its event loop), so a handle whose store the worker cannot reach
    makes the fit refuse (:class:`~skdp_sparse.exceptions.LedgerUnreachableError`).
    """

    def __init__(self, handles, name):
        self.handles = [tuple(h) for h in handles]
        self.name = name

    def setup(self, worker):
        from ._registry import add_cluster_handles

        add_cluster_handles(self.name, self.handles)

    def teardown(self, worker):
        from ._registry import remove_cluster_handles

        remove_cluster_handles(self.name)


def cluster_client_for(ledger):
    """The dask client whose workers must see ``ledger`` activated: its scheduler's
    for a ledger kept on a cluster, else the current client if this process has one
    (so the fits it sends to workers report too), else None."""
    if isinstance(ledger._store, DaskLedgerStore):
        return client_of(ledger._store.scheduler)
    try:
        return distributed.get_client()
    except ValueError:
        return None


def new_activation(handles):
    """A :class:`LedgerActivation` of ``handles`` under a name of its own."""
    name = f"skdp_sparse-ledgers-{uuid.uuid4().hex}"
    return LedgerActivation(handles, name), name


def install_activation(client, handles):
    """Register a :class:`LedgerActivation` on ``client``'s cluster; returns its name."""
    plugin, name = new_activation(handles)
    client.register_plugin(plugin, name=name)
    return name


def remove_activation(client, name):
    with contextlib.suppress(Exception):  # the cluster may be gone already
        client.unregister_worker_plugin(name)
