"""The package's layout rules, checked on its source.

* every draw of noise lives in :mod:`skdp_sparse.privacy` (kernels elsewhere call the
  samplers defined there);
* no source file of the package is over 600 lines;
* no module imports a private name (other than a module) from outside its own package.
"""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "skdp_sparse"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)

#: Draws of random numbers outside privacy/ that are not noise, with the reason.
NOT_NOISE = {
    # l1_recovery's measurement matrix: a public random projection, drawn from a seed
    # of its own before any data is read.
    ("optim/l1_recovery.py", "standard_normal"),
}
NOISE_DRAW = re.compile(r"\.(standard_normal|normal|laplace|gumbel|standard_exponential"
                        r"|exponential)\(")


def _relative(path):
    return path.relative_to(PACKAGE).as_posix()


def test_sources_found():
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=_relative)
def test_noise_is_drawn_in_privacy_only(path):
    rel = _relative(path)
    if rel.startswith(("privacy/", "testing/")):
        return
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("#", 1)[0]
        for match in NOISE_DRAW.finditer(code):
            if code[: match.start()].endswith("PrivacyEvent"):
                continue  # an accounting event, not a draw
            assert (rel, match.group(1)) in NOT_NOISE, (
                f"{rel}:{lineno} draws noise outside skdp_sparse.privacy: {line.strip()}")


@pytest.mark.parametrize("path", SOURCES, ids=_relative)
def test_source_files_are_short(path):
    assert len(path.read_text().splitlines()) <= 600, _relative(path)


@pytest.mark.parametrize("path", SOURCES, ids=_relative)
def test_no_private_names_from_other_packages(path):
    rel_parts = path.relative_to(PACKAGE).parts[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        # The package the import reaches: up (level - 1) folders, then the module path.
        base = list(rel_parts[: len(rel_parts) - (node.level - 1)])
        target = base + (node.module.split(".") if node.module else [])
        same_package = target[: len(rel_parts)] == list(rel_parts) and node.level == 1
        folder = PACKAGE.joinpath(*target)
        # A private module of the library may be imported; a private name may not.
        private = [a.name for a in node.names if a.name.startswith("_")
                   and not (folder / f"{a.name}.py").exists()
                   and not (folder / a.name).is_dir()]
        assert same_package or not private, (
            f"{_relative(path)} imports private {private} from {'.' * node.level}"
            f"{node.module or ''}")
