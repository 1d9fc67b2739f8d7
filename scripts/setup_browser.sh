#!/usr/bin/env bash
# Debian's Chromium for the Playwright browser tests. Playwright cannot download browsers here,
# so the tests launch /usr/bin/chromium. Needs root (as on CI); otherwise it says what to run.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = "0" ]; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
  echo "installed $(/usr/bin/chromium --version)"
else
  echo "note: /usr/bin/chromium is missing; run 'sudo apt-get install -y chromium' for the browser tests" >&2
fi
