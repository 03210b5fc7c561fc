"""Fits with a fixed ``random_state`` reproduce pinned coefficients, solver by solver.

The pinned values were produced by the code before a restructuring of the
package (and produced again, by code that still reproduced them, when the data's
sparsity pattern stopped depending on the scipy version); any change to them must be
a deliberate change of behaviour (and the file regenerated with
``python tests/test_pinned_fits.py --write``). Cases set the
parameters they pin explicitly (``curvature="private"`` since the default became
``"auto"``), so that a change of a default does not move them. Noise in
doubles (``floating_point_safe=False``) reproduces the fits of before the safe
samplers became the default.
"""

import pathlib
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from skdp_sparse import (
    DPGreedyCDRegressor,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
    DPSparseLogisticRegression,
    DPSparseMeanEstimator,
)

PINNED = pathlib.Path(__file__).parent / "data" / "pinned_fits.npz"


def _data():
    # The pattern from NumPy's generator alone: scipy.sparse.random draws another
    # pattern from the same generator in other scipy versions (1.12 against 1.17).
    rng = np.random.default_rng(12345)
    X = sp.csr_matrix(np.where(rng.random((120, 15)) < 0.3, 1.0, 0.0))
    X.data = rng.uniform(-1, 1, X.nnz)
    w = rng.normal(size=15)
    z = X @ w
    y_bin = (z > np.median(z)).astype(int)
    y_multi = np.digitize(z, np.quantile(z, [1 / 3, 2 / 3]))
    y_reg = np.clip(z / (np.abs(z).max() + 1e-12), -1, 1)
    return X, y_bin, y_multi, y_reg


def _logistic(**kw):
    kw.setdefault("floating_point_safe", False)
    return DPSparseLogisticRegression(epsilon=2.0, delta=1e-5, random_state=7, **kw)


