#!/bin/bash
# timeout: 240
# Faults of the board itself, with a daemon running through them:
#  1. the state directory's disk is full: `peer trust` fails with an error naming the file
#     and "No space left on device", nothing changes (in memory or on disk, no temporary
#     file left), the daemon serves on; with room again the same request succeeds;
#     While it is full, the other state files: a DNS-SD name chosen after a collision with
#     an independent publisher (avahi-publish) is published all the same (avahi-browse) and
#     the warning names the file and the reason; a file sent to a second daemon arrives
#     whole (sha256sum) although the outgoing-transfer journal cannot be written, and the
#     error names the journal and the reason; neither file appears, no temporary file left;
#  2. the disk is read-only: `peer forget` fails the same way ("Read-only file system"),
#     the peer stays trusted; a restart on the read-only disk keeps the identity and the
#     trusted peer; a daemon whose fresh state directory is read-only exits at once, status
#     1, saying which directory and why (no identity can be made);
#  3. the wall clock jumps two hours forward, then back: a 120-second advertisement that
#     bluetoothd drops is registered again (its time left counts on the monotonic clock,
#     not the wall clock's jump), and `status` uptime stays the daemon's real uptime.
. "$LAB_DIR/lib.sh"
. "$LAB_DIR/dnssd-lib.sh"  # json_get
require_peerlink

STATE=$(pl_state_dir a)
FRESH=$(pl_state_dir c)
rm -rf "$STATE" "$FRESH"
mkdir -p "$STATE" "$FRESH"
mount -t tmpfs -o size=1m,mode=0755 board-faults "$STATE" || fail "cannot mount a tmpfs on $STATE"
mount -t tmpfs -o size=1m,mode=0755,ro board-faults-fresh "$FRESH" || fail "cannot mount a tmpfs on $FRESH"

# The wall clock is put back however the scenario ends: wall time at the jump plus the
# monotonic time since.
JUMPED=
restore_clock() {
    [ -n "$JUMPED" ] || return 0
    local wall0 mono0 mono
    read -r wall0 mono0 <<<"$JUMPED"
    mono=$(cut -d' ' -f1 /proc/uptime)
    date -s "@$("$PY3" -c "print(round($wall0 + $mono - $mono0, 3))")" >/dev/null
    JUMPED=
}
cleanup() {
    local rc=$?
    restore_clock
    umount "$STATE" "$FRESH" 2>/dev/null
    (exit "$rc")
    _lib_cleanup
}
trap cleanup EXIT

printf 'peer.port = 7311\n' >"$LAB_OUT/a.conf"
printf 'peer.port = 7312\npeer.accept = all\npeer.accept_resources = all\n' >"$LAB_OUT/b.conf"
PL_CONFIG=$LAB_OUT/a.conf PEERLINKD_KEEP=1 start_peerlinkd a hci0
PL_CONFIG=$LAB_OUT/b.conf start_peerlinkd b hci1
pl a --json peer identity >"$LAB_OUT/id.json" || fail "peer identity exited $?"
ID=$(json_get "$LAB_OUT/id.json" 'd["peer"]')
PEER=$(printf 'ab%.0s' $(seq 32))
ls -la "$STATE/peer"

note "1. a full disk"
dd if=/dev/zero of="$STATE/filler" bs=4k 2>/dev/null
df -h "$STATE"
expect_rc 1 pl a peer trust "$PEER"
assert_contains "$RUN_OUT" "No space left on device" "the reason"
assert_contains "$RUN_OUT" "$STATE/peer/trusted-peers.json" "the file"
assert_contains "$RUN_OUT" "nothing changed" "what it means"
expect_rc 0 pl a --json peer trusted
assert_not_contains "$RUN_OUT" "$PEER" "not trusted in memory"
[ ! -e "$STATE/peer/trusted-peers.json" ] || fail "a trust store was written on a full disk"
leftovers=$(find "$STATE" -name '*.tmp*' -o -name '.*' -type f | grep -v '^$' || true)
[ -z "$leftovers" ] || fail "temporary files left: $leftovers"
expect_rc 0 pl a status

note "1b. a DNS-SD name chosen after a collision, on the full disk"
spawn avahi-pub avahi-publish -s "Board Name" _lab-board._tcp 5010
wait_log 10 avahi-pub "Established" || fail "avahi-publish did not publish: $(cat "$(log_of avahi-pub)")"
pl a --json dnssd publish "Board Name" _lab-board._tcp 5011 >"$LAB_OUT/pub.json" || fail "dnssd publish exited $?: $(cat "$LAB_OUT/pub.json")"
assert_eq "$(json_get "$LAB_OUT/pub.json" 'd["name"]')" "Board Name #2" "the name after the collision"
wait_for 10 grep -q "cannot save the chosen service name" "$LAB_OUT/peerlinkd-a.log" || fail "no warning that the name could not be saved"
warned=$(grep "cannot save the chosen service name" "$LAB_OUT/peerlinkd-a.log")
assert_contains "$warned" "path=$STATE/dnssd-names.json" "the warning's file"
assert_contains "$warned" "No space left on device" "the warning's reason"
avahi_browse_json _lab-board._tcp >"$LAB_OUT/avahi.json"
assert_contains "$(cat "$LAB_OUT/avahi.json")" "Board Name #2" "avahi-browse sees the renamed publication"
[ ! -e "$STATE/dnssd-names.json" ] || fail "a name store was written on a full disk"

