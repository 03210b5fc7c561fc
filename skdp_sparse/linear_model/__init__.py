"""Private linear models."""

from ._coordinate_descent import DPGreedyCDRegressor, DPSparseLogisticRegression
from ._output_perturbation import (
    DPOutputPerturbation,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
    fit_output_perturbation,
)

__all__ = [
    "DPGreedyCDRegressor",
    "DPSparseLogisticRegression",
    "DPOutputPerturbation",
    "DPOutputPerturbationClassifier",
    "DPOutputPerturbationRegressor",
    "fit_output_perturbation",
]
