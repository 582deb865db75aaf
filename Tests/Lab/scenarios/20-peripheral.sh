#!/bin/bash
# timeout: 300
# The peripheral role against independent centrals (Tests/Lab/central.py: python3-dbus
# talking to bluetoothd, not our code): the reference flow of docs/reference-flows.md section 1
# (CBPeripheralManager), the events a control client sees, and the errors a caller must
# see (value longer than MTU-3, per-device notify on BlueZ < 5.69). Writes: 22-peripheral-writes;
# two centrals at once: 21-two-centrals.
# Every central scans first, with the advertisement stopped; only then is it started again
# (scanner_first), so btvirt reports it to a controller whose discovery is already on.
# Advertiser first, btvirt sends the report right after the scan is enabled and the kernel
# drops it when it comes before discovery is marked active (README.md, "Pitfalls met"): this
# scenario was pending for that (a central that never saw the advertisement).
. "$LAB_DIR/lib.sh"
require_peerlink

SVC=C4FB2349-72FE-4CA2-94D6-1F3CB16331EE
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
WCHR=6A3E4B29-522D-4B3B-82A9-D5E2004534FC
NAME="Kenshin Cui's Device"
# scanner_first NAME ARGS...: stop the advertisement, start central.py ARGS as NAME, and once
# it scans, advertise again.
scanner_first() {
    expect_rc 0 pl p advertise stop
    central_scanning "$@"
    expect_rc 0 pl p advertise start --name "$NAME" --service $SVC
}

start_peerlinkd p hci0
# The reference service plus a writable characteristic (request and command).
cat >"$LAB_OUT/app.json" <<JSON
{"name": "lab", "services": [{"uuid": "$SVC", "characteristics": [
  {"uuid": "$CHR", "flags": ["read", "notify"], "value": "$NAME"},
  {"uuid": "$WCHR", "flags": ["read", "write", "write-without-response"], "value": "initial", "max_length": 64}]}]}
JSON

note "events of the peripheral, recorded from the start"
spawn_watch events pl_watch p --json watch --topic gatt

note "register the application and advertise name + 128-bit service UUID"
expect_rc 0 pl p --json gatt register "$LAB_OUT/app.json"
APP=$(printf '%s' "$RUN_OUT" | "$PY3" -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["id"])') || fail "no app id in: $RUN_OUT"
expect_rc 0 pl p advertise start --name "$NAME" --service $SVC
expect_rc 0 pl p --json advertise list
assert_contains "$RUN_OUT" '"active":true' "advertisement active"

note "central A (hci1) finds it by service UUID, reads the value"
scanner_first read --adapter hci1 --service $SVC --char $CHR --read --restart 10 --timeout 60
central_result read
assert_eq "$RUN_RC" 0 "central read: exit status"
assert_contains "$RUN_OUT" "READ $(printf '%s' "$NAME" | od -An -tx1 | tr -d ' \n') $NAME" "read returns the device name"

note "central A finds it by name too"
scanner_first byname --adapter hci1 --name "$NAME" --restart 10 --timeout 60
central_result byname
assert_eq "$RUN_RC" 0 "central by name: exit status"
assert_contains "$RUN_OUT" "FOUND 00:AA:01:00:00:00" "found by name"

note "central A subscribes; five notifications \"<name> --<date>\" arrive in order, each over 20 bytes"
rm -f "$LAB_OUT/ready1"
scanner_first c1 --adapter hci1 --service $SVC --char $CHR --subscribe 5 --ready-file "$LAB_OUT/ready1" --restart 10 --timeout 90
wait_for 60 test -e "$LAB_OUT/ready1" || fail "central not subscribed: $(cat "$(log_of c1)")"
sleep 1
for i in 1 2 3 4 5; do
    expect_rc 0 pl p gatt notify $CHR "$NAME --$(date +%Y-%m-%dT%H:%M:%S).$i"
done
wait_log 30 c1 DONE || fail "central did not get 5 notifications: $(cat "$(log_of c1)")"
check_notified "$(log_of c1)" "$NAME"
note "central A subscribes again; five values streamed from a file (peerlink gatt stream) arrive in order"
rm -f "$LAB_OUT/ready2"
scanner_first c2 --adapter hci1 --service $SVC --char $CHR --subscribe 5 --ready-file "$LAB_OUT/ready2" --restart 10 --timeout 90
wait_for 60 test -e "$LAB_OUT/ready2" || fail "central not subscribed: $(cat "$(log_of c2)")"
sleep 1
for i in 1 2 3 4 5; do echo "$NAME --stream.$i"; done >"$LAB_OUT/stream.txt"
expect_rc 0 pl p gatt stream $CHR --from "$LAB_OUT/stream.txt"
assert_contains "$RUN_OUT" "streamed 5 values: 5 notified" "the stream's counts"
wait_log 30 c2 DONE || fail "central did not get 5 streamed notifications: $(cat "$(log_of c2)")"
py_check "streamed notifications" "$(log_of c2)" "$NAME" <<'PY'
import sys
name = sys.argv[2]
texts = [l.split(" ", 3)[3].strip() for l in open(sys.argv[1]) if l.startswith("NOTIFY ")]
assert texts == [f"{name} --stream.{i}" for i in range(1, 6)], texts
PY

note "the subscription was an event naming the device and its MTU"
wait_log 10 events '"gatt.subscribed"' || fail "no gatt.subscribed event: $(cat "$(log_of events)")"
py_check "gatt.subscribed event" "$(log_of events)" "$CHR" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
s = [e["data"] for e in ev if e["topic"] == "gatt.subscribed"]
assert len(s) == 2, s   # central A, twice
for x in s:
    assert x["uuid"] == sys.argv[2].lower() and x["device"] == "00:AA:01:01:00:01" and x["via"] == "fd", x
    assert isinstance(x["mtu"], int) and x["mtu"] > 23, x
PY

note "a value longer than one notification is an error, not a cut"
rm -f "$LAB_OUT/ready1"
scanner_first c3 --adapter hci1 --service $SVC --char $CHR --subscribe 1 --ready-file "$LAB_OUT/ready1" --restart 10 --timeout 60
wait_for 50 test -e "$LAB_OUT/ready1" || fail "central 3 not subscribed: $(cat "$(log_of c3)")"
sleep 1
expect_rc 1 pl p gatt notify --hex $CHR "$(head -c 600 /dev/zero | od -An -v -tx1 | tr -d ' \n')"
assert_contains "$RUN_OUT" "at most" "the error says how much fits"
note "per-device notify: BlueZ $(bluetoothd --version 2>/dev/null || /usr/libexec/bluetooth/bluetoothd --version)"
expect_rc 1 pl p gatt notify --device 00:AA:01:01:00:01 $CHR "to one"
assert_contains "$RUN_OUT" "5.69" "the error explains per-device notification needs BlueZ 5.69+"
expect_rc 0 pl p gatt notify $CHR "$NAME --last"
wait_log 20 c3 DONE || fail "central 3 did not get the notification: $(cat "$(log_of c3)")"

note "unregister: nothing left"
expect_rc 0 pl p gatt unregister "$APP"
expect_rc 0 pl p gatt list
assert_contains "$RUN_OUT" "No applications." "gatt list after unregister"
note "peripheral ok"
