"""Warnings and errors raised by skdp_sparse."""


class PrivacyLeakWarning(UserWarning):
    """A computation used the private data in a way that is not covered by the
    privacy guarantee, for example a bound estimated from the training data.
    """


class BudgetExceededError(RuntimeError):
    """A fit would spend more privacy budget than a ledger allows."""
