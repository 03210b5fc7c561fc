"""Data views: what a solver may ask of the private rows.

Solvers never index rows themselves; they ask a view for the clipped forms and
statistics they need. :class:`LocalData` holds the rows in this process; a view
over distributed row blocks plugs in at the same seam.
"""

from ._local import LocalData

__all__ = ["LocalData"]
