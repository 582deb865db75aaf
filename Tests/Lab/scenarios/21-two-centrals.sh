#!/bin/bash
# timeout: 420
# Two centrals at once: hci1 and hci2 (independent python3-dbus centrals, central.py) both
# connect to peerlinkd's peripheral on hci0 and subscribe; five notifications "<name> --<date>"
# (over 20 bytes) reach each of them, in order.
#
# The emulator needs help (Tests/Lab/README.md, "Two centrals on one peripheral"): btvirt
# (BlueZ emulator/btdev.c, 5.66) gives each controller its own connection handles (the lowest
# free from 42) but tells the peripheral the central's handle in LE Connection Complete and
# passes ACL packets on with the sender's handle unchanged. A link works only when both ends
# got the same handle. hci0's first link (to hci1) is 42 on both ends; a second central whose
# own lowest free handle is 42 gets 42 while hci0 files the link as 43: hci0's kernel is told
# "42" (a second handle 42), hci2's ATT requests reach hci0's link to hci1 and hci0's answers go
# to hci1. With three controllers no order of connections gives two working links on one
# controller, so this scenario restarts btvirt with four (lab_reset puts three back) and first
# connects hci2 to hci3 (a "filler" link, 42 on both): hci2's link to hci0 is then 43 on both.
. "$LAB_DIR/lib.sh"
require_peerlink
SVC=C4FB2349-72FE-4CA2-94D6-1F3CB16331EE
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
NAME="Kenshin Cui's Device"
C1=00:AA:01:01:00:01
C2=00:AA:01:02:00:02

note "btvirt with four controllers (hci3 only holds handle 42 on hci2)"
LAB_CONTROLLERS=4
lab_restart_btvirt && lab_power_all_on || fail "btvirt with 4 controllers did not come up"

start_peerlinkd p hci0
start_peerlinkd z hci3
spawn_watch events pl_watch p --json watch --topic gatt
expect_rc 0 pl p gatt register "$LAB_REPO/examples/seed-peripheral.json"

# scanner_first DAEMON ADV-ARGS -- NAME CENTRAL-ARGS...: with DAEMON's advertisement stopped,
# start central NAME; once it scans, start the advertisement (btvirt pitfall, README.md).
scanner_first() {
    local d=$1 adv=()
    shift
    while [ "$1" != -- ]; do adv+=("$1"); shift; done
    shift
    expect_rc 0 pl "$d" advertise stop
    central_scanning "$@"
    expect_rc 0 pl "$d" advertise start "${adv[@]}"
}

note "the filler link: hci2 connects to hci3 and stays connected"
scanner_first z --name filler -- filler --adapter hci2 --name filler --hold --restart 10 --timeout 400
wait_log 120 filler HOLDING || fail "hci2 did not connect to hci3: $(cat "$(log_of filler)")"
expect_rc 0 pl z advertise stop     # nothing else connects to hci3

note "two centrals (hci1, hci2) subscribe; five notifications \"<name> --<date>\" reach both, in order"
rm -f "$LAB_OUT/ready1" "$LAB_OUT/ready2"
scanner_first p --name "$NAME" --service $SVC -- c1 --adapter hci1 --service $SVC --char $CHR --subscribe 5 --ready-file "$LAB_OUT/ready1" --restart 10 --timeout 300
wait_for 90 test -e "$LAB_OUT/ready1" || fail "central 1 not subscribed: $(cat "$(log_of c1)")"
scanner_first p --name "$NAME" --service $SVC -- c2 --adapter hci2 --service $SVC --char $CHR --subscribe 5 --ready-file "$LAB_OUT/ready2" --restart 10 --timeout 200
wait_for 90 test -e "$LAB_OUT/ready2" || fail "central 2 not subscribed: $(cat "$(log_of c2)")"

note "peerlinkd saw the subscription (bluetoothd 5.66 asks AcquireNotify once per characteristic"
note "and counts later subscribers itself: one event, naming hci1; 5.69+ would ask once per central)"
wait_log 10 events '"gatt.subscribed"' || fail "no gatt.subscribed event: $(cat "$(log_of events)")"
py_check "gatt.subscribed events" "$(log_of events)" "$CHR" "$C1" "$C2" <<'PY'
import json, sys
chr_, c1, c2 = sys.argv[2].lower(), sys.argv[3], sys.argv[4]
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
s = [e["data"] for e in ev if e["topic"] == "gatt.subscribed"]
print(f"{len(s)} gatt.subscribed event(s): {[x['device'] for x in s]}")
assert s and s[0]["device"] == c1, s
assert all(x["device"] in (c1, c2) and x["uuid"] == chr_ and x["mtu"] > 23 for x in s), s
PY

sleep 1
for i in 1 2 3 4 5; do
    expect_rc 0 pl p gatt notify $CHR "$NAME --$(date +%Y-%m-%dT%H:%M:%S).$i"
done
wait_log 30 c1 DONE || fail "central 1 did not get 5 notifications: $(cat "$(log_of c1)")"
wait_log 30 c2 DONE || fail "central 2 did not get 5 notifications: $(cat "$(log_of c2)")"
for c in c1 c2; do check_notified "$(log_of $c)" "$NAME"; done
note "two centrals ok"
