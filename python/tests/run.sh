#!/usr/bin/env bash
# ctest's python_tests: the Python suite (python/tests) in the project's venv, which `make test` builds
# first; $LOOM names the engine binary. Without the venv the test is skipped (exit 77) and says why.
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="$root/.venv/bin/python"
if [ ! -x "$py" ] || ! "$py" -c "import torch, transformers, pytest" 2>/dev/null; then
  echo "python_tests skipped: $root/.venv lacks torch, transformers or pytest (run: make venv)"
  exit 77
fi
exec "$py" -m pytest -q -p no:cacheprovider "$root/python/tests"
