# apt-get for the setup scripts (scripts/setup_browser.sh, scripts/setup_postgresql.sh), which
# source this file after setting APT_WHO (their name, for messages) and APT_AGAIN (what to
# run again after giving up).
#
# Another apt (unattended-upgrades, a second terminal) may hold apt's locks: then apt_get
# waits for them, saying so once, up to APT_LOCK_WAIT_S seconds (600) in all. Not with
# apt-get's `-o DPkg::Lock::Timeout`: that covers the dpkg lock of `install` only, and `update`
# (apt 2.6, Debian 12) fails at once on the lists lock; so each step is retried while apt says
# a lock is held.

apt_wait_s=${APT_LOCK_WAIT_S:-600}
apt_waited=0

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
    if [ "$apt_waited" -ge "$apt_wait_s" ]; then
      echo "${APT_WHO}: gave up after ${apt_waited} s waiting for apt's lock (${held#E: }); run '${APT_AGAIN}' again once the other apt has finished" >&2
      return 1
    fi
    [ "$apt_waited" -eq 0 ] && echo "${APT_WHO}: waiting for apt's lock (${held#E: }), up to ${apt_wait_s} s" >&2
    sleep 5
    apt_waited=$((apt_waited + 5))
  done
}
