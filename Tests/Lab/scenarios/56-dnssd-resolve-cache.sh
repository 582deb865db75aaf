#!/bin/bash
# The daemon's resolve cache against a real avahi-daemon, with avahi-publish as
# the independent publisher: a resolving browse fills it (dnssd resolve answers
# with "daemon_cache": true, --fresh asks avahi-daemon), the browse seeing the
# service go empties it (the resolve then fails instead of answering stale
# data), a changed service replaces it; without a browse, an entry is used for
# 10 s at most, then avahi-daemon is asked again.
# timeout: 150
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"
require_peerlink
TYPE=_lab-cache._tcp

start_peerlinkd b hci1

# resolve_json OUT ARGS...: `dnssd resolve "Cache Probe" TYPE --json ARGS` on b, into OUT.
resolve_json() {
    local out=$1; shift
    expect_rc 0 pl b --json dnssd resolve "Cache Probe" $TYPE "$@"
    printf '%s\n' "$RUN_OUT" | grep '^{' >"$out"
}

note "avahi-publish publishes \"Cache Probe\"; b browses the type with --resolve"
spawn pub1 avahi-publish -s "Cache Probe" $TYPE 7001 v=1
PUB1=$SPAWN_PID
wait_log 15 pub1 "Established" || fail "avahi-publish did not establish: $(cat "$(log_of pub1)")"
spawn browse pl_watch b --json dnssd browse $TYPE --resolve --timeout 120
wait_log 20 browse '"dnssd.resolved"' || fail "b's browse did not resolve it: $(cat "$(log_of browse)")"

note "resolve: from the cache the browse filled"
resolve_json "$LAB_OUT/r1.json"
py_check "answered from the daemon's cache" "$LAB_OUT/r1.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["daemon_cache"] is True and d["port"] == 7001 and d["txt"] == ["v=1"], d
assert d["age_ms"] >= 0, d
PY
note "resolve --fresh: from avahi-daemon"
resolve_json "$LAB_OUT/r2.json" --fresh
py_check "fresh answer from avahi-daemon" "$LAB_OUT/r2.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["daemon_cache"] is False and d["port"] == 7001 and d["txt"] == ["v=1"] and "age_ms" not in d, d
PY

note "the service goes (avahi-publish ends): the browse reports it, the cache drops it"
kill "$PUB1"
wait_log 15 browse '"dnssd.removed"' || fail "b's browse did not report the removal: $(cat "$(log_of browse)")"
expect_rc 1 pl b --json dnssd resolve "Cache Probe" $TYPE --timeout 2
assert_not_contains "$RUN_OUT" '"daemon_cache":true' "no stale answer after the removal"

note "published again with another port and TXT: the browse's new result replaces the entry"
spawn pub2 avahi-publish -s "Cache Probe" $TYPE 7002 v=2
PUB2=$SPAWN_PID
wait_log 15 pub2 "Established" || fail "avahi-publish (2) did not establish: $(cat "$(log_of pub2)")"
wait_for 20 grep -q '"port":7002' "$(log_of browse)" || fail "b's browse did not resolve the new one: $(cat "$(log_of browse)")"
resolve_json "$LAB_OUT/r3.json"
py_check "the new answer, from the cache" "$LAB_OUT/r3.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["daemon_cache"] is True and d["port"] == 7002 and d["txt"] == ["v=2"], d
PY

note "without a browse: an entry is used for 10 s at most"
# (pl_watch runs timeout, which runs peerlink: end both.)
BROWSE_CMD="$(pl_socket b) --json dnssd browse $TYPE"
browse_gone() { ! pgrep -f -- "$BROWSE_CMD" >/dev/null; }  # (not in sh -c: pgrep would see that shell)
kill $(pgrep -f -- "$BROWSE_CMD") 2>/dev/null
wait_for 10 browse_gone || fail "the browse did not end: $(pgrep -af -- "$BROWSE_CMD")"
resolve_json "$LAB_OUT/r4.json" --fresh
t_store=$(now_ms)
resolve_json "$LAB_OUT/r5.json"
assert_eq "$(json_get "$LAB_OUT/r5.json" 'd["daemon_cache"]')" True "a one-shot answer is cached"
note "the service goes with no browse to see it"
kill "$PUB2"
wait_for 10 sh -c "! avahi-browse -k -p -t $TYPE 2>/dev/null | grep -q Cache" || fail "avahi-daemon still has the service"
# Past the 10 s bound (from the fresh answer that stored it) the daemon asks avahi-daemon,
# which no longer has the service.
wait_for 15 sh -c "[ \$(( \$(date +%s%3N) - $t_store )) -ge 10500 ]"
expect_rc 1 pl b --json dnssd resolve "Cache Probe" $TYPE --timeout 2
assert_not_contains "$RUN_OUT" '"daemon_cache":true' "no answer from an entry past its age"
note "ok"
