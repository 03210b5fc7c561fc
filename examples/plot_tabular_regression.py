"""
Private regression on raw tabular data with public ranges
==========================================================

California housing: 20,640 census block groups, 8 features in their own units
(income, house age, rooms, population, latitude, longitude...) and the median
house value as target. A private linear model needs public bounds on its input;
here they come from what each feature means (documented top-codes, the
geography of California), never from the data. We compare, at a total epsilon
of 1:

* the defaults, with bounds left at 1 for data on other scales;
* :class:`~skdp_sparse.preprocessing.BoundedScaler` (public ranges, no privacy
  cost) followed by :class:`~skdp_sparse.linear_model.DPGreedyCDRegressor` with
  the target's public range as ``target_bounds``, with the greedy
  coordinate-descent solver and with the noisy sufficient statistics (AdaSSP);
* ordinary least squares, not private.

The data are read from ``../shared/data`` next to the repository (or
``SKDP_DATA_DIR``), as the benchmarks read them; nothing is downloaded. Where the
file is absent, a generated stand-in with the same columns and ranges is used,
and the output says so.
"""

import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from skdp_sparse.linear_model import DPGreedyCDRegressor
from skdp_sparse.preprocessing import BoundedScaler, diagnose_bounds

# %%
# The data, and their public ranges
# ---------------------------------
# Each range is a fact about the feature: income and house age are top-coded at
# 15 (150,000 USD) and 52 years in the distributed data, block groups hold 600 to
# 3,000 people, California lies between 32 and 42 degrees north and 114 and 125
# degrees west; rooms, bedrooms and occupants per household are clipped at values
# above which a block group is an outlier. The target, in 100,000 USD, is
# top-coded at 5.

FEATURES = ["MedInc", "HouseAge", "AveRooms", "AveBedrms", "Population", "AveOccup",
            "Latitude", "Longitude"]
LOWER = np.array([0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 32.0, -125.0])
UPPER = np.array([15.0, 52.0, 10.0, 3.0, 5000.0, 6.0, 42.0, -114.0])
TARGET_RANGE = (0.0, 5.0)


def data_file():
    root = os.environ.get("SKDP_DATA_DIR")
    if root is None:
        here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
        for parent in [here, *here.parents]:
            candidate = parent.parent / "shared" / "data"
            if (candidate / "california_housing.svm.bz2").exists():
                root = candidate
                break
    path = None if root is None else Path(root) / "california_housing.svm.bz2"
    return path if path is not None and path.exists() else None


def stand_in(n=20_640, seed=0):
    """Generated rows with the columns, ranges and a linear signal like the real data's."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([
        rng.gamma(4.0, 1.0, n), rng.uniform(1, 52, n), rng.normal(5.3, 1.2, n),
        rng.normal(1.1, 0.2, n), rng.gamma(2.0, 700.0, n), rng.normal(3.0, 0.8, n),
        rng.uniform(32.5, 42.0, n), rng.uniform(-124.4, -114.1, n)])
    y = (0.45 * X[:, 0] + 0.01 * X[:, 1] - 0.4 * (X[:, 6] - 36) - 0.4 * (X[:, 7] + 120)
         + rng.normal(0, 0.7, n))
    return X, np.clip(y, 0.15, 5.0)


path = data_file()
if path is not None:
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(path), n_features=8)
    X = X.toarray()
    print(f"California housing from {path.name}: {X.shape[0]} rows")
else:
    X, y = stand_in()
    print("california_housing.svm.bz2 not found: a generated stand-in with the same "
          "columns and ranges")
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)
n = X_train.shape[0]
delta = 1.0 / n**2

# %%
# With the defaults
# -----------------
# Every bound is 1 by default: a fit on raw incomes and latitudes clips nearly every
# value. A fit is not bound to say so (that would be a fact about the training data;
# only the noisy count of the curvature estimate, released anyway, may warn);
# :func:`~skdp_sparse.preprocessing.diagnose_bounds`, which is not private, checks
# bounds against data one may inspect and names the bound to supply. A test row is
# clipped as the training rows were (``clip_predict``).

print(diagnose_bounds(X_train).advice[:160], "...")
naive = DPGreedyCDRegressor(epsilon=1.0, delta=delta, random_state=0).fit(X_train, y_train)
print(f"defaults: R^2 = {naive.score(X_test, y_test):.3f}; predicting the unclipped "
      f"test rows: {naive.set_params(clip_predict=False).score(X_test, y_test):.4g}")

# %%
# Public ranges in a pipeline
# ---------------------------
# ``BoundedScaler`` maps each range onto ``[-1, 1]`` and states the bounds of its
# output; the regressor maps the target's range onto ``[-1, 1]`` inside ``fit``
# and predicts in 100,000 USD.

scaler = BoundedScaler(bounds=(LOWER, UPPER), feature_range=(-1.0, 1.0))
feature_bound, norm_bound = scaler.output_bounds()


def private_model(epsilon, solver, seed):
    return make_pipeline(
        BoundedScaler(bounds=(LOWER, UPPER), feature_range=(-1.0, 1.0)),
        DPGreedyCDRegressor(epsilon=epsilon, delta=delta, solver=solver,
                            feature_bound=feature_bound, norm_bound=norm_bound,
                            target_bounds=TARGET_RANGE, random_state=seed))


ols = LinearRegression().fit(X_train, y_train)
print(f"least squares (not private): R^2 = {ols.score(X_test, y_test):.3f}")
for solver in ("greedy_cd", "sufficient_statistics"):
    model = private_model(1.0, solver, 0).fit(X_train, y_train)
    print(f"{solver} at epsilon 1: R^2 = {model.score(X_test, y_test):.3f}, "
          f"spent {model[-1].epsilon_spent_:.2f}")

# %%
# One outlying row
# ----------------
# A row far outside the ranges (a data-entry error: a population of 10 million)
# is clipped by the scaler and predicted like the largest block group.

row = X_test[:1].copy()
row[0, 4] = 1e7
print(f"prediction for the outlying row: {model.predict(row)[0]:.2f} (100,000 USD)")

# %%
# Privacy against utility
# -----------------------
# Test R^2 over epsilon (3 seeds each), next to least squares. Greedy coordinate
# descent spends its budget on the few coordinates that matter; the sufficient
# statistics pay for all 45 entries of ``X^T X`` with their intercept, and catch up
# only at larger epsilon (or more rows: see the user guide).

epsilons = [0.1, 0.3, 1.0, 3.0, 10.0]
fig, ax = plt.subplots(figsize=(6, 4))
for solver, label in [("greedy_cd", "greedy CD"), ("sufficient_statistics", "AdaSSP")]:
    scores = np.array([[private_model(eps, solver, seed).fit(X_train, y_train)
                        .score(X_test, y_test) for seed in range(3)] for eps in epsilons])
    ax.errorbar(epsilons, scores.mean(axis=1), yerr=scores.std(axis=1), marker="o",
                label=label, capsize=3)
ax.axhline(ols.score(X_test, y_test), color="k", ls="--", label="least squares")
ax.set_xscale("log")
ax.set_ylim(0, 0.8)
ax.set_xlabel("epsilon (delta = 1/n^2)")
ax.set_ylabel("test R^2")
ax.set_title("California housing, public ranges")
ax.legend()
fig.tight_layout()
plt.show()
