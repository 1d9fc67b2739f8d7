#!/usr/bin/env bash
# Debian's Chromium for the Playwright browser tests (Playwright cannot download browsers here,
# so the tests launch /usr/bin/chromium, or CTXSCOPE_CHROMIUM), and CJK fonts so that
# screenshots of the Chinese demo session show characters, not boxes. Needs root (as on CI);
# otherwise it says what to run. While another apt holds apt's locks it waits, up to
# APT_LOCK_WAIT_S seconds (600) in all (scripts/apt_install.sh).
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

APT_WHO=setup_browser
APT_AGAIN="make browser"
# shellcheck source=scripts/apt_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"

apt_get update
apt_get install -y "${need[@]}"
echo "installed ${need[*]}"
