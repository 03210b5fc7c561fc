"""Shared helpers of the benchmarks: dataset loading and the diffprivlib baseline.

Datasets come from ``<repository>/../shared/data`` (override with ``SKDP_DATA_DIR``),
in svmlight format; labels are mapped to {0, 1}. Parsed datasets are cached with
joblib under ``~/.cache/skdp_sparse/datasets`` (override with ``SKDP_CACHE_DIR``) because
parsing the bz2 text files dominates a short benchmark.

diffprivlib does not import with the scikit-learn this project uses, so it runs in
its own venv (built by ``benchmarks/diffprivlib_env.sh``) through
``benchmarks/_diffprivlib_runner.py``; :func:`run_diffprivlib` drives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

__all__ = [
    "DATASETS",
    "Dataset",
    "data_dir",
    "load_dataset",
    "normalize_rows",
    "diffprivlib_python",
    "run_diffprivlib",
    "markdown_table",
]

HERE = Path(__file__).resolve().parent

DATASETS = ("a9a", "reuters", "w8a")

#: Public row-norm bounds that follow from each dataset's documented
#: construction, never from its values. a9a one-hot encodes the 14 attributes of
#: Adult, one 1 per attribute, so ||x|| <= sqrt(14). reuters rows are tf-idf
#: vectors scaled to unit norm, so 1. w8a's 300 binary keyword features give only
#: sqrt(300), a bound too loose to help, so the estimators' default stays.
PUBLIC_NORM_BOUNDS = {"a9a": 14 ** 0.5, "reuters": 1.0}


class Dataset(NamedTuple):
    name: str
    X_train: sp.csr_matrix
    y_train: np.ndarray
    X_test: sp.csr_matrix
    y_test: np.ndarray


def data_dir() -> Path:
    env = os.environ.get("SKDP_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _cache_dir() -> Path:
    env = os.environ.get("SKDP_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "skdp_sparse" / "datasets"


def _to01(y):
    y = np.asarray(y)
    classes = np.unique(y)
    if classes.size != 2:
        raise ValueError(f"expected binary labels, got {classes}")
    return (y == classes[1]).astype(np.int64)


def _load_uncached(name: str, root: str):
    from sklearn.datasets import load_svmlight_file
    from sklearn.model_selection import train_test_split

    root = Path(root)
    if name == "a9a":
        Xtr, ytr = load_svmlight_file(str(root / "a9a.bz2"), n_features=123)
        Xte, yte = load_svmlight_file(str(root / "a9a.t.bz2"), n_features=123)
    elif name == "reuters":
        Xtr, ytr = load_svmlight_file(str(root / "reuters_lasvm.trn.bz2"), n_features=8315)
        Xte, yte = load_svmlight_file(str(root / "reuters_lasvm.tst.bz2"), n_features=8315)
    elif name == "w8a":
        X, y = load_svmlight_file(str(root / "w8a.bz2"), n_features=300)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    else:
        raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")
    return (sp.csr_matrix(Xtr), _to01(ytr), sp.csr_matrix(Xte), _to01(yte))


def load_dataset(name: str, *, cache: bool = True) -> Dataset:
    """Train/test split of a benchmark dataset, CSR features, labels in {0, 1}.

    ``a9a`` and ``reuters`` (8,315 features) use their official test files; ``w8a``
    holds out a stratified 25% (``random_state=0``).
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")
    root = data_dir()
    if cache:
        try:
            from joblib import Memory

            loader = Memory(str(_cache_dir()), verbose=0).cache(_load_uncached)
        except (ImportError, OSError):
            loader = _load_uncached
    else:
        loader = _load_uncached
    Xtr, ytr, Xte, yte = loader(name, str(root))
    return Dataset(name, _int32_indices(Xtr), ytr, _int32_indices(Xte), yte)


def _int32_indices(X):
    # Some scikit-learn solvers (saga, liblinear) accept 32-bit sparse indices only.
    X = sp.csr_matrix(X)
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    return X


def normalize_rows(X):
    """Rows scaled to unit l2 norm (zero rows stay zero).

    A row-wise map that reads no other row, so applying it before a private fit
    costs no privacy; it makes ``norm_bound=1`` lose no information to clipping.
    """
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64, copy=True)
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        X.data *= np.repeat(scale, np.diff(X.indptr))
        return X
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)


# ---------------------------------------------------------------------------
# diffprivlib in its own venv
# ---------------------------------------------------------------------------
def diffprivlib_python() -> Path:
    venv = os.environ.get("SKDP_DIFFPRIVLIB_VENV")
    venv = Path(venv) if venv else Path.home() / ".cache" / "skdp_sparse" / "diffprivlib-venv"
    return venv / "bin" / "python"


def run_diffprivlib(dataset, epsilon, *, data_norm=1.0, normalize=True, seeds=(0,),
                    timeout=3600, **kw):
    """Fit ``diffprivlib.models.LogisticRegression`` in its venv; metrics as a dict.

    Parameters
    ----------
    dataset : str or Dataset
        A name for :func:`load_dataset`, or already loaded data.
    epsilon : float
    data_norm : float
        diffprivlib's public row-norm bound (rows are clipped to it).
    normalize : bool
        Scale rows to unit l2 norm first (as the other methods of a benchmark).
    seeds : sequence of int
        One fit per seed; the result holds lists and their means.
    **kw
        Further ``LogisticRegression`` parameters (``C``, ``max_iter``, ``fit_intercept``...).

    Returns
    -------
    dict with ``accuracy``, ``roc_auc``, ``fit_time`` (means over seeds), the
    per-seed lists and the library versions; None (with a note on stdout) if the venv
    is missing.
    """
    python = diffprivlib_python()
    if not python.exists():
        print(
            f"note: diffprivlib venv not found at {python.parent.parent}; "
            "build it with `bash benchmarks/diffprivlib_env.sh` (skipping diffprivlib)"
        )
        return None
    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    Xtr, Xte = ds.X_train, ds.X_test
    if normalize:
        Xtr, Xte = normalize_rows(Xtr), normalize_rows(Xte)
    with tempfile.TemporaryDirectory(prefix="skdp_dpl_") as tmp:
        path = Path(tmp) / "data.npz"
        # CSR parts, not a dense matrix: the runner densifies in its own process.
        np.savez(
            path,
            tr_data=Xtr.data, tr_indices=Xtr.indices, tr_indptr=Xtr.indptr,
            te_data=Xte.data, te_indices=Xte.indices, te_indptr=Xte.indptr,
            shape_tr=np.array(Xtr.shape), shape_te=np.array(Xte.shape),
            y_train=ds.y_train, y_test=ds.y_test,
        )
        args = {"epsilon": float(epsilon), "data_norm": float(data_norm),
                "seeds": [int(s) for s in seeds], "params": kw}
        cmd = [str(python), str(HERE / "_diffprivlib_runner.py"), str(path), json.dumps(args)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        print(f"note: diffprivlib runner failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def markdown_table(rows, columns, floatfmt=".3f"):
    """A markdown table of ``rows`` (dicts) with the given column keys."""
    def fmt(v):
        if v is None:
            return "n/a"
        if isinstance(v, float):
            return format(v, floatfmt)
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
