"""Raw documents to unit tf-idf rows, with a vocabulary and idf chosen privately.

:class:`DPTfidfVectorizer` tokenises like scikit-learn's
:class:`~sklearn.feature_extraction.text.TfidfVectorizer` (it delegates the analysis
to a :class:`~sklearn.feature_extraction.text.CountVectorizer` built with the same
parameters), but learns its vocabulary by private partition selection
(:mod:`skdp_sparse.privacy.partitions`) and its idf from the same noisy document
frequencies, or takes a public vocabulary and releases only the noisy document
frequencies of its terms.
"""

from __future__ import annotations

import math
import numbers
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.preprocessing import normalize
from sklearn.utils.validation import check_is_fitted

from ..base import DPEstimatorMixin
from ..privacy.partitions import (
    WEIGHT_BITS,
    check_release,
    plan_partition_selection,
    plan_public_counts,
    row_weight,
    select_partitions,
)
from ..utils._ranking import top_k
from ..utils._warnings import warn_float_noise
from ..utils.validation import DELTA, EPSILON, Interval, Options

__all__ = ["DPTfidfVectorizer", "document_terms"]

#: Parameters handed to the CountVectorizer that analyses the documents.
_ANALYSIS = ("encoding", "decode_error", "strip_accents", "lowercase", "preprocessor",
             "tokenizer", "analyzer", "stop_words", "token_pattern", "ngram_range")


def document_terms(analyze, document, max_terms, vocabulary=None):
    """The distinct terms of one document, in the order they first occur, the first
    ``max_terms`` of them: what the document contributes to the counts (a function of
    the document alone). Given a public ``vocabulary`` (a container of terms), only
    its terms count, the first ``max_terms`` of those.

    Terms are plain ``str``: a subclass (``numpy.str_``) becomes its ``str``, and any
    other type is refused. Keys that compare equal across types (``1``, ``1.0``,
    ``True``) would merge into one partition whose released key is the spelling of
    whichever document came first, a choice no noisy count covers."""
    terms = {}
    for term in analyze(document):
        if type(term) is not str:
            if not isinstance(term, str):
                raise TypeError(
                    "the analyzer must return terms of type str; it returned a term of "
                    f"type {type(term).__name__} (its value is not shown)")
            term = str(term)
        if vocabulary is None or term in vocabulary:
            terms[term] = None
    return list(terms)[:max_terms] if len(terms) > max_terms else list(terms)


def _public_vocabulary(vocabulary, owner="DPTfidfVectorizer"):
    """``vocabulary`` (``None``, a mapping term -> column or an iterable of terms, as
    scikit-learn's ``TfidfVectorizer(vocabulary=...)`` takes; a set is sorted) as a dict
    term -> column in column order, or ``None``; a ``ValueError`` (``TypeError`` for a
    term that is no ``str``) on duplicate terms, columns that are not ``0, ..., n - 1``
    or an empty vocabulary. The vocabulary is public: the messages may quote it."""
    if vocabulary is None:
        return None
    if isinstance(vocabulary, str | bytes):
        raise ValueError(f"{owner}: vocabulary must be a mapping term -> column or an "
                         "iterable of terms, got a single string; pass [term] for one term")
    if isinstance(vocabulary, Iterator):
        # Read once, it would be empty at the next fit (a clone's, a search's).
        raise ValueError(f"{owner}: vocabulary is an iterator ({type(vocabulary).__name__}),"
                         " which can be read once; pass a list of its terms")
    if isinstance(vocabulary, Mapping):
        columns = {}
        for term, column in vocabulary.items():
            if not isinstance(column, numbers.Integral) or isinstance(column, bool):
                raise ValueError(f"{owner}: the vocabulary maps {term!r} to {column!r}; "
                                 "columns are integers")
            columns[_term(term, owner)] = int(column)
        if len(set(columns.values())) != len(columns):
            raise ValueError(f"{owner}: the vocabulary contains repeated column indices")
        missing = sorted(set(range(len(columns))) - set(columns.values()))
        if missing:
            raise ValueError(f"{owner}: a vocabulary of size {len(columns)} maps its terms "
                             f"to the columns 0 to {len(columns) - 1}; it does not contain "
                             f"column {missing[0]}")
        order = sorted(columns, key=columns.get)
    else:
        if isinstance(vocabulary, set | frozenset):
            vocabulary = sorted(vocabulary)
        try:
            terms = list(vocabulary)
        except TypeError:
            raise ValueError(f"{owner}: vocabulary must be a mapping term -> column or an "
                             f"iterable of terms, got {type(vocabulary).__name__}") from None
        order = [_term(term, owner) for term in terms]
        seen = set()
        for term in order:
            if term in seen:
                raise ValueError(f"{owner}: duplicate term in the vocabulary: {term!r}")
            seen.add(term)
    if not order:
        raise ValueError(f"{owner}: the vocabulary is empty")
    return {term: i for i, term in enumerate(order)}


