"""
Private hyperparameter selection
================================

A plain :class:`~sklearn.model_selection.GridSearchCV` over private estimators
spends the budget once per fit, and picking the best candidate from exact
validation scores is not private at all. A
:class:`~skdp_sparse.PrivacyLedger` shows the first cost;
:class:`~skdp_sparse.PrivateHyperparameterSearch` removes both: its whole
output (best parameters and refit model) is private, for a total budget fixed
in advance (Papernot & Steinke 2022).
"""

# %%
# Generated sparse classification data.
import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.preprocessing import normalize

from skdp_sparse import DPSparseLogisticRegression, PrivateHyperparameterSearch, privacy_ledger

rng = np.random.default_rng(0)
n, p = 20_000, 200
X = sp.random(n, p, density=0.05, random_state=0, format="csr")
X.data = np.sign(rng.standard_normal(X.data.size))
w = np.zeros(p)
w[:20] = rng.standard_normal(20)
y = (X @ w + 0.5 * rng.standard_normal(n) > 0).astype(int)
# Rows scaled to norm 1, a map of each row alone: the estimators' default norm_bound=1
# is then a public fact, and no row is clipped.
X = normalize(X)
X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
delta = 1.0 / X_train.shape[0] ** 2
grid = {"solver": ["greedy_cd", "sgd"], "max_iter": [30, 300]}

# %%
# A plain grid search at epsilon = 1 per fit: the ledger records every fit. Its
# estimator is unseeded: a seed would give all its clones one noise vector, which the
# ledger's composition does not cover (it warns, PrivacyLeakWarning).
with privacy_ledger() as ledger:
    plain = GridSearchCV(DPSparseLogisticRegression(classes=[0, 1], epsilon=1.0, delta=delta),
                         grid, cv=3).fit(X_train, y_train)
eps_basic, _ = ledger.spent(composition="basic")
eps_tight, _ = ledger.spent(delta=10 * delta)
print(f"GridSearchCV: {len(ledger.records())} fits, basic total epsilon {eps_basic:.1f}, "
      f"tight {eps_tight:.2f}; selection itself not private")

# %%
# The private search, with a total budget of epsilon = 1 for everything.
search = PrivateHyperparameterSearch(
    DPSparseLogisticRegression(classes=[0, 1], delta=delta, random_state=0), grid, epsilon=1.0,
    delta=10 * delta, random_state=0,
).fit(X_train, y_train)
print(f"PrivateHyperparameterSearch: best {search.best_params_}, "
      f"total epsilon {search.epsilon_spent_:.3f}")

default = DPSparseLogisticRegression(classes=[0, 1], epsilon=1.0, delta=delta, random_state=0)
default.fit(X_train, y_train)

# %%
names = ["GridSearchCV\n(not private)", "private search\n(epsilon=1 total)",
         "defaults\n(epsilon=1)"]
scores = [plain.score(X_test, y_test), search.score(X_test, y_test),
          default.score(X_test, y_test)]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.bar(names, scores, color=["0.6", "C0", "C1"])
ax.set_ylim(0.5, 1.0)
ax.set_ylabel("test accuracy")
ax.set_title(f"GridSearchCV really spent epsilon = {eps_basic:.0f} (basic composition)")
fig.tight_layout()
plt.show()
