#!/usr/bin/env bash
# Build the HTML documentation offline, with warnings as errors.
#
# Usage: bash doc/build.sh [--clean] [extra sphinx-build options]
#   --clean   remove the build and everything generated (API pages, gallery)
#             first; otherwise unchanged gallery examples are not run again.
# Output: doc/_build/html/index.html. The gallery runs every examples/plot_*.py.
set -euo pipefail

DOC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$DOC")"
PYTHON="${PYTHON:-python}"

if [ "${1:-}" = "--clean" ]; then
    shift
    rm -rf "$DOC/_build" "$DOC/generated" "$DOC/auto_examples" "$DOC/sg_execution_times.rst"
fi

"$PYTHON" -m pip install --quiet -r "$DOC/requirements.txt"
# The examples import the package and its dependencies.
"$PYTHON" -c "import skdp_sparse" 2>/dev/null || "$PYTHON" -m pip install --quiet -e "$ROOT"

export MPLBACKEND=Agg
"$PYTHON" -m sphinx -W --keep-going -b html "$@" "$DOC" "$DOC/_build/html"
