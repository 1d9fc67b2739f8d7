#!/usr/bin/env bash
# Debian's Chromium for the Playwright browser tests (Playwright cannot download browsers here,
# so the tests launch /usr/bin/chromium), and CJK fonts so that screenshots of the Chinese demo
# session show characters, not boxes. Needs root (as on CI); otherwise it says what to run.
set -euo pipefail
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -d /usr/share/fonts/opentype/noto ] || need+=(fonts-noto-cjk)
[ -f /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] || need+=(fonts-noto-color-emoji)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = "0" ]; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
  echo "installed ${need[*]}"
else
  echo "note: missing ${need[*]}; run 'sudo apt-get install -y ${need[*]}' for the browser tests" >&2
fi
