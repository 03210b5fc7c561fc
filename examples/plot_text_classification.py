"""
Text classification from raw documents, privately
=================================================

Movie reviews in, a sentiment classifier out, and every step that learns from the
training documents is differentially private: the vocabulary and its idf
(:class:`~skdp_sparse.feature_extraction.text.DPTfidfVectorizer`, partition
selection) and the classifier
(:class:`~skdp_sparse.linear_model.DPSparseLogisticRegression`). One budget,
``epsilon = 1`` in total, is split between them with
:func:`~skdp_sparse.pipeline.split_budget`, and the privacy ledger checks the total.

The data are the IMDB reviews in ``../shared/data`` (raw text; nothing is
downloaded): 25,000 training reviews and, to keep the example short, 5,000 of the
25,000 test reviews (films disjoint from the training ones).
"""

import bz2
import csv
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import Pipeline

from skdp_sparse import DPSparseLogisticRegression, privacy_ledger
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
from skdp_sparse.pipeline import split_budget

# %%
# The raw reviews
# ---------------
# The first 25,000 rows are the training split, the last 25,000 the test split.

try:
    root = Path(__file__).resolve().parents[2] / "shared" / "data"
except NameError:  # run by the documentation builder
    root = Path.cwd().resolve().parents[1] / "shared" / "data"
root = Path(os.environ.get("SKDP_DATA_DIR", root))
with bz2.open(root / "imdb_reviews.csv.bz2", "rt", encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))[1:]
docs = [r[0] for r in rows]
labels = np.array([r[1] == "positive" for r in rows], dtype=int)
docs_train, y_train = docs[:25_000], labels[:25_000]
test = np.random.default_rng(0).choice(np.arange(25_000, 50_000), 5_000, replace=False)
docs_test, y_test = [docs[i] for i in test], labels[test]
n = len(docs_train)
print(f"{n} training reviews, {y_train.mean():.0%} positive")

# %%
# The private pipeline
# --------------------
# Each review adds at most its first 50 distinct words (after English stop words)
# to the document counts: a public bound, which sets the noise of the counts. The
# vectorizer and the classifier get half the budget each; the rows have l2 norm 1,
# the classifier's default ``norm_bound``. Each private step has its
# own seed: two steps drawing from one generator state would share their noise.

model = Pipeline([
    ("tfidf", DPTfidfVectorizer(max_terms_per_document=50, stop_words="english",
                                sublinear_tf=True, random_state=0)),
    ("clf", DPSparseLogisticRegression(classes=[0, 1], random_state=1)),
])
split_budget(model, epsilon=1.0, delta=1.0 / n**2, weights={"tfidf": 0.5, "clf": 0.5})
with privacy_ledger() as ledger:
    model.fit(docs_train, y_train)
auc_private = roc_auc_score(y_test, model.decision_function(docs_test))
vectorizer = model["tfidf"]
print(f"vocabulary: {len(vectorizer.vocabulary_)} words; a word needed a noisy count "
      f"above {vectorizer.threshold_:.0f} documents (noise sd {vectorizer.noise_scale_:.0f})")
print("ledger total (epsilon, delta):", ledger.spent(1.0 / n**2))
print(f"private pipeline: test ROC AUC {auc_private:.3f}")

# %%
# The non-private pipeline
# ------------------------
# The same tokenisation, every word of the training reviews in the vocabulary.

public = Pipeline([("tfidf", TfidfVectorizer(stop_words="english", sublinear_tf=True)),
                   ("clf", LogisticRegression(max_iter=1000))])
public.fit(docs_train, y_train)
auc_public = roc_auc_score(y_test, public.decision_function(docs_test))
print(f"non-private pipeline: {len(public['tfidf'].vocabulary_)} words, "
      f"test ROC AUC {auc_public:.3f}")

# %%
# What the private model reads
# ----------------------------
# The words of largest weight, each side. Only words used by hundreds of reviews
# can enter a private vocabulary, so these are common words of praise and blame:
# no single review's rare words can appear.

words = vectorizer.get_feature_names_out()
coef = model["clf"].coef_.ravel()
order = np.argsort(coef)
top = np.r_[order[:10], order[-10:]]
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4.5),
                               gridspec_kw={"width_ratios": [1, 2]})
ax0.bar(["non-private", "private\n(epsilon = 1)"], [auc_public, auc_private],
        color=["0.6", "C0"])
ax0.set_ylim(0.5, 1.0)
ax0.set_ylabel("test ROC AUC")
ax1.barh(np.arange(top.size), coef[top], color=np.where(coef[top] > 0, "C2", "C3"))
ax1.set_yticks(np.arange(top.size), words[top])
ax1.set_xlabel("coefficient of the private model")
fig.tight_layout()
plt.show()
