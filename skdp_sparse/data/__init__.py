"""Data views: what a solver may ask of the private rows.

Solvers never index rows themselves; they ask a view for the clipped forms and
statistics they need. :class:`LocalData` holds the rows in this process;
:class:`DaskData` holds them as row blocks of a dask array on a cluster's workers,
and answers the same :meth:`~LocalData.row_sum` by mapping over the blocks.
"""

from ._dask import DaskData, is_dask_array
from ._local import LocalData

__all__ = ["LocalData", "DaskData", "is_dask_array"]
