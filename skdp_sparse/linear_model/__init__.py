"""Private linear models."""

from ._coordinate_descent import (
    DPGreedyCDRegressor,
    DPSparseLogisticRegression,
    default_greedy_iterations,
    resolve_solver,
)
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
    "default_greedy_iterations",
    "resolve_solver",
]
