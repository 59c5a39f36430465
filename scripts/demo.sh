#!/usr/bin/env bash
# The main job: optimize a built-in model (default: the BERT attention block) end to end and print the report.
# Usage: bash scripts/demo.sh [--model NAME] [-o out.onnx] [--costs analytic|measured]
EXTRAS="" source "$(dirname "$0")/_env.sh"
exec .venv/bin/eqsat demo "$@"
