"""Private hyperparameter selection (Papernot & Steinke 2022): accounting, API, audits."""

import functools
import importlib
import inspect
import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin, clone
from sklearn.exceptions import DataConversionWarning, NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from skdp_sparse.base import DPEstimatorMixin
from skdp_sparse.exceptions import BudgetExceededError, PrivacyLeakWarning
from skdp_sparse.model_selection import PrivateHyperparameterSearch
from skdp_sparse.model_selection._public import same_events as _same_events
from skdp_sparse.privacy.accounting import (
    RDP_ORDERS,
    PrivacyEvent,
    compose,
    rdp_epsilon,
)
from skdp_sparse.privacy.auditing import clopper_pearson, epsilon_lower_bound
from skdp_sparse.privacy.discrete import SENSITIVITY_SLACK, gaussian_rho, plan_gaussian
from skdp_sparse.privacy.ledger import PrivacyLedger, privacy_ledger
from skdp_sparse.privacy.mechanisms import GaussianMechanism
from skdp_sparse.privacy.selection import (
    events_rdp,
    sample_truncated_negative_binomial,
    selection_rdp,
    truncated_negative_binomial_gamma,
    truncated_negative_binomial_mean,
)
from skdp_sparse.testing._sklearn_checks import sample_weight_excused
from skdp_sparse.utils._labels import encode_labels


@functools.cache
def _mu(epsilon, delta):
    return GaussianMechanism(1.0, epsilon=epsilon, delta=delta).mu


class ConstantLabelClassifier(DPEstimatorMixin, ClassifierMixin, BaseEstimator):
    """Predicts ``label`` everywhere; its fit releases a Gaussian-noised label mean
    (sensitivity 1/n) that prediction ignores, so a fit is exactly one Gaussian
    mechanism at (epsilon, delta). ``real_fits`` counts fits on data holding the
    marker value 7 (the real data of a test, never the search's dummy data)."""

    real_fits = 0

    def __init__(self, *, label=0, epsilon=1.0, delta=1e-6, classes=(0, 1), random_state=None):
        self.label = label
        self.epsilon = epsilon
        self.delta = delta
        self.classes = classes
        self.random_state = random_state

    def fit(self, X, y):
        return self._fit(X, y)

    def _validate_fit_data(self, X, y):
        if sp.issparse(X):
            X = X.toarray()
        X, y = np.asarray(X), np.asarray(y)
        self.n_features_in_ = X.shape[1]
        return (X, y), {"n_rows": X.shape[0]}

    def _plan(self, public):
        mu = _mu(self.epsilon, self.delta)
        return SimpleNamespace(epsilon=self.epsilon, delta=self.delta,
                               events=(PrivacyEvent.gaussian(mu),), mu=mu)

    def _solve(self, data, plan, rng):
        X, y = data
        if np.any(X == 7):
            type(self).real_fits += 1
        value = float(np.mean(y)) + rng.normal(0.0, 1 / (len(y) * plan.mu))
        return SimpleNamespace(value=value, events=plan.events)

    def _fitted_attributes(self, public, plan, result):
        classes = np.array([0, 1]) if self.classes is None else np.unique(self.classes)
        return {"classes_": classes, "mean_": result.value, "n_rows_": public["n_rows"]}

    def predict(self, X):
        return np.full(X.shape[0], self.label)


class LeakyEventsClassifier(ConstantLabelClassifier):
    """Records one more event per positive label: its spend depends on the data."""

    def fit(self, X, y):
        super().fit(X, y)
        extra = PrivacyEvent.gaussian(0.01, count=int(np.sum(np.asarray(y) == 1)) + 1)
        self.privacy_events_ = self.privacy_events_ + (extra,)
        return self


class FailsOnRealDataClassifier(ConstantLabelClassifier):
    """Raises on the real data (the marker 7) when fitted on ``fail_rows`` rows (every
    size if None), as a fit may that meets a case its checks did not foresee."""

    def __init__(self, *, label=0, epsilon=1.0, delta=1e-6, classes=(0, 1), fail_rows=None,
                 random_state=None):
        super().__init__(label=label, epsilon=epsilon, delta=delta, classes=classes,
                         random_state=random_state)
        self.fail_rows = fail_rows

    def fit(self, X, y):
        dense = X.toarray() if sp.issparse(X) else np.asarray(X)
        if np.any(dense == 7) and self.fail_rows in (None, dense.shape[0]):
            raise FloatingPointError("a failure no public check foresaw")
        return super().fit(X, y)


class LabelSetClassifier(ConstantLabelClassifier):
    """Handles labels as the library's classifiers do: the label set is ``classes`` or,
    if None, read from ``y`` (one class only raises), and a multiclass fit solves one
    one-vs-rest problem per class, one Gaussian mechanism each."""

    def __init__(self, *, label=0, epsilon=1.0, delta=1e-6, classes=None, random_state=None):
        super().__init__(label=label, epsilon=epsilon, delta=delta, classes=classes,
                         random_state=random_state)

    def fit(self, X, y):
        classes, _ = encode_labels(np.asarray(y), self.classes, type(self).__name__)
        super().fit(X, y)
        self.classes_ = classes
        problems = 1 if classes.size == 2 else classes.size
        mu = _mu(self.epsilon, self.delta) / math.sqrt(problems)
        self.privacy_events_ = (PrivacyEvent.gaussian(mu, count=problems),)
        return self


class ApproximateOnlyClassifier(ConstantLabelClassifier):
    def fit(self, X, y):
        super().fit(X, y)
        self.privacy_events_ = (PrivacyEvent.approximate(self.epsilon, self.delta),)
        return self


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    X[0, 0] = 7.0
    y = (rng.random(n) < 0.7).astype(int)
    return X, y


