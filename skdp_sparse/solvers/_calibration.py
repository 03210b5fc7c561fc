"""The decision of a linear score: its scale and intercept from two private histograms.

A solver that has found a direction ``w`` (public: a function of earlier releases)
still has to turn the score ``s_i = x_i . w`` into a decision: how steep the sigmoid
is (the scale ``a``) and where it crosses 1/2 (the intercept ``b``). Both come from
two histograms, each row counted once, so whatever the scores their l2 sensitivity
under replace-one is ``sqrt(2)`` per problem (``sqrt(2K)`` for K one-vs-rest problems):

1. **scale**: counts of ``|s_i|`` on the dyadic grid ``C 2^-j``, ``j = 0..SCALE_LEVELS-1``
   (``C = L ||w||_2`` bounds every ``|s_i|`` of a row clipped to ``L``; the last bin
   takes everything below). The scale ``c`` is the upper edge of the first bin at
   which the noisy mass above reaches ``1 - q`` of the rows (their number is public),
   among the levels whose summed noise is small against the rows: about 5% of the
   scores lie beyond ``c``, within a factor 2, or more for one problem whose rows are
   few against the noise (:func:`scale_quantile`: 5% of breast cancer's 398 rows at
   epsilon 1 is 20 against a level's noise of 39; the scale fell on the bound or half).
2. **decision**: counts of ``u_i = clip(s_i / c, -1, 1)`` on ``CALIBRATION_BINS`` equal
   bins of ``[-1, 1]`` (fewer where the rows are few against the noise:
   :func:`calibration_bins`), one histogram per class. Logistic regression of the class on
   the bin centres, weighted by the noisy counts (clamped at 0), gives ``(a, b)``
   (post-processing); the coefficients are ``a w / c``.

The same counts estimate how many more training rows the fitted rule classifies
correctly than the majority class (on the bins where the two differ). Where that gain
does not exceed ``MAJORITY_MARGIN`` standard deviations of its noise (or the counts give
``a <= 0``), the threshold moves to where as many rows are predicted positive as the
class count says (:func:`rate_threshold`: it needs only the counts' cumulative sum, no
slope), kept if its own estimated gain passes the same test, with the fitted slope (1
where there is none). Each gain counts the bins where the rule and the majority differ,
the threshold's bin by its fraction on that side (the rule applied is ``u > t``, not the
bins' centres'). Otherwise the intercept is the prior log-odds ``b0`` of the classes,
taken from a release of the class counts (the screened Newton step's own; for the other
solvers one made here, of noise ``sqrt(3 / 2)`` cells'; either far below that of the
histograms' class sums), and the slope keeps the ranking of the scores (hence the ROC
AUC, the direction's) but moves no score a row within the norm bound can have by more
than ``|b0| / 2``: every such row is predicted as the (privately estimated) majority,
with a probability near the class rate. A default thus predicts the majority unless the
counts show a rule that does better on the training data (a score without signal passes
one of the two tests at most about twice as often as one), and keeps the ranking of its
scores.

With K > 1 one-vs-rest problems (K classes) the prediction is the argmax of the K
scores, so each score is its class's fitted log-odds ``a u + b`` and no problem falls
back on its own binary majority (which is "not this class" for every class of a
balanced K-class problem, and whose intercepts beyond every score leave the argmax to
the offsets). Where the counts see no slope, the class's score is its prior log-odds
``log(c1 / c0)`` (no direction): if no class shows a slope, every row gets the
privately estimated most frequent class. The argmax of K noisy scores can still do
worse than that class (on balanced classes a rule without signal is right about once
in K), and the one-vs-rest histograms cannot tell (nor do they count the classes
well: each class's count is a sum of ``CALIBRATION_BINS`` noisy cells); with many
classes and few rows a class, K calibrations fitted apart on noisy histograms can also
rank the classes worse than the solver's own scores, fitted together (digits at
epsilon 10: 0.38 against 0.68). A third release counts the training rows that the
calibrated argmax rule and the solver's own classify correctly, and each class's rows
(replacing a row moves each rule's count by at most 1 and two class counts by 1: l2
sensitivity 2, l1 4). The better of the two rules by those counts is kept where it
beats the most frequent class of the noisy counts by ``MAJORITY_MARGIN`` standard
deviations of the difference's noise (widened for the choice of the better of two,
so that a rule without signal passes as rarely as one alone would); otherwise every
class scores its prior log-odds from those counts, which predicts that class for
every row.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit, log_expit, ndtr, ndtri

from ._screening import release, release_pure

__all__ = ["SCALE_LEVELS", "SCALE_QUANTILE", "SCALE_TAIL_NOISE", "MAX_SCALE_TAIL",
           "scale_quantile", "CALIBRATION_BINS", "MIN_CALIBRATION_BINS",
           "BIN_NOISE", "calibration_bins", "GAIN_SENSITIVITY",
           "GAIN_SENSITIVITY_L1",
           "MOMENT_SENSITIVITY", "MOMENT_SENSITIVITY_L1", "calibrate", "calibrate_regression",
           "fit_binned", "rate_threshold", "regression_line"]

#: Dyadic levels of the scale histogram (down to ``C 2^-47``).
SCALE_LEVELS = 48
#: Quantile of ``|s|`` the scale aims at (the scores beyond it are clipped in step 2),
#: where the rows are many against the noise (:func:`scale_quantile`).
SCALE_QUANTILE = 0.95
#: A classifier's scale leaves beyond it at least this many standard deviations of a
#: level's noise, at most :data:`MAX_SCALE_TAIL` of the rows (:func:`scale_quantile`).
SCALE_TAIL_NOISE = 2.0
#: Largest share of the rows a classifier's scale leaves beyond it.
MAX_SCALE_TAIL = 0.25
#: The scale's levels go down as long as the noise summed over them, times this, stays
#: within the number of rows (:func:`_scale_from_counts`).
SCALE_NOISE_MARGIN = 2.0
#: Bins of ``[-1, 1]`` in the class histograms, where the rows are many against the
#: noise (:func:`calibration_bins`).
CALIBRATION_BINS = 20
#: Fewest bins of the class histograms: a slope and an intercept need a few.
MIN_CALIBRATION_BINS = 4
#: Largest noise standard deviation of a class-histogram cell relative to an average
#: cell's count ``n / (2B)``, above which the histograms take fewer bins
#: (:func:`calibration_bins`). A row is counted once whatever the bins, so fewer bins
#: hold more rows each under the same noise, and the gain test, whose noise grows with
#: the square root of the bins it sums, sees a rule that ranks well: on 105 and 124
#: rows at epsilon 10 (iris and wine, one class against the rest, scores of ROC AUC 0.97
#: and 0.98) 20 bins kept the majority in 12 and 5 fits of 20, their 7 and 9 bins in 4
#: and 1 (test accuracy 0.73 to 0.81 and 0.85 to 0.92). Where the budget
#: share reaches its need (:data:`~skdp_sparse.solvers.decision.CELL_NOISE`, a tenth)
#: this allows 50 bins: the histograms keep ``CALIBRATION_BINS``.
BIN_NOISE = 0.25
#: The fitted rule replaces the majority only if its estimated gain in training
#: accuracy exceeds this many standard deviations of the estimate's noise (one: the
#: gain is positive with probability 84% or more under a flat prior).
MAJORITY_MARGIN = 1.0
#: l2 sensitivity of the multiclass release (the correct rows of the calibrated argmax
#: rule and of the solver's own, then each class's rows): one row moves each rule's
#: count and two class counts by 1 each.
GAIN_SENSITIVITY = math.sqrt(4.0)
#: ... and its l1 sensitivity (the Laplace release of a pure-DP fit).
GAIN_SENSITIVITY_L1 = 4.0
#: l2 sensitivity of a regression's moment sums (:func:`calibrate_regression`): a
#: row adds ``v = (u, u^2, t, u t)`` with ``u, t`` in ``[-1, 1]``. ``|v - v'|^2`` is
#: convex in ``(t, t')`` for fixed ``(u, u')``, so its maximum has ``t, t' = +-1``;
#: with ``a = u - u'`` and ``b = u + u'`` (``|a| + |b| <= 2``) it is
#: ``a^2 (2 + b^2)`` for ``t = t'`` and ``(a^2 + 1)(b^2 + 1) + 3`` for ``t = -t'``,
#: both at most 8 (at ``a = 2, b = 0``: ``u = -u' = 1``).
MOMENT_SENSITIVITY = 2.0 * math.sqrt(2.0)
#: l1 sensitivity of the same sums: convex in ``(t, t')`` as well, it is
#: ``|a| (2 + |b|) <= 4`` for ``t = t'`` and ``(|a| + 1)(|b| + 1) + 1 <= 5`` for
#: ``t = -t'`` (at ``|a| = |b| = 1``: ``u = -1, t = -1`` against ``u' = 0, t' = 1``).
MOMENT_SENSITIVITY_L1 = 5.0


def scale_quantile(n_samples, level_sd):
    """Quantile of ``|s|`` a binary decision's scale aims at: :data:`SCALE_QUANTILE`, or
    lower so that the mass beyond is :data:`SCALE_TAIL_NOISE` planned sds of a level
    (``level_sd``), at most :data:`MAX_SCALE_TAIL` of the ``n`` rows (public values)."""
    tail = SCALE_TAIL_NOISE * float(level_sd) / float(n_samples)
    return 1.0 - min(MAX_SCALE_TAIL, max(1.0 - SCALE_QUANTILE, tail))


def calibration_bins(n_samples, cell_sd):
    """Bins of the class histograms: the most, up to :data:`CALIBRATION_BINS`, at which
    a cell's noise standard deviation ``cell_sd`` is at most :data:`BIN_NOISE` of an
    average cell's count ``n / (2B)``, and at least :data:`MIN_CALIBRATION_BINS`. From
    public values (``n`` and the planned noise)."""
    if not cell_sd > 0:
        return CALIBRATION_BINS
    most = math.floor(BIN_NOISE * float(n_samples) / (2.0 * float(cell_sd)))
    return int(min(CALIBRATION_BINS, max(MIN_CALIBRATION_BINS, most)))


def fit_binned(centres, c1, c0, fit_intercept=True):
    """``(a, b)`` of the logistic regression of the class on ``centres``, class 1 seen
    ``c1`` times and class 0 ``c0`` times in each bin (non-negative weights), by
    Newton's method with backtracking. A ridge of ``1e-6`` times the total weight
    keeps it finite on separable counts."""
    t = np.asarray(centres, dtype=float)
    c1, c0 = np.asarray(c1, dtype=float), np.asarray(c0, dtype=float)
    weight = c1 + c0
    ridge = 1e-6 * max(float(weight.sum()), 1.0)
    F = np.column_stack([t, np.ones_like(t)])[:, : 2 if fit_intercept else 1]

    def objective(theta):
        z = F @ theta
        return -(c1 @ log_expit(z) + c0 @ log_expit(-z)) + 0.5 * ridge * theta @ theta

    theta = np.zeros(F.shape[1])
    value = objective(theta)
    for _ in range(100):
        p = expit(F @ theta)
        grad = F.T @ (weight * p - c1) + ridge * theta
        hess = (F.T * (weight * p * (1.0 - p))) @ F + ridge * np.eye(F.shape[1])
        step = np.linalg.solve(hess, grad)
        size = 1.0
        while size > 1e-12:
            candidate = theta - size * step
            new = objective(candidate)
            if new <= value:
                break
            size /= 2.0
        else:
            break
        done = value - new <= 1e-13 * max(1.0, abs(value))
        theta, value = candidate, new
        if done:
            break
    return float(theta[0]), (float(theta[1]) if fit_intercept else 0.0)


def rate_threshold(counts, target):
    """The point ``t`` of ``[-1, 1]`` above which the (noisy, non-negative) counts of
    ``B`` equal bins of ``[-1, 1]`` hold ``target`` rows, a bin's count spread evenly
    over it: -1 if they all hold fewer, 1 if ``target <= 0``. With the rows of both
    classes and the number of positives, ``u > t`` predicts that many positive."""
    counts = np.asarray(counts, dtype=np.float64)
    B = counts.size
    above = np.concatenate([np.cumsum(counts[::-1])[::-1], [0.0]])
    target = float(target)
    if not target > 0:
        return 1.0
    if target >= above[0]:
        return -1.0
    # The last bin whose mass from it upwards reaches the target holds the point (and
    # rows: the mass above it is below the target).
    i = int(np.flatnonzero(above >= target)[-1])
    return -1.0 + (i + (above[i] - target) / counts[i]) * (2.0 / B)


def _rate_gain(c1, c0, t, negative):
    """``u > t``'s estimated gain in correct rows over the majority (negative or not),
    the bin of ``t`` by its fraction on the differing side, and the l2 norm of the bins'
    weights (the estimate's noise in ``sqrt(2)`` cells')."""
    B = c1.size
    edges = -1.0 + np.arange(B + 1) * (2.0 / B)
    above = np.clip((edges[1:] - t) * (B / 2.0), 0.0, 1.0)
    differ = above if negative else 1.0 - above
    return float(np.sum((c1 - c0) * differ)) * (1.0 if negative else -1.0), \
        math.sqrt(float(differ @ differ))


def _scale_levels(abs_scores, bound):
    """Dyadic level of each ``|s| / bound``: ``j`` for ``(2^-(j+1), 2^-j]``, the last
    level for everything below."""
    with np.errstate(divide="ignore"):
        levels = np.floor(-np.log2(abs_scores / bound))
    return np.clip(np.nan_to_num(levels, nan=SCALE_LEVELS - 1, posinf=SCALE_LEVELS - 1),
                   0, SCALE_LEVELS - 1).astype(np.int64)


def _scale_from_counts(counts, bound, n_rows, quantile=SCALE_QUANTILE, noise_sd=0.0):
    """The upper edge of the first level at which the noisy mass above reaches
    ``1 - quantile`` of the ``n_rows`` rows (each counted once: the total is
    public), among the levels whose summed noise (``noise_sd`` per count) is at most
    ``1 / SCALE_NOISE_MARGIN`` of the rows; the deepest of those if none does and they
    are not all the levels, ``bound`` if there are none or none of all the levels
    reaches it (no mass: nothing to clip). The noisy counts are summed as they are: clamping
    each at 0 would add the positive part of the noise of every empty level above the
    scores (most of the 48 where the bound is loose), which reached the threshold
    before any score did and left the scale at the bound.

    The mass above a level runs from 0 to all the rows, so where the noise summed down
    to a level is small against the rows, a sum that has not reached the threshold
    there says the scores lie deeper. Below, a sum of noise alone can stay under the
    threshold for many levels: at n = 20 and epsilon 1 it gave scales of ``2^-29`` of
    the bound, every ``clip(s / c, -1, 1)`` saturated into a sign, and coefficients of
    1e7. A scale too large is the safe side (the scores use part of ``[-1, 1]``)."""
    above = np.cumsum(counts)
    summed_sd = float(noise_sd) * np.sqrt(np.arange(1, above.size + 1))
    levels = int(np.count_nonzero(SCALE_NOISE_MARGIN * summed_sd <= float(n_rows)))
    if levels == 0:
        return bound
    reached = np.flatnonzero(above[:levels] >= (1.0 - quantile) * float(n_rows))
    if reached.size:
        level = int(reached[0])
    elif levels < above.size:
        level = levels - 1
    else:
        return bound
    return bound * 2.0 ** -min(level, SCALE_LEVELS - 1)


def _unit_ratio(scores, scale):
    """``clip(scores / scale, -1, 1)``, 0 where a score is ``inf - inf`` (a row of huge
    opposite entries): each row still adds one bounded term."""
    return np.nan_to_num(np.clip(scores / scale, -1.0, 1.0), nan=0.0)


def _full_directions(n_features, columns, directions):
    full = np.zeros((n_features, directions.shape[1]))
    full[np.asarray(columns, dtype=np.int64)] = directions
    return full


def _scale_counts(rows, Y, start, directions, bounds, centres=0.0):
    """Counts of each problem's ``|s_i - centres[k]|`` on the dyadic levels below
    ``bounds[k]`` (a term of :meth:`~skdp_sparse.data.LocalData.row_sum`: one count per
    row and problem)."""
    scores = np.asarray(rows @ directions, dtype=np.float64).reshape(-1, directions.shape[1])
    scores = scores - centres
    counts = np.zeros((directions.shape[1], SCALE_LEVELS))
    for k in range(directions.shape[1]):
        levels = _scale_levels(np.abs(scores[:, k]), bounds[k]) if bounds[k] > 0 \
            else np.full(scores.shape[0], SCALE_LEVELS - 1)
        counts[k] = np.bincount(levels, minlength=SCALE_LEVELS)
    return counts


def _class_histograms(rows, Y, start, directions, scales, B=CALIBRATION_BINS):
    """Each problem's counts of ``clip(s_i / scale, -1, 1)`` on ``B`` bins, positive
    rows then negative rows (one count per row and problem)."""
    scores = np.asarray(rows @ directions, dtype=np.float64).reshape(-1, directions.shape[1])
    u = _unit_ratio(scores, scales)
    bins = np.minimum(np.floor((u + 1.0) * (B / 2.0)), B - 1).astype(np.int64)
    positive = Y > 0
    return np.stack([np.concatenate([np.bincount(bins[positive[:, k], k], minlength=B),
                                     np.bincount(bins[~positive[:, k], k], minlength=B)])
                     for k in range(directions.shape[1])]).astype(np.float64)


def _log_odds(positive, negative):
    """Prior log-odds of (noisy) counts, each floored at half a row."""
    return np.log(np.maximum(positive, 0.5) / np.maximum(negative, 0.5))


def _argmax_counts(rows, Y, start, coef, intercept):
    """For each of the R rules ``(coef[r], intercept[r])`` of K scores, the rows the
    argmax of its scores classifies correctly, then each class's rows (a term of
    :meth:`~skdp_sparse.data.LocalData.row_sum`)."""
    label = np.argmax(np.asarray(Y) > 0, axis=1)
    K = intercept.shape[-1]
    right = []
    for rule_coef, rule_intercept in zip(coef, intercept, strict=True):
        scores = np.asarray(rows @ rule_coef, dtype=np.float64).reshape(-1, K) + rule_intercept
        # np.argmax takes a NaN score (inf - inf) as the largest: still one class a row.
        right.append(float(np.sum(np.argmax(scores, axis=1) == label)))
    return np.concatenate([right, np.bincount(label, minlength=K).astype(np.float64)])


def _positive_rows(rows, Y, start):
    """The rows of the positive class (a term of
    :meth:`~skdp_sparse.data.LocalData.row_sum`)."""
    return np.array([float(np.count_nonzero(np.asarray(Y)[:, 0] > 0))])


def _scored(data, columns, directions, norm_bound, rows_bound):
    """``(full, bounds, clip)``: the directions over all features, the bound on each
    problem's ``|s_i|`` of a row within ``norm_bound``, and the row clipping of
    :meth:`~skdp_sparse.data.LocalData.row_sum` for ``rows_bound``."""
    bounds = float(norm_bound) * np.linalg.norm(directions, axis=0)
    full = _full_directions(data.n_features, columns, directions)
    clip = {} if rows_bound is None else {"norm_bound": float(rows_bound[0]),
                                          "l1_bound": float(rows_bound[1])}
    return full, bounds, clip


def _count_sensitivity(n_problems, pure):
    """Sensitivity of histograms that count each row once per problem: one row moves one
    count between two cells of each problem's histogram (l2 ``sqrt(2K)``, l1 ``2K``)."""
    return 2.0 * n_problems if pure else math.sqrt(2.0 * n_problems)


