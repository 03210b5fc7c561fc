"""The private search over composites and with ledgers of its own estimator: what it
releases, what it records and which caps hold."""

import warnings

import joblib
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.compose import ColumnTransformer
from sklearn.frozen import FrozenEstimator
from sklearn.pipeline import FeatureUnion, Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer

from skdp_sparse import (
    BoundedScaler,
    DPGreedyCDRegressor,
    DPSparseLogisticRegression,
    DPStandardScaler,
    PrivateHyperparameterSearch,
)
from skdp_sparse.exceptions import BudgetExceededError, PrivacyLeakWarning
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
from skdp_sparse.feature_selection import DPSelectKBest
from skdp_sparse.privacy.ledger import PrivacyLedger, privacy_ledger

_GRID = {"dpsparselogisticregression__alpha": [1e-4, 1e-3]}


def _data(n=400, p=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, p))
    return X, (X[:, 0] > 5).astype(int)


def _classifier(**kwargs):
    return DPSparseLogisticRegression(classes=[0, 1], norm_bound=6.0, feature_bound=3.0,
                                      **kwargs)


def _search(estimator, grid=_GRID, **kwargs):
    return PrivateHyperparameterSearch(estimator, grid, epsilon=1.0, delta=1e-6,
                                       expected_repetitions=3, random_state=0, **kwargs)


def test_estimators_given_as_grid_values_are_fitted_as_copies():
    # A grid object fitted in place would keep the fit of a run that was not selected.
    X, y = _data()
    a = DPStandardScaler(bounds=(0, 10), clip_output=3.0)
    b = DPStandardScaler(bounds=(0, 10), clip_output=2.0)
    pipe = Pipeline([("scale", DPStandardScaler(bounds=(0, 10), clip_output=3.0)),
                     ("dpsparselogisticregression", _classifier())])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = _search(pipe, {"scale": [a, b]}).fit(X, y)
    for given in (a, b):
        assert not hasattr(given, "mean_") and not hasattr(given, "epsilon_spent_")
        assert given.epsilon == 1.0  # the search set no budget on them either
    assert search.best_estimator_["scale"] not in (a, b)
    assert hasattr(search.best_estimator_["scale"], "mean_")


def test_the_searched_estimators_own_ledger_is_capped_and_recorded():
    X, y = _data()
    capped = PrivacyLedger(max_epsilon=0.5, max_delta=1e-6)
    with pytest.raises(BudgetExceededError):
        _search(_classifier(ledger=capped), {"alpha": [1e-4, 1e-3]}).fit(X, y)
    assert len(capped) == 0 and capped.spent() == (0, 0)
    # Inside a pipeline, too; and with room in the cap it records the search's total once.
    roomy = PrivacyLedger(max_epsilon=2.0, max_delta=1e-5)
    pipe = make_pipeline(BoundedScaler(bounds=(0, 10)), _classifier(ledger=roomy))
    search = _search(pipe).fit(X, y)
    assert [r.estimator for r in roomy.records()] == ["PrivateHyperparameterSearch"]
    assert roomy.spent(1e-6)[0] == pytest.approx(search.epsilon_spent_)


@pytest.mark.parametrize("backend", ["threading", "loky"])
def test_steps_that_fit_in_parallel_do_not_report_the_searchs_inner_fits(backend):
    # Reporting is suspended in the search's thread: its inner fits run there, one after
    # the other, so the ledger shows one record of the total and not the number of runs.
    X, y = _data()
    union = FeatureUnion([("a", DPStandardScaler(bounds=(0, 10), clip_output=3)),
                          ("b", DPStandardScaler(bounds=(0, 10), with_mean=False,
                                                 clip_output=3))], n_jobs=2)
    pipe = make_pipeline(union, _classifier())
    with privacy_ledger() as ledger, joblib.parallel_config(backend=backend):
        search = _search(pipe).fit(X, y)
    assert [r.estimator for r in ledger.records()] == ["PrivateHyperparameterSearch"]
    assert ledger.spent(1e-6)[0] == pytest.approx(search.epsilon_spent_)