GRID = {"label": [0, 1]}


# --------------------------------------------------------------------------
# The distribution of K and the RDP bound
# --------------------------------------------------------------------------
@pytest.mark.parametrize("eta", [-0.5, 0.0, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("mean", [3.0, 10.0])
def test_truncated_negative_binomial(eta, mean):
    gamma = truncated_negative_binomial_gamma(eta, mean)
    assert truncated_negative_binomial_mean(eta, gamma) == pytest.approx(mean, rel=1e-9)
    rng = np.random.default_rng(0)
    ks = np.array([sample_truncated_negative_binomial(eta, gamma, rng) for _ in range(20000)])
    assert ks.min() >= 1
    # P[K = 1] from the pmf: (1 - gamma) eta / (gamma^-eta - 1), or the logarithmic case.
    p1 = (1 - gamma) / math.log(1 / gamma) if eta == 0 else \
        (1 - gamma) * eta / (gamma**-eta - 1)
    assert np.mean(ks == 1) == pytest.approx(p1, abs=0.015)
    if eta >= 0:  # heavy tails (eta < 0) make the sample mean too noisy to test
        assert ks.mean() == pytest.approx(mean, rel=0.08)


def test_geometric_case():
    gamma = truncated_negative_binomial_gamma(1.0, 4.0)
    assert gamma == pytest.approx(0.25)


def test_selection_rdp_formula():
    rho, eta, gamma = 0.01, 0.5, 0.1
    run = RDP_ORDERS * rho
    curve = selection_rdp(run, eta, gamma)
    mean_k = truncated_negative_binomial_mean(eta, gamma)
    lam = RDP_ORDERS[100]
    # A brute-force minimisation of the lambda_hat term over a fine continuum.
    lam_hat = np.concatenate([[1.0], np.geomspace(1.0005, 3000, 200000)])
    hat = np.min((1 + eta) * ((1 - 1 / lam_hat) * lam_hat * rho + math.log(1 / gamma) / lam_hat))
    expected = lam * rho + hat + math.log(mean_k) / (lam - 1)
    # The grid minimum is an upper bound, close to the continuous one.
    assert curve[100] >= expected - 1e-12
    assert curve[100] == pytest.approx(expected, rel=2e-2)
    # More repetitions cost more; the bound exceeds a single run.
    assert np.all(curve > run)
    more = selection_rdp(run, eta, truncated_negative_binomial_gamma(eta, 10 * mean_k))
    assert np.all(more > curve)


def test_events_rdp():
    g = PrivacyEvent.gaussian(0.5, count=3)
    assert np.allclose(events_rdp([g]), 3 * RDP_ORDERS * 0.125)
    pure = PrivacyEvent.pure(0.1)
    assert np.allclose(events_rdp([pure]), np.minimum(RDP_ORDERS * 0.005, 0.1))
    rdp = PrivacyEvent.from_rdp(RDP_ORDERS * 0.01, count=2)
    assert np.allclose(events_rdp([rdp, g]), RDP_ORDERS * 0.02 + 3 * RDP_ORDERS * 0.125)
    with pytest.raises(ValueError, match="Renyi"):
        events_rdp([PrivacyEvent.approximate(1.0, 1e-6)])


# --------------------------------------------------------------------------
# The estimator
# --------------------------------------------------------------------------
def test_search_spends_its_budget_and_works():
    X, y = _data()
    search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, epsilon=1.0,
                                         delta=1e-6, refit=False, random_state=0).fit(X, y)
    assert 0.97 <= search.epsilon_spent_ <= 1.0
    assert search.delta_spent_ == 1e-6
    (event,) = search.privacy_events_
    assert event.rdp is not None
    assert compose([event], 1e-6)[0] == pytest.approx(search.epsilon_spent_)
    assert 0 < search.fit_epsilon_ < 1.0 and search.fit_delta_ == 1e-6
    assert search.best_params_ in search.candidate_params_
    assert search.candidate_params_[search.best_index_] == search.best_params_
    assert search.best_estimator_.label == search.best_params_["label"]
    assert search.best_estimator_.epsilon == search.fit_epsilon_
    assert search.predict(X).shape == (X.shape[0],)
    assert 0 <= search.score(X, y) <= 1
    assert list(search.classes_) == [0, 1]
    assert search.n_features_in_ == 2
    assert not hasattr(search, "cv_results_")  # all scores would not be private
    # The total is what Theorem 2 gives for the calibrated per-fit budget.
    run = events_rdp([PrivacyEvent.gaussian(_mu(search.fit_epsilon_, 1e-6))])
    total = rdp_epsilon(selection_rdp(run, search.eta_, search.gamma_), 1e-6)
    assert total == pytest.approx(search.epsilon_spent_, rel=1e-9)
    # The score noise is the (discrete) Gaussian mechanism with the fits' rho on a
    # 1/n_val range, the lattice rounding included.
    rho = _mu(search.fit_epsilon_, 1e-6) ** 2 / 2
    assert gaussian_rho(1 / 40, search.score_noise_) <= rho
    assert search.score_noise_ == pytest.approx(
        (1 + SENSITIVITY_SLACK) * (1 / 40) / math.sqrt(2 * rho), rel=1e-12)


def test_floating_point_safe_scores_cost_no_budget():
    X, y = _data()
    safe = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, random_state=0)
    flt = clone(safe).set_params(floating_point_safe=False)
    safe.fit(X, y)
    flt.fit(X, y)
    assert safe.get_params()["floating_point_safe"] is True
    # The same fits, the same total: the rounding slack goes into the noise.
    assert safe.fit_epsilon_ == flt.fit_epsilon_
    assert safe.epsilon_spent_ == flt.epsilon_spent_
    assert _same_events(safe.privacy_events_, flt.privacy_events_)
    assert safe.score_noise_ == pytest.approx((1 + SENSITIVITY_SLACK) * flt.score_noise_,
                                              rel=1e-12)
    rho = _mu(safe.fit_epsilon_, 1e-6) ** 2 / 2
    assert 0.5 * (1 / 40 / flt.score_noise_) ** 2 <= rho


