#!/usr/bin/env bash
# Debian's Chromium for the Playwright browser tests (Playwright cannot download browsers here,
# so the tests launch /usr/bin/chromium, or CTXSCOPE_CHROMIUM), and CJK fonts so that
# screenshots of the Chinese demo session show characters, not boxes. Needs root (as on CI);
# otherwise it says what to run.
#
# Another apt (unattended-upgrades, a second terminal) may hold apt's locks: then this waits
# for them, saying so, up to APT_LOCK_WAIT_S seconds (600) in all. Not with apt-get's
# `-o DPkg::Lock::Timeout`: that covers the dpkg lock of `install` only, and `update` (apt 2.6,
# Debian 12) fails at once on the lists lock; so each step is retried while apt says a lock is
# held.
set -euo pipefail
need=()
[ -x "${CTXSCOPE_CHROMIUM:-/usr/bin/chromium}" ] || need+=(chromium)
[ -d /usr/share/fonts/opentype/noto ] || need+=(fonts-noto-cjk)
[ -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] || need+=(fonts-noto-color-emoji)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != "0" ]; then
  echo "note: missing ${need[*]}; run 'sudo apt-get install -y ${need[*]}' for the browser tests" >&2
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
      echo "setup_browser: gave up after ${waited} s waiting for apt's lock (${held#E: }); run 'make browser' again once the other apt has finished" >&2
      return 1
    fi
    [ "$waited" -eq 0 ] && echo "setup_browser: waiting for apt's lock (${held#E: }), up to ${wait_s} s" >&2
    sleep 5
    waited=$((waited + 5))
  done
}

apt_get update
apt_get install -y "${need[@]}"
echo "installed ${need[*]}"