def test_a_column_transformer_with_a_private_step_is_searched_and_released_unseeded():
    X, y = _data()
    ct = ColumnTransformer([("priv", DPStandardScaler(bounds=(0, 10), clip_output=3), [0, 1]),
                            ("free", BoundedScaler(bounds=(0, 10)), [2, 3])], sparse_threshold=0)
    with privacy_ledger() as ledger:
        search = _search(make_pipeline(ct, _classifier())).fit(X, y)
    assert len(ledger) == 1 and search.epsilon_spent_ <= 1.0
    fitted = dict((name, step) for name, step, _ in search.best_estimator_[0].transformers_)
    # The fitted clone a column transformer keeps is released without its generator.
    assert fitted["priv"].random_state is None and hasattr(fitted["priv"], "mean_")
    assert search.predict(X[:5]).shape == (5,)


@pytest.mark.parametrize("refit", [True, False])
def test_private_steps_of_a_column_transformer_draw_independent_noise(refit):
    # Every step used to get the same generator: a column transformer clones its steps,
    # copying it, so both scalers drew the same noise and the difference of their means
    # was exact (to 1e-11) while each noise was 1e-2.
    X, y = _data()
    X[:, 1] = X[:, 0]  # the same column twice: equal true means
    ct = ColumnTransformer([("a", DPStandardScaler(bounds=(0, 10), with_std=False), [0]),
                            ("b", DPStandardScaler(bounds=(0, 10), with_std=False), [1])],
                                sparse_threshold=0)
    search = _search(make_pipeline(ct, _classifier()), refit=refit).fit(X, y)
    fitted = search.best_estimator_[0].named_transformers_
    assert abs(fitted["a"].mean_[0] - fitted["b"].mean_[0]) > 1e-6


def _overflowing_pipelines():
    from sklearn.preprocessing import Normalizer, PolynomialFeatures

    from skdp_sparse.preprocessing import DPStandardScaler

    return {
        "poly": lambda: make_pipeline(PolynomialFeatures(2), _classifier(solver="sgd")),
        "poly-bounded": lambda: make_pipeline(PolynomialFeatures(2),
                                              BoundedScaler(bounds=(-1, 1)),
                                              _classifier(solver="sgd")),
        "poly-normalizer": lambda: make_pipeline(PolynomialFeatures(2), Normalizer(),
                                                 _classifier(solver="sgd")),
        "poly-standard": lambda: make_pipeline(PolynomialFeatures(2),
                                               DPStandardScaler(bounds=(-1, 1)),
                                               _classifier(solver="sgd")),
        "column-transformer": lambda: make_pipeline(
            ColumnTransformer([("poly", make_pipeline(PolynomialFeatures(2), Normalizer()),
                                [0, 1]), ("rest", "passthrough", [2, 3])], sparse_threshold=0),
            Normalizer(), _classifier(solver="sgd")),
        # The remainder of a column transformer that holds a private step.
        "remainder": lambda: make_pipeline(
            ColumnTransformer([("priv", DPStandardScaler(bounds=(0, 10)), [2, 3])],
                              remainder=FunctionTransformer(np.square), sparse_threshold=0),
            Normalizer(), _classifier(solver="sgd")),
        # Outputs whose non-finite rows are read through another type.
        "coo-output": lambda: make_pipeline(
            FunctionTransformer(lambda Z: sp.coo_matrix(np.square(Z))), Normalizer(),
            _classifier(solver="sgd")),
        "object-frame": lambda: make_pipeline(
            FunctionTransformer(lambda Z: pd.DataFrame(
                {"square": np.square(Z[:, 0]), "flag": Z[:, 1] > 5})),
            Normalizer(), _classifier(solver="sgd")),
        # A public step that raises on some values (a user's function, an encoder
        # meeting an unknown category, a vectorizer a string it cannot encode).
        "raising-step": lambda: make_pipeline(
            FunctionTransformer(_refuse_huge), _classifier(solver="sgd")),
    }


def _refuse_huge(Z):
    if np.abs(Z).max() > 1e100:
        raise ValueError("a value this large is not meant to be here")
    return Z


