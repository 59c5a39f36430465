#!/usr/bin/env bash
# The test suite: ruff, then pytest (GPU tests skip with a reason where CUDA is absent).
EXTRAS="test" source "$(dirname "$0")/_env.sh"
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -rs "$@"
