#!/bin/bash
# Adapters through PeerLink: `adapter list` (text and JSON), `status` (BlueZ
# available, each daemon's default adapter), power off/on with the watch
# stream's adapter.powered events, and the error exits.  Every state change
# is also checked independently through busctl.
# timeout: 120
. "$LAB_DIR/lib.sh"

HCI0=00:AA:01:00:00:00
HCI1=00:AA:01:01:00:01
HCI2=00:AA:01:02:00:02

start_peerlinkd a hci0
start_peerlinkd b hci1

note "adapter list (text) shows every controller"
expect_rc 0 pl a adapter list
for addr in $HCI0 $HCI1 $HCI2; do assert_contains "$RUN_OUT" "$addr" "pl a adapter list"; done

note "adapter list (JSON): addresses, powered"
pl a --json adapter list >"$LAB_OUT/adapters.json" || fail "pl a --json adapter list exited $?"
cat "$LAB_OUT/adapters.json"
# Accepted shapes: a list of adapter objects, or {"adapters": [...]}; each
# object has "address" and "powered" (a JSON boolean).
py_check "pl a --json adapter list" "$LAB_OUT/adapters.json" $HCI0 $HCI1 $HCI2 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ads = d if isinstance(d, list) else d.get("adapters") if isinstance(d, dict) else None
assert isinstance(ads, list), f"expected a list of adapters or {{'adapters': [...]}}, got {d!r}"
by = {str(a.get("address", "")).upper(): a for a in ads if isinstance(a, dict)}
for want in sys.argv[2:]:
    assert want in by, f"{want} missing; adapters: {sorted(by)}"
    assert by[want].get("powered") is True, f"{want}: powered={by[want].get('powered')!r}, want true"
PY

# status: BlueZ available, and the daemon's default adapter (docs/control-protocol.md:
# "bluez": {"available": bool}, "default_adapter": "hciN", "adapters": [...]).
check_status() {
    local name=$1 hci=$2 addr=$3
    pl "$name" --json status >"$LAB_OUT/status-$name.json" || fail "pl $name --json status exited $?"
    cat "$LAB_OUT/status-$name.json"
    py_check "pl $name --json status" "$LAB_OUT/status-$name.json" "$hci" "$addr" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
hci, addr = sys.argv[2], sys.argv[3]
assert isinstance(d, dict), f"expected an object, got {d!r}"
assert d["bluez"]["available"] is True, f"BlueZ not reported available: {d['bluez']!r}"
assert d["bus"]["connected"] is True, f"bus not connected: {d['bus']!r}"
assert d["default_adapter"] == hci, f"default adapter {d['default_adapter']!r}, want {hci}"
defaults = [a for a in d["adapters"] if a["default"]]
assert [a["address"] for a in defaults] == [addr], f"adapters marked default: {defaults!r}, want {addr}"
PY
}
note "status: BlueZ available; default adapter hci0 for a, hci1 for b"
check_status a hci0 $HCI0
check_status b hci1 $HCI1

note "power off/on hci0 while watching adapter events"
watch_adapter() {
    pl a --json watch --topic adapter.powered --count 2 --timeout 20 "$@" >"$LAB_OUT/watch.jsonl"
}
# Returns once the watcher has subscribed (its --ready-file).
spawn_watch watch watch_adapter
watch_pid=$SPAWN_PID

expect_rc 0 pl a adapter power off --adapter hci0
powered_is() { [ "$(adapter_powered "$1")" = "$2" ]; }
wait_for 5 powered_is hci0 false || fail "busctl: hci0 still powered after 'adapter power off'"
assert_eq "$(adapter_powered hci1)" true "hci1 untouched by powering hci0 off"
expect_rc 0 pl a adapter power on --adapter hci0
wait_for 5 powered_is hci0 true || fail "busctl: hci0 not powered after 'adapter power on'"

wait_for 25 sh -c "! kill -0 $watch_pid" || fail "watch --count 2 --timeout 20 still running after 25 s"
wait "$watch_pid"; rc=$?
cat "$LAB_OUT/watch.jsonl"
assert_eq "$rc" 0 "watch exit status (stderr: $(cat "$(log_of watch)"))"
# Each line is one event's params: {"topic", "time", "data": {"adapter": Adapter, "powered"}}.
py_check "watch --topic adapter.powered events" "$LAB_OUT/watch.jsonl" $HCI0 <<'PY'
import json, sys
addr = sys.argv[2]
seen = []
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    ev = json.loads(line)
    assert ev["topic"] == "adapter.powered", f"unexpected topic in {ev!r}"
    assert ev["time"].endswith("Z"), f"time not UTC: {ev['time']!r}"
    assert ev["data"]["adapter"]["address"] == addr, f"event for another adapter: {ev!r}"
    assert ev["data"]["adapter"]["powered"] == ev["data"]["powered"], f"inconsistent event {ev!r}"
    seen.append(ev["data"]["powered"])
assert seen == [False, True], f"adapter.powered events for {addr}: powered={seen}, want [False, True]"
PY

note "errors: unknown adapter exits 1 naming it; no daemon exits 3"
expect_rc 1 pl a adapter power on --adapter hci9
assert_contains "$RUN_OUT" "hci9" "error for an unknown adapter"
expect_rc 3 "$PEERLINK_BIN/peerlink" --socket /nonexistent status
note "adapters ok"
