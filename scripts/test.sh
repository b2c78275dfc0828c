#!/usr/bin/env bash
# Set up (with the test tools) if needed, then lint and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VITA_EXTRAS=test bash scripts/setup.sh
VENV=${VITA_VENV:-.venv}
"$VENV/bin/ruff" check .
exec "$VENV/bin/python" -m pytest "$@"
