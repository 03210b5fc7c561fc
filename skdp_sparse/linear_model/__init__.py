"""Private linear models."""

from ._logistic import DPSparseLogisticRegression
from ._output_perturbation import (
    DPOutputPerturbation,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
)
from ._regression import DPGreedyCDRegressor

__all__ = [
    "DPGreedyCDRegressor",
    "DPSparseLogisticRegression",
    "DPOutputPerturbation",
    "DPOutputPerturbationClassifier",
    "DPOutputPerturbationRegressor",
]
