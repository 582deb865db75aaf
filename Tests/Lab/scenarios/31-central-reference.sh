#!/bin/bash
# timeout: 300
# The reference central flow (CBCentralManager; docs/reference-flows.md section 2), from the CLI,
# against the project's own peripheral on the other controller: scan for the reference service,
# take the first match, connect, discover, read, subscribe, print each value decoded as
# UTF-8 in order, disconnect when done. Events: connected, disconnected (reason local).
. "$LAB_DIR/lib.sh"
require_peerlink
SVC=C4FB2349-72FE-4CA2-94D6-1F3CB16331EE
CHR=6A3E4B28-522D-4B3B-82A9-D5E2004534FC
NAME="Kenshin Cui's Device"
discovering() { test "$(adapter_prop hci0 Discovering)" = true; }

start_peerlinkd p hci1
start_peerlinkd c hci0
expect_rc 0 pl p gatt register "$LAB_REPO/examples/seed-peripheral.json"
spawn_watch events pl_watch c --json watch --topic central

note "scan for the reference service (scanner first), then the peripheral advertises"
spawn scan pl_watch c --json scan --service $SVC --count 1 --timeout 90
wait_for 20 discovering || fail "hci0 is not discovering: $(cat "$(log_of scan)")"
advertise_until_seen p scan '"address"' --name "$NAME" --service $SVC || fail "the reference peripheral was not found: $(cat "$(log_of scan)")"
ADDR=$(grep -m1 '^{' "$(log_of scan)" | py3 -c 'import json,sys; print(json.load(sys.stdin)["address"])')
assert_eq "$ADDR" "$(adapter_addr hci1)" "the first match is the peripheral on hci1"
assert_contains "$(cat "$(log_of scan)")" "$(echo $SVC | tr A-Z a-z)" "the discovery names the service"

note "connect, discover, read"
expect_rc 0 pl c connect "$ADDR"
assert_contains "$RUN_OUT" "connected to $ADDR" "connect"
expect_rc 0 pl c services "$ADDR"
assert_contains "$RUN_OUT" "service $(echo $SVC | tr A-Z a-z)" "the reference service"
assert_contains "$RUN_OUT" "char $(echo $CHR | tr A-Z a-z)" "the reference characteristic"
expect_rc 0 pl c read "$ADDR" $CHR
assert_eq "$RUN_OUT" "$NAME" "read decodes the value as UTF-8"

note "subscribe; five \"<name> --<date>\" notifications arrive in order, then disconnect"
rm -f "$LAB_OUT/sub.out"
spawn sub pl_watch c subscribe "$ADDR" $CHR --count 5 --timeout 120 --disconnect
SUB_PID=$SPAWN_PID
wait_log 30 sub "subscribed to" || fail "not subscribed: $(cat "$(log_of sub)")"
assert_contains "$(cat "$(log_of sub)")" "via acquire-notify" "the fast path (AcquireNotify)"
for i in 1 2 3 4 5; do
    expect_rc 0 pl p gatt notify $CHR "$NAME --$(date +%Y-%m-%dT%H:%M:%S).$i"
done
wait_for 30 sh -c "! kill -0 $SUB_PID 2>/dev/null" || fail "subscribe did not end: $(cat "$(log_of sub)")"
wait "$SUB_PID"; rc=$?
assert_eq "$rc" 0 "subscribe exit status"
py_check "values in order, decoded" "$(log_of sub)" "$NAME" <<'PY'
import sys
name = sys.argv[2]
vals = [l.rstrip("\n") for l in open(sys.argv[1]) if l.startswith(name)]
assert len(vals) == 5, vals
for i, v in enumerate(vals, 1):
    assert v.startswith(name + " --") and v.endswith(f".{i}"), (i, v)
    assert len(v.encode()) > 20, v
PY
wait_log 15 events '"central.disconnected"' || fail "no disconnect event: $(cat "$(log_of events)")"
py_check "connection events" "$(log_of events)" "$ADDR" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
mine = [e for e in ev if e["data"].get("device") == sys.argv[2]]
c = [e["data"] for e in mine if e["topic"] == "central.connected"]
assert len(c) == 1 and c[0]["adapter"] == "hci0", ev
d = [e["data"] for e in mine if e["topic"] == "central.disconnected"]
assert len(d) == 1 and d[0]["reason"] == "local" and d[0]["will_reconnect"] is False, ev
PY
assert_eq "$(bluez_prop /org/bluez/hci0/dev_${ADDR//:/_} org.bluez.Device1 Connected)" false "disconnected (busctl)"
note "pair (both daemons' agents answer just-works), then forget"
expect_rc 0 pl c pair "$ADDR" --timeout 60
assert_contains "$RUN_OUT" "paired with $ADDR" "pair"
assert_eq "$(bluez_prop /org/bluez/hci0/dev_${ADDR//:/_} org.bluez.Device1 Paired)" true "Paired (busctl)"
expect_rc 0 pl c forget "$ADDR"
wait_for 10 sh -c "! busctl tree org.bluez 2>/dev/null | grep -q hci0/dev_${ADDR//:/_}" || fail "device still there after forget"
note "reference central flow ok"