def _score_lattice(search, n_val):
    return plan_gaussian(1 / n_val, search.score_noise_, 1).gamma


def _in_units(value, gamma):
    return math.ldexp(value, -int(round(math.log2(gamma))))


@pytest.mark.parametrize("safe", [True, False], ids=["fp_safe", "float"])
def test_released_score_lies_on_the_lattice(safe):
    X, y = _data()
    for seed in range(5):
        search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, refit=False,
                                             floating_point_safe=safe,
                                             random_state=seed).fit(X, y)
        units = _in_units(search.best_score_, _score_lattice(search, 40))
        assert (units == round(units)) is safe


@pytest.mark.parametrize("safe", [True, False], ids=["fp_safe", "float"])
def test_released_score_lies_within_the_score_bounds(safe):
    # At epsilon 0.05 the score's noise (sd near 1) carries the best of the noisy
    # scores past 1 in most searches; the release is clipped to [0, 1], to the
    # lattice's points inside it on the safe path.
    X, y = _data()
    scores = []
    for seed in range(8):
        search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, epsilon=0.05,
                                             refit=False, floating_point_safe=safe,
                                             random_state=seed).fit(X, y)
        assert search.score_noise_ > 0.5
        scores.append(search.best_score_)
        if safe:
            units = _in_units(search.best_score_, _score_lattice(search, 40))
            assert units == round(units)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert max(scores) > 0.99


def _low_bits_score(est, X, y):
    # Row-wise score read from the (public-range) first feature, clipped to [0, 1].
    return np.asarray(X)[:, 0]


@pytest.mark.parametrize("safe", [True, False], ids=["fp_safe", "float"])
def test_neighbouring_validation_sets_reach_the_same_lattice(safe):
    """Validation sets that differ in one row move the released score by whole lattice
    steps only; a difference in the low-order bits alone does not show at all on the
    safe path, while the float path reveals it."""
    n = 100
    X = np.full((n, 1), 0.3)
    y = np.arange(n) % 2
    X_sp, X_low = X.copy(), X.copy()
    X_sp[-1, 0] = 0.9  # replace a validation row (shuffle=False: the last 20 rows)
    X_low[-1, 0] = 0.3 + 2.0**-40
    kw = dict(scoring=_low_bits_score, score_bounds=(0.0, 1.0), shuffle=False, refit=False,
              floating_point_safe=safe)
    for seed in range(5):
        fits = [PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, random_state=seed,
                                            **kw).fit(XX, y)
                for XX in (X, X_sp, X_low)]
        scores = [f.best_score_ for f in fits]
        if not safe:
            assert scores[0] != scores[2]
            continue
        gamma = _score_lattice(fits[0], 20)
        assert all(_score_lattice(f, 20) == gamma for f in fits)
        steps = _in_units(scores[1] - scores[0], gamma)
        assert steps == round(steps) and steps != 0
        assert scores[0] == scores[2]


def test_reproducible_with_seed_and_clonable():
    X, y = _data()
    search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, random_state=3)
    a = clone(search).fit(X, y)
    b = clone(search).fit(X, y)
    assert a.best_params_ == b.best_params_ and a.best_score_ == b.best_score_
    ledger = PrivacyLedger()
    assert clone(search.set_params(ledger=ledger)).ledger is ledger


def test_refit_uses_all_rows_and_costs_budget():
    X, y = _data()
    plain = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, refit=False,
                                        random_state=0)
    refit = clone(plain).set_params(refit=True)
    plain.fit(X, y)
    refit.fit(X, y)
    assert 0.97 <= refit.epsilon_spent_ <= 1.0
    assert refit.fit_epsilon_ < plain.fit_epsilon_
    assert refit.best_estimator_.epsilon == refit.fit_epsilon_
    assert refit.best_estimator_.n_rows_ == X.shape[0]  # refitted on all rows
    assert plain.best_estimator_.n_rows_ == 160  # the training part (80%)
    # Its total is Theorem 2's curve plus the refit's, at the calibrated per-fit budget.
    run = events_rdp([PrivacyEvent.gaussian(_mu(refit.fit_epsilon_, 1e-6))])
    curve = selection_rdp(run, refit.eta_, refit.gamma_) + run
    assert rdp_epsilon(curve, 1e-6) == pytest.approx(refit.epsilon_spent_, rel=1e-9)


def test_one_ledger_record_for_the_whole_search():
    X, y = _data()
    with privacy_ledger() as ledger:
        search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID,
                                             random_state=0).fit(X, y)
    (record,) = ledger.records()  # inner fits are not recorded (they would reveal K)
    assert record.estimator == "PrivateHyperparameterSearch"
    assert record.epsilon_spent == search.epsilon_spent_
    assert record.params["epsilon"] == 1.0


