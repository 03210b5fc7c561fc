"""A privacy ledger: every private fit reports what it spent, wherever it runs.

scikit-learn copies estimators freely: :func:`~sklearn.base.clone` deep-copies
every parameter, :class:`~sklearn.model_selection.GridSearchCV` fits clones in
worker processes, and fitted models are pickled and reloaded. An accountant kept
inside an estimator is copied along and each copy starts from zero, so a grid
search that fits 31 models records the spend of none of them. A
:class:`PrivacyLedger` is the opposite: one record shared by every copy.

* **Shared by reference.** ``copy.copy``, ``copy.deepcopy`` (hence ``clone``)
  return the ledger itself, so an estimator parameter ``ledger=...`` survives
  ``clone`` and passes scikit-learn's check that a clone's parameters are the
  very objects given to its constructor.
* **One store for all processes.** The records live in an append-only file of
  JSON lines, written under an exclusive file lock (``fcntl.flock``). Pickling a
  ledger carries only a handle to that file, so a fit in a joblib worker (loky
  processes included) appends to the same store and the parent sees it.
* **Activation.** ``with privacy_ledger() as ledger:`` (or ``ledger.activate()``)
  makes a ledger receive every private fit of the current process, in all its
  threads, and of the processes this process starts while the ledger is active
  (joblib/loky workers, ``multiprocessing`` with any start method) and of the
  processes those start: they find it through a small registry file keyed by
  their ancestors' process ids (beyond the parent on Linux only). Processes on
  other machines (dask, ray) do not: pass the ledger as the estimator parameter
  ``ledger=`` there, which travels with the pickled estimator and is the robust
  choice for any parallel backend.
* **On a dask cluster.** ``PrivacyLedger(store=DaskLedgerStore(client))`` keeps the
  records on the cluster's scheduler. Activating a ledger in a process that has a
  dask client activates it on every worker of the cluster, those that join later
  too (a worker plugin), so fits sent there (``joblib.parallel_config(backend=
  "dask")``) report to it. A worker that cannot reach the ledger's store (a file
  its file system does not have) refuses to fit: ledgers **fail closed**, raising
  :class:`~skdp_sparse.exceptions.LedgerUnreachableError` rather than letting a fit
  run unrecorded.
* **Budget cap.** ``PrivacyLedger(max_epsilon=..., max_delta=...)`` refuses a fit
  whose planned budget would take the composed total above the cap, before any
  private computation; the check and a reservation of the planned budget happen
  under one lock, so parallel fits cannot both pass on the same remaining budget.
  A reservation counts until the fit's record replaces it. A fit that fails after
  reserving releases it if it drew no randomness, and records its planned spend
  otherwise, since it may have released something (:mod:`.hooks`). The cap is
  written to the store and binds every handle to it, later ones opened without a
  cap included: a cap can be tightened, never lifted.

Totals. :meth:`PrivacyLedger.spent` composes the fits either by basic
composition of their ``(epsilon_spent, delta_spent)`` (Dwork & Roth 2014,
Thm 3.16) or, tightly, by :func:`~skdp_sparse.privacy.accounting.compose` over
all the mechanism events the fits recorded (zCDP, GDP, RDP and advanced
composition, all valid under adaptive composition). Both treat every fit as a
computation on the same private data: a ledger does not know which rows a fit
saw, so the totals are upper bounds.

Hooks. :class:`~skdp_sparse.base.DPEstimatorMixin`'s fit sequence reserves the
planned budget and records the spend through :func:`fit_budget`; estimators that run
their own sequence call :func:`check_budget` before and :func:`report_fit` after.

Records hold only data-independent values: the estimator's class, its
scalar hyperparameters, the mechanism events and spends, a timestamp and the
process id. They never hold data or anything computed from it.
"""

from ._dask_store import DaskLedgerStore
from ._ledger import PrivacyLedger
from ._records import LedgerRecord, Reservation
from ._registry import active_ledgers, privacy_ledger
from .hooks import (
    FitBudget,
    check_budget,
    fit_budget,
    ledgers_for,
    report_fit,
)

__all__ = [
    "PrivacyLedger",
    "DaskLedgerStore",
    "LedgerRecord",
    "Reservation",
    "privacy_ledger",
    "active_ledgers",
    "ledgers_for",
    "FitBudget",
    "fit_budget",
    "check_budget",
    "report_fit",
]
