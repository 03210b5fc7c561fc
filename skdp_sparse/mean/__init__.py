"""Differentially private mean of sparse, high-dimensional vectors."""

from ._estimator import DPSparseMeanEstimator

__all__ = ["DPSparseMeanEstimator"]