def test_nested_cross_validation_of_the_search_records_each_search_once():
    # cross_val_score asks the unfitted search for `score` (its default scorer); the
    # search answered nothing before fit, and the evaluation raised a TypeError.
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    X, y = _data()
    search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, classes=[0, 1])
    for method in ("predict", "score", "predict_proba", "classes_"):
        assert hasattr(search, method) == (method in ("predict", "score"))
    with pytest.raises(NotFittedError):
        search.predict(X)
    assert hasattr(make_pipeline(FunctionTransformer(), search), "predict")
    with privacy_ledger() as ledger:
        scores = cross_val_score(search, X, y, cv=3, n_jobs=2)
    assert len(scores) == 3 and np.isfinite(scores).all()
    assert [r.estimator for r in ledger.records()] == ["PrivateHyperparameterSearch"] * 3


def test_budget_cap_refuses_search_before_touching_data():
    X, y = _data()
    ledger = PrivacyLedger(max_epsilon=1.5, max_delta=1e-5)
    search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, epsilon=1.0,
                                         ledger=ledger, random_state=0)
    search.fit(X, y)
    before = ConstantLabelClassifier.real_fits
    with pytest.raises(BudgetExceededError):
        clone(search).fit(X, y)
    assert ConstantLabelClassifier.real_fits == before
    assert len(ledger) == 1 and ledger.pending() == []


def test_data_dependent_spend_is_detected_and_reported():
    X, y = _data()
    with privacy_ledger() as ledger, pytest.raises(RuntimeError, match="depends on the data"):
        PrivateHyperparameterSearch(LeakyEventsClassifier(), GRID, random_state=0).fit(X, y)
    (record,) = ledger.records()
    # Everything that ran is composed: at least one fit and one score.
    assert record.epsilon_spent > 0 and len(record.events) >= 2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"param_grid": {"epsilon": [1.0, 2.0]}}, "may not set"),
        ({"delta": 0.0}, "delta > 0"),
        ({"epsilon": np.inf}, "finite"),
        ({"epsilon": 0.0}, r"epsilon must be a number in \(0,"),
        ({"epsilon": -1.0}, r"epsilon must be a number in \(0,"),
        ({"scoring": lambda est, X, y: np.ones(len(X))}, "score_bounds"),
        ({"scoring": "roc_auc"}, "scoring must be"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"expected_repetitions": 1.0}, "expected_repetitions"),
        ({"eta": -1.0}, "eta"),
        ({"floating_point_safe": "auto"}, "floating_point_safe"),
        ({"estimator": BaseEstimator()}, "epsilon"),
        ({"epsilon": 1e-4}, "no per-fit budget"),
    ],
)
def test_invalid_settings(kwargs, match):
    X, y = _data()
    params = {"estimator": ConstantLabelClassifier(), "param_grid": GRID, **kwargs}
    with pytest.raises(ValueError, match=match):
        PrivateHyperparameterSearch(**params).fit(X, y)


class _NoClassesClassifier(DPEstimatorMixin, ClassifierMixin, BaseEstimator):
    def __init__(self, *, epsilon=1.0, delta=1e-6):
        self.epsilon = epsilon
        self.delta = delta


def _regressor():
    from skdp_sparse.linear_model import DPOutputPerturbationRegressor

    return DPOutputPerturbationRegressor(delta=1e-6)


_REGRESSION = {"estimator": _regressor(), "param_grid": {"alpha": [0.1, 1.0]}}


def _set(a, index, value):
    out = np.array(a, dtype=float, copy=True)
    out[index] = value
    return out


_X, _Y = _data()
BAD_INPUTS = {
    "no features": (dict(X=np.empty((200, 0)), y=_Y), "0 feature"),
    "1-d X": (dict(X=_X[:, 0], y=_Y), "2D array"),
    "3-d X": (dict(X=_X[:, :, None], y=_Y), "dim 3"),
    "NaN in X": (dict(X=_set(_X, (1, 1), np.nan), y=_Y), "NaN"),
    "inf in X": (dict(X=_set(_X, (1, 1), np.inf), y=_Y), "infinity"),
    "text in X": (dict(X=np.where(_X > 0, "a", "b"), y=_Y), "numeric"),
    "too few rows": (dict(X=_X[:4], y=_Y[:4]), "too few"),
    "y is None": (dict(X=_X, y=None), "requires y to be passed"),
    "y too short": (dict(X=_X, y=_Y[:-1]), "inconsistent numbers of samples"),
    "label outside classes": (dict(X=_X, y=np.where(_Y == 1, 5, 0)), "outside the public"),
    "continuous labels": (dict(X=_X, y=_Y + 0.5), "outside the public"),
    "classes conflict": (dict(X=_X, y=_Y, classes=[0, 2]), "differ"),
    "classes of a regressor": (dict(X=_X, y=_Y * 0.5, classes=[0, 1], **_REGRESSION),
                               "classifier"),
    "NaN in y": (dict(X=_X, y=_set(_Y * 0.5, 3, np.nan), **_REGRESSION), "NaN"),
    "no classes parameter": (dict(X=_X, y=_Y, estimator=_NoClassesClassifier()),
                             "no 'classes' parameter"),
    "grid sets classes": (dict(X=_X, y=_Y, param_grid={"classes": [[0, 1]]}), "may not set"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_invalid_data_fails_before_any_budget(case):
    """Data and label checks all raise before a budget is reserved or a fit runs on the
    data: an exception raised later could depend on the private data."""
    kwargs, match = BAD_INPUTS[case]
    kwargs = dict(kwargs)
    X, y = kwargs.pop("X"), kwargs.pop("y")
    params = {"estimator": ConstantLabelClassifier(), "param_grid": GRID, **kwargs}
    before = ConstantLabelClassifier.real_fits
    with privacy_ledger(max_epsilon=10.0, max_delta=1e-3) as ledger:
        with pytest.raises(ValueError, match=match):
            PrivateHyperparameterSearch(**params, random_state=0).fit(X, y)
    assert ConstantLabelClassifier.real_fits == before
    assert len(ledger) == 0 and ledger.pending() == []


class _WarnsOnFitClassifier(ConstantLabelClassifier):
    """Warns on every fit, as scikit-learn's own checks do (pointing at its caller)."""

    def fit(self, X, y):
        warnings.warn("a public remark about the fit", UserWarning, stacklevel=2)
        return super().fit(X, y)


def test_warnings_point_at_the_callers_line():
    X, y = _data()
    with pytest.warns(Warning) as record:
        PrivateHyperparameterSearch(_WarnsOnFitClassifier(classes=None), GRID,
                                    random_state=0).fit(X, y[:, None])
    assert {w.category for w in record} == {PrivacyLeakWarning, DataConversionWarning,
                                            UserWarning}
    assert [w.filename for w in record] == [__file__] * 3  # once each, at this line


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "lil"])
def test_sparse_formats(fmt):
    X, y = _data()
    search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, random_state=0)
    search.fit(sp.csr_matrix(X).asformat(fmt), y)
    assert search.best_estimator_.n_rows_ == X.shape[0]