note "1c. a file sent while the outgoing-transfer journal cannot be written"
peer_connect_ok() { run pl a --json peer connect 127.0.0.1:7312; [ "$RUN_RC" = 0 ]; }
peer_connect_ok || fail "a could not connect to b: $RUN_OUT"
head -c 300000 /dev/urandom >"$LAB_OUT/sent.bin"
B_ID=$(pl b --json peer identity | "$PY3" -c 'import json,sys; print(json.load(sys.stdin)["peer"])')
expect_rc 0 pl a peer send-file "$LAB_OUT/sent.bin" --to "$B_ID"
got=$(find "$(pl_state_dir b)/peer/inbox" -maxdepth 1 -type f -name 'sent*.bin' | head -n 1)
[ -n "$got" ] || fail "nothing arrived in b's inbox: $(ls -la "$(pl_state_dir b)/peer/inbox")"
assert_eq "$(sha256sum <"$got" | cut -d' ' -f1)" "$(sha256sum <"$LAB_OUT/sent.bin" | cut -d' ' -f1)" "sha256sum of what b received"
wait_for 10 grep -q "cannot save the outgoing transfers" "$LAB_OUT/peerlinkd-a.log" || fail "no error that the journal could not be saved"
logged=$(grep "cannot save the outgoing transfers" "$LAB_OUT/peerlinkd-a.log" | head -n 1)
assert_contains "$logged" "path=$STATE/peer/outgoing.json" "the error's file"
assert_contains "$logged" "No space left on device" "the error's reason"
[ ! -e "$STATE/peer/outgoing.json" ] || fail "a journal was written on a full disk"
leftovers=$(find "$STATE" -name '*.tmp*' -type f || true)
[ -z "$leftovers" ] || fail "temporary files left: $leftovers"
rm -f "$STATE/filler"
expect_rc 0 pl a peer trust "$PEER"
expect_rc 0 pl a --json peer trusted
assert_contains "$RUN_OUT" "$PEER" "trusted once there is room"
cp "$STATE/peer/trusted-peers.json" "$LAB_OUT/trusted-before.json"

note "2. a read-only disk"
mount -o remount,ro "$STATE" || fail "cannot remount $STATE read-only"
expect_rc 1 pl a peer forget "$PEER"
assert_contains "$RUN_OUT" "Read-only file system" "the reason"
assert_contains "$RUN_OUT" "nothing changed" "what it means"
expect_rc 0 pl a --json peer trusted
assert_contains "$RUN_OUT" "$PEER" "still trusted"
cmp "$STATE/peer/trusted-peers.json" "$LAB_OUT/trusted-before.json" || fail "the trust store changed"
note "a restart on the read-only disk keeps the identity and the trust"
stop_peerlinkd a >/dev/null
PEERLINKD_KEEP=1 start_peerlinkd a hci0
pl a --json peer identity >"$LAB_OUT/id2.json" || fail "peer identity exited $?"
assert_eq "$(json_get "$LAB_OUT/id2.json" 'd["peer"]')" "$ID" "the identity after the restart"
expect_rc 0 pl a --json peer trusted
assert_contains "$RUN_OUT" "$PEER" "trusted after the restart"
note "a fresh, read-only state directory: the daemon exits at once and says why"
PEERLINKD_KEEP=1 PEERLINKD_NOWAIT=1 start_peerlinkd c hci1
wait_for 15 sh -c "! kill -0 ${PEERLINKD_PID[c]} 2>/dev/null" || fail "peerlinkd c still runs on a read-only state directory"
wait "${PEERLINKD_PID[c]}"
rc=$?
log=$(cat "$LAB_OUT/peerlinkd-c.log")
printf '%s\n' "$log"
assert_eq "$rc" 1 "its exit status"
assert_contains "$log" "$FRESH/peer" "the directory"
assert_contains "$log" "Read-only file system" "the reason"
mount -o remount,rw "$STATE" || fail "cannot remount $STATE read-write"

note "3. the wall clock jumps"
spawn_watch events pl_watch a --json watch --topic advertise --topic bluez --timeout 120
expect_rc 0 pl a advertise start --name board-faults --timeout 120
up0=$(pl a --json status | "$PY3" -c 'import json,sys; print(json.load(sys.stdin)["uptime_seconds"])')
JUMPED="$(date +%s.%N) $(cut -d' ' -f1 /proc/uptime)"
date -s "+2 hours" >/dev/null || fail "cannot set the clock"
note "clock now $(date -Is)"
up1=$(pl a --json status | "$PY3" -c 'import json,sys; print(json.load(sys.stdin)["uptime_seconds"])')
"$PY3" -c "import sys; a, b = float('$up0'), float('$up1'); sys.exit(0 if 0 <= b - a < 30 else 1)" \
    || fail "uptime went from $up0 to $up1 s over a 2-hour jump of the wall clock"
note "bluetoothd drops the advertisement (restarted): it is registered again, not timed out"
lab_restart_bluetoothd || fail "bluetoothd did not come back"
wait_log 20 events advertise.restarted || fail "the advertisement was not registered again: $(cat "$(log_of events)")"
assert_not_contains "$(cat "$(log_of events)")" '"timeout"' "no advertisement ended as timed out"
date -s "-4 hours" >/dev/null || fail "cannot set the clock"
note "clock now $(date -Is)"
up2=$(pl a --json status | "$PY3" -c 'import json,sys; print(json.load(sys.stdin)["uptime_seconds"])')
"$PY3" -c "import sys; a, b = float('$up1'), float('$up2'); sys.exit(0 if 0 <= b - a < 60 else 1)" \
    || fail "uptime went from $up1 to $up2 s over a 4-hour jump back"
restore_clock
note "clock restored: $(date -Is)"
expect_rc 0 pl a --json advertise list
assert_contains "$RUN_OUT" "board-faults" "the advertisement still runs"
note "board faults ok"
