#!/usr/bin/env bash
# Set up (with the test tools) if needed, then lint and run the whole test suite. Extra arguments go to pytest.
#   --fast: only the tests that load no model and start no server (pure logic, seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
VITA_EXTRAS=test bash scripts/setup.sh
VENV=${VITA_VENV:-.venv}
if [ "${1:-}" = "--fast" ]; then
    shift
    "$VENV/bin/ruff" check .
    exec "$VENV/bin/python" -m pytest -m fast "$@"
fi
# System programs the tests start for real: Debian's Chromium for the page test (the test tools cannot download
# their own browser here) and Debian's redis-server for the several-front-processes test.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium fonts-dejavu-core)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's ${missing[*]} for the tests"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null || {
            apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
                apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
    else
        echo "missing for the tests: ${missing[*]} (Debian: apt-get install ${missing[*]})" >&2
        exit 1
    fi
fi
"$VENV/bin/ruff" check .
exec "$VENV/bin/python" -m pytest "$@"
