"""skdp_sparse: differentially private scikit-learn estimators for sparse data."""

from .exceptions import BudgetExceededError, PrivacyLeakWarning

__version__ = "0.1.0.dev0"

__all__ = ["PrivacyLeakWarning", "BudgetExceededError", "__version__"]