def test_approximate_only_estimator_is_refused():
    X, y = _data()
    with pytest.raises(ValueError, match="Renyi"):
        PrivateHyperparameterSearch(ApproximateOnlyClassifier(), GRID).fit(X, y)


def test_custom_scoring_is_clipped():
    X, y = _data()

    def wild(est, X, y):  # out-of-range and non-finite scores are clipped
        out = np.full(X.shape[0], 1e6)
        out[::2] = np.nan
        return out

    search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID, scoring=wild,
                                         score_bounds=(0.0, 1.0), random_state=0,
                                         epsilon=50.0).fit(X, y)
    assert abs(search.best_score_ - 0.5) < 0.2


# --------------------------------------------------------------------------
# Audits: the selected candidate on neighbouring datasets
# --------------------------------------------------------------------------
class _ExactScores(PrivateHyperparameterSearch):
    """The flawed variant: (almost) no noise on the validation scores."""

    def _score_noise(self, rho, sensitivity):
        return 1e-6 * super()._score_noise(rho, sensitivity)


def _neighbours():
    # Validation rows are the last half (shuffle=False). S and S' differ in one
    # validation label, which flips the better constant prediction.
    X = np.zeros((10, 1))
    y = np.array([0, 1, 0, 1, 0, 1, 1, 1, 0, 0])
    y_prime = y.copy()
    y_prime[7] = 0
    return X, y, y_prime


def _selection_frequencies(search_cls, n_runs, epsilon, seed):
    X, y, y_prime = _neighbours()
    search = search_cls(ConstantLabelClassifier(), GRID, epsilon=epsilon, delta=1e-5,
                        validation_fraction=0.5, shuffle=False, eta=1.0,
                        expected_repetitions=10, refit=False)
    rng = np.random.default_rng(seed)
    out = []
    for labels in (y, y_prime):
        picks = np.empty(n_runs)
        for i in range(n_runs):
            search.set_params(random_state=int(rng.integers(2**63 - 1)))
            picks[i] = search.fit(X, labels).best_params_["label"]
        out.append(picks)
    return out


def test_audit_selection_is_private():
    epsilon = 0.5
    on_s, on_s_prime = _selection_frequencies(PrivateHyperparameterSearch, 600, epsilon, 0)
    res = epsilon_lower_bound(on_s, on_s_prime, delta=1e-5, confidence=0.95, rng=0)
    assert res.epsilon_lb <= epsilon


def test_audit_catches_exact_validation_scores():
    epsilon = 0.5
    on_s, on_s_prime = _selection_frequencies(_ExactScores, 600, epsilon, 1)
    res = epsilon_lower_bound(on_s, on_s_prime, delta=1e-5, confidence=0.95, rng=0)
    # With exact scores the best label wins whenever it is tried: about
    # 1 - E[2^-K] = 0.91 against E[2^-K] = 0.09 for K geometric with mean 10.
    assert res.epsilon_lb > epsilon


# --------------------------------------------------------------------------
# Audits: what the released estimator lets an adversary recompute
# --------------------------------------------------------------------------
def _op_search(**kwargs):
    from skdp_sparse.linear_model import DPOutputPerturbationClassifier

    params = dict(epsilon=1.0, delta=1e-5, expected_repetitions=3)
    params.update(kwargs)
    return PrivateHyperparameterSearch(
        DPOutputPerturbationClassifier(delta=1e-5, classes=[0, 1]), {"alpha": [0.1, 1.0]},
        **params)


def _op_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 3)), np.arange(n) % 2


def _same_model(a, b):
    return np.array_equal(a.coef_, b.coef_) and np.array_equal(a.intercept_, b.intercept_)


@pytest.mark.parametrize("refit", [True, False])
def test_released_estimator_carries_no_seed(refit):
    """A released model whose seed is kept can be refitted bit for bit by anyone who
    knows the data: an exact membership test, whatever the noise."""
    X, y = _op_data()
    search = _op_search(refit=refit, shuffle=False, random_state=0).fit(X, y)
    best = search.best_estimator_
    assert best.random_state is None
    rows = slice(None) if refit else slice(0, 32)  # shuffle=False: the first 80% train
    again = clone(best).set_params(random_state=None).fit(X[rows], y[rows])
    assert not _same_model(again, best)
    assert not _same_model(clone(best).fit(X[rows], y[rows]), best)