@pytest.mark.parametrize("kind", list(_overflowing_pipelines()))
def test_a_run_whose_public_step_overflows_is_fitted_on_zeroed_rows(kind):
    # PolynomialFeatures turns 1e200 into inf; the next step (the classifier, a
    # BoundedScaler, DPStandardScaler's transform, scikit-learn's Normalizer) refused
    # it, the run failed and the search released the candidate's model fitted on public
    # data instead: a release that depended on one row (8 to 19 searches in 20 with
    # that row, none without). The same where the inf left through a remainder, a COO
    # matrix or a DataFrame of mixed types, or where a public step raised on the row.
    from skdp_sparse.model_selection import _search as search_module

    X, y = _data()
    X[0, 0] = 1e200
    failures = []
    fit_or_fail = search_module.PrivateHyperparameterSearch._fit_or_fail

    def spying(self, *args, **kwargs):
        est = fit_or_fail(self, *args, **kwargs)
        failures.append(est is None)
        return est

    pipe = _overflowing_pipelines()[kind]()
    param = [name for name in pipe.get_params() if name.endswith("__alpha")][0]
    search = _search(pipe, {param: [1e-3]})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_module.PrivateHyperparameterSearch, "_fit_or_fail", spying)
        search.fit(X, y)
    assert failures and not any(failures)
    # The released pipeline holds the user's steps, not the search's guards.
    released_steps = [type(step).__name__ for _, step in search.best_estimator_.steps]
    assert released_steps == [type(step).__name__ for _, step in pipe.steps]
    assert "_FiniteRows" not in repr(search.best_estimator_)


def test_a_row_whose_duplicate_entries_overflow_is_zeroed_within_a_search():
    # Two stored entries of 1e308 in one cell sum to inf: the bare classifier refused
    # the row inside a run, which failed and released the public model.
    from skdp_sparse.utils.validation import nonfinite_rows_zeroed

    X, y = _data()
    csr = sp.csr_matrix(X)
    first = csr.indptr[1]
    X_dup = sp.csr_matrix((np.insert(csr.data, first, [1e308, 1e308]),
                           np.insert(csr.indices, first, [1, 1]),
                           np.r_[0, csr.indptr[1:] + 2]), shape=X.shape)
    with pytest.raises(ValueError, match="duplicate entries"):
        _classifier(solver="sgd", random_state=0).fit(X_dup, y)
    X_zero = X.copy()
    X_zero[0] = 0.0
    with nonfinite_rows_zeroed():
        got = _classifier(solver="sgd", random_state=0).fit(X_dup, y).coef_
    want = _classifier(solver="sgd", random_state=0).fit(sp.csr_matrix(X_zero), y).coef_
    np.testing.assert_array_equal(got, want)


def test_a_fit_within_a_search_maps_non_finite_rows_to_zero_rows():
    from skdp_sparse.utils.validation import nonfinite_rows_zeroed

    X, y = _data()
    X_inf = X.copy()
    X_inf[[3, 7], [0, 2]] = [np.inf, np.nan]
    X_zero = X.copy()
    X_zero[[3, 7]] = 0.0
    for data in (X_inf, sp.csr_matrix(X_inf), sp.csc_matrix(X_inf)):
        with pytest.raises(ValueError, match="NaN|infinity"):
            _classifier(solver="sgd", random_state=0).fit(data, y)
        with nonfinite_rows_zeroed():
            got = _classifier(solver="sgd", random_state=0).fit(data, y).coef_
        want = _classifier(solver="sgd", random_state=0).fit(
            X_zero if not sp.issparse(data) else type(data)(X_zero), y).coef_
        np.testing.assert_array_equal(got, want)


def test_raw_text_for_a_model_of_numbers_fails_on_the_stand_in_documents():
    # Raw documents are taken; a model that needs numbers fails on the empty stand-in
    # documents, in public, before any budget, and the message quotes no document.
    docs = ["patient alice smith diagnosed HIV+", "a b c"] * 4
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="not a number") as info:
        _search(_classifier(), {"alpha": [1e-4]}).fit(docs, [0, 1] * 4)
    assert "alice" not in str(info.value)
    assert len(ledger) == 0 and ledger.pending() == []


def test_a_grid_value_may_not_swap_in_a_step_that_fits_without_privacy():
    from sklearn.preprocessing import StandardScaler

    # It used to run and release the scaler's exact column means in best_estimator_.
    X, y = _data()
    pipe = make_pipeline(BoundedScaler(bounds=(0, 10)), _classifier(solver="sgd"))
    search = _search(pipe, {"boundedscaler": [StandardScaler()]})
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="without privacy"):
        search.fit(X, y)
    assert len(ledger) == 0
    with pytest.raises(ValueError, match="changes which steps"):
        _search(pipe, {"boundedscaler": [DPStandardScaler(bounds=(0, 10))]}).fit(X, y)
    # Swapping one private step for another is a grid like any other.
    swap = _search(pipe, {"dpsparselogisticregression": [_classifier(solver="sgd"),
                                                         _classifier(solver="greedy_cd")]})
    assert swap.fit(X, y).best_params_


