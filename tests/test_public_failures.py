"""What a failed fit may say: errors raised before any budget, whose messages quote no
data and whose raising does not depend on private values."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from skdp_sparse import (
    BoundedScaler,
    DPGreedyCDRegressor,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
    DPSparseLogisticRegression,
    DPSparseMeanEstimator,
    DPStandardScaler,
    PrivateHyperparameterSearch,
    privacy_ledger,
)
from skdp_sparse.feature_selection import DPSelectKBest
from skdp_sparse.privacy.ledger._store import scalar_params
from skdp_sparse.utils.validation import data_free_errors

_SECRETS = ("52311", "250001", "alice smith", "HIV+")


def _refused(fit, match=None):
    """The exception of ``fit()``, which must leave every ledger empty."""
    with privacy_ledger() as ledger:
        with pytest.raises((ValueError, TypeError), match=match) as info:
            fit()
    assert len(ledger) == 0 and ledger.spent() == (0, 0)
    with open(ledger.path) as f:  # not even a reservation and its release
        assert [json.loads(line)["kind"] for line in f] == ["header"]
    return info.value


def _quotes_nothing(exc):
    chain = [exc, exc.__cause__, exc.__context__]
    text = " ".join(str(e) for e in chain if e is not None)
    assert not [s for s in _SECRETS if s in text], text


_SALARIES = np.array([52311.25, 98123.5, 40400.75, 250001.0, 61234.0])
_NAMES = np.array([["alice smith", 1.0]] * 5, dtype=object)


@pytest.mark.parametrize("fit", [
    lambda: DPStandardScaler(bounds=(0, 3e5)).fit(_SALARIES),
    lambda: BoundedScaler(bounds=(0, 3e5)).fit(_SALARIES),
    lambda: DPSelectKBest(k=1, sparsity=1).fit(_SALARIES),
    lambda: DPSparseMeanEstimator().fit(_SALARIES),
    lambda: DPStandardScaler(bounds=(0, 1)).fit(_NAMES),
    lambda: DPSparseMeanEstimator().fit(pd.DataFrame({"a": [1, 2], "b": ["3", "HIV+ #17"]})),
    lambda: DPGreedyCDRegressor(target_bounds=(0, 1)).fit(
        np.ones((5, 2)), np.array(["alice smith", "b", "c", "d", "e"])),
    lambda: DPOutputPerturbationRegressor(target_bounds=(0, 3e5)).fit(
        sp.random(5, 3, density=0.5, format="csr", random_state=0),
        np.array(["1", "2", "alice smith", "4", "5"], dtype=object)),
    lambda: DPSparseLogisticRegression(classes=[0, 1]).fit(_NAMES, [0, 1, 0, 1, 0]),
    lambda: PrivateHyperparameterSearch(
        DPSparseLogisticRegression(classes=[0, 1]), {"alpha": [1e-4]}).fit(
            ["patient alice smith diagnosed HIV+"] * 8, [0, 1] * 4),
])
def test_validation_errors_do_not_quote_the_data(fit):
    _quotes_nothing(_refused(fit))


def test_predict_errors_do_not_quote_the_data():
    X = np.random.default_rng(0).uniform(0, 1, (40, 2))
    clf = DPSparseLogisticRegression(classes=[0, 1], random_state=0).fit(X, np.arange(40) % 2)
    with pytest.raises(ValueError) as info:
        clf.predict(np.array([[0.1, "alice smith"]], dtype=object))
    _quotes_nothing(info.value)


def test_data_free_errors_keep_other_messages():
    with pytest.raises(ValueError, match="^norm_bound must be positive$"):
        with data_free_errors():
            raise ValueError("norm_bound must be positive")
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array instead.\nReshape"):
        with data_free_errors():
            raise ValueError("Expected 2D array, got 1D array instead:\narray=[1. 2.\n 3.].\n"
                             "Reshape your data either using array.reshape(-1, 1)")


@pytest.mark.parametrize("make", [
    lambda: DPSparseLogisticRegression(classes=[0, 1]),
    lambda: DPGreedyCDRegressor(target_bounds=(0, 1)),
    lambda: DPOutputPerturbationClassifier(classes=[0, 1]),
    lambda: DPSparseMeanEstimator(),
    lambda: DPStandardScaler(bounds=(0, 1)),
    lambda: PrivateHyperparameterSearch(DPSparseLogisticRegression(classes=[0, 1]),
                                        {"alpha": [1e-4]}),
])
def test_a_random_state_that_makes_no_generator_fails_before_any_budget(make):
    X = np.random.default_rng(0).uniform(0, 1, (40, 2))
    y = np.arange(40) % 2
    est = make().set_params(random_state=-1)
    fit = (lambda: est.fit(X)) if isinstance(est, DPSparseMeanEstimator | DPStandardScaler) \
        else (lambda: est.fit(X, y))
    _refused(fit, match="random_state must be None, a non-negative int")
    assert not hasattr(est, "epsilon_spent_")


@pytest.mark.parametrize("make", [
    lambda: DPSparseLogisticRegression(classes=[0.0, 0.5, 1.0], random_state=0),
    lambda: DPOutputPerturbationClassifier(classes=[0.0, 0.5, 1.0], random_state=0),
])
def test_with_public_classes_only_labels_outside_them_raise(make):
    # scikit-learn calls [0, 0.5, 1] continuous only when some row is labelled 0.5:
    # whether the fit raised would tell whether such a row exists.
    X = np.random.default_rng(0).uniform(0, 1, (60, 2))
    without = np.where(np.arange(60) % 2, 1.0, 0.0)
    with_one = without.copy()
    with_one[7] = 0.5
    assert make().fit(X, without).classes_.tolist() == [0.0, 0.5, 1.0]
    assert make().fit(X, with_one).classes_.tolist() == [0.0, 0.5, 1.0]
    outside = without.copy()
    outside[3] = 0.25
    _refused(lambda: make().fit(X, outside), match="outside the public label set")
    labels = np.array(["ham", "spam"] * 30, dtype=object)
    labels[5] = None  # incomparable with the label set: outside it, like any other
    _refused(lambda: DPSparseLogisticRegression(classes=["ham", "spam"]).fit(X, labels),
             match="outside the public label set")


@pytest.mark.parametrize("bounds", [(-1e308, 1e308), (1e308, 1.7e308), (0, 5e-324),
                                    (0, 1e-101), (-2e100, 0)])
def test_target_bounds_outside_the_range_of_a_bound_are_refused(bounds):
    X, y = np.ones((10, 2)), np.linspace(0, 1, 10)
    for est in (DPGreedyCDRegressor(target_bounds=bounds),
                DPOutputPerturbationRegressor(target_bounds=bounds)):
        _refused(lambda est=est: est.fit(X, y), match="target_bounds must be a pair")


def test_target_bounds_may_be_an_array():
    X, y = np.ones((10, 2)), np.linspace(0, 1, 10)
    est = DPGreedyCDRegressor(target_bounds=np.array([0.0, 1.0]), random_state=0).fit(X, y)
    assert np.isfinite(est.predict(X)).all()


@pytest.mark.parametrize("bounds", [(0, 1e-300), (-1e200, 1e200), (-1e308, 1e308)])
def test_scaler_ranges_outside_the_range_of_a_bound_are_refused(bounds):
    X = np.zeros((10, 2))
    for est in (DPStandardScaler(bounds=bounds), BoundedScaler(bounds=bounds)):
        _refused(lambda est=est: est.fit(X), match="every range must lie within")


def test_contribution_bound_outside_the_range_of_a_bound_is_refused():
    X, y = np.ones((10, 2)), np.arange(10) % 2
    est = DPSparseLogisticRegression(classes=[0, 1], solver="sparse_sgd",
                                     contribution_bound=1e-300)
    _refused(lambda: est.fit(X, y), match="contribution_bound")


def test_ledger_records_keep_no_seed():
    # A seed lets whoever reads the ledger regenerate the noise of the fit.
    params = scalar_params(DPSparseLogisticRegression(random_state=12345, epsilon=0.5))
    assert "random_state" not in params and params["epsilon"] == 0.5


@pytest.mark.parametrize("solver", ["sgd", "sparse_sgd", "bias_reduced_sgd"])
def test_a_learning_rate_that_lets_iterates_overflow_is_refused_before_any_budget(solver):
    # At learning_rate 1e200 and bounds 1e100, one noisy step takes the weights to about
    # 1e208, and a row [L, -L, L, -L] has margin inf - inf: the fit failed on that row
    # and not on a row of zeros. The rate is refused from public values instead.
    bound = 1e100
    X = np.zeros((40, 4))
    X[0] = [bound, -bound, bound, -bound]
    y = np.arange(40) % 2
    est = DPSparseLogisticRegression(classes=[0, 1], solver=solver, learning_rate=1e200,
                                     norm_bound=bound, feature_bound=bound, max_iter=5,
                                     random_state=0)
    _refused(lambda: est.fit(X, y), match="learning_rate=1e\\+200 is above")
    # A large rate within the cap fits on both neighbours alike.
    for rows in (X, np.zeros((40, 4))):
        est.set_params(learning_rate=1e5 / (0.25 * (2 * bound**2 + 1)))
        assert np.isfinite(est.fit(rows, y).coef_).all()


@pytest.mark.parametrize("multi_class", ["ovr", "multinomial"])
def test_a_learning_rate_that_the_l2_penalty_makes_diverge_is_refused_before_any_budget(
        multi_class):
    # Each step multiplies the weights by 1 - learning_rate * l2 = -99999: after about 60
    # steps they overflow and the fit raised (non-finite gradient, or a lattice release
    # of a non-finite value) with the whole budget spent.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4)) / 2
    y = np.arange(60) % 3
    est = DPSparseLogisticRegression(classes=[0, 1, 2], solver="sgd", multi_class=multi_class,
                                     penalty="l2", alpha=1.0, learning_rate=1e5,
                                     max_iter=100, random_state=0)
    _refused(lambda: est.fit(X, y), match="learning_rate=100000 times the l2 penalty 1 is")
    # At learning_rate * l2 = 2 the weights do not grow.
    assert np.isfinite(est.set_params(learning_rate=2.0).fit(X, y).coef_).all()


def test_bias_reduced_sgd_refuses_a_learning_rate_that_the_l2_penalty_makes_diverge():
    # Its lazy iterate applies the same decay 1 - learning_rate * l2 a step: at 3 the
    # coefficients reached 2e10, at 1e5 3e169, with no error.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4)) / 2
    y = np.arange(200) % 2
    est = DPSparseLogisticRegression(classes=[0, 1], solver="bias_reduced_sgd", penalty="l2",
                                     alpha=1.0, learning_rate=3.0, random_state=0)
    _refused(lambda: est.fit(X, y), match="learning_rate=3 times the l2 penalty 1 is")
    assert np.abs(est.set_params(learning_rate=2.0).fit(X, y).coef_).max() < 1e3


@pytest.mark.parametrize("curvature", ["private", "bound"])
def test_limits_of_the_exact_samplers_are_met_in_the_plan(curvature):
    # The greedy selection's lattice used to be planned inside the run, after the
    # curvature release had spent its share of the budget.
    X = sp.random(200, 8, density=0.4, format="csr", random_state=1)
    y = np.arange(200) % 2
    est = DPSparseLogisticRegression(
        solver="greedy_cd", curvature=curvature, classes=[0, 1], norm_bound=1e-100,
        feature_bound=1e-100, epsilon=1e-6, delta=1e-300, random_state=0)
    exc = _refused(lambda: est.fit(X, y), match="floating-point-safe noise cannot serve")
    assert "alpha" in str(exc)
    est.set_params(floating_point_safe=False).fit(X, y)  # the float path has no lattice


@pytest.mark.parametrize("solver, params", [
    ("cd", {}), ("sgd", {}), ("sparse_sgd", {}), ("phased_sgd", {}),
    ("output_perturbation", {"penalty": "l2"}), ("screened_newton", {}),
    ("bounded_newton", {"penalty": "l2"}), ("bias_reduced_sgd", {}),
    ("screened_newton", {"epsilon": 1.0, "delta": 1e-6, "feature_selection_share": 1e-100}),
])
def test_noise_beyond_the_exact_samplers_is_refused_before_any_budget(solver, params):
    # The calibrated decision's histograms (or the screening's association, or
    # bias_reduced_sgd's first gradient) are released after other releases: their
    # lattice, planned only then, failed after the fit had spent its budget.
    X = sp.random(40, 8, density=0.5, format="csr", random_state=0)
    y = np.arange(40) % 2
    est = DPSparseLogisticRegression(solver=solver, classes=[0, 1], random_state=0,
                                     **{"epsilon": 1e-9, "delta": 1e-300, **params})
    _refused(lambda: est.fit(X, y), match="too small for the floating-point-safe noise")


@pytest.mark.parametrize("params", [
    {"epsilon": 1e-12}, {"epsilon": 1e-100}, {"epsilon": 1e-12, "sparsity": 3},
    {"epsilon": 1e-12, "delta": 1e-300, "method": "projection", "sparsity": 3},
])
def test_a_mean_whose_noise_the_exact_samplers_cannot_serve_reserves_nothing(params):
    # The lattice was planned in the release: the budget had been reserved (and was
    # then released, no noise having been drawn).
    X = sp.random(40, 8, density=0.5, format="csr", random_state=0)
    _refused(lambda: DPSparseMeanEstimator(random_state=0, **params).fit(X),
             match="floating-point-safe")


def test_the_plans_check_of_the_exact_samplers_refuses_only_what_the_run_would():
    # Where the plan lets a fit through, the run plans the same lattices: a private
    # curvature estimate at its public floor is the largest value bound the run sees.
    X = sp.random(300, 6, density=0.5, format="csr", random_state=2)
    y = np.arange(300) % 2
    outcomes = set()
    for bound in [1e-12, 1e-6, 1e-3, 1.0]:
        for alpha in [1e-4, 1e-2, 1.0]:
            est = DPSparseLogisticRegression(
                solver="greedy_cd", curvature="private", classes=[0, 1], alpha=alpha,
                norm_bound=bound, feature_bound=bound, epsilon=1.0, delta=1e-6,
                random_state=0)
            with privacy_ledger() as ledger:
                try:
                    est.fit(X, y)
                    outcomes.add("ran")
                except ValueError as exc:
                    assert "cannot serve" in str(exc)
                    assert len(ledger) == 0 and not ledger.pending()
                    outcomes.add("refused")
    assert outcomes == {"ran", "refused"}


def _malformed(kind):
    indices, indptr = np.zeros(10, np.int32), np.arange(11)
    if kind == "index past the columns":
        indices[3] = 10**6
    elif kind == "negative index":
        indices[3] = -1
    else:
        indptr[5] = 2
    return sp.csr_matrix((np.ones(10), indices, indptr), shape=(10, 3))


@pytest.mark.parametrize("kind", ["index past the columns", "negative index", "indptr"])
@pytest.mark.parametrize("fit", [
    lambda X: DPSparseLogisticRegression(classes=[0, 1], solver="sgd").fit(X, [0, 1] * 5),
    lambda X: DPSparseLogisticRegression(classes=[0, 1], solver="greedy_cd").fit(
        X, [0, 1] * 5),
    lambda X: DPOutputPerturbationClassifier(classes=[0, 1]).fit(X, [0, 1] * 5),
    lambda X: DPSelectKBest(k=1, sparsity=1).fit(X, [0, 1] * 5),
    lambda X: DPStandardScaler(bounds=(0, 1), with_mean=False).fit(X),
    lambda X: BoundedScaler(bounds=(0, 1)).fit(X),
])
def test_a_sparse_matrix_whose_indices_leave_its_shape_is_refused(kind, fit):
    # scipy builds such a matrix unchecked; kernels read outside it (a segfault).
    _refused(lambda: fit(_malformed(kind)), match="not a valid CSR matrix")


def test_predict_refuses_a_malformed_sparse_matrix():
    X = sp.random(10, 3, density=0.5, format="csr", random_state=0)
    est = DPSparseLogisticRegression(classes=[0, 1], solver="sgd", random_state=0)
    est.fit(X, [0, 1] * 5)
    with pytest.raises(ValueError, match="not a valid CSR matrix"):
        est.predict(_malformed("index past the columns"))


@pytest.mark.parametrize("make", [
    lambda: DPStandardScaler(bounds=(0, 1), with_mean=False),
    lambda: DPSelectKBest(k=1, sparsity=1),
    lambda: BoundedScaler(bounds=(0, 1)),
])
def test_steps_without_dask_support_say_so(make):
    da = pytest.importorskip("dask.array")
    X = da.from_array(sp.random(20, 3, density=0.5, format="csr", random_state=0),
                      chunks=(10, 3))
    y = np.arange(20) % 2
    with pytest.raises(ValueError, match="does not take dask arrays"):
        make().fit(X, y)


def test_a_classifier_without_a_solver_parameter_is_not_told_to_pass_one():
    da = pytest.importorskip("dask.array")
    X = da.from_array(np.ones((20, 3)), chunks=(10, 3))
    y = da.from_array(np.arange(20) % 2, chunks=10)
    with pytest.raises(ValueError, match="cannot fit a dask array") as info:
        DPOutputPerturbationClassifier(classes=[0, 1]).fit(X, y)
    assert "solver=..." not in str(info.value)


def test_an_analyzer_term_that_is_not_a_string_is_refused_before_any_budget():
    from skdp_sparse.feature_extraction.text import DPTfidfVectorizer

    # Terms of other types were counted as dict keys: 1, 1.0 and True merged into one
    # partition, released under the spelling of the first document that had it.
    def analyzer(doc):
        return [float(len(w)) if doc.startswith("!") else len(w) for w in doc.split()]

    docs = ["!aaa bb c"] + ["aaa bb c"] * 999
    exc = _refused(lambda: DPTfidfVectorizer(analyzer=analyzer, random_state=0).fit(docs),
                   match="terms of type str")
    assert "value is not shown" in str(exc)


def test_terms_of_a_string_subclass_are_released_as_plain_strings():
    from skdp_sparse.feature_extraction.text import DPTfidfVectorizer

    def analyzer(doc):
        words = doc.split()
        return [np.str_(w) for w in words] if words[0] == "x" else words

    for first in ("x aa bb", "y aa bb"):
        vec = DPTfidfVectorizer(analyzer=analyzer, epsilon=5.0, random_state=0)
        vec.fit([first] + ["y aa bb"] * 999)
        assert {type(term) for term in vec.vocabulary_} == {str}
        assert vec.transform(["x aa"]).nnz == 1


@pytest.mark.parametrize("solver", ["greedy_cd", "cd", "sgd", "sufficient_statistics"])
def test_a_none_among_the_targets_is_refused_before_any_budget(solver):
    # scikit-learn's finiteness check runs before object targets become floats, so a
    # None passed it as a NaN: greedy CD released coefficients 20 times larger, other
    # solvers raised after their noise was drawn.
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (300, 4))
    y = rng.uniform(-1, 1, 300).astype(object)
    y[5] = None
    est = DPGreedyCDRegressor(solver=solver, target_bounds=(-1, 1), random_state=0)
    _refused(lambda: est.fit(X, y), match="NaN or infinity")


def test_dask_blocks_are_refused_before_any_budget_without_quoting_them():
    da = pytest.importorskip("dask.array")
    X = np.array([["1", "2"], ["3", "HIV+ #17"]] * 4, dtype=object)
    exc = _refused(lambda: DPSparseMeanEstimator().fit(da.from_array(X, chunks=(4, 2))))
    _quotes_nothing(exc)
    Xf = da.from_array(np.ones((8, 2)), chunks=(4, 2))
    y = np.array(["1", "2", "alice smith", "4"] * 2, dtype=object)
    exc = _refused(lambda: DPGreedyCDRegressor(target_bounds=(0, 5)).fit(
        Xf, da.from_array(y, chunks=4)))
    _quotes_nothing(exc)
    y = np.array([1.0, None, 0.5, 0.2] * 2, dtype=object)
    _refused(lambda: DPGreedyCDRegressor(target_bounds=(0, 5)).fit(
        Xf, da.from_array(y, chunks=4)), match="NaN or infinity")


@pytest.mark.parametrize("method", ["projection", "l1_recovery", "gaussian", "laplace"])
@pytest.mark.parametrize("sparse", [False, True])
def test_a_mean_of_rows_with_a_nan_is_refused_before_any_budget(method, sparse):
    # The mean checked finiteness as it clipped the rows, after its budget was
    # reserved: the ledger then held a reservation and its release for that data only.
    X = np.ones((40, 3))
    X[4, 1] = np.nan
    X = sp.csr_matrix(X) if sparse else X
    est = DPSparseMeanEstimator(method=method, sparsity=2,
                                delta=0.0 if method == "laplace" else 1e-6)
    _refused(lambda: est.fit(X), match="NaN or infinity")


def test_a_budget_too_small_for_the_decisions_share_says_so():
    # The search for the solver's share used to halve its epsilon down to 0, and the
    # solver then refused "epsilon must be > 0, got 0.0".
    X = sp.random(200, 8, density=0.4, format="csr", random_state=1)
    y = np.random.default_rng(0).normal(size=200)
    est = DPGreedyCDRegressor(solver="sparse_sgd", norm_bound=1e-100, feature_bound=1e-100,
                              target_bounds=(-1e-100, 1e-100), epsilon=1e-6, delta=1e-300,
                              floating_point_safe=False)
    with pytest.warns(Warning):  # the float path's warning
        _refused(lambda: est.fit(X, y), match="leaves the solver no budget")


def test_bounds_too_large_for_the_curvature_release_are_refused_in_the_plan():
    X = sp.random(200, 8, density=0.4, format="csr", random_state=1)
    est = DPSparseLogisticRegression(solver="greedy_cd", curvature="private", classes=[0, 1],
                                     norm_bound=1e100, feature_bound=1e100, epsilon=1.0,
                                     delta=1e-8)
    _refused(lambda: est.fit(X, np.arange(200) % 2), match="curvature='bound'")


@pytest.mark.parametrize("fit", [
    lambda: DPGreedyCDRegressor(target_bounds=(0, 3e5)).fit(
        np.ones((5, 2)), _SALARIES.astype(complex)),
    lambda: DPSparseLogisticRegression(classes=[0, 1]).fit(
        np.column_stack([_SALARIES, _SALARIES]).astype(complex), [0, 1, 0, 1, 0]),
    lambda: DPSparseMeanEstimator().fit(np.column_stack([_SALARIES]).astype(complex)),
])
def test_complex_data_are_refused_without_being_quoted(fit):
    _quotes_nothing(_refused(fit, match="Complex data not supported"))


def test_selected_columns_of_a_row_given_alone_are_not_quoted():
    selector = DPSelectKBest(k=1, sparsity=2, random_state=0).fit(np.ones((50, 2)))
    with pytest.raises(ValueError, match="Expected 2D array") as info:
        selector.transform(_SALARIES[:2])
    _quotes_nothing(info.value)


def test_bias_reduced_sgd_without_noise_needs_two_rows_before_any_budget():
    # It raised numpy's "Cannot take a larger sample than population" from the solve,
    # after the fit's record was written.
    _refused(lambda: DPSparseLogisticRegression(
        solver="bias_reduced_sgd", epsilon=np.inf, max_iter=5, classes=[0, 1]).fit(
            [[0.5]], [1]), match="n_samples >= 2")


def test_a_dataframe_of_documents_is_refused_before_any_budget():
    from skdp_sparse.feature_extraction.text import DPTfidfVectorizer

    # A DataFrame iterates over its column names: they were fitted as the documents.
    texts = pd.DataFrame({"text": ["alice smith visited", "HIV+ test"] * 50})
    _refused(lambda: DPTfidfVectorizer().fit(texts), match="pass one column")


@pytest.mark.parametrize("make", [
    lambda delta: DPSparseLogisticRegression(delta=delta, classes=[0, 1]),
    lambda delta: DPGreedyCDRegressor(delta=delta),
    lambda delta: DPOutputPerturbationClassifier(delta=delta, classes=[0, 1]),
    lambda delta: DPSparseMeanEstimator(delta=delta),
    lambda delta: DPStandardScaler(bounds=(0, 1), delta=delta),
])
def test_a_delta_not_below_one_over_n_warns_and_one_below_does_not(make):
    # Publishing each row with probability delta is (0, delta)-DP: at delta >= 1 / n it
    # publishes a row on average. n and delta are public, so the warning is too.
    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (40, 3)) / 2, np.arange(40) % 2
    with pytest.warns(UserWarning, match="1 / n_samples"):
        make(1 / 40).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        make(1 / 80).fit(X, y)
