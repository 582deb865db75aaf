#!/bin/bash
# timeout: 360
# Every controller removed under running daemons, then back (btvirt stopped: the kernel
# removes hci0..2, and bluetoothd their adapters and devices, as when a USB dongle is
# pulled), with real bluetoothd; CentralTests covers the same with a fake one, in either
# order of bluetoothd's removals.
#   The central (c, hci0), connected to the peripheral, subscribed and scanning: the device
#   is reported disconnected once (with the reason bluetoothd's order of signals allows), the subscription ends saying why,
#   requests naming the adapter fail with a clear error; once the controllers are back the
#   scan resumes by itself (bluetoothd's Discovering, read with busctl), and the central
#   finds, connects and reads again.
#   The peripheral (p, hci1), registered and advertising: requests fail with a clear error
#   while it has no adapter; once back, its application and advertisement are registered
#   again by themselves (busctl: ActiveInstances) and an independent central (python-dbus on
#   hci2) reads the characteristic.
#   Neither daemon restarts.
. "$LAB_DIR/lib.sh"
require_peerlink
SVC=C4FB2349-72FE-4CA2-94D6-1F3CB16331EE
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
OTHER=0000FEAA-0000-1000-8000-00805F9B34FB
NAME="Kenshin Cui's Device"
ADDR=$(adapter_addr hci1)
central() { "$PY3" -u "$LAB_DIR/central.py" "$@"; }
discovering() { test "$(adapter_prop hci0 Discovering)" = true; }
active_instances() { test "$(bluez_prop /org/bluez/hci1 org.bluez.LEAdvertisingManager1 ActiveInstances)" = 1; }

start_peerlinkd p hci1
start_peerlinkd c hci0
PID_P=${PEERLINKD_PID[p]} PID_C=${PEERLINKD_PID[c]}
C_ADAPTER=$(adapter_addr hci0)  # the central daemon's (its events also tell of other adapters' links)
expect_rc 0 pl p gatt register "$LAB_REPO/examples/seed-peripheral.json"
spawn_watch pevents pl_watch p --json watch --topic gatt --topic advertise --topic adapter
spawn_watch cevents pl_watch c --json watch --topic central --topic adapter

note "the central finds the peripheral, connects and subscribes"
spawn scan0 pl_watch c --json scan --service $SVC --count 1 --timeout 90
wait_for 20 discovering || fail "hci0 is not discovering: $(cat "$(log_of scan0)")"
advertise_until_seen p scan0 "\"$ADDR\"" --name "$NAME" --service $SVC || fail "the peripheral was not found: $(cat "$(log_of scan0)")"
expect_rc 0 pl c connect "$ADDR" --timeout 40
# Text output: its "subscribed to" line says the subscription is in place.
spawn sub pl_watch c subscribe "$ADDR" $CHR --timeout 300
wait_log 30 sub "subscribed to" || fail "the subscription did not start: $(cat "$(log_of sub)")"
expect_rc 0 pl p gatt notify $CHR "before removal"
wait_log 20 sub "before removal" || fail "no notification before the removal: $(cat "$(log_of sub)")"
# A scan kept across the removal (for a service nobody advertises: only its state matters).
spawn scan pl_watch c --json scan --service $OTHER --timeout 300
wait_for 20 discovering || fail "hci0 is not discovering for the kept scan: $(cat "$(log_of scan)")"
active_instances || fail "the peripheral's advertisement is not active on hci1 (busctl)"

note "every controller removed (btvirt stopped)"
lab_stop_btvirt || fail "btvirt's controllers did not go away"
wait_for 30 sh -c "grep '\"topic\":\"central.disconnected\"' '$(log_of cevents)' | grep -q '\"device\":\"$ADDR\"'" \
    || fail "no central.disconnected for $ADDR: $(cat "$(log_of cevents)")"
py_check "one disconnect, with its reason" "$(log_of cevents)" "$ADDR" "$C_ADAPTER" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
d = [e["data"] for e in ev if e["topic"] == "central.disconnected" and e["data"]["device"] == sys.argv[2]
     and e["data"]["adapter_address"] == sys.argv[3]]
assert len(d) == 1, d
# bluetoothd (before 5.80) gives no reason: the daemon says `adapter-off` when bluetoothd
# reported the adapter powered off before the link down, `remote` (the link lost) when the
# link down came first (both orders happen, from the same removal), `removed` if the device
# object went while still connected. Never `local` or `bluetoothd-gone`.
assert d[0]["reason"] in ("adapter-off", "remote", "removed"), d
assert [e for e in ev if e["topic"] == "adapter.removed" and e["data"]["adapter"]["name"] == "hci0"], ev
PY
wait_log 20 sub "subscription ended" || fail "the subscription did not end: $(cat "$(log_of sub)")"
wait_for 20 sh -c "grep -q '\"topic\":\"adapter.removed\"' '$(log_of pevents)'" || fail "the peripheral's daemon saw no adapter.removed: $(cat "$(log_of pevents)")"
expect_rc 1 pl c read "$ADDR" $CHR
assert_contains "$RUN_OUT" "hci0" "a read without the adapter names it"
expect_rc 1 pl p advertise start --name other --service $OTHER
assert_contains "$RUN_OUT" "hci1" "an advertisement without the adapter names it"
run pl c --json status
assert_eq "$RUN_RC" 0 "the central's daemon answers status with no adapter"

note "the controllers back"
lab_start_btvirt || fail "btvirt did not come back"
lab_wait_adapters 30 || fail "bluetoothd did not list the controllers again"
lab_power_all_on || fail "the controllers could not be powered"
wait_log 30 scan "scan resumed on hci0" || fail "the kept scan did not resume: $(cat "$(log_of scan)")"
wait_for 20 discovering || fail "hci0 is not discovering after the controllers came back (busctl)"
wait_for 30 sh -c "grep -q '\"topic\":\"gatt.reregistered\"' '$(log_of pevents)'" || fail "no gatt.reregistered: $(cat "$(log_of pevents)")"
wait_for 30 sh -c "grep -q '\"topic\":\"advertise.restarted\"' '$(log_of pevents)'" || fail "no advertise.restarted: $(cat "$(log_of pevents)")"
wait_for 20 active_instances || fail "the advertisement is not active on hci1 again (busctl)"
expect_rc 0 central --adapter hci2 --service $SVC --char $CHR --read --timeout 60
assert_contains "$RUN_OUT" "READ " "an independent central reads the re-registered application"

# Still one disconnect for the device: none came later in the removal, nor with the return.
py_check "one disconnect through the removal and the return" "$(log_of cevents)" "$ADDR" "$C_ADAPTER" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
d = [e["data"] for e in ev if e["topic"] == "central.disconnected" and e["data"]["device"] == sys.argv[2]
     and e["data"]["adapter_address"] == sys.argv[3]]
assert len(d) == 1, d
PY
note "the central connects and reads again"
expect_rc 0 pl c connect "$ADDR" --timeout 60
expect_rc 0 pl c read "$ADDR" $CHR
assert_eq "$RUN_OUT" "before removal" "the value read after the controllers came back"
expect_rc 0 pl c disconnect "$ADDR"

kill -0 "$PID_P" 2>/dev/null && kill -0 "$PID_C" 2>/dev/null || fail "a daemon exited"
assert_eq "$(pl c --json status | "$PY3" -c 'import json,sys; print(json.load(sys.stdin)["pid"])')" "$PID_C" "the central's daemon pid"
note "adapters removed ok"
