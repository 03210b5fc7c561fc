"""Helpers for tests, audits and benchmarks (not needed to fit models).

The statistical privacy audits:

* :func:`halved_noise_epsilon`: the epsilon at which an estimator's own
  calibration adds exactly half its noise;
* :data:`AUDITS`, :func:`run_audit` and :func:`claim_epsilon`: one audit per
  solver and mechanism, through the estimators' public ``fit``, and the epsilon
  its bound is held to;
* :func:`epsilon_lower_bound_cp`: the Clopper-Pearson bound the audits use.

Also :mod:`skdp_sparse.testing.solver_api`, an array adapter over the
solver registry. Not part of the library's API for users; nothing here is
imported by the estimators.
"""

from . import _audits_screening  # noqa: F401  (registers the screening's audit)
from ._halving import halved_events, halved_noise_epsilon, noise_scale, subsampling_of
from .audits import (
    AUDITS,
    Audit,
    audit_seeds,
    claim_delta,
    claim_epsilon,
    fit_runner,
    halved_epsilon,
    run_audit,
)
from .bounds import epsilon_lower_bound_cp

__all__ = [
    "AUDITS",
    "Audit",
    "audit_seeds",
    "claim_delta",
    "claim_epsilon",
    "epsilon_lower_bound_cp",
    "fit_runner",
    "halved_epsilon",
    "halved_events",
    "halved_noise_epsilon",
    "noise_scale",
    "run_audit",
    "subsampling_of",
]
