"""How close can any private linear regression come on the tabular sets of
``bench_preprocessing.py``? Oracles that are kinder than every private method.

For each data set (the same public ranges, split, ``epsilon = 1`` and ``delta = 1/n^2``
as ``bench_preprocessing.py``; features mapped to [-1, 1] and the target from its
public range to [-1, 1]):

* ``least squares``: the non-private fit on those features;
* ``oracle: noisy X^T y only``: the exact Gram matrix ``Z^T Z`` (``Z`` the rows and the
  intercept's 1), and only ``Z^T t`` released, with the whole budget, by the analytic
  Gaussian mechanism at its replace-one sensitivity ``2 sqrt(p + 1)`` (rows in the box,
  ``|t| <= 1``); the ridge is then chosen with hindsight on the test part, from 62
  values. A private fit has to release the Gram matrix too, and choose its ridge
  without the test part;
* ``oracle: exact centring``: kinder still: exact feature and target means, the exact
  centred Gram matrix, and only the centred ``X^T t`` noisy, at sensitivity
  ``2 sqrt(p)`` (less than centred rows can move it: the oracle understates the noise);
  the ridge again chosen on the test part;
* ``principal components k``: least squares on the first ``k`` principal components
  of the training features (not private), with the variance each component carries:
  which directions the signal needs, against the noise a private second-moment
  release leaves on them.

R^2 on the test part, mean and standard deviation over ``--draws`` noise draws.

Run: ``python benchmarks/bench_regression_limits.py [--draws 200]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table  # noqa: E402
from bench_preprocessing import EPSILON, RANGES, delta_for, load  # noqa: E402

from skdp_sparse.privacy.accounting import gaussian_mu  # noqa: E402

RIDGES = np.concatenate([[0.0], np.logspace(-2, 4, 61)])


def scaled(name):
    """Training and test features in [-1, 1] and targets mapped from the public range
    to [-1, 1], with the map back to the target's units."""
    spec = RANGES[name]
    X, y = load(name)
    lower, upper = np.array(spec["lower"]), np.array(spec["upper"])
    X = 2 * (np.clip(X, lower, upper) - lower) / (upper - lower) - 1
    lo, hi = spec["target"]
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0)
    t = (np.clip(y_tr, lo, hi) - centre) / half
    return X_tr, X_te, t, y_te, lambda s: np.clip(centre + half * s, lo, hi)


def best_ridge_r2(gram, moment, predict, y_te, back, penalised):
    """The test R^2 of the best ridge (the oracle's hindsight)."""
    best = -np.inf
    for ridge in RIDGES:
        coef = np.linalg.solve(gram + ridge * np.diag(penalised), moment)
        best = max(best, r2_score(y_te, back(predict(coef))))
    return best


def oracles(name, draws):
    X_tr, X_te, t, y_te, back = scaled(name)
    n, p = X_tr.shape
    mu = gaussian_mu(EPSILON, delta_for(n))
    rows = {}
    Z = np.hstack([X_tr, np.ones((n, 1))])
    Z_te = np.hstack([X_te, np.ones((X_te.shape[0], 1))])
    gram, moment = Z.T @ Z, Z.T @ t
    rows["least squares"] = [r2_score(y_te, back(Z_te @ np.linalg.solve(gram, moment)))]
    penalised = np.r_[np.ones(p), 0.0]
    sigma = 2 * np.sqrt(p + 1) / mu
    rng = np.random.default_rng(0)
    rows["oracle: noisy X^T y only"] = [
        best_ridge_r2(gram, moment + sigma * rng.standard_normal(p + 1),
                      lambda c: Z_te @ c, y_te, back, penalised) for _ in range(draws)]
    x_mean, t_mean = X_tr.mean(0), t.mean()
    Xc = X_tr - x_mean
    gram_c, moment_c = Xc.T @ Xc, Xc.T @ (t - t_mean)
    sigma_c = 2 * np.sqrt(p) / mu
    rows["oracle: exact centring"] = [
        best_ridge_r2(gram_c, moment_c + sigma_c * rng.standard_normal(p),
                      lambda c: t_mean + (X_te - x_mean) @ c, y_te, back, np.ones(p))
        for _ in range(draws)]
    variances, vectors = np.linalg.eigh(np.cov(Xc.T, bias=True))
    variances, vectors = variances[::-1], vectors[:, ::-1]
    cross = Xc.T @ (t - t_mean) / n
    for k in range(1, p + 1):
        V = vectors[:, :k]
        coef = V @ ((V.T @ cross) / variances[:k])
        rows[f"principal components 1..{k} (variance of the last: {variances[k - 1]:.3g})"] = [
            r2_score(y_te, back(t_mean + (X_te - x_mean) @ coef))]
    return n, p, mu, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--datasets", nargs="+", default=["abalone", "california"],
                        choices=sorted(RANGES))
    args = parser.parse_args()
    for name in args.datasets:
        n, p, mu, rows = oracles(name, args.draws)
        print(f"\n### {name}: n = {n}, p = {p}, epsilon = {EPSILON:g}, delta = 1/n^2 "
              f"(Gaussian ratio mu = {mu:.4f})\n")
        table = [{"fit": k, "R^2": f"{np.mean(v):.3f}" if len(v) == 1 else
                  f"{np.mean(v):.3f} +- {np.std(v):.3f}",
                  "draws reaching least squares - 0.05": "" if len(v) == 1 else
                  f"{np.mean(np.array(v) >= np.mean(rows['least squares']) - 0.05):.0%}"}
                 for k, v in rows.items()]
        print(markdown_table(table, ["fit", "R^2", "draws reaching least squares - 0.05"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
