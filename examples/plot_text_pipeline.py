"""
Private text classification in a pipeline
==========================================

A scikit-learn :class:`~sklearn.pipeline.Pipeline` turns raw documents into
sparse features and fits
:class:`~skdp_sparse.linear_model.DPSparseLogisticRegression` on them. We
measure test accuracy against the privacy budget ``epsilon`` and against the
number of hashed features, next to a non-private logistic regression.

The corpus is generated, so the example runs offline: two classes of short
"reviews" written with made-up words. A few dozen words lean towards one class
and the rest is a long tail of neutral words with a Zipf distribution, as in
real text.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from skdp_sparse.linear_model import DPSparseLogisticRegression

# %%
# Generating a corpus
# -------------------
# Each document has about 40 words. A word is one of the 30 words of its own
# class with probability 0.12, one of the 30 words of the other class with
# probability 0.03, and otherwise a neutral word. No single word decides the
# class: a document has to be read as a whole.

rng = np.random.default_rng(0)

syllables = np.array(["ka", "lo", "mi", "ne", "su", "ta", "ri", "po",
                      "de", "ba", "vo", "gu", "zi", "fe", "ha", "je"])
words = set()
while len(words) < 5000:
    words.add("".join(rng.choice(syllables, size=rng.integers(2, 5))))
words = np.array(sorted(words))
rng.shuffle(words)

N_TOPIC = 30
class_words = {1: words[:N_TOPIC], 0: words[N_TOPIC:2 * N_TOPIC]}
neutral = words[2 * N_TOPIC:]
neutral_p = 1.0 / np.arange(1, neutral.size + 1) ** 1.1
neutral_p /= neutral_p.sum()


def make_corpus(labels, rng, p_own=0.12, p_other=0.03, mean_length=40):
    lengths = rng.poisson(mean_length, size=labels.size) + 5
    total = lengths.sum()
    u = rng.random(total)
    topic = rng.integers(N_TOPIC, size=total)
    filler = neutral[rng.choice(neutral.size, size=total, p=neutral_p)]
    docs, start = [], 0
    for label, length in zip(labels, lengths, strict=True):
        part = slice(start, start + length)
        own, other = class_words[label][topic[part]], class_words[1 - label][topic[part]]
        tokens = np.where(u[part] < p_own, own,
                          np.where(u[part] < p_own + p_other, other, filler[part]))
        docs.append(" ".join(tokens))
        start += length
    return docs


y = rng.integers(0, 2, size=40_000)
docs = make_corpus(y, rng)
print(docs[0][:120], "...")

# %%
# Split off a test set. The privacy guarantee covers the training documents;
# ``delta = 1 / n**2`` is a common choice, well below ``1 / n``.

docs_train, docs_test, y_train, y_test = train_test_split(docs, y, test_size=0.25,
                                                          random_state=0)
n_train = len(docs_train)
delta = 1.0 / n_train**2

# %%
# A private pipeline
# ------------------
# :class:`~sklearn.feature_extraction.text.HashingVectorizer` maps every word to
# one of ``n_features`` columns with a fixed hash function: it learns nothing
# from the data (its ``fit`` does nothing), so it costs no privacy. With
# ``binary=True`` and ``norm=None`` every entry is 0 or 1, so the public bound
# ``feature_bound=1`` of the classifier holds for every document.
#
# :class:`~sklearn.feature_extraction.text.CountVectorizer` and
# :class:`~sklearn.feature_extraction.text.TfidfVectorizer` would not do: their
# ``fit`` builds ``vocabulary_`` (every word of the training set, rare names
# included) and ``idf_`` from the training documents, and these travel with the
# fitted pipeline outside any privacy guarantee.

def private_pipeline(n_features, epsilon, seed=0):
    return make_pipeline(
        HashingVectorizer(n_features=n_features, alternate_sign=False, binary=True,
                          norm=None),
        DPSparseLogisticRegression(classes=[0, 1], epsilon=epsilon, delta=delta, feature_bound=1.0,
                                   random_state=seed),
    )


pipe = private_pipeline(2**12, epsilon=1.0).fit(docs_train, y_train)
clf = pipe[-1]
print(f"test accuracy {pipe.score(docs_test, y_test):.3f}; "
      f"spent epsilon={clf.epsilon_spent_:.3f}, delta={clf.delta_spent_:.1e}; "
      f"solver {clf.solver_!r}, {np.count_nonzero(clf.coef_)} non-zero coefficients")

# %%
# With more columns than examples per unit of epsilon, the default solver
# (``screened_newton``) spends most of the budget on one noisy release of every
# column's association with the label, keeps the columns above the noise and
# takes one Newton step on them; the others keep a coefficient of exactly 0.
# Are the largest coefficients the class words? Hashing the known class words
# tells which columns they fall into.

hasher = pipe[0]
class_columns = set(hasher.transform(list(words[:2 * N_TOPIC])).indices)
top = np.argsort(-np.abs(clf.coef_.ravel()))[:20]
print(f"{sum(j in class_columns for j in top)} of the 20 largest coefficients are "
      f"columns of class words ({len(class_columns)} of {hasher.n_features} columns)")

# %%
# Accuracy against epsilon
# ------------------------
# The number of hashed columns is a public choice with a privacy side: more
# columns mean fewer collisions between words, but also more coordinates whose
# noise can pass the screening. Each fit below is
# a separate release at its own epsilon. Hashing is a fixed map, so the
# documents are hashed once per size and the classifier is fitted on the
# result, which is what the pipeline does.

epsilons = [0.1, 0.3, 1.0, 3.0, 10.0]
sizes = [2**10, 2**14]
accuracy = {}
for n_features in sizes:
    hasher = HashingVectorizer(n_features=n_features, alternate_sign=False, binary=True,
                               norm=None)
    X_train, X_test = hasher.transform(docs_train), hasher.transform(docs_test)
    accuracy[n_features] = [
        DPSparseLogisticRegression(classes=[0, 1], epsilon=eps, delta=delta, feature_bound=1.0,
                                   random_state=0).fit(X_train, y_train).score(X_test, y_test)
        for eps in epsilons
    ]
    reference = LogisticRegression(max_iter=1000).fit(X_train, y_train)
    accuracy[n_features, "non-private"] = reference.score(X_test, y_test)

# %%

fig, ax = plt.subplots(figsize=(6.4, 4.2))
for color, n_features in zip(("C0", "C1"), sizes, strict=True):
    ax.plot(epsilons, accuracy[n_features], "o-", color=color,
            label=f"DPSparseLogisticRegression, {n_features} columns")
    ax.axhline(accuracy[n_features, "non-private"], color=color, ls="--",
               label=f"LogisticRegression (not private), {n_features} columns")
ax.axhline(0.5, color="grey", ls=":", label="chance")
ax.set(xscale="log", xlabel="epsilon (delta = 1/n^2)", ylabel="test accuracy",
       title=f"Synthetic text, {n_train} training documents")
ax.legend(fontsize="small", loc="lower right")
fig.tight_layout()
plt.show()

# %%
# With 30,000 training documents the private model approaches the
# non-private one from ``epsilon`` about 1 to 3 on. At small ``epsilon`` the
# smaller hash space does better: fewer coordinates compete in the noisy
# selection, and each column gathers several words, so its gradient is larger
# next to the noise; the collisions cost the non-private model about one point
# of accuracy here. With fewer documents every curve moves to the right: the
# noise of a private average shrinks like ``1 / (n epsilon)``.
