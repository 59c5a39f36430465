# Shared by demo.sh and test.sh: create .venv (Python >= 3.11) and install eqsat with the given extras, at the
# versions constraints.txt pins.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1; then PY="$cand"; break; fi
  done
fi
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "eqsat needs Python >= 3.11"'
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
spec="."
if [ -n "${EXTRAS:-}" ]; then spec=".[${EXTRAS}]"; fi
# pip's check of an install that is already current takes about 7 s: skipped while the project's description,
# the pinned versions and the extras asked for are those of the last install (a stamp in .venv; delete .venv, or
# the stamp, to install again)
stamp=".venv/.installed-${EXTRAS:-base}"
want=$(.venv/bin/python -c 'import hashlib, sys
h = hashlib.sha256(sys.argv[1].encode())
for f in ("pyproject.toml", "constraints.txt"):
    h.update(open(f, "rb").read())
print(h.hexdigest())' "$spec")
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # constraints.txt: the exact versions the tests run with (pyproject.toml only states the ranges eqsat accepts)
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e "$spec"
  echo "$want" > "$stamp"
fi
