#!/usr/bin/env bash
# Build the virtual environment in which benchmarks run diffprivlib.
#
# diffprivlib 0.6.x imports private scikit-learn helpers that newer releases
# removed, so it cannot share the project's interpreter environment; it runs in
# its own venv with a scikit-learn it supports, driven through
# benchmarks/_diffprivlib_runner.py (see run_diffprivlib in benchmarks/_common.py).
#
# Usage: bash benchmarks/diffprivlib_env.sh
#   SKDP_DIFFPRIVLIB_VENV   where to build it (default ~/.cache/skdp_sparse/diffprivlib-venv)
#   PYTHON                  interpreter to base it on (default python3)
set -euo pipefail

VENV="${SKDP_DIFFPRIVLIB_VENV:-$HOME/.cache/skdp_sparse/diffprivlib-venv}"
PYTHON="${PYTHON:-python3}"

# Pinned together: diffprivlib 0.6.6 is tested against scikit-learn 1.6, and
# scikit-learn 1.6.1 still ships wheels for numpy 2.x and Python 3.10 to 3.13.
DIFFPRIVLIB_VERSION="0.6.6"
SKLEARN_VERSION="1.6.1"

if [ ! -x "$VENV/bin/python" ]; then
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet \
    "diffprivlib==${DIFFPRIVLIB_VERSION}" "scikit-learn==${SKLEARN_VERSION}"

# Fail here, not in the middle of a benchmark, if the combination does not import.
"$VENV/bin/python" - <<'EOF'
import diffprivlib
import sklearn
from diffprivlib.models import LogisticRegression  # noqa: F401

print(f"diffprivlib {diffprivlib.__version__} with scikit-learn {sklearn.__version__}: OK")
EOF
echo "venv ready: $VENV"
