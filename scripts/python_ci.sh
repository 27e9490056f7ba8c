#!/usr/bin/env bash
# The Python package in CI: a fresh virtual environment, the build requirements from PyPI, a CPU-only build
# of the package (pip install with scikit-build-core) and the CPU test suite. torch and GPU tests skip
# with their reason where torch or a GPU is missing.
#
# Usage: bash scripts/python_ci.sh        (FLASHATTN_PY_VENV=<dir> keeps the environment in <dir>)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${FLASHATTN_PY_VENV:-$(mktemp -d)/venv}
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q scikit-build-core nanobind numpy pytest
# CPU-only: the CUDA kernels would take most of CI's time and no test here can run them.
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$venv/bin/python" -m pip install -q --no-build-isolation \
  -C cmake.define.FLASHATTN_CUDA=OFF .
"$venv/bin/python" -m pytest tests/python -q -rs -p no:cacheprovider