CASES = {
    "logistic_greedy_cd": (
        lambda: _logistic(solver="greedy_cd", curvature="private", max_iter=40), "bin"),
    "logistic_greedy_cd_laplace": (
        lambda: _logistic(solver="greedy_cd", selection="laplace", curvature="private",
                          max_iter=40), "bin"),
    "logistic_greedy_cd_bound": (
        lambda: _logistic(solver="greedy_cd", curvature="bound", max_iter=40), "bin"),
    "logistic_cd": (lambda: _logistic(solver="cd", curvature="private", max_iter=3), "bin"),
    "logistic_sgd": (lambda: _logistic(solver="sgd", max_iter=20), "bin"),
    "logistic_sgd_minibatch": (lambda: _logistic(solver="sgd", batch_size=30, max_iter=20),
                               "bin"),
    "logistic_sparse_sgd": (lambda: _logistic(solver="sparse_sgd", max_iter=20), "bin"),
    "logistic_phased_sgd": (lambda: _logistic(solver="phased_sgd"), "bin"),
    "logistic_bias_reduced_sgd": (lambda: _logistic(solver="bias_reduced_sgd", max_iter=20),
                                  "bin"),
    "logistic_output_perturbation": (
        lambda: _logistic(solver="output_perturbation", penalty="l2",
                          floating_point_safe="auto"), "bin"),
    # At epsilon 2 its 120 rows fall back on the majority: a budget where the step shows.
    "logistic_screened_newton": (
        lambda: DPSparseLogisticRegression(epsilon=100.0, delta=1e-5, random_state=7,
                                           solver="screened_newton", penalty=None,
                                           norm_bound=2.0, floating_point_safe=False),
        "bin"),
    "logistic_multiclass_greedy_cd": (
        lambda: _logistic(solver="greedy_cd", curvature="private", max_iter=30,
                          multi_class="ovr"), "multi"),
    "logistic_multiclass_sgd": (lambda: _logistic(solver="sgd", max_iter=10,
                                                  multi_class="ovr"), "multi"),
    # The solver's own coefficients (the calibrated fit above predicts the majority).
    "logistic_multiclass_sgd_fitted": (
        lambda: _logistic(solver="sgd", max_iter=10, decision="fitted", multi_class="ovr"),
        "multi"),
    "logistic_multinomial_sgd": (
        lambda: _logistic(solver="sgd", max_iter=10, multi_class="multinomial"), "multi"),
    "regressor_greedy_cd": (
        lambda: DPGreedyCDRegressor(epsilon=2.0, delta=1e-5, max_iter=40, random_state=7,
                                    floating_point_safe=False,
                                    decision="fitted"), "reg"),
    "regressor_huber_cd": (
        lambda: DPGreedyCDRegressor(epsilon=2.0, delta=1e-5, loss="huber", solver="cd",
                                    curvature="private", max_iter=3, random_state=7,
                                    floating_point_safe=False),
        "reg"),
    "regressor_sgd": (
        lambda: DPGreedyCDRegressor(epsilon=2.0, delta=1e-5, solver="sgd", max_iter=20,
                                    random_state=7, floating_point_safe=False,
                                    decision="fitted"), "reg"),
    # The refit of its prediction (n mu about 400: the decision takes half the budget,
    # and the slope survives).
    "regressor_sgd_calibrated": (
        lambda: DPGreedyCDRegressor(epsilon=20.0, delta=1e-5, solver="sgd", max_iter=20,
                                    random_state=7, floating_point_safe=False,
                                    decision="calibrated"), "reg"),
    "op_classifier_gaussian": (
        lambda: DPOutputPerturbationClassifier(epsilon=2.0, delta=1e-5, random_state=7),
        "bin"),
    "op_classifier_laplace": (
        lambda: DPOutputPerturbationClassifier(epsilon=2.0, random_state=7), "multi"),
    "op_regressor_float": (
        lambda: DPOutputPerturbationRegressor(epsilon=2.0, delta=1e-5, random_state=7,
                                              floating_point_safe=False,
                                              decision="fitted"), "reg"),
    "mean_projection_gaussian": (
        lambda: DPSparseMeanEstimator(epsilon=2.0, delta=1e-5, sparsity=5, random_state=7),
        None),
    "mean_projection_laplace": (
        lambda: DPSparseMeanEstimator(epsilon=2.0, sparsity=5, random_state=7), None),
    "mean_gaussian": (
        lambda: DPSparseMeanEstimator(epsilon=2.0, delta=1e-5, method="gaussian",
                                      random_state=7), None),
    "mean_laplace_float": (
        lambda: DPSparseMeanEstimator(epsilon=2.0, method="laplace", random_state=7,
                                      floating_point_safe=False), None),
    "mean_l1_recovery": (
        lambda: DPSparseMeanEstimator(epsilon=2.0, delta=1e-5, sparsity=5,
                                      method="l1_recovery", random_state=7), None),
}


def _fit(name):
    make, target = CASES[name]
    X, y_bin, y_multi, y_reg = _data()
    est = make()
    if "classes" in est.get_params():
        est.set_params(classes=[0, 1] if target == "bin" else [0, 1, 2])
    y = {"bin": y_bin, "multi": y_multi, "reg": y_reg, None: None}[target]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X) if y is None else est.fit(X, y)
    if hasattr(est, "mean_"):
        return np.asarray(est.mean_)
    return np.concatenate([np.ravel(est.coef_), np.ravel(est.intercept_)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_fit_reproduces_pinned_coefficients(name):
    pinned = np.load(PINNED)
    # A deliberate change moves coefficients by far more than 1e-9; below that are the
    # roundings a new compiler or BLAS may change (1.5e-12 seen with a numba update).
    np.testing.assert_allclose(_fit(name), pinned[name], rtol=1e-9, atol=1e-12)


if __name__ == "__main__" and "--write" in sys.argv:
    np.savez(PINNED, **{name: _fit(name) for name in sorted(CASES)})
    print(f"wrote {PINNED}")
