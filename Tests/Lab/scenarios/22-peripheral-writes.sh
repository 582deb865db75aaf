#!/bin/bash
# timeout: 200
# Writes from an independent central (Tests/Lab/central.py): a write request and a write
# command reach peerlinkd's WriteValue in order, are stored, and are events naming the device.
# (It was pending: its event recorder ran under `pl`, which stops the CLI after PL_TIMEOUT,
# 60 s, without a word; on a slow run the writes came after that, so no event was seen.
# The recorder now runs under pl_watch.)  The central scans first, with nothing advertised;
# then the advertisement starts, so btvirt reports it to a controller whose discovery is
# already on (advertiser first, the kernel can drop the one report: README.md, "Pitfalls met").
. "$LAB_DIR/lib.sh"
require_peerlink
SVC=C4FB2349-72FE-4CA2-94D6-1F3CB16331EE
WCHR=6A3E4B29-522D-4B3B-82A9-D5E2004534FC
start_peerlinkd p hci0
cat >"$LAB_OUT/app.json" <<JSON
{"name": "lab", "services": [{"uuid": "$SVC", "characteristics": [
  {"uuid": "$WCHR", "flags": ["read", "write", "write-without-response"], "value": "initial", "max_length": 64}]}]}
JSON
spawn_watch events pl_watch p --json watch --topic gatt
expect_rc 0 pl p gatt register "$LAB_OUT/app.json"
note "writes: with response and without, seen as events naming the device, stored in order"
# bluetoothd 5.66 does not tell a local characteristic the write type (newer versions do): the
# event's type is then null, never a guess.
central_scanning w --adapter hci1 --service $SVC --char $WCHR --write "hello" --write-command "world" --restart 10 --timeout 60
expect_rc 0 pl p advertise start --name writes --service $SVC
central_result w
assert_eq "$RUN_RC" 0 "central: exit status"
assert_contains "$RUN_OUT" "WROTE command" "the central wrote both"
run pl p --json gatt list
wait_log 10 events '"value":"world"' || fail "no event for the second write: $(cat "$(log_of events)")"
stored_world() { pl p --json gatt list | grep -q '"value":"world"'; }
wait_for 5 stored_world || fail "the last write is not stored: $(pl p --json gatt list)"
py_check "write events" "$(log_of events)" <<'PY'
import json, sys
w = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
w = [e["data"] for e in w if e["topic"] == "gatt.write"]
assert [e["value"] for e in w] == ["hello", "world"], w
assert [e["type"] for e in w] in ([None, None], ["request", "command"]), w
assert all(e["device"] == "00:AA:01:01:00:01" for e in w), w
assert w[-1]["stored_hex"] == "776f726c64", w
PY

note "writes ok"
