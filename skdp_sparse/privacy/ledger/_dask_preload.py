"""A dask client preload: a client created while ledgers are active activates them on
its cluster's workers, as activating them with a client current does.

:func:`~skdp_sparse.privacy.ledger.activate` adds this module to dask's
``distributed.client.preload``; distributed runs :func:`dask_setup` as each new client
starts, before the client is handed back, so no task can reach a worker first.
"""

from __future__ import annotations

import inspect

__all__ = ["dask_setup"]


async def dask_setup(client):
    from ._dask_plugin import new_activation
    from ._dask_store import DaskLedgerStore
    from ._registry import activated_ledgers, add_cluster_activation

    address = client.scheduler.address
    for ledger in activated_ledgers():
        store = ledger._store
        if isinstance(store, DaskLedgerStore) and store.scheduler != address:
            continue  # a ledger kept on another cluster is activated through its own
        plugin, name = new_activation([ledger._key])
        # Inside the client's start, on its event loop: the call is a coroutine.
        registered = client.register_plugin(plugin, name=name)
        if inspect.isawaitable(registered):
            await registered
        add_cluster_activation(ledger, client, name)
