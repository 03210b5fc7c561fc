"""scikit-learn's meta-estimators around the private estimators: every inner fit is
recorded, and what the user guide's meta-estimators section says of them holds."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
from sklearn.calibration import CalibratedClassifierCV
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.ensemble import BaggingClassifier, StackingClassifier, VotingClassifier
from sklearn.experimental import enable_halving_search_cv  # noqa: F401
from sklearn.feature_selection import RFE, SelectFromModel
from sklearn.model_selection import GridSearchCV, HalvingGridSearchCV, learning_curve
from sklearn.multiclass import OneVsOneClassifier, OneVsRestClassifier
from sklearn.multioutput import ClassifierChain, MultiOutputClassifier, MultiOutputRegressor
from sklearn.pipeline import FeatureUnion, make_pipeline
from sklearn.preprocessing import StandardScaler

from skdp_sparse import DPGreedyCDRegressor, DPSparseLogisticRegression
from skdp_sparse.base import DPEstimatorMixin
from skdp_sparse.preprocessing import DPStandardScaler
from skdp_sparse.privacy.ledger import privacy_ledger

EPSILON = 0.5


def _data(k=2, n=150, p=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, p)) * (rng.random((n, p)) < 0.4)
    w = rng.normal(size=(p, k))
    return sp.csr_matrix(X), (X @ w).argmax(axis=1), X @ w[:, 0]


def _clf(**params):
    return DPSparseLogisticRegression(**{"epsilon": EPSILON, "delta": 1e-5,
                                         "classes": [0, 1], "solver": "greedy_cd", **params})


def _select():
    return SelectFromModel(_clf(), threshold=-np.inf, max_features=3)


def _reg():
    return DPGreedyCDRegressor(epsilon=EPSILON, delta=1e-5, target_bound=3.0)


@pytest.fixture
def fits(monkeypatch):
    """The number of rows of every private fit this process starts."""
    seen = []
    real = DPEstimatorMixin._fit

    def counted(self, X, y=None, *weight):
        seen.append(X.shape[0])
        return real(self, X, y, *weight)

    monkeypatch.setattr(DPEstimatorMixin, "_fit", counted)
    return seen


X, Y, T = _data()
X3, Y3, _ = _data(k=3, seed=1)
Y2 = np.column_stack([Y, 1 - Y])
_SCALER = DPStandardScaler(bounds=(0, 1), epsilon=EPSILON, with_mean=False)

#: name -> (run, fits the meta-estimator makes): every fit of every meta-estimator
#: counted by hand from its documented behaviour.
WORKFLOWS = {
    "OneVsRestClassifier": (lambda: OneVsRestClassifier(_clf()).fit(X3, Y3), 3),
    "OneVsOneClassifier": (lambda: OneVsOneClassifier(_clf()).fit(X3, Y3), 3),
    "MultiOutputClassifier": (lambda: MultiOutputClassifier(_clf()).fit(X, Y2), 2),
    "MultiOutputRegressor": (
        lambda: MultiOutputRegressor(_reg()).fit(X, np.column_stack([T, -T])), 2),
    # Two chain fits, and the first link's cross_val_predict (3 folds) for the second.
    "ClassifierChain(cv=3)": (lambda: ClassifierChain(_clf(), cv=3).fit(X, Y2), 5),
    "VotingClassifier": (
        lambda: VotingClassifier([("a", _clf()), ("b", _clf())]).fit(X, Y), 2),
    # Each base estimator on all rows and on 3 folds, and the final estimator.
    "StackingClassifier": (lambda: StackingClassifier(
        [("a", _clf()), ("b", _clf())], final_estimator=_clf(), cv=3).fit(X, Y), 9),
    "CalibratedClassifierCV": (lambda: CalibratedClassifierCV(_clf(), cv=3).fit(X, Y), 3),
    "CalibratedClassifierCV(ensemble=False)": (
        lambda: CalibratedClassifierCV(_clf(), cv=3, ensemble=False).fit(X, Y), 4),
    "TransformedTargetRegressor": (lambda: TransformedTargetRegressor(
        _reg(), func=np.tanh, inverse_func=np.arctanh).fit(X, T / 4), 1),
    # Three columns kept whatever the coefficients: an unseeded private fit can zero
    # them all, and a threshold on them would then keep none for the next fit.
    "SelectFromModel": (lambda: make_pipeline(_select(), _clf()).fit(X, Y), 2),
    # Fits on 8, 6 and 4 features, then the final one on 3.
    "RFE": (lambda: RFE(_clf(), n_features_to_select=3, step=2).fit(X, Y), 4),
    "ColumnTransformer": (lambda: make_pipeline(
        ColumnTransformer([("s", _SCALER, [0, 1, 2])], remainder="passthrough"),
        _clf()).fit(X, Y), 2),
    "FeatureUnion": (lambda: make_pipeline(
        FeatureUnion([("s", _SCALER), ("m", _select())]), _clf()).fit(X, Y), 3),
    "learning_curve": (lambda: learning_curve(_clf(), X, Y, cv=3,
                                              train_sizes=[0.5, 1.0]), 6),
    # 4 candidates on 3 folds, the best 2 on 3 folds of more rows, and the refit.
    "HalvingGridSearchCV": (lambda: HalvingGridSearchCV(
        _clf(), {"max_iter": [5, 10], "alpha": [1e-3, 1e-2]}, cv=3,
        min_resources=50).fit(X, Y), 19),
}


@pytest.mark.parametrize("name", sorted(WORKFLOWS))
def test_a_meta_estimator_records_every_fit_it_makes(name, fits):
    run, expected = WORKFLOWS[name]
    with privacy_ledger() as ledger, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run()
    assert len(fits) == len(ledger) == expected
    assert ledger.spent(composition="basic")[0] == pytest.approx(expected * EPSILON)


def test_one_vs_one_fits_on_rows_as_many_as_two_classes_hold(fits):
    # The user guide: a fit's n is treated as public, and one-vs-one's is not.
    OneVsOneClassifier(_clf()).fit(X3, Y3)
    counts = np.bincount(Y3)
    assert fits == [counts[0] + counts[1], counts[0] + counts[2],
                                    counts[1] + counts[2]]


@pytest.mark.parametrize("routing", [False, True])
@pytest.mark.parametrize("bootstrap", [True, False])
def test_bagging_is_refused_before_any_spend(bootstrap, routing):
    # Its draws reach fit as weights, which it refuses: with replacement a row drawn m
    # times is m changed rows, and either way every bag's fit gets an integer seed that
    # the fitted ensemble keeps (estimators_), so anyone holding it could replay the
    # noise. Under metadata routing too: fit requests the weights by default.
    bag = BaggingClassifier(_clf(), n_estimators=2, bootstrap=bootstrap, max_samples=0.5)
    with sklearn.config_context(enable_metadata_routing=routing), privacy_ledger() as ledger:
        with pytest.raises(TypeError, match="takes no sample_weight"):
            bag.fit(X, Y)
    assert len(ledger) == 0


@pytest.mark.parametrize("routing", [False, True])
def test_calibration_refuses_sample_weight_before_any_spend(routing):
    # Without the refusal it fitted the private folds unweighted and applied the weights
    # to its own (non-private) calibration alone.
    weight = np.ones(X.shape[0])
    with sklearn.config_context(enable_metadata_routing=routing), privacy_ledger() as ledger:
        with pytest.raises(TypeError, match="takes no sample_weight"):
            CalibratedClassifierCV(_clf(), cv=3).fit(X, Y, sample_weight=weight)
    assert len(ledger) == 0


@pytest.mark.parametrize("meta", [
    lambda est: VotingClassifier([("a", est)]),
    lambda est: StackingClassifier([("a", est)], cv=3),
])
def test_label_encoding_wrappers_refuse_a_string_label_set_before_any_spend(meta):
    # They pass the labels encoded as 0 .. K-1: a public label set of strings is refused
    # by its check, before anything is spent.
    labels = np.where(Y == 1, "b", "a")
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="public label set"):
        meta(_clf(classes=["a", "b"])).fit(X, labels)
    assert len(ledger) == 0


@pytest.mark.parametrize("routing", [False, True])
def test_sample_weight_passed_on_by_a_wrapper_is_refused_before_any_spend(routing):
    weight = np.ones(X.shape[0])
    scaled = make_pipeline(_SCALER, _clf())
    with sklearn.config_context(enable_metadata_routing=routing), privacy_ledger() as ledger:
        with pytest.raises(TypeError, match="takes no sample_weight"):
            VotingClassifier([("a", _clf())]).fit(X, Y, sample_weight=weight)
        with pytest.raises(TypeError, match="takes no sample_weight"):
            MultiOutputClassifier(_clf()).fit(X, Y2, sample_weight=weight)
        if routing:
            # Routed to every step that requests it, the first private step included.
            with pytest.raises(TypeError, match="DPStandardScaler.fit takes no"):
                scaled.fit(X, Y, sample_weight=weight)
            # The search's scorer requests none: scikit-learn refuses first.
            with pytest.raises(ValueError, match="sample_weight"):
                GridSearchCV(_clf(), {"alpha": [1e-3]}, cv=3).fit(X, Y, sample_weight=weight)
        else:
            with pytest.raises(TypeError, match="takes no sample_weight"):
                make_pipeline(_clf()).fit(X, Y, dpsparselogisticregression__sample_weight=weight)
    assert len(ledger) == 0


def test_a_target_transformer_is_fitted_outside_the_private_fit():
    model = TransformedTargetRegressor(_reg(), transformer=StandardScaler()).fit(X, T)
    assert model.transformer_.mean_[0] == pytest.approx(T.mean(), rel=1e-12)
