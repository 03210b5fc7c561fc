"""The public estimators' docstrings state their parameters (each with its real default
and every value its constraints accept) and the attributes their fits set."""

import ast
import importlib
import inspect
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from numpydoc.docscrape import NumpyDocString

from skdp_sparse import (
    BoundedScaler,
    DPGreedyCDRegressor,
    DPOutputPerturbationClassifier,
    DPOutputPerturbationRegressor,
    DPSparseLogisticRegression,
    DPSparseMeanEstimator,
    DPStandardScaler,
    PrivacyLedger,
    PrivateHyperparameterSearch,
)
from skdp_sparse.feature_extraction.text import DPTfidfVectorizer
from skdp_sparse.feature_selection import DPSelectKBest
from skdp_sparse.privacy import calibrate_scale
from skdp_sparse.privacy.ledger import DaskLedgerStore, privacy_ledger
from skdp_sparse.utils.validation import Options

CLASSES = [DPSparseLogisticRegression, DPGreedyCDRegressor, DPOutputPerturbationClassifier,
           DPOutputPerturbationRegressor, DPSparseMeanEstimator, PrivateHyperparameterSearch,
           BoundedScaler, DPStandardScaler, DPTfidfVectorizer, DPSelectKBest, PrivacyLedger]
#: Public functions and classes besides the estimators whose docstrings have a
#: Parameters section.
DOCUMENTED = CLASSES + [privacy_ledger, DaskLedgerStore, calibrate_scale]

_AS_IN = re.compile(r"As in :class:`~?([\w.]+)`")


