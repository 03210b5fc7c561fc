"""Statistical privacy audits of every estimator, through its public ``fit``.

Each :class:`Audit` names a worst-case pair of replace-one neighbouring datasets
``(S, S')``, a scalar statistic of the fitted estimator, the budget the estimator
is fitted with and the *claim* the audit's bound is held to. :func:`run_audit`
fits the estimator ``n_runs`` times on each dataset (fresh seeds) and turns
threshold tests on the statistic into a Clopper-Pearson lower bound on epsilon
(:func:`~skdp_sparse.testing.bounds.epsilon_lower_bound_cp`, which picks the
threshold by its own Clopper-Pearson bound on half of the runs):

* ``noise="honest"``: the estimator fitted at its budget. The bound must stay at
  or below the claim; a bound above it is a privacy bug (up to the audit's
  confidence, 99%).
* ``noise="halved"``: the same estimator fitted at the epsilon at which its own
  calibration adds exactly half the noise (:func:`halved_epsilon`,
  :func:`~skdp_sparse.testing.halved_noise_epsilon`), audited against the same
  claim. The bound must exceed the claim by the audit's margin (1.3): this is what
  shows that the audit sees a noise scale that is off by two.

The runs go through a *runner* ``run(epsilon, side, seeds) -> statistics``
(:func:`fit_runner` by default: one ``fit`` per seed), so that a faster entry
point can replace it without touching the audits.

Claims. A fit's budget bounds every pair and every mechanism through a composition
theorem (zCDP for the floating-point-safe Gaussian releases, Renyi DP for subsampled
and selected ones), whose conversion to ``(epsilon, delta)`` is loose: at the budgets
where a few thousand runs resolve epsilon, a fit with half its noise is often still
within its budget on the worst-case pair. What a fit releases on that pair, though, is
one mechanism whose privacy profile is known exactly: a Gaussian or Laplace release
moved by its full sensitivity, one channel of a joint release, a Poisson mixture, a
greedy step, the best of the search's runs. The claim (:func:`claim_epsilon`, from
:mod:`._claims`) is that exact profile at ``delta`` (0.2, where events of probability
about 0.2 decide it), with the noise ratio read from the events the fit records
(``privacy_events_``) and the documented calibration, never from the noise scale the
code passes around. It is at most the fit's spend (the tests check it), and a fit whose
noise is below what its events state exceeds it. Pure-DP fits (``delta = 0``) are
claimed at ``delta = 0.2`` too (``claim_delta``): their Laplace profile there,
``epsilon + 2 log(0.8)``, takes a fifth of the runs a claim at ``delta = 0`` needs.

Sizes. The table gives, for each audit, the fit's budget, the claim, the runs a side,
and the bound as a multiple of the claim: the median and the 99% quantile of the
honest fit, the 1% quantile and the median of the fit with half the noise, over 300
replays of the audit on random subsets of a pool of real fits
(:mod:`skdp_sparse.testing.design`, ``--reps 300``: pools of five times the audit's
runs a side). Every margin asserted is 1.3 (1.25 for ``screening``), so every audit
passes with room on the 1% of seed sets where it does worst. Where the noise is
calibrated by the exact profile of its Gaussian (``sgd``, ``phased_sgd``, the Poisson
mixture of ``sgd_poisson``, the frequencies of ``select_k_best_frequency``), the claim
is the fit's whole budget. The fast audits, with the other tests of
``tests/test_audits.py`` (138 tests), take about 5.5 minutes of one core, Numba's
compilation included::

    audit                                   fit        claim         N    honest     halved
                                                                         q50  q99   q01  q50
    screening                               (1, 0.2)   (0.95, 0.2)   2500  0.55 0.77  2.28 2.71
    cd                                      (1.5, 0.2) (0.89, 0.2)    800  0.38 0.68  1.62 2.10
    sgd                                     (1.5, 0.2) (1.50, 0.2)    800  0.43 0.66  1.46 1.82
    sgd_noise_ridge                         (1.5, 0.2) (1.50, 0.2)    800  0.35 0.53  1.33 1.70
    phased_sgd                              (1.5, 0.2) (1.50, 0.2)    800  0.49 0.71  1.42 1.77
    output_perturbation_gaussian            (1.5, 0.2) (0.89, 0.2)    800  0.23 0.53  1.69 2.19
    output_perturbation_laplace             (1.5, 0)   (1.05, 0.2)   1200  0.60 0.79  1.46 1.78
    greedy_cd_exponential                   (2, 0.2)   (0.80, 0.2)    800  0.19 0.53  1.57 1.91
    greedy_cd_exponential_update            (2.5, 0.2) (0.77, 0.2)    800  0.26 0.57  1.53 2.25
    greedy_cd_exponential_private_curvature (1.5, 0.2) (0.82, 0.2)    800  0.00 0.14  1.62 2.13
    greedy_cd_laplace                       (3.5, 0)   (0.90, 0.2)   1000  0.16 0.71  1.49 1.83
    greedy_cd_laplace_update                (3, 0)     (1.05, 0.2)   1200  0.66 0.86  1.59 1.89
    greedy_cd_laplace_private_curvature     (2.5, 0)   (0.92, 0.2)   1800  0.00 0.04  1.65 2.08
    sgd_poisson                             (2, 0.2)   (2.00, 0.2)   1400  0.58 0.76  1.40 1.74
    sparse_sgd_gradient                     (2.5, 0.2) (1.23, 0.2)    800  0.39 0.65  1.59 1.99
    sparse_sgd_selection                    (4, 0.2)   (0.99, 0.2)   1600  0.00 0.06  1.60 1.87
    sparse_sgd_frequent                     (4, 0.2)   (0.99, 0.2)   1600  0.41 0.55  1.35 1.53
    bias_reduced_sgd *                      (1.5, 0.1) (1.08, 0.1)    600  0.00 0.00  (0.00 0.00)
    sufficient_statistics                   (1.5, 0.2) (0.60, 0.2)    800  0.19 0.60  1.86 2.49
    bounded_newton                          (1.5, 0.2) (1.10, 0.2)    800  0.39 0.63  1.60 2.08
    sufficient_statistics_gram              (1.5, 0.2) (0.77, 0.2)   1200  0.14 0.35  1.51 2.00
    bounded_newton_gram                     (1.5, 0.2) (0.24, 0.2)    800  0.00 0.00  1.78 3.01
    mean_gaussian                           (1.5, 0.2) (0.89, 0.2)    800  0.25 0.56  1.69 2.19
    mean_laplace                            (1.5, 0)   (1.05, 0.2)   1200  0.60 0.80  1.47 1.79
    mean_projection_laplace                 (1.5, 0)   (1.05, 0.2)   1200  0.60 0.80  1.47 1.79
    mean_projection_gaussian                (1.5, 0.2) (0.89, 0.2)   1000  0.32 0.57  1.68 2.15
    mean_projection_gaussian_sampled        (1.5, 0.2) (0.89, 0.2)    800  0.24 0.51  1.61 2.13
    mean_l1_recovery *                      (1.5, 0.2) (0.89, 0.2)    400  0.00 0.00  (1.12 1.71)
    private_search                          (2, 0.2)   (1.28, 0.2)    900  0.48 0.72  1.55 1.91
    select_k_best_frequency                 (1.5, 0.2) (1.50, 0.2)    800  0.43 0.78  1.44 1.89
    select_k_best_association               (1.5, 0.2) (1.44, 0.2)    800  0.39 0.64  1.39 1.74
    tfidf_document_frequency                (1.5, 0.2) (0.49, 0.2)    800  0.00 0.26  1.75 2.45
    tfidf_weighted_document_frequency       (1.5, 0.2) (0.49, 0.2)    800  0.00 0.26  1.75 2.45
    tfidf_public_vocabulary_document_frequency
                                            (1.5, 0.2) (0.89, 0.2)    800  0.32 0.55  1.79 2.23

(* honest only, see below; in parentheses the fit at :func:`halved_epsilon`, which
for l1_recovery is not half the noise of the same mechanism.)

The audits of the solvers that release ``X^T X`` are in :mod:`._registry_gram`
(``sufficient_statistics`` and ``bounded_newton`` of their moment or gradient,
``sufficient_statistics_gram`` and ``bounded_newton_gram`` of the Gram matrix), those
of the private preprocessing of text in :mod:`._registry_text` (the document
frequencies of ``DPSelectKBest`` and ``DPTfidfVectorizer``, the weighted counts of
``vocabulary_weighting="uniform"``, those of a public vocabulary released with the whole
budget; the threshold of the partition selection is
audited by counting, ``tests/test_text_preprocessing.py``); each moves one Gaussian
release by its full sensitivity. ``sparse_sgd_frequent`` is DP-FEST's noisy top-k of
the feature counts, read through which of two features the top-1 keeps.

Not detectable at any affordable size, so audited on the honest side only (with a
positive control without noise), their noise being checked against its formula
instead (``tests/test_audits.py``, the calibration tests):

* bias_reduced_sgd as a whole run. A step releases ``G = (G_B - (G_O + G_E)/2) / p_N +
  G_I``: the gradients of ``B``, ``O`` and ``E`` cancel exactly (up to the l1
  projection of each release), so only ``G_I``, one drawn example, reaches the output,
  and with ``n >= 2`` it is the changed example in at most half the runs; the
  accounting charges the four projection mechanisms (the changed example moves three
  of them by their full sensitivity). On the pair of two rows (``N = 0``, one step,
  the filter stops), even the exact profile of the three releases the pair moves
  (ratio ``sqrt(3) mu_0``) is above what ``G_I`` leaks with half the noise (a mixture,
  with weight 1/2, of a Gaussian of ratio ``2 mu_0``) at every ``delta`` in [0.01,
  0.2] and ``mu_0`` in [0.5, 3]: 0.4 to 1.1 times it, and the ratio passes 1 only
  where epsilon exceeds 9, out of reach of any number of runs. The fit's own
  accounting (``(epsilon/32, delta/16)`` a release, composed by a filter) is looser
  still. Checked: every release's noise against the Gaussian of ``(epsilon/32,
  delta/16)`` in zCDP for its sensitivity ``2 C2 / m``.
* the mean's l1_recovery. The claim is the Gaussian release of the ``m``
  measurements (charged ``3L/n``, for the clip ``1.5 L``); a row's measurement ``A
  e_0`` has norm about ``L``, so the pair realises about 2/3 of that ratio, and only
  through the basis-pursuit recovery of one coordinate (zeroed when its norm exceeds
  ``2L``), which fits the ``m`` noisy measurements exactly and spreads their noise
  over up to ``m`` coordinates. Measured at 600 runs a side, on ``n = 3`` rows in
  ``d = 60`` (``m = 8``): the bound is 0 for the honest fit, and still 0 in every one
  of 100 replays with the measurement noise halved at the same ``m`` (the mutation's
  case). The fit at :func:`halved_epsilon` is no check here: ``m`` grows with
  epsilon, so that fit takes 3.4 times the measurements and its recovery keeps much
  more of the shift (bounds of 1.5 to 2 times the claim, which say nothing about the
  noise). The recovery's noise falls below the signal only from ``n`` of a few
  hundred rows (``m`` in the hundreds, ``d >= m ln^2 m`` in the tens of thousands),
  where one fit takes seconds. Checked: the noise of the measurements handed to the
  recovery, against the Gaussian of ``(epsilon, delta)`` in zCDP for ``3L/n``.
"""

from __future__ import annotations

# Importing the registries fills AUDITS.
from . import _registry, _registry_gram, _registry_mean, _registry_text  # noqa: F401
from ._audit import (
    AUDITS,
    Audit,
    audit_seeds,
    claim_delta,
    claim_epsilon,
    default_jobs,
    fit_runner,
    fitted_on,
    halved_epsilon,
    run_audit,
)

__all__ = ["AUDITS", "Audit", "audit_seeds", "claim_delta", "claim_epsilon", "default_jobs",
           "fit_runner", "fitted_on", "halved_epsilon", "run_audit"]
