"""The scikit-learn estimator checks every private estimator fails by design."""

#: The checks of ``sample_weight``, which scikit-learn runs on an estimator whose
#: ``fit`` names the parameter. Every private ``fit`` names it to refuse it.
SAMPLE_WEIGHT_CHECKS = (
    "check_sample_weights_pandas_series",
    "check_sample_weights_not_an_array",
    "check_sample_weights_list",
    "check_all_zero_sample_weights_error",
    "check_sample_weights_shape",
    "check_sample_weights_not_overwritten",
    "check_sample_weight_equivalence_on_dense_data",
    "check_sample_weight_equivalence_on_sparse_data",
    "check_classifiers_one_label_sample_weights",
)

#: Why they fail.
NO_SAMPLE_WEIGHT = (
    "fit refuses sample_weight (a TypeError): the noise is calibrated to one row, which "
    "a weight would multiply; fit names the parameter so that scikit-learn's wrappers "
    "pass weights on, to be refused, instead of using them themselves (bagging's draws "
    "of rows, a calibration's weights)")


def sample_weight_excused():
    """``{check: reason}`` of :data:`SAMPLE_WEIGHT_CHECKS`."""
    return dict.fromkeys(SAMPLE_WEIGHT_CHECKS, NO_SAMPLE_WEIGHT)
