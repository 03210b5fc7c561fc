"""skdp_sparse: differentially private scikit-learn estimators for sparse data."""

from .exceptions import BudgetExceededError, PrivacyLeakWarning
from .linear_model import (
    DPGreedyCDRegressor,
    DPOutputPerturbation,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
    DPSparseLogisticRegression,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "DPGreedyCDRegressor",
    "DPOutputPerturbation",
    "DPOutputPerturbationClassifier",
    "DPOutputPerturbationRegressor",
    "DPSparseLogisticRegression",
    "PrivacyLeakWarning",
    "BudgetExceededError",
    "__version__",
]
