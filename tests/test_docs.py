"""The documentation, with its gallery of examples, builds offline without warnings."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_without_warnings(tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(ROOT / "doc"), str(tmp_path / "html")],
        capture_output=True, text=True, env=env, timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert (tmp_path / "html" / "index.html").exists()



def test_the_model_selection_pages_grid_sets_what_its_estimators_solver_reads():
    # The page's grid and the estimators it searches (with a ledger, privately): a
    # parameter the resolved solver does not read would make every candidate one fit.
    import re
    import warnings

    import numpy as np
    import scipy.sparse as sp

    from skdp_sparse import DPSparseLogisticRegression

    page = (ROOT / "doc" / "model_selection.rst").read_text()
    grid = eval(re.search(r"grid = (\{.*\})", page).group(1))
    calls = re.findall(r"DPSparseLogisticRegression\((?:[^()]|\([^()]*\))*\)", page)[:3]
    X = sp.random(300, 20, density=0.2, random_state=0, format="csr")
    y = (X.sum(axis=1).A1 > np.median(X.sum(axis=1).A1)).astype(int)
    for call in calls:
        est = eval(call, {"DPSparseLogisticRegression": DPSparseLogisticRegression,
                          "ledger": None})
        for params in ({k: v[0] for k, v in grid.items()},
                       {k: v[-1] for k, v in grid.items()}):
            with warnings.catch_warnings():
                warnings.simplefilter("error", UserWarning)
                est.set_params(classes=[0, 1], **params).fit(X, y)


def _python_blocks(text):
    """The code of each ``.. code-block:: python`` (reStructuredText) or ```` ```python ````
    fence (Markdown) of a page."""
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == ".. code-block:: python":
            indent = len(line) - len(line.lstrip()) + 1
            body = []
            for following in lines[i + 1:]:
                if following.strip() and len(following) - len(following.lstrip()) < indent:
                    break
                body.append(following)
            blocks.append("\n".join(body))
    return blocks


def _docstring_examples(text):
    """The doctest code (``>>>`` and ``...`` lines) of each docstring example of a module
    that fits something (directly or through a search or cross-validation)."""
    blocks = re.findall(r"((?:^ *(?:>>>|\.\.\.) .*\n)+)", text, flags=re.M)
    code = ["\n".join(line.strip()[4:] for line in block.splitlines()) for block in blocks]
    return [block for block in code if re.search(r"\.fit\(|cross_val", block)]


def test_every_documented_classifier_passes_its_public_label_set():
    # A classifier without ``classes`` reads its label set from the rows and warns
    # (PrivacyLeakWarning): an example copied as written must not.
    pages = sorted((ROOT / "doc").glob("*.rst")) + [ROOT / "README.md"]
    modules = sorted((ROOT / "skdp_sparse").rglob("*.py"))
    missing = []
    for page in pages + modules:
        text = page.read_text()
        blocks = _docstring_examples(text) if page.suffix == ".py" else _python_blocks(text)
        for block in blocks:
            search_has_classes = re.search(
                r"PrivateHyperparameterSearch\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*"
                r"classes=", block)
            for call in re.findall(
                    r"(?:DPSparseLogisticRegression|DPOutputPerturbationClassifier)"
                    r"\((?:[^()]|\([^()]*\))*\)", block):
                if "classes=" not in call and not search_has_classes:
                    missing.append(f"{page.name}: {call}")
    assert not missing, missing


_EXAMPLE_HARNESS = """
import runpy, sys, warnings
from skdp_sparse.exceptions import PrivacyLeakWarning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", PrivacyLeakWarning)
    runpy.run_path(sys.argv[1], run_name="__main__")
leaks = {str(w.message) for w in caught if issubclass(w.category, PrivacyLeakWarning)}
print(*sorted(leaks), sep="\\n", file=sys.stderr)
sys.exit(3 if leaks else 0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.py")))
def test_every_example_runs_without_a_privacy_leak_warning(example, tmp_path):
    # An example is copied as written: one that seeds clones of a private estimator
    # under a ledger, or two private steps from one seed, teaches a leak.
    data = os.environ.get("SKDP_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    env = dict(os.environ, MPLBACKEND="Agg", SKDP_DATA_DIR=data,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", _EXAMPLE_HARNESS, str(ROOT / "examples" / example)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )
    if proc.returncode != 0 and "FileNotFoundError" in proc.stderr and data in proc.stderr:
        pytest.skip(f"data set missing under {data}")
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_no_documented_search_refits_a_seeded_estimator():
    # Every clone of a seeded estimator draws the same noise; under a ledger each fold
    # after the first warns (PrivacyLeakWarning). The pages' searches and
    # cross-validations take an estimator with random_state=None.
    pages = sorted((ROOT / "doc").glob("*.rst")) + [ROOT / "README.md"]
    seeded = []
    for page in pages:
        code = "\n".join(_python_blocks(page.read_text()))
        names = re.findall(r"(\w+) = \w+\((?:[^()]|\([^()]*\))*random_state=\d",
                           code, flags=re.S)
        for name in names:
            if re.search(rf"(?:GridSearchCV|RandomizedSearchCV|cross_val\w*)\(\s*{name}\b",
                         code):
                seeded.append(f"{page.name}: {name}")
    assert not seeded, seeded


def test_the_architecture_page_names_every_module_of_the_core_packages():
    # A module added without its line on the page leaves the map of the code wrong.
    page = (ROOT / "doc" / "architecture.rst").read_text()
    missing = [str(path.relative_to(ROOT)) for package in ("solvers", "privacy", "utils")
               for path in sorted((ROOT / "skdp_sparse" / package).glob("*.py"))
               if path.stem != "__init__" and path.stem.lstrip("_") not in page]
    assert not missing, missing


def test_every_full_path_reference_of_the_pages_exists():
    # The build is not nitpicky (numpydoc's types would all warn), so a reference by
    # full path to a moved or renamed object renders as plain text without a warning.
    import importlib

    pages = sorted((ROOT / "doc").glob("*.rst")) + sorted((ROOT / "doc" / "proofs").glob("*.rst"))
    broken = []
    for page in pages:
        for ref in re.findall(r":(?:func|class|mod|meth|attr|data):`~?(skdp_sparse\.[\w.]+)`",
                              page.read_text()):
            parts = ref.split(".")
            for i in range(len(parts), 0, -1):
                try:
                    obj = importlib.import_module(".".join(parts[:i]))
                    break
                except ImportError:
                    continue
            try:
                for name in parts[i:]:
                    obj = getattr(obj, name)
            except AttributeError:
                broken.append(f"{page.name}: {ref}")
    assert not broken, broken
