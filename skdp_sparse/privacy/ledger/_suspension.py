"""Switching a thread's fits out of every ledger, for a meta-algorithm that accounts
for them itself. A private module: the switch lifts every cap for its block, so only
code that has reserved the inner fits' whole budget in their ledgers may use it."""

from __future__ import annotations

import contextlib
import threading

__all__ = ["suspended_reporting", "reporting_suspended"]

_LOCAL = threading.local()


@contextlib.contextmanager
def suspended_reporting():
    """Fits in this block (this thread only) neither reserve nor report.

    For meta-algorithms that account for their inner fits themselves, such as the
    private hyperparameter search: recording each inner fit would both
    double-count and reveal how many fits ran. Private: it switches every cap off
    for the block, so only a meta-algorithm that has reserved its inner fits'
    whole budget in their ledgers may use it.
    """
    depth = getattr(_LOCAL, "suspended", 0)
    _LOCAL.suspended = depth + 1
    try:
        yield
    finally:
        _LOCAL.suspended = depth


def reporting_suspended():
    """Whether fits of this thread are inside :func:`suspended_reporting`."""
    return getattr(_LOCAL, "suspended", 0) > 0
