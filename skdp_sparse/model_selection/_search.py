"""Differentially private hyperparameter selection by random repetition.

:class:`PrivateHyperparameterSearch` follows Papernot & Steinke (2022),
"Hyperparameter Tuning with Renyi Differential Privacy" (ICLR 2022). Its whole
output (the selected parameters, the selected model and its noisy validation
score, refitted or not) is ``(epsilon, delta)``-DP for replace-one neighbouring
datasets with ``n`` public; the number of runs and the running time are not
covered. The accounting is in :mod:`skdp_sparse.privacy.selection`; the proof
(the RDP curve of one run, Papernot & Steinke's theorem, the score noise, the
refit) is on the documentation page ``doc/proofs/private_search.rst``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, is_classifier
from sklearn.exceptions import DataConversionWarning
from sklearn.model_selection import ParameterGrid
from sklearn.utils import get_tags
from sklearn.utils.validation import indexable

from ..base import DPEstimatorMixin
from ..exceptions import SpendDeviationError
from ..privacy.accounting import RDP_ORDERS, PrivacyEvent
from ..privacy.mechanisms import GaussianMechanism, gaussian_sigma_for_rho
from ..privacy.selection import (
    calibrate_run_epsilon,
    sample_truncated_negative_binomial,
    truncated_negative_binomial_gamma,
)
from ..utils._labels import check_classes, encode_labels
from ..utils._warnings import warn
from ..utils.validation import DELTA, EPSILON, check_privacy_params, checked_array, smallest_epsilon
from ._delegation import DelegatesToBest
from ._inputs import search_rows
from ._public import (
    PrivateSteps,
    PublicData,
    WarningsAtCallersLine,
    check_candidates,
    inner_fits,
    n_rows,
    released,
    same_events,
    take_rows,
)
from ._scoring import check_scorer, mean_score, resolve_scoring

__all__ = ["PrivateHyperparameterSearch"]


@dataclasses.dataclass(frozen=True, eq=False)
class _SearchPlan:
    """The search fixed from public values: the per-fit budget, the score noise and
    the distribution of the number of runs."""

    epsilon: float
    delta: float
    events: tuple
    public: object
    scorer: object
    low: float
    high: float
    fit_epsilon: float
    fit_delta: float
    eta: float
    gamma: float
    mean_k: float
    score_noise: float
    score_mechanism: object


@dataclasses.dataclass(frozen=True, eq=False)
class _SearchResult:
    best_score: float
    best_index: int
    best_estimator: object
    events: tuple


class _SpendMismatch(Exception):
    """A real fit recorded other events than its dummy fit."""


class PrivateHyperparameterSearch(DPEstimatorMixin, DelegatesToBest, MetaEstimatorMixin,
                                  BaseEstimator):
    """Differentially private selection of hyperparameters from a grid.

    The whole output (best parameters, best model, its noisy validation score)
    is ``(epsilon, delta)``-DP for replace-one neighbouring datasets, unlike
    :class:`~sklearn.model_selection.GridSearchCV`, whose exact cross-validation
    scores and selection are not private at all, and whose fits each spend the
    per-fit budget again.

    Algorithm (Papernot & Steinke 2022). Rows are split once, at random and
    independently of the data, into a training part and a validation part
    (``validation_fraction``). Then ``K ~ D_{eta, gamma}`` runs, each: draw a
    candidate uniformly from ``param_grid``, fit it on the training part with
    the per-fit budget ``(fit_epsilon_, fit_delta_)``, and score it on the
    validation part by the mean of per-example scores clipped to
    ``score_bounds`` plus Gaussian noise (exact discrete Gaussian noise on a
    lattice with ``floating_point_safe=True``, the default). The run with the
    highest noisy score wins. With ``refit=True`` (default) its parameters are
    fitted again on all the rows with the same per-fit budget. ``X`` is a 2-d
    array or sparse matrix of numbers, a DataFrame of number and string columns,
    or raw documents (a 1-d sequence of str): the dummy data below follow its
    type (zeros, empty strings); other types are refused. A private step that takes
    text is searched only where what it releases and the width of its output follow
    from its parameters (a ``DPTfidfVectorizer`` with a public ``vocabulary``, in
    every candidate).

    Privacy
    -------
    The per-fit budget is the largest for which the best-of-K total (Papernot &
    Steinke 2022, Thm 2, on the RDP curve of one run) composed with the refit is at
    most ``(epsilon, delta)``; ``epsilon_spent_`` is that total. A run is as private
    as the worst candidate's fit: a replaced row is a training row (the score is
    post-processing) or a validation row (only the score moves, by
    ``(high - low) / n_val``, under noise whose RDP curve lies below every fit's).
    The fits' curves come from the events they record, learned before any private
    computation by fitting each candidate on public dummy data of the same shape and
    label set; a real fit that records other events (its spend depends on the data)
    raises :class:`~skdp_sparse.exceptions.SpendDeviationError` after its
    conservative spend is reported. The estimator has to be a private estimator of
    this library whose events have RDP bounds. The proof is on the page
    :ref:`proof_private_search`.

    Failures. Whether a computation on the private data raises is itself a
    release, so everything public is checked before any budget is reserved: the
    parameters, the data, the labels against the public label set (``classes``),
    and every candidate, by its fit on dummy data. Within the runs, a row that
    reaches a step with a non-finite value (a public step such as
    ``PolynomialFeatures`` can overflow on finite input) is mapped to a zero row
    instead of failing the fit (private steps map it themselves; the output of each
    public step of a composite is mapped before the next step reads it): a map of
    each row alone, which keeps neighbours neighbours. The released model holds the
    steps as given. A fit that raises anyway counts as a model of the lowest score: its
    run scores ``low`` plus the same score noise, and if it wins, the candidate's
    model fitted on the public dummy data is released, which holds no private
    information. That is covered only where the failure is one the estimator's own
    guarantee covers; a public step of the user's that raises on some rows (a
    function that fails on some values) would make what the search releases depend
    on them, and the search cannot tell. A per-example scoring that raises on the
    validation part is retried row by row, a failing row scoring ``low``. A refit
    that raises leaves the winning run's model. The spend is the same in every
    case.
    Warnings raised during the private part are not shown (a warning on private
    data would be a release as well); the dummy fits show the public ones.

    What is not covered: the number of runs ``K`` and the runtime (which grows
    with ``K``) are not released; inner fits (run in one thread) report to no ledger,
    which would reveal ``K``: the search reports one record of its total. The
    split is not stratified (stratifying would read the labels). The label set
    of a classifier is public: pass it as ``classes``; read from ``y`` it is not
    covered (:class:`~skdp_sparse.exceptions.PrivacyLeakWarning`).

    Parameters
    ----------
    estimator : estimator of skdp_sparse, or a pipeline of them
        A private estimator (``epsilon`` and ``delta`` parameters), or a pipeline whose
        private steps share each fit's budget (:func:`~skdp_sparse.pipeline.split_budget`;
        a step whose fit on the dummy data records no event takes no share)
        and whose other steps are frozen or fit nothing (``requires_fit`` false, like
        :class:`~skdp_sparse.preprocessing.BoundedScaler`).
    param_grid : dict or list of dicts
        As for :class:`~sklearn.model_selection.ParameterGrid`; may not set
        ``epsilon``, ``delta``, ``random_state``, ``ledger`` or ``classes`` of any step.
    epsilon : float, default=1.0
        Total privacy budget of the search (and of the refit, if any).
    delta : float, default=1e-6
        Total delta, in (0, 1); the Renyi analysis needs ``delta > 0``. It is also
        the per-fit delta of estimators whose ``delta`` parameter is positive.
    scoring : {"accuracy", "neg_squared_error", "neg_absolute_error"} or callable, \
