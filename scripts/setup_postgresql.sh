#!/usr/bin/env bash
# Debian's PostgreSQL server for the tests of the team store (tests/pg_cluster.py starts a
# throwaway cluster from its programs: initdb into a temporary folder, a free port, stopped
# at the end; nothing runs as a service). Needs root (as on CI); otherwise it says what to run.
# While another apt holds apt's locks it waits, up to APT_LOCK_WAIT_S seconds (600) in all
# (scripts/apt_install.sh). PG_LIB: where the server's programs are looked for.
set -euo pipefail
compgen -G "${PG_LIB:-/usr/lib/postgresql}/*/bin/initdb" >/dev/null && exit 0
if [ "$(id -u)" != "0" ]; then
  echo "note: PostgreSQL is missing; run 'sudo apt-get install -y postgresql' for the team store's tests" >&2
  exit 0
fi

APT_WHO=setup_postgresql
APT_AGAIN="make postgresql"
# shellcheck source=scripts/apt_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"

apt_get update
# Debian's package may also make a cluster of its own ("main"); the tests never use it
apt_get install -y --no-install-recommends postgresql
echo "installed postgresql"
