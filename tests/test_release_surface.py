"""Everything that leaves a fit is noisy or public.

A fit's outputs are its fitted state (every attribute a pickle carries, private ones
included), the warnings it raises and its parameters after the fit. An output that
is the same under every seed is not noisy, so it may depend on public values only;
if it changes when one row of the training data is replaced, it is a deterministic
function of private data: a leak, whatever the noise elsewhere. Each case fits a
dataset under four seeds and a neighbour (the first row replaced by an outlying one,
its label changed) under the first seed, and fails on every output of the first kind
that moves between the two. The first tests show that the comparison sees such
outputs: a label set read from the data, and a fitted attribute holding a raw
statistic.
"""

import numbers
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.pipeline import make_pipeline

from skdp_sparse import (
    DPGreedyCDRegressor,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
    DPSparseLogisticRegression,
    DPSparseMeanEstimator,
)
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
from skdp_sparse.feature_selection import DPSelectKBest
from skdp_sparse.model_selection import PrivateHyperparameterSearch
from skdp_sparse.pipeline import split_budget
from skdp_sparse.preprocessing import BoundedScaler, DPStandardScaler
from skdp_sparse.solvers import SOLVERS

SEEDS = (0, 1, 2, 3)


def _same(a, b):
    """Exact equality of fitted state, recursively (arrays bit for bit, NaN equal)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if sp.issparse(a):
        return a.shape == b.shape and (a != b).nnz == 0
    if isinstance(a, np.ndarray):
        return (a.shape == b.shape and a.dtype == b.dtype
                and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, str | bytes | numbers.Number | np.generic) or a is None:
        return a == b
    if hasattr(a, "__dict__"):
        return _same(vars(a), vars(b))
    return repr(a) == repr(b)


def _outputs(estimator, X, y, seed):
    """What one fit lets out: its state beyond the parameters, its warnings and its
    parameters after the fit (seeds aside)."""
    estimator = clone(estimator)
    estimator.set_params(**{k: seed for k in estimator.get_params()
                            if k.endswith("random_state")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X) if y is None else estimator.fit(X, y)
    params = estimator.get_params(deep=False)
    out = {k: v for k, v in vars(estimator).items() if k not in params}
    out["<warnings>"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    out["<parameters>"] = {k: v for k, v in estimator.get_params().items()
                           if not k.endswith("random_state")}
    return out


def deterministic_outputs_that_move(estimator, data, neighbour):
    """The outputs equal under every seed of :data:`SEEDS` on ``data`` that differ on
    ``neighbour`` (same first seed), or exist on one side only."""
    runs = [_outputs(estimator, *data, seed) for seed in SEEDS]
    other = _outputs(estimator, *neighbour, SEEDS[0])
    moved = [k for k in runs[0]
             if all(k in run and _same(runs[0][k], run[k]) for run in runs[1:])
             and (k not in other or not _same(runs[0][k], other[k]))]
    return moved + [k for k in other if k not in runs[0]]


def _data(n=120, p=8, huge=False):
    """The data sets and their neighbours. The neighbour's first row has two entries far
    beyond every default bound; with ``huge`` they are near the largest doubles, where
    a row's norms overflow, and so is its target (and every X is dense)."""
    rng = np.random.default_rng(0)
    X = sp.random(n, p, density=0.4, format="csr", random_state=0)
    X.data = rng.uniform(-1, 1, X.nnz)
    Xn = X.tolil()
    Xn[0, :] = 0
    Xn[0, 0], Xn[0, 3] = (1e300, -1e300) if huge else (5.0, -7.0)
    Xn = Xn.tocsr()
    y = (X @ rng.normal(size=p) > 0).astype(int)
    y3 = rng.integers(0, 3, n)
    target = X @ rng.normal(size=p) + 0.1 * rng.normal(size=n)
    yn, y3n, targetn = y.copy(), y3.copy(), target.copy()
    yn[0], y3n[0], targetn[0] = 1 - y[0], (y3[0] + 1) % 3, 1e300 if huge else 40.0
    dense, densen = X.toarray(), Xn.toarray()
    if huge:
        # Dense rows: their norms are computed in numpy, which warns on overflow.
        X, Xn = dense, densen
    return {"binary": ((X, y), (Xn, yn)), "three": ((X, y3), (Xn, y3n)),
            "target": ((X, target), (Xn, targetn)), "rows": ((X, None), (Xn, None)),
            "dense": ((dense, None), (densen, None))}


def _documents(n=300):
    rng = np.random.default_rng(1)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"]
    docs = [" ".join(rng.choice(words, size=6)) for _ in range(n)]
    return ((docs, None), (["a private message of unique words"] + docs[1:], None))


DATA = _data()
DATA["documents"] = _documents()
#: The same data sets with neighbours whose row norms overflow (not for documents).
HUGE = _data(huge=True)

# Every registered solver, with the loss it is limited to.
CLASSIFIER_SOLVERS = ["auto", *(s for s in SOLVERS if s != "sufficient_statistics")]
REGRESSOR_SOLVERS = ["auto", *(s for s in SOLVERS if s != "screened_newton")]
_L2 = {"output_perturbation", "sufficient_statistics"}