def _release_scales(data, full, bounds, clip, unit, floating_point_safe, rng, pure,
                    centres=0.0, quantile=SCALE_QUANTILE):
    """Each problem's scale ``c``, the ``quantile`` of the noisy counts of its
    ``|s_i - centres[k]|`` on the dyadic levels below its bound (one a row and problem)."""
    draw = release_pure if pure else release
    counts = data.row_sum(_scale_counts, full, bounds, centres, **clip)
    noisy, count_sd = draw(counts, _count_sensitivity(bounds.size, pure), unit,
                           floating_point_safe, rng)
    return np.array([_scale_from_counts(noisy[k], bounds[k], data.n_samples, quantile=quantile,
                                        noise_sd=count_sd)
                     if bounds[k] > 0 else 1.0 for k in range(bounds.size)])


def calibrate(data, columns, directions, *, norm_bound, offsets, scale_unit,
              calibration_unit, floating_point_safe, rng, fit_intercept=True,
              rows_bound=None, gain_unit=None, prior_offsets=False, class_count_unit=None,
              pure=False):
    """``(coef, intercept, used)``: the decision of each problem's score (module
    docstring). ``directions`` has shape (len(columns), K); ``offsets`` are the
    intercepts kept where the counts cannot fit one (with the directions, the solver's
    own rule); ``used[k]`` says whether problem ``k`` kept its calibrated decision
    (False: the majority, the offset or the solver's own rule). ``gain_unit`` (K > 1
    with an intercept): the noise per unit of sensitivity of the release that compares
    the calibrated argmax rule and the solver's own with the most frequent class; None
    skips that test.
    ``prior_offsets``: the offsets are each problem's prior log-odds from a release of
    the class counts themselves, whose noise is far below that of the histograms' class
    sums (each a sum of ``CALIBRATION_BINS`` noisy cells); a binary problem that falls
    back on its majority then takes it from them. ``class_count_unit`` (one problem, with
    an intercept): the noise per unit of sensitivity of a release of the number of
    positive rows (sensitivity 1), made here to give such offsets. ``pure``: every
    release is Laplace, the units being scales per unit of l1 sensitivity (``2K`` for
    the histograms, 4 for the multiclass counts, 1 for the class count).

    The scores are those of the rows as given, or of the rows clipped into the l2 and
    l1 balls ``rows_bound = (norm_bound, l1_bound)``: the rows the model will predict
    on. Each histogram is a sum over rows (:meth:`row_sum`), so it runs where the rows
    are."""
    K = np.asarray(offsets).size
    directions = np.asarray(directions, dtype=np.float64).reshape(len(columns), K)
    # Gaussian releases take l2 sensitivities, Laplace ones l1: one row moves one count
    # between two cells of each problem's histogram.
    draw = release_pure if pure else release
    sensitivity = _count_sensitivity(K, pure)
    full, bounds, clip = _scored(data, columns, directions, norm_bound, rows_bound)
    # The planned noise of a count, before the releases: the quantile and the bins are
    # public (a Laplace count's sd is sqrt(2) times its scale).
    per_unit = sensitivity * (math.sqrt(2.0) if pure else 1.0)
    # 1. the scale of each problem's score
    q = scale_quantile(data.n_samples, per_unit * scale_unit) if K == 1 else SCALE_QUANTILE
    scales = _release_scales(data, full, bounds, clip, scale_unit, floating_point_safe, rng,
                             pure, quantile=q)
    # 2. the class histograms of the clipped, scaled scores
    planned_sd = per_unit * calibration_unit
    B = calibration_bins(data.n_samples, planned_sd)
    hist = data.row_sum(_class_histograms, full, scales, B, **clip)
    noisy, cell_sd = draw(hist.astype(np.float64), sensitivity, calibration_unit,
                             floating_point_safe, rng)
    noisy = np.maximum(noisy, 0.0)
    if K == 1 and fit_intercept and class_count_unit is not None:
        # 3. the class count: one row moves it by at most 1
        count = data.row_sum(_positive_rows)
        positive, _ = draw(count, 1.0, class_count_unit, floating_point_safe, rng)
        offsets = _log_odds(positive, data.n_samples - positive)
        prior_offsets = True
    centres = -1.0 + (np.arange(B) + 0.5) * (2.0 / B)
    coef = np.zeros_like(directions)
    intercept = np.array(offsets, dtype=np.float64) if fit_intercept else np.zeros(K)
    used = np.zeros(K, dtype=bool)
    for k in range(K):
        c1, c0 = noisy[k, :B], noisy[k, B:]
        if not bounds[k] > 0 or not (c1.sum() > 0 and c0.sum() > 0):
            continue
        a, b = fit_binned(centres, c1, c0, fit_intercept)
        if K > 1:
            # One-vs-rest: the decision is the argmax of the K scores, so each is the
            # class's calibrated log-odds, never a binary majority's verdict. Where
            # the counts see no slope, the class's score is its prior log-odds.
            if not a > 0:
                a, b = 0.0, _log_odds(c1.sum(), c0.sum())
            coef[:, k] = directions[:, k] * (a / scales[k])
            used[k] = a > 0
            intercept[k] = b if fit_intercept else 0.0
            continue
        negative = offsets[k] <= 0 if prior_offsets else c0.sum() >= c1.sum()
        if a > 0:
            coef[:, k] = directions[:, k] * (a / scales[k])
            # The rule's estimated gain over the majority, counted on the bins where the
            # two decide differently (the bin of its threshold by the fraction on that
            # side: the rule applied is u > -b / a, not the bins' centres'), must exceed
            # MAJORITY_MARGIN times its noise. The majority is the class count's where
            # there is one.
            gain, weight = _rate_gain(c1, c0, -b / a, negative)
            margin = MAJORITY_MARGIN * cell_sd * math.sqrt(2.0) * weight
        elif fit_intercept:
            # The counts cannot see the slope: the fallback below, keeping the ranking
            # of the direction (from far less noisy releases). A rule deciding nothing
            # (intercept -inf) is no candidate: where the histograms' class sums
            # contradict the class count's majority it would pass the gain test and
            # give every row the probability 0 or 1.
            gain, margin = -math.inf, 0.0
        else:
            continue
        if fit_intercept and not gain > margin:
            # The threshold at the class count's positives, kept on its own gain.
            positive = float(expit(offsets[k])) * data.n_samples if prior_offsets \
                else float(c1.sum())
            t = rate_threshold(c1 + c0, positive)
            gain, weight = _rate_gain(c1, c0, t, negative)
            if gain > MAJORITY_MARGIN * cell_sd * math.sqrt(2.0) * weight and abs(t) < 1.0:
                if not a > 0:
                    a = 1.0
                coef[:, k] = directions[:, k] * (a / scales[k])
                b = -a * t
                gain, margin = math.inf, 0.0
        if gain > margin or not fit_intercept:
            intercept[k] = b
            used[k] = True
        else:
            # Not better than the majority: the prior log-odds b0 as intercept, and the
            # ranking kept with a slope that moves no row within the norm bound
            # (|s| <= C) by more than |b0| / 2, so every such row gets the majority's
            # class with a probability near the class rate.
            if prior_offsets and offsets[k] != 0:
                prior = float(offsets[k])
            else:
                prior = float(_log_odds(c1.sum(), c0.sum()))
            coef[:, k] = directions[:, k] * (0.5 * abs(prior) / bounds[k])
            intercept[k] = prior
    if K > 1 and fit_intercept and gain_unit is not None:
        # The calibrated rule, the solver's own and the most frequent class, compared by
        # their correct training rows: K calibrations on noisy histograms of about n/K
        # rows each can rank the classes worse than the solver's jointly fitted scores.
        rules = ((coef, intercept), (directions, np.asarray(offsets, dtype=np.float64)))
        full = np.stack([_full_directions(data.n_features, columns, c) for c, _ in rules])
        counts = data.row_sum(_argmax_counts, full, np.stack([b for _, b in rules]), **clip)
        gain_sensitivity = GAIN_SENSITIVITY_L1 if pure else GAIN_SENSITIVITY
        noisy, count_sd = draw(counts, gain_sensitivity, gain_unit, floating_point_safe, rng)
        right, classes = noisy[:len(rules)], np.maximum(noisy[len(rules):], 0.5)
        best = int(np.argmax(right))
        majority = int(np.argmax(classes))
        # The better of several noisy counts beats the majority by chance more often
        # than one: the margin keeps that chance at one rule's (Bonferroni).
        margin = float(ndtri(1.0 - ndtr(-MAJORITY_MARGIN) / len(rules)))
        if not right[best] - classes[majority] > margin * math.sqrt(2.0) * count_sd:
            coef[:] = 0.0
            intercept = _log_odds(classes, data.n_samples - classes)
            used[:] = False
        elif best == 1:
            coef, intercept = directions.copy(), rules[1][1].copy()
            used[:] = False
    return coef, intercept, used


