#!/usr/bin/env bash
# The test suite: ruff, then pytest on two xdist workers (GPU tests skip with a reason where CUDA is absent).
#   bash scripts/test.sh          every test (CI runs this)
#   bash scripts/test.sh --fast   the tests not marked slow: what to run after each change
# Other arguments go to pytest (e.g. -k NAME, tests/ops/test_ops.py, -n 4; EQSAT_TEST_WORKERS sets the default
# worker count). Speed rules and shared fixtures: tests/conftest.py.
EXTRAS="test" source "$(dirname "$0")/_env.sh"
# Python's bytecode caches (__pycache__, ignored by git) on, where the environment turns them off: without them
# every test process and every child process it starts compiles eqsat again, and pytest rewrites every test
# module's asserts again (about 3 s a worker, a run)
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check .
select=()
args=()
for a in "$@"; do
  if [ "$a" = "--fast" ]; then select=(-m "not slow"); else args+=("$a"); fi
done
# --dist loadgroup comes from pyproject.toml's addopts
exec .venv/bin/python -m pytest -q -rs -n "${EQSAT_TEST_WORKERS:-2}" ${select[@]+"${select[@]}"} ${args[@]+"${args[@]}"}
