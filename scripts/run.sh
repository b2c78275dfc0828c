#!/usr/bin/env bash
# Set up if needed, then start the server on the embedded models. Extra arguments go to server.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${VITA_VENV:-.venv}/bin/python" server.py "$@"
