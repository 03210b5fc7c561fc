"""Sphinx configuration of the skdp_sparse documentation.

Build (offline, warnings are errors)::

    python -m sphinx -W -b html doc doc/_build/html

``doc/build.sh`` installs ``doc/requirements.txt`` first. Everything the build
writes besides ``doc/_build`` (``doc/generated/``, ``doc/auto_examples/``,
``doc/sg_execution_times.rst``) is generated and not kept in the repository.
"""

import importlib
import inspect
import os
import pkgutil
import re
import sys
import warnings
from pathlib import Path

from sphinx.util import logging

DOC_DIR = Path(__file__).resolve().parent
ROOT = DOC_DIR.parent
# Document the checkout's code, whatever version of the package is installed.
sys.path.insert(0, str(ROOT))
# Makes this file importable as ``conf``, which is how sphinx-gallery resolves
# the example order below by name (a name, unlike a function, can be pickled
# with the environment).
sys.path.insert(0, str(DOC_DIR))

import skdp_sparse  # noqa: E402

logger = logging.getLogger(__name__)

# numpydoc parses each raw docstring once more for the signature and reports the
# ``Privacy`` section it does not know; ``privacy_sections_as_rubrics`` below
# keeps that section in the rendered page.
warnings.filterwarnings("ignore", message="Unknown section Privacy", category=UserWarning)

# -- Project ---------------------------------------------------------------
project = "skdp_sparse"
author = "skdp_sparse developers"
copyright = "skdp_sparse developers, BSD-3-Clause"
release = skdp_sparse.__version__
version = re.sub(r"(\d+\.\d+).*", r"\1", release)

# -- General ---------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/*.ipynb", "**/*.py.md5",
                    "**/*.codeobj.json"]
root_doc = "index"
default_role = "literal"
# Unresolvable cross-references (scikit-learn, numpy, ...) stay plain text:
# the build has no network, so there is no intersphinx inventory to resolve them.
nitpicky = False
pygments_style = "sphinx"

# -- autodoc / autosummary / numpydoc --------------------------------------
autosummary_generate = True
autosummary_imported_members = False
# Methods inherited from scikit-learn (get_params, score, ...) are scikit-learn's
# and documented there; their docstrings cite labels of scikit-learn's own docs.
autodoc_default_options = {"members": True}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True

# -- HTML ------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skdp_sparse {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_prev_next": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"**": ["sidebar-nav-bs"], "index": [], "benchmarks": [], "user_guide": [],
                 "security": [], "model_selection": []}
html_show_sourcelink = False
html_static_path = []

# -- Gallery ---------------------------------------------------------------
# Order of the examples in the gallery; examples not listed follow by file name.
# A model-selection example, under either name, comes after the privacy-utility
# curves.
EXAMPLE_ORDER = (
    "plot_text_pipeline.py",
    "plot_text_classification.py",
    "plot_privacy_utility.py",
    "plot_model_selection.py",
    "plot_private_search.py",
    "plot_greedy_regression.py",
    "plot_mean_estimation.py",
    "plot_fit_time.py",
)


