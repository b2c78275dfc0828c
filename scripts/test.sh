#!/usr/bin/env bash
# Set up (with the test tools) if needed, then lint and run the whole test suite, in two lanes at once (see below).
# Extra arguments go to one plain pytest run instead (so does VITA_TEST_SERIAL=1).
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
if [ $# -gt 0 ] || [ -n "${VITA_TEST_SERIAL:-}" ]; then
    exec "$VENV/bin/python" -m pytest "$@"
fi
# Two lanes at once: the shared server's tests (mostly waiting on real-time audio and replies played out) beside
# the rest (mostly loading models and engines), so that the two cores are busy together. Their engines' OpenMP
# threads wait passively: spinning, two engines' threads on the same two cores starved each other (a reply stalled
# 15 s). The shared lane's report follows the other's; the run fails if either lane does.
export OMP_WAIT_POLICY=PASSIVE KMP_BLOCKTIME=0
shared_log=$(mktemp)
set -m  # the shared lane in a process group of its own, so that it can be interrupted as a whole
"$VENV/bin/python" -m pytest --lane shared -p no:cacheprovider </dev/null >"$shared_log" 2>&1 &
shared_pid=$!
set +m
# Leaving early (Ctrl-C, a kill): interrupt the shared lane too (pytest then stops its servers) and keep its log.
trap 'if [ -n "$shared_pid" ]; then kill -INT -- "-$shared_pid" 2>/dev/null || true; wait "$shared_pid" || true;
      cat "$shared_log"; fi; rm -f "$shared_log"' EXIT
rest=0
"$VENV/bin/python" -m pytest --lane rest || rest=$?
if [ "$rest" = 2 ]; then  # pytest's "interrupted": the shared lane stops too
    kill -INT -- "-$shared_pid" 2>/dev/null || true
fi
shared=0
wait "$shared_pid" || shared=$?
shared_pid=""
echo
echo "=== the shared server's lane (pytest --lane shared) ==="
cat "$shared_log"
echo "lanes: rest exit $rest, shared exit $shared"
[ "$rest" = 0 ] && [ "$shared" = 0 ]
