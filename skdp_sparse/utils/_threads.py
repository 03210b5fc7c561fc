"""One BLAS thread for the many small products of an iterative solver."""

from __future__ import annotations

from threadpoolctl import ThreadpoolController

__all__ = ["single_threaded_blas"]

# Discovering the loaded libraries costs milliseconds, more than a small fit: the
# controller is built once, on first use.
_CONTROLLER = None


def single_threaded_blas():
    """A context in which BLAS runs on one thread. Multithreaded BLAS on short vectors
    spends more time waking threads than computing, and on a busy machine its
    spin-waiting slows small solves tenfold."""
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1, user_api="blas")
