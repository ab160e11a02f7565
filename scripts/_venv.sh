# Sourced by scripts/demo and scripts/test: a project virtualenv with eosflow installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "eosflow needs Python 3.11+")'
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
spec="."
if [ -n "${EOSFLOW_EXTRAS:-}" ]; then spec=".[${EOSFLOW_EXTRAS}]"; fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$spec"