def test_a_grid_value_holding_a_ledger_of_its_own_is_refused():
    # The search's inner fits report to no ledger, so this cap of 0.1 used to let a
    # search of epsilon 1 run, and nothing was recorded.
    X, y = _data()
    own = PrivacyLedger(max_epsilon=0.1, max_delta=1e-3)
    pipe = make_pipeline(BoundedScaler(bounds=(0, 10)), _classifier(solver="sgd"))
    grid = {"dpsparselogisticregression": [_classifier(solver="sgd", ledger=own)]}
    with pytest.raises(ValueError, match="ledger= of its own"):
        _search(pipe, grid).fit(X, y)
    assert len(own) == 0


def test_the_runs_print_nothing_that_counts_them(capsys):
    # Each inner fit printed its verbose lines: their number told the number of runs K.
    X, y = _data()
    printed = set()
    for seed in range(4):
        search = PrivateHyperparameterSearch(
            _classifier(solver="sgd", verbose=1), {"alpha": [1e-3, 1e-2]},
            expected_repetitions=8, random_state=seed)
        search.fit(X, y)
        printed.add(len(capsys.readouterr().out.splitlines()))
    assert len(printed) == 1


def test_a_frozen_step_feeding_the_model_is_searched():
    # A frozen step has no fit_transform; the search's guard of public steps called it.
    X, y = _data()
    scaler = DPStandardScaler(bounds=(0, 10), clip_output=3.0, random_state=0).fit(X)
    pipe = make_pipeline(FrozenEstimator(scaler), _classifier())
    search = _search(pipe).fit(X, y)
    assert search.best_estimator_[0].estimator is scaler
    assert search.epsilon_spent_ <= 1.0 + 1e-9


def test_a_label_scoring_selector_before_the_classifier_gets_the_public_label_set():
    # Both private steps take ``classes``; the search sets the one public set on each
    # (and checks that those already set agree with it) instead of refusing the pipeline.
    X, y = _data(p=6)
    pipe = Pipeline([("select", DPSelectKBest(k=3, score_func="association", norm_bound=6.0)),
                     ("dpsparselogisticregression", _classifier())])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        search = _search(pipe, {"select__k": [2, 3]}).fit(X, y)
    assert search.best_estimator_["select"].classes == [0, 1]
    assert list(search.best_estimator_["select"].classes_) == [0, 1]
    with pytest.raises(ValueError, match=r"select__classes=\[0, 2\] of Pipeline"):
        _search(pipe.set_params(select__classes=[0, 2]), {"select__k": [2, 3]}).fit(X, y)


@pytest.mark.parametrize("frame", [False, True])
def test_a_private_step_that_learns_from_text_is_refused_before_any_budget(frame):
    # On the stand-in data's empty strings its vocabulary would come out empty; the
    # message says so and what to do, not "more documents or a larger epsilon".
    docs = ["free prize call now", "see you at lunch"] * 20
    vectorizer = DPTfidfVectorizer(max_terms_per_document=5)
    if frame:
        X = pd.DataFrame({"text": docs})
        columns = ColumnTransformer([("v", vectorizer, "text")], sparse_threshold=0)
        pipe = Pipeline([("columns", columns), ("dpsparselogisticregression", _classifier())])
    else:
        X, pipe = docs, make_pipeline(vectorizer, _classifier())
    with privacy_ledger() as ledger, pytest.raises(ValueError, match="FrozenEstimator"):
        _search(pipe).fit(X, [1, 0] * 20)
    assert len(ledger) == 0 and ledger.pending() == []


def test_a_meta_estimator_holding_the_private_model_is_refused_for_what_it_is():
    # A log-scale TransformedTargetRegressor around a private regressor was refused as
    # "fits on the data without privacy", which named neither the private model it
    # holds nor the composites that may hold one.
    from sklearn.compose import TransformedTargetRegressor

    X, y = _data()
    model = TransformedTargetRegressor(
        DPGreedyCDRegressor(target_bounds=(0.0, 3.0)), func=np.log1p,
        inverse_func=np.expm1, check_inverse=False)
    with privacy_ledger() as ledger, pytest.raises(
            ValueError, match=r"TransformedTargetRegressor \(TransformedTargetRegressor\) "
                              r"holds private steps.*FeatureUnion or ColumnTransformer only"):
        _search(model, {"regressor__alpha": [1e-3]}).fit(X, y.astype(float))
    assert len(ledger) == 0 and ledger.pending() == []
