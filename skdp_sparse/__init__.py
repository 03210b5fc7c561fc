"""skdp_sparse: differentially private scikit-learn estimators for sparse data."""

from .exceptions import BudgetExceededError, PrivacyLeakWarning, SpendDeviationError
from .linear_model import (
    DPGreedyCDRegressor,
    DPOutputPerturbation,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
    DPSparseLogisticRegression,
)
from .mean import DPSparseMeanEstimator
from .model_selection import PrivateHyperparameterSearch
from .preprocessing import BoundedScaler, DPStandardScaler
from .privacy.ledger import PrivacyLedger, privacy_ledger

__version__ = "0.1.0.dev0"

__all__ = [
    "DPGreedyCDRegressor",
    "DPOutputPerturbation",
    "DPOutputPerturbationClassifier",
    "DPOutputPerturbationRegressor",
    "DPSparseLogisticRegression",
    "DPSparseMeanEstimator",
    "PrivateHyperparameterSearch",
    "BoundedScaler",
    "DPStandardScaler",
    "PrivacyLedger",
    "privacy_ledger",
    "PrivacyLeakWarning",
    "BudgetExceededError",
    "SpendDeviationError",
    "__version__",
]
