"""Work a process runs outside a Numba kernel before compiling it.

Compiling a kernel on a new install's first fit costs tenths of a second, more than a
small first problem takes in NumPy or interpreted Python. A few kernels therefore have
a second way to the same bits (the same IEEE operations in the same order, tested for
equality) that a process takes until it has spent a budget of work on it; past the
budget it compiles (or loads from the cache) the kernel, so a process that calls it
often pays the compilation once and only a bounded time in the slower way.
"""

from __future__ import annotations

__all__ = ["FirstUseBudget"]


class FirstUseBudget:
    """``units`` of work a process may run outside ``kernel`` (a Numba dispatcher)."""

    def __init__(self, kernel, units):
        self.kernel = kernel
        self.left = units

    def take(self, units):
        """True, and the budget charged, if ``units`` more fit in it and the kernel is
        not compiled in this process yet (then it is the faster way)."""
        if units <= self.left and not self.kernel.signatures:
            self.left -= units
            return True
        return False