def _cases():
    for solver in CLASSIFIER_SOLVERS:
        kw = {"penalty": "l2"} if solver in _L2 else {}
        yield f"logistic-{solver}", DPSparseLogisticRegression(
            solver=solver, classes=[0, 1], **kw), "binary"
        yield f"logistic-{solver}-3-classes", DPSparseLogisticRegression(
            solver=solver, classes=[0, 1, 2], **kw), "three"
    yield "logistic-sgd-minibatch", DPSparseLogisticRegression(
        solver="sgd", batch_size=20, classes=[0, 1]), "binary"
    for solver in REGRESSOR_SOLVERS:
        kw = {"penalty": "l2"} if solver in _L2 else {}
        yield f"regressor-{solver}", DPGreedyCDRegressor(
            solver=solver, target_bounds=(-3, 3), **kw), "target"
    yield "regressor-target-bound", DPGreedyCDRegressor(target_bound=3), "target"
    yield "output-perturbation-laplace", DPOutputPerturbationClassifier(classes=[0, 1]), "binary"
    yield "output-perturbation-gaussian", DPOutputPerturbationClassifier(
        classes=[0, 1], delta=1e-5), "binary"
    yield "output-perturbation-regressor", DPOutputPerturbationRegressor(
        target_bounds=(-3, 3)), "target"
    yield "output-perturbation-huber", DPOutputPerturbationRegressor(
        loss="huber", delta=1e-5), "target"
    for method in ["auto", "laplace"]:
        yield f"mean-{method}", DPSparseMeanEstimator(method=method), "rows"
    for method in ["projection", "l1_recovery", "gaussian"]:
        yield f"mean-{method}", DPSparseMeanEstimator(method=method, delta=1e-5,
                                                      sparsity=3), "rows"
    yield "standard-scaler-sparse", DPStandardScaler(bounds=(-1, 1), with_mean=False), "rows"
    yield "standard-scaler-dense", DPStandardScaler(bounds=(-1, 1)), "dense"
    yield "bounded-scaler", BoundedScaler(bounds=(-1, 1)), "rows"
    yield "select-k-best-frequency", DPSelectKBest(k=3, sparsity=4), "rows"
    yield "select-k-best-association", DPSelectKBest(k=3, score_func="association",
                                                     classes=[0, 1]), "binary"
    yield "tfidf", DPTfidfVectorizer(epsilon=5.0), "documents"
    yield "tfidf-bigrams", DPTfidfVectorizer(epsilon=5.0, ngram_range=(1, 2),
                                             sublinear_tf=True), "documents"
    # A public vocabulary with a term of the neighbour's changed document ("private").
    public = ["beta", "alpha", "private", "omega"]
    yield "tfidf-public-vocabulary", DPTfidfVectorizer(epsilon=5.0, vocabulary=public), \
        "documents"
    yield "tfidf-public-vocabulary-no-idf", DPTfidfVectorizer(vocabulary=public,
                                                              use_idf=False), "documents"
    yield "pipeline", split_budget(make_pipeline(
        DPStandardScaler(bounds=(-1, 1), with_mean=False),
        DPSparseLogisticRegression(classes=[0, 1])), 2.0, 1e-5), "binary"
    yield "search", PrivateHyperparameterSearch(
        DPSparseLogisticRegression(classes=[0, 1]), {"solver": ["sgd", "greedy_cd"]},
        epsilon=2.0, classes=[0, 1]), "binary"


CASES = list(_cases())


@pytest.mark.parametrize("name, estimator, data", CASES, ids=[c[0] for c in CASES])
def test_no_deterministic_output_depends_on_the_private_rows(name, estimator, data):
    assert deterministic_outputs_that_move(estimator, *DATA[data]) == []


@pytest.mark.parametrize("name, estimator, data",
                         [c for c in CASES if c[2] in HUGE],
                         ids=[c[0] for c in CASES if c[2] in HUGE])
def test_no_deterministic_output_depends_on_a_row_whose_norms_overflow(name, estimator,
                                                                       data):
    # Floating-point warnings (overflow in a norm, say) are outputs too.
    data, neighbour = HUGE[data]
    assert deterministic_outputs_that_move(estimator, data, neighbour) == []


def test_the_comparison_sees_a_label_set_read_from_the_data():
    (X, y), _ = DATA["binary"]
    y_other = y.copy()
    y_other[0] = 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        moved = deterministic_outputs_that_move(DPSparseLogisticRegression(), (X, y),
                                                (X, y_other))
    assert "classes_" in moved


class _LeakyMean(DPSparseMeanEstimator):
    """A private mean that also keeps the largest raw entry: a leak."""

    def fit(self, X, y=None):
        super().fit(X)
        self.largest_entry_ = float(abs(X).max())
        return self


def test_the_comparison_sees_a_raw_statistic_among_noisy_attributes():
    data, neighbour = DATA["rows"]
    assert deterministic_outputs_that_move(_LeakyMean(), data, neighbour) == \
        ["largest_entry_"]
