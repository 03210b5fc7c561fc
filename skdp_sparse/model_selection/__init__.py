"""Model selection under differential privacy.

:class:`PrivateHyperparameterSearch` selects hyperparameters with a total
``(epsilon, delta)`` guarantee for the whole search (Papernot & Steinke 2022).
To see what a plain :class:`~sklearn.model_selection.GridSearchCV` of private
estimators spends, use a :class:`~skdp_sparse.privacy.ledger.PrivacyLedger`.
"""

from ._search import PrivateHyperparameterSearch

__all__ = ["PrivateHyperparameterSearch"]