def _clopper_pearson_epsilon(hits_s, hits_s_prime, n_runs, delta, confidence=0.95):
    """Lower bound on epsilon from one event fixed before the runs, in both orders."""
    alpha = (1 - confidence) / 2
    bounds = []
    for k_p, k_q in ((hits_s, hits_s_prime), (hits_s_prime, hits_s)):
        p_lo, _ = clopper_pearson(k_p, n_runs, alpha)
        _, q_hi = clopper_pearson(k_q, n_runs, alpha)
        p_lo, q_hi = float(p_lo), float(q_hi)
        bounds.append(math.log((p_lo - delta) / q_hi) if p_lo > delta else 0.0)
    return max(bounds)


def test_audit_refit_and_compare_is_private():
    """The adversary knows every row but one, refits ``clone(best_estimator_)`` on the
    dataset it suspects (D) and checks whether the release is reproduced bit for bit."""
    epsilon, delta, n_runs = 1.0, 1e-5, 60
    X, y = _op_data()
    X_prime = X.copy()
    X_prime[0] = 1 - X_prime[0]  # replace one row
    rng = np.random.default_rng(0)
    hits = []
    for data in (X, X_prime):
        count = 0
        for _ in range(n_runs):
            search = _op_search(epsilon=epsilon, delta=delta,
                                random_state=int(rng.integers(2**63 - 1))).fit(data, y)
            release = search.best_estimator_
            count += _same_model(clone(release).fit(X, y), release)
        hits.append(count)
    assert _clopper_pearson_epsilon(*hits, n_runs, delta) <= epsilon


# --------------------------------------------------------------------------
# Nothing raises once the private data are touched
# --------------------------------------------------------------------------
def _rare_label_data(multiclass, n=20, seed=1):
    """D holds one row of the rare label, its neighbour D' two: a random training
    part misses the rare label more often under D."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    y = (np.arange(n) % 2) * 2 if multiclass else np.zeros(n, dtype=int)
    y[0] = 1
    y_prime = y.copy()
    y_prime[1] = 1
    return X, y, y_prime


@pytest.mark.parametrize("multiclass", [False, True], ids=["binary", "multiclass"])
def test_audit_exceptions_do_not_leak(multiclass):
    """Whether the search raises is itself a release; it must not depend on the data.
    (With the label set read from each training part, a part missing the rare label
    fails: one class only, or other privacy events than the dummy fit's.)"""
    epsilon, delta, n_runs = 0.5, 1e-5, 240
    X, y, y_prime = _rare_label_data(multiclass)
    rng = np.random.default_rng(0)
    raised = []
    for labels in (y, y_prime):
        count = 0
        for _ in range(n_runs):
            search = PrivateHyperparameterSearch(
                LabelSetClassifier(delta=delta), GRID, epsilon=epsilon, delta=delta,
                expected_repetitions=2, refit=False,
                random_state=int(rng.integers(2**63 - 1)))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", PrivacyLeakWarning)
                    search.fit(X, labels)
            except Exception:
                count += 1
        raised.append(count)
    assert _clopper_pearson_epsilon(*raised, n_runs, delta) <= epsilon


@pytest.mark.parametrize("multiclass", [False, True], ids=["binary", "multiclass"])
def test_training_part_missing_a_class_does_not_raise(multiclass):
    from skdp_sparse.linear_model import DPSparseLogisticRegression

    X, y, _ = _rare_label_data(multiclass)
    y = np.roll(y, -1)  # the rare label in the last row: a validation row (shuffle=False)
    search = PrivateHyperparameterSearch(
        DPSparseLogisticRegression(delta=1e-5), {"alpha": [1e-3, 1e-1]},
        delta=1e-5, shuffle=False, random_state=0)
    with pytest.warns(PrivacyLeakWarning, match="label set") as record:
        search.fit(X, y)
    # The label set is read once, by the search, and shared by every fit.
    assert [w.filename for w in record] == [__file__]
    expected = [0, 1, 2] if multiclass else [0, 1]
    assert list(search.classes_) == expected
    assert search.best_estimator_.classes == expected
    # A public label set is passed to every fit, and nothing warns.
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        clone(search).set_params(classes=expected, refit=False).fit(X, y)


def test_public_classes_are_passed_to_the_fits():
    X, y = _data()
    search = PrivateHyperparameterSearch(ConstantLabelClassifier(classes=None), GRID,
                                         classes=[0, 1, 2], random_state=0).fit(X, y)
    assert list(search.classes_) == [0, 1, 2]
    assert search.best_estimator_.classes == [0, 1, 2]
    # The estimator's own public label set serves when the search has none.
    search = PrivateHyperparameterSearch(ConstantLabelClassifier(classes=[0, 1, 3]), GRID,
                                         random_state=0).fit(X, y)
    assert list(search.classes_) == [0, 1, 3]


@pytest.mark.parametrize("refit", [True, False])
def test_failed_fit_scores_low_and_releases_the_public_model(refit):
    X, y = _data()
    search = PrivateHyperparameterSearch(FailsOnRealDataClassifier(), GRID,
                                         refit=refit, random_state=0, epsilon=20.0).fit(X, y)
    best = search.best_estimator_
    # The candidate's public model: fitted on dummy data of the training part's size,
    # with the marker absent and the label mean of the dummy labels.
    assert best.n_rows_ == 160
    assert best.random_state is None
    assert abs(best.mean_ - 0.5) < 0.05
    assert abs(search.best_score_ - 0.0) < 0.05  # low plus the score noise
    assert 0.97 * 20.0 <= search.epsilon_spent_ <= 20.0  # failed runs are accounted too


def test_failed_refit_falls_back_to_the_winning_run():
    X, y = _data()
    est = FailsOnRealDataClassifier(fail_rows=X.shape[0])
    search = PrivateHyperparameterSearch(est, GRID, shuffle=False, random_state=0,
                                         epsilon=20.0).fit(X, y)
    best = search.best_estimator_
    assert best.n_rows_ == 160 and best.random_state is None
    # The winning run's model, fitted on the real training part and scored on the rest.
    assert abs(best.mean_ - np.mean(y[:160])) < 0.05
    assert abs(search.best_score_ - np.mean(y[160:] == best.label)) < 0.05


def test_scoring_that_raises_scores_low_row_by_row():
    X, y = _data()
    X[-1, 0] = 7.0  # a validation row (shuffle=False) the scorer fails on

    def fragile(est, X, y):
        if np.any(np.asarray(X) == 7):
            raise ArithmeticError("a row no public check foresaw")
        return np.ones(X.shape[0])

    search = PrivateHyperparameterSearch(ConstantLabelClassifier(), GRID,
                                         scoring=fragile, score_bounds=(0.0, 1.0),
                                         shuffle=False, random_state=0, epsilon=50.0)
    search.fit(X, y)
    # Only the failing row scores low: the mean moves by (high - low) / n_val at most.
    assert abs(search.best_score_ - 39 / 40) < 0.01


# --------------------------------------------------------------------------
# The library's estimators
# --------------------------------------------------------------------------
def _library_estimators():
    found = []
    for module in ("skdp_sparse.linear_model", "skdp_sparse.mean", "skdp_sparse"):
        try:
            mod = importlib.import_module(module)
        except Exception:  # modules still being written may not import
            continue
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name, None)
            # Models the search can score; transformers (the scalers) are searched
            # as steps of a pipeline instead.
            if (inspect.isclass(obj) and issubclass(obj, DPEstimatorMixin)
                    and issubclass(obj, BaseEstimator)
                    and not issubclass(obj, TransformerMixin)
                    and obj is not PrivateHyperparameterSearch):
                found.append(obj)
    return sorted(set(found), key=lambda c: c.__name__)


