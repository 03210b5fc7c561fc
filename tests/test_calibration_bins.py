"""The class histograms' bins: fewer where the rows are few against the noise
(:func:`skdp_sparse.solvers._calibration.calibration_bins`), every one where the budget
share meets its need."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from skdp_sparse.data import LocalData
from skdp_sparse.solvers import _calibration
from skdp_sparse.solvers import decision as D
from skdp_sparse.solvers._calibration import CALIBRATION_BINS, calibrate


def test_few_rows_against_the_noise_get_fewer_bins_and_keep_a_rule_that_ranks():
    # 100 rows, 35 positive, whose score ranks them well (ROC AUC about 0.9), and
    # class-histogram cells with noise sd 2: on 20 bins an average cell holds 2.5 rows,
    # and the gain test kept the fitted rule in 20 fits of 40; on the 6 bins that
    # calibration_bins gives, in all.
    rng = np.random.default_rng(0)
    n = 100
    y = np.where(np.arange(n) < 35, 1.0, -1.0)
    X = sp.csr_matrix(np.clip(0.3 * y + rng.normal(0, 0.35, n), -1, 1)[:, None])
    cell_sd = 2.0
    kept = 0
    for seed in range(40):
        _, _, used = calibrate(
            LocalData(X, y[:, None]), np.array([0]), np.array([[1.0]]), norm_bound=1.0,
            offsets=np.zeros(1), scale_unit=0.05, calibration_unit=cell_sd / math.sqrt(2),
            floating_point_safe=False, rng=np.random.default_rng(seed), class_count_unit=0.5)
        kept += bool(used[0])
    assert kept >= 34
    assert _calibration.calibration_bins(n, cell_sd) == 6


@pytest.mark.parametrize("n", [300, 32_561, 10**6])
def test_histograms_whose_share_meets_its_need_keep_every_bin(n):
    # Where the share reaches its need, a cell's noise is CELL_NOISE of an average cell
    # on CALIBRATION_BINS bins, which calibration_bins leaves as they are.
    cell_sd = D.CELL_NOISE * n / (2 * CALIBRATION_BINS)
    assert _calibration.calibration_bins(n, cell_sd) == CALIBRATION_BINS
    assert _calibration.calibration_bins(n, 0.0) == CALIBRATION_BINS
    assert _calibration.calibration_bins(n, n) == _calibration.MIN_CALIBRATION_BINS