def _section(cls, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the Privacy section
        doc = NumpyDocString(inspect.getdoc(cls))
    # Names listed over several lines share the description under the last line;
    # numpydoc reads each earlier line as an entry of its own, without one.
    entries, pending = {}, []
    for p in doc[name]:
        pending += [n.strip() for n in p.name.split(",") if n.strip()]
        if p.type or p.desc:
            entries.update(dict.fromkeys(pending, (p.type, " ".join(p.desc))))
            pending = []
    entries.update(dict.fromkeys(pending, ("", "")))
    return entries


def _resolve(dotted):
    module, _, name = dotted.rpartition(".")
    if not module:
        return getattr(importlib.import_module("skdp_sparse"), name)
    return getattr(importlib.import_module(module), name)


def _documented_parameters(cls):
    """Each parameter's (type, description, class whose default it states)."""
    params = {}
    for name, (typ, desc) in _section(cls, "Parameters").items():
        target = _AS_IN.search(desc)
        if target and "default=" not in typ:
            other = _resolve(target.group(1))
            if other.__module__.startswith("skdp_sparse"):
                typ, desc = _section(other, "Parameters").get(name, (typ, desc))
            params[name] = (typ, desc, other)
        else:
            params[name] = (typ, desc, cls)
    return params


def _default(typ):
    match = re.search(r"default=(.*)$", typ)
    if match is None:
        return inspect.Parameter.empty
    text = match.group(1).strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {"np.float64": np.float64, "np.inf": np.inf}.get(text, text)


@pytest.mark.parametrize("cls", DOCUMENTED, ids=lambda c: c.__name__)
def test_parameters_section_states_every_parameter_and_its_default(cls):
    documented = _documented_parameters(cls)
    wrong = []
    signature = inspect.signature(cls.__init__ if inspect.isclass(cls) else cls)
    for name, parameter in signature.parameters.items():
        if name == "self":
            continue
        if name not in documented:
            wrong.append(f"{name}: not documented")
            continue
        typ, _, owner = documented[name]
        if owner is cls or owner.__module__.startswith("skdp_sparse"):
            stated = _default(typ)
            optional = stated is inspect.Parameter.empty and "optional" in typ
            if optional and parameter.default is None:
                continue
        else:  # "As in" a scikit-learn class: its default
            stated = inspect.signature(owner.__init__).parameters[name].default
        if stated != parameter.default and not (
                isinstance(stated, str) and stated == repr(parameter.default)):
            wrong.append(f"{name}: documented default {stated!r}, real {parameter.default!r}")
    assert not wrong, wrong


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_option_a_constraint_accepts_is_documented(cls):
    documented = _documented_parameters(cls)
    missing = []
    for name, constraints in getattr(cls, "_parameter_constraints", {}).items():
        typ, desc, owner = documented[name]
        if not owner.__module__.startswith("skdp_sparse"):
            continue
        for constraint in constraints:
            if not isinstance(constraint, Options):
                continue
            for value in constraint.values:
                shown = (f'"{value}"', f"``{value!r}``", f"``{value}``") \
                    if isinstance(value, str) else (repr(value),)
                if not any(s in typ or s in desc for s in shown):
                    missing.append(f"{name}={value!r}")
    assert not missing, missing


def _rows(n=300, p=8, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, p, density=0.5, random_state=seed, format="csr")
    X.data = np.minimum(X.data, 1.0)
    X = sp.csr_matrix(X.multiply(1.0 / np.sqrt(p)))
    score = X @ rng.standard_normal(p)
    return X, (score > np.median(score)).astype(int), np.clip(score, -1, 1)


_L2 = {"output_perturbation", "sufficient_statistics"}
_ONE_STEP = _L2 | {"screened_newton", "auto"}  # no max_iter to shorten ("auto": screened_newton)
_LOGISTIC = ["auto", "greedy_cd", "cd", "sgd", "bias_reduced_sgd", "sparse_sgd", "phased_sgd",
             "output_perturbation", "screened_newton", "bounded_newton"]
_SQUARED = [s for s in _LOGISTIC if s != "screened_newton"] + ["sufficient_statistics"]


def _settings(solver, **params):
    return dict(solver=solver, **params, **({"penalty": "l2"} if solver in _L2 else {}),
                **({} if solver in _ONE_STEP else {"max_iter": 3}))


FITS = (
    [(DPSparseLogisticRegression, _settings(s, classes=[0, 1]), "binary") for s in _LOGISTIC]
    + [(DPSparseLogisticRegression, dict(classes=[0, 1, 2], multi_class=m), "three")
       for m in ("multinomial", "ovr")]
    + [(DPSparseLogisticRegression, dict(solver="screened_newton", classes=[0, 1],
                                         feature_selection="sure"), "binary")]
    + [(DPGreedyCDRegressor, _settings(s, target_bounds=(-1, 1)), "target") for s in _SQUARED]
    + [(DPGreedyCDRegressor, dict(solver="sgd", feature_selection=3, max_iter=3), "target"),
       (DPOutputPerturbationClassifier, dict(classes=[0, 1]), "binary"),
       (DPOutputPerturbationRegressor, dict(delta=1e-6), "target"),
       (DPSelectKBest, dict(k=2, sparsity=8), "binary"),
       (DPSelectKBest, dict(k=2, score_func="association", classes=[0, 1]), "binary"),
       (DPStandardScaler, dict(bounds=(0, 1)), "dense"),
       (BoundedScaler, dict(bounds=(0, 1)), "dense"),
       (PrivateHyperparameterSearch, dict(
           estimator=DPSparseLogisticRegression(max_iter=3),
           param_grid={"alpha": [1e-3, 1e-2]}, classes=[0, 1]), "binary")]
    + [(DPSparseMeanEstimator, dict(method=m, sparsity=8, delta=1e-6), None)
       for m in ("projection", "gaussian", "laplace", "l1_recovery")]
)


@pytest.mark.parametrize("cls, params, target", FITS,
                         ids=lambda v: v.__name__ if inspect.isclass(v) else None)
def test_attributes_section_states_every_fitted_attribute(cls, params, target):
    X, y, t = _rows()
    labels = {"binary": y, "three": np.arange(X.shape[0]) % 3, "target": t}
    est = cls(**params)
    data = (X.toarray(),) if target == "dense" else (X,)
    est.fit(*data, *([labels[target]] if target in labels else []))
    fitted = {name for name in vars(est) if name.endswith("_") and not name.startswith("_")}
    assert fitted - set(_section(cls, "Attributes")) == set()