LIBRARY = _library_estimators()


def _mean_score(est, X, y):
    """Per-row negative squared distance to the released mean."""
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    return -np.sum((X - est.mean_) ** 2, axis=1)


@pytest.mark.skipif(not LIBRARY, reason="no estimator of the library imports yet")
@pytest.mark.parametrize("cls", LIBRARY, ids=lambda c: c.__name__)
def test_library_estimators(cls):
    from sklearn.base import is_classifier, is_regressor

    rng = np.random.default_rng(0)
    X = sp.random(400, 8, density=0.4, format="csr", random_state=0)
    w = rng.standard_normal(8)
    params = cls().get_params()
    kwargs = {}
    if is_classifier(cls()):
        y = (X @ w > 0).astype(int)
        kwargs["classes"] = [0, 1]
    elif is_regressor(cls()):
        y = np.clip(X @ w / 4, -1, 1)
    else:
        y = None
    if "alpha" in params:
        grid, base = {"alpha": [1e-4, 1e-2]}, cls()
    elif y is None and "method" in params:  # a mean estimator
        grid, base = {"method": ["laplace", "gaussian"]}, cls(delta=1e-6)
        kwargs = {"scoring": _mean_score, "score_bounds": (-4.0, 0.0)}
    else:
        pytest.skip(f"no obvious hyperparameter to tune for {cls.__name__}")
    try:
        search = PrivateHyperparameterSearch(base, grid, epsilon=1.0, delta=1e-6,
                                             expected_repetitions=3, random_state=0, **kwargs)
        search.fit(X, y)
    except ValueError as exc:
        if "Renyi" in str(exc):
            pytest.skip(f"{cls.__name__} records (epsilon, delta) events only")
        raise
    assert search.epsilon_spent_ <= 1.0
    assert search.best_estimator_.epsilon == search.fit_epsilon_
    if y is not None:
        assert search.predict(X).shape == (400,)


# --------------------------------------------------------------------------
# scikit-learn's estimator checks
# --------------------------------------------------------------------------
def _checked_searches():
    from skdp_sparse.linear_model import DPGreedyCDRegressor, DPSparseLogisticRegression

    # Generous budgets let the checks' small datasets be learnt; an int random_state
    # makes each check reproducible. Privacy is exercised by the tests above.
    common = dict(epsilon=50.0, delta=1e-5, expected_repetitions=2, random_state=0)
    return [
        PrivateHyperparameterSearch(DPSparseLogisticRegression(delta=1e-5),
                                    {"alpha": [1e-4, 1e-3]}, **common),
        PrivateHyperparameterSearch(DPGreedyCDRegressor(delta=1e-5),
                                    {"alpha": [1e-4, 1e-3]}, **common),
    ]


def _expected_failed_checks(search):
    """Checks a private meta-estimator cannot pass, each with its reason.

    None: every check passes. With an int ``random_state`` the whole search (split,
    K, candidates, the fits' spawned generators, the score noise) is reproducible,
    so the determinism checks hold; the data checks (empty data, one sample, y None,
    NaN and infinity) raise clear errors before any budget is reserved. Only the
    checks of sample weights fail: its ``fit``, like every private one, refuses them.
    """
    return sample_weight_excused()


