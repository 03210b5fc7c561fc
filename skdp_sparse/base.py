"""Behaviour shared by every private estimator: checks of the privacy
hyperparameters, the record of what a fit spent, and scikit-learn tags."""

import math

from .privacy.accounting import PrivacyAccountant
from .privacy.ledger import check_budget, report_fit

__all__ = ["DPEstimatorMixin"]


class DPEstimatorMixin:
    """Mixin for estimators whose ``fit`` is differentially private.

    A fit builds a :class:`~skdp_sparse.privacy.accounting.PrivacyAccountant`,
    records every mechanism call in it and ends with :meth:`_record_spend`,
    which sets the attributes below and reports the fit to any active
    :class:`~skdp_sparse.privacy.ledger.PrivacyLedger`.

    Attributes
    ----------
    epsilon_spent_ : float
        Composed epsilon of the fit (replace-one neighbours); ``inf`` when noise was off.
    delta_spent_ : float
        Composed delta of the fit.
    privacy_events_ : tuple of PrivacyEvent
        The mechanism calls the fit made, for audits and ledgers.
    """

    def _record_spend(self, accountant: PrivacyAccountant, delta: float):
        if math.isinf(getattr(self, "epsilon", 1.0)):
            # Noise was switched off: nothing is private, whatever was recorded.
            self.epsilon_spent_, self.delta_spent_ = math.inf, delta
        else:
            self.epsilon_spent_, self.delta_spent_ = accountant.spent(delta)
        self.privacy_events_ = tuple(accountant.events)
        report_fit(self, accountant, delta)
        return self

    def _check_budget(self, epsilon, delta):
        """Refuse the fit before any private work if an active, capped ledger cannot afford it."""
        check_budget(self, epsilon, delta)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
