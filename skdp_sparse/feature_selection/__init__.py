"""Private feature selection: the top-k columns of a matrix by a noisy score."""

from ._select_k_best import DPSelectKBest

__all__ = ["DPSelectKBest"]