# The checks' datasets have varied label sets, with no public one to give.
@pytest.mark.filterwarnings("ignore::skdp_sparse.exceptions.PrivacyLeakWarning")
@parametrize_with_checks(_checked_searches(), expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# --------------------------------------------------------------------------
# Pipelines: the private steps share each fit's budget
# --------------------------------------------------------------------------
def _tabular(n=2000, seed=0):
    """Raw columns in [0, 100] whose first decides the label, with public ranges."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 100, size=(n, 4))
    y = (X[:, 0] + rng.normal(0, 15, n) > 50).astype(int)
    return X, y, (np.zeros(4), np.full(4, 100.0))


def _bounded_pipeline(bounds, **model):
    from sklearn.pipeline import make_pipeline

    from skdp_sparse import DPSparseLogisticRegression
    from skdp_sparse.preprocessing import BoundedScaler
    return make_pipeline(BoundedScaler(bounds=bounds),
                         DPSparseLogisticRegression(norm_bound=2.0, **model))


def test_pipeline_with_a_public_scaler_is_searched():
    X, y, bounds = _tabular()
    search = PrivateHyperparameterSearch(
        _bounded_pipeline(bounds), {"dpsparselogisticregression__alpha": [1e-4, 1e-2]},
        epsilon=2.0, delta=1e-6, classes=[0, 1], random_state=0).fit(X, y)
    assert search.epsilon_spent_ <= 2.0 * (1 + 1e-9)
    model = search.best_estimator_[-1]
    # Each fit got the calibrated per-fit budget, the public label set, and a generator
    # that the released pipeline does not keep.
    assert model.epsilon_spent_ == pytest.approx(search.fit_epsilon_, rel=1e-6)
    assert model.classes == [0, 1] and model.random_state is None
    assert search.best_estimator_.score(X, y) > 0.7


def test_pipeline_private_steps_share_each_fit_budget():
    from sklearn.pipeline import make_pipeline

    from skdp_sparse import DPSparseLogisticRegression
    from skdp_sparse.preprocessing import DPStandardScaler
    X, y, bounds = _tabular()
    pipe = make_pipeline(DPStandardScaler(bounds=bounds, clip_output=3.0),
                         DPSparseLogisticRegression(norm_bound=6.0))
    search = PrivateHyperparameterSearch(
        pipe, {"dpsparselogisticregression__alpha": [1e-4, 1e-2]}, epsilon=3.0,
        delta=1e-6, classes=[0, 1], random_state=0, refit=False).fit(X, y)
    scaler, model = search.best_estimator_[0], search.best_estimator_[-1]
    # split_budget: half of the per-fit budget each, both recorded in the search's
    # accounting (the events it composes are those of both steps).
    assert scaler.epsilon_spent_ == pytest.approx(search.fit_epsilon_ / 2, rel=1e-6)
    assert model.epsilon_spent_ <= search.fit_epsilon_ / 2 * (1 + 1e-9)
    assert scaler.random_state is None and model.random_state is None
    from skdp_sparse.model_selection._public import PrivateSteps
    steps = PrivateSteps(pipe)
    assert steps.paths == ["dpstandardscaler", "dpsparselogisticregression"]
    events = steps.events(search.best_estimator_)
    assert events == tuple(scaler.privacy_events_) + tuple(model.privacy_events_)
    assert search.epsilon_spent_ <= 3.0 * (1 + 1e-9)


@pytest.mark.parametrize("case", ["learning step", "grid sets a budget", "grid sets classes",
                                  "no private step"])
def test_pipeline_that_cannot_be_searched_is_refused_before_any_work(case):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from skdp_sparse import DPSparseLogisticRegression
    X, y, bounds = _tabular(n=200)
    grid = {"dpsparselogisticregression__alpha": [1e-3]}
    pipe, match = _bounded_pipeline(bounds), None
    if case == "learning step":
        pipe = make_pipeline(StandardScaler(), DPSparseLogisticRegression())
        match = "'standardscaler' of Pipeline .StandardScaler. fits on the data"
    elif case == "grid sets a budget":
        grid, match = {"dpsparselogisticregression__epsilon": [1.0]}, "may not set"
    elif case == "grid sets classes":
        grid, match = {"dpsparselogisticregression__classes": [[0, 1]]}, "may not set"
    else:
        from sklearn.linear_model import LogisticRegression
        pipe, grid = make_pipeline(StandardScaler(), LogisticRegression()), {
            "logisticregression__C": [1.0]}
        match = "holds no step that has one"
    with pytest.raises(ValueError, match=match):
        PrivateHyperparameterSearch(pipe, grid, classes=[0, 1]).fit(X, y)


class _UnrecordedScaler(TransformerMixin, BaseEstimator):
    """Takes a budget but records no privacy events."""

    def __init__(self, *, epsilon=1.0, delta=0.0):
        self.epsilon = epsilon
        self.delta = delta

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        return X


def test_pipeline_step_that_records_no_spend_is_refused():
    # Its spend would go uncounted in the search's total: refused on the public dummy
    # fits, as a lone estimator without privacy_events_ is.
    from sklearn.pipeline import make_pipeline

    from skdp_sparse import DPSparseLogisticRegression
    X, y, _ = _tabular(n=200)
    pipe = make_pipeline(_UnrecordedScaler(), DPSparseLogisticRegression())
    with pytest.raises(TypeError, match="_UnrecordedScaler records no privacy_events_"):
        PrivateHyperparameterSearch(pipe, {"dpsparselogisticregression__alpha": [1e-3]},
                                    classes=[0, 1]).fit(X, y)
