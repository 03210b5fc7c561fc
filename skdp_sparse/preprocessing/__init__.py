"""Preprocessing for private pipelines: scalers to public ranges and private scalers.

* :class:`BoundedScaler` clips each feature to a public range and rescales it; it
  learns nothing from the data and costs no privacy.
* :class:`DPStandardScaler` centres and scales each feature by a differentially
  private estimate of its mean and standard deviation, within public ranges.

Both give the public bounds of their output (``output_bounds()``), which the
private estimators that follow take as ``feature_bound`` and ``norm_bound``;
:func:`one_hot_bounds` gives those of a ``OneHotEncoder`` with public categories.
:func:`diagnose_bounds` (not private) tells whether bounds would clip most rows of data
a user may inspect.
"""

from ._bounded import BoundedScaler
from ._bounds import OutputBounds
from ._diagnosis import BoundsDiagnosis, diagnose_bounds
from ._one_hot import OneHotBounds, one_hot_bounds
from ._standard import DPStandardScaler

__all__ = ["BoundedScaler", "BoundsDiagnosis", "DPStandardScaler", "OneHotBounds",
           "OutputBounds", "diagnose_bounds", "one_hot_bounds"]