def _term(term, owner):
    # The analyzer's terms are str (document_terms): a term of another type would never
    # match, and numpy.str_ is its str.
    if not isinstance(term, str):
        raise TypeError(f"{owner}: the vocabulary's terms must be of type str, got "
                        f"{term!r} ({type(term).__name__})")
    return str(term)


@dataclass(frozen=True)
class _Vocabulary:
    terms: list
    df: np.ndarray | None
    events: tuple


@dataclass(frozen=True)
class _NothingReleased:
    """The plan of a fit on a public vocabulary without idf: nothing is released."""

    epsilon: float = 0.0
    delta: float = 0.0
    events: tuple = ()
    sigma: float = 0.0


class DPTfidfVectorizer(DPEstimatorMixin, TransformerMixin, BaseEstimator):
    """Tf-idf features whose vocabulary and idf are differentially private.

    ``fit`` tokenises every document as :class:`~sklearn.feature_extraction.text.TfidfVectorizer`
    would, takes from each its first ``max_terms_per_document`` distinct terms (a
    public bound), counts the documents that contain each term, adds Gaussian noise
    to every count and keeps the terms whose noisy count exceeds a threshold
    (private partition selection, :mod:`skdp_sparse.privacy.partitions`). With
    ``vocabulary_weighting="uniform"`` (the default) a document with ``k`` terms
    counts ``sqrt(max_terms_per_document / k)`` times for each (the weighted Gaussian
    policy of Gopi et al. 2020): the noise is the same, and the terms of short
    documents need fewer of them. The threshold is set so that the terms used by one
    document only are kept with probability at most ``delta / 2`` together. The idf
    of each term kept is computed from its noisy count. ``transform`` is then scikit-learn's:
    term counts of the vocabulary, times the idf, each row scaled to l2 norm 1, so
    the estimator that follows can take ``norm_bound=1``.

    Given a public ``vocabulary`` (from another corpus, a published word list, a
    pretrained tokenizer's), nothing is selected: the columns are its terms, in its
    order, whatever the documents, and the whole budget goes to the noisy document
    frequencies of its terms, for the idf; with ``use_idf=False`` the fit releases
    nothing and spends nothing. Pass one where the private selection keeps few terms:
    short documents (text messages) or a small budget, where a term needs hundreds of
    documents to pass the threshold.

    Privacy
    -------
    ``(epsilon, delta)``-DP for replace-one neighbouring datasets of documents (the
    number of documents is public), with ``0 < delta < 1``: half of ``delta`` covers
    the terms used by one document (the threshold), the rest and ``epsilon`` the
    Gaussian noise of the counts, whose l2 sensitivity is
    ``sqrt(2 max_terms_per_document)``, weighted or not
    (``doc/proofs/partition_selection.rst``). The
    vocabulary, the noisy counts (``document_frequency_``), the idf and the spend are
    public. On the floating-point-safe path (default) the noise is a discrete
    Gaussian accounted in zCDP. ``epsilon=np.inf`` keeps every term that occurs,
    with exact counts (not private).

    With a public ``vocabulary`` (which must not be derived from these documents):
    ``use_idf=True`` releases the noisy (weighted) document frequency of every term of
    the vocabulary, 0 included, with the Gaussian mechanism of the same l2
    sensitivity ``sqrt(2 max_terms_per_document)`` and the whole ``(epsilon,
    delta)``, ``0 < delta < 1`` (no threshold, so no share of ``delta`` for it); a
    document adds its first ``max_terms_per_document`` distinct terms of the
    vocabulary. ``use_idf=False`` releases nothing about the documents: the fit is
    recorded with ``epsilon_spent_ = delta_spent_ = 0`` and no event, like
    :class:`~skdp_sparse.preprocessing.BoundedScaler`'s.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget, > 0, or ``np.inf``.
    delta : float, default=1e-6
        In (0, 1); ``1 / n_documents**2`` or smaller is the usual choice.
    max_terms_per_document : int, default=100
        Public bound on the distinct terms (after analysis: n-grams, stop words) one
        document adds to the counts; a document with more adds the first ones. The
        noise grows with its square root.
    vocabulary_weighting : {"uniform", "count"}, default="uniform"
        What a document with ``k`` of these terms adds to the count of each: ``"count"``
        1; ``"uniform"`` ``sqrt(max_terms_per_document / k)``, at least 1 (the squares
        of a document's weights sum to at most ``max_terms_per_document`` either way,
        so the noise is the same). Weighted, a term of documents with few terms
        passes the threshold with fewer documents, by a factor up to
        ``sqrt(k / max_terms_per_document)``; the threshold is raised where the
        largest weight, that of a one-term document, needs it (at large epsilon).
        The noisy count is then a weighted count: the document frequency it gives the
        idf is too high by ``sqrt(max_terms_per_document / k)`` for a term of
        ``k``-term documents (the idf lower by the log of that).
    max_features : int or None, default=None
        Keep at most this many terms, those of highest noisy count (post-processing).
        Ignored with a public ``vocabulary``, as in scikit-learn.
    vocabulary : mapping or iterable of str, default=None
        A public vocabulary, as scikit-learn's: a mapping term -> column (the columns
        ``0, ..., n - 1``), or an iterable of distinct terms (columns in its order; a
        set is sorted; not an iterator, which a second fit would find empty).
        ``None``: the vocabulary is chosen privately from the documents. Refused
        before any work if a term repeats, a column is missing or repeats, or it is
        empty.
    encoding, decode_error, strip_accents, lowercase, preprocessor, tokenizer, analyzer, \
stop_words, token_pattern, ngram_range
        As in :class:`~sklearn.feature_extraction.text.TfidfVectorizer`.
    binary : bool, default=False
        Term presence instead of term counts in ``transform``.
    use_idf, smooth_idf, sublinear_tf : bool
        As in :class:`~sklearn.feature_extraction.text.TfidfVectorizer`; the idf is
        ``ln((1 + n) / (1 + df)) + 1`` with ``df`` the noisy count clipped to
        ``[0, n]`` (``smooth_idf``), or ``ln(n / df) + 1`` with it clipped to
        ``[1, n]``.
    dtype : numpy dtype, default=np.float64
    floating_point_safe : {"auto", True, False}, default="auto"
        Discrete Gaussian noise on a lattice ("auto", True) or Gaussian noise in doubles
        (False, with a :class:`~skdp_sparse.exceptions.PrivacyLeakWarning`).
    random_state : None, int or numpy.random.Generator, default=None
    ledger : PrivacyLedger, default=None
        A ledger the fit reports to besides the active ones (see
        :func:`~skdp_sparse.privacy_ledger`); it travels with the estimator through
        ``clone`` and pickling, so it reaches fits in processes an activation does not
        (those a worker starts, or a ray or dask task), and its cap holds there.

    Attributes
    ----------
    vocabulary_ : dict
        Term to column index (terms in sorted order, like scikit-learn's; the given
        vocabulary's columns when it is public).
    fixed_vocabulary_ : bool
        Whether the vocabulary was given (public), as in scikit-learn.
    idf_ : ndarray of shape (n_terms,)
        Absent when a public vocabulary is fitted with ``use_idf=False`` (nothing was
        released), as scikit-learn's.
    document_frequency_ : ndarray of shape (n_terms,)
        Noisy number of documents containing each term (weighted by
        ``vocabulary_weighting``); absent where ``idf_`` is.
    threshold_ : float or None
        The noisy count a term had to exceed; ``None`` with a public vocabulary.
    noise_scale_ : float
        Standard deviation of the noise on each count (0 when nothing was released).
    n_documents_ : int
    epsilon_spent_, delta_spent_ : float
    privacy_events_ : tuple of PrivacyEvent

    Examples
    --------
    >>> from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
    >>> docs = ["the cat sat", "the dog sat", "a cat ran"] * 400 + ["my secret phrase"]
    >>> vec = DPTfidfVectorizer(epsilon=1.0, delta=1e-6, max_terms_per_document=5,
    ...                         random_state=0).fit(docs)
    >>> vec.get_feature_names_out().tolist()
    ['cat', 'dog', 'ran', 'sat', 'the']
    >>> vec.transform(["the cat"]).toarray().round(2)
    array([[0.68, 0.  , 0.  , 0.  , 0.74]])

    A public vocabulary (here a short word list) keeps its terms and order whatever
    the documents; ``use_idf=False`` then spends nothing:

    >>> public = ["cat", "dog", "secret"]
    >>> vec = DPTfidfVectorizer(vocabulary=public, epsilon=1.0, delta=1e-6,
    ...                         max_terms_per_document=5, random_state=0).fit(docs)
    >>> vec.get_feature_names_out().tolist(), vec.epsilon_spent_ <= 1.0
    (['cat', 'dog', 'secret'], True)
    >>> vec = DPTfidfVectorizer(vocabulary=public, use_idf=False).fit(docs)
    >>> vec.transform(["the cat"]).toarray(), vec.epsilon_spent_
    (array([[1., 0., 0.]]), 0.0)
    """

    _parameter_constraints = {
        "epsilon": EPSILON,
        "delta": DELTA,
        "max_terms_per_document": [Interval(numbers.Integral, 1, None)],
        "vocabulary_weighting": [Options("uniform", "count")],
        "max_features": [Interval(numbers.Integral, 1, None), None],
        # Checked by _public_vocabulary, before any work.
        "vocabulary": ["no_validation"],
        "encoding": [str],
        "decode_error": [Options("strict", "ignore", "replace")],
        "strip_accents": [Options("ascii", "unicode"), "callable", None],
        "lowercase": ["boolean"],
        "preprocessor": ["callable", None],
        "tokenizer": ["callable", None],
        "analyzer": [Options("word", "char", "char_wb"), "callable"],
        "stop_words": [Options("english"), "array-like", None],
        "token_pattern": [str, None],
        "ngram_range": [tuple],
        "binary": ["boolean"],
        "use_idf": ["boolean"],
        "smooth_idf": ["boolean"],
        "sublinear_tf": ["boolean"],
        "dtype": ["no_validation"],
        "floating_point_safe": [Options("auto", True, False)],
        "random_state": ["random_state"],
    }

    def __init__(self, *, epsilon=1.0, delta=1e-6, max_terms_per_document=100,
                 vocabulary_weighting="uniform", max_features=None, vocabulary=None,
                 encoding="utf-8",
                 decode_error="strict", strip_accents=None, lowercase=True,
                 preprocessor=None, tokenizer=None, analyzer="word", stop_words=None,
                 token_pattern=r"(?u)\b\w\w+\b", ngram_range=(1, 1), binary=False,
                 use_idf=True, smooth_idf=True, sublinear_tf=False, dtype=np.float64,
                 floating_point_safe="auto", random_state=None, ledger=None):
        self.epsilon = epsilon
        self.delta = delta
        self.max_terms_per_document = max_terms_per_document
        self.vocabulary_weighting = vocabulary_weighting
        self.max_features = max_features
        self.vocabulary = vocabulary
        self.encoding = encoding
        self.decode_error = decode_error
        self.strip_accents = strip_accents
        self.lowercase = lowercase
        self.preprocessor = preprocessor
        self.tokenizer = tokenizer
        self.analyzer = analyzer
        self.stop_words = stop_words
        self.token_pattern = token_pattern
        self.ngram_range = ngram_range
        self.binary = binary
        self.use_idf = use_idf
        self.smooth_idf = smooth_idf
        self.sublinear_tf = sublinear_tf
        self.dtype = dtype
        self.floating_point_safe = floating_point_safe
        self.random_state = random_state
        self.ledger = ledger

    # -- analysis -----------------------------------------------------------------
    def _counter(self, vocabulary=None):
        params = {name: getattr(self, name) for name in _ANALYSIS}
        return CountVectorizer(vocabulary=vocabulary, binary=self.binary, dtype=np.float64,
                               **params)

    def build_analyzer(self):
        """The callable that turns a document into its terms (scikit-learn's)."""
        return self._counter().build_analyzer()

    def _documents(self, raw_documents):
        owner = type(self).__name__
        if isinstance(raw_documents, str | bytes):
            raise ValueError(f"{owner}: an iterable of documents (strings) is expected, "
                             "got a single string")
        if getattr(raw_documents, "ndim", 1) != 1:
            # A DataFrame iterates over its column names, which would be fitted (and
            # spend the budget) as documents.
            raise ValueError(f"{owner}: an iterable of documents (strings) is expected, "
                             f"got a {raw_documents.ndim}-d "
                             f"{type(raw_documents).__name__}; pass one column of texts "
                             "(df['text'])")
        try:
            docs = list(raw_documents)
        except TypeError as exc:
            raise ValueError(f"{owner}: an iterable of documents (strings) is expected, "
                             f"got {type(raw_documents).__name__}") from exc
        # The messages below name no document and quote none of their content: the
        # documents are the private data, and an error leaves the fit.
        if not all(isinstance(doc, str | bytes | np.str_) for doc in docs):
            raise ValueError(f"{owner}: every document must be a string (str or bytes); "
                             "missing texts (NaN, None) must be replaced, e.g. by ''. "
                             "[i for i, d in enumerate(docs) if not isinstance(d, str)] "
                             "lists the others")
        return [self._decoded(doc) if isinstance(doc, bytes) else doc for doc in docs]

    def _decoded(self, doc):
        # Decoded here, before any budget is reserved, so that a document that is not
        # valid in the encoding fails with a message that quotes none of its
        # bytes, and the error is raised outside the handler so that it does not carry
        # the decoder's error as its context.
        try:
            return doc.decode(self.encoding, self.decode_error)
        except UnicodeDecodeError:
            pass
        raise ValueError(
            f"{type(self).__name__}: a document is not valid {self.encoding}; pass the "
            "right encoding=..., decode_error='replace' (or 'ignore'), or decode the "
            "documents first")

    # -- the fit sequence ---------------------------------------------------------
    def _check_dp_rules(self):
        owner = type(self).__name__
        public = _public_vocabulary(self.vocabulary, owner)
        releases = public is None or self.use_idf
        if math.isfinite(self.epsilon) and releases and not 0 < self.delta < 1:
            why = ("a term used by one document is kept with probability at most delta"
                   if public is None else "the document frequencies of the public "
                   "vocabulary are released with Gaussian noise")
            raise ValueError(f"{owner} needs 0 < delta < 1: {why} (for example "
                             "delta = 1 / n_documents**2)")
        ngram = self.ngram_range
        integers = all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                       for v in ngram)
        if not (len(ngram) == 2 and integers and 1 <= ngram[0] <= ngram[1]):
            raise ValueError(f"{owner}: ngram_range must be a pair (min_n, max_n) of "
                             f"integers with 1 <= min_n <= max_n, got {self.ngram_range!r}")
        if self.token_pattern is not None:
            try:
                re.compile(self.token_pattern)
            except re.error as exc:
                # The analysis raised re.error, which names no parameter.
                raise ValueError(f"{owner}: token_pattern is not a valid regular "
                                 f"expression ({exc})") from None
        try:
            floating = np.issubdtype(np.dtype(self.dtype), np.floating)
        except TypeError:
            floating = False
        if not floating:
            # Unit-norm tf-idf rows in an integer type would all round to 0.
            raise ValueError(f"{owner}: dtype must be a floating-point type (np.float64 or "
                             f"np.float32), got {self.dtype!r}")
        if self.floating_point_safe is False:
            warn_float_noise(owner)

    def _validate_fit_data(self, X, y):
        docs = self._documents(X)
        if not docs:
            raise ValueError(f"{type(self).__name__}: no documents")
        # Analysed before the budget is reserved: a term of the wrong type is refused
        # as bad input, not after noise is drawn.
        analyze = self.build_analyzer()
        vocabulary = _public_vocabulary(self.vocabulary, type(self).__name__)
        terms = [document_terms(analyze, doc, self.max_terms_per_document, vocabulary)
                 for doc in docs]
        return (terms, vocabulary), {"n_samples": len(docs), "vocabulary": vocabulary}

    def _plan(self, public):
        safe = self.floating_point_safe is not False
        vocabulary = public["vocabulary"]
        if vocabulary is None:
            plan = plan_partition_selection(
                self.epsilon, self.delta, self.max_terms_per_document,
                floating_point_safe=safe, weighting=self.vocabulary_weighting)
        elif self.use_idf:
            plan = plan_public_counts(
                self.epsilon, self.delta, self.max_terms_per_document, len(vocabulary),
                floating_point_safe=safe, weighting=self.vocabulary_weighting)
        else:
            return _NothingReleased()
        check_release(plan, public["n_samples"])
        return plan

    def _solve(self, data, plan, rng):
        data, vocabulary = data
        if isinstance(plan, _NothingReleased):
            return _Vocabulary(list(vocabulary), None, plan.events)
        # Integer units of 2^-WEIGHT_BITS: the sums are exact (check_release bounds them
        # below 2^53), so neighbouring corpora's sums differ by one document's weights.
        units, weights = {}, {}
        for doc_terms in data:
            doc_terms = doc_terms[: plan.max_contributions]
            k = len(doc_terms)
            if k and k not in weights:
                weights[k] = row_weight(plan, k)
            for term in doc_terms:
                units[term] = units.get(term, 0) + weights[k]
        # A public vocabulary's terms are all released, in its order, 0 counts included.
        terms = sorted(units) if vocabulary is None else list(vocabulary)
        counts = np.array([units.get(t, 0) for t in terms], dtype=float) / 2.0**WEIGHT_BITS
        kept, noisy = select_partitions(counts, plan, rng, n_rows=len(data))
        terms = [terms[i] for i in kept]
        if vocabulary is not None:
            return _Vocabulary(terms, noisy, plan.events)
        if self.max_features is not None and len(terms) > self.max_features:
            top = top_k(noisy, self.max_features)
            terms, noisy = [terms[i] for i in top], noisy[top]
        return _Vocabulary(terms, noisy, plan.events)

    def _fitted_attributes(self, public, plan, result):
        n = int(public["n_samples"])
        fixed = public["vocabulary"] is not None
        if not result.terms:
            # The vocabulary's size is released anyway: saying it is empty costs nothing.
            warnings.warn(
                f"{type(self).__name__} kept no term: no term's noisy count of documents "
                f"({self.vocabulary_weighting!r} weighting) passed the threshold of "
                f"{plan.threshold:.0f} (n = {n} documents), so "
                "transform returns rows without columns. The threshold grows with "
                "max_terms_per_document and 1/epsilon; more documents, a larger epsilon "
                "or a smaller max_terms_per_document make room for terms, and a "
                "HashingVectorizer (alternate_sign=False, norm='l2': rows of norm 1, no "
                "privacy cost) needs no vocabulary; on short texts, character n-grams "
                "(analyzer='char_wb', ngram_range=(2, 4)) are shared by many documents.",
                UserWarning, stacklevel=4)
        out = {"vocabulary_": {t: i for i, t in enumerate(result.terms)},
               "fixed_vocabulary_": fixed,
               "threshold_": None if fixed else float(plan.threshold),
               "noise_scale_": float(plan.sigma), "n_documents_": n}
        if result.df is None:
            return out
        # A noisy count can be 0 or less (a public term no document uses).
        df = np.clip(result.df, 0.0 if self.smooth_idf else 1.0, n)
        if self.smooth_idf:
            idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
        else:
            idf = np.log(n / df) + 1.0
        return {**out, "idf_": idf, "document_frequency_": result.df}

    def fit(self, raw_documents, y=None, sample_weight=None):
        """Choose the vocabulary and the idf privately (the idf alone, or nothing, with
        a public ``vocabulary``).

        Every check (parameters, documents that are not strings) happens before any
        budget is reserved.

        Parameters
        ----------
        raw_documents : iterable of str
        y : None
            Ignored.
        sample_weight : None
            Refused unless None (a ``TypeError``): the noise is calibrated to one
            row, which a weight would multiply.

        Returns
        -------
        self
        """
        return self._fit(raw_documents, y, sample_weight)

    def fit_transform(self, raw_documents, y=None, sample_weight=None):
        """``fit`` then ``transform`` (the documents are read once as a list)."""
        docs = self._documents(raw_documents)
        return self.fit(docs, y, sample_weight).transform(docs)

    def transform(self, raw_documents):
        """Unit-norm tf-idf rows on the vocabulary (a CSR matrix).

        Parameters
        ----------
        raw_documents : iterable of str

        Returns
        -------
        X : sparse matrix of shape (n_documents, n_terms)
            Rows of l2 norm 1 (0 for a document without a term of the vocabulary).
        """
        check_is_fitted(self, "vocabulary_")
        docs = self._documents(raw_documents)
        if not self.vocabulary_:
            return sp.csr_matrix((len(docs), 0), dtype=self.dtype)
        X = self._counter(self.vocabulary_).transform(docs).astype(np.float64)
        if self.sublinear_tf:
            np.log(X.data, X.data)
            X.data += 1.0
        if self.use_idf:
            X = X @ sp.diags(self.idf_)
        return sp.csr_matrix(normalize(X, norm="l2", copy=False), dtype=self.dtype)

    def get_feature_names_out(self, input_features=None):
        """The terms of the vocabulary, in column order."""
        check_is_fitted(self, "vocabulary_")
        return np.asarray(list(self.vocabulary_), dtype=object)

    def _planned_from_parameters(self):
        """Whether what a fit releases and the width of its output are functions of
        the parameters and the number of documents alone, whatever the documents say:
        with a public ``vocabulary`` (its noisy document frequencies, or nothing), not
        with one chosen from the documents. The private search, which learns every fit's
        events and the width the next steps get from a fit on stand-in documents of empty
        strings, takes a step that takes text only where this holds."""
        return self.vocabulary is not None

    def _releases_nothing(self):
        """Whether a fit with these parameters releases nothing about the documents (a
        public ``vocabulary`` without idf), so that a budget given to it is not spent."""
        return self.vocabulary is not None and not self.use_idf

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        return tags
