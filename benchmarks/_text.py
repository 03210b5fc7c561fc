"""Text data sets of the benchmarks, featurised by a public map and cached.

Every featuriser here is a fixed function of one document (no vocabulary or
statistic learnt from the corpus), so featurising costs no privacy and the row
norm bound is public: ``HashingVectorizer(n_features=2**18, alternate_sign=False,
norm="l2", ngram_range=(1, 2))`` gives unit rows, ``norm_bound=1``.

* ``imdb``: the IMDB reviews, the first 25,000 rows for training and the last
  25,000 for testing (the aclImdb splits, disjoint movies);
* ``sms``: the SMS Spam Collection (13.4% spam), a stratified 30% held out
  (``random_state=0``);
* ``reuters``: the LaSVM tf-idf version of Reuters (unit rows, 8,315 features)
  from :func:`_common.load_dataset`;
* ``imdb_tfidf``: the shape of a tf-idf matrix a user brings (scikit-learn's
  ``TfidfVectorizer()`` with its defaults, unigrams, unit rows), fitted on the
  first 11,314 IMDB training reviews and applied to the 25,000 test reviews. Its
  vocabulary and idf are learnt from the training documents without privacy: it
  measures the classifier on such rows, not a private pipeline (that is
  ``bench_text_pipeline.py``).

Featurised matrices are cached with joblib under ``~/.cache/skdp_sparse/text``
(override with ``SKDP_CACHE_DIR``).
"""

from __future__ import annotations

import bz2
import csv
import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from _common import Dataset, data_dir, load_dataset

__all__ = ["TEXT_DATASETS", "load_text", "load_raw_text", "featuriser"]

TEXT_DATASETS = ("imdb", "sms", "reuters", "imdb_tfidf")

#: Training reviews of ``imdb_tfidf``.
IMDB_TFIDF_ROWS = 11_314


def featuriser():
    """The public featuriser: hashed unigrams and bigrams, unit l2 rows."""
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(n_features=2**18, alternate_sign=False, norm="l2",
                             ngram_range=(1, 2))


def _cache_dir() -> Path:
    env = os.environ.get("SKDP_CACHE_DIR")
    return (Path(env) if env else Path.home() / ".cache" / "skdp_sparse") / "text"


def _imdb_raw(root):
    with bz2.open(Path(root) / "imdb_reviews.csv.bz2", "rt", encoding="utf-8",
                  newline="") as f:
        rows = list(csv.reader(f))[1:]
    text = [r[0] for r in rows]
    y = np.array([r[1] == "positive" for r in rows], dtype=np.int64)
    return text, y


def _sms_raw(root):
    with bz2.open(Path(root) / "sms_spam_collection.tsv.bz2", "rt", encoding="utf-8",
                  newline="") as f:
        pairs = [line.split("\t", 1) for line in f.read().split("\n")[:-1]]
    text = [t for _, t in pairs]
    y = np.array([lab == "spam" for lab, _ in pairs], dtype=np.int64)
    return text, y


def load_raw_text(name, root=None):
    """``(docs_train, y_train, docs_test, y_test)``: the raw documents of ``imdb`` or
    ``sms`` with the splits of :func:`load_text` (labels {0, 1})."""
    from sklearn.model_selection import train_test_split

    root = data_dir() if root is None else root
    if name == "imdb":
        text, y = _imdb_raw(root)
        return text[:25_000], y[:25_000], text[25_000:], y[25_000:]
    if name != "sms":
        raise ValueError(f"no raw text for {name!r}; choose imdb or sms")
    text, y = _sms_raw(root)
    index = np.arange(len(text))
    train, test = train_test_split(index, test_size=0.3, stratify=y, random_state=0)
    return [text[i] for i in train], y[train], [text[i] for i in test], y[test]


def _imdb(root):
    text, y = _imdb_raw(root)
    vec = featuriser()
    X = sp.csr_matrix(vec.transform(text))
    return X[:25_000], y[:25_000], X[25_000:], y[25_000:]


def _sms(root):
    from sklearn.model_selection import train_test_split

    text, y = _sms_raw(root)
    X = sp.csr_matrix(featuriser().transform(text))
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    return sp.csr_matrix(Xtr), ytr, sp.csr_matrix(Xte), yte


def _imdb_tfidf(root):
    from sklearn.feature_extraction.text import TfidfVectorizer

    text, y = _imdb_raw(root)
    vec = TfidfVectorizer()
    Xtr = vec.fit_transform(text[:IMDB_TFIDF_ROWS])
    Xte = vec.transform(text[25_000:])
    return sp.csr_matrix(Xtr), y[:IMDB_TFIDF_ROWS], sp.csr_matrix(Xte), y[25_000:]


def _featurised(name, root):
    return {"imdb": _imdb, "sms": _sms, "imdb_tfidf": _imdb_tfidf}[name](root)


def load_text(name: str) -> Dataset:
    """Train and test split of a text data set, CSR rows of unit l2 norm, labels {0, 1}."""
    if name == "reuters":
        return load_dataset("reuters")
    if name not in TEXT_DATASETS:
        raise ValueError(f"unknown text data set {name!r}; choose from {TEXT_DATASETS}")
    from joblib import Memory

    loader = Memory(str(_cache_dir()), verbose=0).cache(_featurised)
    Xtr, ytr, Xte, yte = loader(name, str(data_dir()))
    return Dataset(name, Xtr, ytr, Xte, yte)
