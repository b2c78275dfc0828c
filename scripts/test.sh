#!/usr/bin/env bash
# Set up (with the test tools) if needed, then lint and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VITA_EXTRAS=test bash scripts/setup.sh
# The page test drives a real browser: Debian's Chromium (the test tools cannot download their own here).
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's chromium for the page test"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core \
            >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null; }
    else
        echo "chromium is missing: install it (Debian: apt-get install chromium) for the page test" >&2
        exit 1
    fi
fi
VENV=${VITA_VENV:-.venv}
"$VENV/bin/ruff" check .
exec "$VENV/bin/python" -m pytest "$@"
