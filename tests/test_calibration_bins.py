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


def test_rate_threshold_is_the_point_above_which_the_counts_hold_the_positives():
    # Four bins of width 1/2 on [-1, 1] holding 10, 20, 30 and 40 rows: 40 lie above
    # 0.5, 70 above 0; 50 lie above the point two thirds of the way into the third bin.
    counts = np.array([10.0, 20.0, 30.0, 40.0])
    assert _calibration.rate_threshold(counts, 50) == pytest.approx(1 / 3)
    assert _calibration.rate_threshold(counts, 40) == pytest.approx(0.5)
    assert _calibration.rate_threshold(counts, 100) == -1.0
    assert _calibration.rate_threshold(counts, 130) == -1.0
    assert _calibration.rate_threshold(counts, 0) == 1.0
    assert _calibration.rate_threshold(counts, 20) == pytest.approx(0.75)
    # Past an empty bin: the lower edge of the bin that holds the target.
    assert _calibration.rate_threshold(np.array([5.0, 0.0, 5.0]), 5) == pytest.approx(1 / 3)


def test_scale_quantile_leaves_a_tail_the_noise_cannot_hide():
    # 5% of the rows where they are many against a level's noise; where they are few,
    # a tail of twice that noise (398 rows, noise 38.7: breast cancer at epsilon 1), at
    # most a quarter of the rows.
    assert _calibration.scale_quantile(32_561, 5.0) == pytest.approx(0.95)
    assert _calibration.scale_quantile(398, 38.7) == pytest.approx(1 - 2 * 38.7 / 398)
    assert _calibration.scale_quantile(100, 100.0) == pytest.approx(0.75)
    assert (_calibration.SCALE_TAIL_NOISE, _calibration.MAX_SCALE_TAIL) == (2.0, 0.25)


def _offset_problem(signal, n=400):
    """One feature whose scores share an offset (every x near 0.5), 56% positive rows."""
    rng = np.random.default_rng(0)
    y = np.where(rng.random(n) < 0.6, 1.0, -1.0)
    x = np.clip(0.5 + (0.12 * y if signal else 0.0) + rng.normal(0, 0.1, n), 0, 1)
    return x, y


@pytest.mark.parametrize("signal", [True, False])
def test_few_rows_against_the_noise_decide_with_a_score_that_ranks(signal):
    # 400 rows, each cell of the class histograms with noise sd 20 and the class count
    # 19 (breast cancer's 398 rows at epsilon 1): the fitted rule's gain test kept the
    # majority in 11 fits of 40 and the mean training accuracy was 0.71; the threshold
    # at the class count, kept on its own gain test, brings it to 0.78 (Bayes: 0.88). A
    # score without signal stays within 0.02 of the majority (0.5625) on average.
    x, y = _offset_problem(signal)
    X = sp.csr_matrix(x[:, None])
    accuracy = []
    for seed in range(40):
        coef, intercept, _ = calibrate(
            LocalData(X, y[:, None]), np.array([0]), np.array([[1.0]]), norm_bound=1.0,
            offsets=np.zeros(1), scale_unit=27.0, calibration_unit=20 / math.sqrt(2),
            floating_point_safe=False, rng=np.random.default_rng(seed), class_count_unit=19.0)
        accuracy.append(np.mean((x * coef[0, 0] + intercept[0] > 0) == (y > 0)))
    if signal:
        assert np.mean(accuracy) > 0.77
    else:
        assert np.mean(accuracy) > np.mean(y > 0) - 0.02
