#!/bin/bash
# timeout: 300
# PENDING (not run by make check): a second central (hci2) subscribing while the first
# (hci1) is connected. In the lab the second link's GATT discovery ends in ATT "Attribute
# Not Found" and its characteristic objects never appear (btmon capture: LAB_BTMON=1), both
# when the centrals connect together and one after the other.
# Not peerlinkd: the emulated lab (btvirt + bluetoothd 5.66) does the same with BlueZ's own
# example-gatt-server as the GATT peripheral on hci0 (peerlinkd only advertising 180F):
# central.py on hci1 subscribed to Battery Level 2a19 and got its notifications; central.py
# on hci2, started once hci1 had subscribed, printed CONNECTED (ServicesResolved) and never
# saw 2a19 within 60 s (lab run on branch h7, 2026-11-29). Until the emulator case is
# understood this lives here; to run it, copy it into Tests/Lab/scenarios/ (run.sh takes
# scenario names from there only) and run
#     Tests/Lab/run.sh 21-two-centrals
. "$LAB_DIR/lib.sh"
require_peerlink
SVC=C4FB2349-72FE-4CA2-94D6-1F3CB16331EE
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
NAME="Kenshin Cui's Device"
central() { "$PY3" -u "$LAB_DIR/central.py" "$@"; }
start_peerlinkd p hci0
expect_rc 0 pl p gatt register "$LAB_REPO/examples/seed-peripheral.json"
expect_rc 0 pl p advertise start --name "$NAME" --service $SVC
note "two centrals (hci1, hci2) subscribe; five notifications \"<name> --<date>\" reach both, in order"
rm -f "$LAB_OUT/ready1" "$LAB_OUT/ready2"
# One after the other: two GATT discoveries at once on the emulated controller end in
# "Attribute Not Found" for the second link (seen with btmon); both then stay subscribed.
spawn c1 central --adapter hci1 --service $SVC --char $CHR --subscribe 5 --ready-file "$LAB_OUT/ready1" --timeout 120
wait_for 60 test -e "$LAB_OUT/ready1" || fail "central 1 not subscribed: $(cat "$(log_of c1)")"
spawn c2 central --adapter hci2 --service $SVC --char $CHR --subscribe 5 --ready-file "$LAB_OUT/ready2" --timeout 100
wait_for 60 test -e "$LAB_OUT/ready2" || fail "central 2 not subscribed: $(cat "$(log_of c2)")"
sleep 1
for i in 1 2 3 4 5; do
    expect_rc 0 pl p gatt notify $CHR "$NAME --$(date +%Y-%m-%dT%H:%M:%S).$i"
done
wait_log 30 c1 DONE || fail "central 1 did not get 5 notifications: $(cat "$(log_of c1)")"
wait_log 30 c2 DONE || fail "central 2 did not get 5 notifications: $(cat "$(log_of c2)")"
for c in c1 c2; do
    py_check "notifications of $c" "$(log_of $c)" "$NAME" <<'PY'
import sys
name = sys.argv[2]
n = [l.split(" ", 3) for l in open(sys.argv[1]) if l.startswith("NOTIFY ")]
texts = [x[3].strip() for x in n]
assert len(texts) == 5, texts
for i, t in enumerate(texts, 1):
    assert t.startswith(name + " --") and t.endswith(f".{i}"), (i, t)
    assert len(t.encode()) > 20, "the value must be longer than 20 bytes (MTU > 23)"
PY
done
note "two centrals ok"
