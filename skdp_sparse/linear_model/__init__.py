"""Private linear models."""

from ._coordinate_descent import DPGreedyCDRegressor, DPSparseLogisticRegression

__all__ = ["DPGreedyCDRegressor", "DPSparseLogisticRegression"]
