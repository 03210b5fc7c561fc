"""The mutation check (:mod:`skdp_sparse.testing.mutations`) stays in step with the code.

Each mutation halves one noise scale by replacing a line of the package; when that line
moves or is rewritten, the check of the audits by mutation stops working for it. Here
every mutation is applied to a copy of its file (no fit is run): its line must occur
exactly once and the change must be a different, still compilable module.
"""

from pathlib import Path

import pytest

import skdp_sparse
from skdp_sparse.testing.mutations import CALIBRATION_TESTS, MUTATIONS, apply_mutation

PACKAGE = Path(skdp_sparse.__file__).resolve().parent
ROOT = PACKAGE.parent


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_changes_one_line_of_its_module(mutation, tmp_path):
    copy = tmp_path / mutation.path
    copy.parent.mkdir(parents=True)
    original = (PACKAGE / mutation.path).read_text()
    copy.write_text(original)
    apply_mutation(mutation, tmp_path)
    changed = copy.read_text()
    assert changed != original
    compile(changed, str(copy), "exec")


def test_mutation_names_are_unique():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))


def test_calibration_tests_exist():
    missing = [path for path in CALIBRATION_TESTS if not (ROOT / path).is_file()]
    assert not missing