def _score_location(rows, Y, start, direction, bound):
    """The sum of ``clip(s_i / bound, -1, 1)`` over the rows (a term of
    :meth:`~skdp_sparse.data.LocalData.row_sum`)."""
    scores = np.asarray(rows @ direction, dtype=np.float64).ravel()
    return np.array([_unit_ratio(scores, bound).sum()])


def _score_moments(rows, Y, start, direction, centre, scale, target_bound):
    """The sums of ``u_i``, ``u_i^2``, ``t_i`` and ``u_i t_i`` over the rows, with
    ``u_i = clip((s_i - centre) / scale, -1, 1)`` and
    ``t_i = clip(y_i / target_bound, -1, 1)`` (a term of
    :meth:`~skdp_sparse.data.LocalData.row_sum`)."""
    scores = np.asarray(rows @ direction, dtype=np.float64).ravel()
    u = _unit_ratio(scores - centre, scale)
    t = np.clip(np.asarray(Y, dtype=np.float64)[:, 0] / target_bound, -1.0, 1.0)
    return np.array([u.sum(), u @ u, t.sum(), u @ t])


def regression_line(moments, n_samples, moment_sd, fit_intercept=True):
    """``(a, b)``: least squares of ``t`` on ``u`` from noisy moment sums
    ``(sum u, sum u^2, sum t, sum u t)``, each with noise of standard deviation
    ``moment_sd``. With ``var`` and ``cov`` the noisy centred sums over ``n`` and
    ``sd_v``, ``sd_c`` their noise's standard deviations to first order, the slope is
    ``cov var / (var^2 + (2 sd_v)^2)`` (``cov / var`` where the variance is clear of
    its noise, and never above ``cov / (4 sd_v)``: a variance that noise brought near
    0 cannot blow the slope up), shrunk by ``max(0, 1 - (sd_c / cov)^2)``: 0 where the
    covariance is within one ``sd_c`` of 0, or the variance not above 0. The intercept
    is then the noisy mean of ``t`` less the slope times that of ``u``.

    A hard rule (no slope unless ``var > 2 sd_v``) lost the slope of a score whose
    covariance was six of its sds from 0 (California housing at epsilon 10: R^2 0.60
    to 0 in one fit of five). With ``sd_v`` in place of ``2 sd_v`` the slopes that
    noise alone gave a score without signal cost up to 0.15 of R^2 (phased SGD at
    ``n mu`` near 100); with ``2 sd_v``, 0.04.
    """
    su, suu, st, sut = (float(v) for v in moments)
    n = float(n_samples)
    if fit_intercept:
        mean_u, mean_t = su / n, st / n
        var = suu / n - mean_u * mean_u
        cov = sut / n - mean_u * mean_t
        # First-order noise of the centred sums: d(var) = (d suu - 2 mean_u d su) / n,
        # d(cov) = (d sut - mean_t d su - mean_u d st) / n.
        var_sd = moment_sd * math.sqrt(1.0 + 4.0 * mean_u * mean_u) / n
        cov_sd = moment_sd * math.sqrt(1.0 + mean_t * mean_t + mean_u * mean_u) / n
    else:
        mean_u = mean_t = 0.0
        var, cov = suu / n, sut / n
        var_sd = cov_sd = moment_sd / n
    a = 0.0
    if var > 0.0 and cov != 0.0:
        shrink = 1.0 - (cov_sd / cov) ** 2
        if shrink > 0.0:
            a = cov * var / (var * var + 4.0 * var_sd * var_sd) * shrink
    b = min(max(mean_t - a * mean_u, -1.0), 1.0) if fit_intercept else 0.0
    return a, b