default=None
        Per-example score, higher is better. ``None``: ``"accuracy"`` for
        classifiers, ``"neg_squared_error"`` for regressors. A callable
        ``scoring(estimator, X, y)`` must return one score per row of ``X``, the
        score of row ``i`` depending on row ``i`` and the model only.
    score_bounds : (float, float), default=None
        Public range ``(low, high)`` each per-example score is clipped to;
        ``None``: ``(0, 1)`` for accuracy; for the negative errors, the largest error
        of a prediction in the public target range ``(low_y, high_y)`` the model (a
        pipeline's final step) states in every candidate, ``target_bounds``, or
        ``(-T, T)`` for ``target_bound=T`` (their hull across the grid):
        ``(-(high_y - low_y)**2, 0)`` for squared errors, ``(-(high_y - low_y), 0)``
        for absolute ones; with no stated range, ``(-1, 0)`` (errors above 1 count as
        1), with a warning. Required for a callable ``scoring``.
    validation_fraction : float, default=0.2
        Share of the rows held out for scoring.
    shuffle : bool, default=True
        Draw the validation rows at random; ``False`` takes the last rows (a
        data-independent choice as well).
    expected_repetitions : float, default=None
        ``E[K]``, the expected number of runs; sets ``gamma``. ``None``:
        ``max(10, 2 * n_candidates)``. More runs try more candidates and cost
        ``log(E[K]) / (lambda - 1)`` more at each order.
    eta : float, default=0.0
        Shape of ``D_{eta, gamma}``, > -1: 0 is the logarithmic distribution, 1 the
        geometric one. Smaller values weigh the ``eps_hat`` term less.
    refit : bool, default=True
        Refit the best parameters on all rows, with the same per-fit budget as
        the runs (composed into the total, which leaves each fit less). ``False``
        keeps the winning run's model, fitted on the training part. On a9a the
        refit model was as accurate on average and varied less.
    floating_point_safe : bool, default=True
        Draw the score noise with the floating-point-safe Gaussian mechanism:
        the mean score is rounded to a lattice of public step and receives exact
        discrete Gaussian noise, so ``best_score_`` and the selection do not
        depend on its low-order bits (:ref:`security`). Its ``sigma`` is
        ``1 + 2^-16`` times the float path's, for the rounding; the total spend is
        the same. It costs about 0.15 ms per run, about 0.1% of a search on a9a
        (``benchmarks/bench_fp_safe.py``). False: ``rng.normal`` added in doubles.
    classes : array-like of labels, default=None
        The public label set of a classifier, set on every private step that has a
        ``classes`` parameter (a label-scoring selector too) for every fit, and used
        for the dummy data's labels, so that all fits share it whatever labels their
        part of the data holds; a label of ``y`` outside it raises ``ValueError``
        before any budget is reserved. None: the steps' own ``classes`` (which must
        agree), and if none is set, the set is read once from ``y``, which the
        guarantee does not cover (one row with a rare label changes it), with a
        :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`.
    ledger : PrivacyLedger, default=None
        A ledger the search reports its total to (besides the active ledgers).
    random_state : None, int or Generator, default=None
        Randomness of the split, of ``K``, of the candidate draws, of the score
        noise, and the entropy of the seed sequence from which every fit's
        generator is spawned. ``None`` (OS entropy) for a release: an int or a
        Generator reproduces the whole search, noise included, so it must stay
        secret like any seed.

        The released estimators (``best_estimator_``, refitted or not) have
        ``random_state=None``: the generators their noise came from are dropped,
        so refitting a clone of ``best_estimator_`` on a candidate dataset draws
        fresh noise and does not reproduce the release.

    Attributes
    ----------
    best_params_ : dict
    best_index_ : int
        Index of ``best_params_`` in ``candidate_params_``.
    best_estimator_ : estimator
        The released model, with ``random_state=None`` (see ``random_state``).
    best_score_ : float
        Noisy validation score of the winning run, clipped to ``score_bounds``.
    classes_ : ndarray
        The public label set (classifiers).
    candidate_params_ : list of dict
        The grid.
    fit_epsilon_, fit_delta_ : float
        Budget of every fit (search runs and refit).
    score_bounds_ : (float, float)
        The public range the per-example scores were clipped to (``score_bounds``, or
        its default).
    score_noise_ : float
        Scale ``sigma`` of the Gaussian noise on validation scores (its standard
        deviation on the float path; the discrete Gaussian's is slightly below it).
    gamma_, eta_, expected_repetitions_ : float
        Parameters of the distribution of K.
    epsilon_spent_, delta_spent_ : float
        Total guarantee of the search.
    privacy_events_ : tuple of PrivacyEvent
        One RDP event: the search's total curve.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        As the released model's, where it has them.

    Examples
    --------
    >>> search = PrivateHyperparameterSearch(           # doctest: +SKIP
    ...     DPSparseLogisticRegression(), {"alpha": [1e-4, 1e-3, 1e-2]},
    ...     epsilon=1.0, delta=1e-6, classes=[0, 1]).fit(X, y)
    >>> search.best_params_, search.epsilon_spent_     # doctest: +SKIP
    """

    # Checked before the pair is, so that epsilon=0 is out of range, not small for delta.
    _parameter_constraints = {"epsilon": EPSILON, "delta": DELTA}

    def __init__(self, estimator, param_grid, *, epsilon=1.0, delta=1e-6, scoring=None,
                 score_bounds=None, validation_fraction=0.2, shuffle=True,
                 expected_repetitions=None, eta=0.0, refit=True, floating_point_safe=True,
                 classes=None, ledger=None, random_state=None):
        self.estimator = estimator
        self.param_grid = param_grid
        self.epsilon = epsilon
        self.delta = delta
        self.scoring = scoring
        self.score_bounds = score_bounds
        self.validation_fraction = validation_fraction
        self.shuffle = shuffle
        self.expected_repetitions = expected_repetitions
        self.eta = eta
        self.refit = refit
        self.floating_point_safe = floating_point_safe
        self.classes = classes
        self.ledger = ledger
        self.random_state = random_state

    # -- parameters ---------------------------------------------------------
    def _check_setup(self):
        epsilon, delta = check_privacy_params(self.epsilon, self.delta, require_delta=True)
        if not math.isfinite(epsilon):
            raise ValueError("the private search needs a finite epsilon")
        steps = PrivateSteps(self.estimator)
        candidates = list(ParameterGrid(self.param_grid))
        if not candidates:
            raise ValueError("param_grid is empty")
        if is_classifier(self.estimator) and not steps.classes_params:
            raise ValueError(
                f"{type(self.estimator).__name__} has no 'classes' parameter (in a "
                "private step); the private search passes the public label set to "
                "every fit, so that none reads it from its part of the data"
            )
        if not is_classifier(self.estimator) and self.classes is not None:
            raise ValueError("classes is the label set of a classifier; "
                             f"{type(self.estimator).__name__} is not one")
        check_candidates(self.estimator, steps, candidates)
        if not (isinstance(self.validation_fraction, numbers.Real)
                and 0 < self.validation_fraction < 1):
            raise ValueError(
                f"validation_fraction must be in (0, 1), got {self.validation_fraction!r}"
            )
        if not (isinstance(self.eta, numbers.Real) and self.eta > -1):
            raise ValueError(f"eta must be a number > -1, got {self.eta!r}")
        if not isinstance(self.floating_point_safe, bool | np.bool_):
            raise ValueError(
                f"floating_point_safe must be True or False, got {self.floating_point_safe!r}"
            )
        mean = self.expected_repetitions
        if mean is None:
            mean = max(10.0, 2.0 * len(candidates))
        if not (isinstance(mean, numbers.Real) and mean > 1 and math.isfinite(mean)):
            raise ValueError(f"expected_repetitions must be a number > 1, got {mean!r}")
        scorer, bounds = resolve_scoring(self.scoring, self.score_bounds, self.estimator,
                                         candidates)
        # Fits whose every private step is pure DP (delta = 0) stay so.
        pure = all(isinstance(d, numbers.Real) and d == 0
                   for _, _, d in steps.budget_params(self.estimator))
        fit_delta = 0.0 if pure else delta
        return epsilon, delta, candidates, float(mean), scorer, bounds, fit_delta, steps

    def _check_data(self, X, y, steps, candidates):
        """``(X, y, classes)`` checked; ``classes`` is the public label set of a
        classifier (None otherwise), ``steps`` the estimator's :class:`PrivateSteps`,
        ``candidates`` the grid's.

        ``X`` and ``y`` are passed on to the fits as given (a DataFrame keeps its
        column names), once a checked copy has shown that they are usable.
        """
        name = type(self).__name__
        tags = get_tags(self.estimator)
        if y is None and tags.target_tags.required:
            raise ValueError(f"{name} requires y to be passed, but the target y is None.")
        if y is None:
            (X,) = indexable(X)
        else:
            X, y = indexable(X, y)
        # 4 rows or more (each part: below)
        X = search_rows(X, self.estimator, steps, candidates)
        classes = None
        if y is None:
            return X, y, classes
        y_checked = np.asarray(y)
        if y_checked.ndim == 2 and y_checked.shape[1] == 1 and not tags.target_tags.multi_output:
            warn("A column-vector y was passed when a 1d array was expected; it is "
                 "flattened to shape (n_samples,).", DataConversionWarning)
            y = y_checked = y_checked.ravel()
        if is_classifier(self.estimator):
            classes, _ = encode_labels(y_checked, self._public_classes(steps), name)
        else:
            checked_array(y_checked, ensure_2d=False, dtype="numeric", ensure_all_finite=True,
                          ensure_min_samples=4, input_name="y")
        return X, y, classes

    def _public_classes(self, steps):
        """The search's ``classes``, else the steps' own, else None; they must agree."""
        params = self.estimator.get_params(deep=True)
        sets = [(f"classes={given.tolist()!r} of the search", given)
                for given in [check_classes(self.classes)] if given is not None]
        sets += [(f"{name}={own.tolist()!r} of {type(self.estimator).__name__}", own)
                 for name in steps.classes_params
                 for own in [check_classes(params[name])] if own is not None]
        for where, labels in sets[1:]:
            if not np.array_equal(labels, sets[0][1]):
                raise ValueError(f"{sets[0][0]} and {where} differ")
        return sets[0][1] if sets else None

    def _score_noise(self, rho, sensitivity):
        return gaussian_sigma_for_rho(sensitivity, rho, bool(self.floating_point_safe))

    def _calibrate(self, public, epsilon, delta, eta, gamma):
        """Largest per-fit epsilon whose search total is at most ``epsilon``, checked
        with the events of the candidates' dummy fits."""
        # A fit refuses a per-fit epsilon below the floor of its delta: the search
        # prices such budgets at the floor, and one whose floor already exceeds the
        # total finds no per-fit budget (calibrate_run_epsilon's error).
        floor = smallest_epsilon(public.fit_delta)
        fit_epsilon, *curves = calibrate_run_epsilon(
            lambda x: public.curves(max(x, floor)), epsilon, delta, eta, gamma)
        return (max(fit_epsilon, floor), *curves)

    def fit(self, X, y=None, sample_weight=None):
        """Select hyperparameters privately and fit the selected model.

        Every check of the parameters, the data and the label set happens first,
        and every candidate is fitted on public dummy data (which checks its
        parameters), all before any budget is reserved. Once the private data are
        used, nothing that depends on them raises: a fit that fails anyway counts as
        a model of the lowest score (see the class docstring).
        """
        return self._fit(X, y, sample_weight)

    # -- the fit sequence's steps ---------------------------------------------
    def _validate_fit_data(self, X, y):
        setup = self._check_setup()
        X, y, classes = self._check_data(X, y, setup[-1], setup[2])
        n = n_rows(X)
        n_val = int(math.ceil(self.validation_fraction * n))
        n_train = n - n_val
        if n_val < 2 or n_train < 2:
            raise ValueError(f"{n} rows are too few to split with validation_fraction="
                             f"{self.validation_fraction}: each part needs 2 rows or more")
        return (X, y), {"setup": setup, "X": X, "y": y, "classes": classes, "n": n,
                        "n_train": n_train, "n_val": n_val}

    def _plan(self, facts):
        (epsilon, delta, candidates, mean_k, scorer, (low, high),
         fit_delta, steps) = facts["setup"]
        eta = float(self.eta)
        gamma = truncated_negative_binomial_gamma(eta, mean_k)
        # Public work only: calibration and checks on dummy data.
        public = PublicData(self.estimator, steps, candidates, fit_delta, facts["X"],
                            facts["y"], facts["classes"], facts["n"], facts["n_train"],
                            refit=bool(self.refit))
        with WarningsAtCallersLine():
            fit_epsilon, _, run_curve, total_curve = self._calibrate(
                public, epsilon, delta, eta, gamma
            )
            check_scorer(public, scorer, fit_epsilon, facts["n_val"])
        sensitivity = (high - low) / facts["n_val"]
        rho_score = float(np.min(run_curve / RDP_ORDERS))
        if not rho_score > 0:
            raise ValueError("the estimator's fits record no privacy loss at some order; "
                             "they cannot set the score noise")
        sigma = self._score_noise(rho_score, sensitivity)
        event = PrivacyEvent.from_rdp(total_curve, name="private hyperparameter search "
                                                        "(Papernot & Steinke 2022)")
        return _SearchPlan(
            epsilon=epsilon, delta=delta, events=(event,), public=public, scorer=scorer,
            low=low, high=high, fit_epsilon=fit_epsilon, fit_delta=fit_delta, eta=eta,
            gamma=gamma, mean_k=mean_k, score_noise=sigma,
            score_mechanism=GaussianMechanism(
                sensitivity, sigma=sigma, floating_point_safe=bool(self.floating_point_safe)),
        )

    def _solve(self, data, plan, rng):
        X, y = data
        public, n, n_train = plan.public, plan.public.n, plan.public.n_train
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        train_idx, val_idx = np.sort(order[:n_train]), np.sort(order[n_train:])
        X_tr, X_val = take_rows(X, train_idx), take_rows(X, val_idx)
        y_tr = None if y is None else take_rows(y, train_idx)
        y_val = None if y is None else take_rows(y, val_idx)

        k = sample_truncated_negative_binomial(plan.eta, plan.gamma, rng)
        # The fits draw their noise from children of a seed sequence that exists only
        # in this call: a seed kept anywhere in the output would let anyone who knows
        # the data refit the released model bit for bit.
        fit_seeds = np.random.SeedSequence(rng.integers(0, 2**63, size=4).tolist())
        realised = []  # events of every fit, for the conservative record if a check fails
        try:
            with inner_fits(private=True):
                best_score, best_index, best_estimator = self._run(
                    public, k, plan.fit_epsilon, X_tr, y_tr, X_val, y_val, X, y,
                    plan.scorer, plan.low, plan.high, plan.score_mechanism, rng, fit_seeds,
                    realised,
                )
        except _SpendMismatch:
            realised.append(dataclasses.replace(plan.score_mechanism.event(count=k),
                                                name="validation scores"))
            raise SpendDeviationError(
                f"a fit of {type(self.estimator).__name__} recorded different privacy "
                "events on the data than on public dummy data of the same shape: its "
                "privacy spend depends on the data, which the private search cannot "
                "account for. The composition of all fits that ran has been reported to "
                "the privacy ledgers.", realised,
            ) from None
        return _SearchResult(best_score, best_index, best_estimator, plan.events)

    def _fitted_attributes(self, facts, plan, result):
        candidates = plan.public.candidates
        attributes = {
            "candidate_params_": candidates,
            "best_index_": result.best_index,
            "best_params_": dict(candidates[result.best_index]),
            "best_score_": result.best_score,
            "best_estimator_": result.best_estimator,
            "fit_epsilon_": plan.fit_epsilon,
            "fit_delta_": plan.fit_delta,
            "score_noise_": plan.score_noise,
            "gamma_": plan.gamma,
            "eta_": plan.eta,
            "expected_repetitions_": plan.mean_k,
            "score_bounds_": (plan.low, plan.high),
        }
        for name in ("n_features_in_", "feature_names_in_"):
            if hasattr(result.best_estimator, name):
                attributes[name] = getattr(result.best_estimator, name)
        return attributes

    def _fit_or_fail(self, public, index, fit_epsilon, X, y, fit_seeds, realised):
        """A private fit of candidate ``index``; None if it raised.

        The exception is dropped, because whether a fit on the private data raises
        may depend on them; its planned events are recorded, so the conservative
        record of a failed check still counts it.
        """
        expected = public.probe(index, fit_epsilon, n_rows(X))[0]
        (seeds,) = fit_seeds.spawn(1)
        est = public.configured(index, fit_epsilon, seeds)
        try:
            est.fit(X) if y is None else est.fit(X, y)
        except Exception:
            realised.extend(expected)
            return None
        events = public.steps.events(est)
        realised.extend(events or expected)
        if not same_events(events, expected):
            raise _SpendMismatch
        return est

    def _run(self, public, k, fit_epsilon, X_tr, y_tr, X_val, y_val, X, y, scorer, low, high,
             score_mechanism, rng, fit_seeds, realised):
        """The K runs (and the refit): the only code that touches the private data."""
        best = None
        for _ in range(k):
            index = int(rng.integers(len(public.candidates)))
            est = self._fit_or_fail(public, index, fit_epsilon, X_tr, y_tr, fit_seeds,
                                    realised)
            if est is None:
                # A failed fit is the worst model: the lowest score, and for release
                # the candidate's model fitted on public data, which holds nothing
                # private. Its run is accounted like any other.
                est = public.probe(index, fit_epsilon, public.n_train)[2]
                mean = low
            else:
                mean = mean_score(scorer, est, X_val, y_val, low, high)
            noisy = float(score_mechanism.randomise(mean, rng))
            if best is None or noisy > best[0]:
                best = (noisy, index, est)
        best_score, best_index, best_estimator = best
        best_score = score_mechanism.clip(best_score, low, high)
        if self.refit:
            est = self._fit_or_fail(public, best_index, fit_epsilon, X, y, fit_seeds,
                                    realised)
            # A failed refit leaves the winning run's model, already private.
            if est is not None:
                best_estimator = est
        return best_score, best_index, released(best_estimator)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        sub = get_tags(self.estimator)
        tags.estimator_type = sub.estimator_type
        tags.classifier_tags = sub.classifier_tags
        tags.regressor_tags = sub.regressor_tags
        tags.target_tags.required = sub.target_tags.required
        tags.input_tags.sparse = sub.input_tags.sparse
        return tags
