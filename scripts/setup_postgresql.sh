#!/usr/bin/env bash
# Debian's PostgreSQL server for the tests of the team store (tests/pg_cluster.py starts a
# throwaway cluster from its programs: initdb into a temporary folder, a free port, stopped
# at the end; nothing runs as a service). Needs root (as on CI); otherwise it says what to run.
#
# Another apt may hold apt's locks: then this waits for them, saying so, up to APT_LOCK_WAIT_S
# seconds (600) in all, as scripts/setup_browser.sh does.
set -euo pipefail
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && exit 0
if [ "$(id -u)" != "0" ]; then
  echo "note: PostgreSQL is missing; run 'sudo apt-get install -y postgresql' for the team store's tests" >&2
  exit 0
fi

wait_s=${APT_LOCK_WAIT_S:-600}
waited=0

# apt-get "$@", its output hidden unless it fails; while it fails because another process
# holds one of apt's locks, try again every 5 s (saying once what it waits for).
apt_get() {
  local out
  while ! out=$(DEBIAN_FRONTEND=noninteractive apt-get -q "$@" 2>&1); do
    local held
    held=$(grep -m1 -E 'Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock' <<<"$out" || true)
    if [ -z "$held" ]; then
      printf '%s\n' "$out" >&2
      return 1
    fi
    if [ "$waited" -ge "$wait_s" ]; then
      echo "setup_postgresql: gave up after ${waited} s waiting for apt's lock (${held#E: }); run 'make postgresql' again once the other apt has finished" >&2
      return 1
    fi
    [ "$waited" -eq 0 ] && echo "setup_postgresql: waiting for apt's lock (${held#E: }), up to ${wait_s} s" >&2
    sleep 5
    waited=$((waited + 5))
  done
}

apt_get update
# Debian's package may also make a cluster of its own ("main"); the tests never use it
apt_get install -y --no-install-recommends postgresql
echo "installed postgresql"
