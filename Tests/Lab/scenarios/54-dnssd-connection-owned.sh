#!/bin/bash
# Ownership of publications: one made with "owner": "connection" (`dnssd publish
# --hold`) ends when its client goes away, one owned by the daemon stays after
# the client that made it exits; both checked with avahi-browse.
# timeout: 120
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"
require_peerlink

start_peerlinkd a hci0

note "daemon-owned: stays after the CLI exits"
expect_rc 0 pl a dnssd publish "Daemon Owned" _lab-own._tcp 6001
avahi_has "Daemon Owned" _lab-own._tcp || fail "avahi-browse does not see 'Daemon Owned'"

note "connection-owned (--hold): on the network while the CLI runs"
spawn hold "$PEERLINK_BIN/peerlink" --socket "$(pl_socket a)" dnssd publish "Held By Client" _lab-own._tcp 6002 --hold
wait_for 15 grep -q '^p[0-9]' "$(log_of hold)" || fail "publish --hold printed no ID: $(cat "$(log_of hold)")"
wait_for 15 avahi_has "Held By Client" _lab-own._tcp || fail "avahi-browse does not see 'Held By Client'"
expect_rc 0 pl a --json dnssd list
assert_contains "$RUN_OUT" '"owner":"connection"' "list shows the owner"

note "the client goes away: the publication is withdrawn, the daemon's stays"
kill "$SPAWN_PID"
# The daemon's own table (a bash function: `pl` is one, which sh -c did not have, so the
# check passed at once whatever the list said).
unlisted() { run pl a --json dnssd list; [ "$RUN_RC" = 0 ] && [[ $RUN_OUT == *'"publications"'* ]] && [[ $RUN_OUT != *"Held By Client"* ]]; }
wait_for 10 unlisted || fail "still listed after its client went away (or the list failed): $RUN_OUT"
wait_for 10 sh -c '! avahi-browse -k -p -t _lab-own._tcp 2>/dev/null | grep -q "Held.032By.032Client"' \
    || fail "'Held By Client' still on the network after its client went away"
avahi_has "Daemon Owned" _lab-own._tcp || fail "'Daemon Owned' disappeared"
expect_rc 0 pl a dnssd list
assert_contains "$RUN_OUT" "Daemon Owned" "daemon-owned publication still listed"
note "ok"
