"""The documentation, with its gallery of examples, builds offline without warnings."""

import os
import subprocess
import sys
from pathlib import Path

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