def calibrate_regression(data, columns, direction, *, norm_bound, target_bound,
                         location_unit, scale_unit, moment_unit, floating_point_safe, rng,
                         fit_intercept=True, rows_bound=None, pure=False):
    """``(coef, intercept, used)`` of a regression's prediction from its score
    ``s_i = x_i . w`` (``direction`` of shape (len(columns), 1); ``|s_i| <= B`` for a row
    within the bounds):

    1. the centre ``m``: ``B`` times the noisy mean of ``clip(s_i / B, -1, 1)``
       (sensitivity 2); the scores of tabular rows share a large offset (features of
       non-zero mean), beside which their spread, which the slope is fitted on, is
       small;
    2. the scale ``c`` of ``|s_i - m|``, as in :func:`calibrate` (step 1);
    3. one release of the moment sums of ``u_i = clip((s_i - m) / c, -1, 1)`` and
       ``t_i = clip(y_i / target_bound, -1, 1)`` (:func:`_score_moments`; each row adds
       ``(u, u^2, t, u t)``, whose change under replace-one is at most
       :data:`MOMENT_SENSITIVITY` in l2 norm, :data:`MOMENT_SENSITIVITY_L1` in l1),
       from which :func:`regression_line` fits ``t ~ a u + b``.

    The prediction is ``target_bound (a (s - m) / c + b)``. Without an intercept the
    centre is 0 (its release is made all the same: the plan is public). ``used``:
    whether the slope survived (False: the prediction is the private mean of the
    clipped targets). ``pure``: Laplace releases, units being scales per unit of l1
    sensitivity."""
    draw = release_pure if pure else release
    direction = np.asarray(direction, dtype=np.float64).reshape(len(columns), 1)
    full, bounds, clip = _scored(data, columns, direction, norm_bound, rows_bound)
    bound, score_bound = float(target_bound), float(bounds[0])
    if not score_bound > 0:
        score_bound = 1.0  # no direction: every score is 0
    # 1. the centre of the scores (one row moves a term in [-1, 1] by 2)
    total = data.row_sum(_score_location, full[:, 0], score_bound, **clip)
    noisy_total, _ = draw(total, 2.0, location_unit, floating_point_safe, rng)
    centre = 0.0
    if fit_intercept:
        centre = score_bound * min(max(float(noisy_total[0]) / data.n_samples, -1.0), 1.0)
    # 2. the scale of the centred scores, each within 2B of 0
    scale = _release_scales(data, full, np.array([2.0 * score_bound]), clip, scale_unit,
                            floating_point_safe, rng, pure, centres=centre)[0]
    # 3. the moments of the clipped, centred, scaled scores and the clipped targets
    moments = data.row_sum(_score_moments, full[:, 0], centre, scale, bound, **clip)
    sensitivity = MOMENT_SENSITIVITY_L1 if pure else MOMENT_SENSITIVITY
    noisy, moment_sd = draw(moments, sensitivity, moment_unit, floating_point_safe, rng)
    a, b = regression_line(noisy, data.n_samples, moment_sd, fit_intercept)
    if not bounds[0] > 0:
        a = 0.0
    coef = direction * (bound * a / scale)
    return coef, np.array([bound * (b - a * centre / scale)]), np.array([a != 0.0])
