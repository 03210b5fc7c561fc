"""Warnings and errors raised by skdp_sparse."""


class PrivacyLeakWarning(UserWarning):
    """A computation used the private data in a way that is not covered by the
    privacy guarantee, for example a bound estimated from the training data.
    """


class BudgetExceededError(RuntimeError):
    """A fit would spend more privacy budget than a ledger allows."""


class SpendDeviationError(RuntimeError):
    """A computation spent other privacy than it planned from public values.

    ``privacy_events`` holds what it ran, which the fit records in its ledgers in
    place of the plan.
    """

    def __init__(self, message, privacy_events=()):
        super().__init__(message)
        self.privacy_events = tuple(privacy_events)


class LedgerUnreachableError(RuntimeError):
    """A private fit cannot reach a ledger it must report to, so it refuses to run.

    Raised before anything private is computed: the ledger's store (a file that
    does not exist in this process's file system, a scheduler that cannot be
    reached or no longer holds the log) is missing. A fit never runs unrecorded.
    """