class ExampleOrder:
    """Sort key of sphinx-gallery: the narrative order of ``EXAMPLE_ORDER``."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        name = os.path.basename(filename)
        rank = EXAMPLE_ORDER.index(name) if name in EXAMPLE_ORDER else len(EXAMPLE_ORDER)
        return (rank, name)

    def __repr__(self):
        return f"<{type(self).__name__}>"


sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    # Only plot_*.py are gallery examples (and executed); other scripts in
    # examples/ (the quickstart) are plain scripts, included in the user guide.
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"(^|/)(?!plot_)[^/]*\.py$",
    "within_subsection_order": "conf.ExampleOrder",
    "doc_module": ("skdp_sparse",),
    "backreferences_dir": "generated/backreferences",
    "reference_url": {"skdp_sparse": None},
    "download_all_examples": False,
    "remove_config_comments": True,
    "min_reported_time": 0,
    "show_memory": False,
    "capture_repr": (),
    "matplotlib_animations": False,
    "plot_gallery": "True",
    # A failing example fails the build.
    "only_warn_on_example_error": False,
    "abort_on_example_error": True,
}


# -- Checks and docstring fixes ----------------------------------------------
_API_ENTRY = re.compile(r"^\s{3,}([A-Za-z_][\w.]*)\s*$")


def _public_modules():
    """Every importable public module of the package (no ``_``-prefixed part)."""
    yield skdp_sparse
    for info in pkgutil.walk_packages(skdp_sparse.__path__, "skdp_sparse."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        yield importlib.import_module(info.name)


def _public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, obj in vars(module).items()
                 if not n.startswith("_") and getattr(obj, "__module__", None) == module.__name__
                 and (inspect.isclass(obj) or inspect.isfunction(obj))]
    return [n for n in names if not n.startswith("__")]


def _documented_objects():
    """Objects listed in the autosummary tables of api.rst, by identity."""
    text = (DOC_DIR / "api.rst").read_text(encoding="utf-8")
    current, objects = None, {}
    in_table = False
    for line in text.splitlines():
        if line.startswith(".. currentmodule::"):
            current = line.split("::", 1)[1].strip()
        elif line.startswith(".. autosummary::"):
            in_table = True
        elif in_table and line.strip() and not line.startswith(" "):
            in_table = False
        elif in_table and not line.strip().startswith(":"):
            m = _API_ENTRY.match(line)
            if m:
                full = m.group(1) if m.group(1).startswith("skdp_sparse.") \
                    else f"{current}.{m.group(1)}"
                mod, _, attr = full.rpartition(".")
                try:
                    objects[id(getattr(importlib.import_module(mod), attr))] = full
                except (ImportError, AttributeError):
                    logger.warning("api.rst lists %s, which does not exist", full)
    return objects


def check_api_complete(app):
    """Warn (an error under -W) about public names missing from api.rst.

    A class or function is public if it is in ``__all__`` of a public module
    (or, without ``__all__``, defined there under a name without ``_``). It counts as documented if
    the same object appears in an autosummary table under any of its names.
    """
    documented = _documented_objects()
    missing = []
    for module in _public_modules():
        for name in _public_names(module):
            obj = getattr(module, name, None)
            # Constants are described where they are used; only those with a
            # doc comment (``#:``) get an entry of their own.
            if not callable(obj):
                continue
            if id(obj) not in documented:
                missing.append(f"{module.__name__}.{name}")
    for full in sorted(set(missing)):
        logger.warning("public name %s is not listed in doc/api.rst", full)


# Corrections of docstrings that do not render, applied before numpydoc, by the
# object's full name: (text, replacement) on each line. Each entry is a no-op
# once the source is fixed, and can then be deleted.
_DOCSTRING_FIXES = {
    # ``privacy_events_`` outside a numpydoc section reads as a link target.
    "skdp_sparse.base.DPEstimatorMixin": [("privacy_events_ :", "``privacy_events_`` :")],
    # autosummary cuts the summary at the first ". ", inside the literal.
    "skdp_sparse.optim.erm.solve_l2_erm": [("x_i . w", "<x_i, w>")],
}


def fix_docstrings(app, what, name, obj, options, lines):
    for old, new in _DOCSTRING_FIXES.get(name, ()):
        lines[:] = [line.replace(old, new) for line in lines]


_SECTION = re.compile(r"^(\s*)(Privacy)\s*$")


def privacy_sections_as_rubrics(app, what, name, obj, options, lines):
    """Keep the ``Privacy`` section of a docstring.

    numpydoc knows a fixed set of section names and drops any other one with
    its content. A ``Privacy`` header placed before ``Parameters`` becomes a
    rubric inside the extended summary, so its text is rendered where it is.
    Runs before numpydoc (lower priority number).
    """
    i = 0
    while i < len(lines) - 1:
        m = _SECTION.match(lines[i])
        underline = lines[i + 1].strip()
        if m and underline and set(underline) == {"-"}:
            lines[i:i + 2] = [f"{m.group(1)}.. rubric:: {m.group(2)}", ""]
        i += 1


_ROUTING_METHOD = re.compile(r"set_\w+_request|get_metadata_routing")


def skip_metadata_routing(app, what, name, obj, skip, options):
    """scikit-learn adds ``set_*_request`` methods to every estimator class;
    they belong to its metadata routing API and are documented there."""
    if _ROUTING_METHOD.fullmatch(name):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", skip_metadata_routing)
    app.connect("builder-inited", check_api_complete)
    app.connect("autodoc-process-docstring", fix_docstrings, priority=390)
    app.connect("autodoc-process-docstring", privacy_sections_as_rubrics, priority=400)
